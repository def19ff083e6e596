//! Fetch for consumers and followers: whole batches up to the HW (or LSO
//! under read_committed, with the aborted transactions that overlap what is
//! returned) for consumers, up to the LEO for followers,
//! honouring max_bytes, partition_max_bytes, min_bytes and max_wait_ms. A
//! fetch that has less than min_bytes waits (DelayedFetch) and completes as
//! soon as an append moves the LEO/HW of one of its partitions. A follower's
//! fetch offset is its LEO: the leader records it (follower progress, HW,
//! ISR expansion) before reading.

use crate::replica_manager::ReplicaManager;
use crate::zero_copy::SliceRegistry;
use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    AbortedTransaction, EpochEndOffset, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{FetchRequest, FetchResponse, ProducerId, TopicName};
use std::sync::Arc;
use std::time::Duration;
use strand_log::FileSlices;
use strand_partition::Partition;
use strand_protocol::{extensions, ErrorCode};
use strand_replication::rules::{self, fetch_can_complete, DivergingEpoch, FetchOrigin};
use strand_types::{BrokerEpoch, BrokerId, LeaderEpoch, Offset};

/// fetch.max.bytes (Kafka's default): the most one fetch response carries.
const FETCH_MAX_BYTES: usize = 57_671_680;

struct Target {
    topic: usize,
    /// `None`: the request's offset is negative (OFFSET_OUT_OF_RANGE).
    fetch_offset: Option<Offset>,
    partition_max_bytes: usize,
    last_fetched_epoch: Option<LeaderEpoch>,
    /// The request's current leader epoch (KIP-320), `None` for -1.
    current_leader_epoch: Option<LeaderEpoch>,
    partition: Result<Arc<Partition>, ErrorCode>,
    /// A follower outside the ISR fetching a replica this leader
    /// throttles (KIP-73): held back while the leader quota is spent.
    throttled: bool,
}

