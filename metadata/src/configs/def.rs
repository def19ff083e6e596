//! What a config is: its type, default, bounds, update mode and support,
//! and the const builders the tables are written with.

/// Kafka's config types with their DescribeConfigs wire values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean = 1,
    String = 2,
    Int = 3,
    Short = 4,
    Long = 5,
    Double = 6,
    List = 7,
    Class = 8,
    Password = 9,
}

#[derive(Debug)]
pub struct TopicConfigDef {
    pub name: &'static str,
    /// Broker property whose value is this config's default when set.
    pub broker_synonym: Option<&'static str>,
    pub default: &'static str,
    pub kind: ConfigType,
    /// Smallest accepted numeric value, where there is one.
    pub min: Option<i64>,
    /// Accepted values for enumerations (case-sensitive, as Kafka).
    pub one_of: &'static [&'static str],
    pub doc: &'static str,
    /// Whether it changes without a restart (topic configs: per topic).
    pub update: UpdateMode,
    pub support: Support,
}

/// Whether a broker setting changes without a restart, and where it is
/// set then (Kafka's "update mode").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateMode {
    /// Read from server.properties at start-up only.
    ReadOnly,
    /// Set for one broker (for the TLS stores: as
    /// `listener.name.<listener>.<key>`).
    PerBroker,
    /// Set for one broker or for every broker.
    ClusterWide,
    /// Set for one broker or for every broker, and only so: not a
    /// server.properties key (Kafka's DynamicConfig.Broker: the throttles).
    DynamicOnly,
}

impl UpdateMode {
    /// Whether IncrementalAlterConfigs changes it on a broker resource
    /// without naming a listener.
    pub fn is_dynamic(self) -> bool {
        matches!(self, UpdateMode::ClusterWide | UpdateMode::DynamicOnly)
    }
}

/// Whether Strand acts on a setting it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    ActedOn,
    /// Accepted (Kafka's own files set it) but without effect, and why;
    /// the broker names each one given in a warning at start-up.
    NotActedOn(&'static str),
}

impl TopicConfigDef {
    pub(super) const fn at_least(self, min: i64) -> Self {
        TopicConfigDef {
            min: Some(min),
            ..self
        }
    }

    pub(super) const fn one_of(self, one_of: &'static [&'static str]) -> Self {
        TopicConfigDef { one_of, ..self }
    }

    pub(super) const fn dynamic(self, update: UpdateMode) -> Self {
        TopicConfigDef { update, ..self }
    }

    pub(super) const fn inert(self, why: &'static str) -> Self {
        TopicConfigDef {
            support: Support::NotActedOn(why),
            ..self
        }
    }
}

pub(super) const fn def(
    name: &'static str,
    broker_synonym: Option<&'static str>,
    default: &'static str,
    kind: ConfigType,
    min: Option<i64>,
    one_of: &'static [&'static str],
    doc: &'static str,
) -> TopicConfigDef {
    TopicConfigDef {
        name,
        broker_synonym,
        default,
        kind,
        min,
        one_of,
        doc,
        update: UpdateMode::ClusterWide,
        support: Support::ActedOn,
    }
}

use ConfigType::{Boolean, Class, Double, Int, List, Long, Password, Short};

/// The levels a codec takes (KIP-390): (lowest, highest, the "codec's
/// default" value outside the range, if any). gzip: 1-9 or -1 (zlib's
/// default); lz4: 1-17; zstd: zstd's negative fast levels up to 22.
fn compression_level_range(name: &str) -> Option<(i64, i64, Option<i64>)> {
    match name {
        "compression.gzip.level" => Some((1, 9, Some(-1))),
        "compression.lz4.level" => Some((1, 17, None)),
        "compression.zstd.level" => Some((-131_072, 22, None)),
        _ => None,
    }
}

fn check_compression_level(
    (low, high, special): (i64, i64, Option<i64>),
    v: i64,
) -> Result<(), String> {
    if (low..=high).contains(&v) || Some(v) == special {
        return Ok(());
    }
    Err(match special {
        Some(d) => format!("Value must be between {low} and {high} or equal to {d}"),
        None => format!("Value must be between {low} and {high}"),
    })
}

/// Checks `value` against `d`'s type, bounds and choices; the error reads
/// as Kafka's ConfigException does.
pub fn validate_value(d: &TopicConfigDef, value: &str) -> Result<(), String> {
    let bad = || format!("Invalid value {value} for configuration {}", d.name);
    if d.name.ends_with(".replication.throttled.replicas") {
        return validate_throttled_replicas(d.name, value);
    }
    match d.kind {
        Boolean => {
            if !value.eq_ignore_ascii_case("true") && !value.eq_ignore_ascii_case("false") {
                return Err(format!(
                    "{}: Expected value to be either true or false",
                    bad()
                ));
            }
        }
        Int | Long | Short => {
            let v: i64 = value.trim().parse().map_err(|_| {
                let kind = format!("{:?}", d.kind).to_uppercase();
                format!("{}: Not a number of type {kind}", bad())
            })?;
            if d.kind == Int && (v < i32::MIN as i64 || v > i32::MAX as i64) {
                return Err(format!("{}: Not a number of type INT", bad()));
            }
            if let Some(min) = d.min {
                if v < min {
                    return Err(format!("{}: Value must be at least {min}", bad()));
                }
            }
            if let Some(range) = compression_level_range(d.name) {
                check_compression_level(range, v).map_err(|m| format!("{}: {m}", bad()))?;
            }
        }
        Double => {
            value
                .trim()
                .parse::<f64>()
                .map_err(|_| format!("{}: Not a number of type DOUBLE", bad()))?;
        }
        List => {
            if !d.one_of.is_empty() {
                for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if !d.one_of.contains(&item) {
                        return Err(format!(
                            "{}: String must be one of: {}",
                            bad(),
                            d.one_of.join(", ")
                        ));
                    }
                }
            }
        }
        ConfigType::String | Class | Password => {
            if !d.one_of.is_empty() && !d.one_of.contains(&value) {
                return Err(format!(
                    "{}: String must be one of: {}",
                    bad(),
                    d.one_of.join(", ")
                ));
            }
        }
    }
    Ok(())
}

/// A throttled replica list (Kafka's ThrottledReplicaListValidator): `*`,
/// or `partition:broker` entries (each trimmed; none at all is allowed).
fn validate_throttled_replicas(name: &str, value: &str) -> Result<(), String> {
    let entry = |e: &str| {
        let e = e.trim();
        e.is_empty()
            || e.split_once(':').is_some_and(|(p, b)| {
                !p.is_empty()
                    && !b.is_empty()
                    && p.bytes().all(|c| c.is_ascii_digit())
                    && b.bytes().all(|c| c.is_ascii_digit())
            })
    };
    if value.trim() == "*" || value.split(',').all(entry) {
        return Ok(());
    }
    Err(format!(
        "Invalid value {value} for configuration {name}: {name} must be the literal '*' or a list of replicas in the following format: [partitionId]:[brokerId],[partitionId]:[brokerId],..."
    ))
}
