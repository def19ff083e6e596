//! Broker configuration: a `server.properties`-style file with Kafka's property
//! names, overridden by `--override key=value` arguments. Bad values stop
//! start-up with a message naming the key. Keys Strand has no use for are
//! kept aside and logged at start-up, as Kafka does (so Kafka's own
//! configuration files start Strand), except unknown keys of Strand's own
//! `strand.` namespace, which can only be typos and are refused.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use strand_metadata::configs::{
    broker_config, validate_topic_config, validate_value, Support, UpdateMode, BROKER_CONFIGS,
    TOPIC_CONFIGS,
};
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
    /// The settings given that Strand accepts but does not act on (the
    /// table's [`Support::NotActedOn`] rows), each with why.
    pub fn inert_settings(&self) -> Vec<(&'static str, &'static str)> {
        let topic_synonyms = TOPIC_CONFIGS
            .iter()
            .filter_map(|d| Some((d.broker_synonym?, d.support)));
        BROKER_CONFIGS
            .iter()
            .map(|d| (d.name, d.support))
            .chain(topic_synonyms)
            .filter(|(k, _)| self.static_props.contains_key(*k))
            .filter_map(|(k, support)| match support {
                Support::NotActedOn(why) => Some((k, why)),
                Support::ActedOn => None,
            })
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
    let known = broker_config(key).is_some_and(|d| d.update != UpdateMode::DynamicOnly)
        || TOPIC_CONFIGS.iter().any(|d| d.broker_synonym == Some(key));
    if !known && key.starts_with("strand.") {
        return Err(ConfigError::UnknownKey(key.into()));
    }
    Ok(known)
}

/// Checks one known key and value against its row of the table (topic
/// configs' synonyms against the topic config's), then what a row cannot
/// say: the listeners, voters and addresses parse.
fn validate_key(key: &str, value: &str) -> Result<(), ConfigError> {
    if let Some(d) = TOPIC_CONFIGS.iter().find(|d| d.broker_synonym == Some(key)) {
        return validate_topic_config(d.name, value).map_err(|r| invalid(key, value, r));
    }
    let Some(d) = broker_config(key) else {
        return Ok(());
    };
    match key {
        "listeners" | "advertised.listeners" => return parse_listeners(key, value).map(|_| ()),
        "controller.quorum.voters" => {
            return parse_voters(value)
                .map(|_| ())
                .map_err(|r| invalid(key, value, r))
        }
        "strand.http.listener" if !value.is_empty() && value.parse::<SocketAddr>().is_err() => {
            return Err(invalid(
                key,
                value,
                "expected host:port with an IP address, e.g. 127.0.0.1:9464",
            ))
        }
        "authorizer.class.name" if !value.trim().is_empty() && !AUTHORIZERS.contains(&value.trim()) => {
            return Err(invalid(
                key,
                value,
                format!("Strand's authorizer has Kafka's StandardAuthorizer semantics: set one of {AUTHORIZERS:?} or leave it empty"),
            ))
        }
        "log.cleaner.io.buffer.load.factor" | "log.cleaner.io.max.bytes.per.second"
            if !value.trim().parse::<f64>().is_ok_and(|v| v > 0.0) =>
        {
            return Err(invalid(key, value, "expected a positive number"))
        }
        _ => {}
    }
    // A setting whose default is null may be left empty.
    if value.trim().is_empty() && d.default.is_empty() {
        return Ok(());
    }
    validate_value(d, value).map_err(|m| {
        let prefix = format!("Invalid value {value} for configuration {key}: ");
        invalid(key, value, m.strip_prefix(&prefix).unwrap_or(&m))
    })
}

/// Settings as given over the table's defaults, read as their types.
struct Settings<'a>(&'a BTreeMap<String, String>);

