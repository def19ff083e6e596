//! The checker: pure analysis of a [`history`](crate::history), reporting
//! every anomaly with the operations that show it.
//!
//! What it knows of the workloads: values are unique (a value read names
//! its write). A group's committed offset is checked as a register: a later
//! commit may lower it (a new member starting from an older offset). What
//! each anomaly means:
//!
//! | anomaly | the history shows |
//! |---|---|
//! | `lost_write` | an acknowledged write (send ok, or a committed transaction's) never read by anyone, though a read of its partition saw a later offset |
//! | `unseen` | an acknowledged write missing from the final read of its partition, taken after every fault healed |
//! | `duplicate` | one value at two offsets (or in two partitions) |
//! | `inconsistent_offset` | two values at one offset of a partition (reads, or a read and a delivery report, disagree) |
//! | `garbage_read` | a value read that no operation wrote |
//! | `aborted_read` | read_committed (or the final read) returned a write of a transaction that did not commit (G1a) |
//! | `partial_transaction` | some of a transaction's writes were read, another never was although reads of its partition passed its offset |
//! | `nonmonotonic_poll` | one consumer, without a new assignment or seek, read an offset at or below one it read before (or, after a seek, below the offset it sought) |
//! | `poll_skip` | one consumer, without a new assignment, read past a value it should have seen (for read_committed: one that committed or was not transactional), since its last read or the offset it sought |
//! | `nonmonotonic_send` | one producer's acknowledged writes to a partition got offsets out of the order it sent them |
//! | `offset_backwards` | OffsetFetch returned an offset no live commit wrote: one a later commit superseded before the fetch began, or one never committed |
//! | `offset_vanished` | OffsetFetch returned no offset where a commit had completed before the fetch began |
//! | `aborted_offset_commit` | OffsetFetch returned an offset that only an aborted transaction had committed |
//! | `duplicate_processing` | one input value is among the inputs of two committed transactions (exactly-once broken) |
//! | `unprocessed_input` | a value below the offset a committed transaction committed for its group is the input of no committed transaction |
//! | `realtime_order` | a write acknowledged before another write to its partition was invoked (by any client) has the higher offset |
//!
//! A transaction whose end the client did not learn (a failover, a
//! timeout) is settled from the reads before the checks: committed if
//! read_committed read any of its writes (then all must be there: a missing
//! one is `unseen` or `lost_write`), not committed if the final reads of
//! all its partitions hold none of them (then its inputs count as not
//! processed). One the reads cannot settle stays unknown.

use crate::history::{self, Completed, Event, HistoryError, Isolation, Kind, Op, Tp};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyKind {
    LostWrite,
    Unseen,
    Duplicate,
    InconsistentOffset,
    GarbageRead,
    AbortedRead,
    PartialTransaction,
    NonmonotonicPoll,
    PollSkip,
    NonmonotonicSend,
    OffsetBackwards,
    OffsetVanished,
    AbortedOffsetCommit,
    DuplicateProcessing,
    UnprocessedInput,
    RealtimeOrder,
}

impl fmt::Display for AnomalyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = serde_json::to_value(self)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        f.write_str(&s)
    }
}

/// One anomaly, with the history events that show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Anomaly {
    pub kind: AnomalyKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tp: Option<Tp>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<u64>,
    /// Indices of the events (invocations and completions) involved.
    pub events: Vec<usize>,
    pub explanation: String,
}

/// Counts of what the history holds, so a clean report can be told apart
/// from a history that exercised nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stats {
    pub operations: usize,
    pub acknowledged_writes: usize,
    pub unknown_writes: usize,
    pub transactions_committed: usize,
    pub transactions_aborted: usize,
    pub transactions_unknown: usize,
    /// Of the unknown ones, settled from the reads: committed (a write of
    /// it read by read_committed) or not (the final reads of all its
    /// partitions hold none of its writes).
    pub transactions_settled_committed: usize,
    pub transactions_settled_aborted: usize,
    pub polls: usize,
    pub records_read: usize,
    pub final_reads: usize,
    pub offset_commits: usize,
    pub offset_fetches: usize,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub stats: Stats,
    pub anomalies: Vec<Anomaly>,
}

impl Report {
    /// No anomaly of any kind.
    pub fn valid(&self) -> bool {
        self.anomalies.is_empty()
    }

    pub fn count(&self, kind: AnomalyKind) -> usize {
        self.anomalies.iter().filter(|a| a.kind == kind).count()
    }

    /// Anomalies by kind.
    pub fn counts(&self) -> BTreeMap<AnomalyKind, usize> {
        let mut m = BTreeMap::new();
        for a in &self.anomalies {
            *m.entry(a.kind).or_insert(0) += 1;
        }
        m
    }
}

