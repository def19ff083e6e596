//! AlterConfigs and IncrementalAlterConfigs on topics and brokers (Kafka 3.7's
//! ConfigurationControlManager): every resulting value is validated against
//! the topic config definitions; full AlterConfigs replaces all overrides,
//! incremental applies SET / DELETE / APPEND / SUBTRACT to the current ones;
//! records are emitted only for configs whose value changes.

use super::common::ApiError;
use strand_metadata::configs::{
    validate_dynamic_broker_config, validate_group_configs, validate_topic_config, GroupBounds,
    TopicConfigDef,
};
pub use strand_metadata::controller_api::ConfigOp;
use strand_metadata::image::MetadataImage;
use strand_metadata::records::{ConfigMap, ConfigResource, MetadataRecord};
use strand_protocol::ErrorCode;

/// The configs of a CreateTopics item: known names, valid values, no nulls.
pub fn validate_new_topic_configs(configs: &[(String, Option<String>)]) -> Result<(), ApiError> {
    for (name, value) in configs {
        let Some(value) = value else {
            return Err(ApiError::new(
                ErrorCode::InvalidConfig,
                format!("Null value not supported for topic configs: {name}"),
            ));
        };
        validate_topic_config(name, value)
            .map_err(|m| ApiError::new(ErrorCode::InvalidConfig, m))?;
    }
    Ok(())
}

/// AlterConfigs (`incremental == false`: the given set replaces all overrides)
/// and IncrementalAlterConfigs for one topic.
pub fn alter_topic_configs(
    image: &MetadataImage,
    name: &str,
    ops: &[(String, ConfigOp)],
    incremental: bool,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let Some(t) = image.topics.get(name) else {
        return Err(ApiError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("Topic {name} does not exist"),
        ));
    };
    let next = apply_ops(
        &t.configs,
        ops,
        incremental,
        |key| {
            strand_metadata::configs::topic_config(key).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::InvalidConfig,
                    format!("Unknown topic config name: {key}"),
                )
            })
        },
        validate_topic_config,
    )?;
    Ok(changes(ConfigResource::Topic, name, &t.configs, &next))
}

/// AlterConfigs and IncrementalAlterConfigs on a BROKER resource: `name`
/// is a broker id (that broker's configs) or "" (every broker's default).
/// Only the configs a broker applies without a restart may be set
/// (`strand_metadata::configs::dynamic_broker_config`); the others are
/// refused as Kafka refuses them (INVALID_REQUEST, "Cannot update these
/// configs dynamically").
pub fn alter_broker_configs(
    image: &MetadataImage,
    name: &str,
    ops: &[(String, ConfigOp)],
    incremental: bool,
) -> Result<Vec<MetadataRecord>, ApiError> {
    if !name.is_empty() {
        match name.parse::<i32>() {
            Ok(id) if id < 0 => {
                return Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    "Invalid negative broker ID.",
                ))
            }
            Ok(_) => {}
            Err(_) => {
                return Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("Node id must be an integer, but it is: {name}"),
                ))
            }
        }
    }
    // A listener's key and trust stores are each broker's own.
    let per_broker: Vec<&str> = ops
        .iter()
        .map(|(k, _)| k.as_str())
        .filter(|k| strand_metadata::configs::listener_tls_key(k).is_some())
        .collect();
    if name.is_empty() && !per_broker.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!(
                "Cannot update these configs at default cluster level, broker id must be specified: [{}]",
                per_broker.join(", ")
            ),
        ));
    }
    let current = image.broker_configs.get(name).cloned().unwrap_or_default();
    let next = apply_ops(
        &current,
        ops,
        incremental,
        |key| {
            strand_metadata::configs::dynamic_broker_config(key).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("Cannot update these configs dynamically: [{key}]"),
                )
            })
        },
        validate_dynamic_broker_config,
    )
    // Kafka answers a bad broker config value INVALID_REQUEST.
    .map_err(|e| ApiError::new(ErrorCode::InvalidRequest, e.message))?;
    Ok(changes(ConfigResource::Broker, name, &current, &next))
}

