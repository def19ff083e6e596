//! The consumer protocol embedded in classic JoinGroup and SyncGroup
//! (Kafka's `ConsumerProtocolSubscription` and `ConsumerProtocolAssignment`,
//! versions 0 to 3), for the classic members of a consumer-protocol group
//! and for moving a group between the two protocols. Bounds-checked: a
//! count is never trusted beyond the bytes that follow it.

use bytes::{BufMut, Bytes, BytesMut};

/// Partitions by topic name, in the embedded protocol's order.
pub type NamedPartitions = Vec<(String, Vec<i32>)>;

/// What a classic consumer sends as its protocol metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Subscription {
    pub version: i16,
    pub topics: Vec<String>,
    pub user_data: Option<Bytes>,
    /// v1+: what the member owns (cooperative clients).
    pub owned: NamedPartitions,
    /// v3+.
    pub rack_id: Option<String>,
}

/// What a classic consumer receives from SyncGroup.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmbeddedAssignment {
    pub partitions: NamedPartitions,
    pub user_data: Option<Bytes>,
}

/// Metadata that is not the embedded protocol's.
#[derive(Copy, Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("malformed embedded consumer protocol")]
pub struct Malformed;

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.0.len() < n {
            return Err(Malformed);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16, Malformed> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    fn i32(&mut self) -> Result<i32, Malformed> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// An array's length, at most what `min_size`-byte items could fill.
    fn count(&mut self, min_size: usize) -> Result<usize, Malformed> {
        let n = self.i32()?;
        if n < 0 {
            return Ok(0);
        }
        let n = n as usize;
        if n.saturating_mul(min_size) > self.0.len() {
            return Err(Malformed);
        }
        Ok(n)
    }

    fn string(&mut self) -> Result<String, Malformed> {
        self.nullable_string()?.ok_or(Malformed)
    }

    fn nullable_string(&mut self) -> Result<Option<String>, Malformed> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        let b = self.take(len as usize)?;
        String::from_utf8(b.to_vec())
            .map(Some)
            .map_err(|_| Malformed)
    }

    fn nullable_bytes(&mut self) -> Result<Option<Bytes>, Malformed> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(None);
        }
        Ok(Some(Bytes::copy_from_slice(self.take(len as usize)?)))
    }

    fn partitions(&mut self) -> Result<NamedPartitions, Malformed> {
        let mut out = Vec::new();
        for _ in 0..self.count(6)? {
            let topic = self.string()?;
            let mut ps = Vec::new();
            for _ in 0..self.count(4)? {
                ps.push(self.i32()?);
            }
            out.push((topic, ps));
        }
        Ok(out)
    }
}

/// A classic member's metadata as a subscription. Versions above 3 are
/// read as 3, as Kafka reads them (later fields are appended).
pub fn decode_subscription(b: &[u8]) -> Result<Subscription, Malformed> {
    let mut r = Reader(b);
    let version = r.i16()?;
    if version < 0 {
        return Err(Malformed);
    }
    let mut topics = Vec::new();
    for _ in 0..r.count(2)? {
        topics.push(r.string()?);
    }
    let user_data = r.nullable_bytes()?;
    let owned = if version >= 1 {
        r.partitions()?
    } else {
        Vec::new()
    };
    if version >= 2 {
        r.i32()?; // generation id
    }
    let rack_id = if version >= 3 {
        r.nullable_string()?
    } else {
        None
    };
    Ok(Subscription {
        version,
        topics,
        user_data,
        owned,
        rack_id,
    })
}

/// The version of a classic member's metadata (0 if unreadable).
pub fn subscription_version(b: &[u8]) -> i16 {
    Reader(b).i16().unwrap_or(0).max(0)
}

pub fn decode_assignment(b: &[u8]) -> Result<EmbeddedAssignment, Malformed> {
    let mut r = Reader(b);
    if r.i16()? < 0 {
        return Err(Malformed);
    }
    let partitions = r.partitions()?;
    let user_data = r.nullable_bytes()?;
    Ok(EmbeddedAssignment {
        partitions,
        user_data,
    })
}

fn put_string(b: &mut BytesMut, s: &str) {
    b.put_i16(s.len().min(i16::MAX as usize) as i16);
    b.put_slice(&s.as_bytes()[..s.len().min(i16::MAX as usize)]);
}

/// An assignment at `version` (0 to 3 share one layout), without user data.
pub fn encode_assignment(version: i16, partitions: &NamedPartitions) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(version.clamp(0, 3));
    b.put_i32(partitions.len() as i32);
    for (topic, ps) in partitions {
        put_string(&mut b, topic);
        b.put_i32(ps.len() as i32);
        for p in ps {
            b.put_i32(*p);
        }
    }
    b.put_i32(-1);
    b.freeze()
}

/// A subscription at `version` (0 to 3), for tests and tools.
pub fn encode_subscription(s: &Subscription) -> Bytes {
    let mut b = BytesMut::new();
    let v = s.version.clamp(0, 3);
    b.put_i16(v);
    b.put_i32(s.topics.len() as i32);
    for t in &s.topics {
        put_string(&mut b, t);
    }
    match &s.user_data {
        Some(d) => {
            b.put_i32(d.len() as i32);
            b.put_slice(d);
        }
        None => b.put_i32(-1),
    }
    if v >= 1 {
        b.put_i32(s.owned.len() as i32);
        for (topic, ps) in &s.owned {
            put_string(&mut b, topic);
            b.put_i32(ps.len() as i32);
            for p in ps {
                b.put_i32(*p);
            }
        }
    }
    if v >= 2 {
        b.put_i32(-1);
    }
    if v >= 3 {
        match &s.rack_id {
            Some(r) => put_string(&mut b, r),
            None => b.put_i16(-1),
        }
    }
    b.freeze()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subscriptions_round_trip_at_every_version() {
        for version in 0..=3 {
            let s = Subscription {
                version,
                topics: vec!["a".into(), "topic-b".into()],
                user_data: (version == 2).then(|| Bytes::from_static(b"ud")),
                owned: if version >= 1 {
                    vec![("a".into(), vec![0, 3])]
                } else {
                    vec![]
                },
                rack_id: (version >= 3).then(|| "r1".to_string()),
            };
            let b = encode_subscription(&s);
            assert_eq!(decode_subscription(&b).unwrap(), s, "v{version}");
            for cut in 0..b.len() {
                let _ = decode_subscription(&b[..cut]); // never panics
            }
        }
    }

    #[test]
    fn assignments_round_trip() {
        let a = vec![("t".to_string(), vec![1, 2]), ("u".to_string(), vec![])];
        let b = encode_assignment(3, &a);
        let d = decode_assignment(&b).unwrap();
        assert_eq!(d.partitions, a);
        assert_eq!(d.user_data, None);
    }

    #[test]
    fn claimed_counts_are_not_trusted() {
        let huge = [0u8, 1, 0x7f, 0xff, 0xff, 0xff];
        assert_eq!(decode_subscription(&huge), Err(Malformed));
        assert_eq!(decode_assignment(&huge), Err(Malformed));
    }
}
