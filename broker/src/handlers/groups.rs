//! Group coordination APIs: FindCoordinator, OffsetCommit, OffsetFetch (and,
//! with the group state machine, JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
//! ListGroups, DescribeGroups, DeleteGroups, OffsetDelete).

use crate::coordinator_runtime::append_committed;
use crate::group_coordinator::{act, fire_due_timers, GroupCoordinator, GroupEntry, OFFSETS_TOPIC};
use crate::handlers::context::RequestContext;
use crate::node::Node;
use crate::replica_manager::ReplicaManager;
use crate::txn_coordinator::{TxnCoordinator, TXN_TOPIC};
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use strand_group::records::{self, CommittedOffset};
use strand_group::{JoinResponse as JoinResponseOut, Reply, SyncResponse as SyncResponseOut};
use strand_metadata::controller_api::NewTopic;
use strand_protocol::ErrorCode;

const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// The partition count of `__consumer_offsets`, creating the topic on first
/// use (offsets.topic.num.partitions, offsets.topic.replication.factor
/// clamped to the live brokers, compacted). None while it does not exist yet.
pub async fn offsets_partitions(broker: &ReplicaManager) -> Option<i32> {
    let c = &broker.config;
    internal_topic_partitions(
        broker,
        OFFSETS_TOPIC,
        c.offsets_topic_num_partitions,
        c.offsets_topic_replication_factor,
        None,
        c.offsets_topic_segment_bytes,
    )
    .await
}

/// The partition count of `__transaction_state`, creating it on first use
/// (transaction.state.log.num.partitions, replication factor clamped to the
/// live brokers, min ISR transaction.state.log.min.isr clamped to it, compacted).
pub async fn txn_partitions(broker: &ReplicaManager) -> Option<i32> {
    let c = &broker.config;
    internal_topic_partitions(
        broker,
        TXN_TOPIC,
        c.transaction_state_log_num_partitions,
        c.transaction_state_log_replication_factor,
        Some(c.transaction_state_log_min_isr),
        c.transaction_state_log_segment_bytes,
    )
    .await
}

async fn internal_topic_partitions(
    broker: &ReplicaManager,
    name: &str,
    partitions: i32,
    replication_factor: i16,
    min_isr: Option<i32>,
    segment_bytes: i64,
) -> Option<i32> {
    let image = broker.image();
    if let Some(t) = image.topics.get(name) {
        return Some(t.partitions.len() as i32);
    }
    let live = image
        .brokers
        .values()
        .filter(|b| b.is_active())
        .count()
        .max(1);
    let rf = (replication_factor.max(1) as usize).min(live) as i16;
    let mut configs = vec![
        ("cleanup.policy".into(), Some("compact".into())),
        ("compression.type".into(), Some("producer".into())),
        ("segment.bytes".into(), Some(segment_bytes.to_string())),
    ];
    if let Some(min_isr) = min_isr {
        let min_isr = min_isr.clamp(1, i32::from(rf));
        configs.push(("min.insync.replicas".into(), Some(min_isr.to_string())));
    }
    let topic = NewTopic {
        name: name.to_string(),
        num_partitions: partitions,
        replication_factor: rf,
        assignments: Vec::new(),
        configs,
    };
    let result = broker.controller.create_topics(vec![topic], false).await;
    match result.first() {
        Some(Ok(_)) => tracing::info!(replication_factor = rf, "created {name}"),
        Some(Err(e)) if e.code == ErrorCode::TopicAlreadyExists => {}
        Some(Err(e)) => tracing::warn!(error = %e.message, "cannot create {name}"),
        None => {}
    }
    broker.reconcile();
    // Kafka answers COORDINATOR_NOT_AVAILABLE while the topic is being created.
    None
}

/// (node id, host, port) of the coordinator for `key`, or the error.
async fn coordinator_for(
    broker: &ReplicaManager,
    key: &str,
    key_type: i8,
    listener: &str,
) -> Result<(i32, String, i32), ErrorCode> {
    let (topic, index) = match key_type {
        KEY_TYPE_GROUP => {
            let partitions = offsets_partitions(broker)
                .await
                .ok_or(ErrorCode::CoordinatorNotAvailable)?;
            (
                OFFSETS_TOPIC,
                GroupCoordinator::partition_for(key, partitions),
            )
        }
        KEY_TYPE_TRANSACTION => {
            let partitions = txn_partitions(broker)
                .await
                .ok_or(ErrorCode::CoordinatorNotAvailable)?;
            (TXN_TOPIC, TxnCoordinator::partition_for(key, partitions))
        }
        _ => return Err(ErrorCode::InvalidRequest),
    };
    let image = broker.image();
    let leader = image
        .partition(topic, index)
        .and_then(|p| p.leader)
        .ok_or(ErrorCode::CoordinatorNotAvailable)?;
    let b = image
        .brokers
        .get(&leader)
        .filter(|b| b.is_active())
        .ok_or(ErrorCode::CoordinatorNotAvailable)?;
    let (host, port) = b.endpoint(listener);
    Ok((leader.get(), host.to_string(), port as i32))
}

