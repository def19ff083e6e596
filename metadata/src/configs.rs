//! Topic config definitions: Kafka 3.7's topic-level configs with their
//! defaults, types, broker-level synonyms and validation. The controller uses
//! them to validate CreateTopics/AlterConfigs; brokers use them to answer
//! DescribeConfigs and to derive each partition's log settings.

mod broker;
mod def;
mod group;
pub use broker::{broker_config, BROKER_CONFIGS};
use def::def;
pub use def::{validate_value, ConfigType, Support, TopicConfigDef, UpdateMode};
pub use group::{group_config, validate_group_configs, GroupBounds, GROUP_CONFIGS};

/// Broker settings a topic config falls back to whose Kafka default is
/// null (the value comes from another setting, or there is none): Kafka
/// lists no DEFAULT_CONFIG synonym for them, and neither does Strand.
pub const NULL_BROKER_DEFAULTS: &[&str] = &[
    "log.retention.ms",
    "log.roll.ms",
    "log.roll.jitter.ms",
    "log.flush.interval.ms",
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
];

const LMAX: &str = "9223372036854775807";

use ConfigType::{Boolean, Double, Int, List, Long};
/// Kafka 3.7's topic configs, sorted by name.
pub const TOPIC_CONFIGS: &[TopicConfigDef] = &[
    def(
        "cleanup.policy",
        Some("log.cleanup.policy"),
        "delete",
        List,
        None,
        &["delete", "compact"],
        "Retention policy: delete, compact, or both.",
    ),
    def(
        "compression.gzip.level",
        Some("compression.gzip.level"),
        "-1",
        Int,
        None,
        &[],
        "The gzip level batches are compressed with when compression.type is gzip (KIP-390).",
    ),
    def(
        "compression.lz4.level",
        Some("compression.lz4.level"),
        "9",
        Int,
        None,
        &[],
        "The lz4 level batches are compressed with when compression.type is lz4 (KIP-390).",
    ),
    def(
        "compression.type",
        Some("compression.type"),
        "producer",
        ConfigType::String,
        None,
        &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"],
        "Final compression type for the topic.",
    ),
    def(
        "compression.zstd.level",
        Some("compression.zstd.level"),
        "3",
        Int,
        None,
        &[],
        "The zstd level batches are compressed with when compression.type is zstd (KIP-390).",
    ),
    def(
        "delete.retention.ms",
        Some("log.cleaner.delete.retention.ms"),
        "86400000",
        Long,
        Some(0),
        &[],
        "How long delete tombstones are retained on compacted topics.",
    ),
    def(
        "file.delete.delay.ms",
        Some("log.segment.delete.delay.ms"),
        "60000",
        Long,
        Some(0),
        &[],
        "Delay before a deleted segment file is removed.",
    )
    .inert("deleted segments are removed at once, not renamed and kept"),
    def(
        "flush.messages",
        Some("log.flush.interval.messages"),
        LMAX,
        Long,
        Some(1),
        &[],
        "Force an fsync after this many messages.",
    ),
    def(
        "flush.ms",
        Some("log.flush.interval.ms"),
        LMAX,
        Long,
        Some(0),
        &[],
        "Force an fsync after this much time.",
    ),
    def(
        "follower.replication.throttled.replicas",
        Some("follower.replication.throttled.replicas"),
        "",
        List,
        None,
        &[],
        "Replicas throttled on the follower side.",
    ),
    def(
        "index.interval.bytes",
        Some("log.index.interval.bytes"),
        "4096",
        Int,
        Some(0),
        &[],
        "Bytes between offset index entries.",
    ),
    def(
        "leader.replication.throttled.replicas",
        Some("leader.replication.throttled.replicas"),
        "",
        List,
        None,
        &[],
        "Replicas throttled on the leader side.",
    ),
    def(
        "local.retention.bytes",
        Some("log.local.retention.bytes"),
        "-2",
        Long,
        Some(-2),
        &[],
        "Local retention bytes for tiered storage.",
    )
    .inert("there is no tiered storage"),
    def(
        "local.retention.ms",
        Some("log.local.retention.ms"),
        "-2",
        Long,
        Some(-2),
        &[],
        "Local retention time for tiered storage.",
    )
    .inert("there is no tiered storage"),
    def(
        "max.compaction.lag.ms",
        Some("log.cleaner.max.compaction.lag.ms"),
        LMAX,
        Long,
        Some(1),
        &[],
        "Maximum time a message stays uncompacted.",
    ),
    def(
        "max.message.bytes",
        Some("message.max.bytes"),
        "1048588",
        Int,
        Some(0),
        &[],
        "Largest record batch size allowed.",
    ),
    def(
        "message.downconversion.enable",
        Some("log.message.downconversion.enable"),
        "true",
        Boolean,
        None,
        &[],
        "Whether down-conversion is enabled.",
    )
    .inert("Kafka 4 removed down-conversion; Strand never down-converts"),
    def(
        "message.format.version",
        Some("log.message.format.version"),
        "3.0-IV1",
        ConfigType::String,
        None,
        &[],
        "Message format version (ignored with inter-broker protocol 3.0+).",
    )
    .inert("batches are always written in format v2"),
    def(
        "message.timestamp.after.max.ms",
        Some("log.message.timestamp.after.max.ms"),
        // Kafka 4.0 lowered it from Long.MAX to an hour (KIP-937).
        "3600000",
        Long,
        Some(0),
        &[],
        "Allowed timestamp lead over the broker's clock.",
    ),
    def(
        "message.timestamp.before.max.ms",
        Some("log.message.timestamp.before.max.ms"),
        LMAX,
        Long,
        Some(0),
        &[],
        "Allowed timestamp lag behind the broker's clock.",
    ),
    def(
        "message.timestamp.difference.max.ms",
        Some("log.message.timestamp.difference.max.ms"),
        LMAX,
        Long,
        Some(0),
        &[],
        "Deprecated: allowed timestamp difference.",
    )
    .inert("superseded by message.timestamp.before.max.ms and message.timestamp.after.max.ms"),
    def(
        "message.timestamp.type",
        Some("log.message.timestamp.type"),
        "CreateTime",
        ConfigType::String,
        None,
        &["CreateTime", "LogAppendTime"],
        "CreateTime or LogAppendTime.",
    ),
    def(
        "min.cleanable.dirty.ratio",
        Some("log.cleaner.min.cleanable.ratio"),
        "0.5",
        Double,
        None,
        &[],
        "Dirty ratio before compaction.",
    ),
    def(
        "min.compaction.lag.ms",
        Some("log.cleaner.min.compaction.lag.ms"),
        "0",
        Long,
        Some(0),
        &[],
        "Minimum time a message stays uncompacted.",
    ),
    def(
        "min.insync.replicas",
        Some("min.insync.replicas"),
        "1",
        Int,
        Some(1),
        &[],
        "Minimum in-sync replicas for acks=all.",
    ),
    def(
        "preallocate",
        Some("log.preallocate"),
        "false",
        Boolean,
        None,
        &[],
        "Preallocate segment files.",
    )
    .inert("segments grow as written"),
    def(
        "remote.storage.enable",
        None,
        "false",
        Boolean,
        None,
        &[],
        "Tiered storage for the topic.",
    )
    .inert("there is no tiered storage"),
    def(
        "retention.bytes",
        Some("log.retention.bytes"),
        "-1",
        Long,
        None,
        &[],
        "Maximum partition size before old segments are deleted.",
    ),
    def(
        "retention.ms",
        Some("log.retention.ms"),
        "604800000",
        Long,
        Some(-1),
        &[],
        "Maximum age of a segment before deletion.",
    ),
    def(
        "segment.bytes",
        Some("log.segment.bytes"),
        "1073741824",
        Int,
        Some(14),
        &[],
        "Segment file size.",
    ),
    def(
        "segment.index.bytes",
        Some("log.index.size.max.bytes"),
        "10485760",
        Int,
        Some(4),
        &[],
        "Offset index size.",
    ),
    def(
        "segment.jitter.ms",
        Some("log.roll.jitter.ms"),
        "0",
        Long,
        Some(0),
        &[],
        "Random jitter subtracted from segment.ms.",
    )
    .inert("segments roll at segment.ms exactly"),
    def(
        "segment.ms",
        Some("log.roll.ms"),
        "604800000",
        Long,
        Some(1),
        &[],
        "Time after which a segment is rolled.",
    ),
    // Strand's own (not Kafka configs): how acks=all is proven. The
    // defaults are Kafka's acks=all.
    def(
        "strand.acks.downgrade.enable",
        Some("strand.acks.downgrade.enable"),
        "false",
        Boolean,
        None,
        &[],
        "replica-count: lower the count to the in-sync replicas available, down to min.insync.replicas.",
    ),
    def(
        "strand.acks.durable",
        Some("strand.acks.durable"),
        "false",
        Boolean,
        None,
        &[],
        "Acknowledge only what the counted replicas have fsynced.",
    ),
    def(
        "strand.acks.eviction.ms",
        Some("strand.acks.eviction.ms"),
        "200",
        Long,
        Some(1),
        &[],
        "replica-count: how long a follower may hold up an acknowledgement the count already allows before it leaves the ISR.",
    ),
    def(
        "strand.acks.policy",
        Some("strand.acks.policy"),
        "all-in-sync",
        ConfigType::String,
        None,
        &["all-in-sync", "replica-count", "local-durable"],
        "How acks=all is proven: every in-sync replica holds the batch, a count of them, or the leader has fsynced it.",
    ),
    def(
        "strand.acks.replicas",
        Some("strand.acks.replicas"),
        "2",
        Int,
        Some(2),
        &[],
        "replica-count: in-sync replicas, the leader included, that must hold a batch.",
    ),
    def(
        "unclean.leader.election.enable",
        Some("unclean.leader.election.enable"),
        "false",
        Boolean,
        None,
        &[],
        "Allow out-of-sync replicas to become leader.",
    ),
];