/// The least a run must have done for its verdict to count: a run that
/// did almost nothing, or whose final reads did not all complete, proves
/// nothing, however clean its history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Floor {
    pub acknowledged_writes: usize,
    pub transactions_committed: usize,
    pub transactions_aborted: usize,
    pub offset_commits: usize,
    /// Every partition's final read completed.
    pub final_reads: usize,
}

impl Floor {
    /// The floor for a run of `secs` seconds reading `partitions`
    /// partitions at the end: about a twentieth of what the CI profile
    /// does per second (2026-12-07: 405 acknowledged writes, 18 committed
    /// and 2.8 aborted transactions and 1.2 offset commits a second).
    pub fn for_run(secs: u64, partitions: usize) -> Floor {
        let per = |rate: f64| (rate * secs as f64).ceil() as usize;
        Floor {
            acknowledged_writes: per(20.0),
            transactions_committed: per(1.0),
            transactions_aborted: per(0.1),
            offset_commits: per(0.05),
            final_reads: partitions,
        }
    }
}

impl Report {
    /// What the run fell short of (empty: its verdict counts).
    pub fn shortfalls(&self, floor: &Floor) -> Vec<String> {
        let s = &self.stats;
        let mut out = Vec::new();
        let mut short = |what: &str, got: usize, want: usize| {
            if got < want {
                out.push(format!("{what}: {got}, fewer than {want}"));
            }
        };
        short(
            "acknowledged writes",
            s.acknowledged_writes,
            floor.acknowledged_writes,
        );
        short(
            "committed transactions",
            s.transactions_committed,
            floor.transactions_committed,
        );
        short(
            "aborted transactions",
            s.transactions_aborted,
            floor.transactions_aborted,
        );
        short("offset commits", s.offset_commits, floor.offset_commits);
        short("completed final reads", s.final_reads, floor.final_reads);
        out
    }
}

/// What became of a write, as far as the history tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// A send acknowledged, or a transaction committed: it must be in the log.
    Acknowledged,
    /// A transaction that did not commit: it must never be visible to
    /// read_committed.
    Aborted,
    /// Unknown (a failed or timed-out send, a transaction whose end is not
    /// known).
    Unknown,
}

#[derive(Debug, Clone)]
struct WriteInfo {
    tp: Tp,
    offset: Option<i64>,
    fate: Fate,
    /// The transaction's id, if transactional.
    txn: Option<u64>,
    /// The invocation and the completion (if any).
    events: Vec<usize>,
}

/// One record some read returned.
#[derive(Debug, Clone)]
struct Read {
    tp: Tp,
    offset: i64,
    value: u64,
    isolation: Isolation,
    /// The completion event of the poll or final read.
    event: usize,
}

/// The whole analysis.
pub fn check(events: &[Event]) -> Result<Report, HistoryError> {
    let ops = history::pair(events)?;
    let mut c = Checker::default();
    c.stats.operations = ops.len();
    c.collect_writes(&ops);
    c.collect_reads(&ops);
    c.settle_unknown_transactions();
    c.check_reads();
    c.check_lost_and_unseen(&ops);
    c.check_transactions();
    c.check_sessions(&ops);
    c.check_sends();
    c.check_realtime_order();
    c.check_offsets(&ops);
    c.check_processing(&ops);
    Ok(Report {
        stats: c.stats,
        anomalies: c.anomalies,
    })
}

#[derive(Default)]
struct Checker {
    writes: BTreeMap<u64, WriteInfo>,
    /// Writes in invocation order per process (for send order).
    by_process: BTreeMap<u64, Vec<u64>>,
    txns: BTreeMap<u64, Vec<u64>>,
    /// Transactions whose end the client did not learn, settled from the
    /// reads: Acknowledged (committed) or Aborted.
    settled: BTreeMap<u64, Fate>,
    /// Partitions with a completed final read.
    finally_read: BTreeSet<Tp>,
    reads: Vec<Read>,
    /// Per partition, offset -> the first value known there.
    order: BTreeMap<Tp, BTreeMap<i64, u64>>,
    stats: Stats,
    anomalies: Vec<Anomaly>,
}

impl Checker {
    fn flag(
        &mut self,
        kind: AnomalyKind,
        tp: Option<&Tp>,
        value: Option<u64>,
        events: Vec<usize>,
        explanation: String,
    ) {
        self.anomalies.push(Anomaly {
            kind,
            tp: tp.cloned(),
            value,
            events,
            explanation,
        });
    }

