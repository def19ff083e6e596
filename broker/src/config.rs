//! Broker configuration: a `server.properties`-style file with Kafka's property
//! names, overridden by `--override key=value` arguments. Bad values stop
//! start-up with a message naming the key. Keys Strand has no use for are
//! kept aside and logged at start-up, as Kafka does (so Kafka's own
//! configuration files start Strand), except unknown keys of Strand's own
//! `strand.` namespace, which can only be typos and are refused.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use strand_metadata::configs::{validate_topic_config, TOPIC_CONFIGS};
use strand_types::BrokerId;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("unknown configuration key '{0}'")]
    UnknownKey(String),
    #[error("invalid value '{value}' for configuration '{key}': {reason}")]
    InvalidValue {
        key: String,
        value: String,
        reason: String,
    },
    #[error("cannot read {path}: {reason}")]
    Unreadable { path: String, reason: String },
    #[error("malformed line {line} in {path}: '{text}' (expected key=value)")]
    Malformed {
        path: String,
        line: usize,
        text: String,
    },
    #[error("malformed override '{0}' (expected key=value)")]
    MalformedOverride(String),
}

/// A listener: name, bind host and port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
}

impl Listener {
    /// The address to bind: an IP literal (IPv6 without its brackets, as
    /// `parse_listeners` leaves it), or a host name resolved now (its first
    /// address, as Kafka binds); an empty host binds every interface.
    pub fn bind_addr(&self) -> Result<SocketAddr, String> {
        use std::net::ToSocketAddrs;
        let host = if self.host.is_empty() {
            "0.0.0.0"
        } else {
            &self.host
        };
        (host, self.port)
            .to_socket_addrs()
            .map_err(|e| format!("cannot resolve {host}: {e}"))?
            .next()
            .ok_or_else(|| format!("{host} resolves to no address"))
    }
}

#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    /// Each listener's security protocol.
    pub listener_protocols: BTreeMap<String, SecurityProtocol>,
    /// Settings for one listener (`listener.name.<listener>.<key>`), as given.
    pub listener_props: BTreeMap<String, String>,
    pub listeners: Vec<Listener>,
    pub advertised_listeners: Vec<Listener>,
    pub log_dirs: Vec<PathBuf>,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics_enable: bool,
    pub socket_request_max_bytes: usize,
    /// max.connections, max.connections.per.ip (client listener).
    pub connection_limits: crate::connection_quotas::ConnectionLimits,
    /// connections.max.idle.ms; negative: never closed for idleness.
    pub connections_max_idle_ms: i64,
    /// queued.max.request.bytes; <= 0: requests draw from no pool.
    pub queued_max_request_bytes: i64,
    pub log_retention_check_interval_ms: i64,
    /// `log.cleaner.*`: the log cleaner's threads and their memory.
    pub log_cleaner: LogCleanerSettings,
    pub producer_id_expiration_ms: i64,
    pub broker_rack: Option<String>,
    pub process_roles: Vec<String>,
    /// controller.quorum.voters; empty on a self-formatting single node.
    pub quorum_voters: Vec<Voter>,
    pub controller_listener_names: Vec<String>,
    pub election_timeout_ms: u64,
    pub broker_session_timeout_ms: i64,
    /// `auto.leader.rebalance.enable`.
    pub auto_leader_rebalance_enable: bool,
    /// `leader.imbalance.check.interval.seconds`, in milliseconds.
    pub leader_imbalance_check_interval_ms: u64,
    /// `unclean.leader.election.interval.ms`.
    pub unclean_leader_election_interval_ms: u64,
    pub broker_heartbeat_interval_ms: u64,
    /// replica.lag.time.max.ms: a follower not caught up for this long leaves the ISR.
    pub replica_lag_time_max_ms: i64,
    /// replica.fetch.*: how followers fetch from leaders.
    pub replica_fetch_wait_max_ms: i32,
    pub replica_fetch_min_bytes: i32,
    pub replica_fetch_max_bytes: i32,
    pub replica_fetch_response_max_bytes: i32,
    pub replica_fetch_backoff_ms: u64,
    pub replica_high_watermark_checkpoint_interval_ms: i64,
    /// offsets.topic.*, offsets.*, group.*: the group coordinator.
    pub offsets_topic_num_partitions: i32,
    pub offsets_topic_replication_factor: i16,
    pub offsets_topic_segment_bytes: i64,
    pub offsets_commit_timeout_ms: i64,
    pub offsets_retention_ms: i64,
    pub offsets_retention_check_interval_ms: i64,
    pub offset_metadata_max_bytes: usize,
    pub group_initial_rebalance_delay_ms: i64,
    pub group_min_session_timeout_ms: i64,
    pub group_max_session_timeout_ms: i64,
    pub group_max_size: usize,
    /// transaction.*: the transaction coordinator.
    pub transaction_state_log_num_partitions: i32,
    pub transaction_state_log_replication_factor: i16,
    pub transaction_state_log_min_isr: i32,
    pub transaction_state_log_segment_bytes: i64,
    pub transaction_max_timeout_ms: i32,
    pub transactional_id_expiration_ms: i64,
    pub transaction_remove_expired_transaction_cleanup_interval_ms: u64,
    pub transaction_abort_timed_out_transaction_cleanup_interval_ms: u64,
    /// KIP-890 part 1: verify a transactional batch's partition with the coordinator.
    pub transaction_partition_verification_enable: bool,
    /// KIP-890 part 2: how a partition leader retries adding a partition
    /// to a transaction while the coordinator answers
    /// CONCURRENT_TRANSACTIONS (the previous transaction still completing),
    /// before it hands the error to the client
    /// (`add.partitions.to.txn.retry.backoff.ms` and `.max.ms`).
    pub add_partitions_to_txn_retry_backoff_ms: u64,
    pub add_partitions_to_txn_retry_backoff_max_ms: u64,
    /// strand.write.lease.*: leaders append only under a lease the
    /// controller grants in heartbeat answers (`strand_replication::lease`).
    pub write_lease_enable: bool,
    pub write_lease_ms: u64,
    pub write_lease_safety_margin_ms: u64,
    /// Every key set in the file or on the command line, as given: the
    /// "static broker config" that DescribeConfigs reports and that topic
    /// configs inherit through their broker synonyms.
    pub static_props: BTreeMap<String, String>,
    /// Keys given that Strand has no use for (logged at start-up).
    pub unused_keys: Vec<String>,
}

impl BrokerConfig {
    /// The settings given that Strand accepts but does not act on
    /// ([`ACCEPTED_NOT_ACTED_ON`]), each with why.
    pub fn inert_settings(&self) -> Vec<(&'static str, &'static str)> {
        ACCEPTED_NOT_ACTED_ON
            .iter()
            .filter(|(k, _)| self.static_props.contains_key(*k))
            .copied()
            .collect()
    }
}

/// The `authorizer.class.name` values that turn authorization on: Kafka's
/// KRaft authorizer, and its ZooKeeper-era one (same ACL semantics).
pub const AUTHORIZERS: [&str; 2] = [
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "kafka.security.authorizer.AclAuthorizer",
];

/// The prefix of a setting for one listener: `listener.name.<listener>.`
/// (the listener's name in lower case) before the setting's name.
pub const LISTENER_PREFIX: &str = "listener.name.";

