//! Leader-epoch cache: for each leader epoch, the first offset written in it.
//! Pure in-memory logic; `PartitionLog` persists it to `leader-epoch-checkpoint`.
//! Semantics follow Kafka's `LeaderEpochFileCache`, with Kafka's undefined
//! epoch and offset (-1) as `None`.

use strand_types::{LeaderEpoch, Offset};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochCache {
    /// (epoch, start offset), epochs strictly increasing, offsets non-decreasing.
    entries: Vec<(LeaderEpoch, Offset)>,
}

impl EpochCache {
    pub fn new(entries: Vec<(LeaderEpoch, Offset)>) -> Self {
        EpochCache { entries }
    }

    pub fn entries(&self) -> &[(LeaderEpoch, Offset)] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.entries.last().map(|e| e.0)
    }

    /// Records that `epoch` starts at `start_offset`. Returns whether the cache
    /// changed. An entry that conflicts with later ones (epoch or start offset
    /// not above them) replaces them, as in Kafka. (Kafka ignores an undefined
    /// epoch here; callers holding a wire epoch skip `None`.)
    pub fn assign(&mut self, epoch: LeaderEpoch, start_offset: Offset) -> bool {
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
    /// latest epoch). `None` (Kafka's `(-1, -1)`) when the requested epoch is
    /// above every known one (or nothing is known); an undefined request is
    /// answered `(-1, -1)` by the caller, which holds the wire's epoch. When the
    /// requested epoch is below every known epoch: `(requested, first start
    /// offset)`.
    pub fn end_offset_for(
        &self,
        requested: LeaderEpoch,
        log_end_offset: Offset,
    ) -> Option<(LeaderEpoch, Offset)> {
        if self.latest_epoch() == Some(requested) {
            return Some((requested, log_end_offset));
        }
        // First entry with epoch > requested.
        let hi = self.entries.partition_point(|e| e.0 <= requested);
        let &(_, higher_start) = self.entries.get(hi)?;
        match hi.checked_sub(1) {
            None => Some((requested, higher_start)),
            Some(lo) => Some((self.entries[lo].0, higher_start)),
        }
    }

    /// Removes entries whose start offset is `>= end_offset` (after truncation).
    pub fn truncate_from_end(&mut self, end_offset: Offset) -> bool {
        let before = self.entries.len();
        while self.entries.last().is_some_and(|e| e.1 >= end_offset) {
            self.entries.pop();
        }
        before != self.entries.len()
    }

    /// Drops entries wholly below `start_offset`: the last entry starting at or
    /// before it is kept, moved to start at `start_offset`.
    pub fn truncate_from_start(&mut self, start_offset: Offset) -> bool {
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

    fn e(epoch: i32) -> LeaderEpoch {
        LeaderEpoch::new(epoch)
    }

    fn o(offset: i64) -> Offset {
        Offset::new(offset)
    }

    fn entries(e: &[(i32, i64)]) -> Vec<(LeaderEpoch, Offset)> {
        e.iter()
            .map(|&(epoch, start)| (LeaderEpoch::new(epoch), Offset::new(start)))
            .collect()
    }

    fn cache(e: &[(i32, i64)]) -> EpochCache {
        EpochCache::new(entries(e))
    }

    /// `(epoch, end offset)` as the wire writes it: `(-1, -1)` for none.
    fn wire(answer: Option<(LeaderEpoch, Offset)>) -> (i32, i64) {
        let (epoch, end) = answer.unzip();
        (LeaderEpoch::to_wire(epoch), Offset::to_wire(end))
    }

    #[test]
    fn end_offset_for_table() {
        let c = cache(&[(1, 0), (3, 10), (6, 25)]);
        let leo = o(40);
        // An undefined request (-1) is no `LeaderEpoch`: the OffsetForLeaderEpoch
        // handler answers it (-1, -1) before asking.
        let table = [
            (0, (0, 0)),  // below every epoch: requested epoch, first start offset
            (1, (1, 10)), // exact, not latest
            (2, (1, 10)), // gap: floor epoch 1, ends where 3 starts
            (3, (3, 25)),
            (4, (3, 25)),
            (5, (3, 25)),
            (6, (6, 40)),  // latest: LEO
            (7, (-1, -1)), // above every known epoch
        ];
        for (req, expect) in table {
            assert_eq!(
                wire(c.end_offset_for(e(req), leo)),
                expect,
                "requested {req}"
            );
        }
        assert_eq!(cache(&[]).end_offset_for(e(0), o(5)), None);
    }

    #[test]
    fn assign_rules() {
        let mut c = EpochCache::default();
        assert!(c.assign(e(0), o(0)));
        assert!(!c.assign(e(0), o(5))); // same epoch, later offset: no change
        assert!(c.assign(e(2), o(5)));
        assert_eq!(c.entries(), &entries(&[(0, 0), (2, 5)])[..]);
        // A conflicting entry (lower epoch at a later offset) replaces later epochs.
        assert!(c.assign(e(1), o(8)));
        assert_eq!(c.entries(), &entries(&[(0, 0), (1, 8)])[..]);
        // Same epoch at an earlier offset moves its start back.
        assert!(c.assign(e(1), o(3)));
        assert_eq!(c.entries(), &entries(&[(0, 0), (1, 3)])[..]);
    }

    #[test]
    fn truncation() {
        let mut c = cache(&[(1, 0), (3, 10), (6, 25)]);
        assert!(c.truncate_from_end(o(25)));
        assert_eq!(c.entries(), &entries(&[(1, 0), (3, 10)])[..]);
        assert!(!c.truncate_from_end(o(11)));
        let mut c = cache(&[(1, 0), (3, 10), (6, 25)]);
        assert!(c.truncate_from_start(o(12)));
        assert_eq!(c.entries(), &entries(&[(3, 12), (6, 25)])[..]);
        assert!(!c.truncate_from_start(o(12)));
        assert!(c.truncate_from_start(o(25)));
        assert_eq!(c.entries(), &entries(&[(6, 25)])[..]);
        let mut c = cache(&[(1, 5)]);
        assert!(!c.truncate_from_start(o(2)));
    }
}
