//! Authorization of every request, with the checks, error codes and
//! granularity of Kafka's request handler (`authorizer.class.name`; without
//! one everything is allowed, as in Kafka). [`before`] runs ahead of the
//! handler: a request refused whole is answered here, and the parts of a
//! request its principal may not touch (topics, groups, coordinator keys)
//! are taken out of it; [`after`] puts those parts back into the handler's
//! response with their error. The handlers never see what was refused, so a
//! refused write, read or creation cannot happen, and an unauthorized client
//! learns nothing of whether a topic exists (TOPIC_AUTHORIZATION_FAILED
//! either way; unauthorized topics are left out of an all-topics Metadata).
//! The decisions are `strand_security::acl`'s.

use crate::handlers::context::RequestContext;
use crate::replica_manager::ReplicaManager;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use strand_metadata::image::MetadataImage;
use strand_security::acl::{Operation, ResourceType, CLUSTER_NAME};

const TOPIC_DENIED: i16 = 29;
const GROUP_DENIED: i16 = 30;
const CLUSTER_DENIED: i16 = 31;
/// ClusterAuthorizationException's message where Kafka answers with its default.
const CLUSTER_DENIED_MESSAGE: &str = "Cluster authorization failed.";
const TXN_ID_DENIED: i16 = 53;
const NOT_ATTEMPTED: i16 = 55;

/// What to do with a request.
pub enum Gate {
    /// Run it (perhaps trimmed), then [`after`] with this.
    Go(RequestKind, Deferred),
    /// Refused whole: answer this.
    Answer(ResponseKind),
    /// Refused, and there is no answer to give (acks=0): close.
    Close(String),
}

/// The refused parts of a request, for [`after`] to answer.
#[derive(Default)]
pub enum Deferred {
    #[default]
    Nothing,
    /// (topic, partitions) refused with this code.
    Partitions(i16, Vec<(TopicName, Vec<i32>)>),
    /// Topics refused (CreateTopics, CreatePartitions, DeleteTopics...).
    Topics(Vec<(Option<TopicName>, uuid::Uuid)>),
    /// Metadata: named topics refused; drop what the principal may not
    /// describe from an all-topics answer.
    Metadata {
        refused: Vec<TopicName>,
        all_topics: bool,
    },
    /// Config resources refused: (type, name, code).
    Resources(Vec<(i8, StrBytes, i16)>),
    /// FindCoordinator v4+ keys refused with this code.
    Keys(i16, Vec<StrBytes>),
    Groups(Vec<GroupId>),
    TransactionalIds(Vec<TransactionalId>),
    /// OffsetFetch: per group refused, per (group, topic) refused, and
    /// all-partitions answers to filter by topic DESCRIBE.
    OffsetFetch {
        groups: Vec<GroupId>,
        filter: bool,
        topics: Vec<(GroupId, TopicName, Vec<i32>)>,
    },
    /// Answers to filter: ListGroups, ListTransactions.
    Filter,
}

/// One request's view of the authorizer.
struct Check<'a> {
    broker: &'a ReplicaManager,
    ctx: &'a RequestContext,
    image: std::sync::Arc<MetadataImage>,
}

impl Check<'_> {
    fn allowed(&self, op: Operation, rt: ResourceType, name: &str) -> bool {
        self.ctx.allowed(self.broker, &self.image, op, rt, name)
    }

    fn cluster(&self, op: Operation) -> bool {
        self.allowed(op, ResourceType::Cluster, CLUSTER_NAME)
    }

    fn topic(&self, op: Operation, name: &str) -> bool {
        self.allowed(op, ResourceType::Topic, name)
    }

    fn group(&self, op: Operation, name: &str) -> bool {
        self.allowed(op, ResourceType::Group, name)
    }

    fn txn_id(&self, op: Operation, name: &str) -> bool {
        self.allowed(op, ResourceType::TransactionalId, name)
    }

    fn topic_name(&self, name: &TopicName, id: uuid::Uuid) -> String {
        if name.is_empty() && !id.is_nil() {
            return self.image.topic_names.get(&id).cloned().unwrap_or_default();
        }
        name.to_string()
    }
}

