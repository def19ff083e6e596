//! The last stable offset: the pure rule (table and properties) and the
//! manager's bookkeeping of open and completed-but-unreplicated transactions.

use proptest::prelude::*;
use strand_protocol::batch::{BatchHeader, ControlType, EndTxnMarker};
use strand_txn::*;
use strand_types::{Offset, ProducerEpoch, ProducerId};

fn pid(p: i64) -> ProducerId {
    ProducerId::new(p)
}

fn off(o: i64) -> Offset {
    Offset::new(o)
}

fn header(pid: i64, seq: i32, count: i32, base_offset: i64, transactional: bool) -> BatchHeader {
    BatchHeader {
        base_offset,
        batch_length: 100,
        partition_leader_epoch: 0,
        magic: 2,
        crc: 0,
        attributes: if transactional { 0x10 } else { 0 },
        last_offset_delta: count - 1,
        base_timestamp: 1_000,
        max_timestamp: 1_000,
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: seq,
        records_count: count,
    }
}

fn marker(pid: i64, offset: i64) -> BatchHeader {
    BatchHeader {
        attributes: 0x30,
        ..header(pid, -1, 1, offset, true)
    }
}

fn done(id: i64, first: i64, last: i64) -> CompletedTxn {
    CompletedTxn {
        producer_id: pid(id),
        first_offset: off(first),
        last_offset: off(last),
        is_aborted: false,
    }
}

/// (hw, open first offsets, completed, expected LSO, why)
type LsoCase<'a> = (i64, &'a [i64], &'a [CompletedTxn], i64, &'a str);

#[test]
fn last_stable_offset_table() {
    let cases: &[LsoCase] = &[
        (110, &[], &[], 110, "nothing open: LSO = HW"),
        (110, &[104], &[], 104, "seed 004: open from 104"),
        (110, &[120], &[], 110, "open above the HW: HW bounds"),
        (110, &[104, 100], &[], 100, "the earliest open transaction"),
        (
            110,
            &[],
            &[done(1, 104, 110)],
            104,
            "marker at the HW: not replicated yet",
        ),
        (
            111,
            &[],
            &[done(1, 104, 110)],
            111,
            "marker below the HW: stable",
        ),
        (
            111,
            &[108],
            &[done(1, 104, 110)],
            108,
            "the completed one is replicated, another is open",
        ),
        (
            105,
            &[108],
            &[done(1, 104, 110)],
            104,
            "unreplicated completed before an open one",
        ),
        (0, &[], &[], 0, "empty log"),
    ];
    for (hw, open, completed, want, why) in cases {
        assert_eq!(
            last_stable_offset(
                off(*hw),
                open.iter().copied().map(off),
                completed.iter().copied()
            ),
            off(*want),
            "{why}"
        );
    }
}

/// Seed 004: HW 110, a transaction open from 104, a plain record at 107: the
/// LSO is 104 (107 invisible to read_committed). The commit marker lands at
/// 110; only when the HW passes it (111) is the LSO the HW again.
#[test]
fn seed_004_example_through_the_manager() {
    let mut m = ProducerStateManager::new();
    m.record(&header(1, 0, 3, 104, true), 1, None);
    m.record(&header(2, 0, 1, 107, false), 1, None);
    m.record(&header(1, 3, 2, 108, true), 1, None);
    m.on_high_watermark(off(110));
    assert_eq!(m.last_stable_offset(off(110)), off(104));
    let completed = m.record(&marker(1, 110), 2, Some(commit_marker()));
    assert_eq!(
        completed,
        Some(CompletedTxn {
            producer_id: pid(1),
            first_offset: off(104),
            last_offset: off(110),
            is_aborted: false
        })
    );
    // The marker is appended but the HW has not passed it.
    assert_eq!(m.last_stable_offset(off(110)), off(104));
    m.on_high_watermark(off(111));
    assert_eq!(m.last_stable_offset(off(111)), off(111));
    assert_eq!(m.unreplicated_txns().count(), 0);
}

#[test]
fn abort_markers_are_reported_and_index_lso_ignores_the_hw() {
    let mut m = ProducerStateManager::new();
    m.record(&header(1, 0, 2, 10, true), 1, None);
    m.record(&header(2, 0, 2, 12, true), 1, None);
    let t = m.record(&marker(1, 14), 2, Some(abort_marker())).unwrap();
    assert!(t.is_aborted);
    // Producer 2's transaction is still open from 12.
    assert_eq!(m.stable_offset_after(&t), off(12));
    let epoch = Some(ProducerEpoch::ZERO);
    let t2 = m
        .record_end_txn_marker(pid(2), epoch, 0, off(15), 3, ControlType::Abort)
        .unwrap();
    assert_eq!(m.stable_offset_after(&t2), off(16));
    // A marker for a producer without an open transaction closes nothing.
    assert_eq!(
        m.record_end_txn_marker(pid(3), epoch, 0, off(16), 3, ControlType::Abort),
        None
    );
    assert_eq!(m.map_end_offset(), off(17));
}