/// Broker properties that are not topic-config synonyms, with defaults.
const BROKER_KEYS: &[(&str, &str)] = &[
    ("node.id", "1"),
    ("broker.id", "1"),
    ("process.roles", "broker,controller"),
    ("listeners", "PLAINTEXT://127.0.0.1:9092"),
    ("advertised.listeners", ""),
    (
        "listener.security.protocol.map",
        "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
    ),
    ("controller.listener.names", "CONTROLLER"),
    ("inter.broker.listener.name", "PLAINTEXT"),
    ("log.dirs", "./data"),
    ("log.dir", "./data"),
    ("num.partitions", "1"),
    ("default.replication.factor", "1"),
    ("auto.create.topics.enable", "true"),
    ("socket.request.max.bytes", "104857600"),
    ("max.connections", "2147483647"),
    ("max.connections.per.ip", "2147483647"),
    ("connections.max.idle.ms", "600000"),
    ("queued.max.request.bytes", "-1"),
    ("log.retention.check.interval.ms", "300000"),
    // The log cleaner (Kafka's defaults; the per-topic ones are topic-config
    // synonyms: log.cleaner.min.cleanable.ratio, .delete.retention.ms,
    // .min.compaction.lag.ms, .max.compaction.lag.ms).
    ("log.cleaner.enable", "true"),
    ("log.cleaner.threads", "1"),
    ("log.cleaner.backoff.ms", "15000"),
    ("log.cleaner.dedupe.buffer.size", "134217728"),
    ("log.cleaner.io.buffer.load.factor", "0.9"),
    ("log.cleaner.io.buffer.size", "524288"),
    (
        "log.cleaner.io.max.bytes.per.second",
        "1.7976931348623157E308",
    ),
    ("log.retention.hours", "168"),
    ("log.retention.minutes", ""),
    ("log.roll.hours", "168"),
    ("producer.id.expiration.ms", "86400000"),
    ("broker.rack", ""),
    ("offsets.topic.replication.factor", "3"),
    ("transaction.state.log.replication.factor", "3"),
    ("transaction.state.log.min.isr", "2"),
    ("group.initial.rebalance.delay.ms", "3000"),
    ("num.network.threads", "3"),
    ("num.io.threads", "8"),
    ("delete.topic.enable", "true"),
    ("controller.quorum.voters", ""),
    ("controller.quorum.bootstrap.servers", ""),
    ("controller.quorum.election.timeout.ms", "1000"),
    ("broker.session.timeout.ms", "9000"),
    ("broker.heartbeat.interval.ms", "2000"),
    // The active controller moves leaderships back to preferred replicas.
    ("auto.leader.rebalance.enable", "true"),
    ("leader.imbalance.check.interval.seconds", "300"),
    // How often the active controller elects unclean leaders for
    // leaderless partitions whose topic allows it.
    ("unclean.leader.election.interval.ms", "300000"),
    ("metadata.log.dir", ""),
    ("replica.lag.time.max.ms", "30000"),
    ("replica.fetch.wait.max.ms", "500"),
    ("replica.fetch.min.bytes", "1"),
    ("replica.fetch.max.bytes", "1048576"),
    ("replica.fetch.response.max.bytes", "10485760"),
    ("replica.fetch.backoff.ms", "1000"),
    ("replica.high.watermark.checkpoint.interval.ms", "5000"),
    ("offsets.topic.num.partitions", "50"),
    ("offsets.topic.segment.bytes", "104857600"),
    ("offsets.commit.timeout.ms", "5000"),
    ("offsets.retention.minutes", "10080"),
    ("offsets.retention.check.interval.ms", "600000"),
    ("offset.metadata.max.bytes", "4096"),
    ("group.min.session.timeout.ms", "6000"),
    ("group.max.session.timeout.ms", "1800000"),
    ("group.max.size", "2147483647"),
    ("transaction.state.log.num.partitions", "50"),
    ("transaction.partition.verification.enable", "true"),
    ("add.partitions.to.txn.retry.backoff.ms", "20"),
    ("add.partitions.to.txn.retry.backoff.max.ms", "100"),
    ("transaction.state.log.segment.bytes", "104857600"),
    ("transaction.max.timeout.ms", "900000"),
    ("transactional.id.expiration.ms", "604800000"),
    (
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "10000",
    ),
    (
        "transaction.remove.expired.transaction.cleanup.interval.ms",
        "3600000",
    ),
    // Security (README, "Security"). Per listener, Kafka's prefix
    // `listener.name.<listener>.` overrides each (see `listener_setting`).
    ("ssl.keystore.type", "JKS"),
    ("ssl.keystore.location", ""),
    ("ssl.keystore.password", ""),
    ("ssl.keystore.key", ""),
    ("ssl.keystore.certificate.chain", ""),
    ("ssl.key.password", ""),
    ("ssl.truststore.type", "JKS"),
    ("ssl.truststore.location", ""),
    ("ssl.truststore.password", ""),
    ("ssl.truststore.certificates", ""),
    ("ssl.client.auth", "none"),
    ("ssl.principal.mapping.rules", "DEFAULT"),
    ("ssl.enabled.protocols", "TLSv1.2,TLSv1.3"),
    ("ssl.protocol", "TLSv1.3"),
    ("ssl.endpoint.identification.algorithm", "https"),
    ("sasl.enabled.mechanisms", "GSSAPI"),
    ("sasl.mechanism.inter.broker.protocol", "GSSAPI"),
    ("sasl.mechanism.controller.protocol", "GSSAPI"),
    ("connections.max.reauth.ms", "0"),
    // Authorization (StandardAuthorizer semantics; empty: none, everything
    // is allowed, as in Kafka).
    ("authorizer.class.name", ""),
    ("super.users", ""),
    ("allow.everyone.if.no.acl.found", "false"),
    // Client quotas: the rate is measured over this many windows of this size.
    ("quota.window.num", "11"),
    ("quota.window.size.seconds", "1"),
    // Replication throttles: the same, for the throttled replicas' bytes.
    ("replication.quota.window.num", "11"),
    ("replication.quota.window.size.seconds", "1"),
    // Strand's own (README, "Write leases"): not Kafka settings.
    ("strand.write.lease.enable", DEFAULT_WRITE_LEASE_ENABLE),
    // Empty: derived from broker.session.timeout.ms (two thirds of it), and
    // the margin from the lease (a twelfth of it): 6000 and 500 by default.
    ("strand.write.lease.ms", ""),
    ("strand.write.lease.safety.margin.ms", ""),
    // Strand's own: the HTTP listener for /metrics, /health/live and
    // /health/ready (host:port; empty: none). It serves nothing else.
    ("strand.http.listener", ""),
    // Strand's own: the log's format (`text`, or `json`: one JSON object
    // per line) and its filter (tracing's directives, e.g. `info` or
    // `info,strand_broker::replica_manager=debug`; RUST_LOG wins when set).
    ("strand.log.format", "text"),
    ("strand.log.level", ""),
];

/// Kafka settings Strand accepts (they are in Kafka's own files) but does
/// not act on, and why; each one given is named in a warning at start-up.
pub const ACCEPTED_NOT_ACTED_ON: &[(&str, &str)] = &[
    (
        "metadata.log.dir",
        "the metadata log is kept in the first of log.dirs",
    ),
    (
        "num.io.threads",
        "requests run on the async runtime's workers, one per core",
    ),
    (
        "num.network.threads",
        "connections are served by the async runtime's workers, one per core",
    ),
];

/// Whether leaders need a write lease unless configured otherwise: on,
/// since leases cost no throughput this machine can resolve (BENCHMARKS.md,
/// "Write leases").
const DEFAULT_WRITE_LEASE_ENABLE: &str = "true";

const ALWAYS_POSITIVE_INT: &[&str] = &[
    "offsets.topic.num.partitions",
    "offsets.topic.segment.bytes",
    "offsets.commit.timeout.ms",
    "offsets.retention.minutes",
    "offsets.retention.check.interval.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
    "offset.metadata.max.bytes",
    "num.partitions",
    "default.replication.factor",
    "socket.request.max.bytes",
    "num.network.threads",
    "num.io.threads",
    "offsets.topic.replication.factor",
    "transaction.state.log.replication.factor",
    "transaction.state.log.min.isr",
    "transaction.state.log.num.partitions",
    "transaction.state.log.segment.bytes",
    "transaction.max.timeout.ms",
    "transactional.id.expiration.ms",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms",
    "transaction.remove.expired.transaction.cleanup.interval.ms",
];

