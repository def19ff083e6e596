//! strand-chaos: histories of concurrent Kafka clients (every invoke and
//! completion, as Jepsen records them) and a checker that finds, in a
//! history, the anomalies a Kafka-compatible log must never show: lost,
//! duplicated or reordered writes, inconsistent offsets, aborted reads,
//! torn transactions, skipped or rewound polls, committed offsets that move
//! backwards or vanish. The checker is pure: it reads a history and
//! reports; it never talks to a broker.
// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

pub mod checker;
pub mod history;

pub use checker::{check, Anomaly, AnomalyKind, Floor, Report, Stats};
pub use history::{Event, Isolation, Kind, Op, Record, Recorder, Tp, Write};
