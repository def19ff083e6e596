//! API routing: one function per request kind. Each returns the response
//! body, `None` when no response is sent (acks=0), or an error string when the
//! connection must be closed.

mod admin;
mod fetch;
mod groups;
mod metadata;
mod offsets;
mod produce;
mod txn;
mod txn_markers;

use crate::broker::Broker;
use kafka_protocol::messages::{RequestKind, ResponseKind};

pub struct RequestContext {
    pub version: i16,
    pub client_id: String,
    /// The client's address as Kafka reports it ("/127.0.0.1").
    pub client_host: String,
}

pub async fn dispatch(
    broker: &Broker,
    ctx: &RequestContext,
    request: RequestKind,
) -> Result<Option<ResponseKind>, String> {
    let v = ctx.version;
    let response = match request {
        RequestKind::ApiVersions(_) => {
            ResponseKind::ApiVersions(crate::server::api_versions_response(0))
        }
        RequestKind::Metadata(r) => ResponseKind::Metadata(metadata::handle(broker, r, v).await),
        RequestKind::Produce(r) => {
            return Ok(produce::handle(broker, r, v)
                .await?
                .map(ResponseKind::Produce))
        }
        RequestKind::Fetch(r) => ResponseKind::Fetch(fetch::handle(broker, r, v).await),
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
            ResponseKind::DescribeConfigs(admin::describe_configs(broker, r, v))
        }
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(admin::alter_configs(broker, r).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            ResponseKind::IncrementalAlterConfigs(admin::incremental_alter_configs(broker, r).await)
        }
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(metadata::describe_cluster(broker, r))
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(offsets::delete_records(broker, r))
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(offsets::offset_for_leader_epoch(broker, r))
        }
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(offsets::init_producer_id(broker, r).await)
        }
        RequestKind::DescribeQuorum(r) => {
            ResponseKind::DescribeQuorum(metadata::describe_quorum(broker, r).await)
        }
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(groups::find_coordinator(broker, r, v).await)
        }
        RequestKind::OffsetCommit(r) => {
            ResponseKind::OffsetCommit(groups::offset_commit(broker, r, v).await)
        }
        RequestKind::OffsetFetch(r) => {
            ResponseKind::OffsetFetch(groups::offset_fetch(broker, r, v).await)
        }
        RequestKind::JoinGroup(r) => {
            ResponseKind::JoinGroup(groups::join_group(broker, ctx, r).await)
        }
        RequestKind::SyncGroup(r) => ResponseKind::SyncGroup(groups::sync_group(broker, r).await),
        RequestKind::Heartbeat(r) => ResponseKind::Heartbeat(groups::heartbeat(broker, r).await),
        RequestKind::LeaveGroup(r) => {
            ResponseKind::LeaveGroup(groups::leave_group(broker, r, v).await)
        }
        RequestKind::ListGroups(r) => {
            ResponseKind::ListGroups(groups::list_groups(broker, r).await)
        }
        RequestKind::DescribeGroups(r) => {
            ResponseKind::DescribeGroups(groups::describe_groups(broker, r, v).await)
        }
        RequestKind::DeleteGroups(r) => {
            ResponseKind::DeleteGroups(groups::delete_groups(broker, r).await)
        }
        RequestKind::OffsetDelete(r) => {
            ResponseKind::OffsetDelete(groups::offset_delete(broker, r).await)
        }
        RequestKind::AddPartitionsToTxn(r) => {
            ResponseKind::AddPartitionsToTxn(txn::add_partitions_to_txn(broker, r, v).await)
        }
        RequestKind::AddOffsetsToTxn(r) => {
            ResponseKind::AddOffsetsToTxn(txn::add_offsets_to_txn(broker, r).await)
        }
        RequestKind::EndTxn(r) => ResponseKind::EndTxn(txn::end_txn(broker, r, v).await),
        RequestKind::TxnOffsetCommit(r) => {
            ResponseKind::TxnOffsetCommit(groups::txn_offset_commit(broker, r, v).await)
        }
        RequestKind::DescribeTransactions(r) => {
            ResponseKind::DescribeTransactions(txn::describe_transactions(broker, r).await)
        }
        RequestKind::ListTransactions(r) => {
            ResponseKind::ListTransactions(txn::list_transactions(broker, r).await)
        }
        RequestKind::ElectLeaders(r) => {
            ResponseKind::ElectLeaders(admin::elect_leaders(broker, r).await)
        }
        RequestKind::DescribeLogDirs(r) => {
            ResponseKind::DescribeLogDirs(admin::describe_log_dirs(broker, r))
        }
        RequestKind::WriteTxnMarkers(r) => {
            ResponseKind::WriteTxnMarkers(txn_markers::write_txn_markers(broker, r).await)
        }
        RequestKind::DescribeProducers(r) => {
            ResponseKind::DescribeProducers(txn_markers::describe_producers(broker, r))
        }
        // `is_served` admits only the kinds above.
        _ => return Err("request kind not served".into()),
    };
    Ok(Some(response))
}
