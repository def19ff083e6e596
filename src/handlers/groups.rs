//! Group coordination APIs: FindCoordinator, OffsetCommit, OffsetFetch (and,
//! with the group state machine, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! ListGroups, DescribeGroups, DeleteGroups, OffsetDelete).

use crate::broker::{now_ms, Broker};
use crate::group_coordinator::records::{self, CommittedOffset};
use crate::group_coordinator::{append_committed, GroupCoordinator, OFFSETS_TOPIC};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use strand_controller::manager::NewTopic;
use strand_protocol::ErrorCode;

const KEY_TYPE_GROUP: i8 = 0;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// The partition count of `__consumer_offsets`, creating the topic on first
/// use (offsets.topic.num.partitions, offsets.topic.replication.factor
/// clamped to the live brokers, compacted). None while it does not exist yet.
pub async fn offsets_partitions(broker: &Broker) -> Option<i32> {
    let image = broker.image();
    if let Some(t) = image.topics.get(OFFSETS_TOPIC) {
        return Some(t.partitions.len() as i32);
    }
    let live = image.brokers.values().filter(|b| b.is_active()).count().max(1);
    let rf = (broker.config.offsets_topic_replication_factor.max(1) as usize).min(live) as i16;
    let topic = NewTopic {
        name: OFFSETS_TOPIC.to_string(),
        num_partitions: broker.config.offsets_topic_num_partitions,
        replication_factor: rf,
        assignments: Vec::new(),
        configs: vec![
            ("cleanup.policy".into(), Some("compact".into())),
            ("compression.type".into(), Some("producer".into())),
            (
                "segment.bytes".into(),
                Some(broker.config.offsets_topic_segment_bytes.to_string()),
            ),
        ],
    };
    let result = broker.controller.create_topics(vec![topic], false).await;
    match result.first() {
        Some(Ok(_)) => tracing::info!(replication_factor = rf, "created {OFFSETS_TOPIC}"),
        Some(Err(e)) if e.code == ErrorCode::TopicAlreadyExists => {}
        Some(Err(e)) => tracing::warn!(error = %e.message, "cannot create {OFFSETS_TOPIC}"),
        None => {}
    }
    broker.reconcile();
    // Kafka answers COORDINATOR_NOT_AVAILABLE while the topic is being created.
    None
}

/// (node id, host, port) of the coordinator for `key`, or the error.
async fn coordinator_for(broker: &Broker, key: &str, key_type: i8) -> Result<(i32, String, i32), ErrorCode> {
    if key_type != KEY_TYPE_GROUP {
        // Transactions come with their coordinator (a later issue).
        return Err(ErrorCode::CoordinatorNotAvailable);
    }
    let partitions = offsets_partitions(broker)
        .await
        .ok_or(ErrorCode::CoordinatorNotAvailable)?;
    let index = GroupCoordinator::partition_for(key, partitions);
    let image = broker.image();
    let leader = image
        .partition(OFFSETS_TOPIC, index)
        .map(|p| p.leader)
        .filter(|l| *l >= 0)
        .ok_or(ErrorCode::CoordinatorNotAvailable)?;
    let b = image
        .brokers
        .get(&leader)
        .filter(|b| b.is_active())
        .ok_or(ErrorCode::CoordinatorNotAvailable)?;
    Ok((leader, b.host.clone(), b.port as i32))
}

pub async fn find_coordinator(
    broker: &Broker,
    req: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    if version >= 4 {
        let mut out = Vec::with_capacity(req.coordinator_keys.len());
        for key in &req.coordinator_keys {
            let mut c = Coordinator::default().with_key(key.clone());
            match coordinator_for(broker, key.as_str(), req.key_type).await {
                Ok((id, host, port)) => {
                    c.node_id = BrokerId(id);
                    c.host = s(&host);
                    c.port = port;
                }
                Err(code) => {
                    c.node_id = BrokerId(-1);
                    c.port = -1;
                    c.error_code = code.code();
                    c.error_message = Some(s(&format!("{code:?}")));
                }
            }
            out.push(c);
        }
        return FindCoordinatorResponse::default().with_coordinators(out);
    }
    let mut resp = FindCoordinatorResponse::default();
    match coordinator_for(broker, req.key.as_str(), req.key_type).await {
        Ok((id, host, port)) => {
            resp.node_id = BrokerId(id);
            resp.host = s(&host);
            resp.port = port;
        }
        Err(code) => {
            resp.node_id = BrokerId(-1);
            resp.port = -1;
            resp.error_code = code.code();
            resp.error_message = Some(s(&format!("{code:?}")));
        }
    }
    resp
}

