//! API routing: one function per request kind. Each returns the response
//! body, `None` when no response is sent (acks=0), or an error string when the
//! connection must be closed.

mod acls;
mod admin;
mod api_versions;
mod authorize;
mod cluster_ops;
mod consumer_groups;
mod context;
mod fetch;
mod groups;
mod metadata;
mod offsets;
mod produce;
mod quotas;
mod txn;
mod txn_markers;
mod users;

use crate::node::Node;
pub use api_versions::api_versions_response;
pub use context::RequestContext;
use kafka_protocol::messages::{RequestKind, ResponseKind};

pub async fn dispatch(
    node: &Node,
    ctx: &RequestContext,
    request: RequestKind,
) -> Result<Option<ResponseKind>, String> {
    let broker = &*node.broker;
    let v = ctx.version;
    let (request, deferred) = match authorize::before(broker, ctx, request) {
        authorize::Gate::Go(request, deferred) => (request, deferred),
        authorize::Gate::Answer(response) => return Ok(Some(response)),
        authorize::Gate::Close(why) => return Err(why),
    };
    let mut response = match request {
        RequestKind::ApiVersions(_) => ResponseKind::ApiVersions(api_versions_response(
            0,
            &broker.image(),
            v,
            broker.config.serves_consumer_protocol(),
        )),
        RequestKind::Metadata(r) => {
            ResponseKind::Metadata(metadata::handle(broker, r, v, &ctx.listener).await)
        }
        RequestKind::DescribeTopicPartitions(r) => {
            ResponseKind::DescribeTopicPartitions(metadata::describe_topic_partitions(broker, r))
        }
        RequestKind::Produce(r) => match produce::handle(node, r, v).await? {
            Some(produced) => ResponseKind::Produce(produced),
            // acks=0: nothing to answer (refused topics closed the
            // connection in `authorize::before`).
            None => return Ok(None),
        },
        RequestKind::Fetch(r) => {
            ResponseKind::Fetch(fetch::handle(broker, r, v, &ctx.slices).await)
        }
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(offsets::list_offsets(broker, r, v))
        }
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(admin::create_topics(broker, r, v).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(admin::delete_topics(broker, r, v).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(admin::create_partitions(broker, r).await)
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(admin::describe_configs(broker, r))
        }
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(admin::alter_configs(broker, r).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            ResponseKind::IncrementalAlterConfigs(admin::incremental_alter_configs(broker, r).await)
        }
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(metadata::describe_cluster(broker, r, &ctx.listener))
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(offsets::delete_records(broker, r))
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(offsets::offset_for_leader_epoch(broker, r))
        }
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(offsets::init_producer_id(node, r).await)
        }
        RequestKind::DescribeQuorum(r) => {
            ResponseKind::DescribeQuorum(metadata::describe_quorum(broker, r, v).await)
        }
        RequestKind::FindCoordinator(r) => ResponseKind::FindCoordinator(
            groups::find_coordinator(broker, r, v, &ctx.listener).await,
        ),
        RequestKind::OffsetCommit(r) => {
            ResponseKind::OffsetCommit(groups::offset_commit(node, r, v).await)
        }
        RequestKind::OffsetFetch(r) => {
            ResponseKind::OffsetFetch(groups::offset_fetch(node, r, v).await)
        }
        RequestKind::JoinGroup(r) => {
            ResponseKind::JoinGroup(groups::join_group(node, ctx, r).await)
        }
        RequestKind::SyncGroup(r) => ResponseKind::SyncGroup(groups::sync_group(node, r).await),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(groups::heartbeat(node, r).await),
        RequestKind::ConsumerGroupHeartbeat(r) => ResponseKind::ConsumerGroupHeartbeat(
            consumer_groups::consumer_group_heartbeat(node, ctx, r).await,
        ),
        RequestKind::ConsumerGroupDescribe(r) => ResponseKind::ConsumerGroupDescribe(
            consumer_groups::consumer_group_describe(node, r).await,
        ),
        RequestKind::LeaveGroup(r) => {
            ResponseKind::LeaveGroup(groups::leave_group(node, r, v).await)
        }
        RequestKind::ListGroups(r) => ResponseKind::ListGroups(groups::list_groups(node, r).await),
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(groups::describe_groups(node, r, v).await)
        }
        RequestKind::DeleteGroups(r) => {
            ResponseKind::DeleteGroups(groups::delete_groups(node, r).await)
        }
        RequestKind::OffsetDelete(r) => {
            ResponseKind::OffsetDelete(groups::offset_delete(node, r).await)
        }
        RequestKind::AddPartitionsToTxn(r) => {
            ResponseKind::AddPartitionsToTxn(txn::add_partitions_to_txn(node, r, v).await)
        }
        RequestKind::AddOffsetsToTxn(r) => {
            ResponseKind::AddOffsetsToTxn(txn::add_offsets_to_txn(node, r).await)
        }
        RequestKind::EndTxn(r) => ResponseKind::EndTxn(txn::end_txn(node, r, v).await),
        RequestKind::TxnOffsetCommit(r) => {
            ResponseKind::TxnOffsetCommit(groups::txn_offset_commit(node, r, v).await)
        }
        RequestKind::DescribeTransactions(r) => {
            ResponseKind::DescribeTransactions(txn::describe_transactions(node, r).await)
        }
        RequestKind::ListTransactions(r) => {
            ResponseKind::ListTransactions(txn::list_transactions(node, r).await)
        }
        RequestKind::ElectLeaders(r) => {
            ResponseKind::ElectLeaders(admin::elect_leaders(broker, r).await)
        }
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            cluster_ops::alter_partition_reassignments(broker, r, v).await,
        ),
        RequestKind::ListPartitionReassignments(r) => ResponseKind::ListPartitionReassignments(
            cluster_ops::list_partition_reassignments(broker, r).await,
        ),
        RequestKind::UpdateFeatures(r) => {
            ResponseKind::UpdateFeatures(cluster_ops::update_features(broker, r, v).await)
        }
        RequestKind::UnregisterBroker(r) => {
            ResponseKind::UnregisterBroker(cluster_ops::unregister_broker(broker, r).await)
        }
        RequestKind::AlterReplicaLogDirs(r) => {
            ResponseKind::AlterReplicaLogDirs(cluster_ops::alter_replica_log_dirs(&node.broker, r))
        }
        RequestKind::DescribeLogDirs(r) => {
            ResponseKind::DescribeLogDirs(admin::describe_log_dirs(broker, r))
        }
        RequestKind::WriteTxnMarkers(r) => {
            ResponseKind::WriteTxnMarkers(txn_markers::write_txn_markers(node, r).await)
        }
        RequestKind::DescribeProducers(r) => {
            ResponseKind::DescribeProducers(txn_markers::describe_producers(broker, r))
        }
        RequestKind::CreateAcls(r) => {
            ResponseKind::CreateAcls(acls::create_acls(broker, ctx, r).await)
        }
        RequestKind::DescribeAcls(r) => {
            ResponseKind::DescribeAcls(acls::describe_acls(broker, ctx, r))
        }
        RequestKind::DeleteAcls(r) => {
            ResponseKind::DeleteAcls(acls::delete_acls(broker, ctx, r).await)
        }
        RequestKind::DescribeUserScramCredentials(r) => ResponseKind::DescribeUserScramCredentials(
            users::describe_user_scram_credentials(broker, r),
        ),
        RequestKind::AlterUserScramCredentials(r) => ResponseKind::AlterUserScramCredentials(
            users::alter_user_scram_credentials(broker, r).await,
        ),
        RequestKind::DescribeClientQuotas(r) => {
            ResponseKind::DescribeClientQuotas(quotas::describe_client_quotas(broker, r))
        }
        RequestKind::AlterClientQuotas(r) => {
            ResponseKind::AlterClientQuotas(quotas::alter_client_quotas(broker, r).await)
        }
        // The connection's authentication answers these (`authentication`).
        RequestKind::SaslHandshake(_) | RequestKind::SaslAuthenticate(_) => {
            return Err("SASL request reached the handlers".into())
        }
        // `is_served` admits only the kinds above.
        _ => return Err("request kind not served".into()),
    };
    authorize::after(broker, ctx, &mut response, deferred);
    Ok(Some(response))
}
