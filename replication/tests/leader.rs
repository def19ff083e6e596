//! The leader state of one partition (`strand_replication::leader`), driven by
//! explicit observations: table-driven scenarios (seed 004's vectors among
//! them) and a property over random observation sequences.

use std::collections::BTreeMap;

use proptest::prelude::*;
use strand_protocol::ErrorCode;
use strand_replication::*;
use strand_types::{BrokerEpoch, BrokerId, LeaderEpoch, Offset, PartitionEpoch};

const LAG: i64 = 10_000;
const NEAR: PartitionAckState =
    PartitionAckState::Done(Some(ErrorCode::NotEnoughReplicasAfterAppend));
const ACKED: PartitionAckState = PartitionAckState::Done(None);
const WAIT: PartitionAckState = PartitionAckState::Pending;

fn o(v: i64) -> Offset {
    Offset::new(v)
}

fn b(v: i32) -> BrokerId {
    BrokerId::new(v)
}

fn ids(v: &[i32]) -> Vec<BrokerId> {
    v.iter().copied().map(b).collect()
}

fn le(v: i32) -> LeaderEpoch {
    LeaderEpoch::new(v)
}

fn pe(v: i32) -> PartitionEpoch {
    PartitionEpoch::new(v)
}

fn be(v: i64) -> BrokerEpoch {
    BrokerEpoch::new(v)
}

fn registration(replicas: &[i32], isr: &[i32]) -> PartitionRegistration {
    PartitionRegistration {
        leader: b(0),
        leader_epoch: le(5),
        partition_epoch: pe(10),
        replicas: ids(replicas),
        isr: ids(isr),
    }
}

fn config(min_insync_replicas: i32) -> LeaderConfig {
    LeaderConfig {
        min_insync_replicas,
        replica_lag_time_max_ms: LAG,
        acks: Default::default(),
    }
}

/// The broker epoch the followers of these tests fetch at.
const FETCH_EPOCH: BrokerEpoch = BrokerEpoch::new(41);

fn leader(replicas: &[i32], isr: &[i32], min_isr: i32, leo: i64, hw: i64) -> LeaderState {
    LeaderState::new(
        registration(replicas, isr),
        config(min_isr),
        o(leo),
        o(hw),
        0,
    )
}

/// The controller's success answer to `proposal`.
fn accepted(proposal: &IsrProposal) -> AlterPartitionResult {
    AlterPartitionResult::Ok {
        leader_epoch: proposal.leader_epoch,
        partition_epoch: proposal.partition_epoch.next(),
        isr: proposal.new_isr.clone(),
    }
}