#[test]
fn snapshot_keeps_unreplicated_and_loads_version_1() {
    let mut m = ProducerStateManager::new();
    m.record(&header(1, 0, 2, 0, true), 1, None);
    m.record(&marker(1, 2), 2, Some(abort_marker()));
    m.record(&header(2, 0, 1, 3, true), 1, None);
    let back = ProducerStateManager::from_snapshot(&m.snapshot()).unwrap();
    assert_eq!(back, m);
    // The abort marker at 2 is not below HW 2 yet; at HW 3 the open one bounds.
    assert_eq!(back.last_stable_offset(off(2)), off(0));
    assert_eq!(back.last_stable_offset(off(3)), off(3));

    // A version-1 snapshot (no unreplicated section) of the same entries.
    let v2 = m.snapshot();
    let mut m1 = m.clone();
    m1.on_high_watermark(off(i64::MAX));
    let mut body = m1.snapshot()[6..].to_vec();
    // Drop the (empty) unreplicated count that version 2 appends.
    body.truncate(body.len() - 4);
    let mut v1 = Vec::new();
    v1.extend_from_slice(&1i16.to_be_bytes());
    v1.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
    v1.extend_from_slice(&body);
    let loaded = ProducerStateManager::from_snapshot(&v1).unwrap();
    assert_eq!(loaded, m1);
    assert_ne!(v1, v2);
    assert_eq!(SNAPSHOT_VERSION, 2);
}

fn arb_step() -> impl Strategy<Value = (u8, i64, u8)> {
    // (kind: 0 data, 1 txn data, 2 commit, 3 abort, 4 HW moves), producer, count
    (0u8..5, 0i64..4, 1u8..4)
}

proptest! {
    /// Whatever happens, LSO <= HW; with nothing open and every marker
    /// replicated, LSO == HW.
    #[test]
    fn lso_never_passes_the_hw(steps in prop::collection::vec(arb_step(), 0..40), hw_frac in 0u8..=100) {
        let mut m = ProducerStateManager::new();
        let mut leo = 0i64;
        let mut hw = 0i64;
        let mut seqs = [0i32; 4];
        for (kind, pid, count) in steps {
            match kind {
                0 | 1 => {
                    let open = m.entry(ProducerId::new(pid)).is_some_and(|e| e.current_txn_first_offset.is_some());
                    if kind == 0 && open { continue; }
                    m.record(&header(pid, seqs[pid as usize], count as i32, leo, kind == 1), 1, None);
                    seqs[pid as usize] += count as i32;
                    leo += count as i64;
                }
                2 | 3 => {
                    let control = if kind == 2 { ControlType::Commit } else { ControlType::Abort };
                    m.record(&marker(pid, leo), 1, Some(EndTxnMarker { control, coordinator_epoch: 0 }));
                    leo += 1;
                }
                _ => {
                    hw = hw.max(leo * hw_frac as i64 / 100);
                    m.on_high_watermark(off(hw));
                }
            }
            let lso = m.last_stable_offset(off(hw));
            prop_assert!(lso <= off(hw), "LSO {} > HW {}", lso, hw);
            if let Some(first) = m.first_unstable_offset() {
                prop_assert_eq!(lso, first.min(off(hw)));
            }
        }
        // Close every transaction and replicate everything.
        for pid in 0..4 {
            m.record(&marker(pid, leo), 1, Some(commit_marker()));
            leo += 1;
        }
        m.on_high_watermark(off(leo));
        prop_assert_eq!(m.first_unstable_offset(), None);
        prop_assert_eq!(m.last_stable_offset(off(leo)), off(leo));
    }

    /// The pure rule: LSO <= HW, and LSO == HW with nothing open or unreplicated.
    #[test]
    fn pure_rule_bounds(hw in 0i64..1000, open in prop::collection::vec(0i64..1000, 0..5),
                        completed in prop::collection::vec((0i64..1000, 0i64..50), 0..5)) {
        let completed: Vec<CompletedTxn> = completed.iter().enumerate()
            .map(|(i, (f, len))| done(i as i64, *f, f + len)).collect();
        let (hw, open) = (off(hw), open.iter().copied().map(off));
        let lso = last_stable_offset(hw, open.clone(), completed.iter().copied());
        prop_assert!(lso <= hw);
        let unstable = open
            .chain(completed.iter().filter(|t| t.last_offset >= hw).map(|t| t.first_offset))
            .min();
        match unstable {
            None => prop_assert_eq!(lso, hw),
            Some(f) => prop_assert_eq!(lso, f.min(hw)),
        }
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
