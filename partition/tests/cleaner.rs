//! The log cleaner against a model of what compaction promises (Kafka's
//! guarantees for a compacted topic): random histories of keyed writes and
//! tombstones from plain, idempotent and transactional producers (committed
//! and aborted), segment rolls, and cleaner passes at random times, on one
//! in-memory partition. After every pass, and after a restart at the end:
//!
//! * every offset still in the log holds the record first written there;
//! * a `read_committed` reader from the start sees, for every key, the
//!   latest committed value the history wrote (a deleted key may have lost
//!   its tombstone, never its deletion), and never an aborted record;
//! * nothing at or above the pass's stable bound (the LSO) was touched;
//! * a tombstone that is its key's latest record stays until its batch's
//!   delete horizon, which is at least `delete.retention.ms` after it was
//!   written;
//! * idempotent producers keep their sequence: each one's next batch is
//!   accepted after the passes and after the restart.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io;
use std::path::Path;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use proptest::prelude::*;
use strand_log::cleaner::{CleanerLogConfig, CleanerResources};
use strand_log::storage::{MemStorage, Storage, StorageFile};
use strand_log::LogConfig;
use strand_partition::{
    lease::WriteLease, AppendOrigin, Partition, PartitionIo, PartitionSettings, ReplicaState,
};
use strand_protocol::batch::{BatchHeader, BatchIter};
use strand_protocol::kafka_protocol::records::{Compression, RecordBatchDecoder};
use strand_protocol::testing::encode_records_txn;
use strand_replication::leader::LeaderConfig;
use strand_replication::rules::Acks;
use strand_types::{
    BrokerId, Clock, LeaderEpoch, ManualClock, Offset, PartitionEpoch, ProducerEpoch, ProducerId,
};
use uuid::Uuid;

const RETENTION_MS: i64 = 100;
const KEYS: u8 = 6;

#[derive(Debug, Clone)]
enum Op {
    /// Records from producer `p` (0: plain, 1-2: idempotent, 3-4:
    /// transactional), each a key and a value (`None`: a tombstone).
    Write {
        p: u8,
        records: Vec<(u8, bool)>,
        codec: u8,
    },
    /// Producer `p` (3-4) ends its open transaction.
    End {
        p: u8,
        commit: bool,
    },
    Roll,
    /// A pass after `advance` ms.
    Clean {
        advance: i64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..5, prop::collection::vec((0..KEYS, prop::bool::weighted(0.8)), 1..4), 0u8..3)
            .prop_map(|(p, records, codec)| Op::Write { p, records, codec }),
        2 => (3u8..5, any::<bool>()).prop_map(|(p, commit)| Op::End { p, commit }),
        2 => Just(Op::Roll),
        2 => (0i64..RETENTION_MS * 2).prop_map(|advance| Op::Clean { advance }),
    ]
}

/// One record as the history wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Written {
    key: u8,
    value: Option<Bytes>,
    written_ms: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxnState {
    Open,
    Committed,
    Aborted,
}

struct Harness {
    storage: MemStorage,
    /// Storage operations left before the process "dies" (see `Crashing`).
    ops_left: Arc<AtomicI64>,
    segment_bytes: u64,
    clock: Arc<ManualClock>,
    partition: Partition,
    resources: CleanerResources,
    /// Every record by offset.
    written: BTreeMap<i64, Written>,
    /// Offsets of transactional records, per transaction (producer, index).
    txn_of: HashMap<i64, (u8, u32)>,
    txns: HashMap<(u8, u32), TxnState>,
    open_txn: HashMap<u8, u32>,
    next_txn: u32,
    sequences: HashMap<u8, i32>,
    /// The delete horizon each tombstone or marker was first seen with.
    horizons: HashMap<i64, i64>,
    /// Transaction markers by offset, with their transaction.
    markers: BTreeMap<i64, (u8, u32)>,
    values: u64,
}

fn pid(p: u8) -> i64 {
    if p == 0 {
        -1
    } else {
        1000 + p as i64
    }
}

