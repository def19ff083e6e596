//! A group's own settings: the GROUP config resource (KIP-848), Kafka
//! 4.4's group configs with the broker settings they default to. The
//! controller validates a change against them (names, types, and the
//! bounds the broker's `group.*.min/max.*` settings put on some); brokers
//! answer DescribeConfigs from them, and the consumer group coordinator
//! follows a group's session timeout and heartbeat interval.

use super::def::{def, validate_value, ConfigType, Support, TopicConfigDef};
use crate::records::ConfigMap;
use ConfigType::{Boolean, Int, List};

const STR: ConfigType = ConfigType::String;

/// Why the share and streams groups' settings do nothing.
const NO_SUCH_GROUPS: &str = "Strand has no share groups (KIP-932) or streams groups (KIP-1071)";
/// Why the offload setting does nothing.
const ON_THE_COORDINATOR: &str =
    "Strand computes target assignments on the group coordinator's task";

const fn group(
    name: &'static str,
    synonym: &'static str,
    default: &'static str,
    kind: ConfigType,
    doc: &'static str,
) -> TopicConfigDef {
    def(name, Some(synonym), default, kind, None, &[], doc)
}

const fn inert(d: TopicConfigDef, why: &'static str) -> TopicConfigDef {
    TopicConfigDef {
        support: Support::NotActedOn(why),
        ..d
    }
}

/// Kafka 4.4's group configs, sorted by name. A config whose broker
/// synonym is its own name has no broker setting behind it (Kafka lists
/// its default under its own name).
#[rustfmt::skip]
pub const GROUP_CONFIGS: &[TopicConfigDef] = &[
    group("consumer.assignment.interval.ms", "group.consumer.assignment.interval.ms", "1000", Int, "The least time between two target assignments of this consumer group."),
    inert(group("consumer.assignor.offload.enable", "group.consumer.assignor.offload.enable", "true", Boolean, "Whether this consumer group's target assignments are computed off the coordinator's thread."), ON_THE_COORDINATOR),
    group("consumer.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms", "5000", Int, "The heartbeat interval this consumer group's members are given."),
    group("consumer.session.timeout.ms", "group.consumer.session.timeout.ms", "45000", Int, "How long a member of this consumer group that stops heartbeating stays in it."),
    inert(group("errors.deadletterqueue.copy.record.enable", "errors.deadletterqueue.copy.record.enable", "false", Boolean, "Whether a streams group copies a failed record to its dead letter queue."), NO_SUCH_GROUPS),
    inert(group("errors.deadletterqueue.topic.name", "errors.deadletterqueue.topic.name", "", STR, "A streams group's dead letter queue topic."), NO_SUCH_GROUPS),
    inert(group("share.assignment.interval.ms", "group.share.assignment.interval.ms", "1000", Int, "The least time between two target assignments of this share group."), NO_SUCH_GROUPS),
    inert(group("share.auto.offset.reset", "share.auto.offset.reset", "latest", STR, "Where a share group starts on a partition it has no offset for."), NO_SUCH_GROUPS),
    inert(group("share.delivery.count.limit", "group.share.delivery.count.limit", "5", Int, "How often a share group delivers a record before it gives up on it."), NO_SUCH_GROUPS),
    inert(group("share.heartbeat.interval.ms", "group.share.heartbeat.interval.ms", "5000", Int, "The heartbeat interval this share group's members are given."), NO_SUCH_GROUPS),
    inert(def("share.isolation.level", Some("share.isolation.level"), "read_uncommitted", STR, None, &["read_committed", "read_uncommitted"], "Whether a share group reads uncommitted transactional records."), NO_SUCH_GROUPS),
    inert(group("share.partition.max.record.locks", "group.share.partition.max.record.locks", "2000", Int, "The most records of a partition a share group holds locked at once."), NO_SUCH_GROUPS),
    inert(group("share.record.lock.duration.ms", "group.share.record.lock.duration.ms", "30000", Int, "How long a share group's member holds a record it was given."), NO_SUCH_GROUPS),
    inert(group("share.renew.acknowledge.enable", "share.renew.acknowledge.enable", "true", Boolean, "Whether a share group's members may renew their record locks."), NO_SUCH_GROUPS),
    inert(group("share.session.timeout.ms", "group.share.session.timeout.ms", "45000", Int, "How long a member of this share group that stops heartbeating stays in it."), NO_SUCH_GROUPS),
    inert(group("streams.assignment.interval.ms", "group.streams.assignment.interval.ms", "1000", Int, "The least time between two target assignments of this streams group."), NO_SUCH_GROUPS),
    inert(group("streams.assignor.name", "group.streams.assignors", "sticky", STR, "The assignor of this streams group."), NO_SUCH_GROUPS),
    inert(group("streams.heartbeat.interval.ms", "group.streams.heartbeat.interval.ms", "5000", Int, "The heartbeat interval this streams group's members are given."), NO_SUCH_GROUPS),
    inert(group("streams.initial.rebalance.delay.ms", "group.streams.initial.rebalance.delay.ms", "3000", Int, "How long a new streams group waits for more members before its first assignment."), NO_SUCH_GROUPS),
    inert(group("streams.num.standby.replicas", "group.streams.num.standby.replicas", "0", Int, "The standby replicas of each of this streams group's tasks."), NO_SUCH_GROUPS),
    inert(group("streams.rack.aware.assignment.tags", "group.streams.rack.aware.assignment.tags", "", List, "The client tags a streams group spreads standby replicas over."), NO_SUCH_GROUPS),
    inert(group("streams.session.timeout.ms", "group.streams.session.timeout.ms", "45000", Int, "How long a member of this streams group that stops heartbeating stays in it."), NO_SUCH_GROUPS),
];

