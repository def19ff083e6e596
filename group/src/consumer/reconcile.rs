//! One member's way to its target assignment (Kafka's
//! `CurrentAssignmentBuilder` for consumer groups): a pure function of the
//! member's state, its target, what it reports owning, and which partitions
//! other members still hold.
//!
//! The rule that makes KIP-848 safe: a partition leaving a member is first
//! *revoked* (the member stays at its epoch, UNREVOKED_PARTITIONS, until a
//! heartbeat no longer lists it), and a partition coming to a member is
//! handed out only once no other member holds it, assigned or pending
//! revocation (until then: UNRELEASED_PARTITIONS).

use std::collections::{BTreeMap, BTreeSet};

use super::types::{Assignment, Epoch, MemberState, TopicId};

/// A member's assignment state (the CurrentMemberAssignment record).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberAssignment {
    pub epoch: Epoch,
    pub previous_epoch: Epoch,
    pub state: MemberState,
    /// What the member has been given (and the coordinator reports).
    pub assigned: Assignment,
    /// Leaving it: it holds them until a heartbeat no longer lists them.
    pub pending_revocation: Assignment,
    /// The member epoch at which each assigned partition came to it
    /// (KIP-1251: a commit from an earlier epoch is accepted for the
    /// partitions it already had then). Missing: the member's epoch.
    pub assigned_at: BTreeMap<(TopicId, i32), Epoch>,
}

impl MemberAssignment {
    /// A member that just joined: epoch 0, nothing assigned.
    pub fn joining() -> MemberAssignment {
        MemberAssignment {
            epoch: Epoch::ZERO,
            previous_epoch: Epoch::LEAVE,
            state: MemberState::Stable,
            assigned: Assignment::new(),
            pending_revocation: Assignment::new(),
            assigned_at: BTreeMap::new(),
        }
    }

    /// The epoch at which `(topic, partition)` was assigned, if it is.
    pub fn assignment_epoch(&self, topic: TopicId, partition: i32) -> Option<Epoch> {
        let assigned = self.assigned.get(&topic)?.contains(&partition);
        assigned.then(|| {
            self.assigned_at
                .get(&(topic, partition))
                .copied()
                .unwrap_or(self.epoch)
        })
    }

    /// `assigned_at` for `assigned`: what it had keeps its epoch, the rest
    /// came at `epoch`.
    fn epochs_for(&self, assigned: &Assignment, epoch: Epoch) -> BTreeMap<(TopicId, i32), Epoch> {
        assigned
            .iter()
            .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
            .map(|(t, p)| ((t, p), self.assignment_epoch(t, p).unwrap_or(epoch)))
            .collect()
    }

    fn with_epoch(&self, epoch: Epoch) -> (Epoch, Epoch) {
        (epoch, self.epoch)
    }

    /// Every partition it holds: assigned or pending revocation.
    pub fn holds(&self) -> impl Iterator<Item = (TopicId, i32)> + '_ {
        self.assigned
            .iter()
            .chain(&self.pending_revocation)
            .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
    }
}

/// What one reconciliation step sees besides the member.
pub struct Step<'a> {
    pub target_epoch: Epoch,
    pub target: &'a Assignment,
    /// The topics the member subscribes to that exist.
    pub subscribed: &'a BTreeSet<TopicId>,
    /// The partitions the heartbeat reports owned (None: not sent).
    pub owned: Option<&'a Assignment>,
    /// Its subscription changed in this heartbeat.
    pub subscription_changed: bool,
    /// Whether another member holds a partition (assigned or pending
    /// revocation).
    pub held_by_other: &'a dyn Fn(TopicId, i32) -> bool,
}

/// The member reported an impossible state (UNKNOWN while owning
/// partitions): it must rejoin (FENCED_MEMBER_EPOCH).
#[derive(Debug, PartialEq, Eq)]
pub struct Fenced;

impl Step<'_> {
    /// Whether the member still owns any of `s`: not reporting counts as
    /// owning.
    fn owns_any(&self, s: &Assignment) -> bool {
        let Some(owned) = self.owned else {
            return true;
        };
        s.iter().any(|(t, ps)| {
            owned
                .get(t)
                .is_some_and(|o| ps.iter().any(|p| o.contains(p)))
        })
    }
}

/// The member after one heartbeat.
pub fn reconcile(m: &MemberAssignment, s: &Step) -> Result<MemberAssignment, Fenced> {
    match m.state {
        MemberState::Stable if m.epoch != s.target_epoch => Ok(compute_next(m, s, m.epoch)),
        MemberState::Stable if s.subscription_changed => Ok(drop_unsubscribed(m, s)),
        MemberState::Stable => Ok(m.clone()),
        MemberState::UnrevokedPartitions => {
            if s.owns_any(&m.pending_revocation) {
                Ok(if s.subscription_changed {
                    drop_unsubscribed(m, s)
                } else {
                    m.clone()
                })
            } else {
                let e = Epoch::new(m.epoch.get().saturating_add(1).min(s.target_epoch.get()));
                Ok(compute_next(m, s, e))
            }
        }
        MemberState::UnreleasedPartitions => Ok(compute_next(m, s, m.epoch)),
        MemberState::Unknown => match s.owned {
            Some(o) if o.values().all(BTreeSet::is_empty) => Ok(compute_next(m, s, s.target_epoch)),
            _ => Err(Fenced),
        },
    }
}