fn settings(segment_bytes: u64) -> PartitionSettings {
    PartitionSettings {
        log: LogConfig {
            segment_bytes,
            segment_ms: 10,
            index_interval_bytes: 64,
            ..LogConfig::default()
        },
        max_message_bytes: 1 << 20,
        log_append_time: false,
        min_insync_replicas: 1,
        compacted: true,
        cleaner: CleanerLogConfig {
            delete_retention_ms: RETENTION_MS,
            min_cleanable_ratio: 0.0,
            ..CleanerLogConfig::default()
        },
        timestamp_before_max_ms: i64::MAX,
        timestamp_after_max_ms: i64::MAX,
        acks: Default::default(),
        compression: None,
    }
}

fn open(storage: Arc<dyn Storage>, clock: &Arc<ManualClock>, segment_bytes: u64) -> Partition {
    let b1 = BrokerId::new(1);
    let replica = ReplicaState {
        leader_epoch: LeaderEpoch::new(1),
        partition_epoch: PartitionEpoch::ZERO,
        replicas: vec![b1],
        isr: vec![b1],
        leader: Some(b1),
        metadata_offset: 0,
    };
    let io = PartitionIo {
        storage,
        clock: clock.clone(),
        lease: Arc::new(WriteLease::unenforced()),
    };
    let p = Partition::open_in(
        io,
        Path::new("/d/c-0"),
        "c",
        Uuid::nil(),
        0,
        replica.clone(),
        settings(segment_bytes),
    )
    .expect("open");
    let config = LeaderConfig {
        min_insync_replicas: 1,
        replica_lag_time_max_ms: 1_000,
        acks: Default::default(),
    };
    p.apply_registration(replica, config, &|_| true, b1);
    p
}

impl Harness {
    fn new(segment_bytes: u64, map_memory: usize) -> Harness {
        let storage = MemStorage::new();
        let clock = Arc::new(ManualClock::starting_at(1_000_000));
        let ops_left = Arc::new(AtomicI64::new(i64::MAX));
        let partition = open(Crashing::wrap(&storage, &ops_left), &clock, segment_bytes);
        Harness {
            storage,
            ops_left,
            segment_bytes,
            clock,
            partition,
            resources: CleanerResources::new(map_memory, 0.9, f64::MAX),
            written: BTreeMap::new(),
            txn_of: HashMap::new(),
            txns: HashMap::new(),
            open_txn: HashMap::new(),
            next_txn: 0,
            sequences: HashMap::new(),
            horizons: HashMap::new(),
            markers: BTreeMap::new(),
            values: 0,
        }
    }

    fn write(&mut self, p: u8, records: &[(u8, bool)], codec: u8) {
        let now = self.clock.now_ms();
        let recs: Vec<(Option<Bytes>, Option<Bytes>, i64)> = records
            .iter()
            .map(|(k, has_value)| {
                self.values += 1;
                let value = has_value.then(|| Bytes::from(format!("v{}", self.values)));
                (Some(Bytes::from(format!("k{k}"))), value, now)
            })
            .collect();
        let transactional = p >= 3;
        let seq = if p == 0 {
            -1
        } else {
            *self.sequences.get(&p).unwrap_or(&0)
        };
        let compression = [Compression::None, Compression::Zstd, Compression::Gzip][codec as usize];
        let batch = Bytes::from(encode_records_txn(
            &recs,
            pid(p),
            0,
            seq,
            compression,
            transactional,
        ));
        let out = self
            .partition
            .append_from(&batch, Acks::Leader, 9, AppendOrigin::Client)
            .unwrap_or_else(|e| panic!("append: {:?} {}", e.code, e.message));
        if p != 0 {
            self.sequences.insert(p, seq + recs.len() as i32);
        }
        let txn = transactional.then(|| {
            *self.open_txn.entry(p).or_insert_with(|| {
                self.next_txn += 1;
                self.txns.insert((p, self.next_txn), TxnState::Open);
                self.next_txn
            })
        });
        for (i, (k, v, _)) in recs.into_iter().enumerate() {
            let offset = out.base_offset.get() + i as i64;
            let key = k.map(|k| k[1] - b'0').expect("keyed");
            self.written.insert(
                offset,
                Written {
                    key,
                    value: v,
                    written_ms: now,
                },
            );
            if let Some(t) = txn {
                self.txn_of.insert(offset, (p, t));
            }
        }
    }