/// The group's entry on this coordinator (created on first use when asked).
async fn group_entry(
    broker: &Broker,
    group: &str,
    create: bool,
) -> Result<Option<std::sync::Arc<crate::group_coordinator::GroupEntry>>, ErrorCode> {
    let partitions = broker
        .image()
        .topics
        .get(OFFSETS_TOPIC)
        .map(|t| t.partitions.len() as i32)
        .ok_or(ErrorCode::NotCoordinator)?;
    broker.groups.group(group, partitions, create)
}

pub async fn offset_commit(
    broker: &Broker,
    req: OffsetCommitRequest,
    _version: i16,
) -> OffsetCommitResponse {
    let group = req.group_id.0.to_string();
    let respond = |code_of: &dyn Fn(i32, &str) -> i16| {
        OffsetCommitResponse::default().with_topics(
            req.topics
                .iter()
                .map(|t| {
                    OffsetCommitResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    OffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(code_of(p.partition_index, t.name.0.as_str()))
                                })
                                .collect(),
                        )
                })
                .collect(),
        )
    };
    if group.is_empty() {
        return respond(&|_, _| ErrorCode::InvalidGroupId.code());
    }
    let entry = match group_entry(broker, &group, true).await {
        Ok(Some(e)) => e,
        Ok(None) => return respond(&|_, _| ErrorCode::NotCoordinator.code()),
        Err(code) => return respond(&|_, _| code.code()),
    };
    let now = now_ms();
    let max_meta = broker.config.offset_metadata_max_bytes;
    // Per partition: too-large metadata is refused, the rest committed.
    let mut kvs = Vec::new();
    let mut accepted: Vec<((String, i32), CommittedOffset)> = Vec::new();
    let mut slot = entry.slot.lock().await;
    if slot.unloaded {
        drop(slot);
        return respond(&|_, _| ErrorCode::NotCoordinator.code());
    }
    if let Err(code) = crate::group_coordinator::validate_commit(
        &mut slot,
        req.member_id.as_str(),
        req.generation_id_or_member_epoch,
        req.group_instance_id.as_ref().map(|s| s.as_str()),
        now,
    ) {
        drop(slot);
        return respond(&|_, _| code.code());
    }
    for t in &req.topics {
        for p in &t.partitions {
            let meta = p
                .committed_metadata
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_default();
            if meta.len() > max_meta {
                continue;
            }
            let v = CommittedOffset {
                offset: p.committed_offset,
                leader_epoch: p.committed_leader_epoch,
                metadata: meta,
                commit_timestamp_ms: now,
            };
            kvs.push((
                records::offset_key(&group, t.name.0.as_str(), p.partition_index),
                Some(records::offset_value(&v)),
            ));
            accepted.push(((t.name.0.to_string(), p.partition_index), v));
        }
    }
    drop(slot);
    let result = if kvs.is_empty() {
        Ok(())
    } else {
        match broker.partition(OFFSETS_TOPIC, entry.partition) {
            Some(p) => append_committed(&p, &kvs, broker.groups.commit_timeout()).await,
            None => Err(ErrorCode::NotCoordinator),
        }
    };
    if result.is_ok() {
        let mut slot = entry.slot.lock().await;
        for (k, v) in &accepted {
            slot.offsets.insert(k.clone(), v.clone());
        }
    }
    respond(&|index, topic| {
        let key = (topic.to_string(), index);
        if !accepted.iter().any(|(k, _)| *k == key) {
            ErrorCode::OffsetMetadataTooLarge.code()
        } else {
            strand_protocol::code(result.err())
        }
    })
}