fn invalid(key: &str, value: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.into(),
        value: value.into(),
        reason: reason.into(),
    }
}

/// Whether Strand knows `key` (a broker setting or a topic config's broker
/// synonym); an unknown key of the `strand.` namespace is an error.
fn is_known_key(key: &str) -> Result<bool, ConfigError> {
    let known = BROKER_KEYS.iter().any(|(k, _)| *k == key)
        || TOPIC_CONFIGS.iter().any(|d| d.broker_synonym == Some(key));
    if !known && key.starts_with("strand.") {
        return Err(ConfigError::UnknownKey(key.into()));
    }
    Ok(known)
}

/// Checks one known key and value; topic-config synonyms use the topic
/// validator.
fn validate_key(key: &str, value: &str) -> Result<(), ConfigError> {
    if let Some(d) = TOPIC_CONFIGS.iter().find(|d| d.broker_synonym == Some(key)) {
        return validate_topic_config(d.name, value).map_err(|r| invalid(key, value, r));
    }
    let int = |min: i64| -> Result<(), ConfigError> {
        let v: i64 = value
            .trim()
            .parse()
            .map_err(|_| invalid(key, value, "not an integer"))?;
        if v < min {
            return Err(invalid(key, value, format!("must be at least {min}")));
        }
        Ok(())
    };
    match key {
        "auto.create.topics.enable"
        | "delete.topic.enable"
        | "transaction.partition.verification.enable"
        | "strand.write.lease.enable" => match value {
            "true" | "false" => Ok(()),
            _ => Err(invalid(key, value, "expected true or false")),
        },
        "listeners" | "advertised.listeners" => parse_listeners(key, value).map(|_| ()),
        "process.roles" => {
            for r in value.split(',').map(str::trim) {
                if r != "broker" && r != "controller" {
                    return Err(invalid(
                        key,
                        value,
                        "roles are 'broker' and/or 'controller'",
                    ));
                }
            }
            Ok(())
        }
        "node.id" | "broker.id" => int(0),
        "controller.quorum.voters" => parse_voters(value)
            .map(|_| ())
            .map_err(|r| invalid(key, value, r)),
        "controller.quorum.election.timeout.ms"
        | "broker.session.timeout.ms"
        | "broker.heartbeat.interval.ms"
        | "replica.lag.time.max.ms"
        | "replica.fetch.min.bytes"
        | "replica.fetch.max.bytes"
        | "replica.fetch.response.max.bytes"
        | "replica.high.watermark.checkpoint.interval.ms"
        | "leader.imbalance.check.interval.seconds" => int(1),
        "auto.leader.rebalance.enable" => match value {
            "true" | "false" => Ok(()),
            _ => Err(invalid(key, value, "expected true or false")),
        },
        "replica.fetch.wait.max.ms" | "replica.fetch.backoff.ms" => int(0),
        "add.partitions.to.txn.retry.backoff.ms" | "add.partitions.to.txn.retry.backoff.max.ms" => {
            int(0)
        }
        "strand.write.lease.ms" | "strand.write.lease.safety.margin.ms" => {
            if value.is_empty() {
                Ok(())
            } else {
                int(if key == "strand.write.lease.ms" { 1 } else { 0 })
            }
        }
        "strand.log.format" => match value {
            "text" | "json" => Ok(()),
            _ => Err(invalid(key, value, "expected text or json")),
        },
        "strand.http.listener" => {
            if value.is_empty() || value.parse::<std::net::SocketAddr>().is_ok() {
                Ok(())
            } else {
                Err(invalid(
                    key,
                    value,
                    "expected host:port with an IP address, e.g. 127.0.0.1:9464",
                ))
            }
        }
        "max.connections" | "max.connections.per.ip" => int(0),
        "connections.max.reauth.ms" => int(0),
        "quota.window.num"
        | "quota.window.size.seconds"
        | "replication.quota.window.num"
        | "replication.quota.window.size.seconds" => int(1),
        "allow.everyone.if.no.acl.found" => match value {
            "true" | "false" => Ok(()),
            _ => Err(invalid(key, value, "expected true or false")),
        },
        "authorizer.class.name" => match value.trim() {
            "" => Ok(()),
            v if AUTHORIZERS.contains(&v) => Ok(()),
            _ => Err(invalid(
                key,
                value,
                format!("Strand's authorizer has Kafka's StandardAuthorizer semantics: set one of {AUTHORIZERS:?} or leave it empty"),
            )),
        },
        "ssl.client.auth" => match value {
            "none" | "requested" | "required" => Ok(()),
            _ => Err(invalid(key, value, "expected none, requested or required")),
        },
        "connections.max.idle.ms" | "queued.max.request.bytes" => int(i64::MIN),
        "log.retention.check.interval.ms" => int(1),
        "log.cleaner.threads" | "log.cleaner.backoff.ms" => int(0),
        "log.cleaner.dedupe.buffer.size" | "log.cleaner.io.buffer.size" => int(0),
        "log.cleaner.enable" => match value {
            "true" | "false" => Ok(()),
            _ => Err(invalid(key, value, "expected true or false")),
        },
        "log.cleaner.io.buffer.load.factor" | "log.cleaner.io.max.bytes.per.second" => {
            match value.trim().parse::<f64>() {
                Ok(v) if v > 0.0 => Ok(()),
                _ => Err(invalid(key, value, "expected a positive number")),
            }
        }
        "producer.id.expiration.ms" | "log.retention.hours" | "log.roll.hours" => int(1),
        "log.retention.minutes" | "group.initial.rebalance.delay.ms" => {
            if value.is_empty() {
                Ok(())
            } else {
                int(0)
            }
        }
        k if ALWAYS_POSITIVE_INT.contains(&k) => int(1),
        _ => Ok(()),
    }
}

/// Kafka's PASSWORD settings (and the private key given inline): never
/// described or logged with their values.
pub fn is_sensitive(key: &str) -> bool {
    key.ends_with(".password")
        || key.ends_with("sasl.jaas.config")
        || key.ends_with("ssl.keystore.key")
}

/// `log.cleaner.*`, as Kafka names and defaults them.
#[derive(Debug, Clone, PartialEq)]
pub struct LogCleanerSettings {
    pub enable: bool,
    /// Threads, each with `dedupe_buffer_size / threads` of offset map.
    pub threads: usize,
    /// How long a thread with nothing to clean waits.
    pub backoff_ms: u64,
    pub dedupe_buffer_size: usize,
    pub load_factor: f64,
    pub io_max_bytes_per_second: f64,
}

impl LogCleanerSettings {
    /// From each `log.cleaner.*` setting's value (Kafka's defaults where
    /// one does not read).
    pub fn from_settings(get: impl Fn(&str) -> String) -> LogCleanerSettings {
        LogCleanerSettings {
            enable: get("log.cleaner.enable") == "true",
            threads: get("log.cleaner.threads").parse().unwrap_or(1),
            backoff_ms: get("log.cleaner.backoff.ms").parse().unwrap_or(15000),
            dedupe_buffer_size: get("log.cleaner.dedupe.buffer.size")
                .parse()
                .unwrap_or(134217728),
            load_factor: get("log.cleaner.io.buffer.load.factor")
                .trim()
                .parse()
                .unwrap_or(0.9),
            io_max_bytes_per_second: get("log.cleaner.io.max.bytes.per.second")
                .trim()
                .parse()
                .unwrap_or(f64::MAX),
        }
    }

