//! Domain newtypes for the integers Kafka's protocol carries: offsets, epochs
//! and ids. Each wraps the wire integer of its field, so that an offset cannot
//! be passed where an epoch is meant, and a missing value is `Option::None`
//! rather than Kafka's `-1`. Conversion to and from the wire integer happens at
//! the protocol edge: [`Offset::from_wire`] reads a field whose negative values
//! mean "none", [`Offset::to_wire`] writes an `Option` back as `-1`.
//!
//! With the `serde` feature each newtype serialises as its bare integer
//! (`#[serde(transparent)]`), so a serialised record keeps the bytes it had
//! when the field was an integer. Deserialising does not check the sign, as
//! the integer field did not: a value is only as valid as what was written.

use std::fmt;
use std::sync::Arc;

macro_rules! wire_newtype {
    ($(#[$doc:meta])* $name:ident($int:ty)) => {
        $(#[$doc])*
        #[derive(Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        #[cfg_attr(
            feature = "serde",
            derive(serde::Serialize, serde::Deserialize),
            serde(transparent)
        )]
        #[repr(transparent)]
        pub struct $name($int);

        impl $name {
            /// A value that is known to be present (never the wire's "none").
            #[inline]
            pub const fn new(value: $int) -> Self {
                debug_assert!(value >= 0, "a negative value is the wire's 'none'");
                $name(value)
            }

            /// The wire integer.
            #[inline]
            pub const fn get(self) -> $int {
                self.0
            }

            /// A wire field where a negative value (Kafka writes -1) means none.
            #[inline]
            pub const fn from_wire(value: $int) -> Option<Self> {
                if value >= 0 {
                    Some($name(value))
                } else {
                    None
                }
            }

            /// The wire form of an optional value: `-1` for none.
            #[inline]
            pub const fn to_wire(value: Option<Self>) -> $int {
                match value {
                    Some(v) => v.0,
                    None => -1,
                }
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.0)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                fmt::Display::fmt(&self.0, f)
            }
        }
    };
}

wire_newtype! {
    /// A position in a partition's log: a record's offset, or an end such as
    /// the LEO, HW or LSO (the offset of the next record).
    Offset(i64)
}

wire_newtype! {
    /// A partition's leader epoch: grows with every leader election.
    LeaderEpoch(i32)
}

wire_newtype! {
    /// A partition's epoch: grows with every change of its registration
    /// (leader, ISR, replicas) committed by the controller.
    PartitionEpoch(i32)
}

wire_newtype! {
    /// A broker's `node.id`.
    BrokerId(i32)
}

wire_newtype! {
    /// The epoch the controller gave a broker at registration (KIP-903): a
    /// restarted broker gets a new one.
    BrokerEpoch(i64)
}

wire_newtype! {
    /// An idempotent or transactional producer's id.
    ProducerId(i64)
}

wire_newtype! {
    /// A producer id's epoch: a transactional producer's is bumped to fence
    /// older instances.
    ProducerEpoch(i16)
}

wire_newtype! {
    /// A batch's base sequence within one producer id and epoch.
    Sequence(i32)
}

impl Offset {
    pub const ZERO: Offset = Offset(0);

    /// The offset `n` records on.
    #[inline]
    pub const fn plus(self, n: i64) -> Offset {
        Offset::new(self.0 + n)
    }

    /// The offset after this one.
    #[inline]
    pub const fn next(self) -> Offset {
        self.plus(1)
    }

    /// How many offsets `self` is past `earlier` (negative if before).
    #[inline]
    pub const fn since(self, earlier: Offset) -> i64 {
        self.0 - earlier.0
    }
}

impl LeaderEpoch {
    pub const ZERO: LeaderEpoch = LeaderEpoch(0);

    /// The epoch of the next election.
    #[inline]
    pub const fn next(self) -> LeaderEpoch {
        LeaderEpoch::new(self.0 + 1)
    }
}

impl PartitionEpoch {
    pub const ZERO: PartitionEpoch = PartitionEpoch(0);

    /// The epoch of the next committed change.
    #[inline]
    pub const fn next(self) -> PartitionEpoch {
        PartitionEpoch::new(self.0 + 1)
    }
}

impl ProducerEpoch {
    pub const ZERO: ProducerEpoch = ProducerEpoch(0);
    /// The highest epoch a producer id can have.
    pub const MAX: ProducerEpoch = ProducerEpoch(i16::MAX);

    /// The epoch after a bump (fencing the previous one).
    #[inline]
    pub const fn next(self) -> ProducerEpoch {
        ProducerEpoch::new(self.0 + 1)
    }

    /// [`next`](Self::next), staying at [`MAX`](Self::MAX) (Kafka bumps a
    /// short with saturation where the id is rotated separately).
    #[inline]
    pub const fn saturating_next(self) -> ProducerEpoch {
        ProducerEpoch::new(self.0.saturating_add(1))
    }
}

impl Sequence {
    pub const ZERO: Sequence = Sequence(0);

    /// The sequence after this one: `i32::MAX` wraps to 0, as Kafka's
    /// producers and brokers count.
    #[inline]
    pub const fn next_wrapping(self) -> Sequence {
        if self.0 == i32::MAX {
            Sequence::ZERO
        } else {
            Sequence::new(self.0 + 1)
        }
    }
}

/// A topic's partition by name, as the protocol addresses it.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: Arc<str>,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<Arc<str>>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Debug for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_none_is_negative_and_round_trips() {
        assert_eq!(Offset::from_wire(-1), None);
        assert_eq!(Offset::from_wire(0), Some(Offset::ZERO));
        assert_eq!(Offset::to_wire(None), -1);
        assert_eq!(Offset::to_wire(Offset::from_wire(42)), 42);
        assert_eq!(LeaderEpoch::from_wire(-1), None);
        assert_eq!(ProducerEpoch::to_wire(Some(ProducerEpoch::new(7))), 7);
        assert_eq!(BrokerId::from_wire(i32::MIN), None);
    }

    #[test]
    fn offsets_order_and_count() {
        let a = Offset::new(10);
        assert!(a < a.next());
        assert_eq!(a.plus(5).since(a), 5);
        assert_eq!(a.since(a.plus(5)), -5);
        assert_eq!(LeaderEpoch::ZERO.next(), LeaderEpoch::new(1));
    }

    #[test]
    fn sequences_wrap_and_epochs_saturate() {
        assert_eq!(Sequence::new(41).next_wrapping(), Sequence::new(42));
        assert_eq!(Sequence::new(i32::MAX).next_wrapping(), Sequence::ZERO);
        assert_eq!(Sequence::from_wire(-1), None);
        assert_eq!(ProducerEpoch::ZERO.saturating_next(), ProducerEpoch::new(1));
        assert_eq!(ProducerEpoch::MAX.saturating_next(), ProducerEpoch::MAX);
        // `None` (the wire's -1) sorts below every epoch, as -1 does.
        assert!(None < Some(ProducerEpoch::ZERO));
    }

    #[test]
    fn topic_partition_prints_as_kafka_does() {
        assert_eq!(TopicPartition::new("orders", 3).to_string(), "orders-3");
    }
}
