//! The acknowledgement decision for acks=all, as one pure function of one
//! observation (the brief's "From the RocketMQ seeds", seed 000):
//! [`decide_replication`]. Kafka's rule (every member of the in-sync set
//! holds the batch, with at least `min.insync.replicas` of them) is one
//! policy among three:
//!
//! - [`AckPolicy::AllInSyncSet`]: every in-sync replica holds the batch
//!   (Kafka's acks=all, the default);
//! - [`AckPolicy::ReplicaCount`]: `n` distinct in-sync replicas, the leader
//!   one of them, hold it (`n >= 2`); with the adaptive downgrade on, `n`
//!   drops to the replicas available, never below the minimum;
//! - [`AckPolicy::LocalDurable`]: the leader has fsynced it.
//!
//! With `durable`, "holds" means "has fsynced" (each replica's durable
//! offset covers the batch) rather than "has in memory".
//!
//! Two more conditions make an acknowledgement something a user can rely
//! on: every replica that could be elected leader (the *eligible* set,
//! which the controller elects from) holds the batch, so no election loses
//! it; and the HW covers it, so a consumer can read what was acknowledged
//! (Kafka acknowledges at the HW too).

use std::collections::BTreeMap;

use strand_protocol::ErrorCode;
use strand_types::{BrokerId, LeaderEpoch, Offset};

/// How an acks=all write is proven (topic config `strand.acks.policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckPolicy {
    AllInSyncSet,
    /// `n` distinct in-sync replicas including the leader; `n >= 2`.
    ReplicaCount(usize),
    LocalDurable,
}

/// A topic's acknowledgement settings (`strand.acks.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckSettings {
    pub policy: AckPolicy,
    /// `strand.acks.durable`: count only what replicas have fsynced.
    pub durable: bool,
    /// `strand.acks.downgrade.enable`: ReplicaCount lowers `n` to the
    /// in-sync replicas available, down to `min.insync.replicas`.
    pub downgrade: bool,
    /// `strand.acks.eviction.ms`: under ReplicaCount, how long an in-sync
    /// follower may hold up an acknowledgement that `n` replicas already
    /// allow before the leader takes it out of the ISR.
    pub eviction_ms: i64,
}

/// The default of `strand.acks.eviction.ms`.
pub const DEFAULT_EVICTION_MS: i64 = 200;

impl Default for AckSettings {
    /// Kafka's acks=all.
    fn default() -> Self {
        AckSettings {
            policy: AckPolicy::AllInSyncSet,
            durable: false,
            downgrade: false,
            eviction_ms: DEFAULT_EVICTION_MS,
        }
    }
}

impl AckPolicy {
    /// `strand.acks.policy` and `strand.acks.replicas` as a policy
    /// (values the topic-config table validated; anything else is Kafka's).
    pub fn from_config(policy: &str, replicas: i64) -> AckPolicy {
        match policy {
            "replica-count" => AckPolicy::ReplicaCount(replicas.clamp(2, 255) as usize),
            "local-durable" => AckPolicy::LocalDurable,
            _ => AckPolicy::AllInSyncSet,
        }
    }
}

/// What one replica reported holding: its log end (as its fetch offset
/// says) and what it has fsynced, if it says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaAck {
    pub replica: BrokerId,
    pub offset: Offset,
    /// `None`: the replica reports no fsynced offset.
    pub durable_offset: Option<Offset>,
}

/// One observation of a partition, for one pending append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationObservation<'a> {
    /// The leader epoch the append was made under.
    pub authority_epoch: LeaderEpoch,
    /// The epoch this broker leads at now; `None` when it does not lead.
    pub leading_epoch: Option<LeaderEpoch>,
    /// The broker's write lease allows writes (always true with leases off).
    pub lease_valid: bool,
    pub policy: AckPolicy,
    /// Acknowledge only what replicas have fsynced.
    pub durable: bool,
    /// ReplicaCount: lower `n` to the in-sync replicas available, down to
    /// `min_in_sync`.
    pub downgrade: bool,
    /// `min(min.insync.replicas, replica count)`.
    pub min_in_sync: usize,
    pub leader: BrokerId,
    pub leader_leo: Offset,
    /// What the leader has fsynced.
    pub leader_durable: Offset,
    /// The followers' reports, in any order, repeats allowed.
    pub acks: &'a [ReplicaAck],
    /// The in-sync set (the maximal ISR), leader included.
    pub in_sync: &'a [BrokerId],
    /// The replicas an election may pick, leader included.
    pub eligible: &'a [BrokerId],
    pub high_watermark: Offset,
    /// Last offset of the append + 1.
    pub required_offset: Offset,
}

