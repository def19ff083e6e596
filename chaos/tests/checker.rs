//! The checker on hand-made histories: each anomaly in a history built to
//! hold it (and the checker names it, with the operations), each near-miss
//! that is not one (and the checker stays quiet), and a clean history that
//! exercises every operation with no anomaly at all.

use strand_chaos::history::{self, HistoryError};
use strand_chaos::{check, AnomalyKind, Floor, Isolation, Op, Record, Recorder, Report, Tp, Write};

const RC: Isolation = Isolation::ReadCommitted;
const RU: Isolation = Isolation::ReadUncommitted;

fn tp(p: i32) -> Tp {
    Tp::new("t", p)
}

fn w(p: i32, value: u64, offset: Option<i64>) -> Write {
    Write {
        tp: tp(p),
        value,
        offset,
    }
}

fn send(p: i32, value: u64) -> Op {
    Op::Send {
        write: w(p, value, None),
    }
}

fn sent(p: i32, value: u64, offset: i64) -> Op {
    Op::Send {
        write: w(p, value, Some(offset)),
    }
}

fn records(rs: &[(i32, i64, u64)]) -> Vec<Record> {
    rs.iter()
        .map(|&(p, offset, value)| Record {
            tp: tp(p),
            offset,
            value,
        })
        .collect()
}

fn poll(session: u64, isolation: Isolation, rs: &[(i32, i64, u64)]) -> Op {
    Op::Poll {
        session,
        isolation,
        records: records(rs),
    }
}

fn txn(id: u64, writes: Vec<Write>, abort: bool) -> Op {
    Op::Txn {
        id,
        writes,
        group: None,
        offsets: vec![],
        inputs: vec![],
        abort,
    }
}

fn final_read(p: i32, rs: &[(i32, i64, u64)]) -> Op {
    Op::FinalRead {
        tp: tp(p),
        records: records(rs),
    }
}

fn commit(group: &str, p: i32, offset: i64) -> Op {
    Op::Commit {
        group: group.into(),
        offsets: vec![(tp(p), offset)],
    }
}

fn fetch(group: &str, p: i32, offset: Option<i64>) -> Op {
    Op::FetchOffsets {
        group: group.into(),
        offsets: vec![(tp(p), offset)],
    }
}

/// `process` runs `invoke` to an ok completion observing `done`.
fn ok(r: &Recorder, process: u64, invoke: Op, done: Op) {
    r.invoke(process, invoke);
    r.ok(process, done);
}

fn report(r: &Recorder) -> Report {
    check(&r.events()).expect("a well-formed history")
}

/// Exactly these kinds, each at least once, and nothing else.
fn assert_only(report: &Report, kinds: &[AnomalyKind]) {
    let got: Vec<AnomalyKind> = report.counts().into_keys().collect();
    let mut want = kinds.to_vec();
    want.sort();
    assert_eq!(got, want, "anomalies: {:#?}", report.anomalies);
}

