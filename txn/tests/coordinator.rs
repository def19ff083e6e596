//! Table tests of the transaction coordinator rules and the
//! `__transaction_state` record layout.

use std::collections::BTreeSet;

use proptest::prelude::*;
use strand_protocol::ErrorCode;
use strand_txn::coordinator::*;
use strand_txn::txn_log;
use strand_types::{ProducerEpoch, ProducerId};

const PID: ProducerId = ProducerId::new(1000);
const MAX_TIMEOUT: i32 = 900_000;

fn id(p: i64) -> ProducerId {
    ProducerId::new(p)
}

fn epoch(e: i16) -> ProducerEpoch {
    ProducerEpoch::new(e)
}

/// An epoch as a request or record carries it: -1 is none.
fn ep(e: i16) -> Option<ProducerEpoch> {
    ProducerEpoch::from_wire(e)
}

fn tp(t: &str, p: i32) -> TopicPartition {
    (t.to_string(), p)
}

fn meta(state: TxnState, epoch: i16) -> TxnMetadata {
    let mut m = new_metadata("tx", Some(PID), 60_000, 0);
    m.current.state = state;
    m.current.producer_epoch = ep(epoch);
    if matches!(
        state,
        TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort
    ) {
        m.current.partitions = BTreeSet::from([tp("a", 0), tp("b", 1)]);
        m.current.start_timestamp = 100;
    }
    m
}

fn write_target<R: std::fmt::Debug>(s: Step<R>) -> TxnRecord {
    match s {
        Step::Write { record, .. } => record,
        other => panic!("expected a write, got {other:?}"),
    }
}

#[test]
fn state_ids_and_names_round_trip() {
    for s in TxnState::ALL {
        assert_eq!(TxnState::from_id(s.id()), Some(s));
        assert_eq!(TxnState::from_name(s.name()), Some(s));
    }
    assert_eq!(TxnState::from_id(8), None);
    assert_eq!(TxnState::PrepareEpochFence.id(), 7);
}

#[test]
fn valid_transitions_table() {
    use TxnState::*;
    let allowed: &[(TxnState, TxnState)] = &[
        (Empty, Empty),
        (CompleteCommit, Empty),
        (CompleteAbort, Empty),
        (Ongoing, Ongoing),
        (Empty, Ongoing),
        (CompleteCommit, Ongoing),
        (CompleteAbort, Ongoing),
        (Ongoing, PrepareCommit),
        (Ongoing, PrepareAbort),
        (PrepareEpochFence, PrepareAbort),
        (Empty, PrepareAbort),
        (CompleteCommit, PrepareAbort),
        (CompleteAbort, PrepareAbort),
        (PrepareCommit, CompleteCommit),
        (PrepareAbort, CompleteAbort),
        (Empty, Dead),
        (CompleteCommit, Dead),
        (CompleteAbort, Dead),
        (Ongoing, PrepareEpochFence),
    ];
    for from in TxnState::ALL {
        for to in TxnState::ALL {
            assert_eq!(
                is_valid_transition(from, to),
                allowed.contains(&(from, to)),
                "{from:?} -> {to:?}"
            );
        }
    }
}

#[test]
fn init_producer_id_new_id() {
    let out = init_producer_id(None, "tx", 60_000, MAX_TIMEOUT, None, None, true, 5).unwrap();
    assert_eq!(out, InitOutcome::NeedProducerId);
    let out =
        init_producer_id(None, "tx", 60_000, MAX_TIMEOUT, None, Some(id(7)), true, 5).unwrap();
    let InitOutcome::Grant(Step::Write { record, respond }) = out else {
        panic!("{out:?}")
    };
    assert_eq!(respond, (id(7), ProducerEpoch::ZERO));
    assert_eq!(record.state, TxnState::Empty);
    assert_eq!(record.producer_epoch, ep(0));
    assert_eq!(record.timeout_ms, 60_000);
}