/// FindCoordinator; the coordinator's address on `listener`, the one the
/// request came in on.
pub async fn find_coordinator(
    broker: &ReplicaManager,
    req: FindCoordinatorRequest,
    version: i16,
    listener: &str,
) -> FindCoordinatorResponse {
    if version >= 4 {
        let mut out = Vec::with_capacity(req.coordinator_keys.len());
        for key in &req.coordinator_keys {
            let mut c = Coordinator::default().with_key(key.clone());
            match coordinator_for(broker, key.as_str(), req.key_type, listener).await {
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
    match coordinator_for(broker, req.key.as_str(), req.key_type, listener).await {
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
pub(crate) async fn group_entry(
    node: &Node,
    group: &str,
    create: bool,
) -> Result<Option<std::sync::Arc<crate::group_coordinator::GroupEntry>>, ErrorCode> {
    let broker = &node.broker;
    let image = broker.image();
    let partitions = image
        .topics
        .get(OFFSETS_TOPIC)
        .map(|t| t.partitions.len() as i32)
        .ok_or(ErrorCode::NotCoordinator)?;
    match node.groups.group(group, partitions, create) {
        // Led here per the image but not picked up yet (the reconcile after
        // the image change is about to start the load).
        Err(ErrorCode::NotCoordinator)
            if image
                .partition(
                    OFFSETS_TOPIC,
                    GroupCoordinator::partition_for(group, partitions),
                )
                .is_some_and(|p| p.leader == Some(broker.node_id())) =>
        {
            Err(ErrorCode::CoordinatorLoadInProgress)
        }
        other => other,
    }
}

/// What an offset commit asks for, split by Kafka's per-partition checks:
/// refused partitions (unknown, metadata too large) with their error, and the
/// records to append with the offsets they carry.
type PreparedCommits = (
    Vec<((String, i32), ErrorCode)>,
    Vec<(bytes::Bytes, Option<bytes::Bytes>)>,
    Vec<((String, i32), CommittedOffset)>,
);

/// Per-partition checks of OffsetCommit / TxnOffsetCommit over (topic,
/// partition, offset, leader epoch, metadata).
fn prepare_commits<'a>(
    group: &str,
    image: &strand_metadata::image::MetadataImage,
    max_meta: usize,
    now: i64,
    partitions: impl Iterator<Item = (&'a str, i32, i64, i32, Option<&'a StrBytes>)>,
) -> PreparedCommits {
    let (mut refused, mut kvs, mut accepted) = (Vec::new(), Vec::new(), Vec::new());
    for (topic, partition, offset, leader_epoch, metadata) in partitions {
        let meta = metadata.map(|m| m.to_string()).unwrap_or_default();
        let key = (topic.to_string(), partition);
        if image.partition(topic, partition).is_none() {
            refused.push((key, ErrorCode::UnknownTopicOrPartition));
            continue;
        }
        if meta.len() > max_meta {
            refused.push((key, ErrorCode::OffsetMetadataTooLarge));
            continue;
        }
        let v = CommittedOffset {
            offset,
            leader_epoch,
            metadata: meta,
            commit_timestamp_ms: now,
        };
        kvs.push((
            records::offset_key(group, topic, partition),
            Some(records::offset_value(&v)),
        ));
        accepted.push((key, v));
    }
    (refused, kvs, accepted)
}

/// TxnOffsetCommit: offsets committed inside a transaction are written to
/// the group's partition as the producer's transactional records and kept
/// pending until the transaction's marker lands there (visible on commit,
/// dropped on abort).
pub async fn txn_offset_commit(
    node: &Node,
    req: TxnOffsetCommitRequest,
    version: i16,
) -> TxnOffsetCommitResponse {
    let broker = &node.broker;
    let group = req.group_id.0.to_string();
    let respond = |code_of: &dyn Fn(i32, &str) -> i16| {
        TxnOffsetCommitResponse::default().with_topics(
            req.topics
                .iter()
                .map(|t| {
                    TxnOffsetCommitResponseTopic::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    TxnOffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(code_of(
                                            p.partition_index,
                                            t.name.0.as_str(),
                                        ))
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
    let entry = match group_entry(node, &group, true).await {
        Ok(Some(e)) => e,
        Ok(None) => return respond(&|_, _| ErrorCode::NotCoordinator.code()),
        Err(code) => return respond(&|_, _| code.code()),
    };
    // KIP-890: before v5 the group's partition must already be in the
    // producer's transaction (AddOffsetsToTxn), so a late or retried commit
    // cannot open a transaction nobody will end; from v5 (transaction.version
    // 2) the client sends no AddOffsetsToTxn and the group coordinator adds
    // the partition itself.
    // A transaction's records need its producer: without one there is no
    // mapping to the transactional id (as the transaction coordinator
    // answers such a commit's verification).
    let (Some(producer_id), Some(producer_epoch)) = (
        strand_types::ProducerId::from_wire(req.producer_id.0),
        strand_types::ProducerEpoch::from_wire(req.producer_epoch),
    ) else {
        let code = if req.producer_id.0 < 0 {
            ErrorCode::InvalidProducerIdMapping
        } else {
            ErrorCode::InvalidProducerEpoch
        };
        return respond(&|_, _| code.code());
    };
    if version >= 5 || broker.config.transaction_partition_verification_enable {
        if let Err(code) = node
            .txns
            .verify_in_transaction(
                &broker.image(),
                req.transactional_id.0.as_str(),
                (producer_id, producer_epoch),
                OFFSETS_TOPIC,
                entry.partition,
                version >= 5,
            )
            .await
        {
            // NOT_ENOUGH_REPLICAS is how a produce says "retry"; a commit says it so.
            let code = if code == ErrorCode::NotEnoughReplicas {
                ErrorCode::CoordinatorLoadInProgress
            } else {
                code
            };
            return respond(&|_, _| code.code());
        }
    }
    let now = node.groups.clock.now_ms();
    let max_meta = broker.config.offset_metadata_max_bytes;
    let image = broker.image();
    let mut slot = entry.slot.lock().await;
    if slot.unloaded {
        drop(slot);
        return respond(&|_, _| ErrorCode::NotCoordinator.code());
    }
    // A consumer-protocol group: the generation is the member epoch
    // (KIP-848); a transactional commit at another epoch is a zombie's,
    // answered ILLEGAL_GENERATION as Kafka answers it.
    if let Some(g) = slot.consumer.as_ref() {
        let partitions = req.topics.iter().flat_map(|t| {
            let id = topic_id(&image, &t.name);
            t.partitions.iter().map(move |p| (id, p.partition_index))
        });
        if let Err(code) =
            g.check_offset_commit(req.member_id.as_str(), req.generation_id, partitions)
        {
            let code = match code {
                ErrorCode::StaleMemberEpoch => ErrorCode::IllegalGeneration,
                other => other,
            };
            drop(slot);
            return respond(&|_, _| code.code());
        }
    } else if req.generation_id >= 0 || !req.member_id.is_empty() {
        // v3+ carries the consumer's generation: a zombie member is fenced
        // (KIP-447); without one (generation -1) only the producer epoch fences.
        if let Err(code) = crate::group_coordinator::validate_commit(
            &mut slot,
            req.member_id.as_str(),
            req.generation_id,
            req.group_instance_id.as_ref().map(|s| s.as_str()),
            now,
        ) {
            drop(slot);
            return respond(&|_, _| code.code());
        }
    }
    let (refused, kvs, accepted) = prepare_commits(
        &group,
        &image,
        max_meta,
        now,
        req.topics.iter().flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.name.0.as_str(),
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.committed_metadata.as_ref(),
                )
            })
        }),
    );
    let result = if kvs.is_empty() {
        Ok(())
    } else {
        match broker.partition(OFFSETS_TOPIC, entry.partition) {
            Some(p) => match crate::disk::run(|| {
                crate::coordinator_runtime::append_txn_records(
                    &p,
                    &kvs,
                    producer_id,
                    producer_epoch,
                )
            }) {
                Ok(outcome) => {
                    crate::coordinator_runtime::wait_committed(
                        &p,
                        &outcome,
                        node.groups.commit_timeout(),
                    )
                    .await
                }
                Err(code) => Err(code),
            },
            None => Err(ErrorCode::NotCoordinator),
        }
    };
    if result.is_ok() {
        slot.offsets.stage(producer_id, accepted);
    }
    drop(slot);
    respond(&|index, topic| {
        let key = (topic.to_string(), index);
        if let Some((_, code)) = refused.iter().find(|(k, _)| *k == key) {
            return code.code();
        }
        strand_protocol::code(result.err())
    })
}

pub async fn offset_commit(
    node: &Node,
    req: OffsetCommitRequest,
    _version: i16,
) -> OffsetCommitResponse {
    let broker = &node.broker;
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
                                        .with_error_code(code_of(
                                            p.partition_index,
                                            t.name.0.as_str(),
                                        ))
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
    let entry = match group_entry(node, &group, true).await {
        Ok(Some(e)) => e,
        Ok(None) => return respond(&|_, _| ErrorCode::NotCoordinator.code()),
        Err(code) => return respond(&|_, _| code.code()),
    };
    let now = node.groups.clock.now_ms();
    let max_meta = broker.config.offset_metadata_max_bytes;
    let image = broker.image();
    // Per partition: unknown partitions and too-large metadata are refused,
    // the rest committed.
    let mut slot = entry.slot.lock().await;
    if slot.unloaded {
        drop(slot);
        return respond(&|_, _| ErrorCode::NotCoordinator.code());
    }
    // A consumer-protocol group checks the member epoch (KIP-848,
    // KIP-1251), per the partitions committed.
    let consumer_check = slot.consumer.as_ref().map(|g| {
        let partitions = req.topics.iter().flat_map(|t| {
            let id = topic_id(&image, &t.name);
            t.partitions.iter().map(move |p| (id, p.partition_index))
        });
        g.check_offset_commit(
            req.member_id.as_str(),
            req.generation_id_or_member_epoch,
            partitions,
        )
    });
    let checked = match consumer_check {
        Some(result) => result,
        None => crate::group_coordinator::validate_commit(
            &mut slot,
            req.member_id.as_str(),
            req.generation_id_or_member_epoch,
            req.group_instance_id.as_ref().map(|s| s.as_str()),
            now,
        ),
    };
    if let Err(code) = checked {
        drop(slot);
        return respond(&|_, _| code.code());
    }
    let (refused, kvs, accepted) = prepare_commits(
        &group,
        &image,
        max_meta,
        now,
        req.topics.iter().flat_map(|t| {
            t.partitions.iter().map(|p| {
                (
                    t.name.0.as_str(),
                    p.partition_index,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.committed_metadata.as_ref(),
                )
            })
        }),
    );
    // The group stays locked until the commit is in the HW and the cache:
    // commits of one group reach the log and the cache in the same order.
    let result = if kvs.is_empty() {
        Ok(())
    } else {
        match broker.partition(OFFSETS_TOPIC, entry.partition) {
            Some(p) => append_committed(&p, &kvs, node.groups.commit_timeout()).await,
            None => Err(ErrorCode::NotCoordinator),
        }
    };
    if result.is_ok() {
        for (k, v) in &accepted {
            slot.offsets.commit([(k.clone(), v.clone())]);
        }
    }
    drop(slot);
    respond(&|index, topic| {
        let key = (topic.to_string(), index);
        match refused.iter().find(|(k, _)| *k == key) {
            Some((_, code)) => code.code(),
            None => strand_protocol::code(result.err()),
        }
    })
}

/// Committed offsets of one group for the listed partitions (all when None).
/// One partition's answer: its committed offset, or UNSTABLE_OFFSET_COMMIT
/// when a transaction holds an offset for it not yet committed and the
/// client asked for stable offsets (KIP-447).
type PartitionOffset = (i32, Option<CommittedOffset>, Option<ErrorCode>);

/// `member`: the member id and epoch of an OffsetFetch v9+, checked
/// against a consumer-protocol group (KIP-848).
async fn fetch_group_offsets(
    node: &Node,
    group: &str,
    member: Option<(Option<&str>, i32)>,
    wanted: Option<Vec<(String, Vec<i32>)>>,
    require_stable: bool,
) -> Result<Vec<(String, Vec<PartitionOffset>)>, ErrorCode> {
    let entry = group_entry(node, group, false).await?;
    let offsets = match &entry {
        Some(e) => {
            let slot = e.slot.lock().await;
            if let (Some(c), Some((id, epoch))) = (&slot.consumer, member) {
                c.check_offset_fetch(id, epoch)?;
            }
            slot.offsets.clone()
        }
        None => Default::default(),
    };
    let answer = |t: &str, p: i32| -> PartitionOffset {
        match offsets.fetch(&(t.to_string(), p), require_stable) {
            Ok(v) => (p, v.cloned(), None),
            Err(code) => (p, None, Some(code)),
        }
    };
    Ok(match wanted {
        Some(topics) => topics
            .into_iter()
            .map(|(t, parts)| {
                let ps = parts.into_iter().map(|p| answer(&t, p)).collect();
                (t, ps)
            })
            .collect(),
        None => {
            let mut by_topic: Vec<(String, Vec<PartitionOffset>)> = Vec::new();
            for (t, p) in offsets.committed().keys() {
                let a = answer(t, *p);
                let t = t.clone();
                match by_topic.iter_mut().find(|(n, _)| *n == t) {
                    Some((_, ps)) => ps.push(a),
                    None => by_topic.push((t, vec![a])),
                }
            }
            by_topic
        }
    })
}

pub async fn offset_fetch(
    node: &Node,
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
            let member = (version >= 9).then_some((g.member_id.as_deref(), g.member_epoch));
            match fetch_group_offsets(
                node,
                g.group_id.0.as_str(),
                member,
                wanted,
                req.require_stable,
            )
            .await
            {
                Ok(topics) => {
                    rg.topics = topics
                        .into_iter()
                        .map(|(t, ps)| {
                            OffsetFetchResponseTopics::default()
                                .with_name(TopicName(s(&t)))
                                .with_partitions(
                                    ps.into_iter()
                                        .map(|(p, v, err)| {
                                            let (o, e, m) = off_epoch_meta(&v);
                                            OffsetFetchResponsePartitions::default()
                                                .with_partition_index(p)
                                                .with_committed_offset(o)
                                                .with_committed_leader_epoch(e)
                                                .with_metadata(m)
                                                .with_error_code(strand_protocol::code(err))
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
    // require_stable exists from v7.
    let require_stable = version >= 7 && req.require_stable;
    match fetch_group_offsets(node, req.group_id.0.as_str(), None, wanted, require_stable).await {
        Ok(topics) => {
            resp.topics = topics
                .into_iter()
                .map(|(t, ps)| {
                    OffsetFetchResponseTopic::default()
                        .with_name(TopicName(s(&t)))
                        .with_partitions(
                            ps.into_iter()
                                .map(|(p, v, err)| {
                                    let (o, e, m) = off_epoch_meta(&v);
                                    OffsetFetchResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_committed_offset(o)
                                        .with_committed_leader_epoch(e)
                                        .with_metadata(m)
                                        .with_error_code(strand_protocol::code(err))
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

/// A topic's id in the image (nil for a topic it does not know).
fn topic_id(image: &strand_metadata::image::MetadataImage, name: &TopicName) -> uuid::Uuid {
    image
        .topics
        .get(name.0.as_str())
        .map(|t| t.topic_id)
        .unwrap_or_default()
}

fn off_epoch_meta(v: &Option<CommittedOffset>) -> (i64, i32, Option<StrBytes>) {
    match v {
        Some(v) => (v.offset, v.leader_epoch, Some(s(&v.metadata))),
        None => (-1, -1, Some(s(""))),
    }
}

fn opt(s_: &Option<String>) -> Option<StrBytes> {
    s_.as_ref().map(|v| s(v))
}

/// The partition and write timeout a group's outcome needs.
fn io_for(
    node: &Node,
    entry: &GroupEntry,
) -> (
    Option<std::sync::Arc<strand_partition::Partition>>,
    std::time::Duration,
) {
    let broker = &node.broker;
    (
        broker.partition(OFFSETS_TOPIC, entry.partition),
        node.groups.commit_timeout(),
    )
}

fn join_response(r: JoinResponseOut) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_error_code(strand_protocol::code(r.error))
        .with_generation_id(r.generation_id)
        .with_protocol_type(opt(&r.protocol_type))
        .with_protocol_name(opt(&r.protocol_name))
        .with_leader(s(&r.leader))
        .with_skip_assignment(r.skip_assignment)
        .with_member_id(s(&r.member_id))
        .with_members(
            r.members
                .into_iter()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(s(&m.member_id))
                        .with_group_instance_id(opt(&m.group_instance_id))
                        .with_metadata(m.metadata)
                })
                .collect(),
        )
}

fn join_error(member_id: &str, code: ErrorCode) -> JoinGroupResponse {
    join_response(JoinResponseOut::error(member_id.to_string(), code))
}

pub async fn join_group(
    node: &Node,
    ctx: &RequestContext,
    req: JoinGroupRequest,
) -> JoinGroupResponse {
    let mut r = join_group_answer(node, ctx, req).await;
    // ProtocolName is nullable from v7 only: before, Kafka writes an
    // unknown protocol as the empty string (null would not parse).
    if ctx.version < 7 && r.protocol_name.is_none() {
        r.protocol_name = Some(StrBytes::default());
    }
    r
}

async fn join_group_answer(
    node: &Node,
    ctx: &RequestContext,
    req: JoinGroupRequest,
) -> JoinGroupResponse {
    let version = ctx.version;
    let group_id = req.group_id.0.to_string();
    let member_id = req.member_id.to_string();
    if group_id.is_empty() {
        return join_error(&member_id, ErrorCode::InvalidGroupId);
    }
    // Only a member without an id may create the group.
    let entry = match group_entry(node, &group_id, member_id.is_empty()).await {
        Ok(Some(e)) => e,
        Ok(None) => return join_error(&member_id, ErrorCode::UnknownMemberId),
        Err(code) => return join_error(&member_id, code),
    };
    let request = strand_group::JoinRequest {
        member_id: member_id.clone(),
        group_instance_id: req.group_instance_id.as_ref().map(|v| v.to_string()),
        require_known_member_id: version >= 4,
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host.clone(),
        // v0 has no rebalance timeout: Kafka uses the session timeout.
        rebalance_timeout_ms: if version >= 1 {
            req.rebalance_timeout_ms
        } else {
            req.session_timeout_ms
        },
        session_timeout_ms: req.session_timeout_ms,
        protocol_type: req.protocol_type.to_string(),
        protocols: req
            .protocols
            .iter()
            .map(|p| strand_group::Protocol::new(p.name.to_string(), p.metadata.clone()))
            .collect(),
    };
    let client_id = ctx.client_id.clone();
    let instance = request.group_instance_id.clone();
    let now = node.groups.clock.now_ms();
    let (partition, timeout) = io_for(node, &entry);
    let rx = {
        let mut slot = entry.slot.lock().await;
        if slot.unloaded {
            return join_error(&member_id, ErrorCode::NotCoordinator);
        }
        // A consumer-protocol group: one with members takes the classic
        // member in (Kafka's online migration); an empty one becomes a
        // classic group (its records ended first).
        if let Some(c) = &slot.consumer {
            if !c.members().is_empty() {
                let c = c.clone();
                return classic_join_consumer_group(
                    node, &entry, &mut slot, c, request, version, partition,
                )
                .await;
            }
            let Ok(end) = c.end() else {
                return join_error(&member_id, ErrorCode::InconsistentGroupProtocol);
            };
            let Some(p) = partition.as_ref() else {
                return join_error(&member_id, ErrorCode::NotCoordinator);
            };
            if let Err(code) =
                crate::group_coordinator::append_consumer_records(p, &group_id, &end, timeout).await
            {
                return join_error(&member_id, code);
            }
            slot.consumer = None;
        }
        if slot.group.is_none() {
            if !member_id.is_empty() {
                return join_error(&member_id, ErrorCode::UnknownMemberId);
            }
            slot.group = Some(strand_group::Group::new(
                group_id.clone(),
                node.groups.group_config(),
                now,
            ));
        }
        // Set just above when absent.
        let group = slot.group.as_mut().expect("group present");
        let new_id = || {
            format!(
                "{}-{}",
                instance.as_deref().unwrap_or(&client_id),
                uuid::Uuid::new_v4()
            )
        };
        let (reply, outcome) = group.join(request, new_id, now);
        act(&entry, &mut slot, outcome, partition.clone(), timeout);
        let rx = match reply {
            Reply::Now(r) => return join_response(r),
            Reply::Held { member_id } => slot.hold_join(member_id),
        };
        // The join phase may already be due (no initial delay).
        fire_due_timers(&entry, &mut slot, || partition, timeout);
        rx
    };
    match rx.await {
        Ok(r) => join_response(r),
        Err(_) => join_error(&member_id, ErrorCode::CoordinatorNotAvailable),
    }
}

/// A classic JoinGroup to a consumer-protocol group with members: the
/// group's state machine takes the member in and reconciles it; its
/// records are written before the answer (generation = member epoch; the
/// broker assigns, so the member is not the leader).
async fn classic_join_consumer_group(
    node: &Node,
    entry: &std::sync::Arc<crate::group_coordinator::GroupEntry>,
    slot: &mut crate::group_coordinator::GroupSlot,
    mut group: strand_group::consumer::ConsumerGroup,
    request: strand_group::JoinRequest,
    version: i16,
    partition: Option<std::sync::Arc<strand_partition::Partition>>,
) -> JoinGroupResponse {
    use strand_group::consumer::{ClassicJoin, ClassicJoinAnswer};
    let member_id = request.member_id.clone();
    let bounds = node.groups.group_config();
    let session = i64::from(request.session_timeout_ms);
    if session < bounds.min_session_timeout_ms || session > bounds.max_session_timeout_ms {
        return join_error(&member_id, ErrorCode::InvalidSessionTimeout);
    }
    let image = node.broker.image();
    let cfg = node.groups.consumer_config_of(&image, &entry.id);
    let topics = crate::group_coordinator::consumer_topics(&image);
    let join = ClassicJoin {
        member_id: request.member_id.clone(),
        fresh_id: uuid::Uuid::new_v4().to_string(),
        instance_id: request.group_instance_id.clone(),
        requires_known_member_id: version >= 4,
        rebalance_timeout_ms: request.rebalance_timeout_ms,
        session_timeout_ms: request.session_timeout_ms,
        protocol_type: request.protocol_type.clone(),
        protocols: request
            .protocols
            .iter()
            .map(|p| (p.name.clone(), p.metadata.clone()))
            .collect(),
        client_id: request.client_id.clone(),
        client_host: request.client_host.clone(),
    };
    let now = node.groups.clock.now_ms();
    let (answer, records) = match group.classic_join(&join, &topics, &cfg, now) {
        Ok(done) => done,
        Err(e) => return join_error(&member_id, e.code),
    };
    let before = slot.consumer.replace(group);
    if let Err(code) = node
        .groups
        .write_consumer_change(entry, slot, &records, partition, vec![])
        .await
    {
        slot.consumer = before;
        return join_error(&member_id, crate::group_coordinator::written_error(code));
    }
    match answer {
        ClassicJoinAnswer::MemberIdRequired { member_id } => {
            join_error(&member_id, ErrorCode::MemberIdRequired)
        }
        ClassicJoinAnswer::Joined {
            member_id,
            generation_id,
            protocol_name,
        } => join_response(JoinResponseOut {
            error: None,
            generation_id,
            protocol_type: Some("consumer".to_string()),
            protocol_name: Some(protocol_name),
            leader: String::new(),
            skip_assignment: false,
            member_id,
            members: Vec::new(),
        }),
    }
}

fn sync_response(r: SyncResponseOut) -> SyncGroupResponse {
    SyncGroupResponse::default()
        .with_error_code(strand_protocol::code(r.error))
        .with_protocol_type(opt(&r.protocol_type))
        .with_protocol_name(opt(&r.protocol_name))
        .with_assignment(r.assignment)
}

pub async fn sync_group(node: &Node, req: SyncGroupRequest) -> SyncGroupResponse {
    let error = |code: ErrorCode| sync_response(SyncResponseOut::error(code));
    let group_id = req.group_id.0.to_string();
    if group_id.is_empty() {
        return error(ErrorCode::InvalidGroupId);
    }
    let entry = match group_entry(node, &group_id, false).await {
        Ok(Some(e)) => e,
        Ok(None) => return error(ErrorCode::UnknownMemberId),
        Err(code) => return error(code),
    };
    let request = strand_group::SyncRequest {
        member_id: req.member_id.to_string(),
        group_instance_id: req.group_instance_id.as_ref().map(|v| v.to_string()),
        generation_id: req.generation_id,
        protocol_type: req.protocol_type.as_ref().map(|v| v.to_string()),
        protocol_name: req.protocol_name.as_ref().map(|v| v.to_string()),
        assignments: req
            .assignments
            .iter()
            .map(|a| (a.member_id.to_string(), a.assignment.clone()))
            .collect(),
    };
    let (partition, timeout) = io_for(node, &entry);
    let rx = {
        let mut slot = entry.slot.lock().await;
        if slot.unloaded {
            return error(ErrorCode::NotCoordinator);
        }
        let now = node.groups.clock.now_ms();
        if let Some(c) = slot.consumer.as_mut() {
            if c.members().is_empty() {
                return error(ErrorCode::UnknownMemberId);
            }
            let topics = crate::group_coordinator::consumer_topics(&node.broker.image());
            return match c.classic_sync(
                &request.member_id,
                request.group_instance_id.as_deref(),
                request.generation_id,
                request.protocol_type.as_deref(),
                request.protocol_name.as_deref(),
                &topics,
                now,
            ) {
                Ok(assignment) => sync_response(SyncResponseOut {
                    error: None,
                    protocol_type: request.protocol_type.clone(),
                    protocol_name: request.protocol_name.clone(),
                    assignment,
                }),
                Err(e) => error(e.code),
            };
        }
        let Some(group) = slot.group.as_mut() else {
            return error(ErrorCode::UnknownMemberId);
        };
        let (reply, outcome) = group.sync(request, now);
        act(&entry, &mut slot, outcome, partition, timeout);
        match reply {
            Reply::Now(r) => return sync_response(r),
            Reply::Held { member_id } => slot.hold_sync(member_id),
        }
    };
    match rx.await {
        Ok(r) => sync_response(r),
        Err(_) => error(ErrorCode::CoordinatorNotAvailable),
    }
}

pub async fn heartbeat(node: &Node, req: HeartbeatRequest) -> HeartbeatResponse {
    let code = async {
        let group_id = req.group_id.0.to_string();
        if group_id.is_empty() {
            return Err(ErrorCode::InvalidGroupId);
        }
        let entry = group_entry(node, &group_id, false)
            .await?
            .ok_or(ErrorCode::UnknownMemberId)?;
        let mut slot = entry.slot.lock().await;
        if slot.unloaded {
            return Err(ErrorCode::NotCoordinator);
        }
        if let Some(c) = slot.consumer.as_mut() {
            return c
                .classic_heartbeat(
                    &req.member_id,
                    req.group_instance_id.as_deref(),
                    req.generation_id,
                    node.groups.clock.now_ms(),
                )
                .map_err(|e| e.code);
        }
        let group = slot.group.as_mut().ok_or(ErrorCode::UnknownMemberId)?;
        group.heartbeat(
            &strand_group::HeartbeatRequest {
                member_id: req.member_id.to_string(),
                group_instance_id: req.group_instance_id.as_ref().map(|v| v.to_string()),
                generation_id: req.generation_id,
            },
            node.groups.clock.now_ms(),
        )
    }
    .await
    .err();
    HeartbeatResponse::default().with_error_code(strand_protocol::code(code))
}

pub async fn leave_group(node: &Node, req: LeaveGroupRequest, version: i16) -> LeaveGroupResponse {
    // v0-v2: one member id; v3+: a batch.
    let leaving: Vec<strand_group::LeaveMember> = if version >= 3 {
        req.members
            .iter()
            .map(|m| strand_group::LeaveMember {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(|v| v.to_string()),
            })
            .collect()
    } else {
        vec![strand_group::LeaveMember {
            member_id: req.member_id.to_string(),
            group_instance_id: None,
        }]
    };
    let result: Result<Vec<Result<(), ErrorCode>>, ErrorCode> = async {
        let group_id = req.group_id.0.to_string();
        if group_id.is_empty() {
            return Err(ErrorCode::InvalidGroupId);
        }
        let Some(entry) = group_entry(node, &group_id, false).await? else {
            return Ok(vec![Err(ErrorCode::UnknownMemberId); leaving.len()]);
        };
        let (partition, timeout) = io_for(node, &entry);
        let mut slot = entry.slot.lock().await;
        if slot.unloaded {
            return Err(ErrorCode::NotCoordinator);
        }
        if let Some(c) = slot.consumer.as_ref() {
            let mut c = c.clone();
            let image = node.broker.image();
            let cfg = node.groups.consumer_config_of(&image, &entry.id);
            let topics = crate::group_coordinator::consumer_topics(&image);
            let named: Vec<(String, Option<String>)> = leaving
                .iter()
                .map(|m| (m.member_id.clone(), m.group_instance_id.clone()))
                .collect();
            let (result, records) = c.classic_leave(&named, &topics, &cfg);
            let before = slot.consumer.replace(c);
            if let Err(code) = node
                .groups
                .write_consumer_change(&entry, &mut slot, &records, partition, vec![])
                .await
            {
                slot.consumer = before;
                return Err(crate::group_coordinator::written_error(code));
            }
            return Ok(result);
        }
        let Some(group) = slot.group.as_mut() else {
            return Ok(vec![Err(ErrorCode::UnknownMemberId); leaving.len()]);
        };
        let (result, outcome) = group.leave(&leaving, node.groups.clock.now_ms());
        act(&entry, &mut slot, outcome, partition, timeout);
        result
    }
    .await;
    let mut resp = LeaveGroupResponse::default();
    match result {
        Err(code) => resp.error_code = code.code(),
        Ok(per_member) if version >= 3 => {
            resp.members = leaving
                .iter()
                .zip(per_member)
                .map(|(m, r)| {
                    MemberResponse::default()
                        .with_member_id(s(&m.member_id))
                        .with_group_instance_id(opt(&m.group_instance_id))
                        .with_error_code(strand_protocol::code(r.err()))
                })
                .collect();
        }
        Ok(per_member) => {
            resp.error_code = strand_protocol::code(per_member.into_iter().find_map(|r| r.err()));
        }
    }
    resp
}

pub async fn list_groups(node: &Node, req: ListGroupsRequest) -> ListGroupsResponse {
    // Filters are matched ignoring case, as Kafka does.
    let wanted = |filter: &[StrBytes], value: &str| {
        filter.is_empty()
            || filter
                .iter()
                .any(|f| f.as_str().eq_ignore_ascii_case(value))
    };
    let mut out = Vec::new();
    for entry in node.groups.all_groups() {
        let slot = entry.slot.lock().await;
        if slot.unloaded {
            continue;
        }
        let (group_type, state, protocol_type) = match (&slot.consumer, &slot.group) {
            (Some(c), _) => ("consumer", c.state().as_str(), "consumer".to_string()),
            (None, Some(g)) => {
                let o = g.overview();
                if o.state == strand_group::GroupState::Dead {
                    continue;
                }
                ("classic", o.state.as_str(), o.protocol_type)
            }
            // Offsets only (simple commits): an Empty group without a protocol.
            (None, None) => (
                "classic",
                strand_group::GroupState::Empty.as_str(),
                String::new(),
            ),
        };
        if !wanted(&req.states_filter, state) || !wanted(&req.types_filter, group_type) {
            continue;
        }
        out.push(
            ListedGroup::default()
                .with_group_id(GroupId(s(&entry.id)))
                .with_protocol_type(s(&protocol_type))
                .with_group_state(s(state))
                .with_group_type(s(group_type)),
        );
    }
    ListGroupsResponse::default().with_groups(out)
}

pub async fn describe_groups(
    node: &Node,
    req: DescribeGroupsRequest,
    version: i16,
) -> DescribeGroupsResponse {
    let mut out = Vec::with_capacity(req.groups.len());
    for gid in &req.groups {
        let id = gid.0.to_string();
        let mut d = DescribedGroup::default().with_group_id(gid.clone());
        let described = match group_entry(node, &id, false).await {
            Err(code) => {
                d.error_code = code.code();
                out.push(d);
                continue;
            }
            Ok(None) => None,
            Ok(Some(entry)) => {
                let slot = entry.slot.lock().await;
                if slot.consumer.is_some() && !slot.unloaded {
                    // As a group unknown to the classic protocol.
                    if version >= 6 {
                        d.error_code = ErrorCode::GroupIdNotFound.code();
                        d.error_message = Some(s(&format!("Group {id} is not a classic group.")));
                    }
                    d.group_state = s(strand_group::GroupState::Dead.as_str());
                    d.authorized_operations = i32::MIN;
                    out.push(d);
                    continue;
                }
                match &slot.group {
                    Some(g) if !slot.unloaded => Some(g.describe()),
                    _ if slot.unloaded => {
                        d.error_code = ErrorCode::NotCoordinator.code();
                        out.push(d);
                        continue;
                    }
                    _ => Some(strand_group::GroupDescription {
                        group_id: id.clone(),
                        state: strand_group::GroupState::Empty,
                        protocol_type: String::new(),
                        protocol: String::new(),
                        members: Vec::new(),
                    }),
                }
            }
        };
        let desc = match described {
            Some(desc) if desc.state != strand_group::GroupState::Dead => desc,
            _ => {
                // Unknown group: Dead before v6, GROUP_ID_NOT_FOUND from v6.
                if version >= 6 {
                    d.error_code = ErrorCode::GroupIdNotFound.code();
                    d.error_message = Some(s(&format!("Group {id} not found.")));
                }
                strand_group::GroupDescription::dead(id.clone())
            }
        };
        d.group_state = s(desc.state.as_str());
        d.protocol_type = s(&desc.protocol_type);
        d.protocol_data = s(&desc.protocol);
        d.authorized_operations = i32::MIN;
        d.members = desc
            .members
            .into_iter()
            .map(|m| {
                DescribedGroupMember::default()
                    .with_member_id(s(&m.member_id))
                    .with_group_instance_id(opt(&m.group_instance_id))
                    .with_client_id(s(&m.client_id))
                    .with_client_host(s(&m.client_host))
                    .with_member_metadata(m.metadata)
                    .with_member_assignment(m.assignment)
            })
            .collect();
        out.push(d);
    }
    DescribeGroupsResponse::default().with_groups(out)
}

pub async fn delete_groups(node: &Node, req: DeleteGroupsRequest) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(req.groups_names.len());
    for gid in &req.groups_names {
        let id = gid.0.to_string();
        let code = delete_group(node, &id).await.err();
        results.push(
            DeletableGroupResult::default()
                .with_group_id(gid.clone())
                .with_error_code(strand_protocol::code(code)),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}

/// DeleteGroups for one group: only an Empty group; its metadata and every
/// offset get tombstones in the log before it is dropped here.
async fn delete_group(node: &Node, id: &str) -> Result<(), ErrorCode> {
    let entry = group_entry(node, id, false)
        .await?
        .ok_or(ErrorCode::GroupIdNotFound)?;
    let mut slot = entry.slot.lock().await;
    if slot.unloaded {
        return Err(ErrorCode::NotCoordinator);
    }
    let no_offsets = slot.offsets.committed().is_empty();
    // A consumer-protocol group must be empty; its records end it.
    let consumer_end = match &slot.consumer {
        Some(c) => c.end()?,
        None => Vec::new(),
    };
    let no_consumer_group = slot.consumer.is_none();
    match slot.group.as_mut() {
        Some(g) => g.delete(node.groups.clock.now_ms())?,
        None if no_offsets && no_consumer_group => return Err(ErrorCode::GroupIdNotFound),
        None => {}
    }
    let mut kvs: Vec<(bytes::Bytes, Option<bytes::Bytes>)> = slot
        .offsets
        .committed()
        .keys()
        .map(|(t, p)| (records::offset_key(id, t, *p), None))
        .collect();
    kvs.extend(
        consumer_end
            .iter()
            .map(|r| strand_group::consumer::codec::encode(id, r)),
    );
    kvs.push((records::group_key(id), None));
    let (partition, timeout) = io_for(node, &entry);
    let partition = partition.ok_or(ErrorCode::NotCoordinator)?;
    append_committed(&partition, &kvs, timeout).await?;
    slot.offsets.clear();
    slot.consumer = None;
    drop(slot);
    node.groups.remove(&entry);
    Ok(())
}

/// Per topic, each partition's OffsetDelete outcome (None: deleted).
type OffsetDeleteOutcome = Vec<(String, Vec<(i32, Option<ErrorCode>)>)>;

pub async fn offset_delete(node: &Node, req: OffsetDeleteRequest) -> OffsetDeleteResponse {
    use kafka_protocol::messages::offset_delete_response::{
        OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
    };
    let id = req.group_id.0.to_string();
    let result: Result<OffsetDeleteOutcome, ErrorCode> = async {
        let entry = group_entry(node, &id, false)
            .await?
            .ok_or(ErrorCode::GroupIdNotFound)?;
        let mut slot = entry.slot.lock().await;
        if slot.unloaded {
            return Err(ErrorCode::NotCoordinator);
        }
        // Kafka: offsets of topics the group's consumers subscribe to cannot
        // go while it has members (only known for the "consumer" protocol).
        let subscribed_topics: std::collections::BTreeSet<String> = match &slot.group {
            Some(g) if g.state() != strand_group::GroupState::Empty => subscriptions(g),
            _ => Default::default(),
        };
        let subscribed = |topic: &str| subscribed_topics.contains(topic);
        let mut kvs = Vec::new();
        let mut out = Vec::new();
        for t in &req.topics {
            let name = t.name.0.to_string();
            let mut parts = Vec::new();
            for p in &t.partitions {
                if subscribed(&name) {
                    parts.push((p.partition_index, Some(ErrorCode::GroupSubscribedToTopic)));
                    continue;
                }
                if slot
                    .offsets
                    .get(&(name.clone(), p.partition_index))
                    .is_some()
                {
                    kvs.push((records::offset_key(&id, &name, p.partition_index), None));
                }
                parts.push((p.partition_index, None));
            }
            out.push((name, parts));
        }
        if !kvs.is_empty() {
            let (partition, timeout) = io_for(node, &entry);
            let partition = partition.ok_or(ErrorCode::NotCoordinator)?;
            append_committed(&partition, &kvs, timeout).await?;
            for (t, parts) in &out {
                for (p, e) in parts {
                    if e.is_none() {
                        slot.offsets.remove(&(t.clone(), *p));
                    }
                }
            }
        }
        Ok(out)
    }
    .await;
    match result {
        Err(code) => OffsetDeleteResponse::default().with_error_code(code.code()),
        Ok(topics) => OffsetDeleteResponse::default().with_topics(
            topics
                .into_iter()
                .map(|(t, parts)| {
                    OffsetDeleteResponseTopic::default()
                        .with_name(TopicName(s(&t)))
                        .with_partitions(
                            parts
                                .into_iter()
                                .map(|(p, e)| {
                                    OffsetDeleteResponsePartition::default()
                                        .with_partition_index(p)
                                        .with_error_code(strand_protocol::code(e))
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
    }
}

/// The topics a consumer group's members subscribe to: the topic list at the
/// head of each member's ConsumerProtocolSubscription (any version) for the
/// selected protocol. Empty for other protocol types.
fn subscriptions(group: &strand_group::Group) -> std::collections::BTreeSet<String> {
    let mut topics = std::collections::BTreeSet::new();
    if group.protocol_type() != Some("consumer") {
        return topics;
    }
    let Some(selected) = group.protocol_name() else {
        return topics;
    };
    for m in group.members() {
        if let Some(p) = m.protocols().iter().find(|p| p.name == selected) {
            topics.extend(decode_subscription_topics(&p.metadata));
        }
    }
    topics
}

/// version (i16), topics (i32 count, then i16-length strings); malformed
/// metadata yields what could be read.
fn decode_subscription_topics(mut b: &[u8]) -> Vec<String> {
    use bytes::Buf;
    let mut out = Vec::new();
    if b.remaining() < 6 {
        return out;
    }
    b.get_i16();
    let n = b.get_i32();
    for _ in 0..n.max(0) {
        if b.remaining() < 2 {
            break;
        }
        let len = b.get_i16();
        if len < 0 || b.remaining() < len as usize {
            break;
        }
        out.push(String::from_utf8_lossy(&b[..len as usize]).into_owned());
        b.advance(len as usize);
    }
    out
}

/// The topics a consumer-protocol group may subscribe to: every topic but
/// the internal ones.
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscription_topics_decode() {
        let mut b = Vec::new();
        b.extend_from_slice(&1i16.to_be_bytes());
        b.extend_from_slice(&2i32.to_be_bytes());
        for t in ["a", "topic-b"] {
            b.extend_from_slice(&(t.len() as i16).to_be_bytes());
            b.extend_from_slice(t.as_bytes());
        }
        b.extend_from_slice(&[0xff; 9]); // user data etc. follow
        assert_eq!(decode_subscription_topics(&b), vec!["a", "topic-b"]);
        for cut in 0..b.len() {
            let _ = decode_subscription_topics(&b[..cut]); // never panics
        }
        let huge = [0u8, 0, 0x7f, 0xff, 0xff, 0xff];
        assert!(decode_subscription_topics(&huge).is_empty());
    }
}