/// Three acknowledged sends on two partitions, a committed transaction
/// over both, an aborted one, a consumer reading everything in order
/// under each isolation level, offsets committed and fetched, final reads.
fn clean() -> Recorder {
    let r = Recorder::new();
    ok(&r, 1, send(0, 1), sent(0, 1, 0));
    ok(&r, 1, send(0, 2), sent(0, 2, 1));
    ok(&r, 2, send(1, 3), sent(1, 3, 0));
    ok(
        &r,
        3,
        txn(7, vec![w(0, 4, None), w(1, 5, None)], false),
        txn(7, vec![w(0, 4, Some(2)), w(1, 5, Some(1))], false),
    );
    // Offset 3 and 2: the commit markers.
    ok(
        &r,
        3,
        txn(8, vec![w(0, 6, None), w(1, 7, None)], true),
        txn(8, vec![w(0, 6, Some(4)), w(1, 7, Some(3))], true),
    );
    ok(&r, 4, send(0, 8), sent(0, 8, 6));
    ok(
        &r,
        10,
        Op::Assign {
            session: 1,
            tps: vec![tp(0), tp(1)],
        },
        Op::Assign {
            session: 1,
            tps: vec![tp(0), tp(1)],
        },
    );
    ok(
        &r,
        10,
        poll(1, RC, &[]),
        poll(1, RC, &[(0, 0, 1), (0, 1, 2), (1, 0, 3)]),
    );
    // The aborted values (6 at 4 of t-0) are skipped: read_committed.
    ok(
        &r,
        10,
        poll(1, RC, &[]),
        poll(1, RC, &[(0, 2, 4), (1, 1, 5), (0, 6, 8)]),
    );
    ok(
        &r,
        11,
        Op::Assign {
            session: 2,
            tps: vec![tp(0)],
        },
        Op::Assign {
            session: 2,
            tps: vec![tp(0)],
        },
    );
    ok(
        &r,
        11,
        poll(2, RU, &[]),
        poll(
            2,
            RU,
            &[(0, 0, 1), (0, 1, 2), (0, 2, 4), (0, 4, 6), (0, 6, 8)],
        ),
    );
    ok(&r, 12, commit("g", 0, 2), commit("g", 0, 2));
    ok(&r, 12, commit("g", 0, 7), commit("g", 0, 7));
    ok(&r, 13, fetch("g", 0, None), fetch("g", 0, Some(7)));
    ok(
        &r,
        14,
        final_read(0, &[]),
        final_read(0, &[(0, 0, 1), (0, 1, 2), (0, 2, 4), (0, 6, 8)]),
    );
    ok(
        &r,
        14,
        final_read(1, &[]),
        final_read(1, &[(1, 0, 3), (1, 1, 5)]),
    );
    r
}

#[test]
fn a_clean_history_has_no_anomaly_and_exercises_everything() {
    let report = report(&clean());
    assert_only(&report, &[]);
    let s = &report.stats;
    assert_eq!(s.acknowledged_writes, 6, "{s:?}");
    assert_eq!(s.transactions_committed, 1);
    assert_eq!(s.transactions_aborted, 1);
    assert_eq!(s.polls, 3);
    assert_eq!(s.records_read, 11 + 6);
    assert_eq!(s.final_reads, 2);
    assert_eq!(s.offset_commits, 2);
    assert_eq!(s.offset_fetches, 1);
}

#[test]
fn the_history_round_trips_through_json_lines() {
    let events = clean().events();
    let mut buf = Vec::new();
    history::write(&mut buf, &events).unwrap();
    let text = String::from_utf8(buf.clone()).unwrap();
    assert_eq!(text.lines().count(), events.len());
    assert!(text.lines().next().unwrap().contains("\"type\":\"invoke\""));
    let back = history::read(buf.as_slice()).unwrap();
    assert_eq!(back, events);
}

#[test]
fn a_write_no_one_read_though_reads_passed_it_is_lost() {
    let r = Recorder::new();
    ok(&r, 1, send(0, 1), sent(0, 1, 0));
    ok(&r, 1, send(0, 2), sent(0, 2, 1));
    ok(&r, 2, poll(1, RC, &[]), poll(1, RC, &[(0, 1, 2)]));
    let report = report(&r);
    assert_only(&report, &[AnomalyKind::LostWrite]);
    let lost = &report.anomalies[0];
    assert_eq!(lost.value, Some(1));
    assert_eq!(lost.events, vec![0, 1, 5], "the send and the read past it");
}

#[test]
fn a_write_beyond_every_read_is_not_lost_and_an_unknown_one_is_never_lost() {
    let r = Recorder::new();
    ok(&r, 1, send(0, 1), sent(0, 1, 0));
    ok(&r, 1, send(0, 2), sent(0, 2, 1));
    r.invoke(2, send(0, 3));
    r.info(2, send(0, 3), "timed out");
    ok(&r, 3, send(0, 4), sent(0, 4, 3));
    ok(&r, 4, poll(1, RC, &[]), poll(1, RC, &[(0, 0, 1)]));
    assert_only(&report(&r), &[]);
}

#[test]
fn an_acknowledged_write_missing_from_the_final_read_is_unseen() {
    let r = Recorder::new();
    ok(&r, 1, send(0, 1), sent(0, 1, 0));
    ok(&r, 1, send(0, 2), sent(0, 2, 1));
    ok(&r, 2, final_read(0, &[]), final_read(0, &[(0, 0, 1)]));
    let report = report(&r);
    assert_only(&report, &[AnomalyKind::Unseen]);
    assert_eq!(report.anomalies[0].value, Some(2));
}

