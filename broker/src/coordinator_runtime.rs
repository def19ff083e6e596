//! The runtime both coordinators (groups, transactions) run on: the
//! internal-topic partition an id maps to, appends to a partition led here
//! that wait until the high watermark covers them, and the record scan that
//! loads a coordinator's state when it becomes leader. Neither coordinator
//! imports the other; both import this.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use strand_partition::{AppendOrigin, AppendOutcome, Partition};
use strand_protocol::ErrorCode;
use strand_replication::rules::Acks;
use strand_types::{Offset, ProducerEpoch, ProducerId};

/// Kafka's coordinator partition for a group or transactional id:
/// `abs(id.hashCode()) % partitions`, with Java's `String.hashCode` over UTF-16
/// code units and Kafka's `Utils.abs` (`n & 0x7fffffff`).
pub fn coordinator_partition(id: &str, partitions: i32) -> i32 {
    let mut h: i32 = 0;
    for unit in id.encode_utf16() {
        h = h.wrapping_mul(31).wrapping_add(unit as i32);
    }
    (h & 0x7fff_ffff) % partitions.max(1)
}

/// What a coordinator does with one of its internal partitions after a
/// reconciliation (Kafka's coordinator runtime: load on becoming leader,
/// unload on resigning, reload at a new epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadAction {
    /// Led at the epoch already loaded or loading: nothing to do.
    Keep,
    /// Newly led, or led at a new epoch: drop what was loaded and load at
    /// this epoch (the coordinator epoch).
    Load(i32),
    /// No longer led here: drop what was loaded.
    Unload,
}

/// `leading`: the leader epoch if this broker leads the partition;
/// `current`: the epoch loaded or loading, if any.
pub fn load_action(leading: Option<i32>, current: Option<i32>) -> LoadAction {
    match (leading, current) {
        (Some(epoch), Some(e)) if e == epoch => LoadAction::Keep,
        (Some(epoch), _) => LoadAction::Load(epoch),
        (None, Some(_)) => LoadAction::Unload,
        (None, None) => LoadAction::Keep,
    }
}

/// Where one internal-topic partition led here stands for a coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Load<T> {
    /// Reading the partition; its ids answer COORDINATOR_LOAD_IN_PROGRESS.
    Loading { epoch: i32 },
    /// Loaded at `epoch` (the coordinator epoch markers carry), with what
    /// the coordinator keeps for it.
    Loaded { epoch: i32, state: T },
}

impl<T> Load<T> {
    pub fn epoch(&self) -> i32 {
        match self {
            Load::Loading { epoch } | Load::Loaded { epoch, .. } => *epoch,
        }
    }
}

/// A coordinator's internal-topic partitions led here, by index: the one
/// place their load state lives. Its lock is taken before the coordinator's
/// own (only [`Loads::finish`] runs coordinator code under it).
pub struct Loads<T> {
    parts: Mutex<HashMap<i32, Load<T>>>,
}