    fn end(&mut self, p: u8, commit: bool) {
        let Some(t) = self.open_txn.remove(&p) else {
            return;
        };
        let out = self
            .partition
            .write_txn_marker(
                Some(ProducerId::new(pid(p))),
                ProducerEpoch::from_wire(0),
                0,
                commit,
                1,
            )
            .expect("marker");
        self.markers.insert(out.base_offset.get(), (p, t));
        self.txns.insert(
            (p, t),
            if commit {
                TxnState::Committed
            } else {
                TxnState::Aborted
            },
        );
    }

    fn roll(&mut self) {
        self.clock.advance(11);
        let now = self.clock.now_ms();
        self.partition.housekeeping(now, false, false, i64::MAX);
    }

    fn clean(&mut self, advance: i64) -> Result<(), TestCaseError> {
        self.clock.advance(advance);
        let now = self.clock.now_ms();
        let before = self.log_records();
        let bound = self.partition.offsets().last_stable_offset;
        // A full map ends a pass early: passes until one has nothing to do.
        let mut passes = 0;
        while let Some(stats) = self
            .partition
            .clean(&mut self.resources, now)
            .map_err(|e| TestCaseError::fail(e.to_string()))?
        {
            passes += 1;
            prop_assert!(passes < 1_000, "passes never end: {stats:?}");
            if stats.end >= bound.get() || stats.end == stats.first_dirty {
                break;
            }
        }
        let after = self.log_records();
        if std::env::var("CLEANER_DEBUG").is_ok() {
            eprintln!(
                "pass: {} -> {} records, bound {}, passes {}",
                before.len(),
                after.len(),
                bound,
                passes
            );
        }
        for (offset, rec) in before.range(bound.get()..) {
            prop_assert_eq!(
                after.get(offset),
                Some(rec),
                "offset {} at or above the bound {} changed",
                offset,
                bound
            );
        }
        self.check(&after, now)
    }

    /// The whole log up to the HW, read_uncommitted.
    fn read_all(&self) -> Bytes {
        let p = &self.partition;
        let o = p.offsets();
        p.read(o.log_start_offset, usize::MAX, o.high_watermark, true)
            .expect("read")
            .records
    }

    /// The control batches in the log, by offset.
    fn log_markers(&self) -> BTreeMap<i64, BatchHeader> {
        let bytes = self.read_all();
        BatchIter::new(&bytes)
            .filter(|(_, h)| h.is_control())
            .map(|(_, h)| (h.base_offset, h))
            .collect()
    }

    /// Every record in the log, by offset: (key, value, batch header).
    fn log_records(&self) -> BTreeMap<i64, (u8, Option<Bytes>, BatchHeader)> {
        let bytes = self.read_all();
        let mut out = BTreeMap::new();
        for (at, h) in BatchIter::new(&bytes) {
            if h.is_control() {
                continue;
            }
            let mut one = bytes.slice(at..at + h.total_size());
            let set = RecordBatchDecoder::decode(&mut one).expect("decode");
            for r in set.records {
                let key = r.key.as_ref().map(|k| k[1] - b'0').expect("keyed");
                out.insert(r.offset, (key, r.value.clone(), h));
            }
        }
        out
    }