#[test]
fn one_value_at_two_offsets_is_a_duplicate() {
    let r = Recorder::new();
    ok(&r, 1, send(0, 1), sent(0, 1, 0));
    ok(
        &r,
        2,
        poll(1, RU, &[]),
        poll(1, RU, &[(0, 0, 1), (0, 1, 1)]),
    );
    let report = report(&r);
    assert_only(&report, &[AnomalyKind::Duplicate]);
    assert_eq!(report.anomalies[0].value, Some(1));
}

#[test]
fn two_values_at_one_offset_are_inconsistent() {
    let r = Recorder::new();
    ok(&r, 1, send(0, 1), sent(0, 1, 0));
    ok(&r, 1, send(0, 2), sent(0, 2, 1));
    // A reader sees 2 where the delivery report put 1.
    ok(&r, 2, poll(1, RU, &[]), poll(1, RU, &[(0, 0, 2)]));
    let report = report(&r);
    assert_eq!(report.count(AnomalyKind::InconsistentOffset), 1);
    assert!(report
        .anomalies
        .iter()
        .any(|a| a.kind == AnomalyKind::InconsistentOffset && a.explanation.contains("[1, 2]")));
}

#[test]
fn a_value_nobody_wrote_is_garbage() {
    let r = Recorder::new();
    ok(&r, 2, poll(1, RU, &[]), poll(1, RU, &[(0, 0, 99)]));
    let report = report(&r);
    assert_only(&report, &[AnomalyKind::GarbageRead]);
}

#[test]
fn read_committed_seeing_an_aborted_write_is_an_aborted_read() {
    let r = Recorder::new();
    // One transaction aborted, one fenced (its commit failed: Kafka aborts it).
    ok(
        &r,
        1,
        txn(1, vec![w(0, 1, None)], true),
        txn(1, vec![w(0, 1, Some(0))], true),
    );
    r.invoke(2, txn(2, vec![w(0, 2, None)], false));
    r.fail(2, txn(2, vec![w(0, 2, Some(2))], false), "PRODUCER_FENCED");
    // read_uncommitted may see both; read_committed neither.
    ok(
        &r,
        3,
        poll(1, RU, &[]),
        poll(1, RU, &[(0, 0, 1), (0, 2, 2)]),
    );
    assert_only(&report(&r), &[]);
    ok(&r, 4, poll(2, RC, &[]), poll(2, RC, &[(0, 2, 2)]));
    let report = report(&r);
    assert_only(&report, &[AnomalyKind::AbortedRead]);
    assert_eq!(report.anomalies[0].value, Some(2));
}

#[test]
fn a_transaction_read_in_one_partition_and_not_the_other_is_partial() {
    let r = Recorder::new();
    ok(
        &r,
        1,
        txn(1, vec![w(0, 1, None), w(1, 2, None)], false),
        txn(1, vec![w(0, 1, Some(0)), w(1, 2, Some(0))], false),
    );
    ok(&r, 2, send(1, 3), sent(1, 3, 2));
    ok(
        &r,
        3,
        poll(1, RC, &[]),
        poll(1, RC, &[(0, 0, 1), (1, 2, 3)]),
    );
    let report = report(&r);
    assert_eq!(report.count(AnomalyKind::PartialTransaction), 1);
    let partial = report
        .anomalies
        .iter()
        .find(|a| a.kind == AnomalyKind::PartialTransaction)
        .unwrap();
    assert_eq!(partial.value, Some(2));
    // The same missing write is also lost: acknowledged, never read, passed.
    assert_only(
        &report,
        &[AnomalyKind::PartialTransaction, AnomalyKind::LostWrite],
    );
}

#[test]
fn a_poll_that_goes_back_is_nonmonotonic_unless_the_consumer_was_reassigned() {
    let r = Recorder::new();
    ok(&r, 1, send(0, 1), sent(0, 1, 0));
    ok(&r, 1, send(0, 2), sent(0, 2, 1));
    ok(
        &r,
        2,
        poll(1, RU, &[]),
        poll(1, RU, &[(0, 0, 1), (0, 1, 2)]),
    );
    let assign = Op::Assign {
        session: 1,
        tps: vec![tp(0)],
    };
    ok(&r, 2, assign.clone(), assign);
    ok(&r, 2, poll(1, RU, &[]), poll(1, RU, &[(0, 0, 1)]));
    ok(
        &r,
        2,
        Op::Seek {
            session: 1,
            tp: tp(0),
            offset: 0,
        },
        Op::Seek {
            session: 1,
            tp: tp(0),
            offset: 0,
        },
    );
    ok(
        &r,
        2,
        poll(1, RU, &[]),
        poll(1, RU, &[(0, 0, 1), (0, 1, 2)]),
    );
    assert_only(&report(&r), &[]);
    ok(&r, 2, poll(1, RU, &[]), poll(1, RU, &[(0, 1, 2)]));
    let report = report(&r);
    assert_only(&report, &[AnomalyKind::NonmonotonicPoll]);
}

