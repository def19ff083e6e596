//! A consumer group's records as Kafka 4.4 writes them to
//! `__consumer_offsets` (its `ConsumerGroup*Key/Value` schemas, in the
//! group coordinator's jar): the key is the record type (i16) and the key
//! fields (i16-length strings); the value is its version (i16, always 0)
//! and the value's fields in the flexible encoding (compact strings and
//! arrays, tagged fields). A tombstone has no value.
//!
//! The few primitives are written here rather than taken from
//! `kafka_protocol`: its compact-string decoder allocates the length a
//! record claims before reading it, and a damaged record must not make the
//! coordinator allocate what it claims.

use std::collections::BTreeMap;

use bytes::{BufMut, Bytes, BytesMut};

use super::reconcile::MemberAssignment;
use super::records::{ClassicMetadata, MemberMetadata, Record};
use super::types::{Assignment, Epoch, MemberState, TopicId};
use crate::records::DecodeError;

const METADATA: i16 = 3;
const PARTITION_METADATA: i16 = 4;
const MEMBER_METADATA: i16 = 5;
const TARGET_ASSIGNMENT_METADATA: i16 = 6;
const TARGET_ASSIGNMENT_MEMBER: i16 = 7;
const CURRENT_MEMBER_ASSIGNMENT: i16 = 8;
const REGULAR_EXPRESSION: i16 = 16;
const VALUE_VERSION: i16 = 0;

/// Whether a `__consumer_offsets` key is a consumer group's record.
pub fn is_consumer_group_key(key: &[u8]) -> bool {
    key.len() >= 2
        && matches!(
            i16::from_be_bytes([key[0], key[1]]),
            METADATA..=CURRENT_MEMBER_ASSIGNMENT | REGULAR_EXPRESSION
        )
}

fn put_str(b: &mut BytesMut, s: &str) {
    let len = s.len().min(i16::MAX as usize);
    b.put_i16(len as i16);
    b.put_slice(&s.as_bytes()[..len]);
}