/// Same leader and leader epoch, next partition epoch, this ISR.
fn isr_update(state: &LeaderState, isr: &[BrokerId]) -> PartitionRegistration {
    PartitionRegistration {
        leader: state.leader_id(),
        leader_epoch: state.leader_epoch(),
        partition_epoch: state.partition_epoch().next(),
        replicas: state.replicas().to_vec(),
        isr: isr.to_vec(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    Reverted,
    Awaiting,
    Retry,
}

/// One step of a table-driven scenario: an observation or an expectation.
/// Steps without a time happen at the time of the last timed step.
#[derive(Debug, Clone)]
enum Step {
    /// The leader's LEO grows to .0 at time .1.
    Append(i64, i64),
    /// Follower .0 fetches from offset .1 at time .2.
    Fetch(i32, i64, i64),
    /// The periodic ISR shrink check at time .0.
    Shrink(i64),
    /// The controller commits the pending proposal as sent.
    Accept,
    /// The controller answers the pending proposal with an error.
    Reject(ErrorCode, Answer),
    /// Metadata: same leader epoch, next partition epoch, this ISR.
    Isr(&'static [i32]),
    Hw(i64),
    Ack(i64, PartitionAckState),
    Committed(&'static [i32]),
    Maximal(&'static [i32]),
    /// The ISR proposed by the last Fetch or Shrink (None: no proposal).
    Proposed(Option<&'static [i32]>),
}

struct Case {
    name: &'static str,
    replicas: &'static [i32],
    isr: &'static [i32],
    min_isr: i32,
    leo: i64,
    hw: i64,
    steps: Vec<Step>,
}

fn run(case: &Case) {
    use Step::*;
    let mut state = leader(case.replicas, case.isr, case.min_isr, case.leo, case.hw);
    let mut proposed: Option<IsrProposal> = None;
    let mut now = 0;
    for (i, step) in case.steps.iter().enumerate() {
        let at = format!("case '{}', step {i} {step:?}", case.name);
        match step.clone() {
            Append(leo, t) => {
                now = t;
                state.on_leader_append(o(leo), now);
            }
            Fetch(replica, offset, t) => {
                now = t;
                let outcome = state.on_follower_fetch(b(replica), FETCH_EPOCH, o(offset), now);
                proposed = outcome.expect(&at).proposal;
            }
            Shrink(t) => {
                now = t;
                proposed = state.maybe_shrink_isr(now);
            }
            Accept => {
                let sent = state.pending().cloned().expect(&at);
                let outcome = state.on_alter_partition_result(&sent, accepted(&sent), now);
                assert!(
                    matches!(outcome, AlterOutcome::Committed { .. }),
                    "{at}: {outcome:?}"
                );
            }
            Reject(code, answer) => {
                let sent = state.pending().cloned().expect(&at);
                let outcome =
                    state.on_alter_partition_result(&sent, AlterPartitionResult::Err(code), now);
                let got = match outcome {
                    AlterOutcome::Reverted { .. } => Answer::Reverted,
                    AlterOutcome::AwaitingMetadata => Answer::Awaiting,
                    AlterOutcome::Retry(p) if p == sent => Answer::Retry,
                    other => panic!("{at}: {other:?}"),
                };
                assert_eq!(got, answer, "{at}");
            }
            Isr(isr) => {
                let update = isr_update(&state, &ids(isr));
                let outcome = state.on_metadata(&update, now);
                assert!(
                    matches!(outcome, MetadataOutcome::Updated { .. }),
                    "{at}: {outcome:?}"
                );
            }
            Hw(hw) => assert_eq!(state.hw(), o(hw), "{at}"),
            Ack(required, expected) => assert_eq!(state.ack_state(o(required)), expected, "{at}"),
            Committed(isr) => assert_eq!(state.isr(), ids(isr), "{at}"),
            Maximal(isr) => assert_eq!(state.maximal_isr(), ids(isr), "{at}"),
            Proposed(isr) => {
                let got = proposed.as_ref().map(|p| p.new_isr.clone());
                assert_eq!(got, isr.map(ids), "{at}");
            }
        }
    }
}

#[test]
fn scenarios() {
    use Step::*;
    let cases = vec![
        Case {
            // Seed 004's three snapshots: fixed three replicas, min ISR 2,
            // required offset 105, HW 103.
            name: "seed-004: wait, ack, error after append once the ISR is [0]",
            replicas: &[0, 1, 2],
            isr: &[0, 1, 2],
            min_isr: 2,
            leo: 103,
            hw: 103,
            steps: vec![
                Fetch(1, 103, 1),
                Fetch(2, 103, 1),
                Append(105, 2),
                Hw(103),
                Ack(105, WAIT),
                Fetch(1, 105, 3),
                Hw(103),
                Ack(105, WAIT),
                Fetch(2, 105, 3),
                Hw(105),
                Ack(105, ACKED),
                Isr(&[0]),
                Committed(&[0]),
                Ack(105, NEAR),
                Hw(105),
                // Under min ISR the HW stays, even with the leader alone in the
                // ISR, and a request short of its offset is answered at once.
                Append(110, 3 + LAG + 1),
                Hw(105),
                Ack(110, NEAR),
            ],
        },
        Case {
            name: "seed-004 via lag: the shrink counts only once committed",
            replicas: &[0, 1, 2],
            isr: &[0, 1, 2],
            min_isr: 2,
            leo: 105,
            hw: 103,
            steps: vec![
                Fetch(1, 105, 3),
                Fetch(2, 105, 3),
                Hw(105),
                Append(110, 4),
                Shrink(3 + LAG),
                Proposed(None),
                Shrink(3 + LAG + 1),
                Proposed(Some(&[0])),
                Committed(&[0, 1, 2]),
                Maximal(&[0, 1, 2]),
                Ack(105, ACKED),
                Accept,
                Committed(&[0]),
                Ack(105, NEAR),
                Hw(105),
                Ack(110, NEAR),
            ],
        },
        Case {
            name: "expansion: a lagging follower reaches the HW; HW waits on the maximal ISR",
            replicas: &[0, 1, 2],
            isr: &[0, 1],
            min_isr: 1,
            leo: 100,
            hw: 100,
            steps: vec![
                Fetch(1, 100, 1),
                Proposed(None),
                Fetch(2, 50, 1),
                Proposed(None),
                Append(120, 2),
                Fetch(1, 120, 2),
                Hw(120),
                Fetch(2, 110, 3),
                Proposed(None),
                Fetch(2, 120, 4),
                Proposed(Some(&[0, 1, 2])),
                Committed(&[0, 1]),
                Maximal(&[0, 1, 2]),
                // Long after follower 2 was last caught up: only the
                // pending expansion keeps it in the HW computation.
                Append(130, 4 + LAG + 1),
                Fetch(1, 130, 4 + LAG + 1),
                Hw(120),
                Ack(130, WAIT),
                Accept,
                Committed(&[0, 1, 2]),
                Hw(120),
                Fetch(2, 130, 4 + LAG + 2),
                Hw(130),
                Ack(130, ACKED),
            ],
        },
        Case {
            name: "expansion needs the leader epoch's start offset, not just the HW",
            replicas: &[0, 1, 2],
            isr: &[0, 1],
            min_isr: 1,
            leo: 100,
            hw: 40,
            steps: vec![
                Hw(40),
                Fetch(2, 60, 1),
                Proposed(None),
                Fetch(2, 100, 2),
                Proposed(Some(&[0, 1, 2])),
            ],
        },
        Case {
            name: "no second proposal while one is pending",
            replicas: &[0, 1, 2, 3],
            isr: &[0, 1, 2],
            min_isr: 1,
            leo: 100,
            hw: 100,
            steps: vec![
                Fetch(1, 100, 0),
                Fetch(2, 100, 0),
                Fetch(3, 100, 1),
                Proposed(Some(&[0, 1, 2, 3])),
                Append(150, 2),
                Fetch(1, 150, 2),
                Shrink(LAG + 1),
                Proposed(None),
                Fetch(3, 100, LAG + 1),
                Proposed(None),
                Accept,
                Committed(&[0, 1, 2, 3]),
                Shrink(LAG + 1),
                Proposed(Some(&[0, 1, 3])),
                Fetch(3, 150, LAG + 1),
                Proposed(None),
            ],
        },
        Case {
            name: "a pending shrink keeps the larger ISR for the HW",
            replicas: &[0, 1, 2],
            isr: &[0, 1, 2],
            min_isr: 1,
            leo: 100,
            hw: 100,
            steps: vec![
                Fetch(1, 100, 0),
                Fetch(2, 100, 0),
                Append(200, 1),
                Fetch(1, 200, 1),
                Hw(100),
                Shrink(LAG + 1),
                Proposed(Some(&[0, 1])),
                Fetch(1, 200, LAG + 1),
                Hw(100),
                Ack(200, WAIT),
                Accept,
                Hw(200),
                Ack(200, ACKED),
            ],
        },
        Case {
            name: "OPERATION_NOT_ATTEMPTED / INELIGIBLE_REPLICA revert to the committed ISR",
            replicas: &[0, 1, 2],
            isr: &[0, 1],
            min_isr: 1,
            leo: 100,
            hw: 100,
            steps: vec![
                Fetch(2, 100, 1),
                Proposed(Some(&[0, 1, 2])),
                Reject(ErrorCode::IneligibleReplica, Answer::Reverted),
                Committed(&[0, 1]),
                Maximal(&[0, 1]),
                Fetch(2, 100, 2),
                Proposed(Some(&[0, 1, 2])),
                Reject(ErrorCode::OperationNotAttempted, Answer::Reverted),
                Maximal(&[0, 1]),
            ],
        },
        Case {
            name: "FENCED_LEADER_EPOCH / INVALID_UPDATE_VERSION wait for metadata; others retry",
            replicas: &[0, 1, 2],
            isr: &[0, 1],
            min_isr: 1,
            leo: 100,
            hw: 100,
            steps: vec![
                Fetch(2, 100, 1),
                Proposed(Some(&[0, 1, 2])),
                Reject(ErrorCode::FencedLeaderEpoch, Answer::Awaiting),
                Maximal(&[0, 1, 2]),
                Fetch(2, 100, 2),
                Proposed(None),
                Isr(&[0, 1]),
                Maximal(&[0, 1]),
                Fetch(2, 100, 3),
                Proposed(Some(&[0, 1, 2])),
                Reject(ErrorCode::InvalidUpdateVersion, Answer::Awaiting),
                Reject(ErrorCode::NotController, Answer::Retry),
                Reject(ErrorCode::RequestTimedOut, Answer::Retry),
                Maximal(&[0, 1, 2]),
                Accept,
                Committed(&[0, 1, 2]),
            ],
        },
        Case {
            name: "a follower with unknown LEO holds the HW",
            replicas: &[0, 1, 2],
            isr: &[0, 1, 2],
            min_isr: 1,
            leo: 100,
            hw: 90,
            steps: vec![
                Fetch(1, 100, 1),
                Hw(90),
                Ack(100, WAIT),
                Fetch(2, 95, 1),
                Hw(95),
            ],
        },
        Case {
            name: "single replica: HW follows appends, min ISR capped by the replica count",
            replicas: &[0],
            isr: &[0],
            min_isr: 2,
            leo: 0,
            hw: 0,
            steps: vec![
                Append(5, 1),
                Hw(5),
                Ack(5, ACKED),
                Shrink(LAG * 10),
                Proposed(None),
            ],
        },
        Case {
            name: "under min ISR the HW waits for the committed expansion",
            replicas: &[0, 1, 2],
            isr: &[0, 1],
            min_isr: 3,
            leo: 100,
            hw: 50,
            steps: vec![
                Fetch(1, 100, 1),
                Hw(50),
                Fetch(2, 50, 1),
                Proposed(None), // at the HW, short of the epoch start offset
                Fetch(2, 100, 2),
                Proposed(Some(&[0, 1, 2])),
                Maximal(&[0, 1, 2]),
                Hw(50), // the committed ISR is still under min ISR
                Ack(100, WAIT),
                Accept,
                Hw(100),
                Ack(100, ACKED),
            ],
        },
        Case {
            name: "a caught-up, eligible follower outside the ISR holds the HW",
            replicas: &[0, 1, 2],
            isr: &[0, 1],
            min_isr: 1,
            leo: 100,
            hw: 100,
            steps: vec![
                Fetch(1, 100, 0),
                Fetch(2, 100, 0),
                Proposed(Some(&[0, 1, 2])),
                Reject(ErrorCode::OperationNotAttempted, Answer::Reverted),
                Append(200, 1),
                Fetch(1, 200, 1),
                Hw(100),
                Append(201, LAG + 1),
                Fetch(1, 201, LAG + 1),
                Hw(201),
            ],
        },
    ];
    for case in &cases {
        run(case);
    }
}

#[test]
fn becoming_leader() {
    // A single-member ISR advances the HW at once; a checkpoint above the
    // LEO is clamped.
    let state = leader(&[0, 1], &[0], 1, 100, 40);
    assert_eq!(state.hw(), o(100));
    // ... unless it is under min ISR.
    let state = leader(&[0, 1], &[0], 2, 100, 40);
    assert_eq!(state.hw(), o(40));
    let state = leader(&[0, 1], &[0, 1], 1, 100, 140);
    assert_eq!(state.hw(), o(100));
    assert_eq!(state.leader_epoch_start_offset(), o(100));
    let f = *state.follower(b(1)).unwrap();
    assert_eq!(f.leo, None);
    assert_eq!(f.last_caught_up_ms, Some(0));
    let state = leader(&[0, 1, 2], &[0, 1], 1, 100, 40);
    assert_eq!(state.follower(b(2)).unwrap().last_caught_up_ms, None);
    assert_eq!(state.hw(), o(40));
    assert!(state.follower(b(0)).is_none());
}

#[test]
fn fetch_errors_record_nothing() {
    let mut state = leader(&[0, 1, 2], &[0, 1, 2], 1, 100, 90);
    let before = state.clone();
    assert_eq!(
        state.on_follower_fetch(b(7), FETCH_EPOCH, o(100), 1),
        Err(ErrorCode::NotLeaderOrFollower)
    );
    assert_eq!(
        state.on_follower_fetch(b(0), FETCH_EPOCH, o(100), 1),
        Err(ErrorCode::NotLeaderOrFollower)
    );
    assert_eq!(
        state.on_follower_fetch(b(1), FETCH_EPOCH, o(101), 1),
        Err(ErrorCode::OffsetOutOfRange)
    );
    // A negative fetch offset (formerly refused here with OFFSET_OUT_OF_RANGE)
    // is no longer an `Offset`: the wire's -1 reads as none.
    assert_eq!(Offset::from_wire(-1), None);
    assert_eq!(state, before);
}

#[test]
fn caught_up_at_previous_fetch_time() {
    // Kafka's rule: a fetch that reaches the leader LEO seen at the
    // previous fetch proves the follower was caught up at that time.
    let mut state = leader(&[0, 1, 2], &[0, 1, 2], 1, 100, 100);
    assert_eq!(state.follower(b(1)).unwrap().last_caught_up_ms, Some(0));
    // behind; no previous fetch
    state
        .on_follower_fetch(b(1), FETCH_EPOCH, o(80), 5)
        .unwrap();
    assert_eq!(state.follower(b(1)).unwrap().last_caught_up_ms, Some(0));
    state.on_leader_append(o(200), 6);
    // >= 100, the leader LEO at t=5
    state
        .on_follower_fetch(b(1), FETCH_EPOCH, o(150), 10)
        .unwrap();
    assert_eq!(state.follower(b(1)).unwrap().last_caught_up_ms, Some(5));
    // < 200, the leader LEO at t=10
    state
        .on_follower_fetch(b(1), FETCH_EPOCH, o(180), 20)
        .unwrap();
    assert_eq!(state.follower(b(1)).unwrap().last_caught_up_ms, Some(5));
    // at the leader's LEO now
    state
        .on_follower_fetch(b(1), FETCH_EPOCH, o(200), 30)
        .unwrap();
    let f = *state.follower(b(1)).unwrap();
    assert_eq!(
        (f.leo, f.last_caught_up_ms, f.last_fetch_ms),
        (Some(o(200)), Some(30), Some(30))
    );
    assert_eq!(f.last_fetch_leader_leo, Some(o(200)));
}

#[test]
fn ineligible_follower_neither_joins_nor_holds_the_hw() {
    let mut state = leader(&[0, 1, 2], &[0, 1], 1, 100, 100);
    state.set_isr_eligible(b(2), false);
    state
        .on_follower_fetch(b(1), FETCH_EPOCH, o(100), 0)
        .unwrap();
    assert_eq!(
        state
            .on_follower_fetch(b(2), FETCH_EPOCH, o(100), 0)
            .unwrap()
            .proposal,
        None
    );
    state.on_leader_append(o(200), 1);
    let outcome = state
        .on_follower_fetch(b(1), FETCH_EPOCH, o(200), 1)
        .unwrap();
    assert_eq!(outcome.hw_advanced, Some(o(200)));
    state.set_isr_eligible(b(2), true);
    let outcome = state
        .on_follower_fetch(b(2), FETCH_EPOCH, o(200), 2)
        .unwrap();
    assert_eq!(
        outcome.proposal.unwrap().change,
        IsrChange::Expand { replica: b(2) }
    );
}

/// An expansion names the broker epoch of each follower's last fetch (the
/// joining one's latest), so the controller can refuse a member that
/// restarted since (KIP-903).
#[test]
fn expansion_names_the_broker_epochs_fetched_at() {
    let mut state = leader(&[0, 1, 2], &[0, 1], 1, 100, 100);
    state.on_follower_fetch(b(1), be(5), o(100), 0).unwrap();
    assert_eq!(
        state
            .on_follower_fetch(b(2), be(8), o(50), 1)
            .unwrap()
            .proposal,
        None
    );
    let proposal = state
        .on_follower_fetch(b(2), be(9), o(100), 2)
        .unwrap()
        .proposal
        .unwrap();
    assert_eq!(proposal.new_isr, ids(&[0, 1, 2]));
    let named: Vec<(BrokerId, BrokerEpoch)> = proposal.broker_epochs.into_iter().collect();
    assert_eq!(named, vec![(b(1), be(5)), (b(2), be(9))]);
}

#[test]
fn metadata_transitions() {
    let mut state = leader(&[0, 1, 2], &[0, 1, 2], 1, 100, 100);
    let current = registration(&[0, 1, 2], &[0, 1, 2]);

    let older = PartitionRegistration {
        partition_epoch: pe(9),
        ..current.clone()
    };
    assert_eq!(state.on_metadata(&older, 0), MetadataOutcome::Stale);
    let older = PartitionRegistration {
        leader_epoch: le(4),
        partition_epoch: pe(20),
        ..current.clone()
    };
    assert_eq!(state.on_metadata(&older, 0), MetadataOutcome::Stale);

    let mut same = state.clone();
    assert!(matches!(
        same.on_metadata(&current, 0),
        MetadataOutcome::Updated { .. }
    ));

    let newer_epoch = PartitionRegistration {
        leader_epoch: le(6),
        ..current.clone()
    };
    assert_eq!(
        state.clone().on_metadata(&newer_epoch, 0),
        MetadataOutcome::Resign
    );
    let other_leader = PartitionRegistration {
        leader: b(1),
        leader_epoch: le(6),
        partition_epoch: pe(11),
        ..current.clone()
    };
    assert_eq!(
        state.clone().on_metadata(&other_leader, 0),
        MetadataOutcome::Resign
    );

    // Reassignment: 3 added (unknown, outside the ISR), 2 removed.
    state
        .on_follower_fetch(b(1), FETCH_EPOCH, o(100), 1)
        .unwrap();
    let moved = PartitionRegistration {
        partition_epoch: pe(11),
        replicas: ids(&[0, 1, 3]),
        isr: ids(&[0, 1]),
        ..current
    };
    assert!(matches!(
        state.on_metadata(&moved, 2),
        MetadataOutcome::Updated { .. }
    ));
    assert!(state.follower(b(2)).is_none());
    assert_eq!(state.follower(b(1)).unwrap().leo, Some(o(100)));
    let f3 = *state.follower(b(3)).unwrap();
    assert_eq!((f3.leo, f3.last_caught_up_ms), (None, None));
    assert_eq!(
        (state.isr(), state.partition_epoch()),
        (&ids(&[0, 1])[..], pe(11))
    );
    assert_eq!(
        state.on_follower_fetch(b(2), FETCH_EPOCH, o(100), 3),
        Err(ErrorCode::NotLeaderOrFollower)
    );
}

#[test]
fn alter_partition_answers() {
    let mut state = leader(&[0, 1, 2], &[0, 1], 1, 100, 100);
    let sent = state
        .on_follower_fetch(b(2), FETCH_EPOCH, o(100), 1)
        .unwrap()
        .proposal
        .unwrap();
    assert_eq!(
        (sent.leader_id, sent.leader_epoch, sent.partition_epoch),
        (b(0), le(5), pe(10))
    );

    // A success for another leader epoch or an older partition epoch is stale.
    let other_epoch = AlterPartitionResult::Ok {
        leader_epoch: le(6),
        partition_epoch: pe(11),
        isr: ids(&[0, 1, 2]),
    };
    assert_eq!(
        state.on_alter_partition_result(&sent, other_epoch, 1),
        AlterOutcome::AwaitingMetadata
    );
    let older = AlterPartitionResult::Ok {
        leader_epoch: le(5),
        partition_epoch: pe(9),
        isr: ids(&[0, 1, 2]),
    };
    assert_eq!(
        state.on_alter_partition_result(&sent, older, 1),
        AlterOutcome::AwaitingMetadata
    );
    assert_eq!(state.pending(), Some(&sent));

    // The controller's ISR is what is committed, even if it differs.
    let other_isr = AlterPartitionResult::Ok {
        leader_epoch: le(5),
        partition_epoch: pe(12),
        isr: ids(&[0, 2]),
    };
    let outcome = state.on_alter_partition_result(&sent, other_isr, 1);
    assert!(matches!(outcome, AlterOutcome::Committed { .. }));
    assert_eq!(
        (state.isr(), state.partition_epoch(), state.pending()),
        (&ids(&[0, 2])[..], pe(12), None)
    );

    // An answer for a proposal no longer pending changes nothing.
    let before = state.clone();
    assert_eq!(
        state.on_alter_partition_result(&sent, accepted(&sent), 2),
        AlterOutcome::Superseded
    );
    assert_eq!(state, before);

    // Metadata overtaking a pending proposal supersedes it.
    let next = state
        .on_follower_fetch(b(1), FETCH_EPOCH, o(100), 3)
        .unwrap()
        .proposal
        .unwrap();
    assert_eq!(next.partition_epoch, pe(12));
    let update = isr_update(&state, &ids(&[0, 2]));
    state.on_metadata(&update, 3);
    assert_eq!(
        state.on_alter_partition_result(&next, accepted(&next), 3),
        AlterOutcome::Superseded
    );
    assert_eq!(state.isr(), ids(&[0, 2]));
}

#[test]
fn ack_helpers_feed_the_rules() {
    let mut state = leader(&[0, 1, 2], &[0, 1, 2], 2, 100, 100);
    assert_eq!(state.check_min_isr_before_append(Acks::All), Ok(()));
    state.on_leader_append(o(105), 1);
    let decide =
        |s: &LeaderState, epoch| rules::ack_decision(&s.ack_observation(le(epoch), o(105)));
    assert_eq!(decide(&state, 5), rules::AckDecision::Wait);
    state
        .on_follower_fetch(b(1), FETCH_EPOCH, o(105), 2)
        .unwrap();
    state
        .on_follower_fetch(b(2), FETCH_EPOCH, o(105), 2)
        .unwrap();
    assert_eq!(
        decide(&state, 5),
        rules::AckDecision::Ack {
            hw: o(105),
            error: None
        }
    );
    assert_eq!(
        decide(&state, 4),
        rules::AckDecision::Reject(ErrorCode::NotLeaderOrFollower)
    );

    let update = isr_update(&state, &ids(&[0]));
    state.on_metadata(&update, 3);
    assert_eq!(
        state.check_min_isr_before_append(Acks::All),
        Err(ErrorCode::NotEnoughReplicas)
    );
    assert_eq!(state.check_min_isr_before_append(Acks::Leader), Ok(()));
    let error = Some(ErrorCode::NotEnoughReplicasAfterAppend);
    assert_eq!(
        decide(&state, 5),
        rules::AckDecision::Ack { hw: o(105), error }
    );
}

/// min.insync.replicas above the replication factor: every acks=all write
/// is refused with NOT_ENOUGH_REPLICAS (Kafka's answer), even with the whole
/// replica set in the ISR; acks=1 writes are taken and become visible.
#[test]
fn min_isr_above_replication_factor_refuses_acks_all() {
    let mut state = leader(&[0, 1], &[0, 1], 3, 100, 100);
    assert_eq!(
        state.check_min_isr_before_append(Acks::All),
        Err(ErrorCode::NotEnoughReplicas)
    );
    assert_eq!(state.check_min_isr_before_append(Acks::Leader), Ok(()));
    state.on_leader_append(o(101), 1);
    state
        .on_follower_fetch(b(1), FETCH_EPOCH, o(101), 2)
        .unwrap();
    assert_eq!(state.hw(), o(101), "acks=1 data becomes visible");
    let single = leader(&[0], &[0], 2, 0, 0);
    assert_eq!(
        single.check_min_isr_before_append(Acks::All),
        Err(ErrorCode::NotEnoughReplicas)
    );
}

// ---- property: random observation sequences keep the HW/ISR invariants ----

#[derive(Debug, Clone)]
enum Op {
    Append(i64),
    /// Follower `replica` fetches `step` past its last offset, or at the
    /// leader's LEO.
    Fetch {
        replica: i32,
        step: i64,
        to_leo: bool,
    },
    /// A fetch the leader must refuse.
    BadFetch {
        replica: i32,
        past_leo: bool,
    },
    Tick(i64),
    Shrink,
    Accept {
        bump: bool,
    },
    Reject(ErrorCode),
    /// An answer for a proposal that is no longer pending.
    StaleAnswer,
    /// The controller drops some followers from the ISR (e.g. fenced brokers).
    DropFromIsr(u8),
    Eligible(i32, bool),
    NewLeaderEpoch,
}

fn op() -> impl Strategy<Value = Op> {
    let errors = prop::sample::select(vec![
        ErrorCode::OperationNotAttempted,
        ErrorCode::IneligibleReplica,
        ErrorCode::FencedLeaderEpoch,
        ErrorCode::InvalidUpdateVersion,
        ErrorCode::UnknownTopicOrPartition,
        ErrorCode::NotController,
    ]);
    prop_oneof![
        4 => (0i64..6).prop_map(Op::Append),
        8 => (1i32..=3, 0i64..8, any::<bool>())
            .prop_map(|(replica, step, to_leo)| Op::Fetch { replica, step, to_leo }),
        1 => (prop::sample::select(vec![0, 1, 9]), any::<bool>())
            .prop_map(|(replica, past_leo)| Op::BadFetch { replica, past_leo }),
        3 => (0i64..=LAG).prop_map(Op::Tick),
        2 => Just(Op::Shrink),
        2 => any::<bool>().prop_map(|bump| Op::Accept { bump }),
        2 => errors.prop_map(Op::Reject),
        1 => Just(Op::StaleAnswer),
        1 => any::<u8>().prop_map(Op::DropFromIsr),
        1 => (1i32..=3, any::<bool>()).prop_map(|(r, e)| Op::Eligible(r, e)),
        1 => Just(Op::NewLeaderEpoch),
    ]
}

/// The test's model of the world around the leader.
struct World {
    state: LeaderState,
    now: i64,
    /// Per follower: the lowest offset it may fetch from (LEOs only grow;
    /// ISR members start at the HW, as they hold every committed record).
    floor: BTreeMap<i32, Offset>,
    old_proposals: Vec<IsrProposal>,
}

impl World {
    /// Applies `op`; false once the leader resigned.
    fn apply(&mut self, op: &Op) -> bool {
        let s = &mut self.state;
        let pending_before = s.pending().cloned();
        match *op {
            Op::Append(n) => {
                s.on_leader_append(s.leader_leo().plus(n), self.now);
            }
            Op::Fetch {
                replica,
                step,
                to_leo,
            } => {
                let floor = self.floor[&replica];
                let offset = if to_leo {
                    s.leader_leo()
                } else {
                    floor.plus(step).min(s.leader_leo())
                };
                let hw_before = s.hw();
                let outcome = s
                    .on_follower_fetch(b(replica), FETCH_EPOCH, offset, self.now)
                    .unwrap();
                self.floor.insert(replica, offset);
                if let Some(p) = &outcome.proposal {
                    assert!(pending_before.is_none(), "second proposal {p:?}");
                    assert_eq!(
                        p.change,
                        IsrChange::Expand {
                            replica: b(replica)
                        }
                    );
                    assert!(offset >= hw_before && offset >= s.leader_epoch_start_offset());
                    self.old_proposals.push(p.clone());
                }
            }
            Op::BadFetch { replica, past_leo } => {
                let before = s.clone();
                let offset = if past_leo {
                    s.leader_leo().next()
                } else {
                    s.leader_leo()
                };
                if past_leo || replica == 0 || replica == 9 {
                    assert!(s
                        .on_follower_fetch(b(replica), FETCH_EPOCH, offset, self.now)
                        .is_err());
                    assert_eq!(*s, before);
                }
            }
            Op::Tick(dt) => self.now += dt,
            Op::Shrink => {
                if let Some(p) = s.maybe_shrink_isr(self.now) {
                    assert!(pending_before.is_none(), "second proposal {p:?}");
                    assert!(matches!(p.change, IsrChange::Shrink { .. }));
                    self.old_proposals.push(p);
                }
            }
            Op::Accept { bump } => {
                if let Some(sent) = pending_before {
                    let result = AlterPartitionResult::Ok {
                        leader_epoch: sent.leader_epoch,
                        partition_epoch: if bump {
                            sent.partition_epoch.next()
                        } else {
                            sent.partition_epoch
                        },
                        isr: sent.new_isr.clone(),
                    };
                    let outcome = s.on_alter_partition_result(&sent, result, self.now);
                    assert!(matches!(outcome, AlterOutcome::Committed { .. }));
                }
            }
            Op::Reject(code) => {
                if let Some(sent) = pending_before {
                    s.on_alter_partition_result(&sent, AlterPartitionResult::Err(code), self.now);
                }
            }
            Op::StaleAnswer => {
                if let Some(old) = self.old_proposals.iter().find(|p| Some(*p) != s.pending()) {
                    let old = old.clone();
                    let before = s.clone();
                    let outcome = s.on_alter_partition_result(&old, accepted(&old), self.now);
                    assert_eq!(outcome, AlterOutcome::Superseded);
                    assert_eq!(*s, before);
                }
            }
            Op::DropFromIsr(mask) => {
                let isr: Vec<BrokerId> = s
                    .isr()
                    .iter()
                    .copied()
                    .filter(|&id| id == b(0) || mask & (1 << id.get()) == 0)
                    .collect();
                let update = isr_update(s, &isr);
                assert!(matches!(
                    s.on_metadata(&update, self.now),
                    MetadataOutcome::Updated { .. }
                ));
                assert!(s.pending().is_none());
            }
            Op::Eligible(replica, eligible) => s.set_isr_eligible(b(replica), eligible),
            Op::NewLeaderEpoch => {
                let update = PartitionRegistration {
                    leader_epoch: s.leader_epoch().next(),
                    ..isr_update(s, s.isr())
                };
                assert_eq!(s.on_metadata(&update, self.now), MetadataOutcome::Resign);
                return false;
            }
        }
        true
    }

    fn check(&self, hw_before: Offset, under_min_before: bool) {
        let s = &self.state;
        assert!(
            s.hw() >= hw_before,
            "HW moved back from {hw_before} to {}",
            s.hw()
        );
        assert!(s.hw() <= s.leader_leo());
        let under_min = s.isr().len() < s.effective_min_isr();
        if under_min_before && under_min {
            assert_eq!(s.hw(), hw_before, "HW advanced under min ISR");
        }
        // Over the maximal ISR: a pending addition reached the HW when proposed
        // and holds it since.
        for &id in s.maximal_isr().iter().filter(|&&id| id != s.leader_id()) {
            // An untracked member or one that has not fetched: LEO unknown.
            let leo = s.follower(id).and_then(|f| f.leo);
            assert!(
                leo.is_none_or(|leo| s.hw() <= leo),
                "HW {} past ISR member {id} at {leo:?}",
                s.hw()
            );
        }
        let maximal = s.maximal_isr();
        assert!(s.isr().iter().all(|id| maximal.contains(id)));
        match s.pending() {
            None => assert_eq!(maximal, s.isr()),
            Some(p) => {
                assert_eq!(
                    (p.leader_epoch, p.partition_epoch),
                    (s.leader_epoch(), s.partition_epoch())
                );
                assert!(p.new_isr.contains(&s.leader_id()));
                match &p.change {
                    IsrChange::Expand { replica } => {
                        assert_eq!(maximal.len(), s.isr().len() + 1);
                        assert!(maximal.contains(replica) && !s.isr().contains(replica));
                    }
                    IsrChange::Shrink { .. } => assert_eq!(maximal, s.isr()),
                }
            }
        }
    }
}

proptest! {
    #[test]
    fn random_observations_keep_hw_and_isr_invariants(
        in_isr in prop::collection::vec(any::<bool>(), 3),
        min_isr in 1i32..=3,
        leo in 0i64..50,
        hw_back in 0i64..50,
        ops in prop::collection::vec(op(), 1..80),
    ) {
        let mut isr = vec![0];
        isr.extend((1..=3).filter(|&id| in_isr[id as usize - 1]));
        let hw = (leo - hw_back).max(0);
        let state = leader(&[0, 1, 2, 3], &isr, min_isr, leo, hw);
        let floor = (1..=3)
            .map(|id| (id, if isr.contains(&id) { state.hw() } else { Offset::ZERO }))
            .collect();
        let mut world = World { state, now: 0, floor, old_proposals: Vec::new() };
        world.check(world.state.hw(), false);
        for op in &ops {
            let hw_before = world.state.hw();
            let under_min_before = world.state.isr().len() < world.state.effective_min_isr();
            if !world.apply(op) {
                break;
            }
            world.check(hw_before, under_min_before);
        }
    }
}