/// Splits `items` into those `keep` accepts and the rest.
fn split<T>(items: Vec<T>, mut keep: impl FnMut(&T) -> bool) -> (Vec<T>, Vec<T>) {
    items.into_iter().partition(|i| keep(i))
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Keeps in `$resources` the config resources `$op` is allowed on; answers
/// the others as (type, name, code).
macro_rules! split_resources {
    ($c:expr, $resources:expr, $op:expr) => {{
        let mut denied = Vec::new();
        for res in std::mem::take(&mut $resources) {
            match config_check(&$c, res.resource_type, &res.resource_name, $op) {
                None => $resources.push(res),
                Some(code) => denied.push((res.resource_type, res.resource_name, code)),
            }
        }
        denied
    }};
}

pub fn before(broker: &ReplicaManager, ctx: &RequestContext, request: RequestKind) -> Gate {
    if !broker.authorizer.enabled() {
        return Gate::Go(request, Deferred::Nothing);
    }
    let c = Check {
        broker,
        ctx,
        image: broker.image(),
    };
    use Operation::*;
    let v = ctx.version;
    match request {
        RequestKind::Produce(mut r) => {
            if let Some(id) = r.transactional_id.as_ref() {
                if !c.txn_id(Write, id) {
                    if r.acks == 0 {
                        return Gate::Close("transactional id not authorized (acks=0)".into());
                    }
                    let mut resp = ProduceResponse::default();
                    for t in &r.topic_data {
                        resp.responses.push(produce_errors(
                            &t.name,
                            t.partition_data.iter().map(|p| p.index),
                            TXN_ID_DENIED,
                        ));
                    }
                    return Gate::Answer(ResponseKind::Produce(resp));
                }
            }
            let (ok, denied) = split(std::mem::take(&mut r.topic_data), |t| {
                c.topic(Write, &c.topic_name(&t.name, t.topic_id))
            });
            if !denied.is_empty() && r.acks == 0 {
                return Gate::Close("topic not authorized (acks=0)".into());
            }
            r.topic_data = ok;
            let denied = denied
                .into_iter()
                .map(|t| (t.name, t.partition_data.iter().map(|p| p.index).collect()))
                .collect();
            Gate::Go(
                RequestKind::Produce(r),
                Deferred::Partitions(TOPIC_DENIED, denied),
            )
        }
        RequestKind::Fetch(mut r) => {
            let follower = r.replica_id.0 >= 0 || r.replica_state.replica_id.0 >= 0;
            if follower {
                if c.cluster(ClusterAction) {
                    return Gate::Go(RequestKind::Fetch(r), Deferred::Nothing);
                }
                // Kafka: every partition TOPIC_AUTHORIZATION_FAILED, no data.
                let mut resp = FetchResponse::default();
                for t in &r.topics {
                    resp.responses.push(fetch_errors(t, TOPIC_DENIED));
                }
                return Gate::Answer(ResponseKind::Fetch(resp));
            }
            let (ok, denied) = split(std::mem::take(&mut r.topics), |t| {
                // An unknown topic id is the handler's to answer
                // (UNKNOWN_TOPIC_ID, before authorization, as Kafka).
                let name = c.topic_name(&t.topic, t.topic_id);
                name.is_empty() || c.topic(Read, &name)
            });
            r.topics = ok;
            let denied = denied
                .into_iter()
                .map(|t| {
                    let name = TopicName(s(&c.topic_name(&t.topic, t.topic_id)));
                    (name, t.partitions.iter().map(|p| p.partition).collect())
                })
                .collect();
            Gate::Go(
                RequestKind::Fetch(r),
                Deferred::Partitions(TOPIC_DENIED, denied),
            )
        }
        RequestKind::ListOffsets(mut r) => {
            let (ok, denied) = split(std::mem::take(&mut r.topics), |t| {
                c.topic(Describe, &t.name)
            });
            r.topics = ok;
            let denied = denied
                .into_iter()
                .map(|t| {
                    (
                        t.name,
                        t.partitions.iter().map(|p| p.partition_index).collect(),
                    )
                })
                .collect();
            Gate::Go(
                RequestKind::ListOffsets(r),
                Deferred::Partitions(TOPIC_DENIED, denied),
            )
        }
        RequestKind::OffsetForLeaderEpoch(mut r) => {
            if c.cluster(ClusterAction) {
                return Gate::Go(RequestKind::OffsetForLeaderEpoch(r), Deferred::Nothing);
            }
            let (ok, denied) = split(std::mem::take(&mut r.topics), |t| {
                c.topic(Describe, &t.topic)
            });
            r.topics = ok;
            let denied = denied
                .into_iter()
                .map(|t| (t.topic, t.partitions.iter().map(|p| p.partition).collect()))
                .collect();
            Gate::Go(
                RequestKind::OffsetForLeaderEpoch(r),
                Deferred::Partitions(TOPIC_DENIED, denied),
            )
        }
        RequestKind::Metadata(mut r) => {
            let Some(topics) = r.topics.take() else {
                return Gate::Go(
                    RequestKind::Metadata(r),
                    Deferred::Metadata {
                        refused: vec![],
                        all_topics: true,
                    },
                );
            };
            let all_topics = v == 0 && topics.is_empty();
            let auto_create =
                r.allow_auto_topic_creation && broker.config.auto_create_topics_enable;
            let may_create = |name: &str| c.cluster(Create) || c.topic(Create, name);
            let mut refused = Vec::new();
            let mut kept = Vec::new();
            for t in topics {
                let Some(name) = t.name.clone() else {
                    // By id: the handler answers UNKNOWN_TOPIC_ID for an
                    // unknown one; a known one is checked in `after`.
                    kept.push(t);
                    continue;
                };
                let described = c.topic(Describe, &name);
                let exists = c.image.topics.contains_key(name.as_str());
                if !described || (!exists && auto_create && !may_create(&name)) {
                    refused.push(name);
                } else {
                    kept.push(t);
                }
            }
            r.topics = Some(kept);
            Gate::Go(
                RequestKind::Metadata(r),
                Deferred::Metadata {
                    refused,
                    all_topics,
                },
            )
        }
        RequestKind::DescribeTopicPartitions(mut r) => {
            let all_topics = r.topics.is_empty();
            let (ok, denied) = split(std::mem::take(&mut r.topics), |t| {
                c.topic(Describe, &t.name)
            });
            r.topics = ok;
            if !all_topics && r.topics.is_empty() && !denied.is_empty() {
                let mut resp = DescribeTopicPartitionsResponse::default();
                for t in denied {
                    resp.topics.push(
                        describe_topic_partitions_response::DescribeTopicPartitionsResponseTopic::default()
                            .with_error_code(TOPIC_DENIED)
                            .with_name(Some(t.name)),
                    );
                }
                return Gate::Answer(ResponseKind::DescribeTopicPartitions(resp));
            }
            let refused = denied.into_iter().map(|t| t.name).collect();
            Gate::Go(
                RequestKind::DescribeTopicPartitions(r),
                Deferred::Metadata {
                    refused,
                    all_topics,
                },
            )
        }
        RequestKind::CreateTopics(mut r) => {
            let any = c.cluster(Create);
            let (ok, denied) = split(std::mem::take(&mut r.topics), |t| {
                any || c.topic(Create, &t.name)
            });
            r.topics = ok;
            let denied = denied
                .into_iter()
                .map(|t| (Some(t.name), uuid::Uuid::nil()))
                .collect();
            Gate::Go(RequestKind::CreateTopics(r), Deferred::Topics(denied))
        }
        RequestKind::DeleteTopics(mut r) => {
            let any = c.cluster(Delete);
            let may = |name: &str| any || (c.topic(Describe, name) && c.topic(Delete, name));
            let mut denied = Vec::new();
            let names = std::mem::take(&mut r.topic_names);
            for n in names {
                if may(&n) {
                    r.topic_names.push(n);
                } else {
                    denied.push((Some(n), uuid::Uuid::nil()));
                }
            }
            let states = std::mem::take(&mut r.topics);
            for t in states {
                let name = t
                    .name
                    .as_ref()
                    .map(|n| n.to_string())
                    .or_else(|| c.image.topic_names.get(&t.topic_id).cloned());
                match name {
                    // An unknown id: the handler answers UNKNOWN_TOPIC_ID.
                    None => r.topics.push(t),
                    Some(n) if may(&n) => r.topics.push(t),
                    Some(n) => {
                        let shown =
                            (t.name.is_some() || c.topic(Describe, &n)).then(|| TopicName(s(&n)));
                        denied.push((shown, t.topic_id));
                    }
                }
            }
            Gate::Go(RequestKind::DeleteTopics(r), Deferred::Topics(denied))
        }
        RequestKind::CreatePartitions(mut r) => {
            let (ok, denied) = split(std::mem::take(&mut r.topics), |t| c.topic(Alter, &t.name));
            r.topics = ok;
            let denied = denied
                .into_iter()
                .map(|t| (Some(t.name), uuid::Uuid::nil()))
                .collect();
            Gate::Go(RequestKind::CreatePartitions(r), Deferred::Topics(denied))
        }
        RequestKind::DeleteRecords(mut r) => {
            let (ok, denied) = split(std::mem::take(&mut r.topics), |t| c.topic(Delete, &t.name));
            r.topics = ok;
            let denied = denied
                .into_iter()
                .map(|t| {
                    (
                        t.name,
                        t.partitions.iter().map(|p| p.partition_index).collect(),
                    )
                })
                .collect();
            Gate::Go(
                RequestKind::DeleteRecords(r),
                Deferred::Partitions(TOPIC_DENIED, denied),
            )
        }
        RequestKind::DescribeConfigs(mut r) => {
            let denied = split_resources!(c, r.resources, DescribeConfigs);
            Gate::Go(RequestKind::DescribeConfigs(r), Deferred::Resources(denied))
        }
        RequestKind::AlterConfigs(mut r) => {
            let denied = split_resources!(c, r.resources, AlterConfigs);
            Gate::Go(RequestKind::AlterConfigs(r), Deferred::Resources(denied))
        }
        RequestKind::IncrementalAlterConfigs(mut r) => {
            let denied = split_resources!(c, r.resources, AlterConfigs);
            Gate::Go(
                RequestKind::IncrementalAlterConfigs(r),
                Deferred::Resources(denied),
            )
        }
        RequestKind::AlterReplicaLogDirs(r) if !c.cluster(Alter) => {
            use alter_replica_log_dirs_response::*;
            let mut resp = AlterReplicaLogDirsResponse::default();
            for d in r.dirs {
                for t in d.topics {
                    resp.results.push(
                        AlterReplicaLogDirTopicResult::default()
                            .with_topic_name(t.name)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|&p| {
                                        AlterReplicaLogDirPartitionResult::default()
                                            .with_partition_index(p)
                                            .with_error_code(CLUSTER_DENIED)
                                    })
                                    .collect(),
                            ),
                    );
                }
            }
            Gate::Answer(ResponseKind::AlterReplicaLogDirs(resp))
        }
        RequestKind::DescribeLogDirs(_) if !c.cluster(Describe) => {
            Gate::Answer(ResponseKind::DescribeLogDirs(
                DescribeLogDirsResponse::default().with_error_code(CLUSTER_DENIED),
            ))
        }
        RequestKind::ElectLeaders(r) if !c.cluster(Alter) => {
            let mut resp = ElectLeadersResponse::default().with_error_code(CLUSTER_DENIED);
            for t in r.topic_partitions.unwrap_or_default() {
                resp.replica_election_results.push(
                    elect_leaders_response::ReplicaElectionResult::default()
                        .with_topic(t.topic)
                        .with_partition_result(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    elect_leaders_response::PartitionResult::default()
                                        .with_partition_id(*p)
                                        .with_error_code(CLUSTER_DENIED)
                                        .with_error_message(Some(s(
                                            "Cluster authorization failed.",
                                        )))
                                })
                                .collect(),
                        ),
                );
            }
            Gate::Answer(ResponseKind::ElectLeaders(resp))
        }
        RequestKind::AlterPartitionReassignments(r) if !c.cluster(Alter) => {
            use alter_partition_reassignments_response::{
                ReassignablePartitionResponse, ReassignableTopicResponse,
            };
            let responses = r
                .topics
                .iter()
                .map(|t| {
                    ReassignableTopicResponse::default()
                        .with_name(t.name.clone())
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    ReassignablePartitionResponse::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(CLUSTER_DENIED)
                                        .with_error_message(Some(s(CLUSTER_DENIED_MESSAGE)))
                                })
                                .collect(),
                        )
                })
                .collect();
            Gate::Answer(ResponseKind::AlterPartitionReassignments(
                AlterPartitionReassignmentsResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(s(CLUSTER_DENIED_MESSAGE)))
                    .with_responses(responses),
            ))
        }
        RequestKind::ListPartitionReassignments(_) if !c.cluster(Describe) => {
            Gate::Answer(ResponseKind::ListPartitionReassignments(
                ListPartitionReassignmentsResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(s(CLUSTER_DENIED_MESSAGE))),
            ))
        }
        RequestKind::UpdateFeatures(r) if !c.cluster(Alter) => {
            use update_features_response::UpdatableFeatureResult;
            let results = r
                .feature_updates
                .iter()
                .map(|u| {
                    UpdatableFeatureResult::default()
                        .with_feature(u.feature.clone())
                        .with_error_code(CLUSTER_DENIED)
                        .with_error_message(Some(s(CLUSTER_DENIED_MESSAGE)))
                })
                .collect();
            Gate::Answer(ResponseKind::UpdateFeatures(
                UpdateFeaturesResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(s(CLUSTER_DENIED_MESSAGE)))
                    .with_results(results),
            ))
        }
        RequestKind::UnregisterBroker(_) if !c.cluster(Alter) => {
            Gate::Answer(ResponseKind::UnregisterBroker(
                UnregisterBrokerResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(s(CLUSTER_DENIED_MESSAGE))),
            ))
        }
        RequestKind::DescribeQuorum(_) if !c.cluster(Describe) => {
            Gate::Answer(ResponseKind::DescribeQuorum(
                DescribeQuorumResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(s("Cluster authorization failed."))),
            ))
        }
        RequestKind::DescribeUserScramCredentials(_) if !c.cluster(Describe) => {
            Gate::Answer(ResponseKind::DescribeUserScramCredentials(
                DescribeUserScramCredentialsResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_error_message(Some(s("Cluster authorization failed."))),
            ))
        }
        RequestKind::AlterUserScramCredentials(r) if !c.cluster(Alter) => {
            let mut users: Vec<StrBytes> = r.deletions.iter().map(|d| d.name.clone()).collect();
            users.extend(r.upsertions.iter().map(|u| u.name.clone()));
            users.dedup();
            Gate::Answer(ResponseKind::AlterUserScramCredentials(
                AlterUserScramCredentialsResponse::default().with_results(
                    users
                        .into_iter()
                        .map(|u| {
                            alter_user_scram_credentials_response::AlterUserScramCredentialsResult::default()
                                .with_user(u)
                                .with_error_code(CLUSTER_DENIED)
                                .with_error_message(Some(s("Cluster authorization failed.")))
                        })
                        .collect(),
                ),
            ))
        }
        RequestKind::DescribeClientQuotas(_) if !c.cluster(DescribeConfigs) => {
            // Kafka's answer carries no message here.
            Gate::Answer(ResponseKind::DescribeClientQuotas(
                DescribeClientQuotasResponse::default()
                    .with_error_code(CLUSTER_DENIED)
                    .with_entries(None),
            ))
        }
        RequestKind::AlterClientQuotas(r) if !c.cluster(AlterConfigs) => {
            use alter_client_quotas_response::{EntityData, EntryData};
            let entries = r
                .entries
                .iter()
                .map(|e| {
                    EntryData::default()
                        .with_entity(
                            e.entity
                                .iter()
                                .map(|c| {
                                    EntityData::default()
                                        .with_entity_type(c.entity_type.clone())
                                        .with_entity_name(c.entity_name.clone())
                                })
                                .collect(),
                        )
                        .with_error_code(CLUSTER_DENIED)
                        .with_error_message(Some(s(CLUSTER_DENIED_MESSAGE)))
                })
                .collect();
            Gate::Answer(ResponseKind::AlterClientQuotas(
                AlterClientQuotasResponse::default().with_entries(entries),
            ))
        }
        RequestKind::WriteTxnMarkers(r) if !c.cluster(Alter) && !c.cluster(ClusterAction) => {
            let mut resp = WriteTxnMarkersResponse::default();
            for m in &r.markers {
                resp.markers.push(
                    write_txn_markers_response::WritableTxnMarkerResult::default()
                        .with_producer_id(m.producer_id)
                        .with_topics(
                            m.topics
                                .iter()
                                .map(|t| {
                                    write_txn_markers_response::WritableTxnMarkerTopicResult::default()
                                        .with_name(t.name.clone())
                                        .with_partitions(
                                            t.partition_indexes
                                                .iter()
                                                .map(|p| {
                                                    write_txn_markers_response::WritableTxnMarkerPartitionResult::default()
                                                        .with_partition_index(*p)
                                                        .with_error_code(CLUSTER_DENIED)
                                                })
                                                .collect(),
                                        )
                                })
                                .collect(),
                        ),
                );
            }
            Gate::Answer(ResponseKind::WriteTxnMarkers(resp))
        }
        RequestKind::FindCoordinator(mut r) => {
            // Key type 1: transactional ids; else groups.
            let txn = r.key_type == 1;
            let code = if txn { TXN_ID_DENIED } else { GROUP_DENIED };
            let op_ok = |k: &str| {
                if txn {
                    c.txn_id(Describe, k)
                } else {
                    c.group(Describe, k)
                }
            };
            if v < 4 {
                if !op_ok(&r.key) {
                    return Gate::Answer(ResponseKind::FindCoordinator(
                        FindCoordinatorResponse::default()
                            .with_error_code(code)
                            .with_node_id(BrokerId(-1))
                            .with_port(-1),
                    ));
                }
                return Gate::Go(RequestKind::FindCoordinator(r), Deferred::Nothing);
            }
            let (ok, denied) = split(std::mem::take(&mut r.coordinator_keys), |k| op_ok(k));
            r.coordinator_keys = ok;
            if r.coordinator_keys.is_empty() {
                let mut resp = FindCoordinatorResponse::default();
                after_keys(&mut resp, code, denied);
                return Gate::Answer(ResponseKind::FindCoordinator(resp));
            }
            Gate::Go(
                RequestKind::FindCoordinator(r),
                Deferred::Keys(code, denied),
            )
        }
        RequestKind::JoinGroup(r) if !c.group(Read, &r.group_id) => {
            Gate::Answer(ResponseKind::JoinGroup(
                JoinGroupResponse::default()
                    .with_error_code(GROUP_DENIED)
                    .with_generation_id(-1)
                    .with_protocol_name(Some(StrBytes::default()))
                    .with_member_id(r.member_id),
            ))
        }
        RequestKind::SyncGroup(r) if !c.group(Read, &r.group_id) => Gate::Answer(
            ResponseKind::SyncGroup(SyncGroupResponse::default().with_error_code(GROUP_DENIED)),
        ),
        RequestKind::Heartbeat(r) if !c.group(Read, &r.group_id) => Gate::Answer(
            ResponseKind::Heartbeat(HeartbeatResponse::default().with_error_code(GROUP_DENIED)),
        ),
        RequestKind::ConsumerGroupHeartbeat(r) if !c.group(Read, &r.group_id) => {
            Gate::Answer(ResponseKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatResponse::default().with_error_code(GROUP_DENIED),
            ))
        }
        // Subscribing by name needs DESCRIBE on every topic named.
        RequestKind::ConsumerGroupHeartbeat(r)
            if r.subscribed_topic_names
                .as_ref()
                .is_some_and(|ts| ts.iter().any(|t| !c.topic(Describe, t))) =>
        {
            Gate::Answer(ResponseKind::ConsumerGroupHeartbeat(
                ConsumerGroupHeartbeatResponse::default().with_error_code(TOPIC_DENIED),
            ))
        }
        RequestKind::ConsumerGroupDescribe(mut r) => {
            let (ok, denied) = split(std::mem::take(&mut r.group_ids), |g| c.group(Describe, g));
            r.group_ids = ok;
            Gate::Go(
                RequestKind::ConsumerGroupDescribe(r),
                Deferred::Groups(denied),
            )
        }
        RequestKind::LeaveGroup(r) if !c.group(Read, &r.group_id) => Gate::Answer(
            ResponseKind::LeaveGroup(LeaveGroupResponse::default().with_error_code(GROUP_DENIED)),
        ),
        RequestKind::OffsetCommit(mut r) => {
            if !c.group(Read, &r.group_id) {
                let mut resp = OffsetCommitResponse::default();
                for t in &r.topics {
                    resp.topics.push(
                        offset_commit_response::OffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_topic_id(t.topic_id)
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        offset_commit_response::OffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(GROUP_DENIED)
                                    })
                                    .collect(),
                            ),
                    );
                }
                return Gate::Answer(ResponseKind::OffsetCommit(resp));
            }
            let (ok, denied) = split(std::mem::take(&mut r.topics), |t| {
                c.topic(Read, &c.topic_name(&t.name, t.topic_id))
            });
            r.topics = ok;
            let denied = denied
                .into_iter()
                .map(|t| {
                    (
                        t.name,
                        t.partitions.iter().map(|p| p.partition_index).collect(),
                    )
                })
                .collect();
            Gate::Go(
                RequestKind::OffsetCommit(r),
                Deferred::Partitions(TOPIC_DENIED, denied),
            )
        }
        RequestKind::TxnOffsetCommit(mut r) => {
            let whole = if !c.txn_id(Write, &r.transactional_id) {
                Some(TXN_ID_DENIED)
            } else if !c.group(Read, &r.group_id) {
                Some(GROUP_DENIED)
            } else {
                None
            };
            if let Some(code) = whole {
                let mut resp = TxnOffsetCommitResponse::default();
                for t in &r.topics {
                    resp.topics.push(
                        txn_offset_commit_response::TxnOffsetCommitResponseTopic::default()
                            .with_name(t.name.clone())
                            .with_partitions(
                                t.partitions
                                    .iter()
                                    .map(|p| {
                                        txn_offset_commit_response::TxnOffsetCommitResponsePartition::default()
                                            .with_partition_index(p.partition_index)
                                            .with_error_code(code)
                                    })
                                    .collect(),
                            ),
                    );
                }
                return Gate::Answer(ResponseKind::TxnOffsetCommit(resp));
            }
            let (ok, denied) = split(std::mem::take(&mut r.topics), |t| c.topic(Read, &t.name));
            r.topics = ok;
            let denied = denied
                .into_iter()
                .map(|t| {
                    (
                        t.name,
                        t.partitions.iter().map(|p| p.partition_index).collect(),
                    )
                })
                .collect();
            Gate::Go(
                RequestKind::TxnOffsetCommit(r),
                Deferred::Partitions(TOPIC_DENIED, denied),
            )
        }
        RequestKind::OffsetFetch(mut r) => {
            if v < 8 {
                if !c.group(Describe, &r.group_id) {
                    return Gate::Answer(ResponseKind::OffsetFetch(
                        OffsetFetchResponse::default().with_error_code(GROUP_DENIED),
                    ));
                }
                let filter = r.topics.is_none();
                let mut topics = Vec::new();
                if let Some(requested) = r.topics.take() {
                    let (ok, denied) = split(requested, |t| c.topic(Describe, &t.name));
                    r.topics = Some(ok);
                    topics = denied
                        .into_iter()
                        .map(|t| (r.group_id.clone(), t.name, t.partition_indexes))
                        .collect();
                }
                return Gate::Go(
                    RequestKind::OffsetFetch(r),
                    Deferred::OffsetFetch {
                        groups: vec![],
                        filter,
                        topics,
                    },
                );
            }
            let (ok, denied_groups) = split(std::mem::take(&mut r.groups), |g| {
                c.group(Describe, &g.group_id)
            });
            r.groups = ok;
            let mut topics = Vec::new();
            let mut filter = false;
            for g in &mut r.groups {
                match g.topics.take() {
                    None => filter = true,
                    Some(requested) => {
                        let (ok, denied) = split(requested, |t| c.topic(Describe, &t.name));
                        g.topics = Some(ok);
                        topics.extend(
                            denied
                                .into_iter()
                                .map(|t| (g.group_id.clone(), t.name, t.partition_indexes)),
                        );
                    }
                }
            }
            Gate::Go(
                RequestKind::OffsetFetch(r),
                Deferred::OffsetFetch {
                    groups: denied_groups.into_iter().map(|g| g.group_id).collect(),
                    filter,
                    topics,
                },
            )
        }
        RequestKind::OffsetDelete(mut r) => {
            if !c.group(Delete, &r.group_id) {
                return Gate::Answer(ResponseKind::OffsetDelete(
                    OffsetDeleteResponse::default().with_error_code(GROUP_DENIED),
                ));
            }
            let (ok, denied) = split(std::mem::take(&mut r.topics), |t| c.topic(Read, &t.name));
            r.topics = ok;
            let denied = denied
                .into_iter()
                .map(|t| {
                    (
                        t.name,
                        t.partitions.iter().map(|p| p.partition_index).collect(),
                    )
                })
                .collect();
            Gate::Go(
                RequestKind::OffsetDelete(r),
                Deferred::Partitions(TOPIC_DENIED, denied),
            )
        }
        RequestKind::DescribeGroups(mut r) => {
            let (ok, denied) = split(std::mem::take(&mut r.groups), |g| c.group(Describe, g));
            r.groups = ok;
            Gate::Go(RequestKind::DescribeGroups(r), Deferred::Groups(denied))
        }
        RequestKind::DeleteGroups(mut r) => {
            let (ok, denied) = split(std::mem::take(&mut r.groups_names), |g| c.group(Delete, g));
            r.groups_names = ok;
            Gate::Go(RequestKind::DeleteGroups(r), Deferred::Groups(denied))
        }
        RequestKind::ListGroups(r) => {
            let filter = if c.cluster(Describe) {
                Deferred::Nothing
            } else {
                Deferred::Filter
            };
            Gate::Go(RequestKind::ListGroups(r), filter)
        }
        RequestKind::InitProducerId(r) => {
            let refused = match r.transactional_id.as_ref() {
                Some(id) => (!c.txn_id(Write, id)).then_some(TXN_ID_DENIED),
                None => {
                    let principal = ctx.principal.to_string();
                    let any_topic = broker.authorizer.allowed_on_any(
                        &c.image,
                        &principal,
                        &ctx.client_ip,
                        Write,
                        ResourceType::Topic,
                    );
                    (!c.cluster(IdempotentWrite) && !any_topic).then_some(CLUSTER_DENIED)
                }
            };
            match refused {
                Some(code) => Gate::Answer(ResponseKind::InitProducerId(
                    InitProducerIdResponse::default()
                        .with_error_code(code)
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1),
                )),
                None => Gate::Go(RequestKind::InitProducerId(r), Deferred::Nothing),
            }
        }
        RequestKind::AddPartitionsToTxn(r) => {
            if v >= 4 {
                // Between brokers (KIP-890 verification): ClusterAction.
                if !c.cluster(ClusterAction) {
                    return Gate::Answer(ResponseKind::AddPartitionsToTxn(
                        AddPartitionsToTxnResponse::default().with_error_code(CLUSTER_DENIED),
                    ));
                }
                return Gate::Go(RequestKind::AddPartitionsToTxn(r), Deferred::Nothing);
            }
            let tx_ok = c.txn_id(Write, &r.v3_and_below_transactional_id);
            let denied: Vec<&TopicName> = r
                .v3_and_below_topics
                .iter()
                .map(|t| &t.name)
                .filter(|n| is_internal(n) || !c.topic(Write, n))
                .collect();
            if tx_ok && denied.is_empty() {
                return Gate::Go(RequestKind::AddPartitionsToTxn(r), Deferred::Nothing);
            }
            // Nothing is added: the refused partitions say why, the others
            // were not attempted.
            let mut resp = AddPartitionsToTxnResponse::default();
            for t in &r.v3_and_below_topics {
                let code = if !tx_ok {
                    TXN_ID_DENIED
                } else if denied.contains(&&t.name) {
                    TOPIC_DENIED
                } else {
                    NOT_ATTEMPTED
                };
                resp.results_by_topic_v3_and_below.push(
                    add_partitions_to_txn_response::AddPartitionsToTxnTopicResult::default()
                        .with_name(t.name.clone())
                        .with_results_by_partition(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    add_partitions_to_txn_response::AddPartitionsToTxnPartitionResult::default()
                                        .with_partition_index(*p)
                                        .with_partition_error_code(code)
                                })
                                .collect(),
                        ),
                );
            }
            Gate::Answer(ResponseKind::AddPartitionsToTxn(resp))
        }
        RequestKind::AddOffsetsToTxn(r) => {
            let code = if !c.txn_id(Write, &r.transactional_id) {
                Some(TXN_ID_DENIED)
            } else if !c.group(Read, &r.group_id) {
                Some(GROUP_DENIED)
            } else {
                None
            };
            match code {
                Some(code) => Gate::Answer(ResponseKind::AddOffsetsToTxn(
                    AddOffsetsToTxnResponse::default().with_error_code(code),
                )),
                None => Gate::Go(RequestKind::AddOffsetsToTxn(r), Deferred::Nothing),
            }
        }
        RequestKind::EndTxn(r) if !c.txn_id(Write, &r.transactional_id) => Gate::Answer(
            ResponseKind::EndTxn(EndTxnResponse::default().with_error_code(TXN_ID_DENIED)),
        ),
        RequestKind::DescribeTransactions(mut r) => {
            let (ok, denied) = split(std::mem::take(&mut r.transactional_ids), |id| {
                c.txn_id(Describe, id)
            });
            r.transactional_ids = ok;
            Gate::Go(
                RequestKind::DescribeTransactions(r),
                Deferred::TransactionalIds(denied),
            )
        }
        RequestKind::ListTransactions(r) => {
            Gate::Go(RequestKind::ListTransactions(r), Deferred::Filter)
        }
        RequestKind::DescribeProducers(mut r) => {
            let (ok, denied) = split(std::mem::take(&mut r.topics), |t| c.topic(Read, &t.name));
            r.topics = ok;
            let denied = denied
                .into_iter()
                .map(|t| (t.name, t.partition_indexes))
                .collect();
            Gate::Go(
                RequestKind::DescribeProducers(r),
                Deferred::Partitions(TOPIC_DENIED, denied),
            )
        }
        other => Gate::Go(other, Deferred::Nothing),
    }
}

