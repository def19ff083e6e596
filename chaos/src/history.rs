//! A history: every operation the clients invoked and how it completed, in
//! the order the recorder saw them, written as JSON lines (one [`Event`]
//! per line).
//!
//! As in Jepsen, a process runs one operation at a time: an `invoke` event,
//! then one completion: `ok` (it happened, with what the client observed),
//! `fail` (it certainly did not happen) or `info` (unknown: a timeout, a
//! crash). After `info` the process is not used again; the recorder gives
//! the client a new process number. The position of an event in the history
//! is its real-time order: an operation that completed before another was
//! invoked precedes it.
//!
//! Values written are unique across the whole history, so a value read
//! names the one write it came from.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::io::{self, BufRead};

/// A topic partition by name, as the clients address it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Tp {
    pub topic: String,
    pub partition: i32,
}

impl Tp {
    pub fn new(topic: impl Into<String>, partition: i32) -> Tp {
        Tp {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for Tp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Invoke,
    Ok,
    Fail,
    Info,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    ReadUncommitted,
    ReadCommitted,
}

/// One record a consumer was handed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub tp: Tp,
    pub offset: i64,
    pub value: u64,
}

/// The value recorded for a record that is not a number (no workload wrote
/// it): the checker reports it as a garbage read.
pub const UNREADABLE: u64 = u64::MAX;

/// One write: where it was sent and, once acknowledged, the offset the
/// delivery report gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Write {
    pub tp: Tp,
    pub value: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<i64>,
}

/// What an operation is. On `invoke`, the fields a client knows before it
/// starts; on the completion, what it observed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "f", rename_all = "snake_case")]
pub enum Op {
    /// A non-transactional send (an idempotent producer). `ok` carries the
    /// offset; `fail` and `info` leave it unknown whether it was written
    /// (Kafka: an error after the append does not prove the record absent).
    Send { write: Write },
    /// A transaction: every send, then commit (`abort: false`) or abort.
    /// `ok`: committed (the writes' offsets filled in); `fail`: certainly
    /// not committed (aborted, or fenced: Kafka aborts a fenced producer's
    /// transaction); `info`: the outcome is unknown.
    Txn {
        id: u64,
        writes: Vec<Write>,
        /// Offsets sent to the transaction (consume-transform-produce's
        /// `send_offsets_to_transaction`) for `group`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        offsets: Vec<(Tp, i64)>,
        /// The values this transaction processed (consume-transform-produce):
        /// once committed, each input is processed exactly once.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        inputs: Vec<u64>,
        #[serde(default)]
        abort: bool,
    },
    /// The consumer of `session` is given these partitions (`assign`, or a
    /// rebalance of a `subscribe`); every partition's reading starts anew.
    Assign { session: u64, tps: Vec<Tp> },
    /// A poll of `session` and the records it returned, in order.
    Poll {
        session: u64,
        isolation: Isolation,
        #[serde(default)]
        records: Vec<Record>,
    },
    /// A consumer moved its position (`seek`): reading of `tp` starts anew.
    Seek { session: u64, tp: Tp, offset: i64 },
    /// An offset commit for a group (outside a transaction).
    Commit {
        group: String,
        offsets: Vec<(Tp, i64)>,
    },
    /// OffsetFetch for a group: `None` where the group has no offset.
    FetchOffsets {
        group: String,
        offsets: Vec<(Tp, Option<i64>)>,
    },
    /// After every fault healed: a read of each partition from its start to
    /// its end (read_committed), one op per partition.
    FinalRead {
        tp: Tp,
        #[serde(default)]
        records: Vec<Record>,
    },
}

/// One line of the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the history (0, 1, 2, ...): real-time order.
    pub index: usize,
    /// Nanoseconds since the run started (for people reading it).
    #[serde(default)]
    pub time_ns: u64,
    pub process: u64,
    #[serde(rename = "type")]
    pub kind: Kind,
    #[serde(flatten)]
    pub op: Op,
    /// What went wrong, for `fail` and `info` (the client's error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("history line {line}: {source}")]
    Parse {
        line: usize,
        source: serde_json::Error,
    },
    #[error("history: {0}")]
    Io(#[from] io::Error),
    #[error("history event {index}: {why}")]
    Malformed { index: usize, why: String },
}

/// Reads a history written as JSON lines.
pub fn read(input: impl BufRead) -> Result<Vec<Event>, HistoryError> {
    let mut events = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let e: Event = serde_json::from_str(&line).map_err(|source| HistoryError::Parse {
            line: n + 1,
            source,
        })?;
        events.push(e);
    }
    Ok(events)
}

