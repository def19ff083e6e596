//! Write leases (the brief's "From the RocketMQ seeds", seed 000): a
//! partition leader appends only while it holds a lease the controller
//! granted, so a leader cut off from the controller stops accepting writes
//! before the controller lets another broker lead its partitions.
//!
//! The controller answers each heartbeat of an active broker with a grant
//! (broker epoch, a generation that only grows, a duration, and the
//! metadata offset every broker that may still hold a lease has applied).
//! The broker installs it as a deadline on its monotonic clock counted from
//! when it *sent* the heartbeat, less a safety margin, so the deadline can
//! only fall before the controller's own view of the lease's end (the
//! controller counts from when it answered, which is later).
//!
//! The second half is the new leader's side. A leadership moved away from a
//! live broker (controlled shutdown, preferred election, reassignment) is
//! committed while that broker still holds a lease; until it has applied the
//! change it would go on appending at the old leader epoch. So a leader also
//! waits until the controller reports that every broker whose lease may
//! still be running has applied the record that made it leader (the grant's
//! `safe_metadata_offset`): from then on no other broker can append to the
//! partition at an older epoch. A leadership that follows a fencing costs no
//! wait: the fenced broker's lease ran out before its session did.
//!
//! Everything here is pure: time comes in as milliseconds of the caller's
//! monotonic clock.

use strand_protocol::ErrorCode;
use strand_types::BrokerEpoch;

/// A lease as the controller granted it in a heartbeat answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseGrant {
    /// The registration the lease is for.
    pub broker_epoch: BrokerEpoch,
    /// Grows with every grant, across controller failovers.
    pub generation: u64,
    /// How long the lease runs, from the heartbeat's send time.
    pub duration_ms: u64,
    /// Every broker that may still hold a lease has applied this many
    /// metadata records.
    pub safe_metadata_offset: u64,
}

/// The lease a broker holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lease {
    pub broker_epoch: BrokerEpoch,
    pub generation: u64,
    /// Monotonic milliseconds at which writes stop.
    pub deadline_ms: i64,
    /// The largest `safe_metadata_offset` granted so far: once every
    /// holder of a lease had applied an offset, they all stay past it.
    pub safe_metadata_offset: u64,
}

/// The lease after a grant arrives for a heartbeat sent at `sent_at_ms`
/// by this broker at `broker_epoch`. A grant for another registration, or
/// older than the one held, changes nothing; a grant whose duration does
/// not exceed the margin (or that is already over) installs no deadline
/// but still carries its safe offset.
pub fn install(
    current: Option<Lease>,
    grant: &LeaseGrant,
    broker_epoch: BrokerEpoch,
    sent_at_ms: i64,
    safety_margin_ms: u64,
) -> Option<Lease> {
    if grant.broker_epoch != broker_epoch {
        return current.filter(|l| l.broker_epoch == broker_epoch);
    }
    let current = current.filter(|l| l.broker_epoch == broker_epoch);
    if current.is_some_and(|l| l.generation >= grant.generation) {
        return current;
    }
    let usable = grant.duration_ms.saturating_sub(safety_margin_ms);
    let deadline = sent_at_ms.saturating_add(i64::try_from(usable).unwrap_or(i64::MAX));
    Some(Lease {
        broker_epoch,
        generation: grant.generation,
        // A later send time never shortens a lease already held.
        deadline_ms: current.map_or(deadline, |l| l.deadline_ms.max(deadline)),
        safe_metadata_offset: current.map_or(grant.safe_metadata_offset, |l| {
            l.safe_metadata_offset.max(grant.safe_metadata_offset)
        }),
    })
}

