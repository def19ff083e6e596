//! Cluster operations an operator runs: partition reassignment (KIP-455),
//! retiring a broker (UnregisterBroker), feature levels (UpdateFeatures).
//! The controller decides; these translate the wire to its requests and
//! its answers back.

use crate::replica_manager::ReplicaManager;
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use strand_metadata::controller_api::{ApiError, ReassignmentTarget};
use strand_protocol::ErrorCode;
use strand_types::BrokerId as Id;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn wire_ids(ids: &[Id]) -> Vec<BrokerId> {
    ids.iter().map(|r| BrokerId(r.get())).collect()
}

/// AlterPartitionReassignments: each partition's target goes to the
/// controller; a partition named twice is refused (INVALID_REQUEST) and
/// not sent. v1's `allow_replication_factor_change` false refuses targets
/// that change a partition's replica count (KIP-860).
pub async fn alter_partition_reassignments(
    broker: &ReplicaManager,
    req: AlterPartitionReassignmentsRequest,
    version: i16,
) -> AlterPartitionReassignmentsResponse {
    let allow_rf_change = version < 1 || req.allow_replication_factor_change;
    let mut seen = std::collections::BTreeMap::<(String, i32), usize>::new();
    for t in &req.topics {
        for p in &t.partitions {
            *seen
                .entry((t.name.0.to_string(), p.partition_index))
                .or_default() += 1;
        }
    }
    let image = broker.image();
    // Per partition: Ok(target to send) or the refusal.
    let mut decided: Vec<(String, i32, Result<ReassignmentTarget, ApiError>)> = Vec::new();
    for t in &req.topics {
        let topic = t.name.0.to_string();
        for p in &t.partitions {
            let index = p.partition_index;
            let target: Option<Vec<i32>> =
                p.replicas.as_ref().map(|r| r.iter().map(|b| b.0).collect());
            let verdict = if seen[&(topic.clone(), index)] > 1 {
                Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("Partition {topic}-{index} appears more than once in the request."),
                ))
            } else {
                match (&target, image.partition(&topic, index)) {
                    (Some(target), Some(current))
                        if !allow_rf_change && target.len() != current.target_replicas().len() =>
                    {
                        Err(ApiError::new(
                            ErrorCode::InvalidReplicationFactor,
                            format!(
                                "The replication factor is changed from {} to {}",
                                current.target_replicas().len(),
                                target.len()
                            ),
                        ))
                    }
                    _ => Ok((topic.clone(), index, target)),
                }
            };
            decided.push((topic.clone(), index, verdict));
        }
    }
    let targets: Vec<ReassignmentTarget> = decided
        .iter()
        .filter_map(|(_, _, v)| v.as_ref().ok().cloned())
        .collect();
    let mut answers = if targets.is_empty() {
        Vec::new()
    } else {
        broker
            .controller
            .alter_partition_reassignments(targets)
            .await
    }
    .into_iter();
    broker.reconcile();
    let mut out: Vec<ReassignableTopicResponse> = Vec::new();
    for (topic, index, verdict) in decided {
        let result = match verdict {
            Ok(_) => answers
                .next()
                .unwrap_or_else(|| Err(ApiError::not_controller())),
            Err(e) => Err(e),
        };
        let mut pr = ReassignablePartitionResponse::default()
            .with_partition_index(index)
            .with_error_message(None);
        if let Err(e) = result {
            pr.error_code = e.code.code();
            // Kafka sends null where its message would be the code's
            // default text (NO_REASSIGNMENT_IN_PROGRESS).
            pr.error_message = (!e.message.is_empty()).then(|| s(&e.message));
        }
        match out.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.partitions.push(pr),
            None => out.push(
                ReassignableTopicResponse::default()
                    .with_name(TopicName(s(&topic)))
                    .with_partitions(vec![pr]),
            ),
        }
    }
    // An empty request is answered at once, its message "" (not null).
    AlterPartitionReassignmentsResponse::default()
        .with_error_message(req.topics.is_empty().then(|| s("")))
        .with_allow_replication_factor_change(allow_rf_change)
        .with_responses(out)
}

/// ListPartitionReassignments, from the active controller's image.
pub async fn list_partition_reassignments(
    broker: &ReplicaManager,
    req: ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let partitions = req.topics.as_ref().map(|ts| {
        ts.iter()
            .map(|t| (t.name.0.to_string(), t.partition_indexes.clone()))
            .collect()
    });
    let ongoing = match broker
        .controller
        .list_partition_reassignments(partitions)
        .await
    {
        Ok(r) => r,
        Err(e) => {
            return ListPartitionReassignmentsResponse::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(s(&e.message)))
        }
    };
    let mut out: Vec<OngoingTopicReassignment> = Vec::new();
    for r in ongoing {
        let pr = OngoingPartitionReassignment::default()
            .with_partition_index(r.partition)
            .with_replicas(wire_ids(&r.replicas))
            .with_adding_replicas(wire_ids(&r.adding))
            .with_removing_replicas(wire_ids(&r.removing));
        match out.iter_mut().find(|t| t.name.0.as_str() == r.topic) {
            Some(t) => t.partitions.push(pr),
            None => out.push(
                OngoingTopicReassignment::default()
                    .with_name(TopicName(s(&r.topic)))
                    .with_partitions(vec![pr]),
            ),
        }
    }
    ListPartitionReassignmentsResponse::default()
        .with_error_message(None)
        .with_topics(out)
}

