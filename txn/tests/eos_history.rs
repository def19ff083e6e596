//! Exactly-once under fencing, as a property of random histories.
//!
//! One transactional id, used by a sequence of application instances (each a
//! new `InitProducerId`), some speaking the classic protocol and some
//! transaction.version 2 (KIP-890 part 2). The coordinator is the real
//! `strand_txn::shard::TxnShard` the broker runs, its effects carried out
//! here: appends to a `__transaction_state` log (or failed on demand),
//! markers written one partition at a time, interleaved with everything
//! else; a restart loads a new shard from that log at a new coordinator
//! epoch, as a coordinator taking over does. The partitions are
//! the real `ProducerStateManager` with a log, checked and recorded the way
//! `Partition::append_from` and `Partition::write_txn_marker` do (KIP-890
//! verification first), and the group's transactional offsets are kept
//! pending per producer id until a marker, as `GroupCoordinator::on_txn_marker`
//! does.
//!
//! The model of Kafka's outcome is the set of transactions whose commit the
//! coordinator accepted (a PrepareCommit persisted for them). The properties:
//!
//! * nothing outside that set ever becomes visible to read_committed (a
//!   record followed by a commit marker of its producer), on any partition,
//!   and no offset outside it is ever committed for the group;
//! * when an instance's `InitProducerId` returns, no partition holds an open
//!   transaction of the producer id and no transactional offset is pending:
//!   every earlier instance's transaction has ended, everywhere;
//! * an instance that a later one has fenced never gets a commit accepted,
//!   whatever it sends (client calls, or raw requests ignoring its errors);
//! * once everything settles, every accepted commit is visible whole, the
//!   group's offsets are those of the last committed transaction, no
//!   transaction is left open, and no marker was ever refused.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use proptest::prelude::*;
use strand_protocol::batch::{BatchHeader, ControlType};
use strand_protocol::ErrorCode;
use strand_txn::coordinator::{self as rules, TopicPartition};
use strand_txn::shard::{
    Answer, Effect, Markers, MarkersOutcome, Reply, ShardConfig, TxnShard, WriteId,
};
use strand_txn::{ProducerStateError, ProducerStateManager, SequenceCheck};
use strand_types::{Offset, ProducerEpoch, ProducerId};

const TXN_ID: &str = "app";
const MAX_TIMEOUT_MS: i32 = 900_000;
const TXN_TIMEOUT_MS: i32 = 5_000;
const CONFIG: ShardConfig = ShardConfig {
    max_timeout_ms: MAX_TIMEOUT_MS,
};
const DATA_PARTITIONS: i32 = 2;
const OFFSETS_TOPIC: &str = "__consumer_offsets";
/// Input partitions the group commits offsets for.
const INPUT_PARTITIONS: i32 = 2;

/// A client transaction: (instance, its n-th transaction).
type Tag = (usize, u32);

fn data_tp(p: i32) -> TopicPartition {
    ("out".to_string(), p)
}

fn offsets_tp() -> TopicPartition {
    (OFFSETS_TOPIC.to_string(), 0)
}

#[derive(Debug, Clone)]
enum Entry {
    Data { pid: ProducerId, tag: Tag },
    Offsets { pid: ProducerId, tag: Tag },
    Marker { pid: ProducerId, commit: bool },
}

#[derive(Default)]
struct SimPartition {
    log: Vec<Entry>,
    producers: ProducerStateManager,
}

impl SimPartition {
    fn has_ongoing_txn(&self, pid: ProducerId, epoch: ProducerEpoch) -> bool {
        self.producers.entry(pid).is_some_and(|e| {
            e.producer_epoch == Some(epoch) && e.current_txn_first_offset.is_some()
        })
    }

    /// Read_committed visibility of each data/offsets record: the first
    /// marker of its producer after it decides it; `None` = still open.
    fn fates(&self) -> Vec<(usize, Tag, Option<bool>)> {
        let mut out = Vec::new();
        for (i, e) in self.log.iter().enumerate() {
            let (pid, tag) = match e {
                Entry::Data { pid, tag } | Entry::Offsets { pid, tag } => (*pid, *tag),
                Entry::Marker { .. } => continue,
            };
            let fate = self.log[i + 1..].iter().find_map(|later| match later {
                Entry::Marker { pid: p, commit } if *p == pid => Some(*commit),
                _ => None,
            });
            out.push((i, tag, fate));
        }
        out
    }
}