/// How durable an acknowledged write is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durability {
    /// Distinct in-sync replicas that hold it (leader included).
    pub replicas: usize,
    /// Held on disk (fsynced) by those replicas, not only in memory.
    pub on_disk: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicationDecision {
    /// Not acknowledged, and never will be under this authority: lost
    /// leadership or lease (NOT_LEADER_OR_FOLLOWER), or too few in-sync
    /// replicas left to prove it (NOT_ENOUGH_REPLICAS_AFTER_APPEND). The
    /// records may or may not survive.
    Reject(ErrorCode),
    /// Not proven yet.
    Wait,
    /// Proven up to `offset` (at least the required offset).
    Ack {
        offset: Offset,
        durability: Durability,
    },
}

/// The number of distinct in-sync replicas an acknowledgement needs, or
/// `None` when the in-sync set is too small for the policy. The leader is
/// always one of them.
pub fn needed_replicas(
    policy: AckPolicy,
    in_sync: usize,
    min_in_sync: usize,
    downgrade: bool,
) -> Option<usize> {
    match policy {
        AckPolicy::AllInSyncSet => (in_sync >= min_in_sync).then_some(in_sync),
        AckPolicy::ReplicaCount(n) => {
            let n = n.max(2);
            let need = if downgrade {
                n.min(in_sync).max(min_in_sync)
            } else {
                n.max(min_in_sync)
            };
            (in_sync >= need).then_some(need)
        }
        AckPolicy::LocalDurable => (in_sync >= min_in_sync).then_some(1),
    }
}

/// One in-sync follower, as [`quorum_evictions`] sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerLag {
    pub replica: BrokerId,
    /// Its log end; `None` before its first fetch in this leader epoch.
    pub leo: Option<Offset>,
    /// The last time it was caught up with the leader (Kafka's
    /// lastCaughtUpTime).
    pub last_caught_up_ms: i64,
}

/// ReplicaCount's eviction: the in-sync followers to take out of the ISR
/// because they hold up acknowledgements that `need` replicas already
/// allow. An acknowledgement waits on the HW, which is the slowest in-sync
/// replica's log end; `need` replicas (the leader among them) hold up to
/// the quorum offset, the `need`-th highest log end. A follower below the
/// quorum offset, while it is above the HW (so something waits), that has
/// not been caught up for `eviction_ms`, goes; the slowest first, never
/// leaving fewer than `need` members. Once the controller commits the
/// smaller ISR, the HW moves up to what the remaining members hold, and
/// the election (which picks only ISR members) can lose nothing
/// acknowledged. The follower rejoins as any does, once it reaches the HW.
pub fn quorum_evictions(
    need: usize,
    leader_leo: Offset,
    hw: Offset,
    followers: &[FollowerLag],
    now_ms: i64,
    eviction_ms: i64,
) -> Vec<BrokerId> {
    let members = followers.len() + 1;
    if need >= members {
        return Vec::new();
    }
    let mut leos: Vec<Offset> = std::iter::once(leader_leo)
        .chain(followers.iter().filter_map(|f| f.leo))
        .collect();
    leos.sort_unstable_by(|a, b| b.cmp(a));
    let Some(&quorum) = leos.get(need - 1) else {
        return Vec::new();
    };
    if quorum <= hw {
        return Vec::new();
    }
    let mut laggards: Vec<&FollowerLag> = followers
        .iter()
        .filter(|f| f.leo.is_none_or(|l| l < quorum))
        .filter(|f| now_ms.saturating_sub(f.last_caught_up_ms) > eviction_ms)
        .collect();
    laggards.sort_by_key(|f| f.leo);
    laggards
        .into_iter()
        .take(members - need)
        .map(|f| f.replica)
        .collect()
}