pub fn group_config(name: &str) -> Option<&'static TopicConfigDef> {
    GROUP_CONFIGS.iter().find(|d| d.name == name)
}

/// The group configs a broker setting bounds: (config, the setting of its
/// least value, of its largest, their Kafka defaults).
const BOUNDED: &[(&str, &str, &str, i64, i64)] = &[
    (
        "consumer.assignment.interval.ms",
        "group.consumer.min.assignment.interval.ms",
        "group.consumer.max.assignment.interval.ms",
        0,
        15_000,
    ),
    (
        "consumer.heartbeat.interval.ms",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
        5_000,
        15_000,
    ),
    (
        "consumer.session.timeout.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
        45_000,
        60_000,
    ),
    (
        "share.heartbeat.interval.ms",
        "group.share.min.heartbeat.interval.ms",
        "group.share.max.heartbeat.interval.ms",
        5_000,
        15_000,
    ),
    (
        "share.session.timeout.ms",
        "group.share.min.session.timeout.ms",
        "group.share.max.session.timeout.ms",
        45_000,
        60_000,
    ),
    (
        "streams.heartbeat.interval.ms",
        "group.streams.min.heartbeat.interval.ms",
        "group.streams.max.heartbeat.interval.ms",
        5_000,
        15_000,
    ),
    (
        "streams.session.timeout.ms",
        "group.streams.min.session.timeout.ms",
        "group.streams.max.session.timeout.ms",
        45_000,
        60_000,
    ),
];

/// The inclusive range each bounded group config must stay within, read
/// from the node's settings once (the controller validates with them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupBounds(Vec<(&'static str, i64, i64)>);

impl GroupBounds {
    /// `setting` reads a broker setting by name (None: Kafka's default).
    pub fn from_settings(setting: impl Fn(&str) -> Option<String>) -> Self {
        let num = |k: &str, d: i64| setting(k).and_then(|v| v.trim().parse().ok()).unwrap_or(d);
        GroupBounds(
            BOUNDED
                .iter()
                .map(|&(name, min, max, dmin, dmax)| (name, num(min, dmin), num(max, dmax)))
                .collect(),
        )
    }

    fn of(&self, name: &str) -> Option<(i64, i64)> {
        self.0
            .iter()
            .find(|(n, _, _)| *n == name)
            .map(|&(_, lo, hi)| (lo, hi))
    }
}

impl Default for GroupBounds {
    fn default() -> Self {
        GroupBounds::from_settings(|_| None)
    }
}

/// A group's settings after a change, checked as Kafka's controller checks
/// them: every name known, every value of its type, and the bounded ones
/// within the broker's range. The error reads as Kafka's.
pub fn validate_group_configs(configs: &ConfigMap, bounds: &GroupBounds) -> Result<(), String> {
    for name in configs.keys() {
        if group_config(name).is_none() {
            return Err(format!("Unknown group config name: {name}"));
        }
    }
    for (name, value) in configs {
        let Some(d) = group_config(name) else {
            continue;
        };
        validate_value(d, value)?;
        if let (Some((lo, hi)), Ok(v)) = (bounds.of(name), value.trim().parse::<i64>()) {
            if !(lo..=hi).contains(&v) {
                return Err(format!(
                    "{name} must be in the range {lo} to {hi} inclusive."
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    type Pair = (&'static str, &'static str);

    fn set(pairs: &[Pair]) -> ConfigMap {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn sorted_and_unique() {
        let names: Vec<_> = GROUP_CONFIGS.iter().map(|d| d.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
        for (name, ..) in BOUNDED {
            assert!(group_config(name).is_some(), "{name}");
        }
    }

    #[test]
    fn values_are_checked_against_the_brokers_bounds() {
        let kafka = GroupBounds::default();
        #[rustfmt::skip]
        let cases: &[(&[Pair], Result<(), &str>)] = &[
            (&[("consumer.session.timeout.ms", "50000")], Ok(())),
            (&[("consumer.session.timeout.ms", "45000"), ("consumer.heartbeat.interval.ms", "15000")], Ok(())),
            (&[("consumer.heartbeat.interval.ms", "4999")], Err("consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive.")),
            (&[("consumer.session.timeout.ms", "60001")], Err("consumer.session.timeout.ms must be in the range 45000 to 60000 inclusive.")),
            (&[("consumer.heartbeat.interval.ms", "often")], Err("Invalid value often for configuration consumer.heartbeat.interval.ms: Not a number of type INT")),
            (&[("no.such", "1"), ("consumer.heartbeat.interval.ms", "often")], Err("Unknown group config name: no.such")),
            (&[("share.isolation.level", "read_committed")], Ok(())),
        ];
        for (pairs, want) in cases {
            assert_eq!(
                validate_group_configs(&set(pairs), &kafka),
                want.map_err(str::to_string),
                "{pairs:?}"
            );
        }
        let wide = GroupBounds::from_settings(|k| {
            (k == "group.consumer.min.heartbeat.interval.ms").then(|| "1000".to_string())
        });
        assert_eq!(
            validate_group_configs(&set(&[("consumer.heartbeat.interval.ms", "1000")]), &wide),
            Ok(())
        );
    }
}
