use proptest::prelude::*;
use strand_protocol::ErrorCode;
use strand_replication::*;
use strand_types::{BrokerEpoch, BrokerId, LeaderEpoch, Offset};

fn o(v: i64) -> Offset {
    Offset::new(v)
}

fn e(v: i32) -> LeaderEpoch {
    LeaderEpoch::new(v)
}

fn b(v: i32) -> BrokerId {
    BrokerId::new(v)
}

fn ids(v: &[i32]) -> Vec<BrokerId> {
    v.iter().copied().map(b).collect()
}

/// Follower LEOs as the HW rule takes them: -1 is unknown.
fn leos(v: &[i64]) -> Vec<Option<Offset>> {
    v.iter().copied().map(Offset::from_wire).collect()
}

/// A leader's answer that the logs diverge, from the wire's (epoch, end offset).
fn d(epoch: i32, end_offset: i64) -> DivergingEpoch {
    DivergingEpoch::from_wire(epoch, end_offset).expect("a divergence")
}

#[test]
fn acks_from_i16() {
    assert_eq!(Acks::from_i16(0), Ok(Acks::None));
    assert_eq!(Acks::from_i16(1), Ok(Acks::Leader));
    assert_eq!(Acks::from_i16(-1), Ok(Acks::All));
    for bad in [2, -2, 3, i16::MAX, i16::MIN] {
        let err = Acks::from_i16(bad).unwrap_err();
        assert_eq!(err, InvalidRequiredAcks(bad));
        assert_eq!(err.error_code().code(), 21);
    }
    for a in [Acks::None, Acks::Leader, Acks::All] {
        assert_eq!(Acks::from_i16(a.as_i16()), Ok(a));
    }
}

#[test]
fn effective_min_isr_table() {
    // (min.insync.replicas, replicas, effective)
    for (cfg, replicas, want) in [
        (1, 1, 1),
        (2, 1, 1),
        (2, 3, 2),
        (3, 3, 3),
        (5, 3, 3),
        (1, 3, 1),
    ] {
        assert_eq!(
            effective_min_isr(cfg, replicas),
            want,
            "cfg={cfg} replicas={replicas}"
        );
    }
}

#[test]
fn min_isr_before_append_table() {
    let cases = [
        (Acks::All, 1, 2, Err(ErrorCode::NotEnoughReplicas)),
        (Acks::All, 2, 2, Ok(())),
        (Acks::All, 3, 2, Ok(())),
        (Acks::Leader, 1, 2, Ok(())),
        (Acks::None, 1, 2, Ok(())),
        (Acks::All, 1, 1, Ok(())),
    ];
    for (acks, isr, min, want) in cases {
        assert_eq!(
            check_min_isr_before_append(acks, isr, min),
            want,
            "{acks:?} isr={isr} min={min}"
        );
    }
    assert_eq!(ErrorCode::NotEnoughReplicas.code(), 19);
}

#[test]
fn produce_partition_state_table() {
    use PartitionAckState::*;
    let cases = [
        // (hw, required, maximal isr, min isr, want)
        (103, 105, 3, 2, Pending),
        // Under min ISR the HW is frozen: answered at once, not left to time out.
        (
            104,
            105,
            1,
            2,
            Done(Some(ErrorCode::NotEnoughReplicasAfterAppend)),
        ),
        (105, 105, 3, 2, Done(None)),
        (110, 105, 2, 2, Done(None)),
        (
            105,
            105,
            1,
            2,
            Done(Some(ErrorCode::NotEnoughReplicasAfterAppend)),
        ),
        (105, 105, 1, 1, Done(None)),
    ];
    for (hw, req, isr, min, want) in cases {
        assert_eq!(
            produce_partition_state(o(hw), o(req), isr, min),
            want,
            "hw={hw} req={req} isr={isr} min={min}"
        );
    }
    assert_eq!(ErrorCode::NotEnoughReplicasAfterAppend.code(), 20);
}