/// AlterConfigs and IncrementalAlterConfigs on a GROUP resource: a
/// consumer group's own settings, whether or not the group exists (as in
/// Kafka). The result as a whole is checked (`validate_group_configs`:
/// names, types, and the ranges `bounds` holds from this node's
/// `group.*.min/max.*` settings).
pub fn alter_group_configs(
    image: &MetadataImage,
    name: &str,
    ops: &[(String, ConfigOp)],
    incremental: bool,
    bounds: &GroupBounds,
) -> Result<Vec<MetadataRecord>, ApiError> {
    if name.is_empty() {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "Default group resources are not allowed.",
        ));
    }
    let current = image.group_configs.get(name).cloned().unwrap_or_default();
    let next = apply_ops(
        &current,
        ops,
        incremental,
        |key| {
            strand_metadata::configs::group_config(key).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::InvalidConfig,
                    format!("Unknown group config name: {key}"),
                )
            })
        },
        |_, _| Ok(()),
    )?;
    validate_group_configs(&next, bounds)
        .map_err(|m| ApiError::new(ErrorCode::InvalidConfig, m))?;
    Ok(changes(ConfigResource::Group, name, &current, &next))
}

/// The configs after `ops`, each resulting value checked by `validate`;
/// `def` finds a config's definition or refuses the name.
fn apply_ops(
    current: &ConfigMap,
    ops: &[(String, ConfigOp)],
    incremental: bool,
    def: impl Fn(&str) -> Result<&'static TopicConfigDef, ApiError>,
    validate: impl Fn(&str, &str) -> Result<(), String>,
) -> Result<ConfigMap, ApiError> {
    let mut next = if incremental {
        current.clone()
    } else {
        Default::default()
    };
    for (key, op) in ops {
        let def = def(key)?;
        let list_op = |v: &str, add: bool, next: &mut ConfigMap| -> Result<(), ApiError> {
            if def.kind != strand_metadata::configs::ConfigType::List {
                return Err(ApiError::new(
                    ErrorCode::InvalidConfig,
                    format!("Config {key} is not a list: APPEND/SUBTRACT not allowed"),
                ));
            }
            let current = next
                .get(key.as_str())
                .cloned()
                .unwrap_or_else(|| def.default.to_string());
            let mut items: Vec<String> = current
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                if add {
                    if !items.iter().any(|i| i == item) {
                        items.push(item.to_string());
                    }
                } else {
                    items.retain(|i| i != item);
                }
            }
            next.insert(key.clone(), items.join(","));
            Ok(())
        };
        match op {
            ConfigOp::Set(v) => {
                next.insert(key.clone(), v.clone());
            }
            ConfigOp::Delete => {
                next.remove(key);
            }
            ConfigOp::Append(v) => list_op(v, true, &mut next)?,
            ConfigOp::Subtract(v) => list_op(v, false, &mut next)?,
        }
        if let Some(v) = next.get(key.as_str()) {
            validate(key, v).map_err(|m| ApiError::new(ErrorCode::InvalidConfig, m))?;
        }
    }
    Ok(next)
}