impl Settings<'_> {
    /// The value given, else the table's default (empty for null).
    fn get(&self, key: &str) -> String {
        self.0
            .get(key)
            .cloned()
            .unwrap_or_else(|| table_default(key).to_string())
    }

    /// A validated setting as a number: validation and the table's tests
    /// make it read; were it not to, the default, then zero.
    fn num<T: std::str::FromStr + Default>(&self, key: &str) -> T {
        self.get(key)
            .trim()
            .parse()
            .or_else(|_| table_default(key).parse())
            .unwrap_or_default()
    }

    /// A boolean setting (Kafka reads them ignoring case).
    fn flag(&self, key: &str) -> bool {
        self.get(key).trim().eq_ignore_ascii_case("true")
    }
}

/// The table's default for `key`: a broker setting's, or the topic config's
/// whose synonym it is. Empty for Kafka's null and for unknown keys.
fn table_default(key: &str) -> &'static str {
    broker_config(key)
        .map(|d| d.default)
        .or_else(|| {
            TOPIC_CONFIGS
                .iter()
                .find(|d| d.broker_synonym == Some(key))
                .map(|d| d.default)
        })
        .unwrap_or_default()
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
    /// From each `log.cleaner.*` setting's value (the default where one
    /// does not read).
    pub fn from_settings(get: impl Fn(&str) -> String) -> LogCleanerSettings {
        let num = |key: &str| -> f64 {
            get(key)
                .trim()
                .parse()
                .or_else(|_| table_default(key).parse())
                .unwrap_or(1.0)
        };
        LogCleanerSettings {
            enable: get("log.cleaner.enable")
                .trim()
                .eq_ignore_ascii_case("true"),
            // At least one: the offset map is shared out among them.
            threads: (num("log.cleaner.threads") as usize).max(1),
            backoff_ms: num("log.cleaner.backoff.ms") as u64,
            dedupe_buffer_size: num("log.cleaner.dedupe.buffer.size") as usize,
            load_factor: num("log.cleaner.io.buffer.load.factor"),
            io_max_bytes_per_second: num("log.cleaner.io.max.bytes.per.second"),
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
        let cfg = Settings(&props);
        let get = |k: &str| cfg.get(k);
        let node_id = if props.contains_key("node.id") {
            cfg.num("node.id")
        } else {
            cfg.num("broker.id")
        };
        let listeners = parse_listeners("listeners", &get("listeners"))?;
        if listeners.is_empty() {
            return Err(invalid("listeners", &get("listeners"), "no listener given"));
        }
        let socket_request_max_bytes: usize = cfg.num("socket.request.max.bytes");
        let queued_max_request_bytes: i64 = cfg.num("queued.max.request.bytes");
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
        let connection_limits = crate::connection_quotas::ConnectionLimits {
            max_connections: cfg.num("max.connections"),
            max_connections_per_ip: cfg.num("max.connections.per.ip"),
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
        let log_dirs_key = if props.contains_key("log.dirs") {
            "log.dirs"
        } else {
            "log.dir"
        };
        let log_dirs_raw = get(log_dirs_key);
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
            if props
                .get("log.retention.minutes")
                .is_some_and(|v| !v.is_empty())
            {
                let minutes: i64 = cfg.num("log.retention.minutes");
                static_props.insert(
                    "log.retention.ms".into(),
                    minutes.saturating_mul(60_000).to_string(),
                );
            } else if props.contains_key("log.retention.hours") {
                let hours: i64 = cfg.num("log.retention.hours");
                static_props.insert(
                    "log.retention.ms".into(),
                    hours.saturating_mul(3_600_000).to_string(),
                );
            }
        }
        if !props.contains_key("log.roll.ms") && props.contains_key("log.roll.hours") {
            let hours: i64 = cfg.num("log.roll.hours");
            static_props.insert(
                "log.roll.ms".into(),
                hours.saturating_mul(3_600_000).to_string(),
            );
        }
        let session_timeout_ms: u64 = cfg.num("broker.session.timeout.ms");
        let write_lease_enable = cfg.flag("strand.write.lease.enable");
        // Null defaults, derived: two thirds of the session, a twelfth of the lease.
        let write_lease_ms: u64 = match get("strand.write.lease.ms").trim() {
            "" => session_timeout_ms * 2 / 3,
            _ => cfg.num("strand.write.lease.ms"),
        };
        let write_lease_safety_margin_ms: u64 =
            match get("strand.write.lease.safety.margin.ms").trim() {
                "" => write_lease_ms / 12,
                _ => cfg.num("strand.write.lease.safety.margin.ms"),
            };
        let heartbeat_interval_ms: u64 = cfg.num("broker.heartbeat.interval.ms");
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
            num_partitions: cfg.num("num.partitions"),
            default_replication_factor: cfg.num("default.replication.factor"),
            auto_create_topics_enable: cfg.flag("auto.create.topics.enable"),
            socket_request_max_bytes,
            connection_limits,
            connections_max_idle_ms: cfg.num("connections.max.idle.ms"),
            queued_max_request_bytes,
            log_retention_check_interval_ms: cfg.num("log.retention.check.interval.ms"),
            log_cleaner: LogCleanerSettings::from_settings(|k| get(k)),
            producer_id_expiration_ms: cfg.num("producer.id.expiration.ms"),
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
            election_timeout_ms: cfg.num("controller.quorum.election.timeout.ms"),
            broker_session_timeout_ms: cfg.num("broker.session.timeout.ms"),
            auto_leader_rebalance_enable: cfg.flag("auto.leader.rebalance.enable"),
            leader_imbalance_check_interval_ms: cfg
                .num::<u64>("leader.imbalance.check.interval.seconds")
                .saturating_mul(1000),
            unclean_leader_election_interval_ms: cfg
                .num::<u64>("unclean.leader.election.interval.ms")
                .max(1),
            broker_heartbeat_interval_ms: cfg.num("broker.heartbeat.interval.ms"),
            replica_lag_time_max_ms: cfg.num("replica.lag.time.max.ms"),
            replica_fetch_wait_max_ms: cfg.num("replica.fetch.wait.max.ms"),
            replica_fetch_min_bytes: cfg.num("replica.fetch.min.bytes"),
            replica_fetch_max_bytes: cfg.num("replica.fetch.max.bytes"),
            replica_fetch_response_max_bytes: cfg.num("replica.fetch.response.max.bytes"),
            replica_fetch_backoff_ms: cfg.num("replica.fetch.backoff.ms"),
            replica_high_watermark_checkpoint_interval_ms: cfg
                .num("replica.high.watermark.checkpoint.interval.ms"),
            offsets_topic_num_partitions: cfg.num("offsets.topic.num.partitions"),
            offsets_topic_replication_factor: cfg.num("offsets.topic.replication.factor"),
            offsets_topic_segment_bytes: cfg.num("offsets.topic.segment.bytes"),
            offsets_commit_timeout_ms: cfg.num("offsets.commit.timeout.ms"),
            offsets_retention_ms: cfg
                .num::<i64>("offsets.retention.minutes")
                .saturating_mul(60_000),
            offsets_retention_check_interval_ms: cfg.num("offsets.retention.check.interval.ms"),
            offset_metadata_max_bytes: cfg.num("offset.metadata.max.bytes"),
            transaction_state_log_num_partitions: cfg.num("transaction.state.log.num.partitions"),
            transaction_state_log_replication_factor: cfg
                .num("transaction.state.log.replication.factor"),
            transaction_state_log_min_isr: cfg.num("transaction.state.log.min.isr"),
            transaction_state_log_segment_bytes: cfg.num("transaction.state.log.segment.bytes"),
            transaction_max_timeout_ms: cfg.num("transaction.max.timeout.ms"),
            transactional_id_expiration_ms: cfg.num("transactional.id.expiration.ms"),
            transaction_remove_expired_transaction_cleanup_interval_ms: cfg
                .num("transaction.remove.expired.transaction.cleanup.interval.ms"),
            transaction_abort_timed_out_transaction_cleanup_interval_ms: cfg
                .num("transaction.abort.timed.out.transaction.cleanup.interval.ms"),
            transaction_partition_verification_enable: cfg
                .flag("transaction.partition.verification.enable"),
            add_partitions_to_txn_retry_backoff_ms: cfg
                .num("add.partitions.to.txn.retry.backoff.ms"),
            add_partitions_to_txn_retry_backoff_max_ms: cfg
                .num("add.partitions.to.txn.retry.backoff.max.ms"),
            write_lease_enable,
            write_lease_ms,
            write_lease_safety_margin_ms,
            group_initial_rebalance_delay_ms: cfg.num("group.initial.rebalance.delay.ms"),
            group_min_session_timeout_ms: cfg.num("group.min.session.timeout.ms"),
            group_max_session_timeout_ms: cfg.num("group.max.session.timeout.ms"),
            group_max_size: cfg.num("group.max.size"),
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
        Some(Settings(&self.static_props).get(key)).filter(|v| !v.is_empty())
    }

    /// Whether `group.coordinator.rebalance.protocols` names the consumer
    /// protocol (KIP-848's ConsumerGroupHeartbeat).
    pub fn serves_consumer_protocol(&self) -> bool {
        self.setting("group.coordinator.rebalance.protocols")
            .is_some_and(|v| v.split(',').any(|p| p.trim() == "consumer"))
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
        if let Some(d) = broker_config(key) {
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
        for d in BROKER_CONFIGS
            .iter()
            .filter(|d| d.update != UpdateMode::DynamicOnly)
        {
            out.insert(d.name.to_string(), (d.default.to_string(), false));
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

/// docs/CONFIGURATION.md: the table as a page (a test keeps the committed
/// page equal to it).
pub fn reference_page() -> String {
    use std::fmt::Write;
    let cell = |s: &str| s.replace('|', "\\|");
    let valid = |d: &strand_metadata::configs::TopicConfigDef| -> String {
        let mut v = Vec::new();
        if let Some(min) = d.min {
            v.push(format!("at least {min}"));
        }
        if !d.one_of.is_empty() {
            v.push(format!("one of {}", d.one_of.join(", ")));
        }
        v.join("; ")
    };
    let default = |d: &str| match d {
        "" => "(null)".to_string(),
        d => format!("`{d}`"),
    };
    let acted = |s: Support| match s {
        Support::ActedOn => "yes".to_string(),
        Support::NotActedOn(why) => format!("no: {why}"),
    };
    let mut out = String::from(
        "# Configuration reference\n\n\
         Every setting Strand reads from `server.properties` or `--override`, generated from \
         the config table (`metadata/src/configs/broker.rs` and `TOPIC_CONFIGS` in \
         `metadata/src/configs.rs`) by `STRAND_BLESS=1 cargo test -p strand-broker \
         reference_page`; edit the table, not this page. Names, types and defaults are \
         Kafka's. A key Kafka knows that Strand does not is logged at start-up and \
         otherwise ignored; one Strand accepts without acting on it (\"no\" below) is \
         named in a warning at start-up; an unknown `strand.` key stops start-up.\n\n\
         Update mode: *read-only* settings are read at start-up; *cluster-wide* ones \
         change without a restart through IncrementalAlterConfigs on a broker or on every \
         broker (`kafka-configs --alter --entity-type brokers [--entity-name N | \
         --entity-default]`); *per-broker* ones (the TLS stores) as \
         `listener.name.<listener>.<key>` on one broker; *dynamic only* ones are not \
         server.properties keys.\n\n## Broker settings\n\n\
         | Name | Type | Default | Valid values | Update mode | Acted on | Meaning |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let mode = |m: UpdateMode| match m {
        UpdateMode::ReadOnly => "read-only",
        UpdateMode::PerBroker => "per-broker",
        UpdateMode::ClusterWide => "cluster-wide",
        UpdateMode::DynamicOnly => "dynamic only",
    };
    for d in BROKER_CONFIGS {
        let _ = writeln!(
            out,
            "| `{}` | {:?} | {} | {} | {} | {} | {} |",
            d.name,
            d.kind,
            cell(&default(d.default)),
            cell(&valid(d)),
            mode(d.update),
            cell(&acted(d.support)),
            cell(d.doc)
        );
    }
    out.push_str(
        "\n## Topic configs' broker defaults\n\n\
         Each is the default of a topic config, and changes cluster-wide without a \
         restart unless marked read-only.\n\n\
         | Broker setting | Topic config | Type | Default | Valid values | Update mode | Acted on | Meaning |\n\
         |---|---|---|---|---|---|---|---|\n",
    );
    let mut synonyms: Vec<_> = TOPIC_CONFIGS
        .iter()
        .filter_map(|d| Some((d.broker_synonym?, d)))
        .collect();
    synonyms.sort_by_key(|(s, _)| *s);
    for (synonym, d) in synonyms {
        let update = if strand_metadata::configs::dynamic_broker_config(synonym).is_some() {
            "cluster-wide"
        } else {
            "read-only"
        };
        let _ = writeln!(
            out,
            "| `{synonym}` | `{}` | {:?} | {} | {} | {update} | {} | {} |",
            d.name,
            d.kind,
            cell(&default(d.default)),
            cell(&valid(d)),
            cell(&acted(d.support)),
            cell(d.doc)
        );
    }
    out.push_str(
        "\n## Group configs\n\n\
         A consumer group's own settings (`GROUP_CONFIGS` in \
         `metadata/src/configs/group.rs`), set without a restart by \
         IncrementalAlterConfigs on a group (`kafka-configs --alter --entity-type groups \
         --entity-name G`), whether or not the group exists; unset, each is its broker \
         setting's value. Values outside the range the broker's `group.*.min.*` and \
         `group.*.max.*` settings give are refused.\n\n\
         | Group config | Broker setting | Type | Default | Acted on | Meaning |\n\
         |---|---|---|---|---|---|\n",
    );
    for d in strand_metadata::configs::GROUP_CONFIGS {
        let synonym = match d.broker_synonym {
            Some(s) if s != d.name => format!("`{s}`"),
            _ => "(none)".to_string(),
        };
        let _ = writeln!(
            out,
            "| `{}` | {synonym} | {:?} | {} | {} | {} |",
            d.name,
            d.kind,
            cell(&default(d.default)),
            cell(&acted(d.support)),
            cell(d.doc)
        );
    }
    out
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

    #[test]
    fn reference_page() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/CONFIGURATION.md");
        let page = super::reference_page();
        if std::env::var_os("STRAND_BLESS").is_some() {
            std::fs::write(path, &page).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == page,
            "docs/CONFIGURATION.md is not the table's page: run STRAND_BLESS=1 cargo test -p strand-broker reference_page"
        );
    }

    #[test]
    fn the_shipped_server_properties_uses_only_settings_acted_on() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/server.properties");
        let c = BrokerConfig::load(Some(Path::new(path)), &[]).unwrap();
        assert_eq!(c.unused_keys, Vec::<String>::new());
        assert_eq!(c.inert_settings(), vec![]);
    }

    #[test]
    fn inert_settings_are_named_and_typed_values_read() {
        let c = cfg(&[
            ("num.io.threads", "16"),
            ("log.preallocate", "true"),
            ("auto.create.topics.enable", "FALSE"),
        ])
        .unwrap();
        let named: Vec<_> = c.inert_settings().into_iter().map(|(k, _)| k).collect();
        assert_eq!(named, ["num.io.threads", "log.preallocate"]);
        // Kafka reads booleans ignoring case.
        assert!(!c.auto_create_topics_enable);
        let upper = cfg(&[
            ("auto.create.topics.enable", "TRUE"),
            ("log.cleaner.enable", "False"),
        ])
        .unwrap();
        assert!(upper.auto_create_topics_enable && !upper.log_cleaner.enable);
        // Every default comes from the table.
        let d = cfg(&[]).unwrap();
        assert_eq!(
            d.group_initial_rebalance_delay_ms.to_string(),
            broker_config("group.initial.rebalance.delay.ms")
                .unwrap()
                .default
        );
        assert_eq!(d.write_lease_ms, 6000);
        assert_eq!(d.write_lease_safety_margin_ms, 500);
        assert!(matches!(
            cfg(&[("log.cleaner.threads", "0")]),
            Err(ConfigError::InvalidValue { .. })
        ));
        // Dynamic-only settings are not server.properties keys.
        let t = cfg(&[("leader.replication.throttled.rate", "10")]).unwrap();
        assert_eq!(t.unused_keys, ["leader.replication.throttled.rate"]);
    }
}