pub fn topic_config(name: &str) -> Option<&'static TopicConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// Validates one topic config value; the error names what is wrong.
pub fn validate_topic_config(name: &str, value: &str) -> Result<(), String> {
    let Some(d) = topic_config(name) else {
        return Err(format!("Unknown topic config name: {name}"));
    };
    validate_value(d, value)
}

/// Where a config's effective value comes from, with Kafka's wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    DynamicTopic = 1,
    /// Set for this broker (IncrementalAlterConfigs on BROKER "<id>").
    DynamicBroker = 2,
    /// Set for every broker (IncrementalAlterConfigs on BROKER "").
    DynamicDefaultBroker = 3,
    StaticBroker = 4,
    Default = 5,
    /// A log level set at runtime (BROKER_LOGGER).
    DynamicBrokerLogger = 6,
    /// Set for one group (IncrementalAlterConfigs on GROUP "<id>").
    DynamicGroup = 8,
}

/// The TLS key and trust store settings Kafka changes per broker without a
/// restart, as `listener.name.<listener>.<key>` dynamic broker configs.
pub const DYNAMIC_TLS_KEYS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.key",
    "ssl.keystore.certificate.chain",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
];

/// `listener.name.<listener>.<key>` with `key` one of [`DYNAMIC_TLS_KEYS`]:
/// (listener, key).
pub fn listener_tls_key(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix("listener.name.")?;
    let (listener, key) = rest.split_once('.')?;
    (!listener.is_empty() && DYNAMIC_TLS_KEYS.contains(&key)).then_some((listener, key))
}