#[test]
fn init_producer_id_timeout_checked_first() {
    for t in [0, -1, MAX_TIMEOUT + 1] {
        let m = meta(TxnState::PrepareCommit, 3);
        assert_eq!(
            init_producer_id(Some(&m), "tx", t, MAX_TIMEOUT, None, None, true, 0),
            Err(ErrorCode::InvalidTransactionTimeout)
        );
        assert_eq!(
            init_producer_id(None, "tx", t, MAX_TIMEOUT, None, Some(id(1)), true, 0),
            Err(ErrorCode::InvalidTransactionTimeout)
        );
    }
    assert!(init_producer_id(
        None,
        "tx",
        MAX_TIMEOUT,
        MAX_TIMEOUT,
        None,
        Some(id(1)),
        true,
        0
    )
    .is_ok());
}

#[test]
fn init_producer_id_by_state() {
    use TxnState::*;
    for state in TxnState::ALL {
        let m = meta(state, 3);
        let out = init_producer_id(Some(&m), "tx", 30_000, MAX_TIMEOUT, None, None, true, 9);
        match state {
            Empty | CompleteCommit | CompleteAbort => {
                let InitOutcome::Grant(step) = out.unwrap() else {
                    panic!()
                };
                let r = write_target(step);
                assert_eq!(
                    (r.producer_id, r.producer_epoch),
                    (Some(PID), ep(4)),
                    "{state:?}"
                );
                assert_eq!(r.state, Empty);
                assert_eq!(r.timeout_ms, 30_000);
                assert!(r.partitions.is_empty());
                assert!(Empty.can_follow(state));
            }
            Ongoing => {
                let InitOutcome::FenceOngoing(r) = out.unwrap() else {
                    panic!()
                };
                assert_eq!(r.state, PrepareAbort);
                assert_eq!(r.producer_epoch, ep(4));
                assert_eq!(r.last_producer_epoch, ep(3));
                assert_eq!(
                    r.partitions, m.current.partitions,
                    "abort markers go to every partition"
                );
            }
            PrepareCommit | PrepareAbort | PrepareEpochFence | Dead => {
                assert_eq!(out, Err(ErrorCode::ConcurrentTransactions), "{state:?}")
            }
        }
    }
}

#[test]
fn init_producer_id_pending_write_is_concurrent() {
    let mut m = meta(TxnState::Empty, 3);
    let target = m.current.clone();
    m.begin_write(target, false);
    assert_eq!(
        init_producer_id(Some(&m), "tx", 30_000, MAX_TIMEOUT, None, None, true, 9),
        Err(ErrorCode::ConcurrentTransactions)
    );
}

#[test]
fn init_producer_id_epoch_exhausted_rotates_id() {
    let m = meta(TxnState::CompleteCommit, MAX_BUMPABLE_EPOCH.get());
    let out = init_producer_id(Some(&m), "tx", 30_000, MAX_TIMEOUT, None, None, true, 9).unwrap();
    assert_eq!(out, InitOutcome::NeedProducerId);
    let out = init_producer_id(
        Some(&m),
        "tx",
        30_000,
        MAX_TIMEOUT,
        None,
        Some(id(2000)),
        true,
        9,
    )
    .unwrap();
    let InitOutcome::Grant(Step::Write { record, respond }) = out else {
        panic!()
    };
    assert_eq!(respond, (id(2000), ProducerEpoch::ZERO));
    assert_eq!(record.previous_producer_id, Some(PID));
}

