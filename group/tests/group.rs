//! The classic group coordinator (`strand_group::Group`), driven through a
//! test broker that holds requests the way the real one must: table-driven
//! scenarios for every error and transition, and focused tests for commits,
//! describe/list/delete and snapshots.

mod common;

use bytes::Bytes;
use common::*;
use strand_group::*;
use strand_protocol::ErrorCode;

use ErrorCode::*;
use GroupState::*;

/// An expected JoinGroup answer.
#[derive(Debug, Clone)]
struct JE {
    error: Option<ErrorCode>,
    generation: Option<i32>,
    leader: Option<&'static str>,
    members: Option<usize>,
    member_id: Option<&'static str>,
}

/// Success in `generation`, led by `leader`, with `members` members listed
/// (the leader's answer) or 0 (a follower's).
fn ok(generation: i32, leader: &'static str, members: usize) -> JE {
    JE {
        error: None,
        generation: Some(generation),
        leader: Some(leader),
        members: Some(members),
        member_id: None,
    }
}

fn err(error: ErrorCode) -> JE {
    JE {
        error: Some(error),
        generation: None,
        leader: None,
        members: None,
        member_id: None,
    }
}

impl JE {
    fn id(mut self, member_id: &'static str) -> Self {
        self.member_id = Some(member_id);
        self
    }
}