/// What a listener's dynamic TLS setting is checked as: any text (the
/// broker it names checks that the stores load).
static LISTENER_TLS_DEF: TopicConfigDef = def(
    "listener.name.<listener>.ssl.*",
    None,
    "",
    ConfigType::String,
    None,
    &[],
    "A listener's TLS key or trust store setting, for this broker only; new connections use it, open ones keep theirs.",
);

/// The definition a dynamic broker config is validated by: a row of
/// [`BROKER_CONFIGS`] updated cluster-wide, or the topic config whose broker synonym it
/// is (Kafka's log configs, dynamic per broker and cluster-wide). Topic
/// configs without a broker-level setting in Kafka (the throttled replica
/// lists) are not broker configs.
pub fn dynamic_broker_config(name: &str) -> Option<&'static TopicConfigDef> {
    if listener_tls_key(name).is_some() {
        return Some(&LISTENER_TLS_DEF);
    }
    BROKER_CONFIGS
        .iter()
        .find(|d| d.name == name && d.update.is_dynamic())
        .or_else(|| {
            TOPIC_CONFIGS
                .iter()
                .filter(|d| !d.name.ends_with(".replication.throttled.replicas"))
                .find(|d| d.broker_synonym == Some(name))
        })
}

/// Where a broker setting whose own default is null takes its default
/// (DescribeConfigs lists it as the DEFAULT_CONFIG synonym once any layer
/// sets the setting, as Kafka does): `log.retention.ms` from
/// `log.retention.hours`, the roll settings from their hours.
pub fn broker_default_fallback(key: &str) -> Option<(&'static str, &'static str)> {
    let fallback = match key {
        "log.retention.ms" => "log.retention.hours",
        "log.roll.ms" => "log.roll.hours",
        // Kafka's, not a setting Strand reads (segment.jitter.ms is not
        // acted on).
        "log.roll.jitter.ms" => return Some(("log.roll.jitter.hours", "0")),
        _ => return None,
    };
    broker_config(fallback).map(|d| (d.name, d.default))
}

