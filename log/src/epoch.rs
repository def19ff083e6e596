//! Leader-epoch cache: for each leader epoch, the first offset written in it.
//! Pure in-memory logic; `PartitionLog` persists it to `leader-epoch-checkpoint`.
//! Semantics follow Kafka's `LeaderEpochFileCache`.

/// Epoch that means "unknown" on the wire.
pub const UNDEFINED_EPOCH: i32 = -1;
/// End offset that means "unknown" on the wire.
pub const UNDEFINED_EPOCH_OFFSET: i64 = -1;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    /// (epoch, start offset), epochs strictly increasing, offsets non-decreasing.
    entries: Vec<(i32, i64)>,
}

impl EpochCache {
    pub fn new(entries: Vec<(i32, i64)>) -> Self {
        EpochCache { entries }
    }

    pub fn entries(&self) -> &[(i32, i64)] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.0)
    }

    /// Records that `epoch` starts at `start_offset`. Returns whether the cache
    /// changed. Negative epochs are ignored; an entry that conflicts with later
    /// ones (epoch or start offset not above them) replaces them, as in Kafka.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || start_offset < 0 {
            return false;
        }
        let needed = match self.entries.last() {
            Some(&(e, o)) => epoch != e || start_offset < o,
            None => true,
        };
        if !needed {
            return false;
        }
        while let Some(&(e, o)) = self.entries.last() {
            if e >= epoch || o >= start_offset {
                self.entries.pop();
            } else {
                break;
            }
        }
        self.entries.push((epoch, start_offset));
        true
    }

    /// Kafka's `endOffsetFor`: the largest epoch `<=` the requested one and its
    /// end offset (the start of the next known epoch, or `log_end_offset` for the
    /// latest epoch). `(-1, -1)` for an undefined request or when the requested
    /// epoch is above every known one (or nothing is known). When the requested
    /// epoch is below every known epoch: `(requested, first start offset)`.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> (i32, i64) {
        if requested == UNDEFINED_EPOCH {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        if self.latest_epoch() == Some(requested) {
            return (requested, log_end_offset);
        }
        // First entry with epoch > requested.
        let hi = self.entries.partition_point(|e| e.0 <= requested);
        if hi == self.entries.len() {
            return (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET);
        }
        let higher_start = self.entries[hi].1;
        match hi.checked_sub(1) {
            None => (requested, higher_start),
            Some(lo) => (self.entries[lo].0, higher_start),
        }
    }

    /// Removes entries whose start offset is `>= end_offset` (after truncation).
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let before = self.entries.len();
        while self.entries.last().is_some_and(|e| e.1 >= end_offset) {
            self.entries.pop();
        }
        before != self.entries.len()
    }

    /// Drops entries wholly below `start_offset`: the last entry starting at or
    /// before it is kept, moved to start at `start_offset`.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let n = self.entries.partition_point(|e| e.1 <= start_offset);
        if n == 0 {
            return false;
        }
        let epoch = self.entries[n - 1].0;
        let changed = n > 1 || self.entries[0].1 != start_offset;
        self.entries.drain(..n);
        self.entries.insert(0, (epoch, start_offset));
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(e: &[(i32, i64)]) -> EpochCache {
        EpochCache::new(e.to_vec())
    }

    #[test]
    fn end_offset_for_table() {
        let c = cache(&[(1, 0), (3, 10), (6, 25)]);
        let leo = 40;
        let table = [
            (-1, (-1, -1)), // undefined request
            (0, (0, 0)),    // below every epoch: requested epoch, first start offset
            (1, (1, 10)),   // exact, not latest
            (2, (1, 10)),   // gap: floor epoch 1, ends where 3 starts
            (3, (3, 25)),
            (4, (3, 25)),
            (5, (3, 25)),
            (6, (6, 40)),  // latest: LEO
            (7, (-1, -1)), // above every known epoch
        ];
        for (req, expect) in table {
            assert_eq!(c.end_offset_for(req, leo), expect, "requested {req}");
        }
        assert_eq!(cache(&[]).end_offset_for(0, 5), (-1, -1));
        assert_eq!(cache(&[]).end_offset_for(-1, 5), (-1, -1));
    }

    #[test]
    fn assign_rules() {
        let mut c = EpochCache::default();
        assert!(c.assign(0, 0));
        assert!(!c.assign(0, 5)); // same epoch, later offset: no change
        assert!(c.assign(2, 5));
        assert!(!c.assign(-1, 7));
        assert_eq!(c.entries(), &[(0, 0), (2, 5)]);
        // A conflicting entry (lower epoch at a later offset) replaces later epochs.
        assert!(c.assign(1, 8));
        assert_eq!(c.entries(), &[(0, 0), (1, 8)]);
        // Same epoch at an earlier offset moves its start back.
        assert!(c.assign(1, 3));
        assert_eq!(c.entries(), &[(0, 0), (1, 3)]);
    }

    #[test]
    fn truncation() {
        let mut c = cache(&[(1, 0), (3, 10), (6, 25)]);
        assert!(c.truncate_from_end(25));
        assert_eq!(c.entries(), &[(1, 0), (3, 10)]);
        assert!(!c.truncate_from_end(11));
        let mut c = cache(&[(1, 0), (3, 10), (6, 25)]);
        assert!(c.truncate_from_start(12));
        assert_eq!(c.entries(), &[(3, 12), (6, 25)]);
        assert!(!c.truncate_from_start(12));
        assert!(c.truncate_from_start(25));
        assert_eq!(c.entries(), &[(6, 25)]);
        let mut c = cache(&[(1, 5)]);
        assert!(!c.truncate_from_start(2));
    }
}