/// The group's offsets, as the group coordinator keeps them.
#[derive(Default)]
struct Group {
    pending: HashMap<ProducerId, BTreeMap<i32, Tag>>,
    committed: BTreeMap<i32, Tag>,
}

struct MarkerJob {
    markers: Markers,
    remaining: BTreeSet<TopicPartition>,
}

#[derive(Debug, Clone)]
struct ClientTxn {
    tag: Tag,
    /// Partitions a classic client has added (AddPartitionsToTxn / AddOffsetsToTxn).
    added: BTreeSet<TopicPartition>,
}

#[derive(Debug, Clone)]
struct Instance {
    tv2: bool,
    /// (producer id, epoch) once InitProducerId has returned.
    producer: Option<(ProducerId, ProducerEpoch)>,
    /// A fatal error seen (fenced): a real client stops; rogue ops go on.
    fatal: bool,
    txn: Option<ClientTxn>,
    txns_begun: u32,
    seq: HashMap<TopicPartition, i32>,
}

#[derive(Debug, Clone)]
enum Op {
    /// A new instance starts (`InitProducerId`), classic or tv2.
    Init {
        tv2: bool,
    },
    /// An instance whose InitProducerId was answered "retry" retries.
    RetryInit(usize),
    /// The instance writes one record to an output partition in its transaction.
    Produce(usize, i32),
    /// The instance sends its consumer's offsets to its transaction.
    SendOffsets(usize),
    /// The instance commits (true) or aborts its transaction.
    End(usize, bool),
    /// Raw requests with the instance's producer id and epoch that ignore
    /// every earlier error: a produce without AddPartitionsToTxn, a
    /// TxnOffsetCommit without AddOffsetsToTxn, an EndTxn.
    RogueProduce(usize, i32),
    RogueOffsets(usize),
    RogueEnd(usize, bool),
    /// The coordinator writes one more marker (to the n-th remaining
    /// partition) of the transaction it is ending.
    MarkerStep(usize),
    /// Time passes; the coordinator's timeout sweep runs.
    Tick(i64),
    /// The coordinator moves: the last persisted record is reloaded at a new
    /// coordinator epoch; a Prepare state restarts its markers.
    Restart,
    /// The coordinator's next `__transaction_state` write fails.
    FailNextWrite,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => any::<bool>().prop_map(|tv2| Op::Init { tv2 }),
        2 => (0..8usize).prop_map(Op::RetryInit),
        6 => (0..8usize, 0..DATA_PARTITIONS).prop_map(|(i, p)| Op::Produce(i, p)),
        3 => (0..8usize).prop_map(Op::SendOffsets),
        4 => (0..8usize, any::<bool>()).prop_map(|(i, c)| Op::End(i, c)),
        1 => (0..8usize, 0..DATA_PARTITIONS).prop_map(|(i, p)| Op::RogueProduce(i, p)),
        1 => (0..8usize).prop_map(Op::RogueOffsets),
        1 => (0..8usize, any::<bool>()).prop_map(|(i, c)| Op::RogueEnd(i, c)),
        6 => (0..3usize).prop_map(Op::MarkerStep),
        1 => (1..8_000i64).prop_map(Op::Tick),
        1 => Just(Op::Restart),
        1 => Just(Op::FailNextWrite),
    ]
}

struct Sim {
    now: i64,
    next_pid: i64,
    // The coordinator: its shard and the `__transaction_state` log it persists to.
    shard: TxnShard,
    txn_log: Vec<(Bytes, Option<Bytes>)>,
    coordinator_epoch: i32,
    job: Option<MarkerJob>,
    fail_next_write: bool,
    /// Answers of writes, by write.
    replies: HashMap<WriteId, Reply>,
    // The partitions and the group.
    partitions: BTreeMap<TopicPartition, SimPartition>,
    group: Group,
    // The clients.
    instances: Vec<Instance>,
    /// The newest instance whose InitProducerId returned: every older one is fenced.
    newest_granted: Option<usize>,
    // The model: transactions whose commit the coordinator accepted, in order,
    // with the offsets they sent.
    committed_txns: Vec<Tag>,
    offsets_sent: HashMap<Tag, BTreeSet<i32>>,
    refused_markers: Vec<String>,
}