    /// What a read_committed consumer sees from the start: each key's
    /// value after the last record it reads (`None`: deleted).
    fn read_committed(&self) -> Result<BTreeMap<u8, Option<Bytes>>, TestCaseError> {
        let p = &self.partition;
        let o = p.offsets();
        let lso = o.last_stable_offset;
        let bytes = p
            .read(o.log_start_offset, usize::MAX, lso, true)
            .expect("read")
            .records;
        let mut aborted: Vec<(ProducerId, Offset)> =
            p.aborted_transactions(o.log_start_offset, lso);
        aborted.sort_by_key(|(_, first)| *first);
        let mut aborted = aborted.into_iter().peekable();
        let mut skipping: HashSet<i64> = HashSet::new();
        let mut view = BTreeMap::new();
        for (at, h) in BatchIter::new(&bytes) {
            while let Some((pid, _)) = aborted.next_if(|(_, first)| first.get() <= h.last_offset())
            {
                skipping.insert(pid.get());
            }
            let mut one = bytes.slice(at..at + h.total_size());
            let set = RecordBatchDecoder::decode(&mut one).expect("decode");
            if h.is_control() {
                if let Some(r) = set.records.first() {
                    let abort = r.key.as_ref().is_some_and(|k| k.len() >= 4 && k[3] == 0);
                    if abort {
                        skipping.remove(&h.producer_id);
                    }
                }
                continue;
            }
            if h.is_transactional() && skipping.contains(&h.producer_id) {
                continue;
            }
            for r in set.records {
                if let Some(t) = self.txn_of.get(&r.offset) {
                    let state = self.txns[t];
                    prop_assert_eq!(
                        state,
                        TxnState::Committed,
                        "read_committed read offset {} of a transaction {:?}",
                        r.offset,
                        state
                    );
                }
                let key = r.key.as_ref().map(|k| k[1] - b'0').expect("keyed");
                view.insert(key, r.value.clone());
            }
        }
        Ok(view)
    }

    /// The model's read_committed view over offsets below `lso`.
    fn model_view(&self, lso: i64) -> BTreeMap<u8, Option<Bytes>> {
        let mut view = BTreeMap::new();
        for (offset, w) in self.written.range(..lso) {
            if let Some(t) = self.txn_of.get(offset) {
                if self.txns[t] != TxnState::Committed {
                    continue;
                }
            }
            view.insert(w.key, w.value.clone());
        }
        view
    }

    fn check(
        &mut self,
        records: &BTreeMap<i64, (u8, Option<Bytes>, BatchHeader)>,
        now: i64,
    ) -> Result<(), TestCaseError> {
        // Offsets keep their records.
        for (offset, (key, value, _)) in records {
            let w = &self.written[offset];
            prop_assert_eq!(
                (w.key, &w.value),
                (*key, value),
                "offset {} changed",
                offset
            );
        }
        // Latest values per key, deletions as deletions.
        let lso = self.partition.offsets().last_stable_offset.get();
        let got = self.read_committed()?;
        let want = self.model_view(lso);
        for k in 0..KEYS {
            let g = got.get(&k).cloned().flatten();
            let w = want.get(&k).cloned().flatten();
            prop_assert_eq!(g, w, "key {}: latest value", k);
        }
        // Markers: each goes only once no record of its transaction is
        // left, and after the delete horizon it was seen with.
        let markers = self.log_markers();
        for (offset, txn) in &self.markers {
            match markers.get(offset) {
                Some(h) => {
                    if let Some(horizon) = h.delete_horizon_ms() {
                        self.horizons.entry(*offset).or_insert(horizon);
                    }
                }
                None => {
                    let horizon = self.horizons.get(offset).copied();
                    prop_assert!(
                        horizon.is_some_and(|h| now >= h),
                        "marker {} removed at {} before its horizon {:?}",
                        offset,
                        now,
                        horizon
                    );
                    let left = records.keys().find(|o| self.txn_of.get(o) == Some(txn));
                    prop_assert!(
                        left.is_none(),
                        "marker {} removed while offset {:?} of its transaction is left",
                        offset,
                        left
                    );
                }
            }
        }
        // Tombstones: seen with a horizon before they go, and that horizon
        // at least delete.retention.ms after their write.
        // A record supersedes a tombstone only if a reader may see it.
        let latest_of_key: HashMap<u8, i64> = self
            .written
            .iter()
            .filter(|(o, _)| {
                self.txn_of
                    .get(o)
                    .is_none_or(|t| self.txns[t] == TxnState::Committed)
            })
            .map(|(o, w)| (w.key, *o))
            .collect();
        for (offset, w) in &self.written {
            if w.value.is_some() {
                continue;
            }
            match records.get(offset) {
                Some((_, _, h)) => {
                    if let Some(horizon) = h.delete_horizon_ms() {
                        let first = *self.horizons.entry(*offset).or_insert(horizon);
                        prop_assert!(
                            first >= w.written_ms + RETENTION_MS,
                            "tombstone {} horizon {} written at {}",
                            offset,
                            first,
                            w.written_ms
                        );
                    }
                }
                None => {
                    let superseded = latest_of_key.get(&w.key).is_some_and(|l| l > offset);
                    let aborted = self
                        .txn_of
                        .get(offset)
                        .is_some_and(|t| self.txns[t] == TxnState::Aborted);
                    if !superseded && !aborted {
                        let horizon = self.horizons.get(offset).copied();
                        prop_assert!(
                            horizon.is_some_and(|h| now >= h),
                            "tombstone {} removed at {} before its horizon {:?}",
                            offset,
                            now,
                            horizon
                        );
                    }
                }
            }
        }
        Ok(())
    }