fn compute_next(m: &MemberAssignment, s: &Step, revoking_epoch: Epoch) -> MemberAssignment {
    let empty = BTreeSet::new();
    let topics: BTreeSet<TopicId> = s.target.keys().chain(m.assigned.keys()).copied().collect();
    let mut keep = Assignment::new();
    let mut revoke = Assignment::new();
    let mut add = Assignment::new();
    let mut unreleased = false;
    for t in topics {
        let target = if s.subscribed.contains(&t) {
            s.target.get(&t).unwrap_or(&empty)
        } else {
            &empty
        };
        let assigned = m.assigned.get(&t).unwrap_or(&empty);
        let mine_pending = m.pending_revocation.get(&t).unwrap_or(&empty);
        let k: BTreeSet<i32> = assigned.intersection(target).copied().collect();
        let r: BTreeSet<i32> = assigned.difference(&k).copied().collect();
        let mut a = BTreeSet::new();
        for p in target.difference(&k) {
            // Its own pending partition is free to come back to it.
            if (s.held_by_other)(t, *p) && !mine_pending.contains(p) {
                unreleased = true;
            } else {
                a.insert(*p);
            }
        }
        if !k.is_empty() {
            keep.insert(t, k);
        }
        if !r.is_empty() {
            revoke.insert(t, r);
        }
        if !a.is_empty() {
            add.insert(t, a);
        }
    }
    if !revoke.is_empty() && s.owns_any(&revoke) {
        let (epoch, previous_epoch) = m.with_epoch(revoking_epoch);
        return MemberAssignment {
            epoch,
            previous_epoch,
            state: MemberState::UnrevokedPartitions,
            assigned_at: m.epochs_for(&keep, epoch),
            assigned: keep,
            pending_revocation: revoke,
        };
    }
    let (epoch, previous_epoch) = m.with_epoch(s.target_epoch);
    for (t, ps) in add {
        keep.entry(t).or_default().extend(ps);
    }
    MemberAssignment {
        epoch,
        previous_epoch,
        state: if unreleased {
            MemberState::UnreleasedPartitions
        } else {
            MemberState::Stable
        },
        assigned_at: m.epochs_for(&keep, epoch),
        assigned: keep,
        pending_revocation: Assignment::new(),
    }
}