fn fatal_code(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::ProducerFenced
            | ErrorCode::InvalidProducerEpoch
            | ErrorCode::InvalidProducerIdMapping
            | ErrorCode::TransactionalIdAuthorizationFailed
    )
}

impl Sim {
    fn new() -> Self {
        let mut partitions = BTreeMap::new();
        for p in 0..DATA_PARTITIONS {
            partitions.insert(data_tp(p), SimPartition::default());
        }
        partitions.insert(offsets_tp(), SimPartition::default());
        Sim {
            now: 1_000,
            next_pid: 1_000,
            shard: TxnShard::new(0, 0, CONFIG),
            txn_log: Vec::new(),
            coordinator_epoch: 0,
            job: None,
            fail_next_write: false,
            replies: HashMap::new(),
            partitions,
            group: Group::default(),
            instances: Vec::new(),
            newest_granted: None,
            committed_txns: Vec::new(),
            offsets_sent: HashMap::new(),
            refused_markers: Vec::new(),
        }
    }

    fn is_fenced(&self, i: usize) -> bool {
        self.newest_granted.is_some_and(|n| n > i)
    }

    // ---- coordinator ------------------------------------------------------

    /// Carries out the shard's effects as the broker's runtime does: an
    /// append is written to the log (or fails, when asked) and reported;
    /// markers start a job that `MarkerStep` advances.
    fn carry_out(&mut self, effects: Vec<Effect>) {
        let mut todo: std::collections::VecDeque<Effect> = effects.into();
        while let Some(effect) = todo.pop_front() {
            match effect {
                Effect::Append { write, key, value } => {
                    let result = if std::mem::take(&mut self.fail_next_write) {
                        Err(ErrorCode::CoordinatorNotAvailable)
                    } else {
                        self.txn_log.push((key, value));
                        Ok(())
                    };
                    let (reply, more) = self.shard.write_done(write, result, self.now);
                    if let Some(reply) = reply {
                        self.replies.insert(write, reply);
                    }
                    todo.extend(more);
                }
                Effect::WriteMarkers(markers) => {
                    self.job = Some(MarkerJob {
                        remaining: markers.partitions.clone(),
                        markers,
                    });
                }
            }
        }
    }

    /// An answer of the shard, now or once its write is carried out.
    fn answer<T>(
        &mut self,
        answer: Answer<T>,
        unpack: impl Fn(Reply) -> Option<Result<T, ErrorCode>>,
    ) -> Option<Result<T, ErrorCode>> {
        match answer {
            Answer::Now(r) => Some(r),
            Answer::NeedProducerId => None,
            Answer::Later { write, effects } => {
                self.carry_out(effects);
                let reply = self
                    .replies
                    .remove(&write)
                    .expect("a write carried out is answered");
                Some(unpack(reply).expect("the reply of the request's kind"))
            }
        }
    }

    fn fresh_producer_id(&mut self) -> ProducerId {
        self.next_pid += 1;
        ProducerId::new(self.next_pid - 1)
    }