    fn collect_writes(&mut self, ops: &[Completed<'_>]) {
        for op in ops {
            let mut events = vec![op.invoke.index];
            events.extend(op.completion.map(|c| c.index));
            let (writes, fate, txn) = match op.op() {
                Op::Send { write } => {
                    let fate = if op.kind() == Kind::Ok {
                        Fate::Acknowledged
                    } else {
                        Fate::Unknown
                    };
                    (std::slice::from_ref(write), fate, None)
                }
                Op::Txn {
                    id, writes, abort, ..
                } => {
                    let fate = match (op.kind(), abort) {
                        (Kind::Ok, false) => Fate::Acknowledged,
                        (Kind::Ok, true) | (Kind::Fail, _) => Fate::Aborted,
                        _ => Fate::Unknown,
                    };
                    match fate {
                        Fate::Acknowledged => self.stats.transactions_committed += 1,
                        Fate::Aborted => self.stats.transactions_aborted += 1,
                        Fate::Unknown => self.stats.transactions_unknown += 1,
                    }
                    self.txns
                        .insert(*id, writes.iter().map(|w| w.value).collect());
                    (writes.as_slice(), fate, Some(*id))
                }
                _ => continue,
            };
            for w in writes {
                match fate {
                    Fate::Acknowledged => self.stats.acknowledged_writes += 1,
                    Fate::Unknown => self.stats.unknown_writes += 1,
                    Fate::Aborted => {}
                }
                // An aborted transaction's delivery reports still give
                // offsets (the records are in the log, hidden by the abort).
                let offset = w.offset;
                if let Some(o) = offset {
                    self.order
                        .entry(w.tp.clone())
                        .or_default()
                        .entry(o)
                        .or_insert(w.value);
                }
                self.by_process
                    .entry(op.invoke.process)
                    .or_default()
                    .push(w.value);
                self.writes.insert(
                    w.value,
                    WriteInfo {
                        tp: w.tp.clone(),
                        offset,
                        fate,
                        txn,
                        events: events.clone(),
                    },
                );
            }
        }
    }

    fn collect_reads(&mut self, ops: &[Completed<'_>]) {
        for op in ops {
            let Some(done) = op.completion.filter(|c| c.kind == Kind::Ok) else {
                continue;
            };
            let (records, isolation) = match &done.op {
                Op::Poll {
                    records, isolation, ..
                } => {
                    self.stats.polls += 1;
                    (records, *isolation)
                }
                Op::FinalRead { tp, records } => {
                    self.stats.final_reads += 1;
                    self.finally_read.insert(tp.clone());
                    (records, Isolation::ReadCommitted)
                }
                _ => continue,
            };
            for r in records {
                self.stats.records_read += 1;
                self.order
                    .entry(r.tp.clone())
                    .or_default()
                    .entry(r.offset)
                    .or_insert(r.value);
                self.reads.push(Read {
                    tp: r.tp.clone(),
                    offset: r.offset,
                    value: r.value,
                    isolation,
                    event: done.index,
                });
            }
        }
    }

    /// Every value some read_committed read (or final read) returned.
    fn seen_read_committed(&self) -> BTreeSet<u64> {
        self.reads
            .iter()
            .filter(|r| r.isolation == Isolation::ReadCommitted)
            .map(|r| r.value)
            .collect()
    }

    /// A transaction whose end the client did not learn (a failover, a
    /// timeout) is settled from the reads, so that the checks of committed
    /// transactions cover it: committed if read_committed read any of its
    /// writes; not committed if every partition it wrote has a final read
    /// (the whole log, read_committed) and none of its writes is in them.
    fn settle_unknown_transactions(&mut self) {
        let seen_rc = self.seen_read_committed();
        let mut settled = BTreeMap::new();
        for (id, values) in &self.txns {
            let unknown = values
                .iter()
                .any(|v| self.writes.get(v).is_some_and(|w| w.fate == Fate::Unknown));
            if !unknown || values.is_empty() {
                continue;
            }
            let fate = if values.iter().any(|v| seen_rc.contains(v)) {
                Fate::Acknowledged
            } else if values.iter().all(|v| {
                self.writes
                    .get(v)
                    .is_some_and(|w| self.finally_read.contains(&w.tp))
            }) {
                Fate::Aborted
            } else {
                continue;
            };
            settled.insert(*id, fate);
        }
        for (id, fate) in &settled {
            for v in &self.txns[id] {
                if let Some(w) = self.writes.get_mut(v) {
                    w.fate = *fate;
                }
            }
            match fate {
                Fate::Acknowledged => self.stats.transactions_settled_committed += 1,
                _ => self.stats.transactions_settled_aborted += 1,
            }
        }
        self.settled = settled;
    }

    /// Garbage, duplicates, inconsistent offsets, aborted reads.
    fn check_reads(&mut self) {
        // (tp, offset) -> values seen there, with the events.
        let mut at: BTreeMap<(Tp, i64), BTreeMap<u64, Vec<usize>>> = BTreeMap::new();
        // value -> places, with the events.
        let mut places: BTreeMap<u64, BTreeMap<(Tp, i64), Vec<usize>>> = BTreeMap::new();
        for (v, w) in &self.writes {
            if let Some(o) = w.offset {
                at.entry((w.tp.clone(), o))
                    .or_default()
                    .entry(*v)
                    .or_default()
                    .extend(&w.events);
                places
                    .entry(*v)
                    .or_default()
                    .entry((w.tp.clone(), o))
                    .or_default()
                    .extend(&w.events);
            }
        }
        let mut garbage = BTreeSet::new();
        let mut aborted = BTreeSet::new();
        for r in &self.reads {
            at.entry((r.tp.clone(), r.offset))
                .or_default()
                .entry(r.value)
                .or_default()
                .push(r.event);
            places
                .entry(r.value)
                .or_default()
                .entry((r.tp.clone(), r.offset))
                .or_default()
                .push(r.event);
            match self.writes.get(&r.value) {
                None => {
                    garbage.insert((r.value, r.tp.clone(), r.offset, r.event));
                }
                Some(w) if w.fate == Fate::Aborted && r.isolation == Isolation::ReadCommitted => {
                    aborted.insert((r.value, r.tp.clone(), r.offset, r.event));
                }
                Some(_) => {}
            }
        }
        for (v, tp, o, e) in garbage {
            self.flag(
                AnomalyKind::GarbageRead,
                Some(&tp),
                Some(v),
                vec![e],
                if v == history::UNREADABLE {
                    format!("read a record at {tp}@{o} whose value is not a number")
                } else {
                    format!("read {v} at {tp}@{o}, which no operation wrote")
                },
            );
        }
        for (v, tp, o, e) in aborted {
            let w = &self.writes[&v];
            let mut events = w.events.clone();
            events.push(e);
            let txn = w
                .txn
                .map_or(String::new(), |t| format!(" of transaction {t}"));
            self.flag(
                AnomalyKind::AbortedRead,
                Some(&tp),
                Some(v),
                events,
                format!("read_committed read {v} at {tp}@{o}, written by an aborted write{txn}"),
            );
        }
        for ((tp, o), values) in at {
            if values.len() > 1 {
                let events = values.values().flatten().copied().collect();
                let vs: Vec<u64> = values.keys().copied().collect();
                self.flag(
                    AnomalyKind::InconsistentOffset,
                    Some(&tp),
                    None,
                    events,
                    format!("{tp}@{o} holds {vs:?} according to different operations"),
                );
            }
        }
        for (v, at) in places {
            if at.len() > 1 {
                let events = at.values().flatten().copied().collect();
                let ps: Vec<String> = at.keys().map(|(tp, o)| format!("{tp}@{o}")).collect();
                self.flag(
                    AnomalyKind::Duplicate,
                    at.keys().next().map(|(tp, _)| tp),
                    Some(v),
                    events,
                    format!("{v} is at {}", ps.join(" and ")),
                );
            }
        }
    }

    /// Acknowledged writes that no read saw although reads passed them, and
    /// those missing from the final read.
    fn check_lost_and_unseen(&mut self, ops: &[Completed<'_>]) {
        let mut seen: BTreeSet<u64> = BTreeSet::new();
        let mut furthest: BTreeMap<Tp, (i64, usize)> = BTreeMap::new();
        for r in &self.reads {
            seen.insert(r.value);
            let f = furthest.entry(r.tp.clone()).or_insert((r.offset, r.event));
            if r.offset > f.0 {
                *f = (r.offset, r.event);
            }
        }
        // The final read of each partition: the values it returned.
        let mut finals: BTreeMap<Tp, (BTreeSet<u64>, usize)> = BTreeMap::new();
        for op in ops {
            if let Some(done) = op.completion.filter(|c| c.kind == Kind::Ok) {
                if let Op::FinalRead { tp, records } = &done.op {
                    let e = finals
                        .entry(tp.clone())
                        .or_insert((BTreeSet::new(), done.index));
                    e.0.extend(records.iter().map(|r| r.value));
                }
            }
        }
        let acknowledged: Vec<(u64, WriteInfo)> = self
            .writes
            .iter()
            .filter(|(_, w)| w.fate == Fate::Acknowledged)
            .map(|(v, w)| (*v, w.clone()))
            .collect();
        for (v, w) in acknowledged {
            if let (Some(o), Some(&(max, e)), false) =
                (w.offset, furthest.get(&w.tp), seen.contains(&v))
            {
                if max > o {
                    let mut events = w.events.clone();
                    events.push(e);
                    self.flag(
                        AnomalyKind::LostWrite,
                        Some(&w.tp),
                        Some(v),
                        events,
                        format!(
                            "{v} was acknowledged at {}@{o} and never read, though a read reached offset {max}",
                            w.tp
                        ),
                    );
                }
            }
            if let Some((values, e)) = finals.get(&w.tp) {
                if !values.contains(&v) {
                    let mut events = w.events.clone();
                    events.push(*e);
                    let at = w.offset.map_or(String::new(), |o| format!("@{o}"));
                    self.flag(
                        AnomalyKind::Unseen,
                        Some(&w.tp),
                        Some(v),
                        events,
                        format!(
                            "{v} was acknowledged at {}{at} and is not in the final read",
                            w.tp
                        ),
                    );
                }
            }
        }
    }

    /// A transaction is read whole or not at all: if some of its writes
    /// were read, every other one must be, where reads passed its offset.
    fn check_transactions(&mut self) {
        let mut seen_rc: BTreeSet<u64> = BTreeSet::new();
        let mut furthest_rc: BTreeMap<Tp, i64> = BTreeMap::new();
        for r in &self.reads {
            if r.isolation == Isolation::ReadCommitted {
                seen_rc.insert(r.value);
                let f = furthest_rc.entry(r.tp.clone()).or_insert(r.offset);
                *f = (*f).max(r.offset);
            }
        }
        let mut found = Vec::new();
        for (id, values) in &self.txns {
            let read: Vec<u64> = values
                .iter()
                .copied()
                .filter(|v| seen_rc.contains(v))
                .collect();
            if read.is_empty() {
                continue;
            }
            for v in values {
                let w = &self.writes[v];
                if seen_rc.contains(v) || w.fate == Fate::Aborted {
                    // An aborted transaction's reads are aborted reads.
                    continue;
                }
                if let (Some(o), Some(&max)) = (w.offset, furthest_rc.get(&w.tp)) {
                    if max > o {
                        found.push((*id, *v, w.clone(), read.clone()));
                    }
                }
            }
        }
        for (id, v, w, read) in found {
            self.flag(
                AnomalyKind::PartialTransaction,
                Some(&w.tp),
                Some(v),
                w.events.clone(),
                format!(
                    "transaction {id}: {read:?} were read, but {v} at {}@{} never was though read_committed reads passed it",
                    w.tp,
                    w.offset.unwrap_or(-1)
                ),
            );
        }
    }

    /// Whether a read_committed consumer must see `value`.
    fn committed_visible(&self, value: u64, seen_rc: &BTreeSet<u64>) -> bool {
        match self.writes.get(&value) {
            None => false,
            Some(w) => match (w.txn, w.fate) {
                (_, Fate::Aborted) => false,
                (None, _) => true,
                (Some(_), Fate::Acknowledged) => true,
                (Some(_), Fate::Unknown) => seen_rc.contains(&value),
            },
        }
    }

    /// Per consumer session and partition: offsets only grow, and nothing
    /// visible is skipped, until a new assignment or a seek.
    fn check_sessions(&mut self, ops: &[Completed<'_>]) {
        let seen_rc = self.seen_read_committed();
        // (session, tp) -> (last offset read, its event)
        let mut last: BTreeMap<(u64, Tp), (i64, usize)> = BTreeMap::new();
        let mut found: Vec<Anomaly> = Vec::new();
        for op in ops {
            let Some(done) = op.completion.filter(|c| c.kind == Kind::Ok) else {
                continue;
            };
            match &done.op {
                Op::Assign { session, .. } => {
                    last.retain(|(s, _), _| s != session);
                }
                // A seek sets where reading resumes: the next read of the
                // partition starts at the offset (nothing visible skipped,
                // nothing below it). A negative one (no position) is not
                // known.
                Op::Seek {
                    session,
                    tp,
                    offset,
                } => {
                    if *offset >= 0 {
                        last.insert((*session, tp.clone()), (*offset - 1, done.index));
                    } else {
                        last.remove(&(*session, tp.clone()));
                    }
                }
                Op::Poll {
                    session,
                    isolation,
                    records,
                } => {
                    for r in records {
                        let key = (*session, r.tp.clone());
                        if let Some(&(prev, prev_event)) = last.get(&key) {
                            if r.offset <= prev {
                                found.push(Anomaly {
                                    kind: AnomalyKind::NonmonotonicPoll,
                                    tp: Some(r.tp.clone()),
                                    value: Some(r.value),
                                    events: vec![prev_event, done.index],
                                    explanation: format!(
                                        "session {session} read {}@{} after {}@{prev}",
                                        r.tp, r.offset, r.tp
                                    ),
                                });
                            } else if let Some(order) = self.order.get(&r.tp) {
                                let skipped: Vec<(i64, u64)> = order
                                    .range(prev + 1..r.offset)
                                    .filter(|(_, v)| match isolation {
                                        Isolation::ReadUncommitted => true,
                                        Isolation::ReadCommitted => {
                                            self.committed_visible(**v, &seen_rc)
                                        }
                                    })
                                    .map(|(o, v)| (*o, *v))
                                    .collect();
                                if !skipped.is_empty() {
                                    found.push(Anomaly {
                                        kind: AnomalyKind::PollSkip,
                                        tp: Some(r.tp.clone()),
                                        value: Some(r.value),
                                        events: vec![prev_event, done.index],
                                        explanation: format!(
                                            "session {session} read {}@{prev} then @{}, skipping {skipped:?} (offset, value)",
                                            r.tp, r.offset
                                        ),
                                    });
                                }
                            }
                        }
                        last.insert(key, (r.offset, done.index));
                    }
                }
                _ => {}
            }
        }
        self.anomalies.extend(found);
    }

    /// Real time: a write acknowledged before another write to the same
    /// partition was invoked was appended first, whatever the clients, so
    /// its offset is the lower one.
    fn check_realtime_order(&mut self) {
        // (event index, is a completion, value), in history order.
        let mut points: Vec<(usize, bool, u64)> = Vec::new();
        for (v, w) in &self.writes {
            // A transaction settled from the reads has no known moment of
            // its commit.
            let settled = w.txn.is_some_and(|id| self.settled.contains_key(&id));
            if w.fate != Fate::Acknowledged || w.offset.is_none() || settled {
                continue;
            }
            if let Some(&invoked) = w.events.first() {
                points.push((invoked, false, *v));
            }
            if let Some(&done) = w.events.get(1) {
                points.push((done, true, *v));
            }
        }
        points.sort_unstable();
        // Per partition: the highest offset acknowledged so far, its value.
        let mut done: BTreeMap<Tp, (i64, u64)> = BTreeMap::new();
        let mut found = Vec::new();
        for (_, completion, v) in points {
            let w = &self.writes[&v];
            let Some(o) = w.offset else { continue };
            if completion {
                let e = done.entry(w.tp.clone()).or_insert((o, v));
                if o > e.0 {
                    *e = (o, v);
                }
            } else if let Some(&(before, bv)) = done.get(&w.tp) {
                if o <= before {
                    let mut events = self.writes[&bv].events.clone();
                    events.extend(&w.events);
                    found.push(Anomaly {
                        kind: AnomalyKind::RealtimeOrder,
                        tp: Some(w.tp.clone()),
                        value: Some(v),
                        events,
                        explanation: format!(
                            "{bv} was acknowledged at {}@{before} before {v} was sent, yet {v} is at @{o}",
                            w.tp
                        ),
                    });
                }
            }
        }
        self.anomalies.extend(found);
    }

    /// One producer's acknowledged writes to a partition take offsets in
    /// the order it sent them (idempotence keeps the order).
    fn check_sends(&mut self) {
        let mut found = Vec::new();
        for (process, values) in &self.by_process {
            let mut last: BTreeMap<&Tp, (i64, u64)> = BTreeMap::new();
            for v in values {
                let w = &self.writes[v];
                let Some(o) = w.offset.filter(|_| w.fate != Fate::Unknown) else {
                    continue;
                };
                if let Some(&(prev, pv)) = last.get(&w.tp) {
                    if o <= prev {
                        let mut events = self.writes[&pv].events.clone();
                        events.extend(&w.events);
                        found.push((
                            w.tp.clone(),
                            *v,
                            events,
                            format!(
                                "process {process} sent {pv} then {v} to {}, which got offsets {prev} then {o}",
                                w.tp
                            ),
                        ));
                    }
                }
                last.insert(&w.tp, (o, *v));
            }
        }
        for (tp, v, events, why) in found {
            self.flag(
                AnomalyKind::NonmonotonicSend,
                Some(&tp),
                Some(v),
                events,
                why,
            );
        }
    }

    /// Consume-transform-produce: each input of a committed transaction is
    /// processed once, and every input below what the transactions
    /// committed for their group was processed.
    fn check_processing(&mut self, ops: &[Completed<'_>]) {
        let mut by_input: BTreeMap<u64, Vec<(u64, Vec<usize>)>> = BTreeMap::new();
        let mut committed_to: BTreeMap<(String, Tp), i64> = BTreeMap::new();
        // Inputs of transactions whose end is unknown: perhaps processed.
        let mut maybe: BTreeSet<u64> = BTreeSet::new();
        let mut saw_pipeline = false;
        for op in ops {
            let Op::Txn {
                id,
                inputs,
                group,
                offsets,
                abort: false,
                ..
            } = op.op()
            else {
                continue;
            };
            // An unknown end settled from the reads counts as that end.
            let committed = match (op.kind(), self.settled.get(id)) {
                (Kind::Ok, _) | (Kind::Info, Some(Fate::Acknowledged)) => true,
                (Kind::Info, Some(Fate::Aborted)) => false,
                (Kind::Info, _) => {
                    maybe.extend(inputs);
                    false
                }
                _ => false,
            };
            if !committed {
                continue;
            }
            saw_pipeline |= !inputs.is_empty();
            let mut events = vec![op.invoke.index];
            events.extend(op.completion.map(|c| c.index));
            for v in inputs {
                by_input.entry(*v).or_default().push((*id, events.clone()));
            }
            if let Some(g) = group {
                for (tp, o) in offsets {
                    let e = committed_to.entry((g.clone(), tp.clone())).or_insert(*o);
                    *e = (*e).max(*o);
                }
            }
        }
        if !saw_pipeline {
            return;
        }
        let seen_rc = self.seen_read_committed();
        let mut found = Vec::new();
        for (v, txns) in &by_input {
            if txns.len() > 1 {
                let ids: Vec<u64> = txns.iter().map(|(id, _)| *id).collect();
                let events = txns.iter().flat_map(|(_, e)| e.clone()).collect();
                let tp = self.writes.get(v).map(|w| w.tp.clone());
                found.push(Anomaly {
                    kind: AnomalyKind::DuplicateProcessing,
                    tp,
                    value: Some(*v),
                    events,
                    explanation: format!(
                        "input {v} was processed by committed transactions {ids:?}"
                    ),
                });
            }
        }
        for ((group, tp), upto) in &committed_to {
            let Some(order) = self.order.get(tp) else {
                continue;
            };
            for (o, v) in order.range(..upto) {
                if self.committed_visible(*v, &seen_rc)
                    && !by_input.contains_key(v)
                    && !maybe.contains(v)
                {
                    found.push(Anomaly {
                        kind: AnomalyKind::UnprocessedInput,
                        tp: Some(tp.clone()),
                        value: Some(*v),
                        events: self.writes.get(v).map(|w| w.events.clone()).unwrap_or_default(),
                        explanation: format!(
                            "group {group} committed {tp} up to {upto}, but {v} at {o} is the input of no committed transaction"
                        ),
                    });
                }
            }
        }
        self.anomalies.extend(found);
    }

    /// A group's committed offset for a partition behaves as a register:
    /// OffsetFetch returns the value of a commit that was invoked before
    /// the fetch ended and not superseded (by a commit invoked after it
    /// completed and completed before the fetch began); nothing where a
    /// commit completed before the fetch began is a vanished offset; and an
    /// aborted transaction's offsets are never the answer. A later commit
    /// may lower the offset (a new member starting from an older one), so
    /// "backwards" means an answer older than the latest completed commit.
    fn check_offsets(&mut self, ops: &[Completed<'_>]) {
        #[derive(Clone)]
        struct Commit {
            invoked: usize,
            /// `usize::MAX` while (or if ever) unknown.
            completed: usize,
            /// By when its record, if any attempt appended one, was in the
            /// log: its completion when it has one (ok, or refused: every
            /// attempt was appended or refused before the last answer),
            /// `usize::MAX` when unknown (a request may still be in flight).
            placed_by: usize,
            offset: i64,
            events: Vec<usize>,
        }
        let mut commits: BTreeMap<(String, Tp), Vec<Commit>> = BTreeMap::new();
        let mut aborted: BTreeMap<(String, Tp), BTreeMap<i64, Vec<usize>>> = BTreeMap::new();
        for op in ops {
            let mut events = vec![op.invoke.index];
            events.extend(op.completion.map(|c| c.index));
            // Only a commit that completed ok has a completion time; any
            // other may take effect at any time after its invocation. Even
            // a refused one (UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION): the
            // client retries a commit whose first attempt timed out, and
            // the refusal of the last attempt says nothing of the first,
            // whose record the coordinator appended and a later one loads
            // (Kafka's too; seed 107 of the long run).
            let completed = match op.kind() {
                Kind::Ok => op.completed_at(),
                _ => usize::MAX,
            };
            let placed_by = match op.kind() {
                Kind::Ok | Kind::Fail => op.completed_at(),
                _ => usize::MAX,
            };
            match (op.op(), op.kind()) {
                (Op::Commit { group, offsets }, kind) => {
                    if kind == Kind::Ok {
                        self.stats.offset_commits += 1;
                    }
                    for (tp, o) in offsets {
                        commits
                            .entry((group.clone(), tp.clone()))
                            .or_default()
                            .push(Commit {
                                invoked: op.invoke.index,
                                completed,
                                placed_by,
                                offset: *o,
                                events: events.clone(),
                            });
                    }
                }
                (
                    Op::Txn {
                        id,
                        group: Some(group),
                        offsets,
                        abort,
                        ..
                    },
                    kind,
                ) => {
                    let committed = kind == Kind::Ok && !abort;
                    // An unknown end the reads settled as not committed:
                    // its offsets are an aborted transaction's.
                    let unknown =
                        kind == Kind::Info && self.settled.get(id) != Some(&Fate::Aborted);
                    for (tp, o) in offsets {
                        let key = (group.clone(), tp.clone());
                        if committed || unknown {
                            commits.entry(key).or_default().push(Commit {
                                invoked: op.invoke.index,
                                completed,
                                placed_by,
                                offset: *o,
                                events: events.clone(),
                            });
                        } else {
                            aborted.entry(key).or_default().insert(*o, events.clone());
                        }
                    }
                }
                _ => {}
            }
        }
        let mut found = Vec::new();
        // Per key, the earlier fetches' answers: (completed at, the commits
        // that answer could have come from).
        type Answers = Vec<(usize, Vec<Commit>)>;
        let mut answered: BTreeMap<(String, Tp), Answers> = BTreeMap::new();
        for op in ops {
            let Some(done) = op.completion.filter(|c| c.kind == Kind::Ok) else {
                continue;
            };
            let Op::FetchOffsets { group, offsets } = &done.op else {
                continue;
            };
            self.stats.offset_fetches += 1;
            let began = op.invoke.index;
            for (tp, got) in offsets {
                let key = (group.clone(), tp.clone());
                let all = commits.get(&key).map(Vec::as_slice).unwrap_or(&[]);
                let latest = all
                    .iter()
                    .filter(|c| c.completed < began)
                    .max_by_key(|c| c.completed);
                let superseded = |c: &Commit| {
                    all.iter()
                        .any(|d| d.invoked > c.placed_by && d.completed < began)
                };
                let possible: Vec<&Commit> = all
                    .iter()
                    .filter(|c| c.invoked < done.index && !superseded(c))
                    .collect();
                let mut events = latest.map(|c| c.events.clone()).unwrap_or_default();
                events.extend([began, done.index]);
                match got {
                    None => {
                        if let Some(l) = latest {
                            found.push((
                                AnomalyKind::OffsetVanished,
                                tp.clone(),
                                events,
                                format!(
                                    "group {group}: {tp} had committed offset {}; OffsetFetch found none",
                                    l.offset
                                ),
                            ));
                        }
                    }
                    Some(got) if !possible.iter().any(|c| c.offset == *got) => {
                        let ever = all.iter().any(|c| c.offset == *got);
                        match aborted.get(&key).and_then(|a| a.get(got)) {
                            Some(ev) if !ever => {
                                let mut events = ev.clone();
                                events.extend([began, done.index]);
                                found.push((
                                    AnomalyKind::AbortedOffsetCommit,
                                    tp.clone(),
                                    events,
                                    format!("group {group}: OffsetFetch found {tp} at {got}, an offset only an aborted transaction committed"),
                                ));
                            }
                            _ => {
                                let want =
                                    latest.map_or("none".to_string(), |l| l.offset.to_string());
                                let what = if ever {
                                    "a superseded commit's"
                                } else {
                                    "an offset no commit wrote"
                                };
                                found.push((
                                    AnomalyKind::OffsetBackwards,
                                    tp.clone(),
                                    events,
                                    format!("group {group}: {tp} had committed offset {want}; OffsetFetch found {got}, {what}"),
                                ));
                            }
                        }
                    }
                    Some(got) => {
                        // Once a fetch has seen a commit's value, a later
                        // fetch may not see one that ended before it began.
                        let from: Vec<Commit> = possible
                            .iter()
                            .filter(|c| c.offset == *got)
                            .map(|c| (*c).clone())
                            .collect();
                        let earlier = answered.entry(key.clone()).or_default();
                        let older = earlier.iter().find(|(at, seen)| {
                            *at < began
                                && !seen.is_empty()
                                && from
                                    .iter()
                                    .all(|c| seen.iter().all(|s| c.completed < s.invoked))
                        });
                        if let Some((_, seen)) = older {
                            let before = seen[0].offset;
                            found.push((
                                AnomalyKind::OffsetBackwards,
                                tp.clone(),
                                events,
                                format!("group {group}: OffsetFetch found {tp} at {got} after an earlier fetch had found {before}, committed later"),
                            ));
                        }
                        earlier.push((done.index, from));
                    }
                }
            }
        }
        for (kind, tp, events, why) in found {
            self.flag(kind, Some(&tp), None, events, why);
        }
    }
}
