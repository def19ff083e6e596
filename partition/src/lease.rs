//! The broker's write lease, shared by every partition it hosts: the
//! heartbeat loop installs the controller's grants, and every leader
//! append (client produce, transaction markers, coordinator writes) asks
//! it first. The rules are `strand_replication::lease`'s; this is their
//! one owner of state.

use parking_lot::Mutex;
use strand_protocol::ErrorCode;
use strand_replication::lease::{self, Lease, LeaseGrant};
use strand_types::BrokerEpoch;
use tokio::sync::{watch, Notify};

pub struct WriteLease {
    /// `strand.write.lease.enable`: when off, every append is allowed and
    /// grants are recorded only for what they report.
    enforced: bool,
    /// `strand.write.lease.safety.margin.ms`.
    safety_margin_ms: u64,
    lease: Mutex<Option<Lease>>,
    /// Woken when an append was refused: the heartbeat loop asks again at
    /// once.
    wanted: Notify,
    /// The metadata offset (records applied) whose leaderships this
    /// broker's partitions have taken up: what its heartbeats report. Not
    /// the image's offset, which is published before the partitions act
    /// on it: the controller grants a lease to a broker it fenced only once
    /// it reports having applied the fencing, and a report ahead of the
    /// partitions would let one go on appending at a leadership it lost.
    reconciled: watch::Sender<u64>,
}

impl WriteLease {
    /// Leases enforced: a broker is write-forbidden until its first grant.
    pub fn enforced(safety_margin_ms: u64) -> WriteLease {
        WriteLease {
            enforced: true,
            safety_margin_ms,
            lease: Mutex::new(None),
            wanted: Notify::new(),
            reconciled: watch::Sender::new(0),
        }
    }

    /// Leases off (`strand.write.lease.enable=false`, and tests that drive a
    /// partition without a controller): every append is allowed.
    pub fn unenforced() -> WriteLease {
        WriteLease {
            enforced: false,
            safety_margin_ms: 0,
            lease: Mutex::new(None),
            wanted: Notify::new(),
            reconciled: watch::Sender::new(0),
        }
    }

    pub fn is_enforced(&self) -> bool {
        self.enforced
    }

    /// A heartbeat sent at `sent_at_ms` (monotonic) by this broker at
    /// `broker_epoch` was answered with `grant`.
    pub fn install(&self, grant: &LeaseGrant, broker_epoch: BrokerEpoch, sent_at_ms: i64) {
        let mut held = self.lease.lock();
        *held = lease::install(
            *held,
            grant,
            broker_epoch,
            sent_at_ms,
            self.safety_margin_ms,
        );
    }

    /// The lease held, if any.
    pub fn current(&self) -> Option<Lease> {
        *self.lease.lock()
    }

    /// Whether a leader that took up its leadership at `leadership_offset`
    /// may append at `now_ms` (monotonic).
    pub fn check(&self, now_ms: i64, leadership_offset: u64) -> Result<(), ErrorCode> {
        if !self.enforced {
            return Ok(());
        }
        let held = *self.lease.lock();
        let verdict = lease::check_write_authority(held.as_ref(), now_ms, leadership_offset);
        if verdict.is_err() {
            // A lease that lapsed (a pause, a slow controller) or does not
            // cover a new leadership yet: ask again now, not at the next
            // heartbeat.
            self.wanted.notify_one();
        }
        verdict
    }

    /// Resolves when an append was refused for want of a lease.
    pub async fn wanted(&self) {
        self.wanted.notified().await
    }

    /// Every partition here now leads or follows as the image of `applied`
    /// records says (never moves back).
    pub fn note_reconciled(&self, applied: u64) {
        self.reconciled.send_if_modified(|r| {
            let newer = applied > *r;
            if newer {
                *r = applied;
            }
            newer
        });
    }

    /// The offset the partitions reflect, and its changes: what the
    /// heartbeats report.
    pub fn reconciled(&self) -> watch::Receiver<u64> {
        self.reconciled.subscribe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enforced_leases_forbid_writes_until_granted_and_after_they_lapse() {
        let e = BrokerEpoch::new(7);
        let l = WriteLease::enforced(500);
        assert_eq!(l.check(0, 0), Err(ErrorCode::NotLeaderOrFollower));
        let grant = LeaseGrant {
            broker_epoch: e,
            generation: 1,
            duration_ms: 6_000,
            safe_metadata_offset: 10,
        };
        l.install(&grant, e, 1_000);
        assert_eq!(l.check(1_000, 10), Ok(()));
        assert_eq!(l.check(6_499, 0), Ok(()));
        assert_eq!(l.check(6_500, 0), Err(ErrorCode::NotLeaderOrFollower));
        assert_eq!(l.check(2_000, 11), Err(ErrorCode::NotLeaderOrFollower));
        let off = WriteLease::unenforced();
        assert_eq!(off.check(0, 99), Ok(()));
    }
}