    fn marker_step(&mut self, pick: usize) -> Result<(), TestCaseError> {
        let Some(job) = self.job.as_mut() else {
            return Ok(());
        };
        let m = job.markers.clone();
        let pid = m
            .producer_id
            .expect("a persisted transaction has a producer id");
        if let Some(tp) = job
            .remaining
            .iter()
            .nth(pick % job.remaining.len().max(1))
            .cloned()
        {
            let part = self.partitions.get_mut(&tp).expect("known partition");
            match part.producers.check_end_txn_marker(
                pid,
                m.producer_epoch,
                m.coordinator_epoch,
                m.transaction_version,
            ) {
                Err(e) => {
                    // The runtime stops for good on such a refusal.
                    self.refused_markers.push(format!(
                        "{tp:?}: {e} (pid {pid} epoch {:?})",
                        m.producer_epoch
                    ));
                    self.job = None;
                    let effects = self
                        .shard
                        .markers_done(&m, MarkersOutcome::Fenced, self.now);
                    self.carry_out(effects);
                    return Ok(());
                }
                Ok(()) => {
                    let offset = Offset::new(part.log.len() as i64);
                    part.log.push(Entry::Marker {
                        pid,
                        commit: m.commit,
                    });
                    part.producers.record_end_txn_marker(
                        pid,
                        m.producer_epoch,
                        m.coordinator_epoch,
                        offset,
                        self.now,
                        ControlType::from_commit(m.commit),
                    );
                    if tp == offsets_tp() {
                        if let Some(pending) = self.group.pending.remove(&pid) {
                            if m.commit {
                                self.group.committed.extend(pending);
                            }
                        }
                    }
                    job.remaining.remove(&tp);
                }
            }
        }
        if job.remaining.is_empty() {
            self.job = None;
            let effects = self
                .shard
                .markers_done(&m, MarkersOutcome::Written, self.now);
            self.carry_out(effects);
        }
        Ok(())
    }

    /// The coordinator moves: a new shard is loaded from the log at a new
    /// coordinator epoch; a Prepare state gets its markers again.
    fn restart(&mut self) {
        self.coordinator_epoch += 1;
        self.job = None;
        let (shard, effects, report) = TxnShard::load(
            0,
            self.coordinator_epoch,
            CONFIG,
            self.txn_log.iter().map(|(k, v)| (&k[..], v.as_deref())),
        );
        assert!(report.skipped.is_empty(), "{report:?}");
        self.shard = shard;
        self.carry_out(effects);
    }

    fn tick(&mut self, dt: i64) {
        self.now += dt;
        let effects = self.shard.abort_timed_out(self.now, true);
        self.carry_out(effects);
    }

    /// InitProducerId (handlers::txn::init_producer_id): the granted (pid, epoch).
    fn init_producer_id(&mut self) -> Result<(ProducerId, ProducerEpoch), ErrorCode> {
        let mut fresh = None;
        loop {
            let answer =
                self.shard
                    .init_producer_id(TXN_ID, TXN_TIMEOUT_MS, None, fresh, true, self.now);
            let unpack = |r| match r {
                Reply::InitProducerId(r) => Some(r),
                _ => None,
            };
            match self.answer(answer, unpack) {
                Some(r) => return r,
                None => fresh = Some(self.fresh_producer_id()),
            }
        }
    }

    fn add_partitions(
        &mut self,
        pid: ProducerId,
        epoch: ProducerEpoch,
        tp: &TopicPartition,
        tv: i16,
    ) -> Result<(), ErrorCode> {
        let tps = std::slice::from_ref(tp);
        let answer = self
            .shard
            .add_partitions(TXN_ID, Some(pid), Some(epoch), tps, tv, self.now);
        let unpack = |r| match r {
            Reply::AddPartitions(r) => Some(r),
            _ => None,
        };
        self.answer(answer, unpack)
            .expect("AddPartitions needs no producer id")
    }

    /// KIP-890 at the partition leader or the group coordinator: verify
    /// (classic) or add (tv2) unless the producer's transaction is already
    /// open there at this epoch.
    fn verify(
        &mut self,
        pid: ProducerId,
        epoch: ProducerEpoch,
        tp: &TopicPartition,
        tv2: bool,
    ) -> Result<(), ErrorCode> {
        if tv2 {
            return self.add_partitions(pid, epoch, tp, 2);
        }
        match self
            .shard
            .verify_partitions(TXN_ID, Some(pid), Some(epoch), std::slice::from_ref(tp))[..]
        {
            [None] => Ok(()),
            [Some(code)] => Err(code),
            _ => unreachable!("one answer per partition"),
        }
    }

    // ---- partitions -------------------------------------------------------