fn put_uvarint(b: &mut BytesMut, mut v: u32) {
    while v >= 0x80 {
        b.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    b.put_u8(v as u8);
}

fn put_compact_str(b: &mut BytesMut, s: Option<&str>) {
    match s {
        None => put_uvarint(b, 0),
        Some(s) => {
            put_uvarint(b, s.len() as u32 + 1);
            b.put_slice(s.as_bytes());
        }
    }
}

fn put_assignment(b: &mut BytesMut, a: &Assignment) {
    put_assignment_with(b, a, None)
}

/// An assignment, each topic's partitions with the epochs they were
/// assigned at (AssignmentEpochs, tag 0) when `epochs` is given.
fn put_assignment_with(b: &mut BytesMut, a: &Assignment, epochs: Option<&MemberAssignment>) {
    put_uvarint(b, a.len() as u32 + 1);
    for (topic, partitions) in a {
        b.put_slice(topic.as_bytes());
        put_uvarint(b, partitions.len() as u32 + 1);
        for p in partitions {
            b.put_i32(*p);
        }
        match epochs {
            None => put_uvarint(b, 0),
            Some(m) => {
                let mut field = BytesMut::new();
                put_uvarint(&mut field, partitions.len() as u32 + 1);
                for p in partitions {
                    let e = m.assignment_epoch(*topic, *p).unwrap_or(m.epoch);
                    field.put_i32(e.get());
                }
                put_uvarint(b, 1);
                put_uvarint(b, 0);
                put_uvarint(b, field.len() as u32);
                b.put_slice(&field);
            }
        }
    }
}

/// The key and value (None: a tombstone) of `record` for group `group`.
pub fn encode(group: &str, record: &Record) -> (Bytes, Option<Bytes>) {
    let mut key = BytesMut::new();
    let mut value = BytesMut::new();
    value.put_i16(VALUE_VERSION);
    let mut key_of = |kind: i16, member: Option<&str>| {
        key.put_i16(kind);
        put_str(&mut key, group);
        if let Some(m) = member {
            put_str(&mut key, m);
        }
    };
    let tombstone = match record {
        Record::Metadata {
            epoch,
            metadata_hash,
        } => {
            key_of(METADATA, None);
            value.put_i32(epoch.get());
            if *metadata_hash != 0 {
                put_uvarint(&mut value, 1);
                put_uvarint(&mut value, 0);
                put_uvarint(&mut value, 8);
                value.put_u64(*metadata_hash);
            } else {
                put_uvarint(&mut value, 0);
            }
            false
        }
        Record::MemberMetadata(m) => {
            key_of(MEMBER_METADATA, Some(&m.member_id));
            put_compact_str(&mut value, m.instance_id.as_deref());
            put_compact_str(&mut value, m.rack_id.as_deref());
            put_compact_str(&mut value, Some(&m.client_id));
            put_compact_str(&mut value, Some(&m.client_host));
            put_uvarint(&mut value, m.subscribed_topic_names.len() as u32 + 1);
            for n in &m.subscribed_topic_names {
                put_compact_str(&mut value, Some(n));
            }
            put_compact_str(&mut value, m.subscribed_topic_regex.as_deref());
            value.put_i32(m.rebalance_timeout_ms);
            put_compact_str(&mut value, m.server_assignor.as_deref());
            match &m.classic {
                None => put_uvarint(&mut value, 0),
                Some(c) => {
                    // ClassicMemberMetadata, tag 0: a nullable struct.
                    let mut field = BytesMut::new();
                    field.put_i8(1);
                    field.put_i32(c.session_timeout_ms);
                    put_uvarint(&mut field, c.protocols.len() as u32 + 1);
                    for (name, metadata) in &c.protocols {
                        put_compact_str(&mut field, Some(name));
                        put_uvarint(&mut field, metadata.len() as u32 + 1);
                        field.put_slice(metadata);
                        put_uvarint(&mut field, 0);
                    }
                    put_uvarint(&mut field, 0);
                    put_uvarint(&mut value, 1);
                    put_uvarint(&mut value, 0);
                    put_uvarint(&mut value, field.len() as u32);
                    value.put_slice(&field);
                }
            }
            false
        }
        Record::MemberMetadataTombstone { member_id } => {
            key_of(MEMBER_METADATA, Some(member_id));
            true
        }
        Record::TargetAssignmentMetadata { epoch } => {
            key_of(TARGET_ASSIGNMENT_METADATA, None);
            value.put_i32(epoch.get());
            put_uvarint(&mut value, 0);
            false
        }
        Record::TargetAssignmentMember {
            member_id,
            assignment,
        } => {
            key_of(TARGET_ASSIGNMENT_MEMBER, Some(member_id));
            put_assignment(&mut value, assignment);
            put_uvarint(&mut value, 0);
            false
        }
        Record::TargetAssignmentMemberTombstone { member_id } => {
            key_of(TARGET_ASSIGNMENT_MEMBER, Some(member_id));
            true
        }
        Record::CurrentMemberAssignment {
            member_id,
            assignment,
        } => {
            key_of(CURRENT_MEMBER_ASSIGNMENT, Some(member_id));
            value.put_i32(assignment.epoch.get());
            value.put_i32(assignment.previous_epoch.get());
            value.put_i8(assignment.state.to_wire());
            put_assignment_with(&mut value, &assignment.assigned, Some(assignment));
            put_assignment(&mut value, &assignment.pending_revocation);
            put_uvarint(&mut value, 0);
            false
        }
        Record::CurrentMemberAssignmentTombstone { member_id } => {
            key_of(CURRENT_MEMBER_ASSIGNMENT, Some(member_id));
            true
        }
        Record::TargetAssignmentMetadataTombstone => {
            key_of(TARGET_ASSIGNMENT_METADATA, None);
            true
        }
        Record::MetadataTombstone => {
            key_of(METADATA, None);
            true
        }
    };
    (key.freeze(), (!tombstone).then(|| value.freeze()))
}

/// A bounds-checked reader over a record's bytes.
struct Reader<'a> {
    buf: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::Truncated(self.what));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn i8(&mut self) -> Result<i8, DecodeError> {
        Ok(self.take(1)?[0] as i8)
    }

    fn i16(&mut self) -> Result<i16, DecodeError> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32, DecodeError> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        let mut v = [0u8; 8];
        v.copy_from_slice(self.take(8)?);
        Ok(u64::from_be_bytes(v))
    }

    fn uvarint(&mut self) -> Result<u32, DecodeError> {
        let mut v: u32 = 0;
        for i in 0..5 {
            let b = self.take(1)?[0];
            v |= u32::from(b & 0x7f) << (i * 7);
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err(DecodeError::Truncated(self.what))
    }

    fn str(&mut self) -> Result<String, DecodeError> {
        let len = self.i16()?;
        let len = usize::try_from(len).map_err(|_| DecodeError::Truncated(self.what))?;
        let b = self.take(len)?;
        String::from_utf8(b.to_vec()).map_err(|_| DecodeError::Utf8)
    }

    fn compact_str(&mut self) -> Result<Option<String>, DecodeError> {
        match self.uvarint()? {
            0 => Ok(None),
            n => {
                // Taken before anything is allocated: at most what is there.
                let b = self.take(n as usize - 1)?;
                String::from_utf8(b.to_vec())
                    .map(Some)
                    .map_err(|_| DecodeError::Utf8)
            }
        }
    }

    /// A compact array's length (0 for a null array).
    fn count(&mut self) -> Result<usize, DecodeError> {
        Ok((self.uvarint()? as usize).saturating_sub(1))
    }

    fn uuid(&mut self) -> Result<TopicId, DecodeError> {
        let mut b = [0u8; 16];
        b.copy_from_slice(self.take(16)?);
        Ok(TopicId::from_bytes(b))
    }

    /// Tagged fields: `want` reads the ones it knows, the rest are skipped.
    fn tagged(
        &mut self,
        mut want: impl FnMut(u32, &mut Reader<'a>) -> Result<(), DecodeError>,
    ) -> Result<(), DecodeError> {
        for _ in 0..self.uvarint()? {
            let tag = self.uvarint()?;
            let size = self.uvarint()? as usize;
            let mut field = Reader {
                buf: self.take(size)?,
                what: self.what,
            };
            want(tag, &mut field)?;
        }
        Ok(())
    }

    fn assignment(&mut self) -> Result<Assignment, DecodeError> {
        Ok(self.assignment_with_epochs()?.0)
    }

    /// An assignment and the epochs its partitions were assigned at, where
    /// the record has them.
    #[allow(clippy::type_complexity)]
    fn assignment_with_epochs(
        &mut self,
    ) -> Result<(Assignment, BTreeMap<(TopicId, i32), Epoch>), DecodeError> {
        let mut a = Assignment::new();
        let mut epochs = BTreeMap::new();
        for _ in 0..self.count()? {
            let topic = self.uuid()?;
            let mut partitions = Vec::new();
            for _ in 0..self.count()? {
                partitions.push(self.i32()?);
            }
            let mut at = Vec::new();
            // AssignmentEpochs (tag 0, KIP-1251); later tags are skipped.
            self.tagged(|tag, f| {
                if tag == 0 {
                    for _ in 0..f.count()? {
                        at.push(Epoch::new(f.i32()?));
                    }
                }
                Ok(())
            })?;
            if at.len() == partitions.len() {
                epochs.extend(partitions.iter().zip(&at).map(|(p, e)| ((topic, *p), *e)));
            }
            if !partitions.is_empty() {
                a.insert(topic, partitions.into_iter().collect());
            }
        }
        Ok((a, epochs))
    }
}

/// A `__consumer_offsets` record of a consumer group: its group and what
/// it says. `Ok(None)` for the consumer group records Strand keeps no state
/// from (Kafka 4.0's partition metadata, regular expressions).
pub fn decode(key: &[u8], value: Option<&[u8]>) -> Result<Option<(String, Record)>, DecodeError> {
    let mut k = Reader {
        buf: key,
        what: "consumer group key",
    };
    let kind = k.i16()?;
    let group = k.str()?;
    if matches!(kind, PARTITION_METADATA | REGULAR_EXPRESSION) {
        return Ok(None);
    }
    let member = match kind {
        MEMBER_METADATA | TARGET_ASSIGNMENT_MEMBER | CURRENT_MEMBER_ASSIGNMENT => k.str()?,
        METADATA | TARGET_ASSIGNMENT_METADATA => String::new(),
        version => {
            return Err(DecodeError::UnknownVersion {
                what: "consumer group key",
                version,
            })
        }
    };
    let Some(value) = value else {
        let record = match kind {
            MEMBER_METADATA => Record::MemberMetadataTombstone { member_id: member },
            TARGET_ASSIGNMENT_MEMBER => {
                Record::TargetAssignmentMemberTombstone { member_id: member }
            }
            CURRENT_MEMBER_ASSIGNMENT => {
                Record::CurrentMemberAssignmentTombstone { member_id: member }
            }
            TARGET_ASSIGNMENT_METADATA => Record::TargetAssignmentMetadataTombstone,
            _ => Record::MetadataTombstone,
        };
        return Ok(Some((group, record)));
    };
    let mut v = Reader {
        buf: value,
        what: "consumer group value",
    };
    let version = v.i16()?;
    if version != VALUE_VERSION {
        return Err(DecodeError::UnknownVersion {
            what: "consumer group value",
            version,
        });
    }
    let record = match kind {
        METADATA => {
            let epoch = Epoch::new(v.i32()?);
            let mut metadata_hash = 0;
            v.tagged(|tag, f| {
                if tag == 0 {
                    metadata_hash = f.u64()?;
                }
                Ok(())
            })?;
            Record::Metadata {
                epoch,
                metadata_hash,
            }
        }
        MEMBER_METADATA => {
            let instance_id = v.compact_str()?;
            let rack_id = v.compact_str()?;
            let client_id = v.compact_str()?.unwrap_or_default();
            let client_host = v.compact_str()?.unwrap_or_default();
            let mut subscribed_topic_names = Vec::new();
            for _ in 0..v.count()? {
                subscribed_topic_names.push(v.compact_str()?.unwrap_or_default());
            }
            let subscribed_topic_regex = v.compact_str()?;
            let rebalance_timeout_ms = v.i32()?;
            let server_assignor = v.compact_str()?;
            let mut classic = None;
            v.tagged(|tag, f| {
                if tag == 0 && f.i8()? >= 0 {
                    let session_timeout_ms = f.i32()?;
                    let mut protocols = Vec::new();
                    for _ in 0..f.count()? {
                        let name = f.compact_str()?.unwrap_or_default();
                        let len = f.count()?;
                        let metadata = Bytes::copy_from_slice(f.take(len)?);
                        f.tagged(|_, _| Ok(()))?;
                        protocols.push((name, metadata));
                    }
                    classic = Some(ClassicMetadata {
                        session_timeout_ms,
                        protocols,
                    });
                }
                Ok(())
            })?;
            Record::MemberMetadata(Box::new(MemberMetadata {
                member_id: member,
                instance_id,
                rack_id,
                client_id,
                client_host,
                subscribed_topic_names,
                subscribed_topic_regex,
                rebalance_timeout_ms,
                server_assignor,
                classic,
            }))
        }
        TARGET_ASSIGNMENT_METADATA => {
            let epoch = Epoch::new(v.i32()?);
            v.tagged(|_, _| Ok(()))?;
            Record::TargetAssignmentMetadata { epoch }
        }
        TARGET_ASSIGNMENT_MEMBER => {
            let assignment = v.assignment()?;
            v.tagged(|_, _| Ok(()))?;
            Record::TargetAssignmentMember {
                member_id: member,
                assignment,
            }
        }
        _ => {
            let epoch = Epoch::new(v.i32()?);
            let previous_epoch = Epoch::new(v.i32()?);
            let state = MemberState::from_wire(v.i8()?);
            let (assigned, assigned_at) = v.assignment_with_epochs()?;
            let pending_revocation = v.assignment()?;
            v.tagged(|_, _| Ok(()))?;
            Record::CurrentMemberAssignment {
                member_id: member,
                assignment: MemberAssignment {
                    epoch,
                    previous_epoch,
                    state,
                    assigned,
                    pending_revocation,
                    assigned_at,
                },
            }
        }
    };
    Ok(Some((group, record)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn records() -> Vec<Record> {
        let t = TopicId::from_bytes([9; 16]);
        let a: Assignment = [(t, BTreeSet::from([0, 2, 5]))].into();
        vec![
            Record::Metadata {
                epoch: Epoch::new(7),
                metadata_hash: 0xdead_beef_0102_0304,
            },
            Record::Metadata {
                epoch: Epoch::new(1),
                metadata_hash: 0,
            },
            Record::MemberMetadata(Box::new(MemberMetadata {
                member_id: "m-1".into(),
                instance_id: Some("i".into()),
                rack_id: None,
                client_id: "c".into(),
                client_host: "/10.0.0.1".into(),
                subscribed_topic_names: vec!["a".into(), "b".into()],
                subscribed_topic_regex: Some("t.*".into()),
                rebalance_timeout_ms: 300_000,
                server_assignor: Some("uniform".into()),
                classic: None,
            })),
            Record::MemberMetadata(Box::new(MemberMetadata {
                member_id: "m-2".into(),
                client_id: "c".into(),
                subscribed_topic_names: vec!["a".into()],
                classic: Some(ClassicMetadata {
                    session_timeout_ms: 10_000,
                    protocols: vec![
                        (
                            "cooperative-sticky".into(),
                            Bytes::from_static(&[0, 3, 1, 2]),
                        ),
                        ("range".into(), Bytes::new()),
                    ],
                }),
                ..MemberMetadata::default()
            })),
            Record::MemberMetadataTombstone {
                member_id: "m-1".into(),
            },
            Record::TargetAssignmentMetadata {
                epoch: Epoch::new(7),
            },
            Record::TargetAssignmentMember {
                member_id: "m-1".into(),
                assignment: a.clone(),
            },
            Record::TargetAssignmentMemberTombstone {
                member_id: "m-1".into(),
            },
            Record::CurrentMemberAssignment {
                member_id: "m-1".into(),
                assignment: MemberAssignment {
                    epoch: Epoch::new(7),
                    previous_epoch: Epoch::new(6),
                    state: MemberState::UnrevokedPartitions,
                    assigned: a.clone(),
                    pending_revocation: [(t, BTreeSet::from([1]))].into(),
                    assigned_at: [
                        ((t, 0), Epoch::new(3)),
                        ((t, 2), Epoch::new(7)),
                        ((t, 5), Epoch::new(7)),
                    ]
                    .into(),
                },
            },
            Record::CurrentMemberAssignmentTombstone {
                member_id: "m-1".into(),
            },
        ]
    }

    #[test]
    fn records_read_back_as_written() {
        for r in records() {
            let (k, v) = encode("g", &r);
            assert!(is_consumer_group_key(&k));
            let back = decode(&k, v.as_deref()).unwrap();
            assert_eq!(back, Some(("g".to_string(), r)));
        }
    }

    #[test]
    fn damaged_records_are_errors_not_allocations() {
        for r in records() {
            let (k, v) = encode("g", &r);
            if let Some(v) = v {
                for cut in 0..v.len() {
                    assert!(decode(&k, Some(&v[..cut])).is_err(), "{r:?} cut at {cut}");
                }
            }
        }
        // A string claiming 2^28 bytes in a short record.
        let (k, _) = encode("g", &records()[2]);
        let mut v = vec![0, 0, 0xff, 0xff, 0xff, 0x7f];
        v.extend_from_slice(b"x");
        assert!(decode(&k, Some(&v)).is_err());
    }
}
