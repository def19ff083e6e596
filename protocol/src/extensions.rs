//! Strand's extensions of Kafka's wire protocol, carried in tagged fields
//! (flexible versions only), which Kafka's brokers and clients skip as
//! unknown. Tag numbers are far above Kafka's own, which count up from 0.

use bytes::Bytes;

/// FetchRequest, per partition (a follower's fetch, v12+): the offset the
/// follower has fsynced, an i64 big-endian, so the leader can acknowledge
/// on durable copies (`strand.acks.durable`).
pub const FETCH_DURABLE_OFFSET_TAG: i32 = 0x5354_0001;

/// The tagged field's value for an offset.
pub fn encode_offset(offset: i64) -> Bytes {
    Bytes::copy_from_slice(&offset.to_be_bytes())
}

/// An offset from a tagged field's value; `None` unless it is exactly 8
/// bytes of a non-negative offset.
pub fn decode_offset(value: &[u8]) -> Option<i64> {
    let bytes: [u8; 8] = value.try_into().ok()?;
    Some(i64::from_be_bytes(bytes)).filter(|o| *o >= 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_round_trip_and_bad_values_are_none() {
        assert_eq!(decode_offset(&encode_offset(42)), Some(42));
        assert_eq!(decode_offset(&encode_offset(-1)), None);
        assert_eq!(decode_offset(&[0; 7]), None);
        assert_eq!(decode_offset(&[0; 9]), None);
    }
}