    /// Produce of one transactional record (handlers::produce + Partition::append_from).
    fn produce(&mut self, i: usize, tp: &TopicPartition, tag: Tag) -> Result<(), ErrorCode> {
        let inst = &self.instances[i];
        let (pid, epoch) = inst.producer.expect("initialised");
        let tv2 = inst.tv2;
        let seq = inst.seq.get(tp).copied().unwrap_or(0);
        if !self.partitions[tp].has_ongoing_txn(pid, epoch) {
            self.verify(pid, epoch, tp, tv2).map_err(|e| match e {
                ErrorCode::ProducerFenced => ErrorCode::InvalidProducerEpoch,
                other => other,
            })?;
        }
        let part = self.partitions.get_mut(tp).expect("known partition");
        let offset = part.log.len() as i64;
        let h = txn_header(pid.get(), epoch.get(), seq, offset);
        match part.producers.check_batches(&[h]) {
            Ok(SequenceCheck::Append) => {
                part.log.push(Entry::Data { pid, tag });
                part.producers.record(&h, self.now, None);
                self.instances[i].seq.insert(tp.clone(), seq + 1);
                Ok(())
            }
            Ok(SequenceCheck::Duplicate(_)) => Ok(()),
            Err(e) => Err(producer_error(&e)),
        }
    }

    /// TxnOffsetCommit (handlers::groups::txn_offset_commit).
    fn txn_offset_commit(&mut self, i: usize, tag: Tag) -> Result<(), ErrorCode> {
        let inst = &self.instances[i];
        let (pid, epoch) = inst.producer.expect("initialised");
        let tv2 = inst.tv2;
        let tp = offsets_tp();
        self.verify(pid, epoch, &tp, tv2).map_err(|e| match e {
            ErrorCode::ProducerFenced => ErrorCode::InvalidProducerEpoch,
            other => other,
        })?;
        let part = self.partitions.get_mut(&tp).expect("offsets partition");
        part.producers
            .check_coordinator_batch(pid, Some(epoch))
            .map_err(|e| producer_error(&e))?;
        let offset = part.log.len() as i64;
        // Coordinator batches carry no sequence.
        let h = txn_header(pid.get(), epoch.get(), -1, offset);
        part.log.push(Entry::Offsets { pid, tag });
        part.producers.record(&h, self.now, None);
        let pending = self.group.pending.entry(pid).or_default();
        for p in 0..INPUT_PARTITIONS {
            pending.insert(p, tag);
        }
        self.offsets_sent
            .entry(tag)
            .or_default()
            .extend(0..INPUT_PARTITIONS);
        Ok(())
    }

    // ---- clients ----------------------------------------------------------

    fn live(&self, i: usize) -> Option<usize> {
        if self.instances.is_empty() {
            return None;
        }
        let i = i % self.instances.len();
        let inst = &self.instances[i];
        (inst.producer.is_some() && !inst.fatal).then_some(i)
    }

    fn current_tag(&mut self, i: usize) -> Tag {
        let inst = &mut self.instances[i];
        if let Some(t) = &inst.txn {
            return t.tag;
        }
        inst.txns_begun += 1;
        let tag = (i, inst.txns_begun);
        inst.txn = Some(ClientTxn {
            tag,
            added: BTreeSet::new(),
        });
        tag
    }

    fn client_error(&mut self, i: usize, code: ErrorCode) {
        if fatal_code(code) {
            self.instances[i].fatal = true;
        }
    }

    /// A classic client adds a partition before it first writes there.
    fn client_add(&mut self, i: usize, tp: &TopicPartition) -> bool {
        let inst = &self.instances[i];
        if inst.tv2 || inst.txn.as_ref().is_some_and(|t| t.added.contains(tp)) {
            return true;
        }
        let (pid, epoch) = inst.producer.expect("initialised");
        match self.add_partitions(pid, epoch, tp, 0) {
            Ok(()) => {
                if let Some(t) = self.instances[i].txn.as_mut() {
                    t.added.insert(tp.clone());
                }
                true
            }
            Err(code) => {
                self.client_error(i, code);
                false
            }
        }
    }