impl<T: Clone> Default for Loads<T> {
    fn default() -> Self {
        Loads {
            parts: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone> Loads<T> {
    /// What `partition`, as it stands now, asks of the coordinator (the
    /// pure [`load_action`]), recorded: loading at the new epoch, or gone.
    pub fn reconcile(&self, partition: &Partition) -> LoadAction {
        let leading = partition
            .is_leader()
            .then(|| partition.leader_epoch().get());
        let mut parts = self.parts.lock();
        let action = load_action(leading, parts.get(&partition.index).map(Load::epoch));
        match action {
            LoadAction::Keep => {}
            LoadAction::Load(epoch) => {
                parts.insert(partition.index, Load::Loading { epoch });
            }
            LoadAction::Unload => {
                parts.remove(&partition.index);
            }
        }
        action
    }

    /// `index` loaded here: its coordinator epoch and state, or the error a
    /// request for one of its ids gets.
    pub fn loaded(&self, index: i32) -> Result<(i32, T), ErrorCode> {
        match self.parts.lock().get(&index) {
            Some(Load::Loaded { epoch, state }) => Ok((*epoch, state.clone())),
            Some(Load::Loading { .. }) => Err(ErrorCode::CoordinatorLoadInProgress),
            None => Err(ErrorCode::NotCoordinator),
        }
    }

    /// Marks `index` loaded at `epoch` if it is still loading at that epoch,
    /// running `install` (which puts the loaded ids in place) under the same
    /// lock, so that no unload or newer load interleaves; false (nothing
    /// installed) when leadership moved on while it loaded.
    pub fn finish(&self, index: i32, epoch: i32, state: T, install: impl FnOnce()) -> bool {
        let mut parts = self.parts.lock();
        if !matches!(parts.get(&index), Some(Load::Loading { epoch: e }) if *e == epoch) {
            return false;
        }
        install();
        parts.insert(index, Load::Loaded { epoch, state });
        true
    }

    /// A load that failed: forgotten, so the next reconcile loads again
    /// (instead of answering COORDINATOR_LOAD_IN_PROGRESS for good).
    pub fn failed(&self, index: i32, epoch: i32) {
        let mut parts = self.parts.lock();
        if matches!(parts.get(&index), Some(Load::Loading { epoch: e }) if *e == epoch) {
            parts.remove(&index);
        }
    }

    /// What the coordinator keeps for every partition loaded here.
    pub fn all(&self) -> Vec<T> {
        self.parts
            .lock()
            .values()
            .filter_map(|l| match l {
                Load::Loaded { state, .. } => Some(state.clone()),
                Load::Loading { .. } => None,
            })
            .collect()
    }

    /// The partition is no longer hosted here; true if it was known.
    pub fn forget(&self, index: i32) -> bool {
        self.parts.lock().remove(&index).is_some()
    }
}

/// A coordinator on this runtime: what it keeps per loaded partition, how
/// it loads one and how it drops one.
pub trait Coordinator: Send + Sync + Sized + 'static {
    type State: Clone + Send + Sync + 'static;
    /// For logs: what the coordinator coordinates ("groups", ...).
    const WHAT: &'static str;

    fn loads(&self) -> &Loads<Self::State>;

    /// Drops what it keeps for partition `index`: its ids answer
    /// NOT_COORDINATOR from now on.
    fn unload(&self, index: i32);

    /// Reads the partition and installs it with [`Loads::finish`] (or
    /// reports [`Loads::failed`]).
    fn load(
        self: Arc<Self>,
        partition: Arc<Partition>,
        epoch: i32,
    ) -> impl std::future::Future<Output = ()> + Send;
}

/// After a reconciliation, for one of a coordinator's partitions hosted
/// here: load it when newly led (or led at a new epoch), unload it when no
/// longer led (Kafka's coordinator runtime: scheduleLoadOperation,
/// scheduleUnloadOperation).
pub fn on_partition<C: Coordinator>(c: &Arc<C>, partition: &Arc<Partition>) {
    let index = partition.index;
    match c.loads().reconcile(partition) {
        LoadAction::Keep => {}
        LoadAction::Load(epoch) => {
            c.unload(index);
            let (c, p) = (c.clone(), partition.clone());
            tokio::spawn(async move { c.load(p, epoch).await });
        }
        LoadAction::Unload => {
            c.unload(index);
            tracing::info!(
                topic = %partition.topic,
                partition = index,
                "no longer coordinating the {} of this partition",
                C::WHAT
            );
        }
    }
}

/// The partition is no longer hosted here (deleted or reassigned).
pub fn forget_partition<C: Coordinator>(c: &C, index: i32) {
    if c.loads().forget(index) {
        c.unload(index);
    }
}

/// Replays a partition led here from its log start to its LEO, record by
/// record in offset order (control records included), for coordinator
/// loads. Returns the LEO the scan read up to: the load may answer only
/// once the HW covers it ([`load_is_committed`]).
pub fn for_each_record(
    partition: &Partition,
    mut f: impl FnMut(&Record),
) -> Result<Offset, String> {
    // Up to the LEO when the scan starts: a coordinator loads before it
    // writes, and clients cannot append to internal topics.
    let start = partition.offsets();
    let end = start.log_end_offset;
    let mut offset = start.log_start_offset;
    while offset < end {
        let r = partition
            .read(offset, 1 << 20, end, true)
            .map_err(|e| e.to_string())?;
        if r.records.is_empty() {
            break;
        }
        let mut buf = r.records.clone();
        let mut next = offset;
        for (_, h) in strand_protocol::batch::BatchIter::new(&r.records) {
            next = next.max(Offset::from_wire(h.next_offset()).unwrap_or(next));
        }
        match RecordBatchDecoder::decode_all(&mut buf) {
            Ok(sets) => {
                for set in sets {
                    for rec in set.records.iter().filter(|r| r.offset >= offset.get()) {
                        f(rec);
                    }
                }
            }
            Err(e) => {
                tracing::warn!(topic = %partition.topic, partition = partition.index, %offset, error = %e, "undecodable batch skipped")
            }
        }
        if next <= offset {
            break;
        }
        offset = next;
    }
    Ok(end)
}

/// Whether what a load read (up to `loaded_end`) is committed, so the
/// coordinator may answer from it: a new leader's log can hold records of
/// the previous leader's term above the HW, and another replica that lacks
/// them can still be elected if this one fails first. Answering from such
/// a record (an AddPartitionsToTxn "already added", an OffsetFetch) would
/// answer from a state that may be lost. Kafka's coordinator runtime reads
/// from the committed state for the same reason.
pub fn load_is_committed(high_watermark: Offset, loaded_end: Offset) -> bool {
    high_watermark >= loaded_end
}

/// Waits until the HW covers `loaded_end` ([`load_is_committed`]) while
/// this broker still leads `partition` at `epoch`; false once it does not.
pub async fn wait_load_committed(partition: &Partition, epoch: i32, loaded_end: Offset) -> bool {
    let mut offsets = partition.subscribe();
    loop {
        let o = *offsets.borrow_and_update();
        if o.leading_epoch.map(|e| e.get()) != Some(epoch) {
            return false;
        }
        if load_is_committed(o.high_watermark, loaded_end) {
            return true;
        }
        if offsets.changed().await.is_err() {
            return false;
        }
    }
}

/// Encodes key/value records as one batch (no producer id, CreateTime now).
pub fn encode_records(kvs: &[(Bytes, Option<Bytes>)], now_ms: i64) -> Result<Bytes, String> {
    encode_records_as(kvs, None, now_ms)
}

/// Encodes key/value records as one batch; with a producer (id, epoch) the
/// batch is transactional (TxnOffsetCommit), without sequence numbers.
/// Records are stamped `now_ms` (create time).
pub fn encode_records_as(
    kvs: &[(Bytes, Option<Bytes>)],
    producer: Option<(ProducerId, ProducerEpoch)>,
    now_ms: i64,
) -> Result<Bytes, String> {
    let producer_id = ProducerId::to_wire(producer.map(|p| p.0));
    let producer_epoch = ProducerEpoch::to_wire(producer.map(|p| p.1));
    let records: Vec<Record> = kvs
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: producer.is_some(),
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id,
            producer_epoch,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch unless offset - sequence stays
            // constant; this keeps one batch with base sequence -1 (none).
            sequence: i as i32 - 1,
            timestamp: now_ms,
            key: Some(k.clone()),
            value: v.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(buf.freeze())
}

/// Appends records to a `__consumer_offsets` partition this broker leads and
/// waits until they are committed (HW), as Kafka's coordinator does with
/// acks=all.
pub async fn append_committed(
    partition: &Partition,
    kvs: &[(Bytes, Option<Bytes>)],
    timeout: Duration,
) -> Result<(), ErrorCode> {
    let outcome = append_records(partition, kvs)?;
    wait_committed(partition, &outcome, timeout).await
}

/// The append half of [`append_committed`] (acks=all rules apply).
pub fn append_records(
    partition: &Partition,
    kvs: &[(Bytes, Option<Bytes>)],
) -> Result<AppendOutcome, ErrorCode> {
    let batch = encode_records(kvs, partition.now_ms()).map_err(|e| {
        tracing::error!(error = %e, "cannot encode offsets records");
        ErrorCode::UnknownServerError
    })?;
    crate::disk::run(|| partition.append(&batch, Acks::All, 3))
        .map_err(|e| map_append_error(e.code))
}

/// Appends a transactional batch of offset records for a producer
/// (TxnOffsetCommit): sequence-free, fenced only by the producer epoch.
pub fn append_txn_records(
    partition: &Partition,
    kvs: &[(Bytes, Option<Bytes>)],
    producer_id: ProducerId,
    producer_epoch: ProducerEpoch,
) -> Result<AppendOutcome, ErrorCode> {
    let batch = encode_records_as(kvs, Some((producer_id, producer_epoch)), partition.now_ms())
        .map_err(|e| {
            tracing::error!(error = %e, "cannot encode transactional offsets records");
            ErrorCode::UnknownServerError
        })?;
    partition
        .append_from(&batch, Acks::All, 3, AppendOrigin::Coordinator)
        .map_err(|e| map_append_error(e.code))
}

/// The wait half of [`append_committed`]: until the HW covers the append.
pub async fn wait_committed(
    partition: &Partition,
    outcome: &AppendOutcome,
    timeout: Duration,
) -> Result<(), ErrorCode> {
    let deadline = tokio::time::Instant::now() + timeout;
    crate::disk::acknowledged(partition, outcome, deadline)
        .await
        .map_err(map_append_error)
}

/// Kafka's mapping of log append errors to coordinator answers.
fn map_append_error(code: ErrorCode) -> ErrorCode {
    match code {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend
        | ErrorCode::RequestTimedOut => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        ErrorCode::MessageTooLarge
        | ErrorCode::RecordListTooLarge
        | ErrorCode::InvalidFetchSize => ErrorCode::UnknownServerError,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl<T: Clone> Loads<T> {
        fn start_loading(&self, index: i32, epoch: i32) {
            self.parts.lock().insert(index, Load::Loading { epoch });
        }
    }

    #[test]
    fn loads_install_only_the_current_epoch_and_retry_a_failed_load() {
        let loads: Loads<&str> = Loads::default();
        assert_eq!(loads.loaded(3), Err(ErrorCode::NotCoordinator));
        loads.start_loading(3, 5);
        assert_eq!(loads.loaded(3), Err(ErrorCode::CoordinatorLoadInProgress));
        // A load of an older epoch finishing late installs nothing.
        let mut ran = false;
        assert!(!loads.finish(3, 4, "old", || ran = true));
        assert!(!ran);
        loads.failed(3, 4);
        assert_eq!(loads.loaded(3), Err(ErrorCode::CoordinatorLoadInProgress));
        assert!(loads.finish(3, 5, "log", || ran = true));
        assert!(ran);
        assert_eq!(loads.loaded(3), Ok((5, "log")));
        // Loaded stays loaded: a late failure report of that epoch is stale.
        loads.failed(3, 5);
        assert_eq!(loads.loaded(3), Ok((5, "log")));
        assert!(loads.forget(3));
        assert!(!loads.forget(3));
        assert_eq!(loads.loaded(3), Err(ErrorCode::NotCoordinator));
        // A failed load is forgotten, so the next reconcile loads again.
        loads.start_loading(4, 1);
        loads.failed(4, 1);
        assert_eq!(loads.loaded(4), Err(ErrorCode::NotCoordinator));
        assert_eq!(load_action(Some(1), None), LoadAction::Load(1));
    }

    #[test]
    fn coordinator_partition_matches_java_hash_code() {
        // Java: "".hashCode() == 0, "a".hashCode() == 97,
        // "hello".hashCode() == 99162322, "polygenelubricants".hashCode() == Integer.MIN_VALUE.
        assert_eq!(coordinator_partition("", 50), 0);
        assert_eq!(coordinator_partition("a", 50), 97 % 50);
        assert_eq!(coordinator_partition("hello", 50), 99162322 % 50);
        assert_eq!(coordinator_partition("polygenelubricants", 50), 0);
        for id in ["group-1", "my-consumer-group", "\u{1F600}"] {
            let p = coordinator_partition(id, 50);
            assert!((0..50).contains(&p));
        }
    }

    #[test]
    fn load_action_table() {
        use LoadAction::*;
        let cases = [
            (None, None, Keep),
            (Some(3), None, Load(3)),
            (Some(3), Some(3), Keep),
            (Some(4), Some(3), Load(4)),
            // A lower epoch than loaded is a new leadership all the same.
            (Some(2), Some(3), Load(2)),
            (None, Some(3), Unload),
        ];
        for (leading, current, want) in cases {
            assert_eq!(
                load_action(leading, current),
                want,
                "{leading:?} {current:?}"
            );
        }
    }

    #[test]
    fn encoded_records_pass_the_produce_checks() {
        let kvs = vec![
            (Bytes::from_static(b"key"), Some(Bytes::from_static(b"v"))),
            (Bytes::from_static(b"tombstone"), None),
        ];
        let batch = encode_records(&kvs, 1_000).unwrap();
        let headers = strand_protocol::batch::validate_record_set(&batch).unwrap();
        assert_eq!(headers.len(), 1);
        assert!(!headers[0].has_producer_id());
        assert!(strand_protocol::batch::keyless_record_indexes(&batch)
            .unwrap()
            .is_empty());
    }
}
