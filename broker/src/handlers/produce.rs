//! Produce: validate and append each partition's batch, then for acks=all wait
//! in the DelayedProduce purgatory until every partition's HW passes its
//! required offset (or the request times out).

use crate::node::Node;
use crate::replica_manager::ReplicaManager;
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use std::sync::Arc;
use std::time::Duration;
use strand_metadata::validate_topic_name;
use strand_partition::{validate_records, AppendOrigin, AppendOutcome, Partition, PartitionError};
use strand_protocol::ErrorCode;
use strand_replication::rules::Acks;
use strand_txn::VerificationGuard;
use strand_types::{ProducerEpoch, ProducerId};

/// A partition's place in the response and what happened to it.
struct Pending {
    topic: usize,
    partition: Arc<Partition>,
    outcome: AppendOutcome,
}

/// Whether a client may append to `topic`: never to the internal topics
/// (`__consumer_offsets`, `__transaction_state`), whose records only their
/// coordinators write (a client could forge commits or transaction state,
/// or plant a batch that takes a coordinator down when it loads). Kafka
/// lets a client whose id is `__admin_client` through; any client can claim
/// that id, and without authentication and ACLs (issue 18) that would undo
/// the rule, so Strand makes no exception.
pub fn client_may_append(topic: &str) -> bool {
    topic != crate::group_coordinator::OFFSETS_TOPIC && topic != crate::txn_coordinator::TXN_TOPIC
}

pub async fn handle(
    node: &Node,
    req: ProduceRequest,
    version: i16,
) -> Result<Option<ProduceResponse>, String> {
    let broker = &node.broker;
    let acks = match Acks::from_i16(req.acks) {
        Ok(a) => a,
        Err(_) => return Ok(Some(error_response(&req, ErrorCode::InvalidRequiredAcks))),
    };
    // Kafka: transactional records need a transactional id (the whole request fails).
    let transactional_records = req.topic_data.iter().any(|t| {
        t.partition_data.iter().any(|p| {
            p.records
                .as_ref()
                .is_some_and(|r| strand_protocol::batch::has_transactional_batch(r))
        })
    });
    if transactional_records && req.transactional_id.is_none() {
        return Ok(Some(error_response(
            &req,
            ErrorCode::TransactionalIdAuthorizationFailed,
        )));
    }
    let mut responses: Vec<TopicProduceResponse> = Vec::with_capacity(req.topic_data.len());
    let mut pending: Vec<Pending> = Vec::new();
    let mut any_error = false;
    for (ti, topic) in req.topic_data.iter().enumerate() {
        let name = topic.name.0.to_string();
        let mut parts = Vec::with_capacity(topic.partition_data.len());
        for pd in &topic.partition_data {
            // Checked first: a transaction must not even start on one.
            let verified = if !client_may_append(&name) {
                Err(PartitionError::new(
                    ErrorCode::InvalidTopicException,
                    format!("Cannot append to internal topic {name}"),
                ))
            } else {
                match (&req.transactional_id, pd.records.as_ref()) {
                    (Some(id), Some(records)) => {
                        verify_transaction(node, id.0.as_str(), &name, pd.index, records, version)
                            .await
                    }
                    _ => Ok(None),
                }
            };
            let result = match verified {
                Ok(guard) => {
                    append_one(
                        broker,
                        &name,
                        pd.index,
                        pd.records.as_ref(),
                        (acks, version),
                        guard,
                    )
                    .await
                }
                Err(e) => Err(e),
            };
            let mut resp = PartitionProduceResponse::default()
                .with_index(pd.index)
                .with_base_offset(-1)
                .with_log_append_time_ms(-1)
                .with_log_start_offset(-1);
            match result {
                Ok((partition, outcome)) => {
                    broker.metrics.appended(
                        &name,
                        (outcome.required_offset.get() - outcome.base_offset.get()).max(0) as u64,
                        pd.records.as_ref().map_or(0, |r| r.len()) as u64,
                    );
                    resp.base_offset = outcome.base_offset.get();
                    resp.log_append_time_ms = outcome.log_append_time.unwrap_or(-1);
                    resp.log_start_offset = outcome.log_start_offset.get();
                    if acks == Acks::All {
                        pending.push(Pending {
                            topic: ti,
                            partition,
                            outcome,
                        });
                    }
                }
                Err(e) => {
                    any_error = true;
                    tracing::debug!(topic = %name, partition = pd.index, code = ?e.code, message = %e.message, "produce refused");
                    resp.error_code = e.code.code();
                    resp.error_message = Some(StrBytes::from_string(e.message));
                    resp.record_errors = e
                        .record_errors
                        .into_iter()
                        .map(|(i, m)| {
                            BatchIndexAndErrorMessage::default()
                                .with_batch_index(i)
                                .with_batch_index_error_message(Some(StrBytes::from_string(m)))
                        })
                        .collect();
                }
            }
            parts.push(resp);
        }
        responses.push(
            TopicProduceResponse::default()
                .with_name(topic.name.clone())
                .with_topic_id(topic.topic_id)
                .with_partition_responses(parts),
        );
    }
    if acks == Acks::None {
        // Kafka closes an acks=0 connection on error so the client notices.
        return if any_error {
            Err("acks=0 produce failed".into())
        } else {
            Ok(None)
        };
    }
    if !pending.is_empty() {
        let _waiting = broker.metrics.waiting(true);
        wait_for_acks(&pending, &mut responses, req.timeout_ms).await;
    }
    Ok(Some(ProduceResponse::default().with_responses(responses)))
}