    fn end(&mut self, i: usize, commit: bool) -> Result<(), TestCaseError> {
        let inst = self.instances[i].clone();
        let (pid, epoch) = inst.producer.expect("initialised");
        let tag = inst.txn.as_ref().map(|t| t.tag);
        let mut fresh = None;
        let (answer, prepared) = loop {
            let answer = self.shard.end_txn(
                TXN_ID,
                Some(pid),
                Some(epoch),
                commit,
                inst.tv2,
                fresh,
                self.now,
            );
            match answer {
                Answer::NeedProducerId => fresh = Some(self.fresh_producer_id()),
                Answer::Now(r) => break (r, false),
                later @ Answer::Later { .. } => {
                    let unpack = |r| match r {
                        Reply::EndTxn(r) => Some(r),
                        _ => None,
                    };
                    let r = self.answer(later, unpack).expect("answered once written");
                    break (r, true);
                }
            }
        };
        match answer {
            // A Prepare persisted: the commit (or abort) is accepted.
            Ok(continue_with) if prepared => {
                let (Some(next_pid), Some(next_epoch)) = continue_with else {
                    return Err(TestCaseError::fail(format!(
                        "a prepared transaction names no producer to continue with: {continue_with:?}"
                    )));
                };
                let next = (next_pid, next_epoch);
                if commit {
                    prop_assert!(
                        !self.is_fenced(i),
                        "instance {i} was fenced by instance {:?}, yet its commit was accepted",
                        self.newest_granted
                    );
                    // A commit with nothing written (tv1 never sends one; a
                    // rogue EndTxn may) decides no client transaction.
                    if let Some(tag) = tag {
                        self.committed_txns.push(tag);
                    }
                }
                let inst = &mut self.instances[i];
                inst.txn = None;
                if next != (pid, epoch) {
                    inst.producer = Some(next);
                    inst.seq.clear();
                }
            }
            Ok(_) => {
                // Kafka answers a classic EndTxn(commit) after CompleteCommit
                // at the same epoch as a retry. Harmless only if the
                // transaction so confirmed wrote nothing of its own.
                if commit {
                    prop_assert!(
                        tag.is_none_or(|t| self.committed_txns.contains(&t) || !self.wrote(t)),
                        "EndTxn(commit) of {tag:?} answered 'already committed' but its writes were never committed"
                    );
                }
                self.instances[i].txn = None;
            }
            // A failed Prepare write: the client retries later.
            Err(_) if prepared => {}
            Err(code) => self.client_error(i, code),
        }
        Ok(())
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match op {
            Op::Init { tv2 } => {
                self.instances.push(Instance {
                    tv2: *tv2,
                    producer: None,
                    fatal: false,
                    txn: None,
                    txns_begun: 0,
                    seq: HashMap::new(),
                });
                let i = self.instances.len() - 1;
                self.try_init(i)?;
            }
            Op::RetryInit(i) => {
                if self.instances.is_empty() {
                    return Ok(());
                }
                let i = i % self.instances.len();
                if self.instances[i].producer.is_none() && !self.is_fenced(i) {
                    self.try_init(i)?;
                }
            }
            Op::Produce(i, p) => {
                let Some(i) = self.live(*i) else {
                    return Ok(());
                };
                let tp = data_tp(*p);
                let tag = self.current_tag(i);
                if self.client_add(i, &tp) {
                    if let Err(code) = self.produce(i, &tp, tag) {
                        self.client_error(i, code);
                    }
                }
            }
            Op::SendOffsets(i) => {
                let Some(i) = self.live(*i) else {
                    return Ok(());
                };
                let tag = self.current_tag(i);
                if self.client_add(i, &offsets_tp()) {
                    if let Err(code) = self.txn_offset_commit(i, tag) {
                        self.client_error(i, code);
                    }
                }
            }
            Op::End(i, commit) => {
                let Some(i) = self.live(*i) else {
                    return Ok(());
                };
                if self.instances[i].txn.is_some() {
                    self.end(i, *commit)?;
                }
            }
            Op::RogueProduce(i, p) => {
                if let Some(i) = self.rogue(*i) {
                    let tag = self.current_tag(i);
                    let _ = self.produce(i, &data_tp(*p), tag);
                }
            }
            Op::RogueOffsets(i) => {
                if let Some(i) = self.rogue(*i) {
                    let tag = self.current_tag(i);
                    let _ = self.txn_offset_commit(i, tag);
                }
            }
            Op::RogueEnd(i, commit) => {
                if let Some(i) = self.rogue(*i) {
                    self.end(i, *commit)?;
                }
            }
            Op::MarkerStep(pick) => self.marker_step(*pick)?,
            Op::Tick(dt) => self.tick(*dt),
            Op::Restart => self.restart(),
            Op::FailNextWrite => self.fail_next_write = true,
        }
        self.check_visibility()
    }