#[test]
fn a_poll_past_a_visible_value_skips_it() {
    let r = Recorder::new();
    ok(&r, 1, send(0, 1), sent(0, 1, 0));
    // An aborted transaction at 1 (its marker at 2): read_committed skips it.
    ok(
        &r,
        2,
        txn(1, vec![w(0, 2, None)], true),
        txn(1, vec![w(0, 2, Some(1))], true),
    );
    ok(&r, 1, send(0, 3), sent(0, 3, 3));
    ok(&r, 3, poll(1, RC, &[]), poll(1, RC, &[(0, 0, 1)]));
    ok(&r, 3, poll(1, RC, &[]), poll(1, RC, &[(0, 3, 3)]));
    assert_only(&report(&r), &[]);
    // read_uncommitted must not skip it.
    ok(&r, 4, poll(2, RU, &[]), poll(2, RU, &[(0, 0, 1)]));
    ok(&r, 4, poll(2, RU, &[]), poll(2, RU, &[(0, 3, 3)]));
    let report = report(&r);
    assert_only(&report, &[AnomalyKind::PollSkip]);
    assert!(report.anomalies[0].explanation.contains("(1, 2)"));
}

#[test]
fn a_read_committed_poll_past_a_committed_value_skips_it() {
    let r = Recorder::new();
    ok(&r, 1, send(0, 1), sent(0, 1, 0));
    ok(
        &r,
        2,
        txn(1, vec![w(0, 2, None)], false),
        txn(1, vec![w(0, 2, Some(1))], false),
    );
    ok(&r, 1, send(0, 3), sent(0, 3, 3));
    ok(
        &r,
        3,
        poll(1, RC, &[]),
        poll(1, RC, &[(0, 0, 1), (0, 3, 3)]),
    );
    ok(&r, 4, poll(2, RC, &[]), poll(2, RC, &[(0, 1, 2)]));
    let report = report(&r);
    assert_only(&report, &[AnomalyKind::PollSkip]);
}

#[test]
fn one_producer_s_writes_out_of_order_are_a_nonmonotonic_send() {
    // Other producers' sends in flight at the same time land in either
    // order; one producer's next send (one in flight at a time) comes
    // after its last, in real time too.
    let r = Recorder::new();
    r.invoke(1, send(0, 1));
    r.invoke(2, send(0, 3));
    r.ok(1, sent(0, 1, 5));
    r.ok(2, sent(0, 3, 4));
    ok(&r, 2, send(1, 4), sent(1, 4, 0));
    assert_only(&report(&r), &[]);
    ok(&r, 1, send(0, 2), sent(0, 2, 3));
    let report = report(&r);
    assert_only(
        &report,
        &[AnomalyKind::NonmonotonicSend, AnomalyKind::RealtimeOrder],
    );
    assert!(report.anomalies.iter().all(|a| a.value == Some(2)));
}

#[test]
fn a_committed_offset_never_goes_back_or_vanishes() {
    let r = Recorder::new();
    // A fetch concurrent with the commit may see the old offset.
    r.invoke(1, commit("g", 0, 10));
    ok(&r, 2, fetch("g", 0, None), fetch("g", 0, None));
    r.ok(1, commit("g", 0, 10));
    ok(&r, 2, fetch("g", 0, None), fetch("g", 0, Some(10)));
    assert_only(&report(&r), &[]);
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, Some(5)));
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, None));
    // Another group's offsets are its own.
    ok(&r, 3, fetch("h", 0, None), fetch("h", 0, None));
    let report = report(&r);
    assert_only(
        &report,
        &[AnomalyKind::OffsetBackwards, AnomalyKind::OffsetVanished],
    );
    assert_eq!(report.count(AnomalyKind::OffsetBackwards), 1);
    assert_eq!(report.count(AnomalyKind::OffsetVanished), 1);
}

