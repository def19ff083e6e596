//! Transaction coordinator requests: InitProducerId with a transactional id,
//! AddPartitionsToTxn (incl. KIP-890's verify-only form), AddOffsetsToTxn,
//! EndTxn, DescribeTransactions, ListTransactions. Each looks up the
//! transactional id on this coordinator, asks the pure rules, persists the
//! transition they decide (acks=all) and only then answers.

use crate::group_coordinator::{GroupCoordinator, OFFSETS_TOPIC};
use crate::handlers::groups::{offsets_partitions, txn_partitions};
use crate::node::Node;
use crate::txn_coordinator::{ShardHost, TxnCoordinator, TXN_TOPIC};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedTransaction;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::sync::Arc;
use strand_protocol::ErrorCode;
use strand_txn::coordinator::{TopicPartition, TxnState};
use strand_types::{self as types, ProducerEpoch};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// A request's producer id and epoch; `None` where it carries -1.
fn producer_of(id: ProducerId, epoch: i16) -> (Option<types::ProducerId>, Option<ProducerEpoch>) {
    (
        types::ProducerId::from_wire(id.0),
        ProducerEpoch::from_wire(epoch),
    )
}

/// The shard coordinating `id` here, or why this broker cannot answer for
/// it. With `create` (InitProducerId) `__transaction_state` is created if
/// it does not exist yet.
async fn host(node: &Node, id: &str, create: bool) -> Result<Arc<ShardHost>, ErrorCode> {
    let broker = &node.broker;
    let partitions = match broker.image().topics.get(TXN_TOPIC) {
        Some(t) => t.partitions.len() as i32,
        None if create => txn_partitions(broker)
            .await
            .ok_or(ErrorCode::CoordinatorNotAvailable)?,
        None => return Err(ErrorCode::NotCoordinator),
    };
    match node.txns.host(id, partitions) {
        // Led here per the image but not picked up yet (the reconcile after
        // the image change is about to start the load).
        Err(ErrorCode::NotCoordinator)
            if broker
                .image()
                .partition(TXN_TOPIC, TxnCoordinator::partition_for(id, partitions))
                .is_some_and(|p| p.leader == Some(broker.node_id())) =>
        {
            Err(ErrorCode::CoordinatorLoadInProgress)
        }
        other => other,
    }
}