#[test]
fn advance_high_watermark_table() {
    let cases: [(i64, i64, &[i64], usize, i64); 9] = [
        // (current hw, leader leo, follower leos (-1: unknown), min isr, new hw)
        (103, 105, &[103, 103], 2, 103),
        (103, 105, &[105, 104], 2, 104),
        (103, 105, &[105, 105], 2, 105),
        (105, 110, &[], 2, 105),    // ISR shrunk below min ISR: frozen
        (105, 110, &[], 1, 110),    // single member ISR allowed
        (105, 110, &[100], 2, 105), // never backwards
        (0, 0, &[], 1, 0),
        (103, 105, &[105, -1], 2, 103), // an unknown LEO holds the HW
        (103, 105, &[-1], 1, 103),
    ];
    for (hw, leo, followers, min, want) in cases {
        assert_eq!(
            advance_high_watermark(o(hw), o(leo), &leos(followers), min),
            o(want),
            "hw={hw} leo={leo} f={followers:?} min={min}"
        );
    }
}

/// Seed 004 vectors.
#[test]
fn seed_004_vectors() {
    let min_isr = effective_min_isr(2, 3);
    // LEO [105,103,103], ISR [0,1,2], HW 103, required 105 -> wait, HW stays 103.
    let hw = advance_high_watermark(o(103), o(105), &leos(&[103, 103]), min_isr);
    assert_eq!(hw, o(103));
    assert_eq!(
        produce_partition_state(hw, o(105), 3, min_isr),
        PartitionAckState::Pending
    );
    let mut obs = AckObservation {
        authority_epoch: e(4),
        current_leader_epoch: e(4),
        is_leader: true,
        local_leo: o(105),
        hw,
        required_offset: o(105),
        isr_len: 3,
        effective_min_isr: min_isr,
    };
    assert_eq!(ack_decision(&obs), AckDecision::Wait);
    // LEO [105,105,105] -> HW 105, acknowledge.
    let hw = advance_high_watermark(hw, o(105), &leos(&[105, 105]), min_isr);
    assert_eq!(hw, o(105));
    assert_eq!(
        produce_partition_state(hw, o(105), 3, min_isr),
        PartitionAckState::Done(None)
    );
    obs.hw = hw;
    assert_eq!(
        ack_decision(&obs),
        AckDecision::Ack {
            hw: o(105),
            error: None
        }
    );
    // ISR shrinks to [0] with min ISR 2: another pending request (required 105)
    // completes with NOT_ENOUGH_REPLICAS_AFTER_APPEND; HW stays 105 even as the leader appends.
    let hw = advance_high_watermark(hw, o(108), &[], min_isr);
    assert_eq!(hw, o(105));
    assert_eq!(
        produce_partition_state(hw, o(105), 1, min_isr),
        PartitionAckState::Done(Some(ErrorCode::NotEnoughReplicasAfterAppend))
    );
    let shrunk = AckObservation {
        isr_len: 1,
        local_leo: o(108),
        ..obs
    };
    assert_eq!(
        ack_decision(&shrunk),
        AckDecision::Ack {
            hw: o(105),
            error: Some(ErrorCode::NotEnoughReplicasAfterAppend)
        }
    );
    // A request needing 108 cannot be reached while the HW is frozen: it is
    // answered NOT_ENOUGH_REPLICAS_AFTER_APPEND at once, and new acks=all
    // appends are refused.
    assert_eq!(
        ack_decision(&AckObservation {
            required_offset: o(108),
            ..shrunk
        }),
        AckDecision::Ack {
            hw: o(105),
            error: Some(ErrorCode::NotEnoughReplicasAfterAppend)
        }
    );
    assert_eq!(
        check_min_isr_before_append(Acks::All, 1, min_isr),
        Err(ErrorCode::NotEnoughReplicas)
    );
}

#[test]
fn single_node_hw_follows_leo() {
    let min_isr = effective_min_isr(2, 1);
    assert_eq!(min_isr, 1);
    let mut hw = Offset::ZERO;
    let mut leo = Offset::ZERO;
    for n in [1, 5, 3, 10] {
        assert_eq!(check_min_isr_before_append(Acks::All, 1, min_isr), Ok(()));
        leo = leo.plus(n);
        hw = advance_high_watermark(hw, leo, &[], min_isr);
        assert_eq!(hw, leo);
        assert_eq!(
            produce_partition_state(hw, leo, 1, min_isr),
            PartitionAckState::Done(None)
        );
    }
}