fn is_internal(name: &str) -> bool {
    name == "__consumer_offsets" || name == "__transaction_state"
}

/// The code refusing a config resource, if refused: topics by the topic's
/// ACLs (TOPIC_AUTHORIZATION_FAILED), groups by the group's
/// (GROUP_AUTHORIZATION_FAILED), brokers by the cluster's
/// (CLUSTER_AUTHORIZATION_FAILED).
fn config_check(c: &Check, resource_type: i8, name: &str, op: Operation) -> Option<i16> {
    match resource_type {
        2 => (!c.topic(op, name)).then_some(TOPIC_DENIED),
        32 => (!c.group(op, name)).then_some(GROUP_DENIED),
        4 | 8 => (!c.cluster(op)).then_some(CLUSTER_DENIED),
        _ => None,
    }
}

fn produce_errors(
    name: &TopicName,
    partitions: impl Iterator<Item = i32>,
    code: i16,
) -> produce_response::TopicProduceResponse {
    produce_response::TopicProduceResponse::default()
        .with_name(name.clone())
        .with_partition_responses(
            partitions
                .map(|p| {
                    produce_response::PartitionProduceResponse::default()
                        .with_index(p)
                        .with_error_code(code)
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                })
                .collect(),
        )
}

fn fetch_errors(
    t: &fetch_request::FetchTopic,
    code: i16,
) -> fetch_response::FetchableTopicResponse {
    fetch_response::FetchableTopicResponse::default()
        .with_topic(t.topic.clone())
        .with_topic_id(t.topic_id)
        .with_partitions(
            t.partitions
                .iter()
                .map(|p| fetch_partition_error(p.partition, code))
                .collect(),
        )
}