/// The records taking `resource` from `before` to `next`: one per config
/// whose value changes.
fn changes(
    resource: ConfigResource,
    name: &str,
    before: &ConfigMap,
    next: &ConfigMap,
) -> Vec<MetadataRecord> {
    let record = |k: &String, value: Option<&String>| MetadataRecord::Config {
        resource,
        resource_name: name.into(),
        name: k.clone(),
        value: value.cloned(),
    };
    let set = next
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(k, v)| record(k, Some(v)));
    let removed = before
        .keys()
        .filter(|k| !next.contains_key(*k))
        .map(|k| record(k, None));
    set.chain(removed).collect()
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::manager::testutil::{apply_all, cfg, image_with_brokers};
    use crate::manager::topics::{create_topic, NewTopic};
    use uuid::Uuid;

    #[test]
    fn alter_configs_full_and_incremental() {
        let mut img = image_with_brokers(&[1]);
        let t = NewTopic {
            name: "t".into(),
            num_partitions: 1,
            replication_factor: 1,
            configs: vec![("retention.ms".into(), Some("100".into()))],
            ..Default::default()
        };
        let (recs, _) = create_topic(&img, &cfg(), &t, Uuid::from_u128(1), 0).unwrap();
        apply_all(&mut img, &recs);
        // Incremental keeps retention.ms and appends to a list.
        let recs = alter_topic_configs(
            &img,
            "t",
            &[("cleanup.policy".into(), ConfigOp::Append("compact".into()))],
            true,
        )
        .unwrap();
        apply_all(&mut img, &recs);
        assert_eq!(img.topics["t"].configs["cleanup.policy"], "delete,compact");
        assert_eq!(img.topics["t"].configs["retention.ms"], "100");
        // Full replacement drops what is not given.
        let recs = alter_topic_configs(
            &img,
            "t",
            &[("segment.ms".into(), ConfigOp::Set("5000".into()))],
            false,
        )
        .unwrap();
        apply_all(&mut img, &recs);
        assert_eq!(img.topics["t"].configs.len(), 1);
        assert_eq!(img.topics["t"].configs["segment.ms"], "5000");
        assert_eq!(
            alter_topic_configs(
                &img,
                "t",
                &[("segment.ms".into(), ConfigOp::Set("x".into()))],
                true
            )
            .unwrap_err()
            .code,
            ErrorCode::InvalidConfig
        );
        assert_eq!(
            alter_topic_configs(
                &img,
                "t",
                &[("retention.ms".into(), ConfigOp::Append("1".into()))],
                true
            )
            .unwrap_err()
            .code,
            ErrorCode::InvalidConfig
        );
        assert_eq!(
            alter_topic_configs(&img, "nope", &[], true)
                .unwrap_err()
                .code,
            ErrorCode::UnknownTopicOrPartition
        );
    }

    /// (initial overrides, ops, incremental) -> resulting overrides or error.
    #[test]
    fn alter_configs_table() {
        type Want = Result<Vec<(&'static str, &'static str)>, ErrorCode>;
        let set = |k: &str, v: &str| (k.to_string(), ConfigOp::Set(v.into()));
        let del = |k: &str| (k.to_string(), ConfigOp::Delete);
        let app = |k: &str, v: &str| (k.to_string(), ConfigOp::Append(v.into()));
        let sub = |k: &str, v: &str| (k.to_string(), ConfigOp::Subtract(v.into()));
        let base: &[(&str, &str)] = &[("cleanup.policy", "compact"), ("retention.ms", "100")];
        let cases: Vec<(Vec<(String, ConfigOp)>, bool, Want)> = vec![
            (vec![], true, Ok(base.to_vec())),
            (vec![], false, Ok(vec![])),
            (
                vec![set("segment.ms", "5")],
                true,
                Ok(vec![
                    ("cleanup.policy", "compact"),
                    ("retention.ms", "100"),
                    ("segment.ms", "5"),
                ]),
            ),
            (
                vec![set("segment.ms", "5")],
                false,
                Ok(vec![("segment.ms", "5")]),
            ),
            (
                vec![del("retention.ms")],
                true,
                Ok(vec![("cleanup.policy", "compact")]),
            ),
            (vec![del("segment.ms")], true, Ok(base.to_vec())),
            (
                vec![app("cleanup.policy", "delete")],
                true,
                Ok(vec![
                    ("cleanup.policy", "compact,delete"),
                    ("retention.ms", "100"),
                ]),
            ),
            (
                vec![app("cleanup.policy", "compact")],
                true,
                Ok(base.to_vec()),
            ),
            (
                vec![sub("cleanup.policy", "compact")],
                true,
                Ok(vec![("cleanup.policy", ""), ("retention.ms", "100")]),
            ),
            (
                vec![set("retention.ms", "x")],
                true,
                Err(ErrorCode::InvalidConfig),
            ),
            (
                vec![set("no.such", "1")],
                true,
                Err(ErrorCode::InvalidConfig),
            ),
            (
                vec![app("retention.ms", "1")],
                true,
                Err(ErrorCode::InvalidConfig),
            ),
            (
                vec![app("cleanup.policy", "shred")],
                true,
                Err(ErrorCode::InvalidConfig),
            ),
            (
                vec![set("segment.ms", "5"), set("retention.ms", "-7")],
                true,
                Err(ErrorCode::InvalidConfig),
            ),
        ];
        for (i, (ops, incremental, want)) in cases.into_iter().enumerate() {
            let mut img = image_with_brokers(&[1]);
            let t = NewTopic {
                name: "t".into(),
                num_partitions: 1,
                replication_factor: 1,
                configs: base
                    .iter()
                    .map(|(k, v)| (k.to_string(), Some(v.to_string())))
                    .collect(),
                ..Default::default()
            };
            let (recs, _) = create_topic(&img, &cfg(), &t, Uuid::from_u128(1), 0).unwrap();
            apply_all(&mut img, &recs);
            match (alter_topic_configs(&img, "t", &ops, incremental), want) {
                (Ok(recs), Ok(want)) => {
                    let n = recs.len();
                    apply_all(&mut img, &recs);
                    let got: Vec<(&str, &str)> = img.topics["t"]
                        .configs
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                    assert_eq!(got, want, "case {i}");
                    // Only changed configs produce records.
                    let changed = base
                        .iter()
                        .filter(|(k, v)| !want.contains(&(*k, *v)))
                        .count()
                        + want.iter().filter(|kv| !base.contains(kv)).count();
                    assert!(n <= changed, "case {i}: {n} records for {changed} changes");
                }
                (Err(e), Err(code)) => assert_eq!(e.code, code, "case {i}"),
                (got, want) => panic!("case {i}: {got:?} vs {want:?}"),
            }
        }
    }

    #[test]
    fn new_topic_configs() {
        let cases: Vec<(Vec<(String, Option<String>)>, bool)> = vec![
            (vec![], true),
            (vec![("retention.ms".into(), Some("1".into()))], true),
            (vec![("retention.ms".into(), None)], false),
            (vec![("retention.ms".into(), Some("-3".into()))], false),
            (vec![("nope".into(), Some("1".into()))], false),
        ];
        for (i, (c, ok)) in cases.into_iter().enumerate() {
            assert_eq!(validate_new_topic_configs(&c).is_ok(), ok, "case {i}");
        }
    }

    /// BROKER resources: dynamic configs per broker and cluster-wide,
    /// static ones refused, names checked, values validated; the image
    /// keeps what was written.
    #[test]
    fn broker_configs() {
        let mut img = image_with_brokers(&[1]);
        let set = |k: &str, v: &str| (k.to_string(), ConfigOp::Set(v.into()));
        let del = |k: &str| (k.to_string(), ConfigOp::Delete);
        let code = |img: &MetadataImage, name: &str, ops: &[(String, ConfigOp)]| {
            alter_broker_configs(img, name, ops, true).map_err(|e| e.code)
        };
        use ErrorCode::*;
        // (resource, ops) -> refusal
        let refused: Vec<(&str, Vec<(String, ConfigOp)>, ErrorCode)> = vec![
            ("1", vec![set("num.io.threads", "4")], InvalidRequest),
            ("1", vec![set("no.such", "4")], InvalidRequest),
            (
                "1",
                vec![set("leader.replication.throttled.rate", "-1")],
                InvalidRequest,
            ),
            (
                "1",
                vec![set("leader.replication.throttled.rate", "1e3")],
                InvalidRequest,
            ),
            ("1", vec![set("log.retention.ms", "x")], InvalidRequest),
            ("-1", vec![set("log.retention.ms", "1")], InvalidRequest),
            ("b1", vec![set("log.retention.ms", "1")], InvalidRequest),
            (
                "",
                vec![(
                    "leader.replication.throttled.rate".into(),
                    ConfigOp::Append("1".into()),
                )],
                InvalidRequest,
            ),
        ];
        for (i, (name, ops, want)) in refused.iter().enumerate() {
            assert_eq!(code(&img, name, ops), Err(*want), "case {i}");
        }
        let recs = code(
            &img,
            "1",
            &[
                set("leader.replication.throttled.rate", "1000"),
                set("log.retention.ms", "5"),
            ],
        )
        .unwrap();
        assert_eq!(recs.len(), 2);
        apply_all(&mut img, &recs);
        let recs = code(&img, "", &[set("unclean.leader.election.enable", "true")]).unwrap();
        apply_all(&mut img, &recs);
        assert_eq!(
            img.broker_configs["1"]["leader.replication.throttled.rate"],
            "1000"
        );
        assert_eq!(
            img.broker_configs[""]["unclean.leader.election.enable"],
            "true"
        );
        // Unchanged values write nothing; deletes remove.
        assert!(code(&img, "1", &[set("log.retention.ms", "5")])
            .unwrap()
            .is_empty());
        let recs = code(&img, "1", &[del("log.retention.ms")]).unwrap();
        apply_all(&mut img, &recs);
        assert!(!img.broker_configs["1"].contains_key("log.retention.ms"));
        // The full AlterConfigs replaces the resource's set.
        let recs =
            alter_broker_configs(&img, "1", &[set("log.retention.bytes", "9")], false).unwrap();
        apply_all(&mut img, &recs);
        assert_eq!(
            img.broker_configs["1"].keys().collect::<Vec<_>>(),
            vec!["log.retention.bytes"]
        );
    }
    /// GROUP resources: a group's own settings, checked as a whole against
    /// the node's bounds; the image keeps what was written, and a group
    /// with nothing left set is no entry.
    #[test]
    fn group_configs() {
        let mut img = image_with_brokers(&[1]);
        let set = |k: &str, v: &str| (k.to_string(), ConfigOp::Set(v.into()));
        let del = |k: &str| (k.to_string(), ConfigOp::Delete);
        let bounds = GroupBounds::default();
        let alter = |img: &MetadataImage, ops: &[(String, ConfigOp)]| {
            alter_group_configs(img, "g", ops, true, &bounds).map_err(|e| (e.code, e.message))
        };
        let refused = |m: &str| Err((ErrorCode::InvalidConfig, m.to_string()));
        #[rustfmt::skip]
        let cases: Vec<(Vec<(String, ConfigOp)>, Result<usize, (ErrorCode, String)>)> = vec![
            (vec![set("consumer.heartbeat.interval.ms", "4000")], refused("consumer.heartbeat.interval.ms must be in the range 5000 to 15000 inclusive.")),
            (vec![set("no.such", "1")], refused("Unknown group config name: no.such")),
            (vec![set("group.consumer.session.timeout.ms", "50000")], refused("Unknown group config name: group.consumer.session.timeout.ms")),
            (vec![set("consumer.session.timeout.ms", "x")], refused("Invalid value x for configuration consumer.session.timeout.ms: Not a number of type INT")),
            (vec![del("consumer.session.timeout.ms")], Ok(0)),
            (vec![set("consumer.session.timeout.ms", "50000"), set("consumer.heartbeat.interval.ms", "6000")], Ok(2)),
        ];
        for (i, (ops, want)) in cases.iter().enumerate() {
            assert_eq!(alter(&img, ops).map(|r| r.len()), *want, "case {i}");
        }
        let recs = alter(&img, &cases[5].0).unwrap();
        apply_all(&mut img, &recs);
        assert_eq!(
            img.group_configs["g"]["consumer.heartbeat.interval.ms"],
            "6000"
        );
        // A change is checked with what is already set: a heartbeat
        // interval within bounds stays so with the session timeout set.
        assert!(alter(&img, &[set("consumer.session.timeout.ms", "60000")]).is_ok());
        for k in [
            "consumer.session.timeout.ms",
            "consumer.heartbeat.interval.ms",
        ] {
            let recs = alter(&img, &[del(k)]).unwrap();
            apply_all(&mut img, &recs);
        }
        assert!(!img.group_configs.contains_key("g"));
    }
}
