use std::collections::VecDeque;

use proptest::prelude::*;
use strand_protocol::batch::{BatchHeader, ControlType, EndTxnMarker};
use strand_protocol::ErrorCode;
use strand_txn::*;
use strand_types::{Offset, ProducerEpoch, ProducerId, Sequence};

/// The producer id of most tests, as a header carries it.
const PID: i64 = 7;

fn pid(p: i64) -> ProducerId {
    ProducerId::new(p)
}

/// An epoch as a header carries it: -1 is none.
fn ep(e: i16) -> Option<ProducerEpoch> {
    ProducerEpoch::from_wire(e)
}

/// A sequence as a header carries it: -1 is none.
fn sq(s: i32) -> Option<Sequence> {
    Sequence::from_wire(s)
}

fn off(o: i64) -> Offset {
    Offset::new(o)
}

fn header(pid: i64, epoch: i16, seq: i32, count: i32, base_offset: i64) -> BatchHeader {
    BatchHeader {
        base_offset,
        batch_length: 100,
        partition_leader_epoch: 0,
        magic: 2,
        crc: 0,
        attributes: 0,
        last_offset_delta: count - 1,
        base_timestamp: 1_000,
        max_timestamp: 1_000,
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        records_count: count,
    }
}

fn txn_header(pid: i64, epoch: i16, seq: i32, count: i32, base_offset: i64) -> BatchHeader {
    BatchHeader {
        attributes: 0x10,
        ..header(pid, epoch, seq, count, base_offset)
    }
}

fn marker(pid: i64, epoch: i16, offset: i64) -> BatchHeader {
    BatchHeader {
        attributes: 0x30,
        base_sequence: -1,
        ..header(pid, epoch, -1, 1, offset)
    }
}

fn batch(first_seq: i32, last_seq: i32, first_offset: i64) -> BatchMetadata {
    BatchMetadata {
        first_seq: sq(first_seq),
        last_seq: sq(last_seq),
        first_offset: off(first_offset),
        last_offset: off(first_offset + (last_seq - first_seq) as i64),
        timestamp: 1_000,
    }
}

fn entry(epoch: i16, batches: &[BatchMetadata]) -> ProducerEntry {
    ProducerEntry {
        producer_id: pid(PID),
        producer_epoch: ep(epoch),
        batches: batches.iter().copied().collect::<VecDeque<_>>(),
        last_timestamp: 1_000,
        coordinator_epoch: -1,
        current_txn_first_offset: None,
    }
}

#[derive(Debug)]
enum Want {
    Append,
    Dup(BatchMetadata),
    Err(ErrorCode),
}