/// An expected SyncGroup answer.
#[derive(Debug, Clone)]
enum SE {
    Assigned(&'static str),
    Err(ErrorCode),
}

/// One step of a scenario: an observation or an expectation. Observations
/// happen at the time of the last `At`.
#[derive(Debug, Clone)]
enum Step {
    /// Time moves to .0 and due timers fire.
    At(i64),
    Join(J),
    Sync(S),
    /// Heartbeat (member, instance, generation) and its expected error.
    Hb(&'static str, Option<&'static str>, i32, Option<ErrorCode>),
    /// LeaveGroup and the expected per-member errors (or request error).
    Leave(
        Vec<(&'static str, Option<&'static str>)>,
        Result<Vec<Option<ErrorCode>>, ErrorCode>,
    ),
    /// The oldest metadata write completes with this result.
    Persist(Result<(), ErrorCode>),
    /// OffsetCommit checks (member, generation, instance) and the expected error.
    Commit(&'static str, i32, Option<&'static str>, Option<ErrorCode>),
    State(GroupState),
    Gen(i32),
    Leader(Option<&'static str>),
    Members(&'static [&'static str]),
    Pending(&'static [&'static str]),
    Protocol(Option<&'static str>),
    Deadline(Option<i64>),
    /// Writes asked for and not yet reported by the test.
    Writes(usize),
    /// The JoinGroup answered under this key (the member id it was held
    /// under, else the answer's member id, else the request's).
    Joined(&'static str, JE),
    Synced(&'static str, SE),
    /// A request of this member is held, unanswered.
    Held(&'static str),
    Check(fn(&Group)),
}

struct Case {
    name: &'static str,
    config: GroupConfig,
    steps: Vec<Step>,
}

fn run(case: &Case) {
    use Step::*;
    let mut h = Harness::new(case.config);
    for (i, step) in case.steps.iter().enumerate() {
        let at = format!("case '{}', step {i} {step:?}", case.name);
        match step.clone() {
            At(t) => h.tick(t),
            Join(j) => {
                h.join(&j);
            }
            Sync(s) => {
                h.sync(&s);
            }
            Hb(member, instance, gen, expected) => {
                let got = h.heartbeat(member, instance, gen).err();
                assert_eq!(got, expected, "{at}");
            }
            Leave(members, expected) => {
                let got = h
                    .leave(&members)
                    .map(|v| v.into_iter().map(Result::err).collect::<Vec<_>>());
                assert_eq!(got, expected, "{at}");
            }
            Persist(result) => {
                h.persist(result);
            }
            Commit(member, gen, instance, expected) => {
                assert_eq!(h.commit(member, gen, instance).err(), expected, "{at}");
            }
            State(state) => assert_eq!(h.group.state(), state, "{at}"),
            Gen(gen) => assert_eq!(h.group.generation_id(), gen, "{at}"),
            Leader(leader) => assert_eq!(h.group.leader(), leader, "{at}"),
            Members(ids) => {
                let got: Vec<&str> = h.group.members().iter().map(|m| m.member_id()).collect();
                assert_eq!(got, ids, "{at}");
            }
            Pending(ids) => {
                let got: Vec<&str> = h.group.pending_member_ids().collect();
                assert_eq!(got, ids, "{at}");
            }
            Protocol(p) => assert_eq!(h.group.protocol_name(), p, "{at}"),
            Deadline(d) => assert_eq!(h.group.next_deadline(), d, "{at}"),
            Writes(n) => assert_eq!(h.persists.len(), n, "{at}"),
            Joined(key, e) => {
                let r = h
                    .join_answers
                    .remove(key)
                    .unwrap_or_else(|| panic!("{at}: no join answer for {key}"));
                assert_eq!(r.error, e.error, "{at}: {r:?}");
                assert!(!r.skip_assignment, "{at}");
                if e.error.is_some() {
                    assert!(r.members.is_empty(), "{at}");
                }
                if let Some(g) = e.generation {
                    assert_eq!(r.generation_id, g, "{at}: {r:?}");
                }
                if let Some(l) = e.leader {
                    assert_eq!(r.leader, l, "{at}: {r:?}");
                }
                if let Some(n) = e.members {
                    assert_eq!(r.members.len(), n, "{at}: {r:?}");
                }
                if let Some(id) = e.member_id {
                    assert_eq!(r.member_id, id, "{at}: {r:?}");
                }
                if e.error.is_none() {
                    assert_eq!(r.protocol_type.as_deref(), Some("consumer"), "{at}");
                    assert!(r.protocol_name.is_some(), "{at}");
                }
            }
            Synced(key, e) => {
                let r = h
                    .sync_answers
                    .remove(key)
                    .unwrap_or_else(|| panic!("{at}: no sync answer for {key}"));
                match e {
                    SE::Assigned(a) => {
                        assert_eq!(r.error, None, "{at}: {r:?}");
                        assert_eq!(r.assignment, Bytes::from(a), "{at}");
                        assert_eq!(r.protocol_type.as_deref(), Some("consumer"), "{at}");
                        assert_eq!(r.protocol_name.as_deref(), h.group.protocol_name(), "{at}");
                    }
                    SE::Err(code) => {
                        assert_eq!(r.error, Some(code), "{at}: {r:?}");
                        assert!(r.assignment.is_empty() && r.protocol_name.is_none(), "{at}");
                    }
                }
            }
            Held(key) => assert!(
                h.held_joins.contains(key) || h.held_syncs.contains(key),
                "{at}: {key} holds nothing"
            ),
            Check(f) => f(&h.group),
        }
    }
}

/// A group Stable at generation 1 with dynamic m1 (leader, assignment "a1")
/// and m2 ("a2"), both joined at 0 without MEMBER_ID_REQUIRED (the second
/// join extends the initial delay once); now = 6000, sessions end at 16 s.
fn stable_pair() -> Vec<Step> {
    use Step::*;
    vec![
        Join(j("").old()),
        Join(j("").old()),
        At(6000),
        Joined("m1", ok(1, "m1", 2)),
        Joined("m2", ok(1, "m1", 0)),
        Sync(s("m2", 1)),
        Sync(s("m1", 1).assign(&[("m1", "a1"), ("m2", "a2")])),
        Persist(Ok(())),
        Synced("m1", SE::Assigned("a1")),
        Synced("m2", SE::Assigned("a2")),
        State(Stable),
    ]
}

/// Stable at generation 1: static m1 (instance i1, leader, "a1"), dynamic
/// m2 ("a2"); now = 6000, sessions end at 16 s.
fn stable_static() -> Vec<Step> {
    use Step::*;
    vec![
        Join(j("").inst("i1")),
        Join(j("").old()),
        At(6000),
        Joined("m1", ok(1, "m1", 2)),
        Joined("m2", ok(1, "m1", 0)),
        Sync(s("m1", 1).inst("i1").assign(&[("m1", "a1"), ("m2", "a2")])),
        Sync(s("m2", 1)),
        Persist(Ok(())),
        Synced("m1", SE::Assigned("a1")),
        Synced("m2", SE::Assigned("a2")),
        State(Stable),
    ]
}

fn then(mut first: Vec<Step>, rest: Vec<Step>) -> Vec<Step> {
    first.extend(rest);
    first
}

#[test]
fn scenarios() {
    use Step::*;
    let max2 = GroupConfig {
        max_size: 2,
        ..config()
    };
    let cases = vec![
        Case {
            name: "MEMBER_ID_REQUIRED, rejoin, initial delay, sync, Stable",
            config: config(),
            steps: vec![
                Join(j("")),
                Joined("m1", err(MemberIdRequired).id("m1")),
                State(Empty),
                Pending(&["m1"]),
                Deadline(Some(10_000)),
                Join(j("m1")),
                Held("m1"),
                State(PreparingRebalance),
                Pending(&[]),
                // The initial delay, not the new member's 5-minute limit.
                Deadline(Some(3000)),
                At(2999),
                Held("m1"),
                At(3000),
                Joined("m1", ok(1, "m1", 1).id("m1")),
                State(CompletingRebalance),
                Gen(1),
                Leader(Some("m1")),
                Protocol(Some("range")),
                Hb("m1", None, 1, None),
                Sync(s("m1", 1).names("consumer", "range").assign(&[("m1", "a1")])),
                Held("m1"),
                Writes(1),
                State(CompletingRebalance),
                Persist(Ok(())),
                Synced("m1", SE::Assigned("a1")),
                State(Stable),
                Hb("m1", None, 1, None),
                // Session restarted by the answer and the heartbeat at 3000.
                Deadline(Some(13_000)),
                Sync(s("m1", 1)),
                Synced("m1", SE::Assigned("a1")),
            ],
        },
        Case {
            name: "a pending member id expires after its session timeout",
            config: config(),
            steps: vec![
                Join(j("")),
                Joined("m1", err(MemberIdRequired)),
                At(9999),
                Pending(&["m1"]),
                At(10_000),
                Pending(&[]),
                Deadline(None),
                Join(j("m1")),
                Joined("m1", err(UnknownMemberId).id("m1")),
                State(Empty),
            ],
        },
        Case {
            name: "a pending member id holds the join phase until it joins",
            config: config(),
            steps: then(
                stable_pair(),
                vec![
                    Join(j("")),
                    Joined("m3", err(MemberIdRequired)),
                    State(Stable),
                    Join(j("m1")),
                    State(PreparingRebalance),
                    Join(j("m2")),
                    // Everyone rejoined, but m3 is still expected.
                    Held("m2"),
                    Join(j("m3")),
                    Joined("m1", ok(2, "m1", 3)),
                    Joined("m2", ok(2, "m1", 0)),
                    Joined("m3", ok(2, "m1", 0)),
                ],
            ),
        },
        Case {
            name: "initial delay: extended by new joins, bounded by the rebalance timeout",
            config: config(),
            steps: vec![
                Join(j("").old().rebalance(10_000)),
                Deadline(Some(3000)),
                At(1000),
                Join(j("").old().rebalance(10_000)),
                At(3000),
                Deadline(Some(6000)),
                At(4000),
                Join(j("").old().rebalance(10_000)),
                At(6000),
                Deadline(Some(9000)),
                At(7000),
                Join(j("").old().rebalance(10_000)),
                At(9000),
                // Only 1000 of the 10 s rebalance timeout is left.
                Deadline(Some(10_000)),
                At(9500),
                Join(j("").old().rebalance(10_000)),
                At(9999),
                State(PreparingRebalance),
                At(10_000),
                State(CompletingRebalance),
                Joined("m1", ok(1, "m1", 5)),
                Joined("m2", ok(1, "m1", 0)),
                Joined("m5", ok(1, "m1", 0)),
            ],
        },
        Case {
            name: "initial delay: a second member in the first delay extends it once",
            config: config(),
            steps: vec![
                Join(j("").old()),
                Join(j("").old()),
                At(3000),
                Held("m1"),
                Deadline(Some(6000)),
                At(6000),
                Joined("m1", ok(1, "m1", 2)),
                Joined("m2", ok(1, "m1", 0)),
            ],
        },
        Case {
            name: "two members: a new member rebalances a Stable group; sync before leader",
            config: config(),
            steps: then(
                stable_pair(),
                vec![
                    At(8000),
                    Join(j("").old()),
                    Held("m3"),
                    State(PreparingRebalance),
                    // Not Empty: the normal join phase (8 + 30 s), not the
                    // initial delay; the members' sessions end first.
                    Deadline(Some(16_000)),
                    Hb("m1", None, 1, Some(RebalanceInProgress)),
                    Sync(s("m1", 1)),
                    Synced("m1", SE::Err(RebalanceInProgress)),
                    Commit("m1", 1, None, None),
                    Join(j("m1")),
                    Held("m1"),
                    Join(j("m2")),
                    Joined("m2", ok(2, "m1", 0)),
                    Joined("m1", ok(2, "m1", 3)),
                    Joined("m3", ok(2, "m1", 0)),
                    State(CompletingRebalance),
                    Hb("m3", None, 2, None),
                    Commit("m1", 2, None, Some(RebalanceInProgress)),
                    Sync(s("m3", 2)),
                    Sync(s("m2", 2)),
                    Held("m3"),
                    Held("m2"),
                    Writes(0),
                    // m3 is missing from the assignment: it gets an empty one.
                    Sync(s("m1", 2).assign(&[("m1", "x1"), ("m2", "x2"), ("zz", "x9")])),
                    Writes(1),
                    Check(|g| assert_eq!(g.state(), CompletingRebalance)),
                    Persist(Ok(())),
                    Synced("m1", SE::Assigned("x1")),
                    Synced("m2", SE::Assigned("x2")),
                    Synced("m3", SE::Assigned("")),
                    State(Stable),
                    Gen(2),
                ],
            ),
        },
        Case {
            name: "rejoin during CompletingRebalance: same metadata same answer, new metadata rebalances",
            config: config(),
            steps: vec![
                Join(j("").old()),
                Join(j("").old()),
                At(6000),
                Joined("m1", ok(1, "m1", 2)),
                Joined("m2", ok(1, "m1", 0)),
                Join(j("m1")),
                Joined("m1", ok(1, "m1", 2)),
                Join(j("m2")),
                Joined("m2", ok(1, "m1", 0)),
                State(CompletingRebalance),
                Sync(s("m1", 1)),
                Held("m1"),
                Join(j("m2").protos(&[("range", "new")])),
                State(PreparingRebalance),
                Synced("m1", SE::Err(RebalanceInProgress)),
                Writes(1),
                Join(j("m1")),
                Joined("m1", ok(2, "m1", 2)),
                Joined("m2", ok(2, "m1", 0)),
                // The old generation's write arrives late: ignored.
                Persist(Ok(())),
                State(CompletingRebalance),
            ],
        },
        Case {
            name: "Stable: a follower's same-metadata rejoin is answered at once, the leader's rebalances",
            config: config(),
            steps: then(
                stable_pair(),
                vec![
                    Join(j("m2")),
                    Joined("m2", ok(1, "m1", 0)),
                    State(Stable),
                    Join(j("m1")),
                    Held("m1"),
                    State(PreparingRebalance),
                ],
            ),
        },
        Case {
            name: "leader leaves: the next member leads, the rebalance ends when it rejoins",
            config: config(),
            steps: then(
                stable_pair(),
                vec![
                    Leave(vec![("m1", None)], Ok(vec![None])),
                    State(PreparingRebalance),
                    Leader(Some("m2")),
                    Members(&["m2"]),
                    Join(j("m2")),
                    Joined("m2", ok(2, "m2", 1)),
                    State(CompletingRebalance),
                ],
            ),
        },
        Case {
            name: "the last member leaves: Empty, next generation, written",
            config: config(),
            steps: then(
                stable_pair(),
                vec![
                    Leave(vec![("m1", None), ("m2", None)], Ok(vec![None, None])),
                    State(Empty),
                    Gen(2),
                    Leader(None),
                    Protocol(None),
                    Writes(1),
                    Check(|g| assert!(g.snapshot().members.is_empty())),
                    Persist(Err(NotEnoughReplicas)),
                    State(Empty),
                    Deadline(None),
                    Hb("m1", None, 2, Some(UnknownMemberId)),
                    Sync(s("m1", 2)),
                    Synced("m1", SE::Err(UnknownMemberId)),
                ],
            ),
        },
        Case {
            name: "leave: unknown, pending, fenced, and a member leaving during the join phase",
            config: config(),
            steps: then(
                stable_static(),
                vec![
                    Join(j("")),
                    Joined("m3", err(MemberIdRequired)),
                    Leave(
                        vec![("m3", None), ("zz", None), ("m2", Some("i1")), ("", Some("i9"))],
                        Ok(vec![None, Some(UnknownMemberId), Some(FencedInstanceId), Some(UnknownMemberId)]),
                    ),
                    Pending(&[]),
                    State(Stable),
                    Join(j("m1").inst("i1")),
                    State(PreparingRebalance),
                    Held("m1"),
                    Leave(vec![("m2", None)], Ok(vec![None])),
                    // m2 was the one the join phase waited for.
                    Joined("m1", ok(2, "m1", 1)),
                    State(CompletingRebalance),
                ],
            ),
        },
        Case {
            name: "leave by group.instance.id (admin removal)",
            config: config(),
            steps: then(
                stable_static(),
                vec![
                    Leave(vec![("", Some("i1"))], Ok(vec![None])),
                    Members(&["m2"]),
                    Leader(Some("m2")),
                    State(PreparingRebalance),
                    Leave(vec![("", Some("i1"))], Ok(vec![Some(UnknownMemberId)])),
                ],
            ),
        },
        Case {
            name: "session expiry during Stable",
            config: config(),
            steps: then(
                stable_pair(),
                vec![
                    Deadline(Some(16_000)),
                    At(15_000),
                    Hb("m2", None, 1, None),
                    At(15_999),
                    Members(&["m1", "m2"]),
                    At(16_000),
                    Members(&["m2"]),
                    Leader(Some("m2")),
                    State(PreparingRebalance),
                    // m2's session, before the join phase's 46 s.
                    Deadline(Some(25_000)),
                    Hb("m1", None, 1, Some(UnknownMemberId)),
                ],
            ),
        },
        Case {
            name: "session expiry during CompletingRebalance: the leader never syncs",
            config: config(),
            steps: vec![
                Join(j("").old()),
                Join(j("").old()),
                At(6000),
                Joined("m1", ok(1, "m1", 2)),
                Joined("m2", ok(1, "m1", 0)),
                Sync(s("m2", 1)),
                At(15_999),
                Held("m2"),
                // m2 waits in SyncGroup and does not expire; m1 does.
                At(16_000),
                Members(&["m2"]),
                Synced("m2", SE::Err(RebalanceInProgress)),
                State(PreparingRebalance),
                Join(j("m2")),
                Joined("m2", ok(2, "m2", 1)),
            ],
        },
        Case {
            name: "rebalance timeout removes a member that did not rejoin",
            config: config(),
            steps: then(
                stable_pair(),
                vec![
                    At(7000),
                    Join(j("m1")),
                    State(PreparingRebalance),
                    // m1 waits in JoinGroup: only m2's session can expire.
                    Deadline(Some(16_000)),
                    At(13_000),
                    Hb("m2", None, 1, Some(RebalanceInProgress)),
                    At(22_000),
                    Hb("m2", None, 1, Some(RebalanceInProgress)),
                    At(31_000),
                    Hb("m2", None, 1, Some(RebalanceInProgress)),
                    At(36_999),
                    Held("m1"),
                    At(37_000),
                    Members(&["m1"]),
                    Joined("m1", ok(2, "m1", 1)),
                    Hb("m2", None, 1, Some(UnknownMemberId)),
                ],
            ),
        },
        Case {
            name: "the leader that did not rejoin is replaced by one that did",
            config: config(),
            steps: then(
                stable_pair(),
                vec![
                    Join(j("m2").protos(&[("range", "new")])),
                    State(PreparingRebalance),
                    At(15_000),
                    Hb("m1", None, 1, Some(RebalanceInProgress)),
                    At(24_000),
                    Hb("m1", None, 1, Some(RebalanceInProgress)),
                    At(33_000),
                    Hb("m1", None, 1, Some(RebalanceInProgress)),
                    Leader(Some("m1")),
                    At(36_000),
                    Members(&["m2"]),
                    Joined("m2", ok(2, "m2", 1)),
                ],
            ),
        },
        Case {
            name: "a member that never sends SyncGroup is removed after the rebalance timeout",
            config: config(),
            steps: vec![
                Join(j("").old()),
                Join(j("").old()),
                At(6000),
                Joined("m1", ok(1, "m1", 2)),
                Joined("m2", ok(1, "m1", 0)),
                Sync(s("m1", 1).assign(&[("m1", "a1"), ("m2", "a2")])),
                Persist(Ok(())),
                Synced("m1", SE::Assigned("a1")),
                State(Stable),
                Deadline(Some(16_000)),
                At(13_000),
                Hb("m1", None, 1, None),
                Hb("m2", None, 1, None),
                At(22_000),
                Hb("m1", None, 1, None),
                Hb("m2", None, 1, None),
                At(31_000),
                Hb("m1", None, 1, None),
                Hb("m2", None, 1, None),
                Deadline(Some(36_000)),
                At(36_000),
                Members(&["m1"]),
                State(PreparingRebalance),
            ],
        },
        Case {
            name: "a new member's JoinGroup expires after five minutes",
            config: config(),
            steps: vec![
                Join(j("").old().session(1_800_000).rebalance(600_000)),
                At(3000),
                Joined("m1", ok(1, "m1", 1)),
                Sync(s("m1", 1).assign(&[("m1", "a1")])),
                Persist(Ok(())),
                Synced("m1", SE::Assigned("a1")),
                Join(j("").old()),
                State(PreparingRebalance),
                At(3000 + NEW_MEMBER_JOIN_TIMEOUT_MS - 1),
                Held("m2"),
                At(3000 + NEW_MEMBER_JOIN_TIMEOUT_MS),
                Joined("m2", err(UnknownMemberId).id("")),
                Members(&["m1"]),
                State(PreparingRebalance),
                // m1 never rejoined: at the rebalance timeout it is dropped.
                At(603_000),
                State(Empty),
                Gen(2),
            ],
        },
        Case {
            name: "SyncGroup errors",
            config: config(),
            steps: then(
                stable_static(),
                vec![
                    Sync(s("zz", 1)),
                    Synced("zz", SE::Err(UnknownMemberId)),
                    Sync(s("m2", 0)),
                    Synced("m2", SE::Err(IllegalGeneration)),
                    Sync(s("m2", 1).names("connect", "range")),
                    Synced("m2", SE::Err(InconsistentGroupProtocol)),
                    Sync(s("m2", 1).names("consumer", "roundrobin")),
                    Synced("m2", SE::Err(InconsistentGroupProtocol)),
                    Sync(s("m2", 1).names("consumer", "range")),
                    Synced("m2", SE::Assigned("a2")),
                    Sync(s("m2", 1).inst("i1")),
                    Synced("m2", SE::Err(FencedInstanceId)),
                    Sync(s("m1", 1).inst("i9")),
                    Synced("m1", SE::Err(UnknownMemberId)),
                ],
            ),
        },
        Case {
            name: "Heartbeat errors",
            config: config(),
            steps: then(
                stable_static(),
                vec![
                    Hb("zz", None, 1, Some(UnknownMemberId)),
                    Hb("m2", None, 2, Some(IllegalGeneration)),
                    Hb("m2", None, 0, Some(IllegalGeneration)),
                    Hb("m2", Some("i1"), 1, Some(FencedInstanceId)),
                    Hb("m1", Some("i9"), 1, Some(UnknownMemberId)),
                    Hb("m1", Some("i1"), 1, None),
                    Hb("m2", None, 1, None),
                ],
            ),
        },
        Case {
            name: "JoinGroup errors: session bounds, protocols, unknown member",
            config: config(),
            steps: vec![
                Join(j("").session(5999)),
                Joined("", err(InvalidSessionTimeout)),
                Join(j("").session(1_800_001)),
                Joined("", err(InvalidSessionTimeout)),
                Join(j("m7")),
                Joined("m7", err(UnknownMemberId)),
                Join(j("").protos(&[])),
                Joined("", err(InconsistentGroupProtocol)),
                Join(j("").ptype("")),
                Joined("", err(InconsistentGroupProtocol)),
                Pending(&[]),
                Join(j("").old().session(6000)),
                Held("m1"),
                Join(j("").old().ptype("connect")),
                Joined("", err(InconsistentGroupProtocol)),
                Join(j("").old().protos(&[("roundrobin", "")])),
                Joined("", err(InconsistentGroupProtocol)),
                Join(j("m1").ptype("connect")),
                Joined("m1", err(InconsistentGroupProtocol)),
                Held("m1"),
                Join(j("m1").inst("i1")),
                Joined("m1", err(UnknownMemberId)),
            ],
        },
        Case {
            name: "protocol selection: common protocols only, then the members' votes",
            config: config(),
            steps: vec![
                Join(j("").old().protos(&[("roundrobin", "r"), ("range", "g")])),
                Join(j("").old().protos(&[("range", "g"), ("roundrobin", "r")])),
                Join(j("").old().protos(&[("range", "g")])),
                At(6000),
                Protocol(Some("range")),
                Joined("m1", ok(1, "m1", 3)),
                Check(|g| assert_eq!(g.describe().protocol, "")),
                Sync(s("m1", 1)),
                Persist(Ok(())),
                Synced("m1", SE::Assigned("")),
                Check(|g| assert_eq!(g.members()[0].protocols()[0].name, "roundrobin")),
                Leave(vec![("m3", None)], Ok(vec![None])),
                Join(j("m2").protos(&[("roundrobin", "r"), ("range", "g")])),
                Join(j("m1").protos(&[("roundrobin", "r"), ("range", "g")])),
                Protocol(Some("roundrobin")),
                Joined("m1", ok(2, "m1", 2)),
            ],
        },
        Case {
            name: "a vote tie goes to the protocol voted first in join order",
            config: config(),
            steps: vec![
                Join(j("").old().protos(&[("b", ""), ("a", "")])),
                Join(j("").old().protos(&[("a", ""), ("b", "")])),
                At(6000),
                Protocol(Some("b")),
            ],
        },
        Case {
            name: "GROUP_MAX_SIZE_REACHED",
            config: max2,
            steps: vec![
                Join(j("").old()),
                Join(j("").old()),
                Join(j("").old()),
                Joined("", err(GroupMaxSizeReached).id("")),
                At(6000),
                Joined("m1", ok(1, "m1", 2)),
                Joined("m2", ok(1, "m1", 0)),
                Join(j("")),
                Joined("", err(GroupMaxSizeReached)),
                Pending(&[]),
                Join(j("m1")),
                Joined("m1", ok(1, "m1", 2)),
                Members(&["m1", "m2"]),
            ],
        },
        Case {
            name: "GROUP_MAX_SIZE_REACHED sheds a member that rejoins last after max.size dropped",
            config: GroupConfig {
                max_size: 3,
                ..config()
            },
            steps: vec![
                Join(j("").old()),
                Join(j("").old()),
                Join(j("").old()),
                At(6000),
                Joined("m1", ok(1, "m1", 3)),
                Joined("m2", ok(1, "m1", 0)),
                Joined("m3", ok(1, "m1", 0)),
                Sync(s("m1", 1)),
                Persist(Ok(())),
                Synced("m1", SE::Assigned("")),
                Check(|g| {
                    let mut g = g.clone();
                    g.set_config(GroupConfig {
                        max_size: 2,
                        ..g.config()
                    });
                    // Rejoins while preparing: the third to rejoin is shed.
                    let req = |id: &str| JoinRequest {
                        member_id: id.to_string(),
                        ..j("").request()
                    };
                    let (r, _) = g.join(req("m1"), || unreachable!(), 7000);
                    assert!(matches!(r, Reply::Held { .. }));
                    let (r, _) = g.join(req("m2"), || unreachable!(), 7000);
                    assert!(matches!(r, Reply::Held { .. }));
                    let (r, o) = g.join(req("m3"), || unreachable!(), 7000);
                    assert_eq!(r.now().unwrap().error, Some(ErrorCode::GroupMaxSizeReached));
                    // m3 gone, and with it the last member the phase waited for.
                    assert_eq!(o.joins.len(), 2);
                    assert_eq!(g.members().len(), 2);
                    assert_eq!(g.state(), CompletingRebalance);
                }),
            ],
        },
        Case {
            name: "static member restart in Stable: new id, no rebalance, old id fenced",
            config: config(),
            steps: then(
                stable_static(),
                vec![
                    At(7000),
                    Join(j("").inst("i1")),
                    Held("m3"),
                    Writes(1),
                    State(Stable),
                    Members(&["m3", "m2"]),
                    Leader(Some("m3")),
                    Check(|g| {
                        let snap = g.snapshot();
                        assert_eq!(snap.members[0].member_id, "m3");
                        assert_eq!(snap.members[0].assignment, Bytes::from("a1"));
                    }),
                    Hb("m1", Some("i1"), 1, Some(FencedInstanceId)),
                    Hb("m1", None, 1, Some(UnknownMemberId)),
                    Sync(s("m1", 1).inst("i1")),
                    Synced("m1", SE::Err(FencedInstanceId)),
                    Commit("m1", 1, Some("i1"), Some(FencedInstanceId)),
                    Join(j("m1").inst("i1")),
                    Joined("m1", err(FencedInstanceId)),
                    Persist(Ok(())),
                    // The old leader id: the restarted leader must not assign.
                    Joined("m3", ok(1, "m1", 0).id("m3")),
                    Gen(1),
                    State(Stable),
                    Sync(s("m3", 1).inst("i1")),
                    Synced("m3", SE::Assigned("a1")),
                    Hb("m3", Some("i1"), 1, None),
                    Hb("m2", None, 1, None),
                ],
            ),
        },
        Case {
            name: "static member restart: a failed write restores the old member id",
            config: config(),
            steps: then(
                stable_static(),
                vec![
                    Join(j("").inst("i1").protos(&[("range", "changed")])),
                    Held("m3"),
                    Persist(Err(NotLeaderOrFollower)),
                    Joined("m3", err(NotCoordinator).id("")),
                    Members(&["m1", "m2"]),
                    Leader(Some("m1")),
                    Check(|g| {
                        let m = g.member("m1").unwrap();
                        assert_eq!(m.protocols()[0].metadata, Bytes::from("m"));
                    }),
                    Hb("m1", Some("i1"), 1, None),
                    State(Stable),
                ],
            ),
        },
        Case {
            name: "static member restart with another protocol choice rebalances",
            config: config(),
            steps: vec![
                Join(j("").inst("i1").protos(&[("range", ""), ("rr", "")])),
                At(3000),
                Joined("m1", ok(1, "m1", 1)),
                Sync(s("m1", 1).assign(&[("m1", "a1")])),
                Persist(Ok(())),
                Synced("m1", SE::Assigned("a1")),
                Join(j("").inst("i1").protos(&[("rr", ""), ("range", "")])),
                Writes(0),
                // The only member rejoined: the new generation starts at once.
                State(CompletingRebalance),
                Joined("m2", ok(2, "m2", 1)),
                Protocol(Some("rr")),
            ],
        },
        Case {
            name: "static member restart during CompletingRebalance rebalances",
            config: config(),
            steps: vec![
                Join(j("").inst("i1")),
                Join(j("").old()),
                At(6000),
                Joined("m1", ok(1, "m1", 2)),
                Joined("m2", ok(1, "m1", 0)),
                Sync(s("m1", 1).inst("i1")),
                Held("m1"),
                Join(j("").inst("i1")),
                Synced("m1", SE::Err(FencedInstanceId)),
                State(PreparingRebalance),
                Held("m3"),
                Leader(Some("m3")),
                Join(j("m2")),
                Joined("m3", ok(2, "m3", 2)),
                Joined("m2", ok(2, "m3", 0)),
            ],
        },
        Case {
            name: "static member restart during PreparingRebalance fences the held join",
            config: config(),
            steps: then(
                stable_static(),
                vec![
                    Join(j("m1").inst("i1")),
                    Held("m1"),
                    Join(j("").inst("i1")),
                    Joined("m1", err(FencedInstanceId).id("m1")),
                    Held("m3"),
                    Join(j("m2")),
                    Joined("m3", ok(2, "m3", 2)),
                ],
            ),
        },
        Case {
            name: "a static member that does not rejoin stays; a dynamic one would not",
            config: config(),
            steps: then(
                stable_static(),
                vec![
                    Join(j("m2").protos(&[("range", "new")])),
                    At(15_000),
                    Hb("m1", Some("i1"), 1, Some(RebalanceInProgress)),
                    At(24_000),
                    Hb("m1", Some("i1"), 1, Some(RebalanceInProgress)),
                    At(33_000),
                    Hb("m1", Some("i1"), 1, Some(RebalanceInProgress)),
                    At(36_000),
                    Members(&["m1", "m2"]),
                    Leader(Some("m2")),
                    Joined("m2", ok(2, "m2", 2)),
                    State(CompletingRebalance),
                ],
            ),
        },
        Case {
            name: "the leader's write fails: every held SyncGroup gets the error, rebalance",
            config: config(),
            steps: vec![
                Join(j("").old()),
                Join(j("").old()),
                At(6000),
                Joined("m1", ok(1, "m1", 2)),
                Joined("m2", ok(1, "m1", 0)),
                Sync(s("m2", 1)),
                Sync(s("m1", 1).assign(&[("m1", "a1"), ("m2", "a2")])),
                Persist(Err(RequestTimedOut)),
                Synced("m1", SE::Err(RebalanceInProgress)),
                Synced("m2", SE::Err(RebalanceInProgress)),
                State(PreparingRebalance),
                Join(j("m1")),
                Join(j("m2")),
                Joined("m1", ok(2, "m1", 2)),
                Sync(s("m1", 2)),
                Persist(Err(NotEnoughReplicas)),
                Synced("m1", SE::Err(CoordinatorNotAvailable)),
            ],
        },
        Case {
            name: "a newer request from the same member supersedes its held one",
            config: config(),
            steps: vec![
                Join(j("")),
                Join(j("m1")),
                Held("m1"),
                Join(j("m1")),
                Joined("m1", err(RebalanceInProgress)),
                Held("m1"),
                At(3000),
                Joined("m1", ok(1, "m1", 1)),
                Sync(s("m1", 1)),
                Sync(s("m1", 1)),
                Synced("m1", SE::Err(RebalanceInProgress)),
                Writes(2),
                Persist(Ok(())),
                Synced("m1", SE::Assigned("")),
                Persist(Ok(())),
                State(Stable),
            ],
        },
        Case {
            name: "OffsetCommit refreshes the session",
            config: config(),
            steps: then(
                stable_pair(),
                vec![
                    At(15_000),
                    Commit("m1", 1, None, None),
                    Hb("m2", None, 1, None),
                    Deadline(Some(25_000)),
                    At(16_000),
                    Members(&["m1", "m2"]),
                ],
            ),
        },
    ];
    for case in &cases {
        run(case);
    }
}

#[test]
fn offset_commit_validation_matrix() {
    // (member, generation, instance, expected) per group state.
    type Row = (&'static str, i32, Option<&'static str>, Option<ErrorCode>);
    let empty_new: &[Row] = &[
        ("", -1, None, None),
        ("m1", -1, None, None),
        ("", 0, None, Some(UnknownMemberId)),
        ("m9", 1, None, Some(UnknownMemberId)),
        ("", 1, Some("i1"), Some(UnknownMemberId)),
    ];
    let stable: &[Row] = &[
        ("", -1, None, Some(UnknownMemberId)),
        ("m1", -1, None, Some(IllegalGeneration)),
        ("m2", 0, None, Some(IllegalGeneration)),
        ("m2", 2, None, Some(IllegalGeneration)),
        ("m2", 1, None, None),
        ("m9", 1, None, Some(UnknownMemberId)),
        ("m2", 1, Some("i1"), Some(FencedInstanceId)),
        ("m1", 1, Some("i9"), Some(UnknownMemberId)),
        ("m1", 1, Some("i1"), None),
        ("", -1, Some("i1"), Some(FencedInstanceId)),
    ];
    let preparing: &[Row] = &[
        ("m2", 1, None, None),
        ("m1", 1, Some("i1"), None),
        ("", -1, None, Some(UnknownMemberId)),
    ];
    let completing: &[Row] = &[
        ("m2", 2, None, Some(RebalanceInProgress)),
        ("m2", 1, None, Some(IllegalGeneration)),
        ("", -1, None, Some(UnknownMemberId)),
    ];
    let empty_later: &[Row] = &[
        ("", -1, None, None),
        ("m1", 1, None, Some(UnknownMemberId)),
        ("", 2, None, Some(UnknownMemberId)),
    ];
    let dead: &[Row] = &[("", -1, None, Some(CoordinatorNotAvailable))];

    let check = |h: &mut Harness, rows: &[Row], name: &str| {
        for &(member, gen, instance, expected) in rows {
            let before = h.group.clone();
            let got = h.commit(member, gen, instance).err();
            assert_eq!(got, expected, "{name}: {member:?} gen {gen} {instance:?}");
            if got.is_some() {
                assert_eq!(
                    h.group, before,
                    "{name}: a refused commit changed the group"
                );
            }
        }
    };

    let mut h = Harness::new(config());
    check(&mut h, empty_new, "Empty (new)");
    run_steps(&mut h, stable_static());
    check(&mut h, stable, "Stable");
    // Transactional commits: no member needed, no state check.
    assert_eq!(h.group.validate_txn_offset_commit("", -1, None), Ok(()));
    assert_eq!(
        h.group.validate_txn_offset_commit("m2", 0, None),
        Err(IllegalGeneration)
    );
    h.join(&j("m1").inst("i1"));
    assert_eq!(h.group.state(), PreparingRebalance);
    check(&mut h, preparing, "PreparingRebalance");
    h.join(&j("m2"));
    assert_eq!(h.group.state(), CompletingRebalance);
    check(&mut h, completing, "CompletingRebalance");
    assert_eq!(h.group.validate_txn_offset_commit("m2", 2, None), Ok(()));
    h.leave(&[("m1", Some("i1")), ("m2", None)]).unwrap();
    assert_eq!(h.group.state(), Empty);
    check(&mut h, empty_later, "Empty (after members)");
    h.group.delete(h.now).unwrap();
    check(&mut h, dead, "Dead");
    assert_eq!(
        h.group.validate_txn_offset_commit("", -1, None),
        Err(CoordinatorNotAvailable)
    );

    assert_eq!(offset_commit_without_group(-1), Ok(()));
    assert_eq!(offset_commit_without_group(0), Err(IllegalGeneration));
}

/// Plays scenario steps on an existing harness (for the setups).
fn run_steps(h: &mut Harness, steps: Vec<Step>) {
    use Step::*;
    for step in steps {
        match step {
            At(t) => h.tick(t),
            Join(j) => {
                h.join(&j);
            }
            Sync(s) => {
                h.sync(&s);
            }
            Persist(result) => {
                h.persist(result);
            }
            Joined(key, _) => {
                h.join_answers.remove(key).expect("answered");
            }
            Synced(key, _) => {
                h.sync_answers.remove(key).expect("answered");
            }
            State(state) => assert_eq!(h.group.state(), state),
            other => panic!("not a setup step: {other:?}"),
        }
    }
}

#[test]
fn describe_list_delete() {
    let mut h = Harness::new(config());
    let d = h.group.describe();
    assert_eq!(
        (
            d.state.as_str(),
            d.protocol_type.as_str(),
            d.protocol.as_str()
        ),
        ("Empty", "", "")
    );
    assert_eq!(h.group.delete(0), Ok(())); // an Empty group can go at once
    assert_eq!(h.group.state(), Dead);
    assert_eq!(h.group.describe().state.as_str(), "Dead");
    assert_eq!(h.group.delete(0), Err(GroupIdNotFound));
    let r = h.join(&j("").old()).now().unwrap();
    assert_eq!(r.error, Some(CoordinatorNotAvailable));
    assert_eq!(h.heartbeat("m1", None, 0), Err(CoordinatorNotAvailable));
    assert_eq!(h.leave(&[("m1", None)]), Err(CoordinatorNotAvailable));
    let r = h.sync(&s("m1", 0)).now().unwrap();
    assert_eq!(r.error, Some(CoordinatorNotAvailable));
    assert_eq!(GroupDescription::dead("x").state, Dead);

    let mut h = Harness::new(config());
    run_steps(&mut h, stable_static());
    let d = h.group.describe();
    assert_eq!(d.group_id, "g");
    assert_eq!(d.state.to_string(), "Stable");
    assert_eq!(d.protocol_type, "consumer");
    assert_eq!(d.protocol, "range");
    assert_eq!(d.members.len(), 2);
    assert_eq!(d.members[0].member_id, "m1");
    assert_eq!(d.members[0].group_instance_id.as_deref(), Some("i1"));
    assert_eq!(d.members[0].client_id, "client");
    assert_eq!(d.members[0].client_host, "/127.0.0.1");
    assert_eq!(d.members[0].metadata, Bytes::from("m"));
    assert_eq!(d.members[0].assignment, Bytes::from("a1"));
    assert_eq!(d.members[1].assignment, Bytes::from("a2"));
    let o = h.group.overview();
    assert_eq!(
        (o.group_id.as_str(), o.protocol_type.as_str(), o.state),
        ("g", "consumer", Stable)
    );
    assert_eq!(h.group.delete(h.now), Err(NonEmptyGroup));

    h.join(&j("m2"));
    h.join(&j("m2")); // leader is m1; m2's same-metadata rejoin in Stable is answered
    h.join(&j("m1").inst("i1"));
    let d = h.group.describe();
    assert_eq!(d.state.as_str(), "PreparingRebalance");
    assert_eq!(d.protocol, "");
    assert!(d
        .members
        .iter()
        .all(|m| m.metadata.is_empty() && m.assignment.is_empty()));
    assert_eq!(h.group.delete(h.now), Err(NonEmptyGroup));
    h.join(&j("m2"));
    assert_eq!(h.group.describe().state.as_str(), "CompletingRebalance");
    assert_eq!(h.group.delete(h.now), Err(NonEmptyGroup));
    h.leave(&[("", Some("i1")), ("m2", None)]).unwrap();
    assert_eq!(h.group.overview().state, Empty);
    assert_eq!(h.group.overview().protocol_type, "consumer");
    assert_eq!(h.group.delete(h.now), Ok(()));
    assert_eq!(h.group.overview().state.as_str(), "Dead");
}

#[test]
fn unload_answers_held_requests_with_not_coordinator() {
    let mut h = Harness::new(config());
    h.join(&j("").old());
    h.join(&j("").old());
    h.unload();
    assert_eq!(h.join_answers["m1"].error, Some(NotCoordinator));
    assert_eq!(h.join_answers["m2"].error, Some(NotCoordinator));
    assert_eq!(h.group.state(), Dead);
    assert_eq!(h.group.next_deadline(), None);
    assert!(h.group.tick(1_000_000).is_empty());

    let mut h = Harness::new(config());
    h.join(&j("").old());
    h.tick(3000);
    h.sync(&s("m1", 1));
    h.unload();
    assert_eq!(h.sync_answers["m1"].error, Some(NotCoordinator));
    let write = h.persists.pop_front().unwrap();
    assert!(h.group.on_persisted(write.id, Ok(()), 3000).is_empty());
}

#[test]
fn snapshot_round_trip() {
    let mut h = Harness::new(config());
    run_steps(&mut h, stable_static());
    let snap = h.group.snapshot();
    assert_eq!(snap.generation_id, 1);
    assert_eq!(snap.protocol_type.as_deref(), Some("consumer"));
    assert_eq!(snap.protocol_name.as_deref(), Some("range"));
    assert_eq!(snap.leader.as_deref(), Some("m1"));
    assert_eq!(snap.current_state_timestamp_ms, Some(6000));
    assert_eq!(snap.members.len(), 2);
    let m = &snap.members[0];
    assert_eq!(
        (
            m.member_id.as_str(),
            m.group_instance_id.as_deref(),
            m.session_timeout_ms,
            m.rebalance_timeout_ms
        ),
        ("m1", Some("i1"), SESSION, REBALANCE)
    );
    assert_eq!(
        (m.subscription.clone(), m.assignment.clone()),
        (Bytes::from("m"), Bytes::from("a1"))
    );

    // The write of the leader's SyncGroup is this snapshot too.
    let loaded = Group::from_snapshot("g", snap.clone(), config(), 100_000).unwrap();
    assert_eq!(loaded.snapshot(), snap);
    assert_eq!(loaded.state(), Stable);
    assert_eq!(loaded.describe(), h.group.describe());
    assert!(loaded
        .members()
        .iter()
        .all(|m| m.session_deadline_ms() == 100_000 + i64::from(SESSION)));
    assert_eq!(loaded.next_deadline(), Some(110_000));

    let mut h = Harness::with_group(loaded);
    h.now = 100_000;
    h.next_id = 2;
    assert_eq!(h.heartbeat("m1", Some("i1"), 1), Ok(()));
    let r = h.sync(&s("m2", 1)).now().unwrap();
    assert_eq!(r.assignment, Bytes::from("a2"));
    // Same metadata as persisted: answered with the current generation.
    let r = h.join(&j("m2")).now().unwrap();
    assert_eq!((r.error, r.generation_id), (None, 1));
    // A restarted static member is recognised after the failover.
    h.join(&j("").inst("i1"));
    assert_eq!(h.persists.len(), 1);
    h.persist(Ok(()));
    assert_eq!(h.join_answers.remove("m3").unwrap().leader, "m1");
    // Sessions restarted at 100 s by the sync, the restart and its answer.
    h.tick(109_999);
    assert_eq!(h.group.members().len(), 2);
    h.tick(110_000);
    assert_eq!(h.group.state(), Empty);

    // An Empty group's snapshot loads Empty; a group over max.size rebalances.
    let empty = GroupMetadataSnapshot {
        protocol_type: Some("consumer".into()),
        generation_id: 7,
        protocol_name: None,
        leader: None,
        current_state_timestamp_ms: Some(5),
        members: vec![],
    };
    let g = Group::from_snapshot("g", empty, config(), 0).unwrap();
    assert_eq!(
        (g.state(), g.generation_id(), g.state_timestamp_ms()),
        (Empty, 7, 5)
    );
    let small = GroupConfig {
        max_size: 1,
        ..config()
    };
    let g = Group::from_snapshot("g", snap.clone(), small, 0).unwrap();
    assert_eq!(g.state(), PreparingRebalance);
    check_invariants(&g);

    let bad = |f: fn(&mut GroupMetadataSnapshot)| {
        let mut s = snap.clone();
        f(&mut s);
        Group::from_snapshot("g", s, config(), 0).unwrap_err()
    };
    assert_eq!(
        bad(|s| s.protocol_name = None),
        SnapshotError::MembersWithoutProtocol
    );
    assert_eq!(
        bad(|s| s.protocol_type = None),
        SnapshotError::MembersWithoutProtocolType
    );
    assert_eq!(
        bad(|s| s.members[1].member_id = "m1".into()),
        SnapshotError::DuplicateMember("m1".into())
    );
    assert_eq!(
        bad(|s| s.members[1].group_instance_id = Some("i1".into())),
        SnapshotError::DuplicateInstance("i1".into())
    );
    assert_eq!(
        bad(|s| s.leader = Some("zz".into())),
        SnapshotError::LeaderNotMember(Some("zz".into()))
    );
}

#[test]
fn persisted_snapshot_carries_the_new_assignment() {
    let mut h = Harness::new(config());
    h.join(&j("").old());
    h.join(&j("").old());
    h.tick(6000);
    h.sync(&s("m1", 1).assign(&[("m1", "a1")]));
    let write = h.persists.front().unwrap().clone();
    assert_eq!(write.snapshot.generation_id, 1);
    let assigned: Vec<(&str, &[u8])> = write
        .snapshot
        .members
        .iter()
        .map(|m| (m.member_id.as_str(), &m.assignment[..]))
        .collect();
    assert_eq!(assigned, vec![("m1", &b"a1"[..]), ("m2", &b""[..])]);
    // Not handed out before the write succeeds.
    assert!(h.group.members().iter().all(|m| m.assignment().is_none()));
}
