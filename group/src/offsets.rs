//! A group's committed offsets, and the offsets its producers committed
//! inside transactions that have not ended, as the coordinator keeps them;
//! and the replay of `__consumer_offsets` that rebuilds them when a
//! coordinator loads the partition. Pure: the broker's group coordinator
//! and the simulation drive it.
//!
//! TxnOffsetCommit offsets (KIP-98) are staged per producer id: the
//! producer's commit marker on the group's partition makes them committed
//! offsets, its abort marker drops them; until then an OffsetFetch that
//! requires stable offsets is answered UNSTABLE_OFFSET_COMMIT for their
//! partitions (KIP-447).

use std::collections::BTreeMap;

use bytes::Bytes;
use strand_protocol::batch::ControlType;
use strand_protocol::ErrorCode;
use strand_types::ProducerId;

use crate::records::{self, CommittedOffset, OffsetsRecord};

/// A committed offset's partition: (topic, partition index).
pub type OffsetKey = (String, i32);

/// One group's offsets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupOffsets {
    committed: BTreeMap<OffsetKey, CommittedOffset>,
    /// Offsets committed inside a producer's open transaction, by producer.
    pending: BTreeMap<ProducerId, BTreeMap<OffsetKey, CommittedOffset>>,
}

impl GroupOffsets {
    /// The committed offsets.
    pub fn committed(&self) -> &BTreeMap<OffsetKey, CommittedOffset> {
        &self.committed
    }

    pub fn get(&self, key: &OffsetKey) -> Option<&CommittedOffset> {
        self.committed.get(key)
    }

    /// An OffsetCommit whose records are committed to the log.
    pub fn commit(&mut self, offsets: impl IntoIterator<Item = (OffsetKey, CommittedOffset)>) {
        self.committed.extend(offsets);
    }

    /// A TxnOffsetCommit of `producer` whose records are in the log: the
    /// offsets wait for the producer's marker.
    pub fn stage(
        &mut self,
        producer: ProducerId,
        offsets: impl IntoIterator<Item = (OffsetKey, CommittedOffset)>,
    ) {
        self.pending.entry(producer).or_default().extend(offsets);
    }

    /// The producer's marker reached the group's partition: its staged
    /// offsets become committed (commit) or are dropped (abort).
    pub fn end_transaction(&mut self, producer: ProducerId, commit: bool) {
        if let Some(staged) = self.pending.remove(&producer) {
            if commit {
                self.committed.extend(staged);
            }
        }
    }

    /// Whether a transaction holds an offset for `key` not yet committed.
    pub fn is_unstable(&self, key: &OffsetKey) -> bool {
        self.pending.values().any(|o| o.contains_key(key))
    }

    /// OffsetFetch of one partition: its committed offset, or
    /// UNSTABLE_OFFSET_COMMIT when `require_stable` and a transaction holds
    /// one for it.
    pub fn fetch(
        &self,
        key: &OffsetKey,
        require_stable: bool,
    ) -> Result<Option<&CommittedOffset>, ErrorCode> {
        if require_stable && self.is_unstable(key) {
            return Err(ErrorCode::UnstableOffsetCommit);
        }
        Ok(self.committed.get(key))
    }

    /// A committed offset deleted (OffsetDelete, expiry, a tombstone).
    pub fn remove(&mut self, key: &OffsetKey) -> Option<CommittedOffset> {
        self.committed.remove(key)
    }

    /// Every committed offset deleted (DeleteGroups).
    pub fn clear(&mut self) {
        self.committed.clear();
    }

    /// Producers with offsets waiting for their marker.
    pub fn pending_producers(&self) -> impl Iterator<Item = ProducerId> + '_ {
        self.pending.keys().copied()
    }
}

/// One group as a load found it: its offsets and its last metadata
/// snapshot (Strand's JSON, see [`crate::snapshot`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadedGroup {
    pub offsets: GroupOffsets,
    pub snapshot: Option<Bytes>,
}

/// One record of `__consumer_offsets` as the replay needs it.
#[derive(Debug, Clone, Copy)]
pub struct ReplayRecord<'a> {
    pub key: Option<&'a Bytes>,
    pub value: Option<&'a Bytes>,
    /// A transaction marker (its key: version i16, type i16).
    pub control: bool,
    /// Written inside a transaction (TxnOffsetCommit).
    pub transactional: bool,
    pub producer_id: Option<ProducerId>,
}

/// Rebuilds a partition's groups from its records, in log order.
#[derive(Debug, Default)]
pub struct Replay {
    groups: BTreeMap<String, LoadedGroup>,
    skipped: Vec<String>,
}

impl Replay {
    pub fn record(&mut self, r: ReplayRecord<'_>) {
        if r.control {
            let commit = r
                .key
                .filter(|k| k.len() >= 4)
                .and_then(|k| ControlType::from_code(i16::from_be_bytes([k[2], k[3]])))
                == Some(ControlType::Commit);
            if let Some(pid) = r.producer_id {
                for g in self.groups.values_mut() {
                    g.offsets.end_transaction(pid, commit);
                }
            }
            return;
        }
        match records::decode(r.key, r.value) {
            Ok(OffsetsRecord::Offset {
                group,
                topic,
                partition,
                value,
            }) => {
                let key = (topic, partition);
                match (value, r.producer_id.filter(|_| r.transactional)) {
                    (Some(v), Some(pid)) => {
                        let g = self.groups.entry(group).or_default();
                        g.offsets.stage(pid, [(key, v)]);
                    }
                    (Some(v), None) => {
                        let g = self.groups.entry(group).or_default();
                        g.offsets.commit([(key, v)]);
                    }
                    (None, _) => {
                        if let Some(g) = self.groups.get_mut(&group) {
                            g.offsets.remove(&key);
                        }
                    }
                }
            }
            Ok(OffsetsRecord::Group { group, snapshot }) => match snapshot {
                // A deleted group: its offsets went with it (tombstones follow).
                None => {
                    self.groups.remove(&group);
                }
                Some(json) => self.groups.entry(group).or_default().snapshot = Some(json),
            },
            Err(e) => self.skipped.push(e.to_string()),
        }
    }

    /// The groups, and why each undecodable record was skipped.
    pub fn finish(self) -> (BTreeMap<String, LoadedGroup>, Vec<String>) {
        (self.groups, self.skipped)
    }
}
