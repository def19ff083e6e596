//! CreateTopics, DeleteTopics and CreatePartitions (Kafka 3.7's
//! ReplicationControlManager). New partitions get replicas from `placement`;
//! their ISR is the active replicas and their leader the first of those.

use super::common::{check_record_budget, ApiError, ControllerConfig};
use super::configs::validate_new_topic_configs;
use super::placement::{place, validate_assignments};
pub use strand_metadata::controller_api::{CreatedTopic, NewTopic};
use strand_metadata::image::MetadataImage;
use strand_metadata::records::{ConfigResource, MetadataRecord, PartitionRecord};
use strand_metadata::METADATA_TOPIC;
use strand_protocol::ErrorCode;
use strand_types::{BrokerId, LeaderEpoch, PartitionEpoch};
use uuid::Uuid;

/// Kafka's topic-name rule, answered as INVALID_TOPIC_EXCEPTION.
pub fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    strand_metadata::validate_topic_name(name)
        .map_err(|e| ApiError::new(ErrorCode::InvalidTopicException, e.to_string()))
}

/// Partition records for `replica_sets` numbered from `first`: ISR = the
/// active replicas, leader = the first of them. `manual` picks the error for
/// an all-inactive replica set.
fn partition_records(
    image: &MetadataImage,
    topic_id: Uuid,
    first: i32,
    replica_sets: Vec<Vec<BrokerId>>,
    manual: bool,
) -> Result<Vec<MetadataRecord>, ApiError> {
    replica_sets
        .into_iter()
        .enumerate()
        .map(|(i, replicas)| {
            let partition = first + i as i32;
            let isr: Vec<BrokerId> = replicas.iter().copied().filter(|&r| image.is_active(r)).collect();
            let Some(&leader) = isr.first() else {
                return Err(if manual {
                    ApiError::new(ErrorCode::InvalidReplicaAssignment, format!("All brokers specified in the manual partition assignment for partition {partition} are fenced or in controlled shutdown."))
                } else {
                    ApiError::new(ErrorCode::InvalidReplicationFactor, format!("Unable to replicate the partition {} time(s): All brokers are currently fenced or in controlled shutdown.", replicas.len()))
                });
            };
            // A broker with a single log directory has its replicas there
            // (Kafka's defaultDir); with several, the broker places them.
            let dirs: Vec<Uuid> = replicas
                .iter()
                .map(|r| match image.brokers.get(r).map(|b| b.log_dirs.as_slice()) {
                    Some([only]) => *only,
                    _ => Uuid::nil(),
                })
                .collect();
            let directories = if dirs.iter().all(Uuid::is_nil) { vec![] } else { dirs };
            Ok(MetadataRecord::Partition(PartitionRecord {
                topic_id,
                partition,
                leader: Some(leader),
                isr,
                replicas,
                directories,
                leader_epoch: LeaderEpoch::ZERO,
                partition_epoch: PartitionEpoch::ZERO,
                adding_replicas: vec![],
                removing_replicas: vec![],
            }))
        })
        .collect()
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
    if t.name == METADATA_TOPIC {
        // Its partition directory would be the metadata quorum's own.
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("Creation of internal topic {METADATA_TOPIC} is prohibited."),
        ));
    }
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
    validate_new_topic_configs(&t.configs)?;
    // A topic record, its configs and one record per partition.
    let partition_count = if t.assignments.is_empty() && t.num_partitions != -1 {
        usize::try_from(t.num_partitions).unwrap_or(0)
    } else {
        t.assignments.len()
    };
    check_record_budget(1 + t.configs.len(), partition_count)?;
    let (replica_sets, manual) = if !t.assignments.is_empty() {
        if t.num_partitions != -1 || t.replication_factor != -1 {
            return Err(ApiError::new(ErrorCode::InvalidRequest, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time."));
        }
        (validate_assignments(image, &t.assignments, 0, None)?, true)
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
        (place(image, partitions, rf, stripe_start)?, false)
    };
    // While followers do not replicate, a replica set larger than the
    // configured maximum would promise durability the broker does not give.
    if replica_sets[0].len() > cfg.max_replication_factor {
        return Err(ApiError::new(
            ErrorCode::InvalidReplicationFactor,
            format!(
                "Replication factor {} is not supported yet: partitions are not replicated in this version (use 1)",
                replica_sets[0].len()
            ),
        ));
    }
    let created = CreatedTopic {
        name: t.name.clone(),
        topic_id,
        num_partitions: replica_sets.len() as i32,
        replication_factor: replica_sets[0].len() as i16,
    };
    let partitions = partition_records(image, topic_id, 0, replica_sets, manual)?;
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
    records.extend(partitions);
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

/// CreatePartitions for one topic: grow to `count` partitions, with the
/// topic's replication factor.
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
    if count == current {
        return Err(ApiError::new(
            ErrorCode::InvalidPartitions,
            format!("Topic already has {current} partition(s)."),
        ));
    }
    if count < current {
        return Err(ApiError::new(
            ErrorCode::InvalidPartitions,
            format!("The topic {name} currently has {current} partition(s); {count} would not be an increase."),
        ));
    }
    let additional = count - current;
    check_record_budget(0, additional as usize)?;
    let rf = t.partitions.first().map(|p| p.replicas.len()).unwrap_or(1);
    let (replica_sets, manual) = match assignments {
        Some(a) => {
            if a.len() as i32 != additional {
                return Err(ApiError::new(
                    ErrorCode::InvalidReplicaAssignment,
                    format!(
                        "Attempted to add {additional} additional partition(s), but only {} assignment(s) were specified.",
                        a.len()
                    ),
                ));
            }
            let numbered: Vec<_> = a
                .iter()
                .enumerate()
                .map(|(i, r)| (current + i as i32, r.clone()))
                .collect();
            (
                validate_assignments(image, &numbered, current, Some(rf))?,
                true,
            )
        }
        None => (place(image, additional, rf as i16, stripe_start)?, false),
    };
    partition_records(image, t.topic_id, current, replica_sets, manual)
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::manager::testutil::{apply_all, b, broker, cfg, ids, image_with_brokers};

    #[test]
    fn partition_counts_past_the_record_budget_are_refused_before_placement() {
        let mut img = image_with_brokers(&[1]);
        for parts in [i32::MAX, 100_000, 10_000] {
            let t = NewTopic {
                name: "huge".into(),
                num_partitions: parts,
                replication_factor: 1,
                ..Default::default()
            };
            let err = create_topic(&img, &cfg(), &t, Uuid::from_u128(1), 0).unwrap_err();
            assert_eq!(err.code, ErrorCode::PolicyViolation, "{parts}");
        }
        // The largest that fits: a topic record and 9,999 partitions.
        let t = NewTopic {
            name: "big".into(),
            num_partitions: 9_999,
            replication_factor: 1,
            ..Default::default()
        };
        let (recs, _) = create_topic(&img, &cfg(), &t, Uuid::from_u128(2), 0).unwrap();
        assert_eq!(recs.len(), 10_000);
        apply_all(&mut img, &recs);
        let err = create_partitions(&img, "big", i32::MAX, None, 0).unwrap_err();
        assert_eq!(err.code, ErrorCode::PolicyViolation);
        assert!(create_partitions(&img, "big", 10_000, None, 0).is_ok());
        assert!(check_record_budget(usize::MAX, 1).is_err());
    }

    #[test]
    fn create_topic_defaults() {
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
            .all(|p| p.leader == Some(b(1)) && p.isr == ids(&[1])));
    }

    /// (topic, brokers 1..=3 with 3 fenced) -> error code, or Ok((replicas, isr, leader) of p0).
    #[test]
    fn create_topic_table() {
        let mut img = image_with_brokers(&[1, 2]);
        img.apply(&MetadataRecord::RegisterBroker(broker(3, None, true)));
        let (recs, _) = create_topic(
            &img,
            &cfg(),
            &NewTopic {
                name: "t".into(),
                num_partitions: 1,
                replication_factor: 1,
                ..Default::default()
            },
            Uuid::from_u128(1),
            0,
        )
        .unwrap();
        apply_all(&mut img, &recs);
        let nt = |name: &str, parts: i32, rf: i16| NewTopic {
            name: name.into(),
            num_partitions: parts,
            replication_factor: rf,
            ..Default::default()
        };
        let manual = |a: Vec<(i32, Vec<i32>)>| NewTopic {
            name: "u".into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: a,
            ..Default::default()
        };
        type Want = Result<(Vec<i32>, Vec<i32>, i32), ErrorCode>;
        let cases: Vec<(NewTopic, Want)> = vec![
            (nt("t", 1, 1), Err(ErrorCode::TopicAlreadyExists)),
            (nt("u", 1, 4), Err(ErrorCode::InvalidReplicationFactor)),
            (nt("u", 1, 0), Err(ErrorCode::InvalidReplicationFactor)),
            (nt("u", 0, 1), Err(ErrorCode::InvalidPartitions)),
            (nt("bad name", 1, 1), Err(ErrorCode::InvalidTopicException)),
            (
                NewTopic {
                    configs: vec![("retention.ms".into(), Some("x".into()))],
                    ..nt("u", 1, 1)
                },
                Err(ErrorCode::InvalidConfig),
            ),
            (
                NewTopic {
                    configs: vec![("retention.ms".into(), None)],
                    ..nt("u", 1, 1)
                },
                Err(ErrorCode::InvalidConfig),
            ),
            (
                manual(vec![(0, vec![9])]),
                Err(ErrorCode::InvalidReplicaAssignment),
            ),
            (
                manual(vec![(0, vec![3])]),
                Err(ErrorCode::InvalidReplicaAssignment),
            ),
            (
                NewTopic {
                    num_partitions: 1,
                    ..manual(vec![(0, vec![1])])
                },
                Err(ErrorCode::InvalidRequest),
            ),
            // A fenced replica is assigned but not in the ISR.
            (manual(vec![(0, vec![3, 2])]), Ok((vec![3, 2], vec![2], 2))),
            // rf 3 needs the fenced broker as a follower; it leads nothing.
            (nt("u", 1, 3), Ok((vec![1, 2, 3], vec![1, 2], 1))),
        ];
        for (i, (t, want)) in cases.into_iter().enumerate() {
            let got = create_topic(&img, &cfg(), &t, Uuid::from_u128(8), 0);
            match want {
                Err(code) => assert_eq!(got.unwrap_err().code, code, "case {i}"),
                Ok(p0) => {
                    let (recs, _) = got.unwrap();
                    let mut img = img.clone();
                    apply_all(&mut img, &recs);
                    let p = &img.topics["u"].partitions[0];
                    let (replicas, isr, leader) = p0;
                    assert_eq!(
                        (p.replicas.clone(), p.isr.clone(), p.leader),
                        (ids(&replicas), ids(&isr), Some(b(leader))),
                        "case {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn replication_limit_and_reserved_names() {
        let img = image_with_brokers(&[1, 2, 3]);
        let limited = ControllerConfig {
            max_replication_factor: 1,
            leader_balance_interval_ms: None,
            unclean_leader_election_enable: false,
            unclean_election_interval_ms: None,
            group_bounds: Default::default(),
            ..cfg()
        };
        let t = |name: &str, rf: i16| NewTopic {
            name: name.into(),
            num_partitions: 1,
            replication_factor: rf,
            ..Default::default()
        };
        let cases = [
            (t("a", 1), None),
            (t("a", 3), Some(ErrorCode::InvalidReplicationFactor)),
            (t("__cluster_metadata", 1), Some(ErrorCode::InvalidRequest)),
        ];
        for (topic, want) in cases {
            let got = create_topic(&img, &limited, &topic, Uuid::from_u128(3), 0);
            assert_eq!(got.err().map(|e| e.code), want, "{}", topic.name);
        }
    }

    /// replication_factor -1 takes default.replication.factor, and the
    /// limit applies to it as to an explicit or manual one; usize::MAX is
    /// unlimited. (default rf, max rf, requested rf or manual replicas) ->
    /// the replication factor or the error.
    #[test]
    fn replication_factor_default_and_limit_table() {
        let img = image_with_brokers(&[1, 2, 3]);
        type Case = (i16, usize, Result<i16, Vec<i32>>, Result<i16, ErrorCode>);
        use ErrorCode::InvalidReplicationFactor as Irf;
        let cases: Vec<Case> = vec![
            (3, usize::MAX, Ok(-1), Ok(3)),
            (2, usize::MAX, Ok(-1), Ok(2)),
            (2, usize::MAX, Ok(3), Ok(3)),
            (3, 3, Ok(-1), Ok(3)),
            (3, 2, Ok(-1), Err(Irf)),
            (1, 2, Ok(3), Err(Irf)),
            (1, 1, Err(vec![1, 2]), Err(Irf)),
            (1, usize::MAX, Err(vec![1, 2, 3]), Ok(3)),
            // More than the brokers, or a non-positive default.
            (4, usize::MAX, Ok(-1), Err(Irf)),
            (0, usize::MAX, Ok(-1), Err(Irf)),
        ];
        for (i, (default_rf, max, requested, want)) in cases.into_iter().enumerate() {
            let cfg = ControllerConfig {
                default_replication_factor: default_rf,
                max_replication_factor: max,
                leader_balance_interval_ms: None,
                unclean_leader_election_enable: false,
                unclean_election_interval_ms: None,
                group_bounds: Default::default(),
                ..cfg()
            };
            let t = match requested {
                Ok(rf) => NewTopic {
                    name: "t".into(),
                    num_partitions: 2,
                    replication_factor: rf,
                    ..Default::default()
                },
                Err(replicas) => NewTopic {
                    name: "t".into(),
                    num_partitions: -1,
                    replication_factor: -1,
                    assignments: vec![(0, replicas)],
                    ..Default::default()
                },
            };
            let got = create_topic(&img, &cfg, &t, Uuid::from_u128(4), 0);
            match want {
                Ok(rf) => {
                    let (recs, created) = got.unwrap_or_else(|e| panic!("case {i}: {e:?}"));
                    assert_eq!(created.replication_factor, rf, "case {i}");
                    let mut img = img.clone();
                    apply_all(&mut img, &recs);
                    assert!(img.topics["t"]
                        .partitions
                        .iter()
                        .all(|p| p.replicas.len() == rf as usize));
                }
                Err(code) => assert_eq!(got.unwrap_err().code, code, "case {i}"),
            }
        }
    }

    #[test]
    fn delete_and_grow_partitions() {
        let mut img = image_with_brokers(&[1, 2]);
        let t = NewTopic {
            name: "t".into(),
            num_partitions: 2,
            replication_factor: 2,
            ..Default::default()
        };
        let (recs, _) = create_topic(&img, &cfg(), &t, Uuid::from_u128(1), 0).unwrap();
        apply_all(&mut img, &recs);
        let cases: Vec<(i32, Option<Vec<Vec<i32>>>, ErrorCode)> = vec![
            (2, None, ErrorCode::InvalidPartitions),
            (1, None, ErrorCode::InvalidPartitions),
            (
                3,
                Some(vec![vec![1, 2], vec![2, 1]]),
                ErrorCode::InvalidReplicaAssignment,
            ),
            (3, Some(vec![vec![1]]), ErrorCode::InvalidReplicaAssignment),
            (
                3,
                Some(vec![vec![1, 1]]),
                ErrorCode::InvalidReplicaAssignment,
            ),
            (
                3,
                Some(vec![vec![1, 7]]),
                ErrorCode::InvalidReplicaAssignment,
            ),
        ];
        for (i, (count, a, code)) in cases.into_iter().enumerate() {
            assert_eq!(
                create_partitions(&img, "t", count, a.as_deref(), 0)
                    .unwrap_err()
                    .code,
                code,
                "case {i}"
            );
        }
        assert_eq!(
            create_partitions(&img, "nope", 3, None, 0)
                .unwrap_err()
                .code,
            ErrorCode::UnknownTopicOrPartition
        );
        let recs = create_partitions(&img, "t", 3, Some(&[vec![2, 1]]), 0).unwrap();
        apply_all(&mut img, &recs);
        assert_eq!(img.topics["t"].partitions[2].leader, Some(b(2)));
        let recs = create_partitions(&img, "t", 6, None, 1).unwrap();
        apply_all(&mut img, &recs);
        let parts = &img.topics["t"].partitions;
        assert_eq!(parts.len(), 6);
        assert!(parts
            .iter()
            .all(|p| p.replicas.len() == 2 && p.isr == p.replicas));
        let (recs, _) = delete_topic(&img, "t").unwrap();
        apply_all(&mut img, &recs);
        assert!(img.topics.is_empty());
        assert_eq!(
            delete_topic(&img, "t").unwrap_err().code,
            ErrorCode::UnknownTopicOrPartition
        );
    }
}