fn fetch_partition_error(partition: i32, code: i16) -> fetch_response::PartitionData {
    fetch_response::PartitionData::default()
        .with_partition_index(partition)
        .with_error_code(code)
        .with_high_watermark(-1)
        .with_last_stable_offset(-1)
        .with_log_start_offset(-1)
        .with_preferred_read_replica(BrokerId(-1))
}

fn after_keys(resp: &mut FindCoordinatorResponse, code: i16, keys: Vec<StrBytes>) {
    for k in keys {
        resp.coordinators.push(
            find_coordinator_response::Coordinator::default()
                .with_key(k)
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(code)
                .with_error_message(Some(s(if code == TXN_ID_DENIED {
                    "Transactional Id authorization failed."
                } else {
                    "Group authorization failed."
                }))),
        );
    }
}

/// Appends to `$into`, for each refused (topic, partitions), a `$topic`
/// result named by `$name` whose partitions are `$partition` built from
/// the partition index `$p` (the generated message types share no trait).
macro_rules! push_refused {
    ($into:expr, $denied:expr, $topic:ty, $name:ident, $parts:ident, |$p:ident| $partition:expr) => {
        for (name, partitions) in $denied {
            $into.push(
                <$topic>::default()
                    .$name(name)
                    .$parts(partitions.into_iter().map(|$p: i32| $partition).collect()),
            );
        }
    };
}

