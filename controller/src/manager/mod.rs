//! The controller's decisions as pure functions of (image, event) -> (records,
//! results). No I/O here: the event loop persists the records, replays them into
//! the image and only then answers. Randomness (topic ids) is passed in.

use crate::configs::validate_topic_config;
use crate::image::MetadataImage;
use crate::records::{BrokerRecord, ConfigResource, MetadataRecord, PartitionRecord};
use strand_protocol::ErrorCode;
use uuid::Uuid;

/// Controller settings that decisions depend on.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    pub node_id: i32,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    /// Producer ids handed to a broker per AllocateProducerIds.
    pub producer_id_block_size: i64,
}

/// An error for one item of a request, as Kafka reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
        }
    }
}

pub const MAX_TOPIC_NAME_LEN: usize = 249;

/// Kafka's topic name rule: 1..=249 chars of [a-zA-Z0-9._-], not "." or "..".
pub fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    let invalid = |why: String| Err(ApiError::new(ErrorCode::InvalidTopicException, why));
    if name.is_empty() {
        return invalid("Topic name is illegal, it can't be empty".into());
    }
    if name == "." || name == ".." {
        return invalid("Topic name cannot be \".\" or \"..\"".into());
    }
    if name.len() > MAX_TOPIC_NAME_LEN {
        return invalid(format!("Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LEN} characters, topic name: {name}"));
    }
    if !name
        .bytes()
        .all(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_' || c == b'-')
    {
        return invalid(format!("Topic name {name} is illegal, it contains a character other than ASCII alphanumerics, '.', '_' and '-'"));
    }
    Ok(())
}