async fn append_one(
    broker: &ReplicaManager,
    topic: &str,
    index: i32,
    records: Option<&bytes::Bytes>,
    (acks, version): (Acks, i16),
    verification: Option<VerificationGuard>,
) -> Result<(Arc<Partition>, AppendOutcome), PartitionError> {
    let err = |code: ErrorCode, msg: &str| PartitionError::new(code, msg);
    if let Err(e) = validate_topic_name(topic) {
        return Err(err(ErrorCode::InvalidTopicException, &e.to_string()));
    }
    let partition = broker
        .leader_partition(topic, index)
        .map_err(|c| err(c, "partition not available on this broker"))?;
    let Some(records) = records.filter(|r| !r.is_empty()) else {
        return Err(err(ErrorCode::InvalidRecord, "empty record set"));
    };
    // Kafka refuses a v3+ request holding more than one batch before it
    // looks at any CRC (a header walk; nothing is validated yet).
    if version >= 3
        && strand_protocol::batch::BatchIter::new(records)
            .nth(1)
            .is_some()
    {
        return Err(err(
            ErrorCode::InvalidRecord,
            "Produce requests v3+ must contain exactly one record batch per partition",
        ));
    }
    // Validation (counting compressed records means decompressing them,
    // streamed in bounded memory) and the append hold up no other task.
    let outcome = crate::disk::run(|| {
        let headers = validate_records(records)?;
        let outcome = partition.append_validated(
            records,
            headers,
            acks,
            version,
            AppendOrigin::Client,
            verification,
        )?;
        // Durable acknowledgements: the HW counts fsynced offsets, so every
        // append is synced, whatever its acks (one fsync covers every append
        // made meanwhile).
        if partition.durable() {
            partition.flush_to(outcome.required_offset)?;
        }
        Ok(outcome)
    })?;
    Ok((partition, outcome))
}

/// KIP-890: a transactional batch that would open a transaction on this
/// partition is appended only if the coordinator confirms the partition is
/// in the producer's ongoing transaction (part 1), or, for Produce v12+
/// (transaction.version 2 clients), has added it (part 2).
async fn verify_transaction(
    node: &Node,
    transactional_id: &str,
    topic: &str,
    index: i32,
    records: &bytes::Bytes,
    version: i16,
) -> Result<Option<VerificationGuard>, PartitionError> {
    let broker = &node.broker;
    let Ok(h) = strand_protocol::batch::BatchHeader::parse(records) else {
        return Ok(None); // The append reports the malformed batch.
    };
    // Part 2 clients rely on the add, so it happens whatever the setting.
    let verified = h.is_transactional()
        && (broker.config.transaction_partition_verification_enable || version >= 12);
    let Some(producer_id) = ProducerId::from_wire(h.producer_id).filter(|_| verified) else {
        return Ok(None);
    };
    let Some(partition) = broker.partition(topic, index) else {
        return Ok(None); // The append reports the unknown partition.
    };
    let Some(producer_epoch) = ProducerEpoch::from_wire(h.producer_epoch) else {
        return Err(PartitionError::new(
            ErrorCode::InvalidProducerEpoch,
            format!("a transactional batch for {topic}-{index} without a producer epoch"),
        ));
    };
    // Taken first: a marker written from here on drops it, and the append
    // then refuses a batch that would open a transaction with it.
    let (guard, open) =
        partition.start_verification(producer_id, Some(producer_epoch), version >= 12);
    if open {
        return Ok(Some(guard));
    }
    node.txns.verify_in_transaction(
        &broker.image(),
        transactional_id,
        (producer_id, producer_epoch),
        topic,
        index,
        version >= 12,
    )
    .await
    .map(|()| Some(guard))
    .map_err(|code| {
        PartitionError::new(
            code,
            format!(
                "transaction verification failed for {topic}-{index}: the partition is not in producer {}'s ongoing transaction",
                h.producer_id
            ),
        )
    })
}

/// DelayedProduce: completes when every partition is done per the ack
/// decision, woken by HW, ISR and leadership changes; REQUEST_TIMED_OUT for
/// those still pending at the timeout.
async fn wait_for_acks(
    pending: &[Pending],
    responses: &mut [TopicProduceResponse],
    timeout_ms: i32,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms.max(0) as u64);
    for p in pending {
        let code = crate::disk::acknowledged(&p.partition, &p.outcome, deadline)
            .await
            .err();
        if let Some(code) = code {
            let topic = &mut responses[p.topic];
            if let Some(r) = topic
                .partition_responses
                .iter_mut()
                .find(|r| r.index == p.partition.index)
            {
                r.error_code = code.code();
            }
        }
    }
}

fn error_response(req: &ProduceRequest, code: ErrorCode) -> ProduceResponse {
    let responses = req
        .topic_data
        .iter()
        .map(|t| {
            let parts = t
                .partition_data
                .iter()
                .map(|p| {
                    PartitionProduceResponse::default()
                        .with_index(p.index)
                        .with_error_code(code.code())
                        .with_base_offset(-1)
                        .with_log_append_time_ms(-1)
                        .with_log_start_offset(-1)
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(t.name.clone())
                .with_topic_id(t.topic_id)
                .with_partition_responses(parts)
        })
        .collect();
    ProduceResponse::default().with_responses(responses)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_client_appends_to_internal_topics() {
        for (topic, allowed) in [
            ("orders", true),
            ("__consumer_offsets", false),
            ("__transaction_state", false),
            ("__consumer_offsetsX", true),
            ("_transaction_state", true),
        ] {
            assert_eq!(client_may_append(topic), allowed, "{topic}");
        }
    }
}