    /// The settings under this broker's dynamic configs, then the
    /// cluster-wide ones, then server.properties (Kafka's reconfigurable
    /// cleaner settings; `log.cleaner.enable` is read at start-up only).
    pub fn with_layers(
        &self,
        layers: &strand_metadata::configs::BrokerLayers,
    ) -> LogCleanerSettings {
        LogCleanerSettings {
            enable: self.enable,
            ..LogCleanerSettings::from_settings(|k| {
                layers
                    .get(k)
                    .map(|(v, _)| v.to_string())
                    .or_else(|| BrokerConfig::default_of(k).map(str::to_string))
                    .unwrap_or_default()
            })
        }
    }
}

/// A controller quorum voter: node id and controller listener address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Voter {
    pub id: i32,
    pub addr: String,
}

/// Parses `id@host:port,...` (controller.quorum.voters, --initial-controllers).
pub fn parse_voters(value: &str) -> Result<Vec<Voter>, String> {
    let mut out: Vec<Voter> = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('@')
            .ok_or_else(|| format!("'{item}' is not id@host:port"))?;
        let id: i32 = id.parse().map_err(|_| format!("'{id}' is not a node id"))?;
        let (_, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| format!("'{addr}' is not host:port"))?;
        port.parse::<u16>()
            .map_err(|_| format!("bad port in '{addr}'"))?;
        if id < 0 || out.iter().any(|v| v.id == id) {
            return Err(format!("node id {id} is negative or repeated"));
        }
        out.push(Voter {
            id,
            addr: addr.to_string(),
        });
    }
    Ok(out)
}

/// The security protocols Kafka names.
const SECURITY_PROTOCOLS: [&str; 4] = ["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];

/// A listener's security protocol (`listener.security.protocol.map`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub fn name(self) -> &'static str {
        SECURITY_PROTOCOLS[self as usize]
    }

    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }

    pub fn uses_sasl(self) -> bool {
        matches!(
            self,
            SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
        )
    }
}

/// A listener's security protocol: from `listener.security.protocol.map`,
/// or its name when that is a protocol, as Kafka resolves it.
fn security_protocol(listener: &str, protocol_map: &str) -> Result<SecurityProtocol, ConfigError> {
    let mapped = protocol_map
        .split(',')
        .filter_map(|pair| pair.trim().split_once(':'))
        .find(|(name, _)| name.trim() == listener)
        .map(|(_, protocol)| protocol.trim().to_string());
    let protocol = match mapped {
        Some(p) => p,
        None if SECURITY_PROTOCOLS.contains(&listener) => listener.to_string(),
        None => {
            return Err(invalid(
                "listener.security.protocol.map",
                protocol_map,
                format!("no security protocol for listener {listener}"),
            ))
        }
    };
    match protocol.as_str() {
        "PLAINTEXT" => Ok(SecurityProtocol::Plaintext),
        "SSL" => Ok(SecurityProtocol::Ssl),
        "SASL_PLAINTEXT" => Ok(SecurityProtocol::SaslPlaintext),
        "SASL_SSL" => Ok(SecurityProtocol::SaslSsl),
        p => Err(invalid(
            "listener.security.protocol.map",
            protocol_map,
            format!("unknown security protocol {p} for listener {listener}"),
        )),
    }
}

/// This machine's canonical host name, as Java's
/// `InetAddress.getLocalHost().getCanonicalHostName()` gives it: the host
/// name, resolved to its canonical name where the resolver knows one.
fn canonical_host_name() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: `buf` is writable for its length; the name is NUL-terminated
    // within it on success (the last byte stays 0).
    let named = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len() - 1) } == 0;
    let host = if named {
        let end = buf.iter().position(|b| *b == 0).unwrap_or(0);
        String::from_utf8_lossy(&buf[..end]).into_owned()
    } else {
        String::new()
    };
    if host.is_empty() {
        return "localhost".into();
    }
    let Ok(c_host) = std::ffi::CString::new(host.clone()) else {
        return host;
    };
    // SAFETY: `hints` is zeroed but for its flags, as getaddrinfo allows;
    // `res` is freed once its canonical name is copied out.
    unsafe {
        let mut hints: libc::addrinfo = std::mem::zeroed();
        hints.ai_flags = libc::AI_CANONNAME;
        let mut res: *mut libc::addrinfo = std::ptr::null_mut();
        if libc::getaddrinfo(c_host.as_ptr(), std::ptr::null(), &hints, &mut res) != 0
            || res.is_null()
        {
            return host;
        }
        let name = (*res).ai_canonname;
        let canonical = if name.is_null() {
            host
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        };
        libc::freeaddrinfo(res);
        canonical
    }
}

fn parse_listeners(key: &str, value: &str) -> Result<Vec<Listener>, ConfigError> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (name, rest) = item
            .split_once("://")
            .ok_or_else(|| invalid(key, value, "expected NAME://host:port"))?;
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| invalid(key, value, "expected NAME://host:port"))?;
        let port: u16 = port
            .parse()
            .map_err(|_| invalid(key, value, format!("bad port '{port}'")))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        out.push(Listener {
            name: name.to_string(),
            host,
            port,
        });
    }
    Ok(out)
}

/// Reads a properties file as Java's `Properties.load(InputStream)` does,
/// and so as Kafka reads server.properties (the `java-properties` crate):
/// ISO-8859-1, `\` line continuations, escapes and `\uXXXX`, `=`, `:` or
/// whitespace between key and value, `#` and `!` comments, a key alone
/// with an empty value. Values are trimmed, as Kafka's ConfigDef trims
/// them (Java's `String.trim`: every char up to U+0020); keys are as
/// Java reads them. In file order;
/// a later key wins where they are collected.
pub fn parse_properties(path: &str, bytes: &[u8]) -> Result<Vec<(String, String)>, ConfigError> {
    let mut out = Vec::new();
    java_properties::PropertiesIter::new(bytes)
        .read_into(|k, v| {
            let java_trim = |s: &str| s.trim_matches(|c: char| c <= ' ').to_string();
            out.push((k, java_trim(&v)));
        })
        .map_err(|e| ConfigError::Malformed {
            path: path.into(),
            line: e.line_number().unwrap_or(0),
            text: e.to_string(),
        })?;
    Ok(out)
}