pub async fn init_producer_id(node: &Node, req: InitProducerIdRequest) -> InitProducerIdResponse {
    let fail = |code: ErrorCode| {
        InitProducerIdResponse::default()
            .with_error_code(code.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    let id = req
        .transactional_id
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default();
    let host = match host(node, &id, true).await {
        Ok(h) => h,
        Err(code) => return fail(code),
    };
    // KIP-360: a client recovering names the id and epoch it had (v3+).
    let expected = types::ProducerId::from_wire(req.producer_id.0)
        .map(|pid| (pid, ProducerEpoch::from_wire(req.producer_epoch)));
    match node
        .txns
        .init_producer_id(
            &host,
            &id,
            req.transaction_timeout_ms,
            expected,
            &node.broker,
        )
        .await
    {
        Ok((pid, epoch)) => InitProducerIdResponse::default()
            .with_producer_id(ProducerId(pid.get()))
            .with_producer_epoch(epoch.get()),
        Err(code) => {
            if code == ErrorCode::ConcurrentTransactions {
                tracing::debug!(transactional_id = %id, "InitProducerId waits for a transaction to end (or fenced one)");
            }
            fail(code)
        }
    }
}

/// Adds `partitions` to the transaction of `id` (or, with `verify_only`,
/// checks they are in it). One error code per partition.
async fn add_partitions(
    node: &Node,
    id: &str,
    producer: (Option<types::ProducerId>, Option<ProducerEpoch>),
    partitions: Vec<TopicPartition>,
    verify_only: bool,
    transaction_version: i16,
) -> Vec<(TopicPartition, Option<ErrorCode>)> {
    let broker = &node.broker;
    let all = |code: Option<ErrorCode>, ps: Vec<TopicPartition>| {
        ps.into_iter().map(|p| (p, code)).collect()
    };
    // Kafka checks the partitions exist first; the others are not attempted.
    let image = broker.image();
    if !verify_only
        && partitions
            .iter()
            .any(|(t, p)| image.partition(t, *p).is_none())
    {
        return partitions
            .into_iter()
            .map(|tp| {
                let code = if image.partition(&tp.0, tp.1).is_none() {
                    ErrorCode::UnknownTopicOrPartition
                } else {
                    ErrorCode::OperationNotAttempted
                };
                (tp, Some(code))
            })
            .collect();
    }
    let host = match host(node, id, false).await {
        Ok(h) => h,
        Err(code) => return all(Some(code), partitions),
    };
    if verify_only {
        let codes =
            host.read(|shard| shard.verify_partitions(id, producer.0, producer.1, &partitions));
        return partitions.into_iter().zip(codes).collect();
    }
    let result = node
        .txns
        .add_partitions(&host, id, producer, &partitions, transaction_version)
        .await;
    all(result.err(), partitions)
}

fn topics_of(
    topics: &[add_partitions_to_txn_request::AddPartitionsToTxnTopic],
) -> Vec<TopicPartition> {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect()
}

fn topic_results(
    results: Vec<(TopicPartition, Option<ErrorCode>)>,
) -> Vec<AddPartitionsToTxnTopicResult> {
    let mut out: Vec<AddPartitionsToTxnTopicResult> = Vec::new();
    for ((topic, partition), code) in results {
        let r = AddPartitionsToTxnPartitionResult::default()
            .with_partition_index(partition)
            .with_partition_error_code(strand_protocol::code(code));
        match out.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.results_by_partition.push(r),
            None => out.push(
                AddPartitionsToTxnTopicResult::default()
                    .with_name(TopicName(s(&topic)))
                    .with_results_by_partition(vec![r]),
            ),
        }
    }
    out
}

pub async fn add_partitions_to_txn(
    node: &Node,
    req: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    if version <= 3 {
        let results = add_partitions(
            node,
            req.v3_and_below_transactional_id.0.as_str(),
            producer_of(
                req.v3_and_below_producer_id,
                req.v3_and_below_producer_epoch,
            ),
            topics_of(&req.v3_and_below_topics),
            false,
            0,
        )
        .await;
        return AddPartitionsToTxnResponse::default()
            .with_results_by_topic_v3_and_below(topic_results(results));
    }
    // v4+: batched, sent by brokers: verification (KIP-890 part 1), or from
    // v5 the implicit add for a transaction.version 2 client (part 2).
    let transaction_version = if version >= 5 { 2 } else { 0 };
    let mut out = Vec::with_capacity(req.transactions.len());
    for t in &req.transactions {
        let results = add_partitions(
            node,
            t.transactional_id.0.as_str(),
            producer_of(t.producer_id, t.producer_epoch),
            topics_of(&t.topics),
            t.verify_only,
            transaction_version,
        )
        .await;
        out.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(t.transactional_id.clone())
                .with_topic_results(topic_results(results)),
        );
    }
    AddPartitionsToTxnResponse::default().with_results_by_transaction(out)
}

pub async fn add_offsets_to_txn(
    node: &Node,
    req: AddOffsetsToTxnRequest,
) -> AddOffsetsToTxnResponse {
    let broker = &node.broker;
    let Some(partitions) = offsets_partitions(broker).await else {
        return AddOffsetsToTxnResponse::default()
            .with_error_code(ErrorCode::CoordinatorNotAvailable.code());
    };
    let tp = (
        OFFSETS_TOPIC.to_string(),
        GroupCoordinator::partition_for(req.group_id.0.as_str(), partitions),
    );
    let results = add_partitions(
        node,
        req.transactional_id.0.as_str(),
        producer_of(req.producer_id, req.producer_epoch),
        vec![tp],
        false,
        0,
    )
    .await;
    let code = results.first().and_then(|(_, c)| *c);
    AddOffsetsToTxnResponse::default().with_error_code(strand_protocol::code(code))
}