    /// Each idempotent producer's next batch is accepted in sequence.
    fn producers_continue(&mut self) {
        for p in [1u8, 2] {
            if self.sequences.contains_key(&p) {
                self.write(p, &[(0, true)], 0);
            }
        }
    }

    /// A restart that lost the producer snapshots: the producer state is
    /// rebuilt from the cleaned log alone.
    fn restart(&mut self, segment_bytes: u64) {
        self.partition.close().expect("close");
        let storage = self.storage.shared();
        for f in self.storage.files() {
            if f.extension().is_some_and(|e| e == "snapshot") {
                storage.remove_file(&f).expect("remove snapshot");
            }
        }
        self.partition = open(
            Crashing::wrap(&self.storage, &self.ops_left),
            &self.clock,
            segment_bytes,
        );
    }

    /// The process dies after `n` more storage operations; then the power
    /// goes (unsynced bytes lost, half of the last unsynced write of each
    /// file kept) and the partition is opened again. Returns whether the
    /// death came before the work was done.
    fn die_after(&mut self, n: i64, work: impl FnOnce(&mut Harness)) -> bool {
        self.ops_left.store(n, Ordering::SeqCst);
        work(self);
        let died = self.ops_left.load(Ordering::SeqCst) < 0;
        self.storage.crash(|_, unsynced| unsynced / 2);
        self.ops_left.store(i64::MAX, Ordering::SeqCst);
        self.partition = open(
            Crashing::wrap(&self.storage, &self.ops_left),
            &self.clock,
            self.segment_bytes,
        );
        died
    }
}

fn run(ops: &[Op], segment_bytes: u64, map_memory: usize) -> Result<(), TestCaseError> {
    let mut h = Harness::new(segment_bytes, map_memory);
    for op in ops {
        match op {
            Op::Write { p, records, codec } => h.write(*p, records, *codec),
            Op::End { p, commit } => h.end(*p, *commit),
            Op::Roll => h.roll(),
            Op::Clean { advance } => h.clean(*advance)?,
        }
    }
    for p in [3u8, 4] {
        h.end(p, true);
    }
    h.roll();
    h.clean(RETENTION_MS)?;
    h.clean(RETENTION_MS)?;
    h.producers_continue();
    h.restart(segment_bytes);
    let records = h.log_records();
    let now = h.clock.now_ms();
    h.check(&records, now)?;
    // Every transaction ended: nothing holds the LSO back, before or after
    // the restart rebuilt the producer state from what the cleaner kept.
    let o = h.partition.offsets();
    prop_assert_eq!(
        o.last_stable_offset,
        o.high_watermark,
        "a transaction looks open after the restart"
    );
    h.producers_continue();
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(2_000),
        ..ProptestConfig::default()
    })]

    /// Small segments and a map of a dozen keys: passes end early and
    /// groups span several segments.
    #[test]
    fn cleaning_keeps_what_compaction_promises(
        ops in prop::collection::vec(op(), 1..60),
        segment_bytes in 150u64..600,
        map_keys in 2usize..24,
    ) {
        run(&ops, segment_bytes, map_keys * strand_log::cleaner::offset_map::SLOT_BYTES)?;
    }
}