/// The offset is a register, not a counter: a later commit may lower it (a
/// new member of the group starting from an older offset), and then the
/// earlier, higher value is gone for good.
#[test]
fn a_later_lower_commit_supersedes_and_the_old_value_never_returns() {
    let r = Recorder::new();
    ok(&r, 1, commit("g", 0, 10), commit("g", 0, 10));
    ok(&r, 2, commit("g", 0, 7), commit("g", 0, 7));
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, Some(7)));
    // A commit of unknown outcome may take effect at any time after it began.
    r.invoke(4, commit("g", 0, 12));
    r.info(4, commit("g", 0, 12), "timed out");
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, Some(7)));
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, Some(12)));
    assert_only(&report(&r), &[]);
    // Once 12 was seen, the older 7 may not come back.
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, Some(7)));
    let report1 = report(&r);
    assert_only(&report1, &[AnomalyKind::OffsetBackwards]);
    assert!(report1.anomalies[0].explanation.contains("earlier fetch"));
    // Nor may 10, which 7 superseded.
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, Some(10)));
    let report2 = report(&r);
    assert_eq!(report2.count(AnomalyKind::OffsetBackwards), 2);
    assert!(report2.anomalies[1].explanation.contains("superseded"));
}

/// A refused commit may still take effect: the client retried an attempt
/// that timed out after its record was appended, and only the retry was
/// refused (seed 107 of the long run). A value nobody committed at all is
/// still caught.
#[test]
fn a_refused_commit_may_have_taken_effect_through_an_earlier_attempt() {
    let r = Recorder::new();
    ok(&r, 1, commit("g", 0, 108), commit("g", 0, 108));
    r.invoke(2, commit("g", 0, 122));
    r.fail(2, commit("g", 0, 122), "UnknownMemberId");
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, Some(122)));
    assert_only(&report(&r), &[]);
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, Some(130)));
    assert_only(&report(&r), &[AnomalyKind::OffsetBackwards]);
    // A commit begun after the refusal came back was appended after any
    // attempt of the refused one: once it completes, 122 may not return.
    let r = Recorder::new();
    r.invoke(2, commit("g", 0, 122));
    r.fail(2, commit("g", 0, 122), "UnknownMemberId");
    ok(&r, 1, commit("g", 0, 150), commit("g", 0, 150));
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, Some(150)));
    assert_only(&report(&r), &[]);
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, Some(122)));
    assert_only(&report(&r), &[AnomalyKind::OffsetBackwards]);
}

#[test]
fn an_aborted_transaction_s_offsets_are_never_committed() {
    let r = Recorder::new();
    let with_offsets = |abort: bool, offset: i64| Op::Txn {
        id: offset as u64,
        writes: vec![],
        group: Some("g".into()),
        offsets: vec![(tp(0), offset)],
        inputs: vec![],
        abort,
    };
    ok(&r, 1, with_offsets(false, 10), with_offsets(false, 10));
    r.invoke(2, with_offsets(false, 20));
    r.fail(2, with_offsets(false, 20), "PRODUCER_FENCED");
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, Some(10)));
    assert_only(&report(&r), &[]);
    ok(&r, 3, fetch("g", 0, None), fetch("g", 0, Some(20)));
    let report = report(&r);
    assert_only(&report, &[AnomalyKind::AbortedOffsetCommit]);
}

#[test]
fn malformed_histories_are_refused() {
    let r = Recorder::new();
    r.invoke(1, send(0, 1));
    r.invoke(1, send(0, 2));
    assert!(matches!(
        check(&r.events()),
        Err(HistoryError::Malformed { index: 1, .. })
    ));
    let r = Recorder::new();
    r.ok(1, sent(0, 1, 0));
    assert!(matches!(
        check(&r.events()),
        Err(HistoryError::Malformed { index: 0, .. })
    ));
    let r = Recorder::new();
    r.invoke(1, send(0, 1));
    r.ok(1, poll(1, RC, &[]));
    assert!(
        check(&r.events()).is_err(),
        "a completion of another kind of op"
    );
}