    /// Whether anything of transaction `tag` was appended anywhere.
    fn wrote(&self, tag: Tag) -> bool {
        self.partitions.values().any(|p| {
            p.log.iter().any(|e| {
                matches!(e, Entry::Data { tag: t, .. } | Entry::Offsets { tag: t, .. } if *t == tag)
            })
        })
    }

    /// Rogue requests come from instances that were initialised and then
    /// fenced by a later one.
    fn rogue(&self, i: usize) -> Option<usize> {
        if self.instances.is_empty() {
            return None;
        }
        let i = i % self.instances.len();
        (self.instances[i].producer.is_some() && self.is_fenced(i)).then_some(i)
    }

    fn try_init(&mut self, i: usize) -> Result<(), TestCaseError> {
        // CONCURRENT_TRANSACTIONS or a failed write: the client retries later.
        if let Ok(granted) = self.init_producer_id() {
            self.instances[i].producer = Some(granted);
            self.newest_granted = Some(self.newest_granted.map_or(i, |n| n.max(i)));
            self.check_no_open_transaction(i)?;
        }
        Ok(())
    }

    // ---- properties -------------------------------------------------------

    /// When InitProducerId returns, every earlier transaction of the producer
    /// id has ended on every partition, the group's offsets included.
    fn check_no_open_transaction(&self, i: usize) -> Result<(), TestCaseError> {
        let (pid, _) = self.instances[i].producer.expect("granted");
        for (tp, part) in &self.partitions {
            let open = part
                .producers
                .entry(pid)
                .and_then(|e| e.current_txn_first_offset);
            prop_assert!(
                open.is_none(),
                "InitProducerId returned to instance {i} while {tp:?} still holds an open transaction of producer {pid} (from offset {open:?})"
            );
        }
        prop_assert!(
            self.group.pending.get(&pid).is_none_or(|p| p.is_empty()),
            "InitProducerId returned to instance {i} while transactional offsets of producer {pid} are pending"
        );
        Ok(())
    }

    /// Only transactions whose commit was accepted are ever visible, and only
    /// their offsets are ever committed.
    fn check_visibility(&self) -> Result<(), TestCaseError> {
        for (tp, part) in &self.partitions {
            for (offset, tag, fate) in part.fates() {
                if fate == Some(true) {
                    prop_assert!(
                        self.committed_txns.contains(&tag),
                        "{tp:?} offset {offset}: a record of transaction {tag:?} is visible to read_committed, but its commit was never accepted (committed: {:?})",
                        self.committed_txns
                    );
                }
            }
        }
        for (p, tag) in &self.group.committed {
            prop_assert!(
                self.committed_txns.contains(tag),
                "the group's offset for input {p} comes from transaction {tag:?}, whose commit was never accepted"
            );
        }
        Ok(())
    }

    /// Drives the coordinator until nothing is left to do, then checks the
    /// settled outcome.
    fn settle(&mut self) -> Result<(), TestCaseError> {
        for _ in 0..4 {
            self.fail_next_write = false;
            // An ongoing transaction times out; markers finish.
            self.tick(i64::from(TXN_TIMEOUT_MS) + 1);
            let mut steps = 0;
            while self.job.is_some() && steps < 100 {
                self.marker_step(0)?;
                steps += 1;
            }
            if self.job.is_none()
                && self.shard.get(TXN_ID).is_none_or(|m| {
                    !m.current.state.is_prepare() && m.current.state != rules::TxnState::Ongoing
                })
            {
                break;
            }
            // A Prepare left without a job (its completion write failed): a restart resumes it.
            if self.job.is_none() {
                self.restart();
            }
        }
        self.check_visibility()?;
        prop_assert!(
            self.refused_markers.is_empty(),
            "markers were refused: {:?}",
            self.refused_markers
        );
        if let Some(meta) = self.shard.get(TXN_ID) {
            prop_assert!(
                !meta.current.state.is_prepare() && meta.current.state != rules::TxnState::Ongoing,
                "the transaction did not settle: {:?}",
                meta.current.state
            );
        }
        // Every accepted commit is visible whole; nothing is left open.
        for (tp, part) in &self.partitions {
            for (offset, tag, fate) in part.fates() {
                prop_assert!(
                    fate.is_some(),
                    "{tp:?} offset {offset}: transaction {tag:?} is still open after everything settled"
                );
                if self.committed_txns.contains(&tag) {
                    prop_assert_eq!(
                        fate,
                        Some(true),
                        "{:?} offset {}: committed transaction {:?} aborted here",
                        tp,
                        offset,
                        tag
                    );
                }
            }
        }
        // The group's offsets are those of the last committed transaction that sent any.
        let expected: BTreeMap<i32, Tag> = self
            .committed_txns
            .iter()
            .filter_map(|t| self.offsets_sent.get(t).map(|ps| (t, ps)))
            .flat_map(|(t, ps)| ps.iter().map(move |p| (*p, *t)))
            .collect();
        prop_assert_eq!(&self.group.committed, &expected);
        Ok(())
    }
}