/// The simplest history, spelled out: the last value of each key stays,
/// earlier ones go, a tombstone outlives its horizon only as a gap.
#[test]
fn a_compacted_log_keeps_the_last_value_per_key() {
    let mut h = Harness::new(200, 1 << 16);
    for round in 0..5 {
        for k in 0..3 {
            h.write(0, &[(k, !(round == 4 && k == 2))], 0);
        }
        h.roll();
    }
    h.clean(0).unwrap();
    let recs = h.log_records();
    let kept: Vec<(i64, u8, bool)> = recs
        .iter()
        .map(|(o, (k, v, _))| (*o, *k, v.is_some()))
        .collect();
    // Offsets 12, 13 (round 4, keys 0 and 1) and the tombstone at 14.
    assert_eq!(kept, vec![(12, 0, true), (13, 1, true), (14, 2, false)]);
    // Past the horizon, a pass with nothing new to read leaves it (as Kafka).
    h.clean(RETENTION_MS).unwrap();
    assert!(h.log_records().contains_key(&14));
    // The next pass with new records takes it.
    h.write(0, &[(3, true)], 0);
    h.roll();
    h.clean(0).unwrap();
    let kept: Vec<i64> = h.log_records().keys().copied().collect();
    assert_eq!(
        kept,
        vec![12, 13, 15],
        "the tombstone goes after its horizon"
    );
    assert!(h
        .storage
        .shared()
        .exists(Path::new("/d/c-0/cleaner-offset-checkpoint")));
}

/// A storage whose process dies: after its operations run out, every
/// write, sync, rename and removal fails (nothing more reaches the disk).
#[derive(Debug)]
struct Crashing {
    inner: Arc<dyn Storage>,
    left: Arc<AtomicI64>,
}

fn tick(left: &AtomicI64) -> io::Result<()> {
    if left.fetch_sub(1, Ordering::SeqCst) <= 0 {
        Err(io::Error::other("the process died"))
    } else {
        Ok(())
    }
}

impl Crashing {
    fn wrap(storage: &MemStorage, left: &Arc<AtomicI64>) -> Arc<dyn Storage> {
        Arc::new(Crashing {
            inner: storage.shared(),
            left: left.clone(),
        })
    }
}

struct CrashingFile {
    inner: Box<dyn StorageFile>,
    left: Arc<AtomicI64>,
}

impl StorageFile for CrashingFile {
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
    fn read_exact_at(&self, buf: &mut [u8], pos: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, pos)
    }
    fn write_all_at(&self, buf: &[u8], pos: u64) -> io::Result<()> {
        tick(&self.left)?;
        self.inner.write_all_at(buf, pos)
    }
    fn set_len(&self, len: u64) -> io::Result<()> {
        tick(&self.left)?;
        self.inner.set_len(len)
    }
    fn sync(&self) -> io::Result<()> {
        tick(&self.left)?;
        self.inner.sync()
    }
    fn modified_ms(&self) -> io::Result<i64> {
        self.inner.modified_ms()
    }
}

impl Storage for Crashing {
    fn open(&self, path: &Path, create: bool) -> io::Result<Box<dyn StorageFile>> {
        if create && !self.inner.exists(path) {
            tick(&self.left)?;
        }
        Ok(Box::new(CrashingFile {
            inner: self.inner.open(path, create)?,
            left: self.left.clone(),
        }))
    }
    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read(path)
    }
    fn exists(&self, path: &Path) -> bool {
        self.inner.exists(path)
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        tick(&self.left)?;
        self.inner.remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        tick(&self.left)?;
        self.inner.rename(from, to)
    }
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        self.inner.list_dir(dir)
    }
    fn remove_dir_all(&self, dir: &Path) -> io::Result<()> {
        tick(&self.left)?;
        self.inner.remove_dir_all(dir)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        tick(&self.left)?;
        self.inner.sync_dir(dir)
    }
}

