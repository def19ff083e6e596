//! A group's offsets through plain and transactional commits, markers and a
//! replay of the records that wrote them: the replay of a partition's
//! records gives the same offsets as the calls that wrote them.

use bytes::{BufMut, Bytes, BytesMut};
use strand_group::offsets::{GroupOffsets, Replay, ReplayRecord};
use strand_group::records::{self, CommittedOffset};
use strand_protocol::ErrorCode;
use strand_types::ProducerId;

fn at(offset: i64) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp_ms: 1_000,
    }
}

fn key(p: i32) -> (String, i32) {
    ("in".to_string(), p)
}

fn marker_key(commit: bool) -> Bytes {
    let mut b = BytesMut::new();
    b.put_i16(0);
    b.put_i16(i16::from(commit));
    b.freeze()
}

/// What a coordinator appended, in log order.
enum Written {
    Plain(i32, i64),
    Txn(i64, i32, i64),
    Marker(i64, bool),
    Tombstone(i32),
}

fn replay(log: &[Written]) -> GroupOffsets {
    let mut r = Replay::default();
    for w in log {
        let (k, v, control, txn, pid) = match *w {
            Written::Plain(p, o) => (
                records::offset_key("g", "in", p),
                Some(records::offset_value(&at(o))),
                false,
                false,
                None,
            ),
            Written::Txn(pid, p, o) => (
                records::offset_key("g", "in", p),
                Some(records::offset_value(&at(o))),
                false,
                true,
                Some(pid),
            ),
            Written::Marker(pid, commit) => (marker_key(commit), None, true, true, Some(pid)),
            Written::Tombstone(p) => (records::offset_key("g", "in", p), None, false, false, None),
        };
        r.record(ReplayRecord {
            key: Some(&k),
            value: v.as_ref(),
            control,
            transactional: txn,
            producer_id: pid.map(ProducerId::new),
        });
    }
    let (mut groups, skipped) = r.finish();
    assert!(skipped.is_empty(), "{skipped:?}");
    groups.remove("g").map(|g| g.offsets).unwrap_or_default()
}

#[test]
fn transactional_offsets_wait_for_their_marker_and_a_replay_agrees() {
    let (a, b) = (ProducerId::new(7), ProducerId::new(8));
    let mut o = GroupOffsets::default();
    let mut log = Vec::new();
    o.commit([(key(0), at(5))]);
    log.push(Written::Plain(0, 5));
    o.stage(a, [(key(0), at(9)), (key(1), at(3))]);
    log.push(Written::Txn(7, 0, 9));
    log.push(Written::Txn(7, 1, 3));
    o.stage(b, [(key(2), at(4))]);
    log.push(Written::Txn(8, 2, 4));
    // Staged offsets are not committed; require_stable sees them.
    assert_eq!(o.fetch(&key(0), false), Ok(Some(&at(5))));
    assert_eq!(o.fetch(&key(0), true), Err(ErrorCode::UnstableOffsetCommit));
    assert_eq!(o.fetch(&key(1), false), Ok(None));
    assert_eq!(o.fetch(&key(3), true), Ok(None));
    assert_eq!(replay(&log), o);
    // A's commit applies its offsets, B's abort drops them.
    o.end_transaction(a, true);
    log.push(Written::Marker(7, true));
    o.end_transaction(b, false);
    log.push(Written::Marker(8, false));
    assert_eq!(o.fetch(&key(0), true), Ok(Some(&at(9))));
    assert_eq!(o.fetch(&key(1), true), Ok(Some(&at(3))));
    assert_eq!(o.fetch(&key(2), true), Ok(None));
    assert_eq!(o.pending_producers().count(), 0);
    // A later plain commit and a deletion.
    o.commit([(key(1), at(4))]);
    log.push(Written::Plain(1, 4));
    o.remove(&key(0));
    log.push(Written::Tombstone(0));
    assert_eq!(replay(&log), o);
    assert_eq!(o.committed().len(), 1);
    // A marker for a producer with nothing staged changes nothing.
    o.end_transaction(a, true);
    log.push(Written::Marker(7, true));
    assert_eq!(replay(&log), o);
}
