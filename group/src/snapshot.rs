//! What the coordinator persists about a group (Kafka's `GroupMetadataValue`,
//! keyed by the group id) and reloads after a coordinator failover.
//!
//! The serde field names are the stable format; new fields must come with
//! `#[serde(default)]`. Like Kafka, a member keeps only its metadata for the
//! selected protocol (`subscription`): a loaded member supports that one
//! protocol until it joins again.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A group's persisted metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMetadataSnapshot {
    /// `None` for a group that never had members.
    pub protocol_type: Option<String>,
    pub generation_id: i32,
    /// `None` when the group is Empty.
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    /// Time of the group's last state change (Kafka's `currentStateTimestamp`,
    /// used by offset expiration of Empty groups).
    pub current_state_timestamp_ms: Option<i64>,
    pub members: Vec<MemberSnapshot>,
}

/// A member as persisted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberSnapshot {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// The member's metadata for the group's protocol.
    #[serde(with = "serde_bytes_compat")]
    pub subscription: Bytes,
    #[serde(with = "serde_bytes_compat")]
    pub assignment: Bytes,
}

/// A snapshot that cannot be a group (Kafka would fail the load).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnapshotError {
    #[error("group has members but no protocol")]
    MembersWithoutProtocol,
    #[error("group has members but no protocol type")]
    MembersWithoutProtocolType,
    #[error("member id {0} appears twice")]
    DuplicateMember(String),
    #[error("group.instance.id {0} appears twice")]
    DuplicateInstance(String),
    #[error("leader {0:?} is not a member")]
    LeaderNotMember(Option<String>),
}

/// `Bytes` as serde bytes, read back from bytes or from a sequence of u8 (so
/// self-describing formats that encode bytes as arrays, e.g. JSON, work), and
/// without turning on the `bytes/serde` feature for the whole workspace.
mod serde_bytes_compat {
    use std::fmt;

    use bytes::Bytes;
    use serde::de::{SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &Bytes, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Bytes, D::Error> {
        deserializer.deserialize_byte_buf(BytesVisitor)
    }

    struct BytesVisitor;

    impl<'de> Visitor<'de> for BytesVisitor {
        type Value = Bytes;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("bytes or a sequence of u8")
        }

        fn visit_bytes<E>(self, v: &[u8]) -> Result<Bytes, E> {
            Ok(Bytes::copy_from_slice(v))
        }

        fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Bytes, E> {
            Ok(Bytes::from(v))
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1 << 16));
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(Bytes::from(out))
        }
    }

    #[cfg(test)]
    mod tests {
        use serde::de::value::{BytesDeserializer, Error, SeqDeserializer};

        #[test]
        fn reads_bytes_and_sequences() {
            let from_bytes = super::deserialize(BytesDeserializer::<Error>::new(b"abc")).unwrap();
            assert_eq!(&from_bytes[..], b"abc");
            let seq = SeqDeserializer::<_, Error>::new(vec![1u8, 2, 3].into_iter());
            assert_eq!(&super::deserialize(seq).unwrap()[..], &[1, 2, 3]);
        }
    }
}