/// A history with every kind of record: keys rewritten, tombstones, an
/// idempotent producer, a committed and an aborted transaction.
fn crash_history(h: &mut Harness) {
    for round in 0..4u8 {
        for k in 0..4u8 {
            h.write(round % 3, &[(k, !(round == 3 && k == 1))], round % 2);
        }
        h.write(3, &[(5, true), (4, true)], 0);
        h.end(3, round % 2 == 0);
        h.roll();
    }
}

/// Kill -9 and power loss at every storage operation of a pass (the
/// first, which deduplicates, and a later one past a delete horizon,
/// which removes tombstones and markers): each restart recovers, and the
/// log then keeps every promise of `cleaning_keeps_what_compaction_promises`;
/// the producers go on in sequence.
#[test]
fn a_crash_anywhere_in_a_pass_recovers() {
    let mut rounds = 0;
    for horizon_pass in [false, true] {
        for n in 0.. {
            let mut h = Harness::new(300, 1 << 16);
            crash_history(&mut h);
            if horizon_pass {
                h.clean(0).unwrap();
                h.clock.advance(RETENTION_MS);
                h.write(0, &[(2, true)], 0);
                h.roll();
            }
            let before = h.log_records().len();
            let died = h.die_after(n, |h| {
                let now = h.clock.now_ms();
                let _ = h.partition.clean(&mut h.resources, now);
            });
            rounds += 1;
            let records = h.log_records();
            assert!(records.len() <= before);
            let now = h.clock.now_ms();
            h.check(&records, now).unwrap_or_else(|e| {
                panic!("crash after {n} operations (horizon pass {horizon_pass}): {e}")
            });
            // The next pass finishes what the crash interrupted.
            h.clean(0)
                .unwrap_or_else(|e| panic!("crash after {n}: the next pass: {e}"));
            h.producers_continue();
            let records = h.log_records();
            let now = h.clock.now_ms();
            h.check(&records, now).unwrap();
            let o = h.partition.offsets();
            assert_eq!(o.last_stable_offset, o.high_watermark, "crash after {n}");
            if !died {
                assert!(n > 10, "a pass does more than {n} storage operations");
                break;
            }
        }
    }
    assert!(rounds >= 20, "{rounds} crash points");
}

/// An fsync that fails during a pass fails the log, as any other write's
/// failure does: the pass reports the error, its output is not installed,
/// and the partition takes no more appends (KAFKA_STORAGE_ERROR) until a
/// restart recovers it; after the restart the log is as before the pass.
#[test]
fn a_failed_fsync_during_a_pass_takes_the_log_offline() {
    use strand_log::storage::Fault;
    use strand_log::LogError;
    let mut h = Harness::new(300, 1 << 16);
    crash_history(&mut h);
    let before = h.log_records();
    h.storage.inject(Fault::FailSync(PathBuf::from(
        "/d/c-0/00000000000000000000.log.cleaned",
    )));
    let now = h.clock.now_ms();
    match h.partition.clean(&mut h.resources, now) {
        Err(strand_log::cleaner::CleanError::Log(LogError::Io(_))) => {}
        other => panic!("the pass reported {other:?}"),
    }
    h.storage.clear_faults();
    let batch = Bytes::from(encode_records_txn(
        &[(
            Some(Bytes::from_static(b"k0")),
            Some(Bytes::from_static(b"v")),
            now,
        )],
        -1,
        -1,
        -1,
        Compression::None,
        false,
    ));
    let refused = h
        .partition
        .append_from(&batch, Acks::Leader, 9, AppendOrigin::Client)
        .expect_err("the log is offline");
    assert_eq!(refused.code, strand_protocol::ErrorCode::KafkaStorageError);
    assert_eq!(h.log_records(), before, "nothing installed");
    h.storage.crash(|_, _| 0);
    h.partition = open(
        Crashing::wrap(&h.storage, &h.ops_left),
        &h.clock,
        h.segment_bytes,
    );
    assert_eq!(h.log_records(), before, "recovered as before the pass");
}