#[test]
fn ack_decision_table() {
    let base = AckObservation {
        authority_epoch: e(3),
        current_leader_epoch: e(3),
        is_leader: true,
        local_leo: o(50),
        hw: o(50),
        required_offset: o(50),
        isr_len: 2,
        effective_min_isr: 2,
    };
    let cases = [
        (
            "acked",
            base,
            AckDecision::Ack {
                hw: o(50),
                error: None,
            },
        ),
        (
            "not leader",
            AckObservation {
                is_leader: false,
                ..base
            },
            AckDecision::Reject(ErrorCode::NotLeaderOrFollower),
        ),
        (
            "stale authority",
            AckObservation {
                current_leader_epoch: e(4),
                ..base
            },
            AckDecision::Reject(ErrorCode::NotLeaderOrFollower),
        ),
        (
            "epoch from the future",
            AckObservation {
                current_leader_epoch: e(2),
                ..base
            },
            AckDecision::Reject(ErrorCode::NotLeaderOrFollower),
        ),
        (
            "stale authority beats progress",
            AckObservation {
                current_leader_epoch: e(4),
                hw: o(10),
                ..base
            },
            AckDecision::Reject(ErrorCode::NotLeaderOrFollower),
        ),
        (
            "hw short",
            AckObservation { hw: o(49), ..base },
            AckDecision::Wait,
        ),
        (
            "local log short",
            AckObservation {
                local_leo: o(49),
                hw: o(49),
                ..base
            },
            AckDecision::Wait,
        ),
        (
            "isr below min",
            AckObservation { isr_len: 1, ..base },
            AckDecision::Ack {
                hw: o(50),
                error: Some(ErrorCode::NotEnoughReplicasAfterAppend),
            },
        ),
        (
            "hw beyond",
            AckObservation {
                hw: o(60),
                local_leo: o(70),
                ..base
            },
            AckDecision::Ack {
                hw: o(60),
                error: None,
            },
        ),
    ];
    for (name, obs, want) in cases {
        assert_eq!(ack_decision(&obs), want, "{name}");
    }
}

#[test]
fn isr_shrink_and_expand() {
    let f = |id, caught_up, leo| FollowerState {
        replica_id: b(id),
        last_caught_up_time_ms: caught_up,
        log_end_offset: Some(o(leo)),
    };
    let followers = [
        f(1, 1_000, 100),
        f(2, 40_000, 90),
        f(3, 1_000, 90),
        f(4, 10_000, 90),
    ];
    // lag max 30s, now 40s: 1 is at the leader's LEO, 2 caught up recently, 4 exactly at the limit.
    assert_eq!(
        out_of_sync_replicas(40_000, 30_000, &followers, o(100)),
        ids(&[3])
    );
    assert_eq!(
        out_of_sync_replicas(40_001, 30_000, &followers, o(100)),
        ids(&[3, 4])
    );

    assert!(can_rejoin_isr(o(100), o(100), Some(o(80))));
    assert!(can_rejoin_isr(o(105), o(100), Some(o(80))));
    assert!(!can_rejoin_isr(o(99), o(100), Some(o(80))), "below HW");
    assert!(
        !can_rejoin_isr(o(100), o(100), Some(o(101))),
        "not yet in the leader's epoch"
    );
    assert!(!can_rejoin_isr(o(100), o(100), None));
}

#[test]
fn fetch_completion_and_request_epochs() {
    assert!(fetch_can_complete(0, 0));
    assert!(!fetch_can_complete(0, 1));
    assert!(fetch_can_complete(1024, 1024));
    assert!(!fetch_can_complete(1023, 1024));

    assert_eq!(check_request_leader_epoch(None, e(5)), Ok(()));
    assert_eq!(check_request_leader_epoch(Some(e(5)), e(5)), Ok(()));
    assert_eq!(
        check_request_leader_epoch(Some(e(4)), e(5)),
        Err(ErrorCode::FencedLeaderEpoch)
    );
    assert_eq!(
        check_request_leader_epoch(Some(e(6)), e(5)),
        Err(ErrorCode::UnknownLeaderEpoch)
    );
}