#[derive(Debug, Clone, Default)]
pub struct NewTopic {
    pub name: String,
    /// -1 = num.partitions
    pub num_partitions: i32,
    /// -1 = default.replication.factor
    pub replication_factor: i16,
    /// Explicit (partition, replicas); when given, the counts above must be -1.
    pub assignments: Vec<(i32, Vec<i32>)>,
    pub configs: Vec<(String, Option<String>)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTopic {
    pub name: String,
    pub topic_id: Uuid,
    pub num_partitions: i32,
    pub replication_factor: i16,
}

/// Replica assignment striped over the live brokers from `start`.
fn assign_replicas(
    brokers: &[i32],
    partitions: i32,
    rf: usize,
    start: usize,
    first_partition: i32,
) -> Vec<Vec<i32>> {
    (0..partitions)
        .map(|p| {
            let base = start + (first_partition + p) as usize;
            (0..rf)
                .map(|r| brokers[(base + r) % brokers.len()])
                .collect()
        })
        .collect()
}

fn partition_records(
    topic_id: Uuid,
    first: i32,
    replica_sets: Vec<Vec<i32>>,
) -> Vec<MetadataRecord> {
    replica_sets
        .into_iter()
        .enumerate()
        .map(|(i, replicas)| {
            MetadataRecord::Partition(PartitionRecord {
                topic_id,
                partition: first + i as i32,
                leader: replicas[0],
                isr: replicas.clone(),
                replicas,
                leader_epoch: 0,
                partition_epoch: 0,
            })
        })
        .collect()
}

fn validate_assignments(
    image: &MetadataImage,
    assignments: &[(i32, Vec<i32>)],
    first: i32,
) -> Result<Vec<Vec<i32>>, ApiError> {
    let mut sorted: Vec<_> = assignments.to_vec();
    sorted.sort_by_key(|(p, _)| *p);
    let mut out = Vec::new();
    let rf = sorted.first().map(|(_, r)| r.len()).unwrap_or(0);
    for (i, (p, replicas)) in sorted.into_iter().enumerate() {
        if p != first + i as i32 {
            return Err(ApiError::new(
                ErrorCode::InvalidReplicaAssignment,
                "Partitions should be a consecutive 0-based integer sequence",
            ));
        }
        if replicas.is_empty() || replicas.len() != rf {
            return Err(ApiError::new(
                ErrorCode::InvalidReplicaAssignment,
                "All partitions should have the same number of replicas",
            ));
        }
        let mut seen = replicas.clone();
        seen.sort();
        seen.dedup();
        if seen.len() != replicas.len() {
            return Err(ApiError::new(
                ErrorCode::InvalidReplicaAssignment,
                format!("Duplicate brokers in replica assignment {replicas:?}"),
            ));
        }
        if let Some(b) = replicas.iter().find(|b| !image.brokers.contains_key(b)) {
            return Err(ApiError::new(
                ErrorCode::InvalidReplicaAssignment,
                format!("Unknown broker {b} in replica assignment"),
            ));
        }
        out.push(replicas);
    }
    Ok(out)
}

/// CreateTopics for one topic. `topic_id` and `stripe_start` are the caller's randomness.
pub fn create_topic(
    image: &MetadataImage,
    cfg: &ControllerConfig,
    t: &NewTopic,
    topic_id: Uuid,
    stripe_start: usize,
) -> Result<(Vec<MetadataRecord>, CreatedTopic), ApiError> {
    validate_topic_name(&t.name)?;
    if image.topics.contains_key(&t.name) {
        return Err(ApiError::new(
            ErrorCode::TopicAlreadyExists,
            format!("Topic '{}' already exists.", t.name),
        ));
    }
    // Topics whose names differ only by '.' vs '_' collide in metric names.
    let collides = |n: &str| n.replace('.', "_") == t.name.replace('.', "_");
    if let Some(other) = image.topics.keys().find(|n| collides(n)) {
        return Err(ApiError::new(
            ErrorCode::InvalidTopicException,
            format!("Topic '{}' collides with existing topic: {other}", t.name),
        ));
    }
    for (name, value) in &t.configs {
        let Some(value) = value else {
            return Err(ApiError::new(
                ErrorCode::InvalidConfig,
                format!("Null value not supported for topic configs: {name}"),
            ));
        };
        validate_topic_config(name, value)
            .map_err(|m| ApiError::new(ErrorCode::InvalidConfig, m))?;
    }
    let brokers: Vec<i32> = image.brokers.keys().copied().collect();
    let replica_sets = if !t.assignments.is_empty() {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return Err(ApiError::new(ErrorCode::InvalidRequest, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time."));
        }
        validate_assignments(image, &t.assignments, 0)?
    } else {
        let partitions = if t.num_partitions == -1 {
            cfg.num_partitions
        } else {
            t.num_partitions
        };
        let rf = if t.replication_factor == -1 {
            cfg.default_replication_factor
        } else {
            t.replication_factor
        };
        if partitions <= 0 {
            return Err(ApiError::new(
                ErrorCode::InvalidPartitions,
                "Number of partitions must be larger than 0.",
            ));
        }
        if rf <= 0 {
            return Err(ApiError::new(
                ErrorCode::InvalidReplicationFactor,
                "Replication factor must be larger than 0.",
            ));
        }
        if rf as usize > brokers.len() {
            return Err(ApiError::new(
                ErrorCode::InvalidReplicationFactor,
                format!("Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {} broker(s) are registered.", brokers.len()),
            ));
        }
        assign_replicas(&brokers, partitions, rf as usize, stripe_start, 0)
    };
    let created = CreatedTopic {
        name: t.name.clone(),
        topic_id,
        num_partitions: replica_sets.len() as i32,
        replication_factor: replica_sets[0].len() as i16,
    };
    let mut records = vec![MetadataRecord::Topic {
        name: t.name.clone(),
        topic_id,
    }];
    for (name, value) in &t.configs {
        records.push(MetadataRecord::Config {
            resource: ConfigResource::Topic,
            resource_name: t.name.clone(),
            name: name.clone(),
            value: value.clone(),
        });
    }
    records.extend(partition_records(topic_id, 0, replica_sets));
    Ok((records, created))
}

/// DeleteTopics for one topic, by name.
pub fn delete_topic(
    image: &MetadataImage,
    name: &str,
) -> Result<(Vec<MetadataRecord>, Uuid), ApiError> {
    let Some(t) = image.topics.get(name) else {
        return Err(ApiError::new(
            ErrorCode::UnknownTopicOrPartition,
            "This server does not host this topic-partition.",
        ));
    };
    Ok((
        vec![MetadataRecord::RemoveTopic {
            topic_id: t.topic_id,
        }],
        t.topic_id,
    ))
}

/// CreatePartitions for one topic: grow to `count` partitions.
pub fn create_partitions(
    image: &MetadataImage,
    name: &str,
    count: i32,
    assignments: Option<&[Vec<i32>]>,
    stripe_start: usize,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let Some(t) = image.topics.get(name) else {
        return Err(ApiError::new(
            ErrorCode::UnknownTopicOrPartition,
            "This server does not host this topic-partition.",
        ));
    };
    let current = t.partitions.len() as i32;
    if count < current {
        return Err(ApiError::new(ErrorCode::InvalidPartitions, format!("Topic currently has {current} partitions, which is higher than the requested {count}.")));
    }
    if count == current {
        return Err(ApiError::new(
            ErrorCode::InvalidPartitions,
            format!("Topic already has {current} partitions."),
        ));
    }
    let rf = t.partitions.first().map(|p| p.replicas.len()).unwrap_or(1);
    let replica_sets = match assignments {
        Some(a) => {
            if a.len() as i32 != count - current {
                return Err(ApiError::new(
                    ErrorCode::InvalidReplicaAssignment,
                    format!(
                        "Increasing the number of partitions by {} but {} assignments provided.",
                        count - current,
                        a.len()
                    ),
                ));
            }
            let numbered: Vec<_> = a
                .iter()
                .enumerate()
                .map(|(i, r)| (current + i as i32, r.clone()))
                .collect();
            validate_assignments(image, &numbered, current)?
        }
        None => {
            let brokers: Vec<i32> = image.brokers.keys().copied().collect();
            if rf > brokers.len() {
                return Err(ApiError::new(
                    ErrorCode::InvalidReplicationFactor,
                    "Not enough brokers for the topic's replication factor.",
                ));
            }
            assign_replicas(&brokers, count - current, rf, stripe_start, current)
        }
    };
    Ok(partition_records(t.topic_id, current, replica_sets))
}

/// How AlterConfigs changes one config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigOp {
    Set(String),
    Delete,
    Append(String),
    Subtract(String),
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
    let mut next = if incremental {
        t.configs.clone()
    } else {
        Default::default()
    };
    for (key, op) in ops {
        let def = crate::configs::topic_config(key).ok_or_else(|| {
            ApiError::new(
                ErrorCode::InvalidConfig,
                format!("Unknown topic config name: {key}"),
            )
        })?;
        let list_op =
            |v: &str, add: bool, next: &mut crate::records::ConfigMap| -> Result<(), ApiError> {
                if def.kind != crate::configs::ConfigType::List {
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
            validate_topic_config(key, v)
                .map_err(|m| ApiError::new(ErrorCode::InvalidConfig, m))?;
        }
    }
    let mut records = Vec::new();
    for (k, v) in &next {
        if t.configs.get(k) != Some(v) {
            records.push(MetadataRecord::Config {
                resource: ConfigResource::Topic,
                resource_name: name.into(),
                name: k.clone(),
                value: Some(v.clone()),
            });
        }
    }
    for k in t.configs.keys() {
        if !next.contains_key(k) {
            records.push(MetadataRecord::Config {
                resource: ConfigResource::Topic,
                resource_name: name.into(),
                name: k.clone(),
                value: None,
            });
        }
    }
    Ok(records)
}

/// AllocateProducerIds: the next block for `broker_id`; ids never repeat
/// because the record that moves `next_producer_id` is committed before the
/// block is handed out.
pub fn allocate_producer_ids(
    image: &MetadataImage,
    cfg: &ControllerConfig,
    broker_id: i32,
) -> (Vec<MetadataRecord>, (i64, i64)) {
    let first = image.next_producer_id;
    let size = cfg.producer_id_block_size;
    (
        vec![MetadataRecord::ProducerIds {
            broker_id,
            next_producer_id: first + size,
        }],
        (first, size),
    )
}

/// Registers (or re-registers) a broker with a new epoch.
pub fn register_broker(image: &MetadataImage, mut broker: BrokerRecord) -> Vec<MetadataRecord> {
    let prev_epoch = image
        .brokers
        .get(&broker.broker_id)
        .map(|b| b.broker_epoch)
        .unwrap_or(-1);
    broker.broker_epoch = broker.broker_epoch.max(prev_epoch + 1);
    if image.brokers.get(&broker.broker_id) == Some(&broker) {
        return vec![];
    }
    vec![MetadataRecord::RegisterBroker(broker)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> ControllerConfig {
        ControllerConfig {
            node_id: 1,
            num_partitions: 4,
            default_replication_factor: 1,
            producer_id_block_size: 1000,
        }
    }

    fn image_with_brokers(ids: &[i32]) -> MetadataImage {
        let mut img = MetadataImage::default();
        for id in ids {
            img.apply(&MetadataRecord::RegisterBroker(BrokerRecord {
                broker_id: *id,
                broker_epoch: 0,
                host: "127.0.0.1".into(),
                port: 9092,
                rack: None,
            }));
        }
        img
    }

    fn apply_all(img: &mut MetadataImage, recs: &[MetadataRecord]) {
        for r in recs {
            img.apply(r);
        }
    }

    #[test]
    fn topic_name_rules() {
        let cases = [
            ("ok.topic_1-x", true),
            ("", false),
            (".", false),
            ("..", false),
            ("a b", false),
            ("ä", false),
            (&"x".repeat(249), true),
            (&"x".repeat(250), false),
        ];
        for (name, ok) in cases {
            assert_eq!(validate_topic_name(name).is_ok(), ok, "{name:?}");
        }
    }

    #[test]
    fn create_topic_defaults_and_errors() {
        let mut img = image_with_brokers(&[1]);
        let t = NewTopic {
            name: "t".into(),
            num_partitions: -1,
            replication_factor: -1,
            ..Default::default()
        };
        let id = Uuid::from_u128(7);
        let (recs, created) = create_topic(&img, &cfg(), &t, id, 0).unwrap();
        assert_eq!(created.num_partitions, 4);
        assert_eq!(created.replication_factor, 1);
        apply_all(&mut img, &recs);
        assert_eq!(img.topics["t"].partitions.len(), 4);
        assert!(img.topics["t"]
            .partitions
            .iter()
            .all(|p| p.leader == 1 && p.isr == vec![1]));

        let err = |t: NewTopic| {
            create_topic(&img, &cfg(), &t, Uuid::from_u128(8), 0)
                .unwrap_err()
                .code
        };
        assert_eq!(
            err(NewTopic {
                name: "t".into(),
                num_partitions: 1,
                replication_factor: 1,
                ..Default::default()
            }),
            ErrorCode::TopicAlreadyExists
        );
        assert_eq!(
            err(NewTopic {
                name: "u".into(),
                num_partitions: 1,
                replication_factor: 3,
                ..Default::default()
            }),
            ErrorCode::InvalidReplicationFactor
        );
        assert_eq!(
            err(NewTopic {
                name: "u".into(),
                num_partitions: 0,
                replication_factor: 1,
                ..Default::default()
            }),
            ErrorCode::InvalidPartitions
        );
        assert_eq!(
            err(NewTopic {
                name: "bad name".into(),
                num_partitions: 1,
                replication_factor: 1,
                ..Default::default()
            }),
            ErrorCode::InvalidTopicException
        );
        assert_eq!(
            err(NewTopic {
                name: "u".into(),
                num_partitions: 1,
                replication_factor: 1,
                configs: vec![("retention.ms".into(), Some("x".into()))],
                ..Default::default()
            }),
            ErrorCode::InvalidConfig
        );
        assert_eq!(
            err(NewTopic {
                name: "u".into(),
                num_partitions: -1,
                replication_factor: -1,
                assignments: vec![(0, vec![9])],
                ..Default::default()
            }),
            ErrorCode::InvalidReplicaAssignment
        );
    }

    #[test]
    fn delete_and_grow_partitions() {
        let mut img = image_with_brokers(&[1]);
        let t = NewTopic {
            name: "t".into(),
            num_partitions: 2,
            replication_factor: 1,
            ..Default::default()
        };
        let (recs, _) = create_topic(&img, &cfg(), &t, Uuid::from_u128(1), 0).unwrap();
        apply_all(&mut img, &recs);
        assert_eq!(
            create_partitions(&img, "t", 2, None, 0).unwrap_err().code,
            ErrorCode::InvalidPartitions
        );
        assert_eq!(
            create_partitions(&img, "t", 1, None, 0).unwrap_err().code,
            ErrorCode::InvalidPartitions
        );
        let recs = create_partitions(&img, "t", 5, None, 0).unwrap();
        apply_all(&mut img, &recs);
        assert_eq!(img.topics["t"].partitions.len(), 5);
        let (recs, _) = delete_topic(&img, "t").unwrap();
        apply_all(&mut img, &recs);
        assert!(img.topics.is_empty());
        assert_eq!(
            delete_topic(&img, "t").unwrap_err().code,
            ErrorCode::UnknownTopicOrPartition
        );
    }

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

    #[test]
    fn producer_id_blocks_never_overlap() {
        let mut img = image_with_brokers(&[1]);
        let mut last_end = 0;
        for _ in 0..5 {
            let (recs, (first, size)) = allocate_producer_ids(&img, &cfg(), 1);
            assert!(first >= last_end);
            last_end = first + size;
            apply_all(&mut img, &recs);
        }
        assert_eq!(img.next_producer_id, 5000);
    }
}