fn txn_header(pid: i64, epoch: i16, seq: i32, base_offset: i64) -> BatchHeader {
    BatchHeader {
        base_offset,
        batch_length: 100,
        partition_leader_epoch: 0,
        magic: 2,
        crc: 0,
        attributes: 0x10,
        last_offset_delta: 0,
        base_timestamp: 1_000,
        max_timestamp: 1_000,
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        records_count: 1,
    }
}

fn producer_error(e: &ProducerStateError) -> ErrorCode {
    e.error_code()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    /// See the module docs.
    #[test]
    fn fenced_instances_never_commit(ops in proptest::collection::vec(op(), 1..120)) {
        let mut sim = Sim::new();
        for op in &ops {
            sim.apply(op)?;
        }
        sim.settle()?;
    }
}

/// The history of issue 11 as a fixed sequence: A commits, aborts; B opens a
/// transaction with records and offsets; C initialises (B is fenced), B
/// tries to commit, C finishes.
#[test]
fn zombie_history_of_issue_11() {
    for (tv2_a, tv2_b, tv2_c) in [
        (false, false, false),
        (true, true, true),
        (true, false, true),
        (false, true, false),
    ] {
        let mut sim = Sim::new();
        let mut ops = vec![Op::Init { tv2: tv2_a }];
        for _ in 0..2 {
            ops.extend([
                Op::Produce(0, 0),
                Op::Produce(0, 1),
                Op::SendOffsets(0),
                Op::End(0, true),
            ]);
            ops.extend(std::iter::repeat_n(Op::MarkerStep(0), 3));
        }
        ops.extend([Op::Produce(0, 0), Op::SendOffsets(0), Op::End(0, false)]);
        ops.extend(std::iter::repeat_n(Op::MarkerStep(0), 3));
        ops.extend([
            Op::Init { tv2: tv2_b },
            Op::Produce(1, 0),
            Op::Produce(1, 1),
            Op::SendOffsets(1),
            Op::Init { tv2: tv2_c },
        ]);
        ops.extend(std::iter::repeat_n(Op::MarkerStep(0), 3));
        ops.extend([
            Op::RetryInit(2),
            Op::End(1, true),
            Op::RogueEnd(1, true),
            Op::RogueProduce(1, 0),
            Op::RogueOffsets(1),
            Op::Produce(2, 0),
            Op::Produce(2, 1),
            Op::SendOffsets(2),
            Op::End(2, true),
        ]);
        for op in &ops {
            sim.apply(op).unwrap();
        }
        sim.settle().unwrap();
        assert_eq!(
            sim.instances[2].producer.map(|p| p.0),
            sim.instances[1].producer.map(|p| p.0)
        );
        assert!(sim.instances[1].fatal, "the zombie was told it is fenced");
        let c_txn = (2, 1);
        assert!(
            sim.committed_txns.contains(&c_txn),
            "C committed: {:?}",
            sim.committed_txns
        );
        assert!(
            !sim.committed_txns.iter().any(|t| t.0 == 1),
            "B never committed"
        );
        assert_eq!(
            sim.group.committed.values().collect::<BTreeSet<_>>(),
            BTreeSet::from([&c_txn])
        );
    }
}