#[test]
fn an_operation_the_history_never_completed_counts_as_unknown() {
    let r = Recorder::new();
    r.invoke(1, txn(1, vec![w(0, 1, None)], false));
    ok(&r, 2, poll(1, RC, &[]), poll(1, RC, &[(0, 0, 1)]));
    let report = report(&r);
    assert_only(&report, &[]);
    assert_eq!(report.stats.transactions_unknown, 1);
}

/// Consume-transform-produce: a transaction's inputs, its outputs and the
/// offsets it commits for its group.
fn pipeline(id: u64, inputs: &[u64], outputs: Vec<Write>, commit_to: i64, abort: bool) -> Op {
    Op::Txn {
        id,
        writes: outputs,
        group: Some("etl".into()),
        offsets: vec![(tp(0), commit_to)],
        inputs: inputs.to_vec(),
        abort,
    }
}

#[test]
fn each_input_is_processed_exactly_once() {
    let r = Recorder::new();
    for (v, o) in [(1, 0), (2, 1), (3, 2)] {
        ok(&r, 1, send(0, v), sent(0, v, o));
    }
    // An aborted attempt at 1 and 2, then the committed one: exactly once.
    ok(
        &r,
        2,
        pipeline(1, &[1, 2], vec![w(1, 10, None)], 2, true),
        pipeline(1, &[1, 2], vec![w(1, 10, Some(0))], 2, true),
    );
    ok(
        &r,
        2,
        pipeline(2, &[1, 2], vec![w(1, 11, None)], 2, false),
        pipeline(2, &[1, 2], vec![w(1, 11, Some(2))], 2, false),
    );
    assert_only(&report(&r), &[]);
    // 2 processed again by a committed transaction: not exactly once.
    ok(
        &r,
        3,
        pipeline(3, &[2, 3], vec![w(1, 12, None)], 3, false),
        pipeline(3, &[2, 3], vec![w(1, 12, Some(4))], 3, false),
    );
    let report = report(&r);
    assert_only(&report, &[AnomalyKind::DuplicateProcessing]);
    assert_eq!(report.anomalies[0].value, Some(2));
}

#[test]
fn an_input_below_the_committed_offset_must_have_been_processed() {
    let r = Recorder::new();
    for (v, o) in [(1, 0), (2, 1), (3, 2)] {
        ok(&r, 1, send(0, v), sent(0, v, o));
    }
    ok(
        &r,
        2,
        pipeline(1, &[1, 3], vec![w(1, 10, None)], 3, false),
        pipeline(1, &[1, 3], vec![w(1, 10, Some(0))], 3, false),
    );
    let report = report(&r);
    assert_only(&report, &[AnomalyKind::UnprocessedInput]);
    assert_eq!(report.anomalies[0].value, Some(2));
}

#[test]
fn an_unknown_transaction_read_in_part_is_settled_committed_and_its_missing_write_unseen() {
    // Its end unknown to the client; the final read of partition 1 holds
    // `second` (one of its writes, or nothing).
    let history = |second: &[(i32, i64, u64)]| {
        let r = Recorder::new();
        let op = txn(1, vec![w(0, 1, None), w(1, 2, None)], false);
        r.invoke(1, op.clone());
        r.info(1, op, "timed out");
        ok(&r, 2, final_read(0, &[]), final_read(0, &[(0, 0, 1)]));
        ok(&r, 2, final_read(1, &[]), final_read(1, second));
        report(&r)
    };
    // One write read, the other missing: settled committed, so unseen.
    let rep = history(&[]);
    assert_only(&rep, &[AnomalyKind::Unseen]);
    assert_eq!(rep.anomalies[0].value, Some(2));
    assert_eq!(rep.stats.transactions_settled_committed, 1);
    // Its twin: both writes read, nothing to report.
    assert_only(&history(&[(1, 0, 2)]), &[]);
}