/// Committed offsets of one group for the listed partitions (all when None).
async fn fetch_group_offsets(
    broker: &Broker,
    group: &str,
    wanted: Option<Vec<(String, Vec<i32>)>>,
) -> Result<Vec<(String, Vec<(i32, Option<CommittedOffset>)>)>, ErrorCode> {
    let entry = group_entry(broker, group, false).await?;
    let offsets = match &entry {
        Some(e) => e.slot.lock().await.offsets.clone(),
        None => Default::default(),
    };
    Ok(match wanted {
        Some(topics) => topics
            .into_iter()
            .map(|(t, parts)| {
                let ps = parts
                    .into_iter()
                    .map(|p| (p, offsets.get(&(t.clone(), p)).cloned()))
                    .collect();
                (t, ps)
            })
            .collect(),
        None => {
            let mut by_topic: Vec<(String, Vec<(i32, Option<CommittedOffset>)>)> = Vec::new();
            for ((t, p), v) in offsets {
                match by_topic.iter_mut().find(|(n, _)| *n == t) {
                    Some((_, ps)) => ps.push((p, Some(v))),
                    None => by_topic.push((t, vec![(p, Some(v))])),
                }
            }
            by_topic
        }
    })
}

pub async fn offset_fetch(
    broker: &Broker,
    req: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    if version >= 8 {
        let mut groups = Vec::with_capacity(req.groups.len());
        for g in &req.groups {
            let wanted = g.topics.as_ref().map(|ts| {
                ts.iter()
                    .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
                    .collect()
            });
            let mut rg = OffsetFetchResponseGroup::default().with_group_id(g.group_id.clone());
            match fetch_group_offsets(broker, g.group_id.0.as_str(), wanted).await {
                Ok(topics) => {
                    rg.topics = topics
                        .into_iter()
                        .map(|(t, ps)| {
                            OffsetFetchResponseTopics::default()
                                .with_name(TopicName(s(&t)))
                                .with_partitions(
                                    ps.into_iter()
                                        .map(|(p, v)| {
                                            let (o, e, m) = off_epoch_meta(&v);
                                            OffsetFetchResponsePartitions::default()
                                                .with_partition_index(p)
                                                .with_committed_offset(o)
                                                .with_committed_leader_epoch(e)
                                                .with_metadata(m)
                                        })
                                        .collect(),
                                )
                        })
                        .collect();
                }
                Err(code) => rg.error_code = code.code(),
            }
            groups.push(rg);
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let wanted = req.topics.as_ref().map(|ts| {
        ts.iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    let mut resp = OffsetFetchResponse::default();
    match fetch_group_offsets(broker, req.group_id.0.as_str(), wanted).await {
        Ok(topics) => {
            resp.topics = topics
                .into_iter()
                .map(|(t, ps)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(TopicName(s(&t)))
                        .with_partitions(
                            ps.into_iter()
                                .map(|(p, v)| {
                                    let (o, e, m) = off_epoch_meta(&v);
                                    OffsetFetchResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(o)
                                        .with_committed_leader_epoch(e)
                                        .with_metadata(m)
                                })
                                .collect(),
                        )
                })
                .collect();
        }
        Err(code) => {
            resp.error_code = code.code();
            // Before v2 the error is only per partition.
            if version < 2 {
                resp.topics = req
                    .topics
                    .iter()
                    .flatten()
                    .map(|t| {
                        OffsetFetchResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partition_indexes
                                    .iter()
                                    .map(|&p| {
                                        OffsetFetchResponsePartition::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(-1)
                                            .with_error_code(code.code())
                                    })
                                    .collect(),
                            )
                    })
                    .collect();
            }
        }
    }
    resp
}

fn off_epoch_meta(v: &Option<CommittedOffset>) -> (i64, i32, Option<StrBytes>) {
    match v {
        Some(v) => (v.offset, v.leader_epoch, Some(s(&v.metadata))),
        None => (-1, -1, Some(s(""))),
    }
}