/// Answers a fetch. Records are handed out as file slices: each partition's
/// records field is a placeholder registered in `slices`, which the server
/// sends from the segment files (`crate::zero_copy`).
pub async fn handle(
    broker: &ReplicaManager,
    req: FetchRequest,
    version: i16,
    slices: &SliceRegistry,
) -> FetchResponse {
    let image = broker.image();
    let read_committed = req.isolation_level == 1;
    // A follower names itself and its broker epoch in ReplicaState (v15+,
    // KIP-903); the image must register it at that epoch.
    let claimed = &req.replica_state;
    let registered = BrokerId::from_wire(claimed.replica_id.0)
        .and_then(|id| image.brokers.get(&id))
        .map(|b| b.broker_epoch);
    let claimed_epoch = BrokerEpoch::from_wire(claimed.replica_epoch);
    let follower = match rules::fetch_origin(
        version,
        BrokerId::from_wire(claimed.replica_id.0),
        claimed_epoch,
        registered,
    ) {
        Ok(FetchOrigin::Follower(id)) => {
            // fetch_origin names a follower only at its registered epoch.
            claimed_epoch.map(|epoch| (id, epoch))
        }
        Ok(FetchOrigin::Consumer) => None,
        Err(code) => {
            tracing::debug!(
                replica_id = claimed.replica_id.0,
                replica_epoch = claimed.replica_epoch,
                ?registered,
                "follower fetch refused"
            );
            return FetchResponse::default().with_error_code(code.code());
        }
    };
    let any_replica = rules::fetch_reads_any_replica(version, follower.is_some());
    let mut topics: Vec<(TopicName, uuid::Uuid)> = Vec::new();
    // Each topic's name (resolved from its id from v13), for the metrics.
    let mut names: Vec<Option<String>> = Vec::with_capacity(req.topics.len());
    let mut targets: Vec<(i32, i32, Target)> = Vec::new();
    for (ti, t) in req.topics.iter().enumerate() {
        // Topic ids from v13; names before.
        let name = if version >= 13 {
            image.topic_by_id(t.topic_id).map(|t| t.name.clone())
        } else {
            Some(t.topic.0.to_string())
        };
        topics.push((t.topic.clone(), t.topic_id));
        for p in &t.partitions {
            let current_leader_epoch = LeaderEpoch::from_wire(p.current_leader_epoch);
            let mut partition = match &name {
                None => Err(ErrorCode::UnknownTopicId),
                Some(n) if any_replica => {
                    broker.replica_partition_at_epoch(n, p.partition, current_leader_epoch)
                }
                Some(n) => broker.leader_partition_at_epoch(n, p.partition, current_leader_epoch),
            };
            let fetch_offset = Offset::from_wire(p.fetch_offset);
            let last_fetched_epoch = LeaderEpoch::from_wire(p.last_fetched_epoch);
            if let (Some((replica, broker_epoch)), Ok(part), Some(fetch_offset)) =
                (follower, &partition, fetch_offset)
            {
                // Strand followers report what they have fsynced.
                let durable_offset = p
                    .unknown_tagged_fields
                    .get(&extensions::FETCH_DURABLE_OFFSET_TAG)
                    .and_then(|v| extensions::decode_offset(v))
                    .map(Offset::new);
                match part.record_follower_fetch(
                    replica,
                    broker_epoch,
                    fetch_offset,
                    last_fetched_epoch,
                    durable_offset,
                ) {
                    Ok(Some(proposal)) => broker.send_alter_partition(part.clone(), proposal),
                    Ok(None) => {}
                    Err(code) => partition = Err(code),
                }
            }
            let throttled = match (follower, &partition) {
                (Some((replica, _)), Ok(part)) => {
                    broker.throttles.leader_throttled(&part.topic, part.index)
                        && !part.in_isr(replica)
                }
                _ => false,
            };
            targets.push((
                ti as i32,
                p.partition,
                Target {
                    topic: ti,
                    fetch_offset,
                    partition_max_bytes: p.partition_max_bytes.max(0) as usize,
                    last_fetched_epoch,
                    current_leader_epoch,
                    partition,
                    throttled,
                },
            ));
        }
        names.push(name);
    }
    // Kafka's fetch.max.bytes bounds every response, whatever the client asks.
    let max_bytes = if req.max_bytes <= 0 {
        FETCH_MAX_BYTES
    } else {
        (req.max_bytes as usize).min(FETCH_MAX_BYTES)
    };
    let min_bytes = req.min_bytes.max(0) as usize;
    let deadline =
        tokio::time::Instant::now() + Duration::from_millis(req.max_wait_ms.max(0) as u64);
    // Subscribe before the first read so an append between read and wait is not missed.
    let mut watches: Vec<_> = targets
        .iter()
        .filter_map(|(_, _, t)| t.partition.as_ref().ok().map(|p| p.subscribe()))
        .collect();
    let follower_id = follower.map(|(id, _)| id);
    let throttling = targets.iter().any(|(_, _, t)| t.throttled);
    // A read that finds a write holding its log waits behind it, and so
    // behind the disk that write waits on: then it holds up no other task
    // (`disk::run`). With no log held it is a `pread`, from the page cache
    // unless the data is cold, and runs here: a hand-off on every fetch
    // cost replication throughput (BENCHMARKS.md).
    let read = || {
        let busy = targets
            .iter()
            .any(|(_, _, t)| t.partition.as_ref().is_ok_and(|p| p.log_busy()));
        let quota_spent = throttling && broker.throttles.leader.is_exceeded(broker.clock.now_ms());
        let read = || {
            read_all(
                &targets,
                max_bytes,
                read_committed,
                follower_id,
                any_replica,
                quota_spent,
            )
        };
        if busy {
            crate::disk::run(read)
        } else {
            read()
        }
    };
    let mut waiting = None;
    let parts = loop {
        for w in &mut watches {
            w.borrow_and_update();
        }
        let (parts, bytes, errors) = read();
        if errors
            || fetch_can_complete(bytes, min_bytes)
            || watches.is_empty()
            || tokio::time::Instant::now() >= deadline
        {
            break parts;
        }
        // A throttled replica held back is read again once the leader
        // quota allows, not only when an append wakes the fetch.
        let quota_wait = if throttling {
            broker.throttles.leader.wait_ms(broker.clock.now_ms())
        } else {
            0
        };
        let until = if quota_wait > 0 {
            deadline.min(tokio::time::Instant::now() + Duration::from_millis(quota_wait))
        } else {
            deadline
        };
        waiting.get_or_insert_with(|| broker.metrics.waiting(false));
        let changed = futures_any_changed(&mut watches);
        if tokio::time::timeout_at(until, changed).await.is_err() && until >= deadline {
            let (parts, _, _) = read();
            break parts;
        }
    };
    if throttling {
        let bytes: usize = parts
            .iter()
            .filter(|(t, pd, _)| {
                targets.iter().any(|(ti, p, target)| {
                    target.throttled && *ti as usize == *t && *p == pd.partition_index
                })
            })
            .filter_map(|(_, _, read)| read.as_ref().map(|r| r.len))
            .sum();
        broker.throttles.leader.record(bytes, broker.clock.now_ms());
    }
    let mut responses: Vec<FetchableTopicResponse> = topics
        .into_iter()
        .map(|(name, id)| {
            FetchableTopicResponse::default()
                .with_topic(name)
                .with_topic_id(id)
        })
        .collect();
    drop(waiting);
    for (t, mut pd, read) in parts {
        if let Some(read) = read {
            if let Some(Some(name)) = names.get(t) {
                broker
                    .metrics
                    .sent(name, read.len as u64, follower_id.is_some());
            }
            pd.records = Some(match slices.placeholder(read.slices.clone(), read.len) {
                Some(placeholder) => placeholder,
                // Past what a placeholder covers: read the bytes here.
                None => match read.to_bytes() {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::error!(partition = pd.partition_index, error = %e, "fetch read failed");
                        pd.error_code = ErrorCode::KafkaStorageError.code();
                        Bytes::new()
                    }
                },
            });
        }
        responses[t].partitions.push(pd);
    }
    FetchResponse::default()
        .with_responses(responses)
        .with_session_id(0)
}

