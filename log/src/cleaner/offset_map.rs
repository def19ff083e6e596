//! The cleaner's key -> latest offset map, of fixed memory (Kafka's
//! `SkimpyOffsetMap`): `log.cleaner.dedupe.buffer.size` bytes hold
//! 24-byte slots (a 128-bit digest of the key and the offset), filled to
//! `log.cleaner.io.buffer.load.factor` at most. Keys are never stored, so a
//! log whose dirty keys are more than the map holds is cleaned in several
//! passes rather than by allocating more.
//!
//! Digests are xxh3-128 under a seed drawn for each map: two different keys
//! share a digest with probability about 2^-128, and a client cannot choose
//! keys that collide without knowing the seed (a collision would let one
//! key's later record remove another key's value).

use std::hash::{BuildHasher, Hasher};

/// Bytes of one slot: a 16-byte digest and an 8-byte offset.
pub const SLOT_BYTES: usize = 24;

/// An open-addressing map from key digests to offsets, with linear probing.
pub struct OffsetMap {
    /// `slots * SLOT_BYTES` bytes, allocated zeroed (pages are touched as
    /// slots fill). A slot whose offset field is 0 and digest is all zero is
    /// free: stored offsets are kept as `offset + 1`.
    table: Vec<u8>,
    slots: usize,
    /// Entries allowed: `slots * load_factor`.
    max_entries: usize,
    entries: usize,
    seed: u64,
    /// The largest offset put in or passed over (Kafka's `latestOffset`):
    /// records after it were not looked at by this pass.
    latest_offset: Option<i64>,
}

impl OffsetMap {
    /// A map in `memory` bytes, filled to `load_factor` (clamped to (0, 1])
    /// at most; at least one slot.
    pub fn new(memory: usize, load_factor: f64) -> OffsetMap {
        let slots = (memory / SLOT_BYTES).max(2);
        let load = if load_factor > 0.0 && load_factor <= 1.0 {
            load_factor
        } else {
            0.9
        };
        let max_entries = ((slots as f64 * load) as usize).clamp(1, slots - 1);
        OffsetMap {
            table: vec![0u8; slots * SLOT_BYTES],
            slots,
            max_entries,
            entries: 0,
            seed: std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish(),
            latest_offset: None,
        }
    }

    /// Bytes the map holds.
    pub fn memory(&self) -> usize {
        self.table.len()
    }

    /// Keys the map can take before it is full.
    pub fn capacity(&self) -> usize {
        self.max_entries
    }

    pub fn len(&self) -> usize {
        self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    pub fn is_full(&self) -> bool {
        self.entries >= self.max_entries
    }

    /// Empties the map for the next pass (under a new seed).
    pub fn clear(&mut self) {
        if self.entries > 0 {
            self.table.fill(0);
        }
        self.entries = 0;
        self.latest_offset = None;
        self.seed = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
    }

    fn digest(&self, key: &[u8]) -> [u8; 16] {
        let d = xxhash_rust::xxh3::xxh3_128_with_seed(key, self.seed).to_le_bytes();
        // The all-zero digest marks a free slot; a key that hashes to it is
        // stored under another fixed value (one more such key per 2^128).
        if d == [0u8; 16] {
            [1u8; 16]
        } else {
            d
        }
    }

    /// The slot holding `digest`, or the free slot where it would go.
    fn find(&self, digest: &[u8; 16]) -> usize {
        let start =
            u64::from_le_bytes(digest[..8].try_into().expect("8 bytes")) as usize % self.slots;
        let mut i = start;
        loop {
            let at = i * SLOT_BYTES;
            let slot = &self.table[at..at + 16];
            if slot == digest || slot == [0u8; 16] {
                return i;
            }
            i = (i + 1) % self.slots;
            // The map is never full (max_entries < slots), so a free slot is found.
            debug_assert_ne!(i, start, "offset map without a free slot");
        }
    }

    /// Records that `key`'s latest offset so far is `offset`. Returns false
    /// (and records nothing) when the map is full and the key is new.
    pub fn put(&mut self, key: &[u8], offset: i64) -> bool {
        let digest = self.digest(key);
        let i = self.find(&digest);
        let at = i * SLOT_BYTES;
        let free = self.table[at..at + 16] == [0u8; 16];
        if free {
            if self.is_full() {
                return false;
            }
            self.entries += 1;
            self.table[at..at + 16].copy_from_slice(&digest);
        }
        self.table[at + 16..at + 24].copy_from_slice(&(offset + 1).to_le_bytes());
        self.update_latest_offset(offset);
        true
    }

    /// The latest offset recorded for `key`.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        let digest = self.digest(key);
        let at = self.find(&digest) * SLOT_BYTES;
        if self.table[at..at + 16] == [0u8; 16] {
            return None;
        }
        let stored = i64::from_le_bytes(self.table[at + 16..at + 24].try_into().expect("8 bytes"));
        Some(stored - 1)
    }

    pub fn update_latest_offset(&mut self, offset: i64) {
        self.latest_offset = Some(self.latest_offset.map_or(offset, |o| o.max(offset)));
    }

    /// The largest offset this pass has read up to (inclusive).
    pub fn latest_offset(&self) -> Option<i64> {
        self.latest_offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn full_map_refuses_new_keys_but_updates_old_ones() {
        let mut m = OffsetMap::new(10 * SLOT_BYTES, 0.5);
        assert_eq!(m.capacity(), 5);
        for k in 0..5u8 {
            assert!(m.put(&[k], k as i64));
        }
        assert!(m.is_full());
        assert!(!m.put(b"new", 9));
        assert_eq!(m.get(b"new"), None);
        assert!(m.put(&[2], 20));
        assert_eq!(m.get(&[2]), Some(20));
        assert_eq!(m.latest_offset(), Some(20));
        assert_eq!(m.memory(), 10 * SLOT_BYTES);
        m.clear();
        assert_eq!((m.len(), m.get(&[2]), m.latest_offset()), (0, None, None));
    }

    proptest! {
        /// Against a HashMap: the latest offset of every key put, nothing
        /// for keys never put, while the map has room.
        #[test]
        fn agrees_with_a_hash_map(puts in prop::collection::vec((prop::collection::vec(any::<u8>(), 0..6), 0i64..1_000_000), 0..300)) {
            let mut m = OffsetMap::new(1000 * SLOT_BYTES, 0.9);
            let mut model = HashMap::new();
            for (k, o) in &puts {
                prop_assert!(m.put(k, *o));
                model.insert(k.clone(), *o);
            }
            prop_assert_eq!(m.len(), model.len());
            for (k, o) in &model {
                prop_assert_eq!(m.get(k), Some(*o));
            }
            prop_assert_eq!(m.get(b"never put: longer than six"), None);
        }
    }
}