/// A fetch is answered only within the term it was accepted in: a table
/// of (epoch led at in the snapshot, the request's current epoch).
#[test]
fn a_fetch_is_answered_only_in_its_leader_term() {
    let table = [
        (None, None, Err(ErrorCode::NotLeaderOrFollower)),
        (None, Some(e(4)), Err(ErrorCode::NotLeaderOrFollower)),
        (Some(e(4)), None, Ok(())),
        (Some(e(4)), Some(e(4)), Ok(())),
        // Seed 212 of the chaos run: parked at epoch 4, the leader is
        // leader again at epoch 6 when new data arrives.
        (Some(e(6)), Some(e(4)), Err(ErrorCode::FencedLeaderEpoch)),
        (Some(e(4)), Some(e(6)), Err(ErrorCode::UnknownLeaderEpoch)),
    ];
    for (leading, request, expected) in table {
        assert_eq!(
            check_fetch_term(leading, request),
            expected,
            "leading {leading:?}, request {request:?}"
        );
    }
}

/// KIP-392: a consumer's v11+ fetch may be answered by a follower, which
/// checks the request's epoch against the leader epoch it knows; a
/// follower's fetch, and a consumer's older one, only by the leader.
#[test]
fn consumers_read_from_followers_from_fetch_v11() {
    assert!(fetch_reads_any_replica(11, false));
    assert!(fetch_reads_any_replica(17, false));
    assert!(!fetch_reads_any_replica(10, false));
    assert!(!fetch_reads_any_replica(17, true));
    // (leading, the epoch the replica knows, request's epoch)
    let table = [
        (None, e(4), None, Ok(())),
        (None, e(4), Some(e(4)), Ok(())),
        (None, e(5), Some(e(4)), Err(ErrorCode::FencedLeaderEpoch)),
        (None, e(4), Some(e(5)), Err(ErrorCode::UnknownLeaderEpoch)),
        // A leader answers as check_fetch_term does, whatever it knows.
        (
            Some(e(6)),
            e(6),
            Some(e(4)),
            Err(ErrorCode::FencedLeaderEpoch),
        ),
        (Some(e(4)), e(4), Some(e(4)), Ok(())),
    ];
    for (leading, known, request, expected) in table {
        assert_eq!(
            check_replica_fetch_term(leading, known, request),
            expected,
            "leading {leading:?}, known {known:?}, request {request:?}"
        );
    }
}

#[derive(Debug, Clone)]
enum Step {
    /// Leader appends n records.
    Append(i64),
    /// Follower i fetches up to some fraction of the leader's LEO.
    Fetch(usize, u8),
    /// Follower i drops out of the ISR.
    Shrink(usize),
    /// Follower i asks to rejoin.
    Expand(usize),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1i64..20).prop_map(Step::Append),
        (0usize..4, any::<u8>()).prop_map(|(i, f)| Step::Fetch(i, f)),
        (0usize..4).prop_map(Step::Shrink),
        (0usize..4).prop_map(Step::Expand),
    ]
}