/// EndTxn; from v5 (transaction.version 2) the prepare bumps the epoch and
/// the answer carries the producer id and epoch to continue with.
pub async fn end_txn(node: &Node, req: EndTxnRequest, version: i16) -> EndTxnResponse {
    let fail = |code: ErrorCode| {
        EndTxnResponse::default()
            .with_error_code(code.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
    };
    let id = req.transactional_id.0.as_str();
    let host = match host(node, id, false).await {
        Ok(h) => h,
        Err(code) => return fail(code),
    };
    let producer = producer_of(req.producer_id, req.producer_epoch);
    match node
        .txns
        .end_txn(
            &host,
            id,
            producer,
            req.committed,
            version >= 5,
            &node.broker,
        )
        .await
    {
        Ok((pid, epoch)) => EndTxnResponse::default()
            .with_producer_id(ProducerId(types::ProducerId::to_wire(pid)))
            .with_producer_epoch(ProducerEpoch::to_wire(epoch)),
        Err(code) => fail(code),
    }
}

pub async fn describe_transactions(
    node: &Node,
    req: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let mut out = Vec::with_capacity(req.transactional_ids.len());
    for id in &req.transactional_ids {
        let mut st = TransactionState::default()
            .with_transactional_id(id.clone())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1)
            .with_transaction_start_time_ms(-1);
        let host = host(node, id.0.as_str(), false).await;
        let meta = host
            .as_ref()
            .ok()
            .and_then(|h| h.read(|shard| shard.get(id.0.as_str()).cloned()));
        match (&host, meta) {
            (Ok(_), Some(meta)) => {
                let cur = &meta.current;
                st.transaction_state = s(meta.reported_state().name());
                st.transaction_timeout_ms = cur.timeout_ms;
                st.transaction_start_time_ms = cur.start_timestamp;
                st.producer_id = ProducerId(types::ProducerId::to_wire(cur.producer_id));
                st.producer_epoch = ProducerEpoch::to_wire(cur.producer_epoch);
                let mut topics: Vec<TopicData> = Vec::new();
                for (t, p) in &cur.partitions {
                    match topics.iter_mut().find(|d| d.topic.0.as_str() == t) {
                        Some(d) => d.partitions.push(*p),
                        None => topics.push(
                            TopicData::default()
                                .with_topic(TopicName(s(t)))
                                .with_partitions(vec![*p]),
                        ),
                    }
                }
                st.topics = topics;
            }
            (Ok(_), None) => st.error_code = ErrorCode::TransactionalIdNotFound.code(),
            (Err(code), _) => st.error_code = code.code(),
        }
        out.push(st);
    }
    DescribeTransactionsResponse::default().with_transaction_states(out)
}

pub async fn list_transactions(
    node: &Node,
    req: ListTransactionsRequest,
) -> ListTransactionsResponse {
    let mut states = Vec::new();
    let mut unknown = Vec::new();
    for f in &req.state_filters {
        match TxnState::from_name(f.as_str()) {
            Some(st) => states.push(st),
            None => unknown.push(f.clone()),
        }
    }
    let now = node.broker.clock.now_ms();
    let mut out = Vec::new();
    let all: Vec<_> = node
        .txns
        .hosts()
        .iter()
        .flat_map(|h| h.read(|shard| shard.all().cloned().collect::<Vec<_>>()))
        .collect();
    for meta in &all {
        let cur = &meta.current;
        let Some(producer_id) = cur.producer_id else {
            continue;
        };
        let state = meta.reported_state();
        if !req.state_filters.is_empty() && !states.contains(&state) {
            continue;
        }
        if !req.producer_id_filters.is_empty()
            && !req
                .producer_id_filters
                .iter()
                .any(|p| p.0 == producer_id.get())
        {
            continue;
        }
        // v1: only transactions running longer than the filter.
        if req.duration_filter >= 0
            && (state != TxnState::Ongoing || now - cur.start_timestamp <= req.duration_filter)
        {
            continue;
        }
        out.push(
            ListedTransaction::default()
                .with_transactional_id(TransactionalId(s(&meta.transactional_id)))
                .with_producer_id(ProducerId(producer_id.get()))
                .with_transaction_state(s(state.name())),
        );
    }
    ListTransactionsResponse::default()
        .with_unknown_state_filters(unknown)
        .with_transaction_states(out)
}