#[test]
fn an_unknown_pipeline_transaction_settled_from_the_reads_counts_as_that_end() {
    let inputs = |r: &Recorder| {
        for (v, o) in [(1, 0), (2, 1), (3, 2)] {
            ok(r, 1, send(0, v), sent(0, v, o));
        }
    };
    let unknown = |r: &Recorder| {
        let op = pipeline(1, &[1, 2], vec![w(1, 10, None)], 2, false);
        r.invoke(2, op.clone());
        r.info(2, op, "coordinator moved");
    };
    let finals = |r: &Recorder, out: &[(i32, i64, u64)]| {
        ok(
            r,
            4,
            final_read(0, &[]),
            final_read(0, &[(0, 0, 1), (0, 1, 2), (0, 2, 3)]),
        );
        ok(r, 4, final_read(1, &[]), final_read(1, out));
    };
    // Settled not committed (its output is in no final read): a later
    // transaction that commits past 1 and 2 without processing them
    // leaves them unprocessed.
    let r = Recorder::new();
    inputs(&r);
    unknown(&r);
    ok(
        &r,
        3,
        pipeline(2, &[3], vec![w(1, 11, None)], 3, false),
        pipeline(2, &[3], vec![w(1, 11, Some(2))], 3, false),
    );
    finals(&r, &[(1, 2, 11)]);
    let rep = report(&r);
    assert_only(&rep, &[AnomalyKind::UnprocessedInput]);
    assert_eq!(rep.stats.transactions_settled_aborted, 1);
    // Its twin: the unknown one committed (its output read), so 1 and 2
    // were processed once.
    let r = Recorder::new();
    inputs(&r);
    unknown(&r);
    ok(
        &r,
        3,
        pipeline(2, &[3], vec![w(1, 11, None)], 3, false),
        pipeline(2, &[3], vec![w(1, 11, Some(2))], 3, false),
    );
    finals(&r, &[(1, 0, 10), (1, 2, 11)]);
    assert_only(&report(&r), &[]);
    // Settled committed, and another committed transaction processed 2
    // again: not exactly once.
    let r = Recorder::new();
    inputs(&r);
    unknown(&r);
    ok(
        &r,
        3,
        pipeline(2, &[2, 3], vec![w(1, 11, None)], 3, false),
        pipeline(2, &[2, 3], vec![w(1, 11, Some(2))], 3, false),
    );
    finals(&r, &[(1, 0, 10), (1, 2, 11)]);
    assert_only(&report(&r), &[AnomalyKind::DuplicateProcessing]);
}

fn seek(session: u64, p: i32, offset: i64) -> Op {
    Op::Seek {
        session,
        tp: tp(p),
        offset,
    }
}

#[test]
fn the_first_read_after_a_seek_starts_at_the_offset_sought() {
    let history = |first_read: &[(i32, i64, u64)]| {
        let r = Recorder::new();
        for (v, o) in [(1, 0), (2, 1), (3, 2)] {
            ok(&r, 1, send(0, v), sent(0, v, o));
        }
        // Another consumer reads everything (nothing is lost).
        ok(
            &r,
            3,
            poll(2, RU, &[]),
            poll(2, RU, &[(0, 0, 1), (0, 1, 2), (0, 2, 3)]),
        );
        ok(&r, 2, seek(1, 0, 1), seek(1, 0, 1));
        ok(&r, 2, poll(1, RU, &[]), poll(1, RU, first_read));
        report(&r)
    };
    // From the offset sought: nothing to report.
    assert_only(&history(&[(0, 1, 2), (0, 2, 3)]), &[]);
    // Past it: the value at the offset sought was skipped.
    let rep = history(&[(0, 2, 3)]);
    assert_only(&rep, &[AnomalyKind::PollSkip]);
    assert_eq!(rep.anomalies[0].value, Some(3));
    // Below it: the consumer did not move.
    assert_only(&history(&[(0, 0, 1)]), &[AnomalyKind::NonmonotonicPoll]);
    // A seek with no position known (negative) checks nothing.
    let r = Recorder::new();
    for (v, o) in [(1, 0), (2, 1)] {
        ok(&r, 1, send(0, v), sent(0, v, o));
    }
    ok(
        &r,
        3,
        poll(2, RU, &[]),
        poll(2, RU, &[(0, 0, 1), (0, 1, 2)]),
    );
    ok(&r, 2, seek(1, 0, -1), seek(1, 0, -1));
    ok(&r, 2, poll(1, RU, &[]), poll(1, RU, &[(0, 1, 2)]));
    assert_only(&report(&r), &[]);
}