proptest! {
    /// A leader with four followers under random appends, fetches and ISR
    /// changes (expansion gated by can_rejoin_isr): HW never decreases,
    /// HW <= min LEO of the ISR, HW <= leader LEO.
    #[test]
    fn hw_invariants(steps in prop::collection::vec(step(), 1..200), min_cfg in 1i32..5) {
        let min_isr = effective_min_isr(min_cfg, 5);
        let mut leader_leo = Offset::ZERO;
        let mut leos = [Offset::ZERO; 4];
        let mut in_isr = [true; 4];
        let mut hw = Offset::ZERO;
        for s in steps {
            match s {
                Step::Append(n) => leader_leo = leader_leo.plus(n),
                Step::Fetch(i, f) => {
                    // Fetch offsets only move forward, up to the leader's LEO.
                    let target = leos[i].plus(leader_leo.since(leos[i]) * f as i64 / 255);
                    leos[i] = target.max(leos[i]);
                }
                Step::Shrink(i) => in_isr[i] = false,
                Step::Expand(i) => {
                    if !in_isr[i] && can_rejoin_isr(leos[i], hw, Some(Offset::ZERO)) {
                        in_isr[i] = true;
                    }
                }
            }
            let followers: Vec<Offset> = (0..4).filter(|&i| in_isr[i]).map(|i| leos[i]).collect();
            let known: Vec<Option<Offset>> = followers.iter().copied().map(Some).collect();
            let new_hw = advance_high_watermark(hw, leader_leo, &known, min_isr);
            prop_assert!(new_hw >= hw, "HW went back: {} -> {}", hw, new_hw);
            prop_assert!(new_hw <= leader_leo);
            let min_isr_leo = followers.iter().copied().fold(leader_leo, Offset::min);
            prop_assert!(new_hw <= min_isr_leo, "HW {} above ISR min LEO {}", new_hw, min_isr_leo);
            if followers.len() + 1 < min_isr {
                prop_assert_eq!(new_hw, hw);
            } else {
                prop_assert_eq!(new_hw, hw.max(min_isr_leo));
            }
            hw = new_hw;
        }
    }

    /// The ack decision agrees with produce_partition_state when authority holds,
    /// and never acknowledges without authority or below the required offset.
    #[test]
    fn ack_decision_consistent(
        auth in 0i32..4, cur in 0i32..4, is_leader in any::<bool>(),
        hw in 0i64..100, extra in 0i64..10, req in 0i64..110,
        isr_len in 1usize..4, min_isr in 1usize..4,
    ) {
        let (hw, req) = (o(hw), o(req));
        let obs = AckObservation {
            authority_epoch: e(auth), current_leader_epoch: e(cur), is_leader,
            local_leo: hw.plus(extra), hw, required_offset: req, isr_len, effective_min_isr: min_isr,
        };
        let d = ack_decision(&obs);
        if !is_leader || auth != cur {
            prop_assert_eq!(d, AckDecision::Reject(ErrorCode::NotLeaderOrFollower));
        } else {
            match (d, produce_partition_state(hw, req, isr_len, min_isr)) {
                (AckDecision::Wait, PartitionAckState::Pending) => {}
                // Not in the local log yet: nothing to decide.
                (AckDecision::Wait, _) if hw.plus(extra) < req => {}
                (AckDecision::Ack { hw: h, error }, PartitionAckState::Done(e)) => {
                    prop_assert_eq!(h, hw);
                    // Success only once the HW covers the request.
                    prop_assert!(h >= req || error.is_some());
                    prop_assert_eq!(error, e);
                }
                other => prop_assert!(false, "mismatch {:?}", other),
            }
        }
    }
}

#[test]
fn follower_truncation_offset_table() {
    use strand_replication::rules::follower_truncation_offset as f;
    // (leader epoch, leader end (-1: unknown), local (epoch, end), follower HW, LEO, want)
    let cases = [
        (-1, 7, None, 2, 10, 7),        // leader does not know the epoch
        (-1, 12, None, 2, 10, 10),      // never past our LEO
        (3, 7, None, 2, 10, 7),         // we have no epoch <= 3
        (3, 7, Some((3, 9)), 2, 10, 7), // same epoch: the smaller end
        (3, 9, Some((3, 6)), 2, 10, 6),
        (5, 9, Some((3, 6)), 2, 10, 6), // only an older epoch: its end
        (5, 9, Some((3, 12)), 2, 10, 10),
        (3, -1, Some((3, 9)), 4, 10, 4), // leader end unknown: our HW
        (3, -1, None, 4, 10, 4),
        (3, -1, Some((3, 9)), 12, 10, 10), // ... never past our LEO
    ];
    for (epoch, end, local, hw, leo, want) in cases {
        let local = local.map(|(epoch, end)| (e(epoch), o(end)));
        assert_eq!(
            f(d(epoch, end), local, o(hw), o(leo)),
            o(want),
            "{epoch} {end} {local:?} {hw} {leo}"
        );
    }
}