/// The subscription changed at the member's target epoch: partitions of
/// topics it no longer subscribes to are revoked now.
fn drop_unsubscribed(m: &MemberAssignment, s: &Step) -> MemberAssignment {
    let mut assigned = m.assigned.clone();
    let mut pending = m.pending_revocation.clone();
    let mut dropped = Assignment::new();
    assigned.retain(|t, ps| {
        if s.subscribed.contains(t) {
            true
        } else {
            dropped.insert(*t, std::mem::take(ps));
            false
        }
    });
    if dropped.is_empty() {
        return m.clone();
    }
    if s.owns_any(&dropped) {
        for (t, ps) in dropped {
            pending.entry(t).or_default().extend(ps);
        }
        return MemberAssignment {
            epoch: m.epoch,
            previous_epoch: m.previous_epoch,
            state: MemberState::UnrevokedPartitions,
            assigned_at: m.epochs_for(&assigned, m.epoch),
            assigned,
            pending_revocation: pending,
        };
    }
    MemberAssignment {
        assigned_at: m.epochs_for(&assigned, m.epoch),
        assigned,
        ..m.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t() -> TopicId {
        TopicId::from_bytes([7; 16])
    }

    fn a(ps: &[i32]) -> Assignment {
        if ps.is_empty() {
            return Assignment::new();
        }
        Assignment::from([(t(), ps.iter().copied().collect())])
    }

    fn step<'a>(
        target_epoch: i32,
        target: &'a Assignment,
        subscribed: &'a BTreeSet<TopicId>,
        owned: Option<&'a Assignment>,
        held: &'a dyn Fn(TopicId, i32) -> bool,
    ) -> Step<'a> {
        Step {
            target_epoch: Epoch::new(target_epoch),
            target,
            subscribed,
            owned,
            subscription_changed: false,
            held_by_other: held,
        }
    }

    /// (state, epoch, assigned, pending) after a step, as a table.
    #[test]
    fn transitions() {
        let subscribed = BTreeSet::from([t()]);
        let free = |_: TopicId, _: i32| false;
        let p2_held = |_: TopicId, p: i32| p == 2;
        let stable = |epoch: i32, ps: &[i32]| MemberAssignment {
            epoch: Epoch::new(epoch),
            previous_epoch: Epoch::new(epoch - 1),
            state: MemberState::Stable,
            assigned: a(ps),
            pending_revocation: Assignment::new(),
            assigned_at: BTreeMap::new(),
        };
        let unrevoked = MemberAssignment {
            epoch: Epoch::new(3),
            previous_epoch: Epoch::new(3),
            state: MemberState::UnrevokedPartitions,
            assigned: a(&[0]),
            pending_revocation: a(&[1]),
            assigned_at: BTreeMap::new(),
        };
        type Case<'a> = (
            &'a str,
            MemberAssignment,
            Assignment,
            Option<Assignment>,
            &'a dyn Fn(TopicId, i32) -> bool,
            (MemberState, i32, Assignment, Assignment),
        );
        let cases: Vec<Case> = vec![
            (
                "at the target: unchanged",
                stable(4, &[0, 1]),
                a(&[0, 1]),
                Some(a(&[0, 1])),
                &free,
                (MemberState::Stable, 4, a(&[0, 1]), a(&[])),
            ),
            (
                "a new epoch with the same partitions: the epoch moves",
                stable(3, &[0, 1]),
                a(&[0, 1]),
                Some(a(&[0, 1])),
                &free,
                (MemberState::Stable, 4, a(&[0, 1]), a(&[])),
            ),
            (
                "a partition leaves while owned: revoked first, epoch kept",
                stable(3, &[0, 1]),
                a(&[0]),
                Some(a(&[0, 1])),
                &free,
                (MemberState::UnrevokedPartitions, 3, a(&[0]), a(&[1])),
            ),
            (
                "a partition leaves that the member already dropped: straight to the target",
                stable(3, &[0, 1]),
                a(&[0]),
                Some(a(&[0])),
                &free,
                (MemberState::Stable, 4, a(&[0]), a(&[])),
            ),
            (
                "still owning what is revoked: waits",
                unrevoked.clone(),
                a(&[0]),
                Some(a(&[0, 1])),
                &free,
                (MemberState::UnrevokedPartitions, 3, a(&[0]), a(&[1])),
            ),
            (
                "not reporting counts as owning",
                unrevoked.clone(),
                a(&[0]),
                None,
                &free,
                (MemberState::UnrevokedPartitions, 3, a(&[0]), a(&[1])),
            ),
            (
                "revocation acknowledged: on to the target",
                unrevoked,
                a(&[0]),
                Some(a(&[0])),
                &free,
                (MemberState::Stable, 4, a(&[0]), a(&[])),
            ),
            (
                "a partition another member holds: the epoch moves, the partition waits",
                stable(3, &[0]),
                a(&[0, 2]),
                Some(a(&[0])),
                &p2_held,
                (MemberState::UnreleasedPartitions, 4, a(&[0]), a(&[])),
            ),
            (
                "new partitions that are free are given",
                stable(3, &[0]),
                a(&[0, 1, 3]),
                Some(a(&[0])),
                &free,
                (MemberState::Stable, 4, a(&[0, 1, 3]), a(&[])),
            ),
        ];
        for (name, m, target, owned, held, (state, epoch, assigned, pending)) in cases {
            let s = step(4, &target, &subscribed, owned.as_ref(), held);
            let next = reconcile(&m, &s).unwrap();
            assert_eq!(
                (
                    next.state,
                    next.epoch.get(),
                    next.assigned,
                    next.pending_revocation
                ),
                (state, epoch, assigned, pending),
                "{name}"
            );
        }
    }

    #[test]
    fn an_unknown_state_owning_partitions_is_fenced() {
        let subscribed = BTreeSet::from([t()]);
        let free = |_: TopicId, _: i32| false;
        let m = MemberAssignment {
            state: MemberState::Unknown,
            ..MemberAssignment::joining()
        };
        let target = a(&[0]);
        let owned = a(&[1]);
        let s = step(2, &target, &subscribed, Some(&owned), &free);
        assert_eq!(reconcile(&m, &s), Err(Fenced));
    }

    #[test]
    fn unsubscribing_revokes_at_the_same_epoch() {
        let subscribed = BTreeSet::new();
        let free = |_: TopicId, _: i32| false;
        let m = MemberAssignment {
            epoch: Epoch::new(5),
            previous_epoch: Epoch::new(4),
            state: MemberState::Stable,
            assigned: a(&[0, 1]),
            pending_revocation: Assignment::new(),
            assigned_at: BTreeMap::new(),
        };
        let target = a(&[0, 1]);
        let owned = a(&[0, 1]);
        let mut s = step(5, &target, &subscribed, Some(&owned), &free);
        s.subscription_changed = true;
        let next = reconcile(&m, &s).unwrap();
        assert_eq!(next.state, MemberState::UnrevokedPartitions);
        assert_eq!(next.epoch.get(), 5);
        assert_eq!(next.pending_revocation, a(&[0, 1]));
    }
}