/// Writes events as JSON lines.
pub fn write(out: &mut impl io::Write, events: &[Event]) -> Result<(), HistoryError> {
    for e in events {
        let line = serde_json::to_string(e).map_err(|source| HistoryError::Parse {
            line: e.index + 1,
            source,
        })?;
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// An invoked operation with its completion (`None`: the history ended
/// first, which counts as `info`).
#[derive(Debug, Clone)]
pub struct Completed<'h> {
    pub invoke: &'h Event,
    pub completion: Option<&'h Event>,
}

impl<'h> Completed<'h> {
    /// How it ended: `Info` when the history ended before it did.
    pub fn kind(&self) -> Kind {
        self.completion.map_or(Kind::Info, |c| c.kind)
    }

    /// What the client observed (the completion's op), or what it asked.
    pub fn op(&self) -> &'h Op {
        match self.completion {
            Some(c) if c.kind == Kind::Ok => &c.op,
            _ => &self.invoke.op,
        }
    }

    /// The event index after which the effect is certainly visible
    /// (`usize::MAX` when it never completed).
    pub fn completed_at(&self) -> usize {
        self.completion.map_or(usize::MAX, |c| c.index)
    }
}

/// Pairs each invocation with its process's next completion. A process
/// has one operation in flight at a time; anything else is malformed.
pub fn pair(events: &[Event]) -> Result<Vec<Completed<'_>>, HistoryError> {
    let mut open: std::collections::BTreeMap<u64, usize> = Default::default();
    let mut ops: Vec<Completed<'_>> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        if e.index != i {
            return Err(HistoryError::Malformed {
                index: e.index,
                why: format!("at position {i}: indices must count up from 0"),
            });
        }
        match e.kind {
            Kind::Invoke => {
                if open.contains_key(&e.process) {
                    return Err(HistoryError::Malformed {
                        index: e.index,
                        why: format!("process {} invoked twice without completing", e.process),
                    });
                }
                open.insert(e.process, ops.len());
                ops.push(Completed {
                    invoke: e,
                    completion: None,
                });
            }
            _ => {
                let Some(at) = open.remove(&e.process) else {
                    return Err(HistoryError::Malformed {
                        index: e.index,
                        why: format!("process {} completed nothing it invoked", e.process),
                    });
                };
                if std::mem::discriminant(&ops[at].invoke.op) != std::mem::discriminant(&e.op) {
                    return Err(HistoryError::Malformed {
                        index: e.index,
                        why: "completion of a different operation".into(),
                    });
                }
                ops[at].completion = Some(e);
            }
        }
    }
    Ok(ops)
}

/// Records a history as concurrent clients run: each event gets the next
/// index under one lock, so indices are the real-time order.
pub struct Recorder {
    start: std::time::Instant,
    events: parking_lot::Mutex<Vec<Event>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            start: std::time::Instant::now(),
            events: parking_lot::Mutex::new(Vec::new()),
        }
    }
}

impl Recorder {
    pub fn new() -> Recorder {
        Recorder::default()
    }

    fn push(&self, process: u64, kind: Kind, op: Op, error: Option<String>) -> usize {
        let time_ns = self.start.elapsed().as_nanos() as u64;
        let mut events = self.events.lock();
        let index = events.len();
        events.push(Event {
            index,
            time_ns,
            process,
            kind,
            op,
            error,
        });
        index
    }

    /// `process` starts `op`; returns the event's index.
    pub fn invoke(&self, process: u64, op: Op) -> usize {
        self.push(process, Kind::Invoke, op, None)
    }

    /// It happened, and the client observed `op`.
    pub fn ok(&self, process: u64, op: Op) -> usize {
        self.push(process, Kind::Ok, op, None)
    }

    /// It certainly did not happen.
    pub fn fail(&self, process: u64, op: Op, error: impl Into<String>) -> usize {
        self.push(process, Kind::Fail, op, Some(error.into()))
    }

    /// Unknown whether it happened; `process` is not used again.
    pub fn info(&self, process: u64, op: Op, error: impl Into<String>) -> usize {
        self.push(process, Kind::Info, op, Some(error.into()))
    }

    /// Time since the recording started (the clock of `time_ns`).
    pub fn elapsed(&self) -> std::time::Duration {
        self.start.elapsed()
    }

    /// The events so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().clone()
    }
}
