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