/// UnregisterBroker: the controller removes a stopped broker's registration.
pub async fn unregister_broker(
    broker: &ReplicaManager,
    req: UnregisterBrokerRequest,
) -> UnregisterBrokerResponse {
    let Some(id) = Id::from_wire(req.broker_id.0) else {
        return UnregisterBrokerResponse::default()
            .with_error_code(ErrorCode::BrokerIdNotRegistered.code())
            .with_error_message(Some(s(&format!(
                "Broker ID {} is not currently registered",
                req.broker_id.0
            ))));
    };
    match broker.controller.unregister_broker(id).await {
        Ok(()) => UnregisterBrokerResponse::default().with_error_message(None),
        Err(e) => UnregisterBrokerResponse::default()
            .with_error_code(e.code.code())
            .with_error_message(Some(s(&e.message))),
    }
}

/// UpdateFeatures: the controller applies every update or none; v0's
/// `allow_downgrade` is a safe downgrade. The outcome is the top-level
/// error; v0 and v1 list each feature when it succeeded, v2 never (as
/// Kafka).
pub async fn update_features(
    broker: &ReplicaManager,
    req: UpdateFeaturesRequest,
    version: i16,
) -> UpdateFeaturesResponse {
    use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
    use strand_metadata::features::UpgradeType;
    let mut updates = Vec::new();
    for u in &req.feature_updates {
        let kind = if version == 0 {
            Some(if u.allow_downgrade {
                UpgradeType::SafeDowngrade
            } else {
                UpgradeType::Upgrade
            })
        } else {
            UpgradeType::from_wire(u.upgrade_type)
        };
        let Some(kind) = kind else {
            return UpdateFeaturesResponse::default()
                .with_error_code(ErrorCode::InvalidRequest.code())
                .with_error_message(Some(s(&format!(
                    "Unknown upgrade type {} for feature {}",
                    u.upgrade_type, u.feature
                ))));
        };
        updates.push((u.feature.to_string(), u.max_version_level, kind));
    }
    let names: Vec<StrBytes> = req
        .feature_updates
        .iter()
        .map(|u| u.feature.clone())
        .collect();
    let result = broker
        .controller
        .update_features(updates, req.validate_only)
        .await;
    broker.reconcile();
    let (code, message) = match &result {
        Ok(()) => (0, None),
        Err(e) => (e.code.code(), Some(s(&e.message))),
    };
    // Kafka lists each feature's outcome (v0, v1) only when the update
    // went through; a refusal is the top-level error alone.
    let results = if version >= 2 || result.is_err() {
        Vec::new()
    } else {
        names
            .into_iter()
            .map(|feature| {
                UpdatableFeatureResult::default()
                    .with_feature(feature)
                    .with_error_code(code)
                    .with_error_message(message.clone())
            })
            .collect()
    };
    UpdateFeaturesResponse::default()
        .with_error_code(code)
        .with_error_message(message)
        .with_results(results)
}

/// AlterReplicaLogDirs: each replica moves to the named log directory of
/// this broker (see `ReplicaManager::alter_replica_log_dir`); answered at
/// once, the copy going on in the background (DescribeLogDirs shows it as
/// a future replica until it is swapped in).
pub fn alter_replica_log_dirs(
    broker: &std::sync::Arc<ReplicaManager>,
    req: AlterReplicaLogDirsRequest,
) -> AlterReplicaLogDirsResponse {
    use alter_replica_log_dirs_response::{
        AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
    };
    let mut by_topic: std::collections::BTreeMap<String, Vec<(i32, i16)>> = Default::default();
    for dir in &req.dirs {
        for t in &dir.topics {
            for &p in &t.partitions {
                let code = match broker.alter_replica_log_dir(&t.name.0, p, &dir.path) {
                    Ok(()) => 0,
                    Err(c) => c.code(),
                };
                by_topic
                    .entry(t.name.0.to_string())
                    .or_default()
                    .push((p, code));
            }
        }
    }
    let results = by_topic
        .into_iter()
        .map(|(topic, parts)| {
            AlterReplicaLogDirTopicResult::default()
                .with_topic_name(TopicName(s(&topic)))
                .with_partitions(
                    parts
                        .into_iter()
                        .map(|(p, code)| {
                            AlterReplicaLogDirPartitionResult::default()
                                .with_partition_index(p)
                                .with_error_code(code)
                        })
                        .collect(),
                )
        })
        .collect();
    AlterReplicaLogDirsResponse::default().with_results(results)
}
