//! The consumer protocol's values: topic ids, assignments, epochs, member
//! states.

use std::collections::{BTreeMap, BTreeSet};

/// A topic's id (Kafka's topic `Uuid`).
pub type TopicId = uuid::Uuid;

/// Partitions by topic: a target or a member's current assignment.
pub type Assignment = BTreeMap<TopicId, BTreeSet<i32>>;

/// A group, assignment or member epoch. Member epochs below zero are
/// KIP-848's signals: [`Epoch::LEAVE`] and [`Epoch::STATIC_LEAVE`].
#[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Default)]
pub struct Epoch(i32);

impl Epoch {
    pub const ZERO: Epoch = Epoch(0);
    /// A member leaving for good (and a member no longer in the group).
    pub const LEAVE: Epoch = Epoch(-1);
    /// A static member leaving for now: its assignment is kept for its
    /// instance id until its session ends.
    pub const STATIC_LEAVE: Epoch = Epoch(-2);

    pub const fn new(value: i32) -> Epoch {
        Epoch(value)
    }

    pub const fn get(self) -> i32 {
        self.0
    }

    /// The epoch after this one.
    pub fn next(self) -> Epoch {
        Epoch(self.0.saturating_add(1))
    }
}

/// Where a member is on its way to its target (Kafka's `MemberState`,
/// with its record values).
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum MemberState {
    /// At its target epoch with every partition of it.
    Stable,
    /// Waiting for the member to give up partitions that are leaving it.
    UnrevokedPartitions,
    /// At the target epoch, waiting for partitions other members still own.
    UnreleasedPartitions,
    /// A state this version does not know (from a record).
    Unknown,
}

impl MemberState {
    /// The record's value.
    pub fn to_wire(self) -> i8 {
        match self {
            MemberState::Stable => 0,
            MemberState::UnrevokedPartitions => 1,
            MemberState::UnreleasedPartitions => 2,
            MemberState::Unknown => 127,
        }
    }

    pub fn from_wire(v: i8) -> MemberState {
        match v {
            0 => MemberState::Stable,
            1 => MemberState::UnrevokedPartitions,
            2 => MemberState::UnreleasedPartitions,
            _ => MemberState::Unknown,
        }
    }
}

/// The partitions of `a` (each topic with its set), counted.
pub fn partition_count(a: &Assignment) -> usize {
    a.values().map(BTreeSet::len).sum()
}