#[test]
fn a_run_that_did_too_little_proves_nothing() {
    let rep = report(&clean());
    // What the clean history did, exactly: its verdict counts.
    let enough = Floor {
        acknowledged_writes: 6,
        transactions_committed: 1,
        transactions_aborted: 1,
        offset_commits: 2,
        final_reads: 2,
    };
    assert_eq!(rep.shortfalls(&enough), Vec::<String>::new());
    // One more of anything, or a final read that did not complete: short.
    let more = [
        Floor {
            acknowledged_writes: 7,
            ..enough.clone()
        },
        Floor {
            transactions_committed: 2,
            ..enough.clone()
        },
        Floor {
            transactions_aborted: 2,
            ..enough.clone()
        },
        Floor {
            offset_commits: 3,
            ..enough.clone()
        },
        Floor {
            final_reads: 3,
            ..enough.clone()
        },
    ];
    for floor in more {
        assert_eq!(rep.shortfalls(&floor).len(), 1, "{floor:?}");
    }
    // The CI profile's floor (120 s, 8 partitions read at the end).
    let ci = Floor::for_run(120, 8);
    assert_eq!(
        (
            ci.acknowledged_writes,
            ci.transactions_committed,
            ci.final_reads
        ),
        (2400, 120, 8)
    );
}

#[test]
fn a_record_that_is_not_a_number_is_a_garbage_read() {
    let r = Recorder::new();
    ok(&r, 1, send(0, 1), sent(0, 1, 0));
    ok(&r, 2, poll(1, RU, &[]), poll(1, RU, &[(0, 0, 1)]));
    assert_only(&report(&r), &[]);
    ok(
        &r,
        2,
        poll(1, RU, &[]),
        poll(1, RU, &[(0, 1, history::UNREADABLE)]),
    );
    let rep = report(&r);
    assert_only(&rep, &[AnomalyKind::GarbageRead]);
    assert!(rep.anomalies[0].explanation.contains("not a number"));
}

#[test]
fn a_write_acknowledged_before_another_was_sent_has_the_lower_offset() {
    let history = |second_offset: i64| {
        let r = Recorder::new();
        // Two producers: 1 is acknowledged before 2 is sent.
        ok(&r, 1, send(0, 1), sent(0, 1, 5));
        ok(&r, 2, send(0, 2), sent(0, 2, second_offset));
        let mut seen = vec![(0, 5, 1), (0, second_offset, 2)];
        seen.sort();
        ok(&r, 3, poll(1, RU, &[]), poll(1, RU, &seen));
        report(&r)
    };
    assert_only(&history(6), &[]);
    let rep = history(4);
    assert_only(&rep, &[AnomalyKind::RealtimeOrder]);
    assert_eq!(rep.anomalies[0].value, Some(2));
    // Overlapping sends may land in either order.
    let r = Recorder::new();
    r.invoke(1, send(0, 1));
    r.invoke(2, send(0, 2));
    r.ok(1, sent(0, 1, 5));
    r.ok(2, sent(0, 2, 4));
    ok(
        &r,
        3,
        poll(1, RU, &[]),
        poll(1, RU, &[(0, 4, 2), (0, 5, 1)]),
    );
    assert_only(&report(&r), &[]);
}

#[test]
fn an_unknown_transaction_settled_as_aborted_never_commits_its_offsets() {
    let history = |answer: i64| {
        let r = Recorder::new();
        for (v, o) in [(1, 0), (2, 1)] {
            ok(&r, 1, send(0, v), sent(0, v, o));
        }
        ok(
            &r,
            2,
            pipeline(1, &[1], vec![w(1, 10, None)], 1, false),
            pipeline(1, &[1], vec![w(1, 10, Some(0))], 1, false),
        );
        // Its end unknown to the client; its output is in no final read.
        let op = pipeline(2, &[2], vec![w(1, 11, None)], 2, false);
        r.invoke(2, op.clone());
        r.info(2, op, "timed out");
        ok(
            &r,
            4,
            final_read(0, &[]),
            final_read(0, &[(0, 0, 1), (0, 1, 2)]),
        );
        ok(&r, 4, final_read(1, &[]), final_read(1, &[(1, 0, 10)]));
        ok(&r, 3, fetch("etl", 0, None), fetch("etl", 0, Some(answer)));
        report(&r)
    };
    assert_only(&history(1), &[]);
    let rep = history(2);
    assert!(
        rep.count(AnomalyKind::AbortedOffsetCommit) == 1,
        "{:#?}",
        rep.anomalies
    );
}