/// Validates one dynamic broker config value.
pub fn validate_dynamic_broker_config(name: &str, value: &str) -> Result<(), String> {
    let d = dynamic_broker_config(name)
        .ok_or_else(|| format!("Cannot update these configs dynamically: [{name}]"))?;
    validate_value(d, value).map_err(|m| m.replace(d.name, name))
}

/// What a broker setting resolves through, highest first: the broker's own
/// dynamic configs, the cluster-wide dynamic ones, server.properties.
#[derive(Debug, Clone, Copy)]
pub struct BrokerLayers<'a> {
    pub broker: Option<&'a crate::records::ConfigMap>,
    pub cluster: Option<&'a crate::records::ConfigMap>,
    pub static_props: &'a std::collections::BTreeMap<String, String>,
}

impl<'a> BrokerLayers<'a> {
    /// Broker `broker_id`'s layers under `image`.
    pub fn of(
        image: &'a crate::image::MetadataImage,
        broker_id: &str,
        static_props: &'a std::collections::BTreeMap<String, String>,
    ) -> Self {
        BrokerLayers {
            broker: image.broker_configs.get(broker_id),
            cluster: image.broker_configs.get(""),
            static_props,
        }
    }

    /// server.properties alone (no dynamic configs known).
    pub fn static_only(static_props: &'a std::collections::BTreeMap<String, String>) -> Self {
        BrokerLayers {
            broker: None,
            cluster: None,
            static_props,
        }
    }

    /// The broker's value of `key` and where it comes from; None when
    /// unset at every layer.
    pub fn get(&self, key: &str) -> Option<(&'a str, ConfigSource)> {
        if let Some(v) = self.broker.and_then(|m| m.get(key)) {
            return Some((v, ConfigSource::DynamicBroker));
        }
        if let Some(v) = self.cluster.and_then(|m| m.get(key)) {
            return Some((v, ConfigSource::DynamicDefaultBroker));
        }
        self.static_props
            .get(key)
            .map(|v| (v.as_str(), ConfigSource::StaticBroker))
    }

    /// Every layer that sets `key`, highest first (DescribeConfigs' synonyms).
    pub fn all(&self, key: &str) -> Vec<(&'a str, ConfigSource)> {
        [
            (self.broker, ConfigSource::DynamicBroker),
            (self.cluster, ConfigSource::DynamicDefaultBroker),
        ]
        .into_iter()
        .filter_map(|(m, src)| m.and_then(|m| m.get(key)).map(|v| (v.as_str(), src)))
        .chain(
            self.static_props
                .get(key)
                .map(|v| (v.as_str(), ConfigSource::StaticBroker)),
        )
        .collect()
    }
}