/// The decision for one pending append. Stale authority rejects first;
/// then the in-sync set must be large enough for the policy; then the
/// offset proven is the one the policy's replicas all hold, capped by
/// every eligible replica's log end and by the HW.
pub fn decide_replication(obs: &ReplicationObservation<'_>) -> ReplicationDecision {
    if obs.leading_epoch != Some(obs.authority_epoch) || !obs.lease_valid {
        return ReplicationDecision::Reject(ErrorCode::NotLeaderOrFollower);
    }
    let durable = obs.durable || obs.policy == AckPolicy::LocalDurable;
    // Each in-sync replica counted once, at the most it reported; reports
    // from outside the in-sync set count for nothing.
    let mut held: BTreeMap<BrokerId, (Offset, Option<Offset>)> = BTreeMap::new();
    for r in obs.in_sync {
        if *r == obs.leader {
            held.insert(*r, (obs.leader_leo, Some(obs.leader_durable)));
        }
    }
    for a in obs.acks {
        if a.replica == obs.leader || !obs.in_sync.contains(&a.replica) {
            continue;
        }
        let e = held
            .entry(a.replica)
            .or_insert((a.offset, a.durable_offset));
        e.0 = e.0.max(a.offset);
        e.1 = e.1.max(a.durable_offset);
    }
    let measure = |(offset, durable_offset): (Offset, Option<Offset>)| -> Offset {
        if durable {
            durable_offset.unwrap_or(Offset::new(0)).min(offset)
        } else {
            offset
        }
    };
    let distinct_in_sync = {
        let mut v: Vec<BrokerId> = obs.in_sync.to_vec();
        v.sort();
        v.dedup();
        v.len()
    };
    let Some(need) = needed_replicas(obs.policy, distinct_in_sync, obs.min_in_sync, obs.downgrade)
    else {
        return ReplicationDecision::Reject(ErrorCode::NotEnoughReplicasAfterAppend);
    };
    let Some(&leader) = held.get(&obs.leader) else {
        // The leader outside its own in-sync set: nothing can be proven.
        return ReplicationDecision::Reject(ErrorCode::NotEnoughReplicasAfterAppend);
    };
    // The leader's measure, and the need-1 best of the others (a replica
    // that has not fetched in this epoch has no report, and holds nothing
    // that counts).
    let mut others: Vec<Offset> = held
        .iter()
        .filter(|(id, _)| **id != obs.leader)
        .map(|(_, h)| measure(*h))
        .collect();
    others.sort_unstable_by(|a, b| b.cmp(a));
    let mut proven = measure(leader);
    if need > 1 {
        // The (need-1)th best follower; fewer reports than that prove nothing.
        match others.get(need - 2) {
            Some(o) => proven = proven.min(*o),
            None => return ReplicationDecision::Wait,
        }
    }
    // Election safety: every eligible replica holds it in memory. One that
    // has not reported holds nothing provable.
    for r in obs.eligible {
        let leo = if *r == obs.leader {
            Some(obs.leader_leo)
        } else {
            obs.acks
                .iter()
                .filter(|a| a.replica == *r)
                .map(|a| a.offset)
                .max()
        };
        match leo {
            Some(leo) => proven = proven.min(leo),
            None => return ReplicationDecision::Wait,
        }
    }
    let proven = proven.min(obs.high_watermark);
    if proven < obs.required_offset {
        return ReplicationDecision::Wait;
    }
    let replicas = held
        .values()
        .filter(|h| measure(**h) >= obs.required_offset)
        .count();
    ReplicationDecision::Ack {
        offset: proven,
        durability: Durability {
            replicas,
            on_disk: durable,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{ack_decision, AckDecision, AckObservation};
    use proptest::prelude::*;

    fn b(id: i32) -> BrokerId {
        BrokerId::new(id)
    }
    const ONE: &[BrokerId] = &[BrokerId::new(1)];
    const E12: &[BrokerId] = &[BrokerId::new(1), BrokerId::new(2)];
    const E14: &[BrokerId] = &[BrokerId::new(1), BrokerId::new(4)];
    fn o(x: i64) -> Offset {
        Offset::new(x)
    }
    fn ack(id: i32, offset: i64, durable: Option<i64>) -> ReplicaAck {
        ReplicaAck {
            replica: b(id),
            offset: o(offset),
            durable_offset: durable.map(o),
        }
    }

    fn base<'a>(acks: &'a [ReplicaAck], in_sync: &'a [BrokerId]) -> ReplicationObservation<'a> {
        ReplicationObservation {
            authority_epoch: LeaderEpoch::new(3),
            leading_epoch: Some(LeaderEpoch::new(3)),
            lease_valid: true,
            policy: AckPolicy::AllInSyncSet,
            durable: false,
            downgrade: false,
            min_in_sync: 2,
            leader: b(1),
            leader_leo: o(100),
            leader_durable: o(100),
            acks,
            in_sync,
            eligible: in_sync,
            high_watermark: o(100),
            required_offset: o(50),
        }
    }

    #[test]
    fn needed_replicas_table() {
        use AckPolicy::*;
        // (policy, in-sync, min, downgrade) -> need
        let cases = [
            (AllInSyncSet, 3, 2, false, Some(3)),
            (AllInSyncSet, 2, 2, false, Some(2)),
            (AllInSyncSet, 1, 2, false, None),
            (ReplicaCount(2), 3, 1, false, Some(2)),
            (ReplicaCount(2), 1, 1, false, None),
            (ReplicaCount(3), 2, 1, false, None),
            (ReplicaCount(3), 2, 2, true, Some(2)),
            (ReplicaCount(3), 1, 2, true, None),
            (ReplicaCount(3), 3, 2, true, Some(3)),
            (ReplicaCount(2), 3, 3, false, Some(3)),
            (LocalDurable, 1, 2, false, None),
            (LocalDurable, 2, 2, false, Some(1)),
        ];
        for (p, isr, min, down, want) in cases {
            assert_eq!(
                needed_replicas(p, isr, min, down),
                want,
                "{p:?} isr {isr} min {min} downgrade {down}"
            );
        }
    }

    /// Seed 002's examples: `inSyncReplicas` is our ReplicaCount (the
    /// master counted), `minInSyncReplicas` our `min.insync.replicas`, the
    /// automatic downgrade `need = clamp(available, minimum, target)`.
    #[test]
    fn seed_002_quorum_write_and_downgrade() {
        use AckPolicy::ReplicaCount;
        // (case, policy, replicas in sync, minimum, downgrade) -> need
        #[rustfmt::skip]
        let cases = [
            ("two replicas, 2: master and slave", ReplicaCount(2), 2, 1, false, Some(2)),
            ("two replicas, slave down, no downgrade", ReplicaCount(2), 1, 1, false, None),
            ("two replicas, slave down, downgrade to 1", ReplicaCount(2), 1, 1, true, Some(1)),
            ("two replicas, slave down, minimum 2", ReplicaCount(2), 1, 2, true, None),
            ("three replicas, 2: master and any slave", ReplicaCount(2), 3, 1, false, Some(2)),
            ("three replicas, one slave down", ReplicaCount(2), 2, 1, false, Some(2)),
            ("three replicas, both down, downgrade", ReplicaCount(2), 1, 1, true, Some(1)),
            ("three replicas, 3, one down, downgrade", ReplicaCount(3), 2, 1, true, Some(2)),
            ("three replicas, 3, one down, no downgrade", ReplicaCount(3), 2, 1, false, None),
            ("four replicas, 3: master and any two", ReplicaCount(3), 4, 1, false, Some(3)),
            ("four replicas, 3, two down, minimum 2", ReplicaCount(3), 2, 2, true, Some(2)),
            ("four replicas, 3, three down, minimum 2", ReplicaCount(3), 1, 2, true, None),
        ];
        for (case, p, in_sync, min, down, want) in cases {
            assert_eq!(needed_replicas(p, in_sync, min, down), want, "{case}");
        }
    }

    /// Seed 000's example: members A (leader), B, C; B has fsynced the
    /// batch, C is connected but behind.
    #[test]
    fn seed_000_a_b_c() {
        let in_sync = [b(1), b(2), b(3)];
        let acks = [ack(2, 60, Some(60)), ack(3, 40, Some(40))];
        let mut obs = base(&acks, &in_sync);
        obs.durable = true;
        obs.eligible = E12;
        obs.policy = AckPolicy::ReplicaCount(2);
        assert_eq!(
            decide_replication(&obs),
            ReplicationDecision::Ack {
                offset: o(60),
                durability: Durability {
                    replicas: 2,
                    on_disk: true
                }
            },
            "A and B suffice for ReplicaCount(2)"
        );
        obs.policy = AckPolicy::AllInSyncSet;
        obs.eligible = &in_sync;
        assert_eq!(
            decide_replication(&obs),
            ReplicationDecision::Wait,
            "AllInSyncSet needs C too"
        );
    }

    type Change = Box<dyn Fn(&mut ReplicationObservation)>;
    type Case = (&'static str, Change, ReplicationDecision);

    #[test]
    fn decision_table() {
        let in_sync = [b(1), b(2), b(3)];
        let all_at = |x| [ack(2, x, Some(x)), ack(3, x, Some(x))];
        let full = all_at(100);
        let cases: Vec<Case> = vec![
            (
                "all in-sync hold it",
                Box::new(|_| {}),
                ReplicationDecision::Ack {
                    offset: o(100),
                    durability: Durability {
                        replicas: 3,
                        on_disk: false,
                    },
                },
            ),
            (
                "another epoch",
                Box::new(|obs| obs.leading_epoch = Some(LeaderEpoch::new(4))),
                ReplicationDecision::Reject(ErrorCode::NotLeaderOrFollower),
            ),
            (
                "not leading",
                Box::new(|obs| obs.leading_epoch = None),
                ReplicationDecision::Reject(ErrorCode::NotLeaderOrFollower),
            ),
            (
                "lease lapsed",
                Box::new(|obs| obs.lease_valid = false),
                ReplicationDecision::Reject(ErrorCode::NotLeaderOrFollower),
            ),
            (
                "in-sync set below min",
                Box::new(|obs| {
                    obs.in_sync = ONE;
                    obs.eligible = ONE;
                }),
                ReplicationDecision::Reject(ErrorCode::NotEnoughReplicasAfterAppend),
            ),
            (
                "HW short",
                Box::new(|obs| obs.high_watermark = o(49)),
                ReplicationDecision::Wait,
            ),
            (
                "durable: a follower has not fsynced",
                Box::new(|obs| obs.durable = true),
                ReplicationDecision::Ack {
                    offset: o(100),
                    durability: Durability {
                        replicas: 3,
                        on_disk: true,
                    },
                },
            ),
            (
                "local durable: the leader has not fsynced",
                Box::new(|obs| {
                    obs.policy = AckPolicy::LocalDurable;
                    obs.leader_durable = o(49);
                }),
                ReplicationDecision::Wait,
            ),
            (
                "an eligible replica lacks it",
                Box::new(|obs| {
                    obs.policy = AckPolicy::ReplicaCount(2);
                    obs.eligible = E14;
                }),
                ReplicationDecision::Wait,
            ),
        ];
        for (what, change, want) in cases {
            let mut obs = base(&full, &in_sync);
            change(&mut obs);
            assert_eq!(decide_replication(&obs), want, "{what}");
        }
        // Durable acks count fsynced offsets only.
        let lagging_disk = [ack(2, 100, Some(40)), ack(3, 100, None)];
        let mut obs = base(&lagging_disk, &in_sync);
        obs.durable = true;
        assert_eq!(decide_replication(&obs), ReplicationDecision::Wait);
        // ...and with ReplicaCount(2), one follower's fsync is enough.
        let one_on_disk = all_at(100);
        let mut obs = base(&one_on_disk, &in_sync);
        obs.durable = true;
        obs.policy = AckPolicy::ReplicaCount(2);
        obs.leader_durable = o(70);
        assert_eq!(
            decide_replication(&obs),
            ReplicationDecision::Ack {
                offset: o(70),
                durability: Durability {
                    replicas: 3,
                    on_disk: true
                }
            }
        );
    }

    #[test]
    fn quorum_evictions_table() {
        let lag = |id, leo: Option<i64>, caught_up| FollowerLag {
            replica: b(id),
            leo: leo.map(o),
            last_caught_up_ms: caught_up,
        };
        // need, leader LEO 100, HW, followers, now 1000, eviction 200 -> evicted
        type EvictionCase = (&'static str, usize, i64, Vec<FollowerLag>, Vec<BrokerId>);
        let cases: Vec<EvictionCase> = vec![
            (
                "a stalled follower holds up what two replicas hold: out",
                2,
                40,
                vec![lag(2, Some(100), 1000), lag(3, Some(40), 500)],
                vec![b(3)],
            ),
            (
                "stalled, but not for long enough",
                2,
                40,
                vec![lag(2, Some(100), 1000), lag(3, Some(40), 900)],
                vec![],
            ),
            (
                "nothing waits: the HW is at the quorum offset",
                2,
                100,
                vec![lag(2, Some(100), 1000), lag(3, Some(100), 0)],
                vec![],
            ),
            (
                "both followers behind: the quorum is the faster one",
                2,
                40,
                vec![lag(2, Some(70), 100), lag(3, Some(40), 100)],
                vec![b(3)],
            ),
            (
                "never below need",
                3,
                40,
                vec![lag(2, Some(70), 100), lag(3, Some(40), 100)],
                vec![],
            ),
            (
                "a follower that never fetched counts as behind",
                2,
                40,
                vec![lag(2, Some(100), 1000), lag(3, None, 0)],
                vec![b(3)],
            ),
            (
                "five replicas, need 3: the two slowest go",
                3,
                10,
                vec![
                    lag(2, Some(100), 1000),
                    lag(3, Some(90), 1000),
                    lag(4, Some(20), 0),
                    lag(5, Some(10), 0),
                ],
                vec![b(5), b(4)],
            ),
        ];
        for (what, need, hw, followers, want) in cases {
            assert_eq!(
                quorum_evictions(need, o(100), o(hw), &followers, 1000, 200),
                want,
                "{what}"
            );
        }
    }

    proptest! {
        /// Eviction never leaves fewer than `need` members, and never
        /// evicts a follower that holds the quorum offset.
        #[test]
        fn evictions_keep_the_quorum(
            need in 2usize..5,
            hw in 0i64..100,
            followers in proptest::collection::vec((proptest::option::of(0i64..=100), 0i64..2000), 0..5),
        ) {
            let followers: Vec<FollowerLag> = followers
                .into_iter()
                .enumerate()
                .map(|(i, (leo, t))| FollowerLag {
                    replica: b(i as i32 + 2),
                    leo: leo.map(o),
                    last_caught_up_ms: t,
                })
                .collect();
            let out = quorum_evictions(need, o(100), o(hw), &followers, 2000, 200);
            let members = followers.len() + 1;
            prop_assert!(out.is_empty() || members - out.len() >= need);
            let mut leos: Vec<Offset> = std::iter::once(o(100))
                .chain(followers.iter().filter_map(|f| f.leo))
                .collect();
            leos.sort_unstable_by(|a, b| b.cmp(a));
            if let Some(q) = leos.get(need - 1) {
                for f in &followers {
                    if out.contains(&f.replica) {
                        prop_assert!(f.leo.is_none_or(|l| l < *q));
                        prop_assert!(2000 - f.last_caught_up_ms > 200);
                    }
                }
            }
        }
    }

    #[test]
    fn repeated_and_outside_acks() {
        let in_sync = [b(1), b(2), b(3)];
        // Replica 2 acks three times, replica 9 (not in sync) acks: with
        // ReplicaCount(3) that is still only two replicas.
        let acks = [
            ack(2, 80, None),
            ack(2, 90, None),
            ack(2, 70, None),
            ack(9, 100, None),
        ];
        let mut obs = base(&acks, &in_sync);
        obs.policy = AckPolicy::ReplicaCount(3);
        obs.eligible = E12;
        assert_eq!(decide_replication(&obs), ReplicationDecision::Wait);
        obs.policy = AckPolicy::ReplicaCount(2);
        assert_eq!(
            decide_replication(&obs),
            ReplicationDecision::Ack {
                offset: o(90),
                durability: Durability {
                    replicas: 2,
                    on_disk: false
                }
            }
        );
    }

    type ArbObs = (
        Vec<ReplicaAck>,
        Vec<BrokerId>,
        Vec<BrokerId>,
        i64,
        i64,
        i64,
        u8,
        bool,
        bool,
        bool,
        usize,
        i64,
    );

    fn arb_obs() -> impl Strategy<Value = ArbObs> {
        (
            proptest::collection::vec((2i32..6, 0i64..120, proptest::option::of(0i64..120)), 0..10)
                .prop_map(|v| {
                    v.into_iter()
                        .map(|(id, off, d)| ack(id, off, d.map(|d| d.min(off))))
                        .collect::<Vec<_>>()
                }),
            proptest::collection::btree_set(2i32..6, 0..4)
                .prop_map(|s| s.into_iter().map(b).collect::<Vec<_>>()),
            proptest::collection::btree_set(2i32..6, 0..4)
                .prop_map(|s| s.into_iter().map(b).collect::<Vec<_>>()),
            60i64..120,
            0i64..120,
            0i64..120,
            0u8..4,
            any::<bool>(),
            any::<bool>(),
            any::<bool>(),
            1usize..4,
            0i64..120,
        )
    }

    fn policy_of(k: u8) -> AckPolicy {
        match k {
            0 => AckPolicy::AllInSyncSet,
            1 => AckPolicy::ReplicaCount(2),
            2 => AckPolicy::ReplicaCount(3),
            _ => AckPolicy::LocalDurable,
        }
    }

    proptest! {
        /// Never an Ack under stale authority; never an Ack of an offset
        /// that fewer than the policy's count of distinct in-sync replicas
        /// hold (by the policy's measure), or that an eligible replica
        /// lacks, or past the HW.
        #[test]
        fn an_ack_is_always_proven(
            (acks, followers, eligible_followers, leo, durable_gap, hw, policy, durable, downgrade, lease, min, required)
                in arb_obs(),
            stale in any::<bool>(),
        ) {
            let mut in_sync = vec![b(1)];
            in_sync.extend(followers.iter().copied());
            let mut eligible = vec![b(1)];
            eligible.extend(eligible_followers.iter().copied().filter(|r| in_sync.contains(r)));
            let obs = ReplicationObservation {
                authority_epoch: LeaderEpoch::new(5),
                leading_epoch: Some(LeaderEpoch::new(if stale { 6 } else { 5 })),
                lease_valid: lease,
                policy: policy_of(policy),
                durable,
                downgrade,
                min_in_sync: min,
                leader: b(1),
                leader_leo: o(leo),
                leader_durable: o((leo - durable_gap).max(0)),
                acks: &acks,
                in_sync: &in_sync,
                eligible: &eligible,
                high_watermark: o(hw.min(leo)),
                required_offset: o(required + 1),
            };
            if let ReplicationDecision::Ack { offset, durability } = decide_replication(&obs) {
                prop_assert!(!stale && lease);
                prop_assert!(offset >= obs.required_offset);
                prop_assert!(offset <= obs.high_watermark);
                let on_disk = durable || obs.policy == AckPolicy::LocalDurable;
                prop_assert_eq!(durability.on_disk, on_disk);
                // Distinct in-sync holders, counted by hand.
                let holds = |r: BrokerId| -> bool {
                    if r == b(1) {
                        let m = if on_disk { obs.leader_durable } else { obs.leader_leo };
                        return m >= offset;
                    }
                    acks.iter().any(|a| a.replica == r && if on_disk {
                        a.durable_offset.is_some_and(|d| d >= offset)
                    } else {
                        a.offset >= offset
                    })
                };
                let holders = in_sync.iter().filter(|r| holds(**r)).count();
                let need = needed_replicas(obs.policy, in_sync.len(), min, downgrade)
                    .expect("an Ack needs a large enough in-sync set");
                prop_assert!(holders >= need, "holders {} need {}", holders, need);
                prop_assert!(holds(b(1)), "the leader holds it");
                for r in &eligible {
                    let leo = if *r == b(1) { Some(obs.leader_leo) } else {
                        acks.iter().filter(|a| a.replica == *r).map(|a| a.offset).max()
                    };
                    prop_assert!(leo.is_some_and(|l| l >= offset), "eligible {:?} holds it", r);
                }
            }
        }

        /// With the sets fixed, acknowledgements only grow as replicas
        /// report more (and the HW moves up): the proven offset never goes
        /// back.
        #[test]
        fn proven_offsets_are_monotonic(
            (acks, followers, _e, leo, _g, _hw, policy, durable, downgrade, _l, min, _r) in arb_obs(),
            more in proptest::collection::vec((2i32..6, 0i64..40, 0i64..40), 1..10),
        ) {
            let mut in_sync = vec![b(1)];
            in_sync.extend(followers.iter().copied());
            let eligible = in_sync.clone();
            let mut acks = acks;
            let mut last: Option<Offset> = None;
            let mut leo = leo;
            for (id, step, dstep) in more {
                leo += 5;
                let prev = acks.iter().filter(|a| a.replica == b(id)).map(|a| (a.offset, a.durable_offset)).max();
                let (off, d) = prev.unwrap_or((o(0), None));
                let off = o((off.get() + step).min(leo));
                let d = Some(o((d.map_or(0, |d| d.get()) + dstep).min(off.get())));
                acks.push(ReplicaAck { replica: b(id), offset: off, durable_offset: d });
                let obs = ReplicationObservation {
                    authority_epoch: LeaderEpoch::new(5),
                    leading_epoch: Some(LeaderEpoch::new(5)),
                    lease_valid: true,
                    policy: policy_of(policy),
                    durable,
                    downgrade,
                    min_in_sync: min,
                    leader: b(1),
                    leader_leo: o(leo),
                    leader_durable: o(leo),
                    acks: &acks,
                    in_sync: &in_sync,
                    eligible: &eligible,
                    high_watermark: o(leo),
                    required_offset: o(1),
                };
                if let ReplicationDecision::Ack { offset, .. } = decide_replication(&obs) {
                    if let Some(l) = last {
                        prop_assert!(offset >= l, "{:?} after {:?}", offset, l);
                    }
                    last = Some(offset);
                }
            }
        }

        /// AllInSyncSet in memory is Kafka's acks=all: the same verdict as
        /// the HW rule (`rules::ack_decision`) whenever the HW is what the
        /// in-sync set holds.
        #[test]
        fn all_in_sync_set_is_kafkas_acks_all(
            follower_leos in proptest::collection::vec(0i64..100, 0..4),
            min in 1usize..4,
            required in 1i64..100,
            stale in any::<bool>(),
        ) {
            let leo = 100;
            let in_sync: Vec<BrokerId> = std::iter::once(b(1))
                .chain((0..follower_leos.len()).map(|i| b(i as i32 + 2)))
                .collect();
            let acks: Vec<ReplicaAck> = follower_leos
                .iter()
                .enumerate()
                .map(|(i, l)| ack(i as i32 + 2, *l, None))
                .collect();
            let hw = if in_sync.len() < min { 0 } else {
                follower_leos.iter().copied().min().unwrap_or(leo).min(leo)
            };
            let mut obs = base(&acks, &in_sync);
            obs.min_in_sync = min;
            obs.leader_leo = o(leo);
            obs.high_watermark = o(hw);
            obs.required_offset = o(required);
            if stale {
                obs.leading_epoch = Some(LeaderEpoch::new(9));
            }
            let new = decide_replication(&obs);
            let old = ack_decision(&AckObservation {
                authority_epoch: obs.authority_epoch,
                current_leader_epoch: obs.leading_epoch.unwrap_or(LeaderEpoch::new(0)),
                is_leader: true,
                local_leo: o(leo),
                hw: o(hw),
                required_offset: o(required),
                isr_len: in_sync.len(),
                effective_min_isr: min,
            });
            match (old, new) {
                (AckDecision::Reject(a), ReplicationDecision::Reject(b)) => prop_assert_eq!(a, b),
                (AckDecision::Wait, ReplicationDecision::Wait) => {}
                (AckDecision::Ack { error: None, .. }, ReplicationDecision::Ack { .. }) => {}
                (AckDecision::Ack { error: Some(a), .. }, ReplicationDecision::Reject(b)) => prop_assert_eq!(a, b),
                (a, b) => prop_assert!(false, "old {:?} new {:?}", a, b),
            }
        }
    }
}