impl BrokerConfig {
    /// The configuration of `file` (a server.properties, if any) with
    /// `overrides` (`key=value`, each winning over the file) applied.
    pub fn load(file: Option<&Path>, overrides: &[String]) -> Result<BrokerConfig, ConfigError> {
        let mut pairs = Vec::new();
        if let Some(path) = file {
            let name = path.display().to_string();
            let bytes = std::fs::read(path).map_err(|e| ConfigError::Unreadable {
                path: name.clone(),
                reason: e.to_string(),
            })?;
            pairs = parse_properties(&name, &bytes)?;
        }
        for kv in overrides {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| ConfigError::MalformedOverride(kv.clone()))?;
            pairs.push((k.trim().to_string(), v.trim().to_string()));
        }
        Self::from_pairs(pairs)
    }

    pub fn from_pairs(pairs: Vec<(String, String)>) -> Result<BrokerConfig, ConfigError> {
        let mut props = BTreeMap::new();
        let mut unused_keys = Vec::new();
        let mut listener_props = BTreeMap::new();
        for (k, v) in pairs {
            if k.starts_with(LISTENER_PREFIX) {
                // Checked where the listener's security is built.
                listener_props.insert(k, v);
                continue;
            }
            if !is_known_key(&k)? {
                if !unused_keys.contains(&k) {
                    unused_keys.push(k);
                }
                continue;
            }
            validate_key(&k, &v)?;
            props.insert(k, v);
        }
        let get = |k: &str| -> String {
            props.get(k).cloned().unwrap_or_else(|| {
                BROKER_KEYS
                    .iter()
                    .find(|(key, _)| *key == k)
                    .map(|(_, d)| d.to_string())
                    .unwrap_or_default()
            })
        };
        // Already validated, so these parses cannot fail; fall back to defaults regardless.
        let node_id = props
            .get("node.id")
            .or(props.get("broker.id"))
            .and_then(|v| v.parse().ok())
            .unwrap_or(1);
        let listeners = parse_listeners("listeners", &get("listeners"))?;
        if listeners.is_empty() {
            return Err(invalid("listeners", &get("listeners"), "no listener given"));
        }
        let socket_request_max_bytes: usize =
            get("socket.request.max.bytes").parse().unwrap_or(104857600);
        let queued_max_request_bytes: i64 = get("queued.max.request.bytes").parse().unwrap_or(-1);
        // As Kafka requires: a pool smaller than the largest request would
        // hold that request forever.
        if queued_max_request_bytes > 0
            && (queued_max_request_bytes as u64) < socket_request_max_bytes as u64
        {
            return Err(invalid(
                "queued.max.request.bytes",
                &queued_max_request_bytes.to_string(),
                "must be at least socket.request.max.bytes (or -1 for no limit)",
            ));
        }
        let limit = |k: &str| -> usize { get(k).parse().unwrap_or(i32::MAX as usize) };
        let connection_limits = crate::connection_quotas::ConnectionLimits {
            max_connections: limit("max.connections"),
            max_connections_per_ip: limit("max.connections.per.ip"),
        };
        let protocol_map = get("listener.security.protocol.map");
        let controller_names = get("controller.listener.names");
        let is_controller_listener =
            |name: &str| controller_names.split(',').any(|n| n.trim() == name);
        // An unmapped listener is refused, as Kafka does, except that with the
        // map left at its default a controller listener is PLAINTEXT (Kafka's
        // rule too), so a custom controller listener name works out of the box.
        let protocol_of = |name: &str| match security_protocol(name, &protocol_map) {
            Err(_)
                if is_controller_listener(name)
                    && !props.contains_key("listener.security.protocol.map") =>
            {
                Ok(SecurityProtocol::Plaintext)
            }
            resolved => resolved,
        };
        let mut listener_protocols = BTreeMap::new();
        for l in &listeners {
            listener_protocols.insert(l.name.clone(), protocol_of(&l.name)?);
        }
        // The controller listener need not be among a broker-only node's
        // listeners, but its protocol is what this node connects with.
        let broker_only = !get("process.roles")
            .split(',')
            .any(|r| r.trim() == "controller");
        for name in controller_names
            .split(',')
            .map(str::trim)
            .filter(|n| !n.is_empty())
        {
            let mapped = protocol_map
                .split(',')
                .any(|pair| pair.split_once(':').is_some_and(|(n, _)| n.trim() == name));
            if !listener_protocols.contains_key(name) && (broker_only || mapped) {
                listener_protocols.insert(name.to_string(), protocol_of(name)?);
            }
        }
        // Controller connections (Raft, registrations, heartbeats) take
        // SASL/PLAIN (`sasl.mechanism.controller.protocol`, Kafka's key);
        // any other mechanism must not start half-working.
        for name in controller_names.split(',').map(str::trim) {
            if listener_protocols.get(name).is_some_and(|p| p.uses_sasl()) {
                let mechanism = get("sasl.mechanism.controller.protocol");
                let why = match mechanism.as_str() {
                    "PLAIN" => continue,
                    "SCRAM-SHA-256" | "SCRAM-SHA-512" => format!(
                        "{mechanism} cannot authenticate connections to the controllers: its credentials live in the metadata log they serve; use PLAIN (or SSL with client certificates) on the controller listener {name}"
                    ),
                    m => format!(
                        "{m} is not implemented by Strand; on the controller listener {name} it takes PLAIN (or SSL with client certificates)"
                    ),
                };
                return Err(invalid(
                    "sasl.mechanism.controller.protocol",
                    &mechanism,
                    why,
                ));
            }
        }
        let mut advertised = parse_listeners("advertised.listeners", &get("advertised.listeners"))?;
        if advertised.is_empty() {
            advertised = listeners
                .iter()
                .filter(|l| l.name != "CONTROLLER")
                .cloned()
                .collect();
        }
        for l in &mut advertised {
            if l.host.is_empty() {
                // As Kafka: a listener on every interface with no host is
                // advertised under this machine's canonical name.
                l.host = canonical_host_name();
            } else if l.host == "0.0.0.0" {
                l.host = "127.0.0.1".into();
            }
        }
        let log_dirs_raw = props
            .get("log.dirs")
            .or(props.get("log.dir"))
            .cloned()
            .unwrap_or_else(|| "./data".into());
        let log_dirs: Vec<PathBuf> = log_dirs_raw
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from)
            .collect();
        if log_dirs.is_empty() {
            return Err(invalid("log.dirs", &log_dirs_raw, "no directory given"));
        }
        // Kafka's retention precedence: log.retention.ms > .minutes > .hours.
        let mut static_props = props.clone();
        if !props.contains_key("log.retention.ms") {
            if let Some(m) = props.get("log.retention.minutes").filter(|v| !v.is_empty()) {
                static_props.insert(
                    "log.retention.ms".into(),
                    m.parse::<i64>()
                        .unwrap_or(10080)
                        .saturating_mul(60_000)
                        .to_string(),
                );
            } else if let Some(h) = props.get("log.retention.hours") {
                static_props.insert(
                    "log.retention.ms".into(),
                    h.parse::<i64>()
                        .unwrap_or(168)
                        .saturating_mul(3_600_000)
                        .to_string(),
                );
            }
        }
        if !props.contains_key("log.roll.ms") {
            if let Some(h) = props.get("log.roll.hours") {
                static_props.insert(
                    "log.roll.ms".into(),
                    h.parse::<i64>()
                        .unwrap_or(168)
                        .saturating_mul(3_600_000)
                        .to_string(),
                );
            }
        }
        let session_timeout_ms: u64 = get("broker.session.timeout.ms").parse().unwrap_or(9000);
        let write_lease_enable = get("strand.write.lease.enable") == "true";
        let write_lease_ms: u64 = get("strand.write.lease.ms")
            .parse()
            .unwrap_or(session_timeout_ms * 2 / 3);
        let write_lease_safety_margin_ms: u64 = get("strand.write.lease.safety.margin.ms")
            .parse()
            .unwrap_or(write_lease_ms / 12);
        let heartbeat_interval_ms: u64 =
            get("broker.heartbeat.interval.ms").parse().unwrap_or(2000);
        // A lease ends before the session it is granted with: a broker
        // fenced for silence holds none any more (the controller relies on
        // it after a failover). Checked when leases are on: off, nothing
        // acts on them.
        if write_lease_enable && write_lease_ms >= session_timeout_ms {
            return Err(invalid(
                "strand.write.lease.ms",
                &write_lease_ms.to_string(),
                format!("must be below broker.session.timeout.ms ({session_timeout_ms})"),
            ));
        }
        // A lease must outlast the heartbeats that renew it, margin and all,
        // or a broker would drop its writes between two heartbeats.
        if write_lease_enable
            && write_lease_ms <= write_lease_safety_margin_ms + heartbeat_interval_ms
        {
            return Err(invalid(
                "strand.write.lease.ms",
                &write_lease_ms.to_string(),
                format!(
                    "must exceed strand.write.lease.safety.margin.ms ({write_lease_safety_margin_ms}) plus broker.heartbeat.interval.ms ({heartbeat_interval_ms})"
                ),
            ));
        }
        Ok(BrokerConfig {
            node_id,
            listener_protocols,
            listener_props,
            listeners,
            advertised_listeners: advertised,
            log_dirs,
            num_partitions: get("num.partitions").parse().unwrap_or(1),
            default_replication_factor: get("default.replication.factor").parse().unwrap_or(1),
            auto_create_topics_enable: get("auto.create.topics.enable") == "true",
            socket_request_max_bytes,
            connection_limits,
            connections_max_idle_ms: get("connections.max.idle.ms").parse().unwrap_or(600000),
            queued_max_request_bytes,
            log_retention_check_interval_ms: get("log.retention.check.interval.ms")
                .parse()
                .unwrap_or(300000),
            log_cleaner: LogCleanerSettings::from_settings(|k| get(k)),
            producer_id_expiration_ms: get("producer.id.expiration.ms").parse().unwrap_or(86400000),
            broker_rack: props.get("broker.rack").filter(|r| !r.is_empty()).cloned(),
            process_roles: get("process.roles")
                .split(',')
                .map(|r| r.trim().to_string())
                .collect(),
            quorum_voters: parse_voters(&get("controller.quorum.voters")).unwrap_or_default(),
            controller_listener_names: get("controller.listener.names")
                .split(',')
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty())
                .collect(),
            election_timeout_ms: get("controller.quorum.election.timeout.ms")
                .parse()
                .unwrap_or(1000),
            broker_session_timeout_ms: get("broker.session.timeout.ms").parse().unwrap_or(9000),
            auto_leader_rebalance_enable: get("auto.leader.rebalance.enable") == "true",
            leader_imbalance_check_interval_ms: get("leader.imbalance.check.interval.seconds")
                .parse::<u64>()
                .unwrap_or(300)
                .saturating_mul(1000),
            unclean_leader_election_interval_ms: get("unclean.leader.election.interval.ms")
                .parse::<u64>()
                .unwrap_or(300_000)
                .max(1),
            broker_heartbeat_interval_ms: get("broker.heartbeat.interval.ms")
                .parse()
                .unwrap_or(2000),
            replica_lag_time_max_ms: get("replica.lag.time.max.ms").parse().unwrap_or(30000),
            replica_fetch_wait_max_ms: get("replica.fetch.wait.max.ms").parse().unwrap_or(500),
            replica_fetch_min_bytes: get("replica.fetch.min.bytes").parse().unwrap_or(1),
            replica_fetch_max_bytes: get("replica.fetch.max.bytes").parse().unwrap_or(1048576),
            replica_fetch_response_max_bytes: get("replica.fetch.response.max.bytes")
                .parse()
                .unwrap_or(10485760),
            replica_fetch_backoff_ms: get("replica.fetch.backoff.ms").parse().unwrap_or(1000),
            replica_high_watermark_checkpoint_interval_ms: get(
                "replica.high.watermark.checkpoint.interval.ms",
            )
            .parse()
            .unwrap_or(5000),
            offsets_topic_num_partitions: get("offsets.topic.num.partitions").parse().unwrap_or(50),
            offsets_topic_replication_factor: get("offsets.topic.replication.factor")
                .parse()
                .unwrap_or(3),
            offsets_topic_segment_bytes: get("offsets.topic.segment.bytes")
                .parse()
                .unwrap_or(104857600),
            offsets_commit_timeout_ms: get("offsets.commit.timeout.ms").parse().unwrap_or(5000),
            offsets_retention_ms: get("offsets.retention.minutes")
                .parse::<i64>()
                .unwrap_or(10080)
                .saturating_mul(60_000),
            offsets_retention_check_interval_ms: get("offsets.retention.check.interval.ms")
                .parse()
                .unwrap_or(600000),
            offset_metadata_max_bytes: get("offset.metadata.max.bytes").parse().unwrap_or(4096),
            transaction_state_log_num_partitions: get("transaction.state.log.num.partitions")
                .parse()
                .unwrap_or(50),
            transaction_state_log_replication_factor: get(
                "transaction.state.log.replication.factor",
            )
            .parse()
            .unwrap_or(3),
            transaction_state_log_min_isr: get("transaction.state.log.min.isr")
                .parse()
                .unwrap_or(2),
            transaction_state_log_segment_bytes: get("transaction.state.log.segment.bytes")
                .parse()
                .unwrap_or(104857600),
            transaction_max_timeout_ms: get("transaction.max.timeout.ms").parse().unwrap_or(900000),
            transactional_id_expiration_ms: get("transactional.id.expiration.ms")
                .parse()
                .unwrap_or(604800000),
            transaction_remove_expired_transaction_cleanup_interval_ms: get(
                "transaction.remove.expired.transaction.cleanup.interval.ms",
            )
            .parse()
            .unwrap_or(3600000),
            transaction_abort_timed_out_transaction_cleanup_interval_ms: get(
                "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            )
            .parse()
            .unwrap_or(10000),
            transaction_partition_verification_enable: get(
                "transaction.partition.verification.enable",
            ) == "true",
            add_partitions_to_txn_retry_backoff_ms: get("add.partitions.to.txn.retry.backoff.ms")
                .parse()
                .unwrap_or(20),
            add_partitions_to_txn_retry_backoff_max_ms: get(
                "add.partitions.to.txn.retry.backoff.max.ms",
            )
            .parse()
            .unwrap_or(100),
            write_lease_enable,
            write_lease_ms,
            write_lease_safety_margin_ms,
            group_initial_rebalance_delay_ms: get("group.initial.rebalance.delay.ms")
                .parse()
                .unwrap_or(3000),
            group_min_session_timeout_ms: get("group.min.session.timeout.ms")
                .parse()
                .unwrap_or(6000),
            group_max_session_timeout_ms: get("group.max.session.timeout.ms")
                .parse()
                .unwrap_or(1800000),
            group_max_size: get("group.max.size").parse().unwrap_or(i32::MAX as usize),
            static_props,
            unused_keys,
        })
    }

    /// `key` for listener `listener`: its `listener.name.<listener>.<key>`
    /// when given, else the broker-wide setting (or its default), as Kafka
    /// resolves listener settings. None when neither is set and there is no
    /// default.
    pub fn listener_setting(&self, listener: &str, key: &str) -> Option<String> {
        let prefixed = format!("{LISTENER_PREFIX}{}.{key}", listener.to_lowercase());
        match self.listener_props.get(&prefixed) {
            Some(v) => Some(v.clone()).filter(|v| !v.is_empty()),
            None => self.setting(key),
        }
    }

    /// A broker-wide setting as given, else its default (None if empty).
    pub fn setting(&self, key: &str) -> Option<String> {
        self.static_props
            .get(key)
            .cloned()
            .or_else(|| {
                BROKER_KEYS
                    .iter()
                    .find(|(k, _)| *k == key)
                    .map(|(_, d)| d.to_string())
            })
            .filter(|v| !v.is_empty())
    }

    /// A listener's security protocol (PLAINTEXT for one not configured,
    /// which only tests build).
    pub fn security_protocol(&self, listener: &str) -> SecurityProtocol {
        self.listener_protocols
            .get(listener)
            .copied()
            .unwrap_or(SecurityProtocol::Plaintext)
    }

    /// The listener clients connect to (the first non-controller one).
    /// Every listener clients connect to (all but the controller's).
    pub fn client_listeners(&self) -> impl Iterator<Item = &Listener> {
        self.listeners
            .iter()
            .filter(|l| !self.controller_listener_names.contains(&l.name))
    }

    pub fn client_listener(&self) -> &Listener {
        self.listeners
            .iter()
            .find(|l| !self.controller_listener_names.contains(&l.name))
            .unwrap_or(&self.listeners[0])
    }

    /// The controller listener (first of controller.listener.names), if configured.
    pub fn controller_listener(&self) -> Option<&Listener> {
        self.listeners
            .iter()
            .find(|l| self.controller_listener_names.contains(&l.name))
    }

    pub fn is_controller(&self) -> bool {
        self.process_roles.iter().any(|r| r == "controller")
    }

    pub fn is_broker(&self) -> bool {
        self.process_roles.iter().any(|r| r == "broker")
    }

    /// This node's `node.id` as a broker id (validated non-negative).
    pub fn broker_id(&self) -> BrokerId {
        BrokerId::new(self.node_id)
    }

    /// The inter-broker listener's advertised address: the one other
    /// brokers fetch from (`inter.broker.listener.name` when set, else the
    /// first client listener).
    pub fn advertised(&self) -> &Listener {
        let name = self
            .static_props
            .get("inter.broker.listener.name")
            .filter(|n| self.advertised_listeners.iter().any(|l| &l.name == *n))
            .unwrap_or(&self.client_listener().name);
        self.advertised_listeners
            .iter()
            .find(|l| &l.name == name)
            .unwrap_or(&self.advertised_listeners[0])
    }

    /// A broker setting's built-in default (Kafka's DEFAULT_CONFIG), if
    /// it has one.
    pub fn default_of(key: &str) -> Option<&'static str> {
        if let Some((_, d)) = BROKER_KEYS.iter().find(|(k, _)| *k == key) {
            return Some(d);
        }
        if let Some(d) = strand_metadata::configs::BROKER_DYNAMIC_CONFIGS
            .iter()
            .find(|d| d.name == key)
        {
            return Some(d.default);
        }
        TOPIC_CONFIGS
            .iter()
            .find(|d| d.broker_synonym == Some(key))
            .filter(|_| !strand_metadata::configs::NULL_BROKER_DEFAULTS.contains(&key))
            .map(|d| d.default)
    }

    /// Every broker config with its effective value and whether it was set
    /// explicitly, for DescribeConfigs on the broker resource.
    pub fn describe(&self) -> Vec<(String, String, bool)> {
        let mut out = BTreeMap::new();
        for (k, d) in BROKER_KEYS {
            out.insert(k.to_string(), (d.to_string(), false));
        }
        for d in TOPIC_CONFIGS {
            if let Some(s) = d.broker_synonym {
                out.insert(s.to_string(), (d.default.to_string(), false));
            }
        }
        for (k, v) in &self.static_props {
            out.insert(k.clone(), (v.clone(), true));
        }
        out.into_iter().map(|(k, (v, set))| (k, v, set)).collect()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn an_empty_listener_host_is_advertised_as_the_canonical_host_name() {
        let c = cfg(&[
            (
                "listeners",
                "PLAINTEXT://:19092,CONTROLLER://127.0.0.1:19093",
            ),
            ("controller.quorum.voters", "1@127.0.0.1:19093"),
        ])
        .unwrap();
        let advertised = &c.advertised_listeners[0];
        assert_eq!(advertised.host, canonical_host_name());
        assert!(!advertised.host.is_empty() && advertised.host != "127.0.0.1");
    }

    use super::*;
    use strand_metadata::configs::topic_config;

    fn partition_default(c: &BrokerConfig, name: &str) -> String {
        let d = topic_config(name).unwrap();
        let layers = strand_metadata::configs::BrokerLayers::static_only(&c.static_props);
        strand_metadata::configs::resolve_topic_config(d, &Default::default(), &layers)
            .0
            .to_string()
    }

    fn cfg(pairs: &[(&str, &str)]) -> Result<BrokerConfig, ConfigError> {
        BrokerConfig::from_pairs(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn security_protocols_of_listeners() {
        let c = cfg(&[
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9093,SASL_SSL://127.0.0.1:9094,SECURE://127.0.0.1:9095",
            ),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,SECURE:SASL_PLAINTEXT",
            ),
            ("listener.name.sasl_ssl.sasl.enabled.mechanisms", "SCRAM-SHA-512"),
            ("sasl.enabled.mechanisms", "PLAIN"),
        ])
        .unwrap();
        use SecurityProtocol::*;
        for (name, p) in [
            ("PLAINTEXT", Plaintext),
            ("SSL", Ssl),
            ("SASL_SSL", SaslSsl),
            ("SECURE", SaslPlaintext),
        ] {
            assert_eq!(c.security_protocol(name), p, "{name}");
        }
        // Kafka's resolution: the listener's own setting, else the broker's.
        assert_eq!(
            c.listener_setting("SASL_SSL", "sasl.enabled.mechanisms")
                .as_deref(),
            Some("SCRAM-SHA-512")
        );
        assert_eq!(
            c.listener_setting("SECURE", "sasl.enabled.mechanisms")
                .as_deref(),
            Some("PLAIN")
        );
        assert_eq!(
            c.listener_setting("SSL", "ssl.client.auth").as_deref(),
            Some("none")
        );
        assert_eq!(c.listener_setting("SSL", "ssl.keystore.location"), None);
        for (listeners, map) in [
            ("INTERNAL://127.0.0.1:9093", None),
            ("A://127.0.0.1:9093", Some("A:TLS")),
        ] {
            let mut pairs = vec![("listeners", listeners)];
            if let Some(m) = map {
                pairs.push(("listener.security.protocol.map", m));
            }
            let err = cfg(&pairs).expect_err(listeners).to_string();
            assert!(
                err.contains("unknown security protocol") || err.contains("no security protocol"),
                "{listeners}: {err}"
            );
        }
        assert!(cfg(&[
            ("listeners", "PLAINTEXT://127.0.0.1:9092"),
            ("ssl.client.auth", "always")
        ])
        .is_err());
        // SASL on the controller listener: PLAIN only (GSSAPI, Kafka's
        // default mechanism there, is not implemented; SCRAM's credentials
        // live in the log the controllers serve).
        let sasl_controller = |mechanism: &str| {
            cfg(&[
                (
                    "listeners",
                    "PLAINTEXT://127.0.0.1:9092,CTRL://127.0.0.1:9093",
                ),
                ("controller.listener.names", "CTRL"),
                (
                    "listener.security.protocol.map",
                    "PLAINTEXT:PLAINTEXT,CTRL:SASL_PLAINTEXT",
                ),
                ("sasl.mechanism.controller.protocol", mechanism),
            ])
        };
        let err = sasl_controller("GSSAPI").expect_err("GSSAPI").to_string();
        assert!(err.contains("GSSAPI is not implemented"), "{err}");
        let err = sasl_controller("SCRAM-SHA-512")
            .expect_err("SCRAM")
            .to_string();
        assert!(err.contains("metadata log"), "{err}");
        let ok = sasl_controller("PLAIN").expect("PLAIN");
        assert_eq!(
            ok.security_protocol("CTRL"),
            SecurityProtocol::SaslPlaintext
        );
        // TLS on the controller listener; a broker-only node, which does
        // not listen on it, still connects with its protocol.
        let combined = cfg(&[
            (
                "listeners",
                "PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            ),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
            ),
        ])
        .unwrap();
        assert_eq!(
            combined.security_protocol("CONTROLLER"),
            SecurityProtocol::Ssl
        );
        let broker_only = cfg(&[
            ("process.roles", "broker"),
            ("listeners", "PLAINTEXT://127.0.0.1:9092"),
            ("controller.quorum.voters", "1@127.0.0.1:9093"),
            (
                "listener.security.protocol.map",
                "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
            ),
        ])
        .unwrap();
        assert_eq!(
            broker_only.security_protocol("CONTROLLER"),
            SecurityProtocol::Ssl
        );
        // A controller listener missing from a map that was set is refused
        // (it would otherwise be reached in PLAINTEXT, whatever was meant) ...
        let err = cfg(&[
            ("process.roles", "broker"),
            ("listeners", "PLAINTEXT://127.0.0.1:9092"),
            ("controller.quorum.voters", "1@127.0.0.1:9093"),
            ("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT"),
        ])
        .expect_err("an unmapped controller listener is refused")
        .to_string();
        assert!(
            err.contains("no security protocol for listener CONTROLLER"),
            "{err}"
        );
        // ... while with the map left at its default it is PLAINTEXT.
        for roles in ["broker", "broker,controller"] {
            let mut pairs = vec![
                ("process.roles", roles),
                ("controller.listener.names", "CTRL"),
                ("controller.quorum.voters", "1@127.0.0.1:9093"),
            ];
            if roles == "broker" {
                pairs.push(("listeners", "PLAINTEXT://127.0.0.1:9092"));
            } else {
                pairs.push((
                    "listeners",
                    "PLAINTEXT://127.0.0.1:9092,CTRL://127.0.0.1:9093",
                ));
            }
            let c = cfg(&pairs).unwrap();
            assert_eq!(
                c.security_protocol("CTRL"),
                SecurityProtocol::Plaintext,
                "{roles}"
            );
        }
        let ok = cfg(&[
            (
                "listeners",
                "INTERNAL://127.0.0.1:9092,EXTERNAL://127.0.0.1:9093",
            ),
            (
                "listener.security.protocol.map",
                "INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
            ),
            ("inter.broker.listener.name", "INTERNAL"),
        ]);
        assert!(ok.is_ok(), "{ok:?}");
    }

    #[test]
    fn several_listeners_and_the_inter_broker_one() {
        let c = cfg(&[
            (
                "listeners",
                "EXTERNAL://0.0.0.0:19092,INTERNAL://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093",
            ),
            (
                "listener.security.protocol.map",
                "EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
            ),
            (
                "advertised.listeners",
                "EXTERNAL://broker.example:19092,INTERNAL://127.0.0.1:9092",
            ),
            ("inter.broker.listener.name", "INTERNAL"),
            ("controller.listener.names", "CONTROLLER"),
        ])
        .unwrap();
        let served: Vec<&str> = c.client_listeners().map(|l| l.name.as_str()).collect();
        assert_eq!(served, ["EXTERNAL", "INTERNAL"]);
        assert_eq!(
            (c.advertised().name.as_str(), c.advertised().port),
            ("INTERNAL", 9092)
        );
    }

    #[test]
    fn listeners_bind_host_names_ipv6_and_every_interface() {
        let bind = |v: &str| parse_listeners("listeners", v).unwrap()[0].bind_addr();
        assert_eq!(
            bind("PLAINTEXT://[::1]:9092").unwrap().to_string(),
            "[::1]:9092"
        );
        assert_eq!(
            bind("PLAINTEXT://[::]:9092").unwrap().to_string(),
            "[::]:9092"
        );
        assert_eq!(
            bind("PLAINTEXT://:9092").unwrap().to_string(),
            "0.0.0.0:9092"
        );
        assert_eq!(
            bind("PLAINTEXT://0.0.0.0:9092").unwrap().to_string(),
            "0.0.0.0:9092"
        );
        assert!(bind("PLAINTEXT://localhost:9092")
            .unwrap()
            .ip()
            .is_loopback());
        assert!(bind("PLAINTEXT://no-such-host.invalid:9092").is_err());
    }

    #[test]
    fn defaults_are_a_single_local_node() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.node_id, 1);
        assert_eq!(
            c.client_listener().bind_addr().unwrap().to_string(),
            "127.0.0.1:9092"
        );
        assert_eq!(c.log_dirs, vec![PathBuf::from("./data")]);
        assert_eq!(partition_default(&c, "max.message.bytes"), "1048588");
        assert!(c.auto_create_topics_enable);
        // Kafka's connection and request-pool defaults: no caps, 10 minutes idle.
        let unlimited = i32::MAX as usize;
        assert_eq!(
            (
                c.connection_limits.max_connections,
                c.connection_limits.max_connections_per_ip
            ),
            (unlimited, unlimited)
        );
        assert_eq!(c.connections_max_idle_ms, 600_000);
        assert_eq!(c.queued_max_request_bytes, -1);
    }

    /// The properties fuzz target's corpus (fuzz/corpus/properties, run by
    /// scripts/fuzz.sh): parsing and validating each never panics.
    #[test]
    fn fuzz_corpus_replays() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus/properties");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let data = std::fs::read(entry.unwrap().path()).unwrap();
            if let Ok(pairs) = parse_properties("fuzz", &data) {
                let _ = BrokerConfig::from_pairs(pairs);
            }
            n += 1;
        }
        assert!(n > 0, "no corpus in {}", dir.display());
    }

    #[test]
    fn request_pool_holds_the_largest_request() {
        let pool = |q: &str| {
            cfg(&[
                ("socket.request.max.bytes", "1000"),
                ("queued.max.request.bytes", q),
            ])
            .map(|c| c.queued_max_request_bytes)
        };
        assert_eq!(pool("-1"), Ok(-1));
        assert_eq!(pool("0"), Ok(0));
        assert_eq!(pool("1000"), Ok(1000));
        assert!(matches!(
            pool("999"),
            Err(ConfigError::InvalidValue { key, .. }) if key == "queued.max.request.bytes"
        ));
    }

    #[test]
    fn unknown_keys_are_set_aside_but_unknown_strand_keys_refused() {
        // Kafka's quickstart file carries settings Strand has no use for.
        let c = cfg(&[
            ("share.coordinator.state.topic.replication.factor", "1"),
            ("socket.send.buffer.bytes", "102400"),
            ("num.partitions", "3"),
        ])
        .unwrap();
        assert_eq!(
            c.unused_keys,
            [
                "share.coordinator.state.topic.replication.factor",
                "socket.send.buffer.bytes"
            ]
        );
        assert!(!c.static_props.contains_key("socket.send.buffer.bytes"));
        assert_eq!(
            cfg(&[("strand.write.lease.enabel", "true")]).unwrap_err(),
            ConfigError::UnknownKey("strand.write.lease.enabel".into())
        );
    }

    #[test]
    fn errors_name_the_key() {
        let bad = [
            ("num.partitions", "0"),
            ("num.partitions", "x"),
            ("log.segment.bytes", "abc"),
            ("listeners", "nonsense"),
            ("auto.create.topics.enable", "maybe"),
            ("min.insync.replicas", "0"),
            ("log.retention.ms", "-7"),
            ("max.connections", "-1"),
            ("max.connections.per.ip", "many"),
        ];
        for (k, v) in bad {
            match cfg(&[(k, v)]) {
                Err(ConfigError::InvalidValue { key, .. }) => assert_eq!(key, k),
                other => panic!("{k}={v}: {other:?}"),
            }
        }
    }

    #[test]
    fn synonyms_and_overrides() {
        let c = cfg(&[
            ("message.max.bytes", "2000"),
            ("log.retention.hours", "1"),
            ("listeners", "PLAINTEXT://0.0.0.0:19092"),
        ])
        .unwrap();
        assert_eq!(partition_default(&c, "max.message.bytes"), "2000");
        assert_eq!(c.static_props["log.retention.ms"], "3600000");
        assert_eq!(c.advertised().host, "127.0.0.1");
        assert_eq!(c.advertised().port, 19092);
        let overrides = ["num.partitions=4".to_string(), "node.id=3".to_string()];
        let c = BrokerConfig::load(None, &overrides).unwrap();
        assert_eq!((c.num_partitions, c.node_id), (4, 3));
        assert!(matches!(
            BrokerConfig::load(None, &["no-equals-sign".to_string()]),
            Err(ConfigError::MalformedOverride(_))
        ));
    }

    #[test]
    fn properties_file_syntax() {
        let p = parse_properties("f", b"# c\n! c\n a = 1 \nb:2\nc \\\n  d\nalone\n").unwrap();
        let want = [("a", "1"), ("b", "2"), ("c", "d"), ("alone", "")];
        assert_eq!(
            p,
            want.map(|(k, v)| (k.to_string(), v.to_string())).to_vec()
        );
        assert!(matches!(
            parse_properties("f", b"x=\\u12"),
            Err(ConfigError::Malformed { line: 1, .. })
        ));
    }
}