/// Appends a config resource's refusal (`$result` with its type, name, code
/// and Kafka's message) for each refused resource.
macro_rules! push_refused_resources {
    ($into:expr, $denied:expr, $result:ty) => {
        for (rt, name, code) in $denied {
            $into.push(
                <$result>::default()
                    .with_resource_type(rt)
                    .with_resource_name(name)
                    .with_error_code(code)
                    .with_error_message(Some(s(denied_message(code)))),
            );
        }
    };
}

/// Puts the refused parts back into the handler's response.
pub fn after(
    broker: &ReplicaManager,
    ctx: &RequestContext,
    response: &mut ResponseKind,
    deferred: Deferred,
) {
    if matches!(deferred, Deferred::Nothing) {
        return;
    }
    let c = Check {
        broker,
        ctx,
        image: broker.image(),
    };
    use Operation::*;
    match (response, deferred) {
        (ResponseKind::Produce(resp), Deferred::Partitions(code, denied)) => {
            for (name, partitions) in denied {
                resp.responses
                    .push(produce_errors(&name, partitions.into_iter(), code));
            }
        }
        (ResponseKind::Fetch(resp), Deferred::Partitions(code, denied)) => {
            for (name, partitions) in denied {
                let id = c
                    .image
                    .topics
                    .get(name.as_str())
                    .map(|t| t.topic_id)
                    .unwrap_or_default();
                resp.responses.push(
                    fetch_response::FetchableTopicResponse::default()
                        .with_topic(name)
                        .with_topic_id(id)
                        .with_partitions(
                            partitions
                                .into_iter()
                                .map(|p| fetch_partition_error(p, code))
                                .collect(),
                        ),
                );
            }
        }
        (ResponseKind::ListOffsets(resp), Deferred::Partitions(code, denied)) => {
            push_refused!(
                resp.topics,
                denied,
                list_offsets_response::ListOffsetsTopicResponse,
                with_name,
                with_partitions,
                |p| {
                    list_offsets_response::ListOffsetsPartitionResponse::default()
                        .with_partition_index(p)
                        .with_error_code(code)
                        .with_timestamp(-1)
                        .with_offset(-1)
                        .with_leader_epoch(-1)
                }
            );
        }
        (ResponseKind::OffsetForLeaderEpoch(resp), Deferred::Partitions(code, denied)) => {
            push_refused!(
                resp.topics,
                denied,
                offset_for_leader_epoch_response::OffsetForLeaderTopicResult,
                with_topic,
                with_partitions,
                |p| {
                    offset_for_leader_epoch_response::EpochEndOffset::default()
                        .with_partition(p)
                        .with_error_code(code)
                        .with_leader_epoch(-1)
                        .with_end_offset(-1)
                }
            );
        }
        (
            ResponseKind::Metadata(resp),
            Deferred::Metadata {
                refused,
                all_topics,
            },
        ) => {
            // A topic named by id, or every topic: what may not be described
            // goes (all topics) or is refused (by id, name withheld).
            let mut kept = Vec::with_capacity(resp.topics.len());
            for mut t in std::mem::take(&mut resp.topics) {
                let name = t.name.as_ref().map(|n| n.to_string()).unwrap_or_default();
                if name.is_empty() || c.topic(Describe, &name) {
                    kept.push(t);
                } else if !all_topics {
                    t.error_code = TOPIC_DENIED;
                    t.name = None;
                    t.partitions.clear();
                    kept.push(t);
                }
            }
            resp.topics = kept;
            for name in refused {
                resp.topics.push(
                    metadata_response::MetadataResponseTopic::default()
                        .with_error_code(TOPIC_DENIED)
                        .with_name(Some(name))
                        .with_topic_authorized_operations(i32::MIN),
                );
            }
        }
        (ResponseKind::DescribeTopicPartitions(resp), Deferred::Metadata { refused, .. }) => {
            for name in refused {
                resp.topics.push(
                    describe_topic_partitions_response::DescribeTopicPartitionsResponseTopic::default()
                        .with_error_code(TOPIC_DENIED)
                        .with_name(Some(name)),
                );
            }
        }
        (ResponseKind::CreateTopics(resp), Deferred::Topics(denied)) => {
            for (name, _) in denied {
                resp.topics.push(
                    create_topics_response::CreatableTopicResult::default()
                        .with_name(name.unwrap_or_default())
                        .with_error_code(TOPIC_DENIED)
                        .with_error_message(Some(s("Authorization failed.")))
                        .with_num_partitions(-1)
                        .with_replication_factor(-1),
                );
            }
        }
        (ResponseKind::DeleteTopics(resp), Deferred::Topics(denied)) => {
            for (name, id) in denied {
                resp.responses.push(
                    delete_topics_response::DeletableTopicResult::default()
                        .with_name(name)
                        .with_topic_id(id)
                        .with_error_code(TOPIC_DENIED)
                        .with_error_message(Some(s("Topic authorization failed."))),
                );
            }
        }
        (ResponseKind::CreatePartitions(resp), Deferred::Topics(denied)) => {
            for (name, _) in denied {
                resp.results.push(
                    create_partitions_response::CreatePartitionsTopicResult::default()
                        .with_name(name.unwrap_or_default())
                        .with_error_code(TOPIC_DENIED),
                );
            }
        }
        (ResponseKind::DeleteRecords(resp), Deferred::Partitions(code, denied)) => {
            push_refused!(
                resp.topics,
                denied,
                delete_records_response::DeleteRecordsTopicResult,
                with_name,
                with_partitions,
                |p| {
                    delete_records_response::DeleteRecordsPartitionResult::default()
                        .with_partition_index(p)
                        .with_low_watermark(-1)
                        .with_error_code(code)
                }
            );
        }
        (ResponseKind::DescribeConfigs(resp), Deferred::Resources(denied)) => {
            push_refused_resources!(
                resp.results,
                denied,
                describe_configs_response::DescribeConfigsResult
            );
        }
        (ResponseKind::AlterConfigs(resp), Deferred::Resources(denied)) => {
            push_refused_resources!(
                resp.responses,
                denied,
                alter_configs_response::AlterConfigsResourceResponse
            );
        }
        (ResponseKind::IncrementalAlterConfigs(resp), Deferred::Resources(denied)) => {
            push_refused_resources!(
                resp.responses,
                denied,
                incremental_alter_configs_response::AlterConfigsResourceResponse
            );
        }
        (ResponseKind::FindCoordinator(resp), Deferred::Keys(code, keys)) => {
            after_keys(resp, code, keys)
        }
        (ResponseKind::OffsetCommit(resp), Deferred::Partitions(code, denied)) => {
            push_refused!(
                resp.topics,
                denied,
                offset_commit_response::OffsetCommitResponseTopic,
                with_name,
                with_partitions,
                |p| {
                    offset_commit_response::OffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(code)
                }
            );
        }
        (ResponseKind::TxnOffsetCommit(resp), Deferred::Partitions(code, denied)) => {
            push_refused!(
                resp.topics,
                denied,
                txn_offset_commit_response::TxnOffsetCommitResponseTopic,
                with_name,
                with_partitions,
                |p| {
                    txn_offset_commit_response::TxnOffsetCommitResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(code)
                }
            );
        }
        (ResponseKind::OffsetDelete(resp), Deferred::Partitions(code, denied)) => {
            push_refused!(
                resp.topics,
                denied,
                offset_delete_response::OffsetDeleteResponseTopic,
                with_name,
                with_partitions,
                |p| {
                    offset_delete_response::OffsetDeleteResponsePartition::default()
                        .with_partition_index(p)
                        .with_error_code(code)
                }
            );
        }
        (
            ResponseKind::OffsetFetch(resp),
            Deferred::OffsetFetch {
                groups,
                filter,
                topics,
            },
        ) => {
            let offset_error = |p: i32| {
                offset_fetch_response::OffsetFetchResponsePartitions::default()
                    .with_partition_index(p)
                    .with_committed_offset(-1)
                    .with_committed_leader_epoch(-1)
                    .with_error_code(TOPIC_DENIED)
            };
            if ctx.version < 8 {
                if filter {
                    resp.topics.retain(|t| c.topic(Describe, &t.name));
                }
                for (_, name, partitions) in topics {
                    resp.topics.push(
                        offset_fetch_response::OffsetFetchResponseTopic::default()
                            .with_name(name)
                            .with_partitions(
                                partitions
                                    .into_iter()
                                    .map(|p| {
                                        offset_fetch_response::OffsetFetchResponsePartition::default()
                                            .with_partition_index(p)
                                            .with_committed_offset(-1)
                                            .with_committed_leader_epoch(-1)
                                            .with_error_code(TOPIC_DENIED)
                                    })
                                    .collect(),
                            ),
                    );
                }
                return;
            }
            if filter {
                for g in &mut resp.groups {
                    g.topics.retain(|t| c.topic(Describe, &t.name));
                }
            }
            for (group, name, partitions) in topics {
                if let Some(g) = resp.groups.iter_mut().find(|g| g.group_id == group) {
                    g.topics.push(
                        offset_fetch_response::OffsetFetchResponseTopics::default()
                            .with_name(name)
                            .with_partitions(partitions.into_iter().map(offset_error).collect()),
                    );
                }
            }
            for group in groups {
                resp.groups.push(
                    offset_fetch_response::OffsetFetchResponseGroup::default()
                        .with_group_id(group)
                        .with_error_code(GROUP_DENIED),
                );
            }
        }
        (ResponseKind::DescribeGroups(resp), Deferred::Groups(denied)) => {
            for g in denied {
                resp.groups.push(
                    describe_groups_response::DescribedGroup::default()
                        .with_group_id(g)
                        .with_error_code(GROUP_DENIED)
                        .with_error_message(Some(s("Group authorization failed.")))
                        .with_authorized_operations(i32::MIN),
                );
            }
        }
        (ResponseKind::ConsumerGroupDescribe(resp), Deferred::Groups(denied)) => {
            // A group whose members use topics the principal may not
            // describe is refused as a whole, as Kafka does.
            for g in &mut resp.groups {
                let hidden = g.members.iter().any(|m| {
                    m.subscribed_topic_names
                        .iter()
                        .any(|t| !c.topic(Describe, t))
                        || m.assignment
                            .topic_partitions
                            .iter()
                            .chain(&m.target_assignment.topic_partitions)
                            .any(|tp| !c.topic(Describe, &tp.topic_name))
                });
                if hidden {
                    *g = consumer_group_describe_response::DescribedGroup::default()
                        .with_group_id(g.group_id.clone())
                        .with_error_code(TOPIC_DENIED)
                        .with_error_message(Some(s(
                            "The described group uses topics that the client is not authorized to describe.",
                        )))
                        .with_authorized_operations(i32::MIN);
                }
            }
            for g in denied {
                resp.groups.push(
                    consumer_group_describe_response::DescribedGroup::default()
                        .with_group_id(g)
                        .with_error_code(GROUP_DENIED)
                        .with_error_message(Some(s("Group authorization failed.")))
                        .with_authorized_operations(i32::MIN),
                );
            }
        }
        (ResponseKind::DeleteGroups(resp), Deferred::Groups(denied)) => {
            for g in denied {
                resp.results.push(
                    delete_groups_response::DeletableGroupResult::default()
                        .with_group_id(g)
                        .with_error_code(GROUP_DENIED),
                );
            }
        }
        (ResponseKind::ListGroups(resp), Deferred::Filter) => {
            resp.groups.retain(|g| c.group(Describe, &g.group_id));
        }
        (ResponseKind::DescribeTransactions(resp), Deferred::TransactionalIds(denied)) => {
            for state in &mut resp.transaction_states {
                state.topics.retain(|t| c.topic(Describe, &t.topic));
            }
            for id in denied {
                resp.transaction_states.push(
                    describe_transactions_response::TransactionState::default()
                        .with_transactional_id(id)
                        .with_error_code(TXN_ID_DENIED)
                        .with_producer_id(ProducerId(-1))
                        .with_producer_epoch(-1),
                );
            }
        }
        (ResponseKind::ListTransactions(resp), Deferred::Filter) => {
            resp.transaction_states
                .retain(|t| c.txn_id(Describe, &t.transactional_id));
        }
        (ResponseKind::DescribeProducers(resp), Deferred::Partitions(code, denied)) => {
            push_refused!(
                resp.topics,
                denied,
                describe_producers_response::TopicResponse,
                with_name,
                with_partitions,
                |p| {
                    describe_producers_response::PartitionResponse::default()
                        .with_partition_index(p)
                        .with_error_code(code)
                        .with_error_message(Some(s("Topic authorization failed.")))
                }
            );
        }
        (_, _) => {
            tracing::error!("authorization: refused parts of a request had no answer to go into");
        }
    }
}

fn denied_message(code: i16) -> &'static str {
    match code {
        TOPIC_DENIED => "Topic authorization failed.",
        CLUSTER_DENIED => "Cluster authorization failed.",
        GROUP_DENIED => "Group authorization failed.",
        _ => "Authorization failed.",
    }
}