/// (name, entry, epoch, first seq, last seq (as a header carries them), expected)
type Case = (&'static str, Option<ProducerEntry>, i16, i32, i32, Want);

#[test]
fn check_sequence_table() {
    let b0 = batch(0, 4, 100);
    let b1 = batch(5, 9, 105);
    let wrap = batch(i32::MAX - 2, i32::MAX, 200);
    let cases: Vec<Case> = vec![
        ("unknown producer, seq 0", None, 0, 0, 4, Want::Append),
        ("unknown producer, any seq", None, 3, 57, 60, Want::Append),
        (
            "no-epoch entry accepts any seq",
            Some(entry(-1, &[])),
            2,
            9,
            9,
            Want::Append,
        ),
        (
            "in sequence",
            Some(entry(1, &[b0, b1])),
            1,
            10,
            12,
            Want::Append,
        ),
        (
            "duplicate of last",
            Some(entry(1, &[b0, b1])),
            1,
            5,
            9,
            Want::Dup(b1),
        ),
        (
            "duplicate of older",
            Some(entry(1, &[b0, b1])),
            1,
            0,
            4,
            Want::Dup(b0),
        ),
        (
            "same first seq, other last seq",
            Some(entry(1, &[b0, b1])),
            1,
            5,
            7,
            Want::Err(ErrorCode::OutOfOrderSequenceNumber),
        ),
        (
            "gap",
            Some(entry(1, &[b0, b1])),
            1,
            11,
            12,
            Want::Err(ErrorCode::OutOfOrderSequenceNumber),
        ),
        (
            "behind (not remembered)",
            Some(entry(1, &[b0, b1])),
            1,
            3,
            4,
            Want::Err(ErrorCode::OutOfOrderSequenceNumber),
        ),
        (
            "older epoch is fenced",
            Some(entry(2, &[b0])),
            1,
            5,
            9,
            Want::Err(ErrorCode::InvalidProducerEpoch),
        ),
        (
            "older epoch, duplicate range still fenced",
            Some(entry(2, &[b0])),
            1,
            0,
            4,
            Want::Err(ErrorCode::InvalidProducerEpoch),
        ),
        (
            "newer epoch from 0",
            Some(entry(1, &[b0, b1])),
            2,
            0,
            3,
            Want::Append,
        ),
        (
            "newer epoch not from 0",
            Some(entry(1, &[b0, b1])),
            2,
            10,
            11,
            Want::Err(ErrorCode::OutOfOrderSequenceNumber),
        ),
        (
            "newer epoch, same range as remembered is not a duplicate",
            Some(entry(1, &[b0])),
            2,
            0,
            4,
            Want::Append,
        ),
        (
            "epoch without batches, seq 0",
            Some(entry(3, &[])),
            3,
            0,
            0,
            Want::Append,
        ),
        (
            "epoch without batches, seq > 0",
            Some(entry(3, &[])),
            3,
            4,
            5,
            Want::Err(ErrorCode::OutOfOrderSequenceNumber),
        ),
        (
            "wraps at i32::MAX",
            Some(entry(1, &[wrap])),
            1,
            0,
            2,
            Want::Append,
        ),
        (
            "no wrap to 1",
            Some(entry(1, &[wrap])),
            1,
            1,
            2,
            Want::Err(ErrorCode::OutOfOrderSequenceNumber),
        ),
        (
            "duplicate across wrap",
            Some(entry(1, &[wrap])),
            1,
            i32::MAX - 2,
            i32::MAX,
            Want::Dup(wrap),
        ),
    ];
    for (name, e, epoch, first, last, want) in cases {
        let got = check_sequence(e.as_ref(), ep(epoch), sq(first), sq(last));
        match (&want, &got) {
            (Want::Append, Ok(SequenceCheck::Append)) => {}
            (Want::Dup(b), Ok(SequenceCheck::Duplicate(g))) if b == g => {}
            (Want::Err(code), Err(err)) if err.error_code() == *code => {}
            _ => panic!("{name}: want {want:?}, got {got:?}"),
        }
    }
}

#[test]
fn error_codes_are_kafkas() {
    let fenced = ProducerStateError::InvalidProducerEpoch {
        producer_epoch: ep(1),
        current_epoch: ProducerEpoch::new(2),
    };
    assert_eq!(fenced.error_code().code(), 47);
    let ooo = ProducerStateError::OutOfOrderSequence {
        producer_epoch: ProducerEpoch::new(1),
        first_seq: sq(3),
        expected_seq: Sequence::new(1),
    };
    assert_eq!(ooo.error_code().code(), 45);
    assert_eq!(
        ProducerStateError::InvalidTxnState {
            producer_id: pid(1)
        }
        .error_code()
        .code(),
        48
    );
    let coord = ProducerStateError::TransactionCoordinatorFenced {
        coordinator_epoch: 1,
        current_coordinator_epoch: 2,
    };
    assert_eq!(coord.error_code().code(), 52);
}

/// Messages (sent to clients) print the wire integers, -1 for none.
#[test]
fn error_messages_print_wire_values() {
    let fenced = ProducerStateError::InvalidProducerEpoch {
        producer_epoch: ep(1),
        current_epoch: ProducerEpoch::new(2),
    };
    assert_eq!(
        fenced.to_string(),
        "producer epoch 1 is older than the current epoch 2"
    );
    let none = ProducerStateError::InvalidProducerEpoch {
        producer_epoch: None,
        current_epoch: ProducerEpoch::new(2),
    };
    assert_eq!(
        none.to_string(),
        "producer epoch -1 is older than the current epoch 2"
    );
    let ooo = ProducerStateError::OutOfOrderSequence {
        producer_epoch: ProducerEpoch::new(1),
        first_seq: None,
        expected_seq: Sequence::new(5),
    };
    assert_eq!(
        ooo.to_string(),
        "out of order sequence for producer epoch 1: first sequence -1, expected 5"
    );
    assert_eq!(
        ProducerStateError::InvalidTxnState {
            producer_id: pid(9)
        }
        .to_string(),
        "expected a transactional batch from producer 9: a transaction is open"
    );
}

#[test]
fn out_of_order_reports_expected_sequence() {
    let e = entry(1, &[batch(0, 4, 0)]);
    assert_eq!(
        check_sequence(Some(&e), ep(1), sq(9), sq(9)),
        Err(ProducerStateError::OutOfOrderSequence {
            producer_epoch: ProducerEpoch::new(1),
            first_seq: sq(9),
            expected_seq: Sequence::new(5)
        })
    );
    assert_eq!(
        check_sequence(Some(&e), ep(2), sq(9), sq(9)),
        Err(ProducerStateError::OutOfOrderSequence {
            producer_epoch: ProducerEpoch::new(2),
            first_seq: sq(9),
            expected_seq: Sequence::ZERO
        })
    );
}

#[test]
fn manager_check_record_and_duplicate() {
    let mut m = ProducerStateManager::new();
    let h = header(PID, 0, 0, 3, 10);
    assert_eq!(m.check(&h), Ok(SequenceCheck::Append));
    m.record(&h, 1_234, None);
    assert_eq!(m.map_end_offset(), off(13));
    let retry = header(PID, 0, 0, 3, -1);
    assert_eq!(
        m.check(&retry),
        Ok(SequenceCheck::Duplicate(BatchMetadata {
            first_seq: sq(0),
            last_seq: sq(2),
            first_offset: off(10),
            last_offset: off(12),
            timestamp: 1_234
        }))
    );
    assert_eq!(
        m.check(&header(PID, 0, 3, 1, -1)),
        Ok(SequenceCheck::Append)
    );
    assert_eq!(
        m.check(&header(PID, 0, 4, 1, -1)).unwrap_err().error_code(),
        ErrorCode::OutOfOrderSequenceNumber
    );
    // Non-idempotent batches are never checked.
    assert_eq!(
        m.check(&header(-1, -1, -1, 5, -1)),
        Ok(SequenceCheck::Append)
    );
    let e = m.entry(pid(PID)).unwrap();
    assert_eq!(
        (e.producer_epoch, e.last_timestamp, e.batches.len()),
        (ep(0), 1_234, 1)
    );
}

#[test]
fn new_epoch_forgets_batches() {
    let mut m = ProducerStateManager::new();
    m.record(&header(PID, 0, 0, 5, 0), 1, None);
    m.record(&header(PID, 1, 0, 2, 5), 2, None);
    let e = m.entry(pid(PID)).unwrap();
    assert_eq!(e.producer_epoch, ep(1));
    assert_eq!(
        e.batches.iter().copied().collect::<Vec<_>>(),
        vec![batch(0, 1, 5)]
            .into_iter()
            .map(|b| BatchMetadata { timestamp: 2, ..b })
            .collect::<Vec<_>>()
    );
    // The old epoch's batch is now fenced, not a duplicate.
    assert_eq!(
        m.check(&header(PID, 0, 0, 5, -1)).unwrap_err().error_code(),
        ErrorCode::InvalidProducerEpoch
    );
}

#[test]
fn transactions_open_and_close() {
    let mut m = ProducerStateManager::new();
    m.record(&txn_header(PID, 0, 0, 2, 104), 1, None);
    m.record(&txn_header(PID, 0, 2, 2, 106), 2, None);
    assert_eq!(
        m.entry(pid(PID)).unwrap().current_txn_first_offset,
        Some(off(104))
    );
    assert_eq!(m.first_unstable_offset(), Some(off(104)));
    // Non-transactional write while the transaction is open.
    assert_eq!(
        m.check(&header(PID, 0, 4, 1, -1)).unwrap_err().error_code(),
        ErrorCode::InvalidTxnState
    );
    assert_eq!(
        m.check(&txn_header(PID, 0, 4, 1, -1)),
        Ok(SequenceCheck::Append)
    );
    // Marker checks: older coordinator epoch is fenced once one is known.
    assert_eq!(m.check_end_txn_marker(pid(PID), ep(0), 3, 0), Ok(()));
    let done = m.record_end_txn_marker(pid(PID), ep(0), 3, off(108), 3, ControlType::Abort);
    assert_eq!(
        done,
        Some(CompletedTxn {
            producer_id: pid(PID),
            first_offset: off(104),
            last_offset: off(108),
            is_aborted: true,
        })
    );
    // Completed but the marker is not replicated yet: still unstable.
    assert_eq!(m.first_unstable_offset(), Some(off(104)));
    m.on_high_watermark(off(109));
    assert_eq!(m.first_unstable_offset(), None);
    assert_eq!(
        m.check_end_txn_marker(pid(PID), ep(0), 2, 0)
            .unwrap_err()
            .error_code(),
        ErrorCode::TransactionCoordinatorFenced
    );
    assert_eq!(
        m.check_end_txn_marker(pid(PID), ep(-1), 3, 0)
            .unwrap_err()
            .error_code(),
        ErrorCode::InvalidProducerEpoch
    );
    // Marker via record() of a control batch with a bumped epoch.
    m.record(&txn_header(PID, 0, 4, 1, 109), 4, None);
    assert_eq!(
        m.record(&marker(PID, 1, 110), 5, Some(commit_marker())),
        Some(CompletedTxn {
            producer_id: pid(PID),
            first_offset: off(109),
            last_offset: off(110),
            is_aborted: false,
        })
    );
    let e = m.entry(pid(PID)).unwrap();
    assert_eq!(
        (e.producer_epoch, e.batches.len(), e.coordinator_epoch),
        (ep(1), 0, 3)
    );
    assert_eq!(m.map_end_offset(), off(111));
}

/// KIP-890's verification guard, the race a chaos run found
/// (chaos/findings/seed-1-aborted-read): a batch verified while its
/// transaction was open, then delayed past the transaction's abort marker,
/// must not open a new transaction at the same epoch (the producer's next
/// commit would commit it). A batch verified after the marker, and any
/// batch of a transaction still open, is appended.
#[test]
fn a_batch_verified_before_a_marker_does_not_open_a_transaction_after_it() {
    let mut m = ProducerStateManager::new();
    let not_verified = |m: &ProducerStateManager, h: &BatchHeader, g| {
        m.check_verification(h, g).map_err(|e| e.error_code())
    };
    let v1 = false; // transaction.version 1 (produce v11 and older)
                    // The first batch of a transaction: verified (nothing open yet), appended.
    let (g1, open) = m.start_verification(pid(PID), ep(0), v1, 0);
    assert!(!open);
    assert_eq!(not_verified(&m, &txn_header(PID, 0, 0, 2, -1), g1), Ok(()));
    m.record(&txn_header(PID, 0, 0, 2, 100), 1, None);
    // The next batch is verified while the transaction is open...
    let (g2, open) = m.start_verification(pid(PID), ep(0), v1, 0);
    assert!(open);
    assert_ne!(g1, g2, "the append ended the first verification");
    assert_eq!(not_verified(&m, &txn_header(PID, 0, 2, 1, -1), g2), Ok(()));
    // ...then the transaction is aborted before it is appended.
    m.record_end_txn_marker(pid(PID), ep(0), 3, off(102), 2, ControlType::Abort);
    assert_eq!(
        not_verified(&m, &txn_header(PID, 0, 2, 1, -1), g2),
        Err(ErrorCode::InvalidTxnState),
        "a batch verified before the abort would open a transaction after it"
    );
    // So is one verified (against the coordinator) with nothing open, when a
    // marker comes between its verification and its append.
    let (g3, open) = m.start_verification(pid(PID), ep(0), v1, 0);
    assert!(!open);
    m.record_end_txn_marker(pid(PID), ep(0), 3, off(103), 3, ControlType::Abort);
    assert_eq!(
        not_verified(&m, &txn_header(PID, 0, 2, 1, -1), g3),
        Err(ErrorCode::InvalidTxnState)
    );
    // Concurrent verifications of one producer share a guard (one cannot
    // invalidate another, e.g. by failing); an older guard is not it.
    let (g4, _) = m.start_verification(pid(PID), ep(1), v1, 0);
    let (g4b, _) = m.start_verification(pid(PID), ep(1), v1, 0);
    assert_eq!(g4, g4b);
    assert_ne!(g3, g4);
    assert_eq!(
        not_verified(&m, &txn_header(PID, 1, 0, 1, -1), g3),
        Err(ErrorCode::InvalidTxnState)
    );
    // Verified after the marker: appended.
    assert_eq!(not_verified(&m, &txn_header(PID, 1, 0, 1, -1), g4), Ok(()));
    // Batches without a transaction are not verified at all.
    assert_eq!(not_verified(&m, &header(PID, 1, 0, 1, -1), g3), Ok(()));
    // Guards are a leader's memory, not state replicas agree on.
    assert_eq!(m, {
        let mut other = m.clone();
        other.start_verification(pid(PID + 1), ep(0), v1, 0);
        other
    });
}

/// A transaction.version 2 client's markers carry the epoch bumped at its
/// transaction's end, and its next transaction runs at that epoch: a marker
/// at the epoch a verification was taken for ended the previous transaction
/// (the coordinator holds the next transaction's add until those markers are
/// written), so the guard stands. Every other marker drops it.
#[test]
fn a_version_2_marker_at_the_verified_epoch_keeps_the_guard() {
    // (verified with epoch bump, verified epoch, marker epoch) -> guard kept
    let table = [
        (true, 1, 1, true),
        (true, 1, 0, false),
        (true, 0, 1, false),
        (false, 1, 1, false),
        (false, 0, 1, false),
    ];
    for (bump, verified, marker, kept) in table {
        let mut m = ProducerStateManager::new();
        let (g, open) = m.start_verification(pid(PID), ep(verified), bump, 0);
        assert!(!open);
        m.record_end_txn_marker(pid(PID), ep(marker), 3, off(10), 1, ControlType::Commit);
        let h = txn_header(PID, verified, 0, 1, -1);
        assert_eq!(
            m.check_verification(&h, g).is_ok(),
            kept,
            "bump {bump}, verified at {verified}, marker at {marker}"
        );
    }
    // Joined at a higher epoch, the guard is the higher epoch's.
    let mut m = ProducerStateManager::new();
    let (g, _) = m.start_verification(pid(PID), ep(1), true, 0);
    m.start_verification(pid(PID), ep(2), true, 0);
    m.record_end_txn_marker(pid(PID), ep(2), 3, off(10), 1, ControlType::Commit);
    assert!(m
        .check_verification(&txn_header(PID, 2, 0, 1, -1), g)
        .is_ok());
}

/// A producer state rebuilt while a produce holds a guard (a follower's
/// truncation replays the log into a new state; a restart starts from a
/// snapshot) issues new guards, never the one held: that produce, verified
/// before the rebuild, must not open a transaction after it.
#[test]
fn a_rebuilt_state_never_reissues_a_held_guard() {
    let mut before = ProducerStateManager::new();
    let (held, _) = before.start_verification(pid(PID), ep(0), false, 0);
    let mut rebuilt = ProducerStateManager::new();
    let (fresh, open) = rebuilt.start_verification(pid(PID), ep(0), false, 0);
    assert!(!open);
    assert_ne!(held, fresh);
    let h = txn_header(PID, 0, 0, 1, -1);
    assert_eq!(
        rebuilt
            .check_verification(&h, held)
            .map_err(|e| e.error_code()),
        Err(ErrorCode::InvalidTxnState)
    );
    assert!(rebuilt.check_verification(&h, fresh).is_ok());
}

/// A verification that never reaches an append (it failed, the client went
/// away) is forgotten when `producer.id.expiration.ms` has passed since it
/// started, as Kafka forgets its verification entries.
#[test]
fn a_verification_expires_with_producer_id_expiration() {
    let day = 86_400_000;
    let mut m = ProducerStateManager::new();
    let (g, _) = m.start_verification(pid(PID), ep(0), false, 1_000);
    let h = txn_header(PID, 0, 0, 1, -1);
    m.expire(1_000 + day - 1, day);
    assert!(m.check_verification(&h, g).is_ok());
    m.expire(1_000 + day, day);
    assert!(m.check_verification(&h, g).is_err());
}

#[test]
fn check_batches_follows_earlier_batches_in_the_request() {
    let mut m = ProducerStateManager::new();
    m.record(&header(PID, 0, 0, 2, 0), 1, None);
    // Two batches in one record set: the second continues the first.
    let set = [header(PID, 0, 2, 2, -1), header(PID, 0, 4, 1, -1)];
    assert_eq!(m.check_batches(&set), Ok(SequenceCheck::Append));
    // A gap inside the record set.
    let gap = [header(PID, 0, 2, 2, -1), header(PID, 0, 5, 1, -1)];
    assert_eq!(
        m.check_batches(&gap).unwrap_err().error_code(),
        ErrorCode::OutOfOrderSequenceNumber
    );
    // A duplicate anywhere makes the whole set a duplicate (Kafka).
    let dup = [header(PID, 0, 0, 2, -1)];
    assert!(matches!(
        m.check_batches(&dup),
        Ok(SequenceCheck::Duplicate(_))
    ));
}

#[test]
fn expire_keeps_open_transactions_and_recent_producers() {
    let mut m = ProducerStateManager::new();
    m.record(&header(1, 0, 0, 1, 0), 1_000, None);
    m.record(&header(2, 0, 0, 1, 1), 5_000, None);
    m.record(&txn_header(3, 0, 0, 1, 2), 1_000, None);
    let day = 86_400_000;
    assert_eq!(m.expire(1_000 + day - 1, day), 0);
    assert_eq!(m.expire(1_000 + day, day), 1);
    assert!(m.entry(pid(1)).is_none());
    assert!(m.entry(pid(2)).is_some());
    assert!(
        m.entry(pid(3)).is_some(),
        "open transaction is never expired"
    );
    // An expired producer may continue with any sequence.
    assert_eq!(m.check(&header(1, 0, 77, 1, -1)), Ok(SequenceCheck::Append));
}

#[test]
fn snapshot_errors() {
    let mut m = ProducerStateManager::new();
    m.record(&header(PID, 0, 0, 3, 0), 1, None);
    let snap = m.snapshot();
    assert_eq!(ProducerStateManager::from_snapshot(&snap), Ok(m.clone()));
    assert_eq!(
        ProducerStateManager::from_snapshot(&snap[..3]),
        Err(SnapshotError::Truncated)
    );
    let mut v = snap.clone();
    v[1] = 9;
    assert_eq!(
        ProducerStateManager::from_snapshot(&v),
        Err(SnapshotError::UnsupportedVersion(9))
    );
    let mut flipped = snap.clone();
    *flipped.last_mut().unwrap() ^= 1;
    assert!(matches!(
        ProducerStateManager::from_snapshot(&flipped),
        Err(SnapshotError::CrcMismatch { .. })
    ));
    assert!(ProducerStateManager::from_snapshot(&snap[..snap.len() - 1]).is_err());
    let empty = ProducerStateManager::new();
    assert_eq!(
        ProducerStateManager::from_snapshot(&empty.snapshot()),
        Ok(empty)
    );
}

#[test]
fn real_client_batch_header() {
    use strand_protocol::kafka_protocol::records::Compression;
    let bytes = strand_protocol::testing::encode_batch(3, PID, 2, 10, Compression::None);
    let mut h = BatchHeader::parse(&bytes).unwrap();
    h.base_offset = 50;
    let mut m = ProducerStateManager::new();
    m.record(&header(PID, 2, 0, 10, 40), 1, None);
    assert_eq!(m.check(&h), Ok(SequenceCheck::Append));
    m.record(&h, h.max_timestamp, None);
    assert_eq!(
        m.entry(pid(PID)).unwrap().batches.back().unwrap(),
        &BatchMetadata {
            first_seq: sq(10),
            last_seq: sq(12),
            first_offset: off(50),
            last_offset: off(52),
            timestamp: h.max_timestamp
        }
    );
}

/// What the types cannot hold records nothing: a header without a producer
/// id, or with a negative base offset (outside the CRC: not a log
/// position). The header's -1 epoch and sequences are `None`, and the
/// snapshot writes them back as -1.
#[test]
fn wire_sentinels_at_the_header() {
    let mut m = ProducerStateManager::new();
    assert_eq!(m.record(&header(-1, -1, -1, 3, 0), 1, None), None);
    assert_eq!(m.record(&header(PID, 0, 0, 1, -5), 1, None), None);
    assert!(m.is_empty());
    assert_eq!(m.map_end_offset(), off(3), "the log still ends past them");
    // A coordinator's transactional batch: no epoch known yet, no sequence.
    m.record(&txn_header(PID, -1, -1, 2, 3), 7, None);
    let e = m.entry(pid(PID)).unwrap();
    assert_eq!(e.producer_epoch, None);
    assert_eq!(e.last_seq(), None);
    assert_eq!(e.last_offset(), Some(off(4)));
    assert_eq!(e.current_txn_first_offset, Some(off(3)));
    let snap = m.snapshot();
    // producer_epoch (i16) right after the first entry's producer id: -1.
    let at = 2 + 4 + 8 + 4 + 8;
    assert_eq!(&snap[at..at + 2], &(-1i16).to_be_bytes());
    assert_eq!(ProducerStateManager::from_snapshot(&snap), Ok(m));
}

/// The snapshot bytes are the documented layout, unchanged by the domain
/// types: built here field by field, with -1 for every missing value.
#[test]
fn snapshot_layout_is_unchanged() {
    let mut m = ProducerStateManager::new();
    m.record(&header(3, 2, 0, 2, 0), 10, None);
    // A coordinator's transactional batch: no sequence.
    m.record(&txn_header(5, 1, -1, 1, 2), 11, None);
    m.record(&txn_header(9, 0, 0, 1, 3), 12, None);
    m.record(&marker(9, 0, 4), 13, Some(abort_marker()));
    let mut body: Vec<u8> = Vec::new();
    let mut put = |b: &[u8]| body.extend_from_slice(b);
    put(&5i64.to_be_bytes()); // map end offset
    put(&3i32.to_be_bytes());
    // (pid, epoch, last timestamp, coordinator epoch, txn first offset,
    //  (first seq, last seq, first offset, last offset, timestamp))
    for (pid, epoch, ts, ce, txn, (fs, ls, fo, lo, bts)) in [
        (
            3i64,
            2i16,
            10i64,
            -1i32,
            -1i64,
            (0i32, 1i32, 0i64, 1i64, 10i64),
        ),
        (5, 1, 11, -1, 2, (-1, -1, 2, 2, 11)),
        (9, 0, 13, 3, -1, (0, 0, 3, 3, 12)),
    ] {
        put(&pid.to_be_bytes());
        put(&epoch.to_be_bytes());
        put(&ts.to_be_bytes());
        put(&ce.to_be_bytes());
        put(&txn.to_be_bytes());
        put(&[1u8]);
        put(&fs.to_be_bytes());
        put(&ls.to_be_bytes());
        put(&fo.to_be_bytes());
        put(&lo.to_be_bytes());
        put(&bts.to_be_bytes());
    }
    put(&1i32.to_be_bytes()); // unreplicated: the abort of producer 9
    put(&9i64.to_be_bytes());
    put(&3i64.to_be_bytes());
    put(&4i64.to_be_bytes());
    put(&[1u8]);
    let mut want = 2i16.to_be_bytes().to_vec();
    want.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    want.extend_from_slice(&body);
    assert_eq!(m.snapshot(), want);
    assert_eq!(ProducerStateManager::from_snapshot(&want), Ok(m));
}

/// Entries over the whole domain of their types (ids and offsets are never
/// negative; epochs and sequences may be none).
fn arb_entry() -> impl Strategy<Value = ProducerEntry> {
    (
        0..=i64::MAX,
        -1i16..100,
        prop::collection::vec(
            (any::<i32>(), 0i32..100, 0..=i64::MAX - 100, any::<i64>()),
            0..=5,
        ),
        any::<i64>(),
        any::<i32>(),
        prop::option::of(0i64..i64::MAX),
    )
        .prop_map(|(pid, epoch, bs, ts, ce, txn)| ProducerEntry {
            producer_id: ProducerId::new(pid),
            producer_epoch: ep(epoch),
            batches: bs
                .into_iter()
                .map(|(s, n, o, t)| BatchMetadata {
                    first_seq: sq(s),
                    last_seq: sq(s.wrapping_add(n)),
                    first_offset: off(o),
                    last_offset: off(o + n as i64),
                    timestamp: t,
                })
                .collect(),
            last_timestamp: ts,
            coordinator_epoch: ce,
            current_txn_first_offset: txn.map(off),
        })
}

/// Builds a manager from entries via a snapshot of a recorded run (exercises record()).
fn manager_from(entries: Vec<ProducerEntry>, map_end: i64) -> ProducerStateManager {
    // Encode by hand through the public API: record each entry's batches.
    let mut m = ProducerStateManager::new();
    for e in &entries {
        for b in &e.batches {
            let mut h = header(
                e.producer_id.get(),
                ProducerEpoch::to_wire(e.producer_epoch),
                Sequence::to_wire(b.first_seq),
                1,
                b.first_offset.get(),
            );
            h.last_offset_delta = b.last_offset.since(b.first_offset) as i32;
            m.record(&h, b.timestamp, None);
        }
    }
    // A negative end is not an offset (and never moved the end).
    if let Some(end) = Offset::from_wire(map_end) {
        m.update_map_end_offset(end);
    }
    m
}

proptest! {
    /// After a run of in-order batches, the last five are duplicates with their
    /// original offsets, older ones are not, and a gap is out of order.
    #[test]
    fn duplicates_of_recent_batches(
        start_seq in prop_oneof![0i32..1000, (i32::MAX - 200)..=i32::MAX],
        sizes in prop::collection::vec(1i32..50, 1..20),
        gap in 1i32..10,
    ) {
        let mut m = ProducerStateManager::new();
        let mut seq = start_seq;
        let mut offset = 1_000i64;
        let mut appended = Vec::new();
        for (i, n) in sizes.iter().enumerate() {
            let h = header(PID, 4, seq, *n, offset);
            prop_assert_eq!(m.check(&header(PID, 4, seq, *n, -1)), Ok(SequenceCheck::Append));
            m.record(&h, i as i64, None);
            appended.push((h.base_sequence, h.last_sequence(), h.base_offset, h.last_offset(), i as i64));
            seq = if h.last_sequence() == i32::MAX { 0 } else { h.last_sequence() + 1 };
            offset = h.next_offset() + 3;
        }
        let k = appended.len();
        for (i, (first, last, fo, lo, ts)) in appended.iter().copied().enumerate() {
            let got = check_sequence(m.entry(pid(PID)), ep(4), sq(first), sq(last));
            if i + MAX_REMEMBERED_BATCHES >= k {
                prop_assert_eq!(got, Ok(SequenceCheck::Duplicate(BatchMetadata { first_seq: sq(first), last_seq: sq(last), first_offset: off(fo), last_offset: off(lo), timestamp: ts })));
            } else {
                prop_assert!(got.is_err(), "batch {} of {} should not be a duplicate: {:?}", i, k, got);
            }
        }
        let gapped = seq.wrapping_add(gap).max(0);
        if gapped != seq {
            prop_assert_eq!(
                m.check(&header(PID, 4, gapped, 1, -1)).map_err(|e| e.error_code()),
                Err(ErrorCode::OutOfOrderSequenceNumber)
            );
        }
        prop_assert_eq!(m.check(&header(PID, 4, seq, 1, -1)), Ok(SequenceCheck::Append));
    }

    #[test]
    fn snapshot_round_trip(entries in prop::collection::vec(arb_entry(), 0..8), map_end in any::<i64>()) {
        let m = manager_from(entries, map_end);
        let snap = m.snapshot();
        let back = ProducerStateManager::from_snapshot(&snap).unwrap();
        prop_assert_eq!(&back, &m);
        prop_assert_eq!(back.snapshot(), snap);
    }

    #[test]
    fn snapshot_round_trip_full_entries(entries in prop::collection::vec(arb_entry(), 0..8)) {
        // Entries with txn/coordinator fields set: go through from_snapshot of a
        // hand-built manager by recording markers and transactional batches.
        let mut m = ProducerStateManager::new();
        for (i, e) in entries.iter().enumerate() {
            let id = i as i64;
            let epoch = ProducerEpoch::to_wire(e.producer_epoch).max(0);
            m.record(&txn_header(id, epoch, 0, 1, i as i64 * 10), e.last_timestamp, None);
            if e.current_txn_first_offset.is_none() {
                m.record_end_txn_marker(pid(id), ep(epoch), e.coordinator_epoch, off(i as i64 * 10 + 1), e.last_timestamp, ControlType::Commit);
            }
        }
        let back = ProducerStateManager::from_snapshot(&m.snapshot()).unwrap();
        prop_assert_eq!(back, m);
    }

    /// Any single bit flip or truncation is detected.
    #[test]
    fn corrupt_snapshot_is_detected(
        entries in prop::collection::vec(arb_entry(), 1..5),
        pos in any::<prop::sample::Index>(),
        bit in 0u8..8,
        cut in any::<prop::sample::Index>(),
    ) {
        let m = manager_from(entries, 17);
        let snap = m.snapshot();
        let mut flipped = snap.clone();
        let i = pos.index(flipped.len());
        flipped[i] ^= 1 << bit;
        prop_assert!(ProducerStateManager::from_snapshot(&flipped).is_err());
        let n = cut.index(snap.len());
        prop_assert!(ProducerStateManager::from_snapshot(&snap[..n]).is_err());
    }
}

fn commit_marker() -> EndTxnMarker {
    EndTxnMarker {
        control: ControlType::Commit,
        coordinator_epoch: 3,
    }
}

#[allow(dead_code)]
fn abort_marker() -> EndTxnMarker {
    EndTxnMarker {
        control: ControlType::Abort,
        coordinator_epoch: 3,
    }
}

#[test]
fn coordinator_batches_are_fenced_by_epoch_only() {
    let mut m = ProducerStateManager::new();
    // Unknown producer: accepted.
    assert_eq!(m.check_coordinator_batch(pid(7), ep(0)), Ok(()));
    m.record(&header(7, 3, 0, 2, 0), 1, None);
    // Same or newer epoch: accepted whatever the sequence (coordinator batches carry none).
    assert_eq!(m.check_coordinator_batch(pid(7), ep(3)), Ok(()));
    assert_eq!(m.check_coordinator_batch(pid(7), ep(4)), Ok(()));
    // An older epoch is a zombie.
    assert_eq!(
        m.check_coordinator_batch(pid(7), ep(2))
            .map_err(|e| e.error_code()),
        Err(ErrorCode::InvalidProducerEpoch)
    );
}

/// A marker's epoch against the partition's: transaction.version 2 markers
/// must be strictly newer (the coordinator bumped the epoch), except a
/// repeat of the last one while no transaction is open; classic markers
/// must not be older. (A late commit marker of one transaction arriving
/// while the next, at the bumped epoch, is open would commit the next one's
/// data under the previous outcome: the simulation's seed 10268.)
#[test]
fn a_transaction_version_2_marker_must_be_newer_than_the_data() {
    let e = |v: i16| Some(ProducerEpoch::new(v));
    // (marker epoch, current, transaction open, version, accepted)
    let table = [
        (e(4), None, false, 2, true),
        (e(4), e(3), true, 2, true),
        (e(4), e(3), false, 2, true),
        (e(3), e(3), true, 2, false),
        (e(3), e(3), false, 2, true),
        (e(2), e(3), false, 2, false),
        (None, e(3), false, 2, false),
        (e(3), e(3), true, 0, true),
        (e(3), e(3), true, 1, true),
        (e(2), e(3), true, 1, false),
        (e(4), e(3), true, 1, true),
    ];
    for (marker, current, open, version, accepted) in table {
        let r = strand_txn::check_marker_epoch(marker, current, open, version);
        assert_eq!(
            r.is_ok(),
            accepted,
            "marker {marker:?}, current {current:?}, open {open}, version {version}: {r:?}"
        );
        if let Err(e) = r {
            assert_eq!(e.error_code(), ErrorCode::InvalidProducerEpoch);
        }
    }
}