#[test]
fn init_producer_id_kip360_table() {
    // (expected (pid, epoch), current epoch, last epoch, previous pid) -> outcome
    struct Case {
        expected: ProducerIdAndEpoch,
        epoch: i16,
        last_epoch: Option<ProducerEpoch>,
        previous: Option<ProducerId>,
        want: Result<Option<(ProducerId, ProducerEpoch)>, ErrorCode>, // Some = written with this, None = answered without write
    }
    let cases = [
        // The client's epoch is current: bump, remembering it.
        Case {
            expected: (PID, ep(3)),
            epoch: 3,
            last_epoch: None,
            previous: None,
            want: Ok(Some((PID, epoch(4)))),
        },
        // A retry after a bump whose answer was lost: same answer, no write.
        Case {
            expected: (PID, ep(3)),
            epoch: 4,
            last_epoch: ep(3),
            previous: None,
            want: Ok(None),
        },
        // An old epoch that is neither: fenced.
        Case {
            expected: (PID, ep(1)),
            epoch: 4,
            last_epoch: ep(3),
            previous: None,
            want: Err(ErrorCode::ProducerFenced),
        },
        // Another producer id: fenced.
        Case {
            expected: (id(77), ep(3)),
            epoch: 3,
            last_epoch: None,
            previous: None,
            want: Err(ErrorCode::ProducerFenced),
        },
        // The previous id at an exhausted epoch: the rotation's answer again.
        Case {
            expected: (id(55), Some(MAX_BUMPABLE_EPOCH)),
            epoch: 0,
            last_epoch: None,
            previous: Some(id(55)),
            want: Ok(None),
        },
        // The previous id at a non-exhausted epoch: fenced.
        Case {
            expected: (id(55), ep(3)),
            epoch: 0,
            last_epoch: None,
            previous: Some(id(55)),
            want: Err(ErrorCode::ProducerFenced),
        },
    ];
    for (i, c) in cases.iter().enumerate() {
        let mut m = meta(TxnState::CompleteCommit, c.epoch);
        m.current.last_producer_epoch = c.last_epoch;
        m.current.previous_producer_id = c.previous;
        let out = init_producer_id(
            Some(&m),
            "tx",
            30_000,
            MAX_TIMEOUT,
            Some(c.expected),
            None,
            true,
            9,
        );
        match (&c.want, out) {
            (Err(e), Err(got)) => assert_eq!(*e, got, "case {i}"),
            (Ok(Some(want)), Ok(InitOutcome::Grant(Step::Write { respond, .. }))) => {
                assert_eq!(*want, respond, "case {i}")
            }
            (Ok(None), Ok(InitOutcome::Grant(Step::Respond(r)))) => {
                assert_eq!(
                    (Some(r.0), Some(r.1)),
                    (m.current.producer_id, m.current.producer_epoch),
                    "case {i}"
                )
            }
            (want, got) => panic!("case {i}: want {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn add_partitions_by_state() {
    use TxnState::*;
    for state in TxnState::ALL {
        let m = meta(state, 3);
        let out = add_partitions(&m, Some(PID), ep(3), &[tp("c", 0)], 0, 500);
        match state {
            Ongoing => {
                let r = write_target(out.unwrap());
                assert_eq!(r.state, Ongoing);
                assert_eq!(r.partitions.len(), 3);
                assert_eq!(
                    r.start_timestamp, 100,
                    "an ongoing transaction keeps its start"
                );
            }
            Empty | CompleteCommit | CompleteAbort => {
                let r = write_target(out.unwrap());
                assert_eq!(r.state, Ongoing);
                assert_eq!(r.partitions, BTreeSet::from([tp("c", 0)]));
                assert_eq!(r.start_timestamp, 500);
            }
            PrepareCommit | PrepareAbort | PrepareEpochFence => {
                assert_eq!(out, Err(ErrorCode::ConcurrentTransactions), "{state:?}")
            }
            Dead => assert_eq!(out, Err(ErrorCode::InvalidTxnState)),
        }
    }
    // Already added: nothing to write.
    let m = meta(Ongoing, 3);
    assert_eq!(
        add_partitions(&m, Some(PID), ep(3), &[tp("a", 0)], 0, 500),
        Ok(Step::Respond(()))
    );
}

#[test]
fn add_partitions_checks_in_order() {
    let mut m = meta(TxnState::PrepareCommit, 3);
    let target = m.current.clone();
    m.begin_write(target, false);
    let p = [tp("c", 0)];
    assert_eq!(
        add_partitions(&m, Some(id(1001)), ep(2), &p, 0, 0),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        add_partitions(&m, Some(PID), ep(2), &p, 0, 0),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        add_partitions(&m, Some(PID), ep(4), &p, 0, 0),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        add_partitions(&m, Some(PID), ep(3), &p, 0, 0),
        Err(ErrorCode::ConcurrentTransactions)
    );
}

#[test]
fn end_txn_check_order() {
    // Every check fails at once: the first in the brief's order wins.
    let mut m = meta(TxnState::Empty, 3);
    let target = m.current.clone();
    m.begin_write(target, false);
    assert_eq!(
        end_txn(&m, Some(id(1001)), ep(2), true, false, None, 0),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        end_txn(&m, Some(PID), ep(2), true, false, None, 0),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        end_txn(&m, Some(PID), ep(4), true, false, None, 0),
        Err(ErrorCode::ProducerFenced),
        "client epochs must be equal"
    );
    assert_eq!(
        end_txn(&m, Some(PID), ep(3), true, false, None, 0),
        Err(ErrorCode::ConcurrentTransactions)
    );
    m.abort_write();
    assert_eq!(
        end_txn(&m, Some(PID), ep(3), true, false, None, 0),
        Err(ErrorCode::InvalidTxnState)
    );
}

#[test]
fn end_txn_by_state() {
    use EndOutcome::*;
    use TxnState::*;
    let ok_prepare = |s: TxnState| move |o: &Result<EndOutcome, ErrorCode>| matches!(o, Ok(Prepare(r)) if r.state == s);
    type Check = Box<dyn Fn(&Result<EndOutcome, ErrorCode>) -> bool>;
    let table: Vec<(TxnState, bool, Check)> = vec![
        (Ongoing, true, Box::new(ok_prepare(PrepareCommit))),
        (Ongoing, false, Box::new(ok_prepare(PrepareAbort))),
        (CompleteCommit, true, Box::new(|o| *o == Ok(AlreadyDone))),
        (
            CompleteCommit,
            false,
            Box::new(|o| *o == Err(ErrorCode::InvalidTxnState)),
        ),
        (CompleteAbort, false, Box::new(|o| *o == Ok(AlreadyDone))),
        (
            CompleteAbort,
            true,
            Box::new(|o| *o == Err(ErrorCode::InvalidTxnState)),
        ),
        (
            PrepareCommit,
            true,
            Box::new(|o| *o == Err(ErrorCode::ConcurrentTransactions)),
        ),
        (
            PrepareCommit,
            false,
            Box::new(|o| *o == Err(ErrorCode::ConcurrentTransactions)),
        ),
        (
            PrepareAbort,
            false,
            Box::new(|o| *o == Err(ErrorCode::ConcurrentTransactions)),
        ),
        (
            PrepareAbort,
            true,
            Box::new(|o| *o == Err(ErrorCode::ConcurrentTransactions)),
        ),
        (
            Empty,
            true,
            Box::new(|o| *o == Err(ErrorCode::InvalidTxnState)),
        ),
        (
            Empty,
            false,
            Box::new(|o| *o == Err(ErrorCode::InvalidTxnState)),
        ),
        (
            Dead,
            true,
            Box::new(|o| *o == Err(ErrorCode::InvalidTxnState)),
        ),
        (
            PrepareEpochFence,
            false,
            Box::new(|o| *o == Err(ErrorCode::ConcurrentTransactions)),
        ),
    ];
    for (state, commit, check) in table {
        let m = meta(state, 3);
        let out = end_txn(&m, Some(PID), ep(3), commit, false, None, 700);
        assert!(check(&out), "{state:?} commit={commit}: {out:?}");
        if let Ok(Prepare(r)) = &out {
            assert_eq!(r.partitions, m.current.partitions);
            assert_eq!(r.last_update_timestamp, 700);
            assert_eq!(r.producer_epoch, ep(3));
        }
    }
}

#[test]
fn tv2_end_txn_bumps_the_epoch_and_accepts_retries() {
    use TxnState::*;
    let m = meta(Ongoing, 3);
    let EndOutcome::Prepare(r) = end_txn(&m, Some(PID), ep(3), true, true, None, 10).unwrap()
    else {
        panic!()
    };
    assert_eq!(
        (r.state, r.producer_epoch, r.last_producer_epoch),
        (PrepareCommit, ep(4), ep(3))
    );
    assert_eq!(r.transaction_version, 2);
    assert_eq!(producer_after(&r), (Some(PID), ep(4)));
    let mut m2 = m.clone();
    m2.begin_write(r, false);
    m2.complete_write();
    // The retry (old epoch) while markers are written, then after completion.
    assert_eq!(
        end_txn(&m2, Some(PID), ep(3), true, true, None, 11),
        Err(ErrorCode::ConcurrentTransactions)
    );
    let done = complete(&m2.current, 12).unwrap();
    m2.begin_write(done, false);
    m2.complete_write();
    assert_eq!(
        end_txn(&m2, Some(PID), ep(3), true, true, None, 13),
        Ok(EndOutcome::AlreadyDone)
    );
    // A retry that asks for the other outcome, or an older epoch, is refused.
    assert_eq!(
        end_txn(&m2, Some(PID), ep(3), false, true, None, 13),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        end_txn(&m2, Some(PID), ep(2), true, true, None, 13),
        Err(ErrorCode::ProducerFenced)
    );
    // Data of the ended transaction, at the old epoch, cannot join a new one.
    assert_eq!(
        add_partitions(&m2, Some(PID), ep(3), &[tp("a", 0)], 2, 14),
        Err(ErrorCode::ProducerFenced)
    );
    assert!(matches!(
        add_partitions(&m2, Some(PID), ep(4), &[tp("a", 0)], 2, 14),
        Ok(Step::Write { .. })
    ));
}

#[test]
fn tv2_abort_of_an_empty_transaction_bumps() {
    for state in [
        TxnState::Empty,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
    ] {
        let m = meta(state, 3);
        let out = end_txn(&m, Some(PID), ep(3), false, true, None, 1).unwrap();
        let EndOutcome::Prepare(r) = out else {
            panic!("{state:?}: {out:?}")
        };
        assert_eq!((r.state, r.producer_epoch), (TxnState::PrepareAbort, ep(4)));
        assert!(r.partitions.is_empty());
        assert_eq!(
            end_txn(&m, Some(PID), ep(3), false, false, None, 1).is_ok(),
            state == TxnState::CompleteAbort,
            "TV1 {state:?}"
        );
    }
    assert_eq!(
        end_txn(
            &meta(TxnState::Empty, 3),
            Some(PID),
            ep(3),
            true,
            true,
            None,
            1
        ),
        Err(ErrorCode::InvalidTxnState)
    );
}

#[test]
fn tv2_exhausted_epoch_rotates_the_producer_id() {
    let m = meta(TxnState::Ongoing, MAX_BUMPABLE_EPOCH.get());
    assert_eq!(
        end_txn(&m, Some(PID), Some(MAX_BUMPABLE_EPOCH), true, true, None, 1),
        Ok(EndOutcome::NeedProducerId)
    );
    let EndOutcome::Prepare(r) = end_txn(
        &m,
        Some(PID),
        Some(MAX_BUMPABLE_EPOCH),
        true,
        true,
        Some(id(77)),
        1,
    )
    .unwrap() else {
        panic!()
    };
    assert_eq!(
        r.producer_epoch,
        Some(ProducerEpoch::MAX),
        "markers use the last epoch of the old id"
    );
    assert_eq!(producer_after(&r), (Some(id(77)), ep(0)));
    let done = complete(&r, 2).unwrap();
    assert_eq!(
        (
            done.producer_id,
            done.producer_epoch,
            done.previous_producer_id
        ),
        (Some(id(77)), ep(0), Some(PID))
    );
    let mut m2 = m.clone();
    m2.current = done;
    // The lost answer's retry with the old id at its exhausted epoch.
    assert_eq!(
        end_txn(
            &m2,
            Some(PID),
            Some(MAX_BUMPABLE_EPOCH),
            true,
            true,
            None,
            3
        ),
        Ok(EndOutcome::AlreadyDone)
    );
}

#[test]
fn fence_then_old_producer_is_fenced() {
    let m = meta(TxnState::Ongoing, 3);
    let mut m2 = m.clone();
    assert!(m2.is_timed_out(100 + 60_001));
    assert!(!m2.is_timed_out(100 + 60_000));
    let r = fence(&m2.current, 70_000, true);
    m2.begin_write(r, true);
    assert_eq!(m2.reported_state(), TxnState::PrepareEpochFence);
    assert!(
        !m2.is_timed_out(1 << 40),
        "nothing times out while a write is pending"
    );
    m2.complete_write();
    assert_eq!(m2.current.state, TxnState::PrepareAbort);
    assert_eq!(m2.current.producer_epoch, ep(4));
    // The stalled producer's commit, at its old epoch.
    assert_eq!(
        end_txn(&m2, Some(PID), ep(3), true, false, None, 0),
        Err(ErrorCode::ProducerFenced)
    );
    let done = complete(&m2.current, 80_000).unwrap();
    assert_eq!(done.state, TxnState::CompleteAbort);
    assert!(done.partitions.is_empty());
    m2.begin_write(done, false);
    m2.complete_write();
    assert_eq!(
        end_txn(&m2, Some(PID), ep(3), true, false, None, 0),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        add_partitions(&m2, Some(PID), ep(3), &[tp("a", 0)], 0, 0),
        Err(ErrorCode::ProducerFenced)
    );
}

/// The coordinator's own abort runs at the cluster's finalized
/// `transaction.version` (Kafka 4.4, measured in tests/differential.rs):
/// after it, the fenced producer's InitProducerId naming its old epoch
/// (KIP-360) gets the epoch after the fence at level 2, PRODUCER_FENCED
/// below.
#[test]
fn a_fenced_producer_recovers_by_its_old_epoch_only_at_transaction_version_2() {
    for (server_tv2, want) in [
        (true, Ok((PID, 4))),
        (false, Err(ErrorCode::ProducerFenced)),
    ] {
        let mut m = meta(TxnState::Ongoing, 3);
        let r = fence(&m.current, 70_000, server_tv2);
        assert_eq!(r.producer_epoch, ep(4));
        m.begin_write(r, true);
        m.complete_write();
        let done = complete(&m.current, 80_000).unwrap();
        m.begin_write(done, false);
        m.complete_write();
        let out = init_producer_id(
            Some(&m),
            "tx",
            30_000,
            MAX_TIMEOUT,
            Some((PID, ep(3))),
            None,
            server_tv2,
            90_000,
        );
        let got = match out {
            Ok(InitOutcome::Grant(Step::Write { respond, .. })) => Ok(respond),
            Ok(InitOutcome::Grant(Step::Respond(respond))) => Ok(respond),
            Ok(other) => panic!("{other:?}"),
            Err(e) => Err(e),
        };
        let want = want.map(|(pid, e): (ProducerId, i16)| (pid, ProducerEpoch::new(e)));
        assert_eq!(got, want, "transaction.version 2 or above: {server_tv2}");
    }
}

#[test]
fn expiry_only_when_idle_and_at_rest() {
    for state in TxnState::ALL {
        let mut m = meta(state, 1);
        m.current.last_update_timestamp = 1_000;
        let at_rest = matches!(
            state,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        );
        assert_eq!(m.is_expired(1_000 + 5_000, 5_000), at_rest, "{state:?}");
        assert!(
            !m.is_expired(1_000 + 4_999, 5_000),
            "{state:?} not yet idle long enough"
        );
        let target = m.current.clone();
        m.begin_write(target, false);
        assert!(
            !m.is_expired(i64::MAX, 5_000),
            "{state:?} with a pending write"
        );
    }
}

#[test]
fn complete_only_from_prepare() {
    for s in TxnState::ALL {
        let m = meta(s, 1);
        let r = complete(&m.current, 1);
        assert_eq!(r.is_some(), s.is_prepare(), "{s:?}");
        if let Some(r) = r {
            assert!(is_valid_transition(s, r.state));
        }
    }
}

#[test]
fn verify_partition_table() {
    let m = meta(TxnState::Ongoing, 3);
    assert_eq!(verify_partition(&m, Some(PID), ep(3), &tp("a", 0)), Ok(()));
    assert_eq!(
        verify_partition(&m, Some(PID), ep(3), &tp("c", 0)),
        Err(ErrorCode::InvalidTxnState)
    );
    assert_eq!(
        verify_partition(&m, Some(PID), ep(2), &tp("a", 0)),
        Err(ErrorCode::ProducerFenced)
    );
    assert_eq!(
        verify_partition(&m, Some(id(1)), ep(3), &tp("a", 0)),
        Err(ErrorCode::InvalidProducerIdMapping)
    );
    let m = meta(TxnState::CompleteCommit, 3);
    assert_eq!(
        verify_partition(&m, Some(PID), ep(3), &tp("a", 0)),
        Err(ErrorCode::InvalidTxnState)
    );
}

#[test]
fn txn_log_round_trip() {
    let mut r = meta(TxnState::Ongoing, 12).current;
    r.previous_producer_id = Some(id(44));
    r.last_producer_epoch = ep(11);
    r.next_producer_id = Some(id(45));
    r.transaction_version = 2;
    r.partitions.insert(tp("a", 7));
    let bytes = txn_log::encode_value(&r);
    assert_eq!(txn_log::decode_value(&bytes).unwrap(), r);
    assert_eq!(
        txn_log::decode_key(&txn_log::encode_key("my-tx")).unwrap(),
        "my-tx"
    );
    // Kafka's v0 value without Strand's trailing fields still decodes.
    let v0 = &bytes[..bytes.len() - 20];
    let d = txn_log::decode_value(v0).unwrap();
    assert_eq!(d.previous_producer_id, None);
    assert_eq!(d.partitions, r.partitions);
    // Every truncation is an error, never a panic.
    for cut in 0..bytes.len() - 20 {
        assert!(
            txn_log::decode_value(&bytes[..cut]).is_err(),
            "cut at {cut}"
        );
    }
    let mut bad = bytes.to_vec();
    bad[2 + 8 + 2 + 4] = 42;
    assert!(txn_log::decode_value(&bad).is_err());
}

#[derive(Debug, Clone)]
enum Op {
    Init(i32),
    Add(u8),
    /// commit?, KIP-890 part 2 client?
    End(bool, bool),
    Complete,
    Timeout(i64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1..100_000i32).prop_map(Op::Init),
        (0..4u8).prop_map(Op::Add),
        (any::<bool>(), any::<bool>()).prop_map(|(c, v2)| Op::End(c, v2)),
        Just(Op::Complete),
        (0..200_000i64).prop_map(Op::Timeout),
    ]
}

proptest! {
    /// Whatever the client and timers do, every persisted record follows a
    /// valid transition from the previous one, epochs never go backwards,
    /// and only Ongoing/Prepare states carry partitions.
    #[test]
    fn random_sequences_keep_invariants(ops in proptest::collection::vec((op(), proptest::bool::weighted(0.2)), 1..60)) {
        let mut m: Option<TxnMetadata> = None;
        let mut now = 0i64;
        let mut next_pid = 1i64;
        for (op, write_fails) in ops {
            now += 10;
            let Some(cur) = m.as_mut() else {
                if let Op::Init(t) = op {
                    let out = init_producer_id(None, "tx", t, MAX_TIMEOUT, None, Some(id(next_pid)), true, now).unwrap();
                    next_pid += 1;
                    if let InitOutcome::Grant(Step::Write { record, .. }) = out {
                        let mut fresh = new_metadata("tx", record.producer_id, t, now);
                        fresh.begin_write(record, false);
                        fresh.complete_write();
                        m = Some(fresh);
                    }
                }
                continue;
            };
            let before = cur.current.clone();
            let (pid, epoch) = (before.producer_id, before.producer_epoch);
            let write: Option<(TxnRecord, bool)> = match op {
                Op::Init(t) => match init_producer_id(Some(cur), "tx", t, MAX_TIMEOUT, None, Some(id(next_pid)), true, now) {
                    Ok(InitOutcome::Grant(Step::Write { record, .. })) => Some((record, false)),
                    Ok(InitOutcome::FenceOngoing(r)) => Some((r, true)),
                    _ => None,
                },
                Op::Add(p) => match add_partitions(cur, pid, epoch, &[tp("t", i32::from(p))], 0, now) {
                    Ok(Step::Write { record, .. }) => Some((record, false)),
                    _ => None,
                },
                Op::End(commit, tv2) => match end_txn(cur, pid, epoch, commit, tv2, Some(id(next_pid)), now) {
                    Ok(EndOutcome::Prepare(r)) => Some((r, false)),
                    _ => None,
                },
                Op::Complete => complete(&before, now).map(|r| (r, false)),
                Op::Timeout(dt) => {
                    now += dt;
                    cur.is_timed_out(now).then(|| (fence(&before, now, true), true))
                }
            };
            next_pid += 1;
            if let Some((record, fencing)) = write {
                prop_assert!(is_valid_transition(before.state, record.state) || record.producer_id != before.producer_id,
                    "{:?} -> {:?}", before.state, record.state);
                prop_assert!(record.producer_id != before.producer_id || record.producer_epoch >= before.producer_epoch);
                cur.begin_write(record, fencing);
                // A pending write blocks every client request.
                prop_assert_eq!(end_txn(cur, pid, epoch, true, false, None, now).err(), Some(ErrorCode::ConcurrentTransactions));
                if write_fails {
                    cur.abort_write();
                    prop_assert_eq!(&cur.current, &before);
                } else {
                    cur.complete_write();
                }
            }
            let c = &cur.current;
            if !matches!(c.state, TxnState::Ongoing | TxnState::PrepareCommit | TxnState::PrepareAbort) {
                prop_assert!(c.partitions.is_empty(), "{:?} has partitions", c.state);
            }
        }
    }
}

/// Metadata without a producer id (the broker's placeholder while the
/// first InitProducerId allocates one) is a new id.
#[test]
fn init_producer_id_on_a_placeholder_is_a_new_id() {
    let placeholder = new_metadata("tx", None, 0, 1);
    let init =
        |meta, fresh| init_producer_id(meta, "tx", 60_000, MAX_TIMEOUT, None, fresh, true, 5);
    assert_eq!(
        init(Some(&placeholder), None),
        Ok(InitOutcome::NeedProducerId)
    );
    assert_eq!(
        init(Some(&placeholder), Some(id(7))),
        init(None, Some(id(7)))
    );
}

/// A request without a producer id (the wire's -1) maps to no transaction,
/// not even the placeholder of an id whose first InitProducerId is still
/// waiting for a producer-id block (its id is none too): Kafka answers
/// INVALID_PRODUCER_ID_MAPPING, and nothing may persist a transaction for
/// producer -1.
#[test]
fn a_request_without_a_producer_id_maps_to_nothing() {
    let placeholder = new_metadata("tx", None, 0, 1);
    let parts = [tp("a", 0)];
    assert_eq!(
        add_partitions(&placeholder, None, None, &parts, 0, 5).err(),
        Some(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        add_partitions(&placeholder, None, None, &parts, 2, 5).err(),
        Some(ErrorCode::InvalidProducerIdMapping)
    );
    assert_eq!(
        verify_partition(&placeholder, None, None, &parts[0]).err(),
        Some(ErrorCode::InvalidProducerIdMapping)
    );
    for (commit, tv2) in [(true, false), (false, false), (true, true), (false, true)] {
        assert_eq!(
            end_txn(&placeholder, None, None, commit, tv2, None, 5).err(),
            Some(ErrorCode::InvalidProducerIdMapping),
            "EndTxn commit={commit} tv2={tv2}"
        );
    }
    // A completed transaction with no previous producer id: a KIP-890
    // EndTxn from producer -1 is no retry of its rotation.
    let mut done = meta(TxnState::CompleteAbort, 0);
    done.current.previous_producer_id = None;
    assert_eq!(
        end_txn(
            &done,
            None,
            ep(MAX_BUMPABLE_EPOCH.get()),
            false,
            true,
            None,
            5
        )
        .err(),
        Some(ErrorCode::InvalidProducerIdMapping)
    );
}

/// The value layout is unchanged by the domain types: the seed the fuzz
/// corpus keeps (written before them) decodes, with its -1s as `None`, and
/// encodes back to the same bytes.
#[test]
fn txn_log_bytes_are_unchanged() {
    let seed = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../fuzz/corpus/coordinator_state/ongoing"
    ))
    .unwrap();
    let (key_len, rest) = seed.split_first().unwrap();
    let (key, value) = rest.split_at(usize::from(*key_len));
    assert_eq!(txn_log::decode_key(key).unwrap(), "tx");
    let r = txn_log::decode_value(value).unwrap();
    assert_eq!(
        (
            r.producer_id,
            r.producer_epoch,
            r.previous_producer_id,
            r.last_producer_epoch,
            r.next_producer_id
        ),
        (Some(id(7)), ep(1), None, None, None)
    );
    assert_eq!(&txn_log::encode_value(&r)[..], value);
}