/// Resolves when any of the watched partitions publishes new offsets.
async fn futures_any_changed(
    watches: &mut [tokio::sync::watch::Receiver<strand_partition::PartitionOffsets>],
) {
    let futs = watches.iter_mut().map(|w| Box::pin(w.changed()));
    let _ = futures_util::future::select_all(futs).await;
}

/// One partition's answer: its topic's index in the response, the
/// partition data, and the records read (placed once the fetch is answered).
type PartitionRead = (usize, PartitionData, Option<FileSlices>);

fn read_all(
    targets: &[(i32, i32, Target)],
    max_bytes: usize,
    read_committed: bool,
    follower: Option<BrokerId>,
    any_replica: bool,
    quota_spent: bool,
) -> (Vec<PartitionRead>, usize, bool) {
    let mut out = Vec::with_capacity(targets.len());
    let mut total = 0usize;
    let mut errors = false;
    for (_, index, t) in targets {
        let mut pd = PartitionData::default()
            .with_partition_index(*index)
            .with_high_watermark(-1)
            .with_last_stable_offset(-1)
            .with_log_start_offset(-1)
            .with_preferred_read_replica(kafka_protocol::messages::BrokerId(-1));
        match &t.partition {
            Err(code) => {
                pd.error_code = code.code();
                errors = true;
            }
            Ok(p) => {
                let offsets = p.offsets();
                // Checked on every read, not only when the request came in:
                // a fetch that waited must not be answered from a later
                // leader term (nor after this broker stopped leading).
                let term = if any_replica {
                    rules::check_replica_fetch_term(
                        offsets.leading_epoch,
                        p.leader_epoch(),
                        t.current_leader_epoch,
                    )
                } else {
                    rules::check_fetch_term(offsets.leading_epoch, t.current_leader_epoch)
                };
                if let Err(code) = term {
                    pd.error_code = code.code();
                    pd.records = Some(Bytes::new());
                    errors = true;
                    out.push((t.topic, pd, None));
                    continue;
                }
                pd.high_watermark = offsets.high_watermark.get();
                // Kafka reports the LSO whatever the isolation level.
                pd.last_stable_offset = offsets.last_stable_offset.get();
                pd.log_start_offset = offsets.log_start_offset.get();
                // Kafka: an empty list under read_committed, null otherwise
                // (the codec's default is an empty list).
                pd.aborted_transactions = read_committed.then(Vec::new);
                let Some(fetch_offset) = t.fetch_offset else {
                    pd.error_code = ErrorCode::OffsetOutOfRange.code();
                    pd.records = Some(Bytes::new());
                    errors = true;
                    out.push((t.topic, pd, None));
                    continue;
                };
                if let Some(diverging) = p.diverging_epoch(t.last_fetched_epoch, fetch_offset) {
                    let (epoch, end_offset) = DivergingEpoch::to_wire(Some(diverging));
                    pd.diverging_epoch = EpochEndOffset::default()
                        .with_epoch(epoch)
                        .with_end_offset(end_offset);
                    pd.records = Some(Bytes::new());
                    out.push((t.topic, pd, None));
                    continue;
                }
                // Followers read to the LEO; consumers to the HW (or LSO),
                // from the same snapshot of offsets as reported above.
                let upper = if follower.is_some() {
                    offsets.log_end_offset
                } else if read_committed {
                    offsets.last_stable_offset
                } else {
                    offsets.high_watermark
                };
                if t.throttled && quota_spent {
                    // Nothing for this replica until the quota allows.
                    pd.records = Some(Bytes::new());
                    out.push((t.topic, pd, None));
                    continue;
                }
                let remaining = max_bytes.saturating_sub(total);
                let limit = t.partition_max_bytes.min(remaining);
                // At least one batch in the first partition that has data, so
                // a batch larger than the limits still makes progress.
                let min_one = total == 0;
                // The log's read guard must be gone before the aborted
                // transactions are looked up (a second read lock behind a
                // waiting writer deadlocks: parking_lot is writer-fair).
                let read = p.read_slices(fetch_offset, limit, upper, min_one);
                match read {
                    Ok(r) => {
                        total += r.len;
                        if read_committed && follower.is_none() {
                            pd.aborted_transactions =
                                Some(aborted_transactions(p, fetch_offset, r.next_offset));
                        }
                        // Placed once the fetch is answered (not on a read
                        // that goes on waiting).
                        pd.records = Some(Bytes::new());
                        if r.len > 0 {
                            out.push((t.topic, pd, Some(r)));
                            continue;
                        }
                    }
                    Err(strand_log::LogError::OffsetOutOfRange { .. }) => {
                        pd.error_code = ErrorCode::OffsetOutOfRange.code();
                        pd.records = Some(Bytes::new());
                        errors = true;
                    }
                    Err(e) => {
                        tracing::error!(topic = %p.topic, partition = p.index, error = %e, "fetch read failed");
                        pd.error_code = ErrorCode::KafkaStorageError.code();
                        errors = true;
                    }
                }
            }
        }
        out.push((t.topic, pd, None));
    }
    (out, total, errors)
}

/// The aborted transactions a read_committed consumer needs to drop what it
/// got: those overlapping `[fetch_offset, end of the last returned batch)`
/// (Kafka's upper bound is the offset after the fetched bytes).
fn aborted_transactions(
    p: &Partition,
    fetch_offset: Offset,
    next_offset: Option<Offset>,
) -> Vec<AbortedTransaction> {
    let Some(end) = next_offset else {
        return Vec::new();
    };
    p.aborted_transactions(fetch_offset, end)
        .into_iter()
        .map(|(producer_id, first_offset)| {
            AbortedTransaction::default()
                .with_producer_id(ProducerId(producer_id.get()))
                .with_first_offset(first_offset.get())
        })
        .collect()
}
