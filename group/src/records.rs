//! The records a group coordinator keeps in `__consumer_offsets` (moved
//! here from the broker, bytes unchanged, so the simulation shares them). Keys use
//! Kafka's layouts (so that compaction keeps the latest value per group,
//! topic and partition exactly as Kafka's would): offset commit key v1
//! (group, topic, partition), group metadata key v2 (group). Offset values use
//! Kafka's v3 layout; group metadata values are Strand's own (a versioned JSON
//! snapshot of the group). A record with no value is a tombstone.

use bytes::{Buf, BufMut, Bytes, BytesMut};

const OFFSET_KEY_V0: i16 = 0;
const OFFSET_KEY_V1: i16 = 1;
const GROUP_KEY_V2: i16 = 2;
const OFFSET_VALUE_V3: i16 = 3;
/// Strand's group metadata value: a JSON snapshot after the version.
const GROUP_VALUE_STRAND: i16 = 1000;

/// A committed offset (OffsetCommit value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
}

/// One record of `__consumer_offsets`, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OffsetsRecord {
    /// `value` None: the offset was deleted.
    Offset {
        group: String,
        topic: String,
        partition: i32,
        value: Option<CommittedOffset>,
    },
    /// `snapshot` None: the group was deleted. Otherwise the JSON snapshot.
    Group {
        group: String,
        snapshot: Option<Bytes>,
    },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("record has no key")]
    NoKey,
    #[error("truncated {0}")]
    Truncated(&'static str),
    #[error("unknown {what} version {version}")]
    UnknownVersion { what: &'static str, version: i16 },
    #[error("string is not UTF-8")]
    Utf8,
}

fn put_str(b: &mut BytesMut, s: &str) {
    // Kafka strings: i16 length; group ids and topic names are far shorter.
    let len = s.len().min(i16::MAX as usize);
    b.put_i16(len as i16);
    b.put_slice(&s.as_bytes()[..len]);
}

fn get_i16(b: &mut Bytes, what: &'static str) -> Result<i16, DecodeError> {
    if b.remaining() < 2 {
        return Err(DecodeError::Truncated(what));
    }
    Ok(b.get_i16())
}

fn get_i32(b: &mut Bytes, what: &'static str) -> Result<i32, DecodeError> {
    if b.remaining() < 4 {
        return Err(DecodeError::Truncated(what));
    }
    Ok(b.get_i32())
}

fn get_i64(b: &mut Bytes, what: &'static str) -> Result<i64, DecodeError> {
    if b.remaining() < 8 {
        return Err(DecodeError::Truncated(what));
    }
    Ok(b.get_i64())
}

fn get_str(b: &mut Bytes, what: &'static str) -> Result<String, DecodeError> {
    let len = get_i16(b, what)?;
    if len < 0 {
        return Ok(String::new());
    }
    let len = len as usize;
    if b.remaining() < len {
        return Err(DecodeError::Truncated(what));
    }
    let s = b.split_to(len);
    String::from_utf8(s.to_vec()).map_err(|_| DecodeError::Utf8)
}

pub fn offset_key(group: &str, topic: &str, partition: i32) -> Bytes {
    let mut b = BytesMut::with_capacity(8 + group.len() + topic.len());
    b.put_i16(OFFSET_KEY_V1);
    put_str(&mut b, group);
    put_str(&mut b, topic);
    b.put_i32(partition);
    b.freeze()
}

pub fn offset_value(v: &CommittedOffset) -> Bytes {
    let mut b = BytesMut::with_capacity(32 + v.metadata.len());
    b.put_i16(OFFSET_VALUE_V3);
    b.put_i64(v.offset);
    b.put_i32(v.leader_epoch);
    put_str(&mut b, &v.metadata);
    b.put_i64(v.commit_timestamp_ms);
    b.freeze()
}

pub fn group_key(group: &str) -> Bytes {
    let mut b = BytesMut::with_capacity(4 + group.len());
    b.put_i16(GROUP_KEY_V2);
    put_str(&mut b, group);
    b.freeze()
}

pub fn group_value(snapshot_json: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(2 + snapshot_json.len());
    b.put_i16(GROUP_VALUE_STRAND);
    b.put_slice(snapshot_json);
    b.freeze()
}

/// Decodes one record's key and value.
pub fn decode(key: Option<&Bytes>, value: Option<&Bytes>) -> Result<OffsetsRecord, DecodeError> {
    let mut k = key.ok_or(DecodeError::NoKey)?.clone();
    match get_i16(&mut k, "key version")? {
        OFFSET_KEY_V0 | OFFSET_KEY_V1 => {
            let group = get_str(&mut k, "group")?;
            let topic = get_str(&mut k, "topic")?;
            let partition = get_i32(&mut k, "partition")?;
            let value = match value {
                None => None,
                Some(v) => {
                    let mut v = v.clone();
                    match get_i16(&mut v, "offset value version")? {
                        OFFSET_VALUE_V3 => Some(CommittedOffset {
                            offset: get_i64(&mut v, "offset")?,
                            leader_epoch: get_i32(&mut v, "leader epoch")?,
                            metadata: get_str(&mut v, "metadata")?,
                            commit_timestamp_ms: get_i64(&mut v, "commit timestamp")?,
                        }),
                        version => {
                            return Err(DecodeError::UnknownVersion {
                                what: "offset value",
                                version,
                            })
                        }
                    }
                }
            };
            Ok(OffsetsRecord::Offset {
                group,
                topic,
                partition,
                value,
            })
        }
        GROUP_KEY_V2 => {
            let group = get_str(&mut k, "group")?;
            let snapshot = match value {
                None => None,
                Some(v) => {
                    let mut v = v.clone();
                    match get_i16(&mut v, "group value version")? {
                        GROUP_VALUE_STRAND => Some(v),
                        version => {
                            return Err(DecodeError::UnknownVersion {
                                what: "group value",
                                version,
                            })
                        }
                    }
                }
            };
            Ok(OffsetsRecord::Group { group, snapshot })
        }
        version => Err(DecodeError::UnknownVersion {
            what: "key",
            version,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_record_round_trip() {
        let v = CommittedOffset {
            offset: 42,
            leader_epoch: 3,
            metadata: "meta".into(),
            commit_timestamp_ms: 1_700_000_000_000,
        };
        let k = offset_key("g", "t", 7);
        let val = offset_value(&v);
        assert_eq!(
            decode(Some(&k), Some(&val)).unwrap(),
            OffsetsRecord::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 7,
                value: Some(v)
            }
        );
        assert_eq!(
            decode(Some(&k), None).unwrap(),
            OffsetsRecord::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 7,
                value: None
            }
        );
    }

    #[test]
    fn group_record_round_trip() {
        let k = group_key("grp");
        let v = group_value(b"{\"a\":1}");
        assert_eq!(
            decode(Some(&k), Some(&v)).unwrap(),
            OffsetsRecord::Group {
                group: "grp".into(),
                snapshot: Some(Bytes::from_static(b"{\"a\":1}"))
            }
        );
    }

    #[test]
    fn bad_records_are_errors() {
        assert_eq!(decode(None, None), Err(DecodeError::NoKey));
        let k = offset_key("g", "t", 1);
        for cut in 0..k.len() {
            assert!(decode(Some(&k.slice(..cut)), None).is_err(), "cut {cut}");
        }
        let v = offset_value(&CommittedOffset {
            offset: 1,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms: 0,
        });
        for cut in 0..v.len() {
            assert!(
                decode(Some(&k), Some(&v.slice(..cut))).is_err(),
                "cut {cut}"
            );
        }
        let mut unknown = BytesMut::new();
        unknown.put_i16(9);
        assert!(matches!(
            decode(Some(&unknown.freeze()), None),
            Err(DecodeError::UnknownVersion { what: "key", .. })
        ));
    }
}