/// Resolves a topic config: the topic's override, else the broker's
/// setting of the synonym (dynamic for the broker, dynamic for the
/// cluster, static), else the built-in default.
pub fn resolve_topic_config<'a>(
    d: &'a TopicConfigDef,
    overrides: &'a crate::records::ConfigMap,
    broker: &BrokerLayers<'a>,
) -> (&'a str, ConfigSource) {
    if let Some(v) = overrides.get(d.name) {
        return (v, ConfigSource::DynamicTopic);
    }
    if let Some(found) = d.broker_synonym.and_then(|s| broker.get(s)) {
        return found;
    }
    (d.default, ConfigSource::Default)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn configs_are_sorted_and_defaults_valid() {
        for w in TOPIC_CONFIGS.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
        for d in TOPIC_CONFIGS {
            assert_eq!(validate_value(d, d.default), Ok(()), "{}", d.name);
        }
    }

    #[test]
    fn broker_configs_are_sorted_valid_and_not_topic_synonyms() {
        for w in BROKER_CONFIGS.windows(2) {
            assert!(w[0].name < w[1].name, "{} before {}", w[0].name, w[1].name);
        }
        for d in BROKER_CONFIGS {
            // Empty: Kafka's null default.
            if !d.default.is_empty() {
                assert_eq!(validate_value(d, d.default), Ok(()), "{}", d.name);
            }
            assert!(
                !TOPIC_CONFIGS
                    .iter()
                    .any(|t| t.broker_synonym == Some(d.name)),
                "{} is a topic config's synonym: its default lives in TOPIC_CONFIGS",
                d.name
            );
            assert!(d.broker_synonym.is_none(), "{}", d.name);
        }
        assert_eq!(
            broker_default_fallback("log.retention.ms"),
            Some(("log.retention.hours", "168"))
        );
    }

    #[test]
    fn dynamic_broker_configs() {
        let cases = [
            ("leader.replication.throttled.rate", "1000", true),
            ("leader.replication.throttled.rate", "0", true),
            ("leader.replication.throttled.rate", "-1", false),
            ("follower.replication.throttled.rate", "x", false),
            ("log.retention.ms", "1000", true),
            ("log.retention.ms", "-5", false),
            ("unclean.leader.election.enable", "true", true),
            ("min.insync.replicas", "2", true),
            ("log.cleanup.policy", "compact", true),
            ("log.cleaner.threads", "0", false),
            (
                "replica.alter.log.dirs.io.max.bytes.per.second",
                "100",
                true,
            ),
            // Static, per listener only, or not a broker config.
            ("num.io.threads", "4", false),
            ("ssl.keystore.location", "/k.pem", false),
            ("leader.replication.throttled.replicas", "*", false),
            ("no.such.config", "1", false),
        ];
        for (name, value, ok) in cases {
            assert_eq!(
                validate_dynamic_broker_config(name, value).is_ok(),
                ok,
                "{name}={value}"
            );
        }
        assert_eq!(
            validate_dynamic_broker_config("log.retention.ms", "-5").unwrap_err(),
            "Invalid value -5 for configuration log.retention.ms: Value must be at least -1"
        );
    }

    #[test]
    fn validation_table() {
        let cases = [
            ("retention.ms", "1000", true),
            ("retention.ms", "-1", true),
            ("retention.ms", "-5", false),
            ("retention.ms", "abc", false),
            ("max.message.bytes", "3000000000", false),
            ("cleanup.policy", "compact,delete", true),
            ("cleanup.policy", "shred", false),
            ("message.timestamp.type", "LogAppendTime", true),
            ("message.timestamp.type", "Wallclock", false),
            ("preallocate", "TRUE", true),
            ("preallocate", "yes", false),
            ("no.such.config", "1", false),
            ("min.cleanable.dirty.ratio", "0.1", true),
            ("leader.replication.throttled.replicas", "*", true),
            ("leader.replication.throttled.replicas", "", true),
            (
                "leader.replication.throttled.replicas",
                "0:1, 1:2,0:3",
                true,
            ),
            ("follower.replication.throttled.replicas", "0:1,x", false),
            ("follower.replication.throttled.replicas", "0:-1", false),
            ("follower.replication.throttled.replicas", "*,0:1", false),
        ];
        for (name, value, ok) in cases {
            assert_eq!(
                validate_topic_config(name, value).is_ok(),
                ok,
                "{name}={value}"
            );
        }
    }

    #[test]
    fn resolution_order() {
        let d = topic_config("retention.ms").unwrap();
        let mut overrides = BTreeMap::new();
        let mut broker = BTreeMap::new();
        let mut cluster = BTreeMap::new();
        let mut this = BTreeMap::new();
        let resolve = |o: &BTreeMap<String, String>,
                       b: &BTreeMap<String, String>,
                       c: &BTreeMap<String, String>,
                       t: &BTreeMap<String, String>| {
            let layers = BrokerLayers {
                broker: Some(t),
                cluster: Some(c),
                static_props: b,
            };
            let (v, src) = resolve_topic_config(d, o, &layers);
            (v.to_string(), src)
        };
        let want = |v: &str, src| (v.to_string(), src);
        assert_eq!(
            resolve(&overrides, &broker, &cluster, &this),
            want("604800000", ConfigSource::Default)
        );
        broker.insert("log.retention.ms".to_string(), "5".to_string());
        assert_eq!(
            resolve(&overrides, &broker, &cluster, &this),
            want("5", ConfigSource::StaticBroker)
        );
        cluster.insert("log.retention.ms".to_string(), "6".to_string());
        assert_eq!(
            resolve(&overrides, &broker, &cluster, &this),
            want("6", ConfigSource::DynamicDefaultBroker)
        );
        this.insert("log.retention.ms".to_string(), "8".to_string());
        assert_eq!(
            resolve(&overrides, &broker, &cluster, &this),
            want("8", ConfigSource::DynamicBroker)
        );
        overrides.insert("retention.ms".to_string(), "7".to_string());
        assert_eq!(
            resolve(&overrides, &broker, &cluster, &this),
            want("7", ConfigSource::DynamicTopic)
        );
    }
}