#[test]
fn diverging_epoch_wire_form() {
    // (-1, -1) is the wire's "no divergence".
    assert_eq!(DivergingEpoch::from_wire(-1, -1), None);
    assert_eq!(DivergingEpoch::to_wire(None), (-1, -1));
    // (wire epoch, wire end offset) -> (epoch, end offset)
    let cases = [
        (3, 35, Some(3), Some(35)),
        (-1, 35, None, Some(35)),
        (3, -1, Some(3), None),
        (0, 0, Some(0), Some(0)),
    ];
    for (epoch, end, want_epoch, want_end) in cases {
        let want = DivergingEpoch {
            epoch: want_epoch.map(e),
            end_offset: want_end.map(o),
        };
        assert_eq!(
            DivergingEpoch::from_wire(epoch, end),
            Some(want),
            "{epoch} {end}"
        );
        assert_eq!(DivergingEpoch::to_wire(Some(want)), (epoch, end));
    }
}

#[test]
fn fetch_origin_table() {
    use strand_replication::rules::{fetch_origin, FetchOrigin::*};
    // (version, replica id, replica epoch, registered epoch) -> origin;
    // the request's -1 is None.
    let cases = [
        (12, 2, -1, Some(7), Ok(Consumer)), // old versions carry no epoch: a consumer
        (14, 2, 7, Some(7), Ok(Consumer)),
        (15, -1, -1, None, Ok(Consumer)),
        (15, 2, 7, Some(7), Ok(Follower(b(2)))),
        (16, 2, 7, Some(7), Ok(Follower(b(2)))),
        (15, 2, 6, Some(7), Err(ErrorCode::StaleBrokerEpoch)), // stale (or guessed) epoch
        (15, 2, 8, Some(7), Err(ErrorCode::StaleBrokerEpoch)),
        (15, 2, -1, None, Err(ErrorCode::StaleBrokerEpoch)), // no bypass
        (15, 2, -1, Some(7), Err(ErrorCode::StaleBrokerEpoch)), // no epoch claimed
        (15, 9, 7, None, Err(ErrorCode::StaleBrokerEpoch)),  // not registered
    ];
    for (version, id, epoch, registered, expected) in cases {
        assert_eq!(
            fetch_origin(
                version,
                BrokerId::from_wire(id),
                BrokerEpoch::from_wire(epoch),
                registered.map(BrokerEpoch::new)
            ),
            expected,
            "v{version} id {id} epoch {epoch} registered {registered:?}"
        );
    }
}

#[test]
fn follower_fetch_action_table() {
    use strand_replication::rules::{
        follower_fetch_action, FetchedPartition, FollowerFetchAction::*,
    };
    let ok = FetchedPartition {
        error: None,
        diverging_epoch: None,
        high_watermark: Some(o(50)),
        log_start_offset: Some(o(10)),
    };
    let oor = FetchedPartition {
        error: Some(ErrorCode::OffsetOutOfRange),
        ..ok
    };
    let cases = [
        // (fetch offset, answer, action)
        (40, ok, Append),
        (
            40,
            FetchedPartition {
                diverging_epoch: Some(d(3, 35)),
                ..ok
            },
            TruncateToDivergence(DivergingEpoch {
                epoch: Some(e(3)),
                end_offset: Some(o(35)),
            }),
        ),
        // An unknown epoch with an end offset still truncates there.
        (
            40,
            FetchedPartition {
                diverging_epoch: Some(d(-1, 35)),
                ..ok
            },
            TruncateToDivergence(DivergingEpoch {
                epoch: None,
                end_offset: Some(o(35)),
            }),
        ),
        // Behind the leader's log start: start over there.
        (5, oor, RestartAt(o(10))),
        // Ahead of the leader's log: back to its HW.
        (60, oor, TruncateTo(o(50))),
        (
            60,
            FetchedPartition {
                high_watermark: None,
                ..oor
            },
            Retry,
        ),
        (
            40,
            FetchedPartition {
                error: Some(ErrorCode::NotLeaderOrFollower),
                diverging_epoch: Some(d(3, 35)),
                ..ok
            },
            Retry,
        ),
    ];
    for (offset, fetched, want) in cases {
        assert_eq!(
            follower_fetch_action(o(offset), &fetched),
            want,
            "{offset} {fetched:?}"
        );
    }
}