/// Whether a leader may append now. `leadership_offset` is the metadata
/// offset (records applied) at which this broker took up its current
/// leadership, 0 when it had no predecessor (a new partition). Refused with
/// NOT_LEADER_OR_FOLLOWER, which clients retry after a metadata refresh,
/// as they do during any leader change.
pub fn check_write_authority(
    lease: Option<&Lease>,
    now_ms: i64,
    leadership_offset: u64,
) -> Result<(), ErrorCode> {
    match lease {
        Some(l) if now_ms < l.deadline_ms && l.safe_metadata_offset >= leadership_offset => Ok(()),
        _ => Err(ErrorCode::NotLeaderOrFollower),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn e(x: i64) -> BrokerEpoch {
        BrokerEpoch::new(x)
    }

    fn grant(epoch: i64, generation: u64, duration_ms: u64, safe: u64) -> LeaseGrant {
        LeaseGrant {
            broker_epoch: e(epoch),
            generation,
            duration_ms,
            safe_metadata_offset: safe,
        }
    }

    type InstallCase = (&'static str, Option<Lease>, LeaseGrant, i64, Option<Lease>);
    type AuthorityCase<'a> = (
        &'static str,
        Option<&'a Lease>,
        i64,
        u64,
        Result<(), ErrorCode>,
    );

    #[test]
    fn install_table() {
        let held = Lease {
            broker_epoch: e(5),
            generation: 10,
            deadline_ms: 7_000,
            safe_metadata_offset: 40,
        };
        // (current, grant, our epoch, sent at) -> installed
        let cases: Vec<InstallCase> = vec![
            (
                "first grant: deadline from the send time, less the margin",
                None,
                grant(5, 1, 6_000, 30),
                1_000,
                Some(Lease {
                    broker_epoch: e(5),
                    generation: 1,
                    deadline_ms: 6_500,
                    safe_metadata_offset: 30,
                }),
            ),
            (
                "a grant for another registration is ignored",
                Some(held),
                grant(4, 11, 6_000, 50),
                2_000,
                Some(held),
            ),
            (
                "a grant for another registration installs nothing",
                None,
                grant(4, 11, 6_000, 50),
                2_000,
                None,
            ),
            (
                "an older or repeated generation is ignored",
                Some(held),
                grant(5, 10, 6_000, 50),
                2_000,
                Some(held),
            ),
            (
                "a newer grant extends the deadline and raises the safe offset",
                Some(held),
                grant(5, 11, 6_000, 50),
                2_000,
                Some(Lease {
                    generation: 11,
                    deadline_ms: 7_500,
                    safe_metadata_offset: 50,
                    ..held
                }),
            ),
            (
                "a newer grant never shortens the deadline nor lowers the safe offset",
                Some(held),
                grant(5, 11, 1_000, 20),
                2_000,
                Some(Lease {
                    generation: 11,
                    ..held
                }),
            ),
            (
                "a lease held for an older registration is dropped",
                Some(Lease {
                    broker_epoch: e(3),
                    ..held
                }),
                grant(5, 1, 6_000, 30),
                1_000,
                Some(Lease {
                    broker_epoch: e(5),
                    generation: 1,
                    deadline_ms: 6_500,
                    safe_metadata_offset: 30,
                }),
            ),
            (
                "a duration within the margin grants no time",
                None,
                grant(5, 1, 400, 30),
                1_000,
                Some(Lease {
                    broker_epoch: e(5),
                    generation: 1,
                    deadline_ms: 1_000,
                    safe_metadata_offset: 30,
                }),
            ),
        ];
        for (what, current, g, sent, want) in cases {
            assert_eq!(install(current, &g, e(5), sent, 500), want, "{what}");
        }
    }

    #[test]
    fn write_authority_table() {
        let lease = Lease {
            broker_epoch: e(5),
            generation: 3,
            deadline_ms: 10_000,
            safe_metadata_offset: 40,
        };
        let nl = Err(ErrorCode::NotLeaderOrFollower);
        // (lease, now, leadership offset) -> decision
        let cases: Vec<AuthorityCase> = vec![
            ("no lease yet: write-forbidden", None, 0, 0, nl),
            ("valid, new partition", Some(&lease), 9_999, 0, Ok(())),
            ("valid, leadership covered", Some(&lease), 5_000, 40, Ok(())),
            ("lapsed at the deadline", Some(&lease), 10_000, 0, nl),
            ("lapsed after it", Some(&lease), 60_000, 0, nl),
            ("a predecessor may still write", Some(&lease), 5_000, 41, nl),
        ];
        for (what, l, now, offset, want) in cases {
            assert_eq!(check_write_authority(l, now, offset), want, "{what}");
        }
    }

    proptest! {
        /// However grants arrive (reordered, repeated, for other
        /// registrations, with any send times), the deadline a broker holds
        /// never ends after the latest send time of a grant it accepted
        /// plus that grant's duration less the margin, and never moves
        /// back; the safe offset never moves back.
        #[test]
        fn a_lease_never_outlives_its_grants(
            grants in proptest::collection::vec(
                (4i64..7, 0u64..20, 0u64..10_000, 0u64..100, 0i64..100_000), 1..40)
        ) {
            let margin = 500;
            let mut lease: Option<Lease> = None;
            let mut latest_end = i64::MIN;
            for (epoch, generation, duration, safe, sent) in grants {
                let g = grant(epoch, generation, duration, safe);
                let before = lease;
                lease = install(lease, &g, e(5), sent, margin);
                if lease != before.filter(|l| l.broker_epoch == e(5)) {
                    // Accepted: this grant may end the lease later.
                    latest_end = latest_end.max(sent + duration.saturating_sub(margin) as i64);
                }
                if let Some(l) = lease {
                    prop_assert!(l.deadline_ms <= latest_end);
                    prop_assert_eq!(l.broker_epoch, e(5));
                    if let Some(b) = before {
                        prop_assert!(l.deadline_ms >= b.deadline_ms);
                        prop_assert!(l.safe_metadata_offset >= b.safe_metadata_offset);
                        prop_assert!(l.generation >= b.generation);
                    }
                }
            }
        }
    }
}
