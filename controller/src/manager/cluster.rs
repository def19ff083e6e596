//! Cluster membership and fencing (Kafka 3.7's ClusterControlManager and
//! BrokerHeartbeatManager).
//!
//! Replicated state lives in the image (`BrokerRecord::fenced`,
//! `in_controlled_shutdown`, `broker_epoch`, `incarnation_id`). Heartbeat
//! times are soft state: `BrokerHeartbeats`, kept only in the active
//! controller's memory and rebuilt on failover (`BrokerHeartbeats::rebuild`)
//! with every broker last heard from at the failover time.
//!
//! A broker's state, from the image: FENCED if fenced, else CONTROLLED_SHUTDOWN
//! if in controlled shutdown, else UNFENCED. A heartbeat moves it:
//! - FENCED: want_shutdown -> SHUTDOWN_NOW; else unless want_fence, caught up
//!   (current_metadata_offset >= its registration's offset) -> UNFENCED.
//! - UNFENCED: want_fence -> FENCED (SHUTDOWN_NOW with want_shutdown);
//!   want_shutdown -> CONTROLLED_SHUTDOWN if it leads anything, else SHUTDOWN_NOW.
//! - CONTROLLED_SHUTDOWN: SHUTDOWN_NOW once it leads nothing and every active
//!   broker has applied the records that moved its leaderships.
//!
//! SHUTDOWN_NOW fences the broker and answers should_shutdown.

use super::common::ApiError;
use super::replication::{
    handle_broker_fenced, handle_broker_unfenced, handle_controlled_shutdown, has_leaderships,
    remove_broker_from_partitions,
};
use std::collections::BTreeMap;
pub use strand_metadata::controller_api::{
    BrokerRegistrationRequest, HeartbeatReply, HeartbeatRequest, LeaseGrant,
};
use strand_metadata::image::MetadataImage;
use strand_metadata::records::{BrokerRecord, MetadataRecord};
use strand_protocol::ErrorCode;
use strand_types::{BrokerEpoch, BrokerId};

/// What the controller remembers of one broker's heartbeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerSession {
    pub last_contact_ms: u64,
    /// The metadata offset (records applied) the broker last reported.
    pub metadata_offset: Option<u64>,
    /// Set on entering controlled shutdown: the log end (records applied)
    /// once the records moving its leaderships are committed.
    pub controlled_shutdown_offset: Option<u64>,
    /// Until when (session clock) the broker may hold a write lease: the
    /// last grant's answer time plus its duration, which the broker's own
    /// deadline (counted from its earlier send time) cannot pass.
    pub lease_until_ms: Option<u64>,
    /// No lease until the broker reports having applied this many records:
    /// the end of the records that last fenced it. Fencing takes its
    /// leaderships away, but a broker fenced while cut off still leads in
    /// its own view until it applies that; a lease granted sooner (its
    /// heartbeats reach the controller again before the metadata does)
    /// would let it append at a leadership another broker now holds.
    pub lease_after_offset: u64,
}

impl BrokerSession {
    fn new(now_ms: u64) -> Self {
        BrokerSession {
            last_contact_ms: now_ms,
            metadata_offset: None,
            controlled_shutdown_offset: None,
            lease_until_ms: None,
            lease_after_offset: 0,
        }
    }
}

/// Soft state: the active controller's record of broker heartbeats.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerHeartbeats {
    sessions: BTreeMap<BrokerId, BrokerSession>,
    /// The last lease generation granted: starts at the controller's Raft
    /// term shifted into the high bits, so grants of a later controller
    /// are always newer.
    lease_generation: u64,
    /// The duration of the leases granted (`strand.write.lease.ms`).
    lease_ms: u64,
}

impl BrokerHeartbeats {
    /// The soft state of a controller that just became active in Raft
    /// term `term`: every registered broker was last heard from now, and an
    /// unfenced one may hold a lease an earlier controller granted up to
    /// now, so its lease counts until `now_ms + lease_ms`. A fenced broker
    /// holds none: it was fenced when its session ran out (its lease ended
    /// first, as leases are shorter than sessions), or when it finished a
    /// controlled shutdown leading nothing, or at a new registration; when
    /// is not known here, so it gets no lease before it has applied all of
    /// this image.
    pub fn rebuild(image: &MetadataImage, now_ms: u64, term: u64, lease_ms: u64) -> Self {
        let sessions = image
            .brokers
            .values()
            .map(|b| {
                let mut s = BrokerSession::new(now_ms);
                if b.fenced {
                    s.lease_after_offset = image.applied;
                } else {
                    s.lease_until_ms = Some(now_ms.saturating_add(lease_ms));
                }
                (b.broker_id, s)
            })
            .collect();
        BrokerHeartbeats {
            sessions,
            lease_generation: term << 32,
            lease_ms,
        }
    }

    /// The metadata offset every broker other than `for_broker` that may
    /// hold a lease at `now_ms` has applied, never past `applied` (see
    /// `strand_replication::lease`): the offset `for_broker`'s new
    /// leaderships wait for. The broker asking is left out: it has applied
    /// whatever leadership it acts on.
    pub fn safe_metadata_offset_for(&self, for_broker: BrokerId, applied: u64, now_ms: u64) -> u64 {
        safe_metadata_offset(
            self.sessions
                .iter()
                .filter(|(id, _)| **id != for_broker)
                .filter(|(_, s)| s.lease_until_ms.is_some_and(|until| until > now_ms))
                .map(|(_, s)| s.metadata_offset),
            applied,
        )
    }

    /// The same for every broker: what all lease holders have applied.
    pub fn safe_metadata_offset(&self, image: &MetadataImage, now_ms: u64) -> u64 {
        safe_metadata_offset(
            self.sessions
                .values()
                .filter(|s| s.lease_until_ms.is_some_and(|until| until > now_ms))
                .map(|s| s.metadata_offset),
            image.applied,
        )
    }

    /// Credits every session with `stalled_ms` the controller spent not
    /// listening (its process paused, its event loop held up): heartbeats
    /// sent meanwhile wait unheard in its queue, so that time is the
    /// controller's silence, not the brokers'.
    pub fn credit_stall(&mut self, stalled_ms: u64) {
        for s in self.sessions.values_mut() {
            s.last_contact_ms = s.last_contact_ms.saturating_add(stalled_ms);
        }
    }

    /// Forgets a broker's session: its process is known to be gone (the
    /// broker of a combined node whose controller just restarted), so a new
    /// incarnation may register at once instead of after the session timeout.
    pub fn forget(&mut self, broker_id: BrokerId) {
        self.sessions.remove(&broker_id);
    }

    pub fn session(&self, broker_id: BrokerId) -> Option<&BrokerSession> {
        self.sessions.get(&broker_id)
    }

    /// Registered, unfenced, and heard from within the session timeout.
    pub fn has_valid_session(
        &self,
        image: &MetadataImage,
        broker_id: BrokerId,
        now_ms: u64,
        session_timeout_ms: u64,
    ) -> bool {
        match (image.brokers.get(&broker_id), self.sessions.get(&broker_id)) {
            (Some(b), Some(s)) => {
                !b.fenced && s.last_contact_ms.saturating_add(session_timeout_ms) >= now_ms
            }
            _ => false,
        }
    }

    /// When the next unfenced broker's session expires, if any: the time to
    /// call `fence_stale_brokers` next.
    pub fn next_expiry_ms(&self, image: &MetadataImage, session_timeout_ms: u64) -> Option<u64> {
        image
            .brokers
            .values()
            .filter(|b| !b.fenced)
            .filter_map(|b| self.sessions.get(&b.broker_id))
            .map(|s| s.last_contact_ms.saturating_add(session_timeout_ms) + 1)
            .min()
    }

    /// The lowest metadata offset reported by an active broker (unfenced, not
    /// shutting down); u64::MAX with none. A broker not heard from since
    /// failover counts as offset 0.
    fn lowest_active_offset(&self, image: &MetadataImage) -> u64 {
        image
            .brokers
            .values()
            .filter(|b| b.is_active())
            .map(|b| {
                self.sessions
                    .get(&b.broker_id)
                    .and_then(|s| s.metadata_offset)
                    .unwrap_or(0)
            })
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// The offset a broker must have applied (`current_metadata_offset`, in
/// records applied) to have seen its own registration: the caught-up
/// threshold `heartbeat` takes.
pub fn caught_up_offset(broker: &BrokerRecord) -> u64 {
    u64::try_from(broker.broker_epoch.get()).unwrap_or(0) + 1
}

/// The metadata offset every broker that may still hold a write lease has
/// applied. `holders` lists, for each broker whose lease may not have run
/// out (by the controller's reckoning, which ends no earlier than the
/// broker's), the offset it last reported, `None` when it has not reported
/// one to this controller (which holds everything back). `applied` is what
/// the controller itself has applied; with no holder, all of it is safe.
pub fn safe_metadata_offset<I>(holders: I, applied: u64) -> u64
where
    I: IntoIterator<Item = Option<u64>>,
{
    holders
        .into_iter()
        .map(|reported| reported.unwrap_or(0))
        .min()
        .map_or(applied, |m| m.min(applied))
}

/// Registers a broker, fenced, under a new broker epoch: the registration
/// record's position in the metadata log (`image.applied` plus the records
/// before it), and above any previous epoch of the broker. Returns the records
/// and the epoch.
///
/// A different incarnation while the previous one's session is live is a
/// DUPLICATE_BROKER_REGISTRATION. A negative broker id (only a request read
/// from the controller RPC can carry one) is INVALID_REQUEST. Re-registering
/// a broker that is not fenced first moves it out of ISRs and leaderships,
/// as fencing would: a new registration means a restarted (or retried)
/// broker that must catch up.
pub fn register_broker(
    image: &MetadataImage,
    heartbeats: &mut BrokerHeartbeats,
    req: &BrokerRegistrationRequest,
    now_ms: u64,
    session_timeout_ms: u64,
) -> Result<(Vec<MetadataRecord>, BrokerEpoch), ApiError> {
    if req.broker_id.get() < 0 {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("Invalid broker id {}", req.broker_id),
        ));
    }
    // Kafka's ClusterControlManager: a broker whose data belongs to another
    // cluster never joins this one.
    if !req.cluster_id.is_empty()
        && !image.cluster_id.is_empty()
        && req.cluster_id != image.cluster_id
    {
        return Err(ApiError::new(
            ErrorCode::InconsistentClusterId,
            format!(
                "Expected cluster ID {}, but got cluster ID {}",
                image.cluster_id, req.cluster_id
            ),
        ));
    }
    // Several log directories need directory assignment (KIP-858), a
    // metadata.version the cluster may not be at yet.
    let mv = image.feature_level(strand_metadata::features::METADATA_VERSION);
    if req.log_dirs.len() > 1 && mv < strand_metadata::features::MV_DIRECTORY_ASSIGNMENT {
        let name = |level| strand_metadata::features::metadata_version_name(level).unwrap_or("?");
        return Err(ApiError::new(
            ErrorCode::UnsupportedVersion,
            format!(
                "Multiple log directories (aka JBOD) are not supported in the current MetadataVersion {}. Need {} or higher",
                name(mv),
                name(strand_metadata::features::MV_DIRECTORY_ASSIGNMENT)
            ),
        ));
    }
    let existing = image.brokers.get(&req.broker_id);
    let mut records = Vec::new();
    if let Some(prev) = existing {
        if prev.incarnation_id != req.incarnation_id
            && heartbeats.has_valid_session(image, req.broker_id, now_ms, session_timeout_ms)
        {
            return Err(ApiError::new(
                ErrorCode::DuplicateBrokerRegistration,
                "Another broker is registered with that broker id.",
            ));
        }
        if !prev.fenced {
            records = remove_broker_from_partitions(image, req.broker_id);
        }
    }
    let position = image.applied as i64 + records.len() as i64;
    let broker_epoch =
        BrokerEpoch::new(position.max(existing.map_or(0, |b| b.broker_epoch.get() + 1)));
    records.push(MetadataRecord::RegisterBroker(BrokerRecord {
        broker_id: req.broker_id,
        broker_epoch,
        host: req.host.clone(),
        port: req.port,
        rack: req.rack.clone(),
        incarnation_id: req.incarnation_id,
        fenced: true,
        in_controlled_shutdown: false,
        endpoints: req.endpoints.clone(),
        log_dirs: req.log_dirs.clone(),
    }));
    // A lease the previous registration may hold still counts until it
    // runs out: that process may be alive, cut off, and still appending.
    let previous = heartbeats.sessions.get(&req.broker_id);
    let mut session = BrokerSession::new(now_ms);
    session.lease_until_ms = previous.and_then(|s| s.lease_until_ms);
    // And no lease before the leaderships it loses here are applied.
    session.lease_after_offset = previous
        .map_or(0, |s| s.lease_after_offset)
        .max(image.applied + records.len() as u64);
    heartbeats.sessions.insert(req.broker_id, session);
    Ok((records, broker_epoch))
}

/// UnregisterBroker (Kafka 4.4's ReplicationControlManager.unregisterBroker):
/// the broker leaves the cluster. Refused only for an unknown broker
/// (BROKER_ID_NOT_REGISTERED); Kafka does not check that the broker is
/// stopped, and neither does Strand (a broker still running is then
/// refused at its next heartbeat and leads nothing). Moves it out of every
/// ISR and leadership, then removes its registration; partitions still
/// naming it as a replica keep doing so until reassigned.
pub fn unregister_broker(
    image: &MetadataImage,
    broker_id: BrokerId,
) -> Result<Vec<MetadataRecord>, ApiError> {
    let Some(b) = image.brokers.get(&broker_id) else {
        return Err(ApiError::new(
            ErrorCode::BrokerIdNotRegistered,
            format!("Broker ID {broker_id} is not currently registered"),
        ));
    };
    let mut records = remove_broker_from_partitions(image, broker_id);
    records.push(MetadataRecord::UnregisterBroker {
        broker_id,
        broker_epoch: b.broker_epoch,
    });
    Ok(records)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BrokerState {
    Fenced,
    Unfenced,
    ControlledShutdown,
    ShutdownNow,
}

/// A heartbeat: records for the broker's state change, if any, and the reply.
/// `caught_up_offset` is the offset the broker must have applied to be
/// unfenced (normally `caught_up_offset(broker)`). Errors:
/// BROKER_ID_NOT_REGISTERED for an unknown broker, STALE_BROKER_EPOCH for any
/// epoch but the current registration's.
pub fn heartbeat(
    image: &MetadataImage,
    heartbeats: &mut BrokerHeartbeats,
    req: &HeartbeatRequest,
    caught_up_offset: u64,
    now_ms: u64,
) -> Result<(Vec<MetadataRecord>, HeartbeatReply), ApiError> {
    let lease_ms = heartbeats.lease_ms;
    let Some(b) = image.brokers.get(&req.broker_id) else {
        return Err(ApiError::new(
            ErrorCode::BrokerIdNotRegistered,
            format!("Broker {} is not registered.", req.broker_id),
        ));
    };
    if b.broker_epoch != req.broker_epoch {
        return Err(ApiError::new(
            ErrorCode::StaleBrokerEpoch,
            format!(
                "Expected broker epoch {}, but got broker epoch {}",
                b.broker_epoch, req.broker_epoch
            ),
        ));
    }
    let id = req.broker_id;
    let caught_up = req.current_metadata_offset >= caught_up_offset;
    let current = if b.fenced {
        BrokerState::Fenced
    } else if b.in_controlled_shutdown {
        BrokerState::ControlledShutdown
    } else {
        BrokerState::Unfenced
    };
    let next = match current {
        BrokerState::Fenced if req.want_shutdown => BrokerState::ShutdownNow,
        BrokerState::Fenced if !req.want_fence && caught_up => BrokerState::Unfenced,
        BrokerState::Fenced => BrokerState::Fenced,
        BrokerState::Unfenced if req.want_fence && req.want_shutdown => BrokerState::ShutdownNow,
        BrokerState::Unfenced if req.want_fence => BrokerState::Fenced,
        BrokerState::Unfenced if req.want_shutdown => {
            if has_leaderships(image, id) {
                BrokerState::ControlledShutdown
            } else {
                BrokerState::ShutdownNow
            }
        }
        BrokerState::Unfenced => BrokerState::Unfenced,
        BrokerState::ControlledShutdown => {
            let done_at = heartbeats
                .session(id)
                .and_then(|s| s.controlled_shutdown_offset)
                .unwrap_or(image.applied);
            if !has_leaderships(image, id) && done_at <= heartbeats.lowest_active_offset(image) {
                BrokerState::ShutdownNow
            } else {
                BrokerState::ControlledShutdown
            }
        }
        BrokerState::ShutdownNow => BrokerState::ShutdownNow,
    };
    // Failed log directories are handled while the broker's state stays
    // (their partition changes and a state change's would race on the
    // same partitions); the broker reports them at every heartbeat.
    let records = if current == next {
        super::replication::handle_dirs_offline(image, id, &req.offline_log_dirs)
    } else {
        match next {
            BrokerState::Fenced | BrokerState::ShutdownNow => handle_broker_fenced(image, id),
            BrokerState::Unfenced => handle_broker_unfenced(image, id),
            BrokerState::ControlledShutdown => handle_controlled_shutdown(image, id),
        }
    };
    let session = heartbeats
        .sessions
        .entry(id)
        .or_insert(BrokerSession::new(now_ms));
    let fenced_now = matches!(next, BrokerState::Fenced | BrokerState::ShutdownNow);
    if fenced_now && !matches!(current, BrokerState::Fenced) {
        session.lease_after_offset = image.applied + records.len() as u64;
    }
    session.last_contact_ms = now_ms;
    session.metadata_offset = Some(req.current_metadata_offset);
    if next == BrokerState::ControlledShutdown {
        session
            .controlled_shutdown_offset
            .get_or_insert(image.applied + records.len() as u64);
    } else {
        session.controlled_shutdown_offset = None;
    }
    // A lease for a broker that may lead: unfenced, or shutting down while
    // its leaderships move. A fenced broker gets none (one it holds runs
    // out), nor does one that has not yet applied its last fencing.
    let leased = matches!(
        next,
        BrokerState::Unfenced | BrokerState::ControlledShutdown
    ) && req.current_metadata_offset >= session.lease_after_offset;
    if leased {
        let until = now_ms.saturating_add(lease_ms);
        session.lease_until_ms = Some(session.lease_until_ms.map_or(until, |u| u.max(until)));
    }
    let lease = if leased {
        heartbeats.lease_generation += 1;
        Some(LeaseGrant {
            broker_epoch: req.broker_epoch,
            generation: heartbeats.lease_generation,
            duration_ms: lease_ms,
            // Up to this heartbeat's own records (the reply is sent once
            // they are committed): the leaderships they move are covered
            // at once only when no other broker holds a lease, and else
            // once every other holder has applied them.
            safe_metadata_offset: heartbeats.safe_metadata_offset_for(
                id,
                image.applied + records.len() as u64,
                now_ms,
            ),
        })
    } else {
        None
    };
    let reply = HeartbeatReply {
        is_caught_up: caught_up,
        is_fenced: fenced_now,
        in_controlled_shutdown: next == BrokerState::ControlledShutdown,
        should_shutdown: next == BrokerState::ShutdownNow,
        lease,
    };
    Ok((records, reply))
}

/// How long the controller was not listening before an event at `now_ms`,
/// when that counts as a stall of its own: its event loop runs at least
/// every tick (250 ms), so a gap since the previous event longer than half
/// a broker session is the controller paused or held up, not brokers gone
/// silent, and sessions are credited with it
/// ([`BrokerHeartbeats::credit_stall`]) before anything is fenced.
/// Ordinary lateness (a busy machine) is below the bound and credits
/// nothing, so a late loop still fences a broker that stopped.
pub fn controller_stall(
    previous_event_ms: Option<u64>,
    now_ms: u64,
    session_timeout_ms: u64,
) -> Option<u64> {
    let gap = now_ms.saturating_sub(previous_event_ms?);
    (gap > session_timeout_ms / 2).then_some(gap)
}

/// Fences every unfenced broker not heard from for longer than
/// `session_timeout_ms` (broker.session.timeout.ms), moving its ISR
/// memberships and leaderships. Brokers without a session are left alone
/// (`BrokerHeartbeats::rebuild` gives every broker one). Each fenced broker
/// gets no lease until it has applied these records.
pub fn fence_stale_brokers(
    image: &MetadataImage,
    heartbeats: &mut BrokerHeartbeats,
    now_ms: u64,
    session_timeout_ms: u64,
) -> Vec<MetadataRecord> {
    let stale: Vec<BrokerId> = image
        .brokers
        .values()
        .filter(|b| !b.fenced)
        .filter(|b| {
            heartbeats
                .session(b.broker_id)
                .is_some_and(|s| s.last_contact_ms.saturating_add(session_timeout_ms) < now_ms)
        })
        .map(|b| b.broker_id)
        .collect();
    if stale.is_empty() {
        return vec![];
    }
    // Later fencings must see earlier ones (no leadership moves to a broker
    // fenced in the same pass).
    let mut scratch = image.clone();
    let mut records = Vec::new();
    for id in &stale {
        let recs = handle_broker_fenced(&scratch, *id);
        for r in &recs {
            scratch.apply(r);
        }
        records.extend(recs);
    }
    let fenced_through = image.applied + records.len() as u64;
    for id in &stale {
        if let Some(s) = heartbeats.sessions.get_mut(id) {
            s.lease_after_offset = fenced_through;
        }
    }
    records
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::manager::testutil::{add_topic, apply_all, b, be, ids, wire};
    use uuid::Uuid;

    const TIMEOUT: u64 = 9000;

    /// A registration of broker `id` (any integer, as read from the
    /// controller RPC).
    fn req(id: i32, inc: u128) -> BrokerRegistrationRequest {
        BrokerRegistrationRequest {
            broker_id: wire(id.into()),
            incarnation_id: Uuid::from_u128(inc),
            host: "h".into(),
            port: 9092,
            rack: None,
            endpoints: vec![],
            cluster_id: String::new(),
            log_dirs: vec![],
        }
    }

    fn hb(
        id: i32,
        epoch: BrokerEpoch,
        offset: u64,
        want_fence: bool,
        want_shutdown: bool,
    ) -> HeartbeatRequest {
        HeartbeatRequest {
            broker_id: b(id),
            broker_epoch: epoch,
            current_metadata_offset: offset,
            want_fence,
            want_shutdown,
            offline_log_dirs: vec![],
        }
    }

    /// Registers and unfences brokers; returns their epochs.
    fn cluster(
        img: &mut MetadataImage,
        hbs: &mut BrokerHeartbeats,
        ids: &[i32],
    ) -> Vec<BrokerEpoch> {
        let mut epochs = vec![];
        for &id in ids {
            let (recs, epoch) =
                register_broker(img, hbs, &req(id, id as u128), 0, TIMEOUT).unwrap();
            apply_all(img, &recs);
            let (recs, reply) = heartbeat(
                img,
                hbs,
                &hb(id, epoch, img.applied, false, false),
                caught_up_offset(&img.brokers[&b(id)]),
                0,
            )
            .unwrap();
            assert!(!reply.is_fenced);
            apply_all(img, &recs);
            epochs.push(epoch);
        }
        epochs
    }

    #[test]
    fn safe_metadata_offset_table() {
        assert_eq!(safe_metadata_offset([], 70), 70, "no holder: all applied");
        assert_eq!(safe_metadata_offset([Some(50), Some(60)], 70), 50);
        assert_eq!(
            safe_metadata_offset([Some(50), None], 70),
            0,
            "a holder that has not reported holds everything back"
        );
        assert_eq!(
            safe_metadata_offset([Some(90)], 70),
            70,
            "never past what the controller applied"
        );
    }

    /// Leases go to active brokers only, in growing generations; the safe
    /// offset counts every broker whose lease may still run, fenced or
    /// re-registered ones included until theirs ends, and after a
    /// failover every broker until it reports.
    #[test]
    fn leases_and_the_safe_offset() {
        const LEASE: u64 = 4_000;
        let mut img = MetadataImage::default();
        img.apply(&MetadataRecord::ClusterFormatted {
            cluster_id: "c".into(),
        });
        let mut hbs = BrokerHeartbeats::rebuild(&img, 0, 3, LEASE);
        let e = cluster(&mut img, &mut hbs, &[1, 2]);
        let grant = |hbs: &mut BrokerHeartbeats, img: &MetadataImage, id: i32, offset, now| {
            heartbeat(
                img,
                hbs,
                &hb(id, e[id as usize - 1], offset, false, false),
                0,
                now,
            )
            .unwrap()
            .1
            .lease
        };
        let g1 = grant(&mut hbs, &img, 1, img.applied, 100).expect("unfenced: leased");
        assert_eq!(g1.duration_ms, LEASE);
        assert_eq!(g1.broker_epoch, e[0]);
        assert!(g1.generation > 3 << 32, "generations start above the term");
        // Broker 2 last reported an older offset: it holds the safe offset back.
        let behind = img.applied - 1;
        let g2 = grant(&mut hbs, &img, 2, behind, 200).expect("leased");
        assert!(g2.generation > g1.generation);
        assert_eq!(
            g2.safe_metadata_offset, img.applied,
            "a broker's own report never holds its grant back"
        );
        let g1 = grant(&mut hbs, &img, 1, img.applied, 300).expect("leased");
        assert_eq!(g1.safe_metadata_offset, behind);
        // Broker 2 falls silent: once its lease (answered at 200) has run
        // out, it no longer holds anything back.
        let g1 = grant(&mut hbs, &img, 1, img.applied, 199 + LEASE).expect("leased");
        assert_eq!(g1.safe_metadata_offset, behind, "its lease runs until 4200");
        let g1 = grant(&mut hbs, &img, 1, img.applied, 200 + LEASE).expect("leased");
        assert_eq!(g1.safe_metadata_offset, img.applied);
        // A fenced broker gets no lease.
        let (recs, reply) = heartbeat(
            &img,
            &mut hbs,
            &hb(2, e[1], img.applied, true, false),
            0,
            5_000,
        )
        .unwrap();
        assert!(reply.is_fenced && reply.lease.is_none());
        apply_all(&mut img, &recs);
        // A new incarnation of broker 1 once its session has expired, while
        // the old one's lease (granted at 4200 for 4 s longer than the
        // session, in this test) may still run: it still counts, and
        // nothing is reported for it.
        hbs.lease_ms = TIMEOUT + 4_000;
        grant(&mut hbs, &img, 1, img.applied, 4_200).expect("leased");
        let now = 4_201 + TIMEOUT;
        let (recs, _) = register_broker(&img, &mut hbs, &req(1, 99), now, TIMEOUT).unwrap();
        apply_all(&mut img, &recs);
        assert_eq!(hbs.safe_metadata_offset(&img, now), 0);
        assert_eq!(
            hbs.safe_metadata_offset(&img, 4_200 + TIMEOUT + 4_000),
            img.applied,
            "the old incarnation's lease has run out"
        );
        // A new active controller: an unfenced broker may hold an earlier
        // controller's lease until now + LEASE, and has reported nothing to
        // it; a fenced one (broker 2) holds none.
        let e1 = img.brokers[&b(1)].broker_epoch;
        let (recs, reply) = heartbeat(
            &img,
            &mut hbs,
            &hb(1, e1, img.applied, false, false),
            caught_up_offset(&img.brokers[&b(1)]),
            now,
        )
        .unwrap();
        assert!(!reply.is_fenced);
        apply_all(&mut img, &recs);
        let mut rebuilt = BrokerHeartbeats::rebuild(&img, 30_000, 4, LEASE);
        assert_eq!(rebuilt.safe_metadata_offset(&img, 30_000), 0);
        assert_eq!(
            rebuilt.safe_metadata_offset(&img, 30_000 + LEASE),
            img.applied
        );
        let g = heartbeat(
            &img,
            &mut rebuilt,
            &hb(1, e1, img.applied, false, false),
            0,
            30_001,
        )
        .unwrap()
        .1
        .lease
        .expect("leased");
        assert_eq!(
            g.safe_metadata_offset, img.applied,
            "no other broker holds a lease"
        );
        assert!(g.generation > 4 << 32);
    }

    /// A broker fenced while cut off still leads in its own view until it
    /// applies its fencing; when its heartbeats reach the controller again
    /// before the metadata does, it may be unfenced (it has applied its
    /// registration) but gets no lease until it reports the fencing
    /// applied. This let an isolated leader append acks=1 writes at its
    /// old epoch, after another broker led, until its image caught up
    /// (found by the lease probe). The same after a fencing it asked for,
    /// and after a failover, which does not know when a broker was fenced.
    #[test]
    fn no_lease_before_the_fencing_is_applied() {
        const LEASE: u64 = 2_000;
        let mut img = MetadataImage::default();
        img.apply(&MetadataRecord::ClusterFormatted {
            cluster_id: "c".into(),
        });
        let mut hbs = BrokerHeartbeats::rebuild(&img, 0, 3, LEASE);
        let e = cluster(&mut img, &mut hbs, &[1, 2, 3]);
        add_topic(&mut img, "t", &[(&[1, 2, 3], &[1, 2, 3], 1)]);
        let lease = |hbs: &mut BrokerHeartbeats, img: &mut MetadataImage, id: i32, offset, now| {
            let (recs, reply) = heartbeat(
                img,
                hbs,
                &hb(id, e[id as usize - 1], offset, false, false),
                caught_up_offset(&img.brokers[&b(id)]),
                now,
            )
            .unwrap();
            apply_all(img, &recs);
            assert!(!reply.is_fenced, "caught up to its registration");
            reply.lease
        };
        for id in [1, 2, 3] {
            let all = img.applied;
            assert!(lease(&mut hbs, &mut img, id, all, 1_000).is_some());
        }
        // Broker 1 (the leader) falls silent; the others go on.
        let before = img.applied;
        let now = 1_001 + TIMEOUT;
        for id in [2, 3] {
            let all = img.applied;
            lease(&mut hbs, &mut img, id, all, now - 1);
        }
        let recs = fence_stale_brokers(&img, &mut hbs, now, TIMEOUT);
        assert!(!recs.is_empty());
        apply_all(&mut img, &recs);
        let fenced_through = img.applied;
        assert_ne!(img.partition("t", 0).unwrap().leader, Some(b(1)));
        // Healed: it reports what it had before the fencing. Unfenced, as
        // Kafka would, but not leased, twice; then it applies the fencing.
        assert_eq!(lease(&mut hbs, &mut img, 1, before, now + 100), None);
        assert!(!img.brokers[&b(1)].fenced);
        assert_eq!(
            lease(&mut hbs, &mut img, 1, fenced_through - 1, now + 200),
            None
        );
        assert!(lease(&mut hbs, &mut img, 1, fenced_through, now + 300).is_some());
        // A fencing it asked for: the same.
        let (recs, reply) = heartbeat(
            &img,
            &mut hbs,
            &hb(2, e[1], img.applied, true, false),
            0,
            now + 400,
        )
        .unwrap();
        assert!(reply.is_fenced && reply.lease.is_none());
        let asked_before = img.applied;
        apply_all(&mut img, &recs);
        let all = img.applied;
        assert_eq!(lease(&mut hbs, &mut img, 2, asked_before, now + 500), None);
        assert!(lease(&mut hbs, &mut img, 2, all, now + 600).is_some());
        // After a failover the new controller knows only that broker 3 is
        // fenced: no lease before it has applied all the new one had.
        let (recs, _) = heartbeat(
            &img,
            &mut hbs,
            &hb(3, e[2], img.applied, true, false),
            0,
            now + 700,
        )
        .unwrap();
        apply_all(&mut img, &recs);
        let mut rebuilt = BrokerHeartbeats::rebuild(&img, now + 800, 4, LEASE);
        let all = img.applied;
        assert_eq!(lease(&mut rebuilt, &mut img, 3, all - 1, now + 900), None);
        assert!(lease(&mut rebuilt, &mut img, 3, all, now + 1_000).is_some());
    }

    /// A broker whose meta.properties names another cluster is refused
    /// (INCONSISTENT_CLUSTER_ID, Kafka's words); the same cluster, or none
    /// named, registers.
    #[test]
    fn registration_checks_the_cluster_id() {
        let mut img = MetadataImage::default();
        img.apply(&MetadataRecord::ClusterFormatted {
            cluster_id: "c-1".into(),
        });
        let mut hbs = BrokerHeartbeats::default();
        let with = |id: &str| BrokerRegistrationRequest {
            cluster_id: id.into(),
            ..req(1, 1)
        };
        let e = register_broker(&img, &mut hbs, &with("c-2"), 0, TIMEOUT).unwrap_err();
        assert_eq!(e.code, ErrorCode::InconsistentClusterId);
        assert_eq!(e.message, "Expected cluster ID c-1, but got cluster ID c-2");
        assert!(register_broker(&img, &mut hbs, &with("c-1"), 0, TIMEOUT).is_ok());
        assert!(register_broker(&img, &mut hbs, &with(""), 0, TIMEOUT).is_ok());
    }

    /// Several log directories need metadata.version 3.7-IV2 (KIP-858):
    /// below it the registration is refused with Kafka's words; one
    /// directory registers at any level.
    #[test]
    fn several_log_directories_need_directory_assignment() {
        let mut hbs = BrokerHeartbeats::default();
        let at = |level: i16| {
            let mut img = MetadataImage::default();
            img.apply(&MetadataRecord::FeatureLevel {
                name: "metadata.version".into(),
                level,
            });
            img
        };
        let dirs = |n: u128| BrokerRegistrationRequest {
            log_dirs: (0..n).map(|i| Uuid::from_u128(1000 + i)).collect(),
            ..req(1, 1)
        };
        let e = register_broker(&at(16), &mut hbs, &dirs(2), 0, TIMEOUT).unwrap_err();
        assert_eq!(e.code, ErrorCode::UnsupportedVersion);
        assert_eq!(
            e.message,
            "Multiple log directories (aka JBOD) are not supported in the current MetadataVersion 3.7-IV1. Need 3.7-IV2 or higher"
        );
        assert!(register_broker(&at(16), &mut hbs, &dirs(1), 0, TIMEOUT).is_ok());
        assert!(register_broker(&at(17), &mut hbs, &dirs(2), 0, TIMEOUT).is_ok());
    }

    #[test]
    fn registration_table() {
        // (step, request, now, expected): a sequence against one image.
        // Expected: Ok(()) or the error code.
        let mut img = MetadataImage::default();
        let mut hbs = BrokerHeartbeats::default();
        img.apply(&MetadataRecord::ClusterFormatted {
            cluster_id: "c".into(),
        });
        let steps: Vec<(&str, BrokerRegistrationRequest, u64, Result<(), ErrorCode>)> = vec![
            ("first registration", req(1, 10), 0, Ok(())),
            ("retry, same incarnation", req(1, 10), 100, Ok(())),
            (
                "restart while fenced: no live session",
                req(1, 11),
                200,
                Ok(()),
            ),
            ("bad id", req(-1, 1), 200, Err(ErrorCode::InvalidRequest)),
            ("other broker", req(2, 20), 200, Ok(())),
        ];
        let mut last_epoch = None;
        for (what, r, now, want) in steps {
            match register_broker(&img, &mut hbs, &r, now, TIMEOUT) {
                Ok((recs, epoch)) => {
                    assert_eq!(want, Ok(()), "{what}");
                    assert!(Some(epoch) > last_epoch, "{what}: epochs grow");
                    assert_eq!(
                        epoch,
                        be(img.applied as i64 + recs.len() as i64 - 1),
                        "{what}"
                    );
                    last_epoch = Some(epoch);
                    apply_all(&mut img, &recs);
                    let b = &img.brokers[&r.broker_id];
                    assert!(b.fenced && !b.in_controlled_shutdown, "{what}");
                    assert_eq!(
                        (b.broker_epoch, b.incarnation_id),
                        (epoch, r.incarnation_id)
                    );
                }
                Err(e) => assert_eq!(Err(e.code), want, "{what}"),
            }
        }
        // Unfence 1: a live session now blocks a new incarnation until it expires.
        let e1 = img.brokers[&b(1)].broker_epoch;
        let (recs, _) = heartbeat(
            &img,
            &mut hbs,
            &hb(1, e1, img.applied, false, false),
            caught_up_offset(&img.brokers[&b(1)]),
            1000,
        )
        .unwrap();
        apply_all(&mut img, &recs);
        assert!(!img.brokers[&b(1)].fenced);
        let cases = [
            (
                req(1, 12),
                1000 + TIMEOUT,
                Err(ErrorCode::DuplicateBrokerRegistration),
            ),
            (req(1, 11), 1000 + TIMEOUT, Ok(())), // same incarnation: a retry
            (req(1, 12), 1001 + TIMEOUT, Ok(())), // session expired
        ];
        for (i, (r, now, want)) in cases.into_iter().enumerate() {
            let got = register_broker(&img, &mut hbs.clone(), &r, now, TIMEOUT)
                .map(|_| ())
                .map_err(|e| e.code);
            assert_eq!(got, want, "case {i}");
        }
    }

    #[test]
    fn reregistering_an_unfenced_broker_moves_its_leaderships() {
        let mut img = MetadataImage::default();
        let mut hbs = BrokerHeartbeats::default();
        cluster(&mut img, &mut hbs, &[1, 2]);
        add_topic(&mut img, "t", &[(&[1, 2], &[1, 2], 1), (&[1], &[1], 1)]);
        let (recs, epoch) = register_broker(&img, &mut hbs, &req(1, 99), 100_000, TIMEOUT).unwrap();
        assert_eq!(recs.len(), 3);
        apply_all(&mut img, &recs);
        assert_eq!(img.brokers[&b(1)].broker_epoch, epoch);
        let p = &img.topics["t"].partitions;
        assert_eq!((p[0].leader, &p[0].isr[..]), (Some(b(2)), &[b(2)][..]));
        assert_eq!((p[1].leader, &p[1].isr[..]), (None, &[b(1)][..]));
        // Caught up: unfenced, and it leads its offline partition again.
        let (recs, reply) = heartbeat(
            &img,
            &mut hbs,
            &hb(1, epoch, img.applied, false, false),
            caught_up_offset(&img.brokers[&b(1)]),
            100_001,
        )
        .unwrap();
        assert!(reply.is_caught_up && !reply.is_fenced);
        apply_all(&mut img, &recs);
        assert_eq!(img.topics["t"].partitions[1].leader, Some(b(1)));
    }

    /// One heartbeat from a broker in a given state: (state setup, want_fence,
    /// want_shutdown, caught up, broker leads a partition) ->
    /// (fenced, in_controlled_shutdown, should_shutdown) in the reply and image.
    #[test]
    fn heartbeat_state_table() {
        #[derive(Clone, Copy, Debug)]
        enum Start {
            Fenced,
            Unfenced,
            Shutting,
        }
        use Start::*;
        let cases: &[(Start, bool, bool, bool, bool, (bool, bool, bool))] = &[
            (Fenced, false, false, false, false, (true, false, false)),
            (Fenced, false, false, true, false, (false, false, false)),
            (Fenced, true, false, true, false, (true, false, false)),
            (Fenced, false, true, true, false, (true, false, true)),
            (Unfenced, false, false, true, true, (false, false, false)),
            (Unfenced, true, false, true, true, (true, false, false)),
            (Unfenced, true, true, true, true, (true, false, true)),
            (Unfenced, false, true, true, true, (false, true, false)),
            (Unfenced, false, true, true, false, (true, false, true)),
            (Shutting, false, true, true, false, (true, false, true)),
        ];
        for (i, &(start, want_fence, want_shutdown, caught_up, leads, want)) in
            cases.iter().enumerate()
        {
            let mut img = MetadataImage::default();
            let mut hbs = BrokerHeartbeats::default();
            cluster(&mut img, &mut hbs, &[1, 2]);
            if leads {
                add_topic(&mut img, "t", &[(&[1, 2], &[1, 2], 1)]);
            }
            let e = img.brokers[&b(1)].broker_epoch;
            let setup = match start {
                Fenced => handle_broker_fenced(&img, b(1)),
                Unfenced => vec![],
                Shutting => handle_controlled_shutdown(&img, b(1)),
            };
            apply_all(&mut img, &setup);
            // Broker 2 has applied everything.
            let (recs, _) = heartbeat(
                &img,
                &mut hbs,
                &hb(
                    2,
                    img.brokers[&b(2)].broker_epoch,
                    img.applied,
                    false,
                    false,
                ),
                0,
                5,
            )
            .unwrap();
            assert!(recs.is_empty());
            let offset = if caught_up { img.applied } else { 0 };
            let (recs, reply) = heartbeat(
                &img,
                &mut hbs,
                &hb(1, e, offset, want_fence, want_shutdown),
                caught_up_offset(&img.brokers[&b(1)]),
                10,
            )
            .unwrap();
            assert_eq!(reply.is_caught_up, caught_up, "case {i}");
            assert_eq!(
                (
                    reply.is_fenced,
                    reply.in_controlled_shutdown,
                    reply.should_shutdown
                ),
                want,
                "case {i} {start:?}"
            );
            apply_all(&mut img, &recs);
            let broker = &img.brokers[&b(1)];
            assert_eq!(broker.fenced, want.0, "case {i} image fenced");
            if !broker.fenced {
                assert_eq!(
                    broker.in_controlled_shutdown, want.1,
                    "case {i} image shutdown"
                );
            }
            if want.0 || want.1 {
                assert!(!has_leaderships(&img, b(1)), "case {i}");
            }
            assert_eq!(hbs.session(b(1)).unwrap().last_contact_ms, 10);
        }
    }

    #[test]
    fn heartbeat_errors() {
        let mut img = MetadataImage::default();
        let mut hbs = BrokerHeartbeats::default();
        let e = cluster(&mut img, &mut hbs, &[1])[0];
        let cases = [
            (hb(7, e, 0, false, false), ErrorCode::BrokerIdNotRegistered),
            // The broker's epoch is 0 here: one below is -1, as the
            // controller RPC may carry it.
            (
                hb(1, wire(e.get() - 1), 0, false, false),
                ErrorCode::StaleBrokerEpoch,
            ),
            (
                hb(1, be(e.get() + 1), 0, false, false),
                ErrorCode::StaleBrokerEpoch,
            ),
        ];
        for (r, code) in cases {
            assert_eq!(heartbeat(&img, &mut hbs, &r, 0, 0).unwrap_err().code, code);
        }
    }

    /// Controlled shutdown waits until the other active brokers have applied
    /// the leadership moves.
    #[test]
    fn controlled_shutdown_waits_for_followers() {
        let mut img = MetadataImage::default();
        let mut hbs = BrokerHeartbeats::default();
        let e = cluster(&mut img, &mut hbs, &[1, 2]);
        add_topic(&mut img, "t", &[(&[1, 2], &[1, 2], 1)]);
        let (recs, reply) =
            heartbeat(&img, &mut hbs, &hb(1, e[0], img.applied, false, true), 0, 1).unwrap();
        assert!(reply.in_controlled_shutdown && !reply.should_shutdown);
        apply_all(&mut img, &recs);
        assert_eq!(img.topics["t"].partitions[0].leader, Some(b(2)));
        let moved_at = img.applied;
        // Broker 2 lags behind the move: 1 must wait.
        heartbeat(
            &img,
            &mut hbs,
            &hb(2, e[1], moved_at - 1, false, false),
            0,
            2,
        )
        .unwrap();
        let (recs, reply) =
            heartbeat(&img, &mut hbs, &hb(1, e[0], moved_at, false, true), 0, 3).unwrap();
        assert!(recs.is_empty() && reply.in_controlled_shutdown && !reply.should_shutdown);
        // Broker 2 caught up: 1 may go, and is fenced.
        heartbeat(&img, &mut hbs, &hb(2, e[1], moved_at, false, false), 0, 4).unwrap();
        let (recs, reply) =
            heartbeat(&img, &mut hbs, &hb(1, e[0], moved_at, false, true), 0, 5).unwrap();
        assert!(reply.should_shutdown && reply.is_fenced);
        apply_all(&mut img, &recs);
        assert!(img.brokers[&b(1)].fenced);
    }

    /// (last contacts of brokers 1..=3, now) -> fenced brokers.
    #[test]
    fn session_expiry_table() {
        let cases: &[([u64; 3], u64, &[i32])] = &[
            ([0, 0, 0], TIMEOUT, &[]),
            ([0, 0, 0], TIMEOUT + 1, &[1, 2, 3]),
            ([0, 5000, 9000], 9001, &[1]),
            ([0, 5000, 9000], 14_001, &[1, 2]),
        ];
        for (i, (contacts, now, want)) in cases.iter().enumerate() {
            let mut img = MetadataImage::default();
            let mut hbs = BrokerHeartbeats::default();
            let epochs = cluster(&mut img, &mut hbs, &[1, 2, 3]);
            add_topic(
                &mut img,
                "t",
                &[(&[1, 2, 3], &[1, 2, 3], 1), (&[2, 3], &[2, 3], 2)],
            );
            for (j, &at) in contacts.iter().enumerate() {
                let id = j as i32 + 1;
                heartbeat(
                    &img,
                    &mut hbs,
                    &hb(id, epochs[j], img.applied, false, false),
                    0,
                    at,
                )
                .unwrap();
            }
            let recs = fence_stale_brokers(&img, &mut hbs, *now, TIMEOUT);
            apply_all(&mut img, &recs);
            let fenced: Vec<BrokerId> = img
                .brokers
                .values()
                .filter(|b| b.fenced)
                .map(|b| b.broker_id)
                .collect();
            assert_eq!(fenced, ids(want), "case {i}");
            for p in &img.topics["t"].partitions {
                assert!(
                    p.leader.is_none_or(|l| !want.contains(&l.get())),
                    "case {i}: {p:?}"
                );
                assert!(!p.isr.is_empty());
            }
            // Nothing left to fence at the same time.
            assert!(fence_stale_brokers(&img, &mut hbs, *now, TIMEOUT).is_empty());
            let next = hbs.next_expiry_ms(&img, TIMEOUT);
            assert!(next.is_none_or(|t| t > *now), "case {i}");
        }
    }

    #[test]
    fn failover_rebuild_gives_every_broker_a_fresh_session() {
        let mut img = MetadataImage::default();
        let mut hbs = BrokerHeartbeats::default();
        cluster(&mut img, &mut hbs, &[1, 2]);
        let mut rebuilt = BrokerHeartbeats::rebuild(&img, 50_000, 1, 0);
        assert!(fence_stale_brokers(&img, &mut rebuilt, 50_000 + TIMEOUT, TIMEOUT).is_empty());
        assert!(rebuilt.has_valid_session(&img, b(1), 50_000 + TIMEOUT, TIMEOUT));
        assert_eq!(
            fence_stale_brokers(&img, &mut rebuilt, 50_001 + TIMEOUT, TIMEOUT).len(),
            2
        );
        // A new incarnation is a duplicate until the rebuilt session expires.
        let mut r = rebuilt.clone();
        assert_eq!(
            register_broker(&img, &mut r, &req(1, 77), 50_000, TIMEOUT)
                .unwrap_err()
                .code,
            ErrorCode::DuplicateBrokerRegistration
        );
    }
    #[test]
    fn a_stall_of_the_controller_is_credited_to_every_session() {
        // (previous event, now) -> credited stall, with a 9 s session.
        let table = [
            (None, 100_000, None),
            (Some(100_000), 100_250, None),
            (Some(100_000), 104_500, None),
            (Some(100_000), 104_501, Some(4_501)),
            (Some(100_000), 160_000, Some(60_000)),
            (Some(100_000), 90_000, None),
        ];
        for (previous, now, want) in table {
            assert_eq!(
                controller_stall(previous, now, TIMEOUT),
                want,
                "{previous:?} -> {now}"
            );
        }

        // Brokers 1 and 2 heartbeat at 1,000; the controller is paused from
        // 1,100 to 20,000. Its first event credits the stall: nobody is
        // fenced, though both sessions look 19 s old.
        let mut img = MetadataImage::default();
        let mut hbs = BrokerHeartbeats::default();
        let epochs = cluster(&mut img, &mut hbs, &[1, 2]);
        for (j, id) in [1, 2].into_iter().enumerate() {
            heartbeat(
                &img,
                &mut hbs,
                &hb(id, epochs[j], img.applied, false, false),
                0,
                1_000,
            )
            .unwrap();
        }
        assert_eq!(
            fence_stale_brokers(&img, &mut hbs, 20_000, TIMEOUT).len(),
            2
        );
        let stalled = controller_stall(Some(1_100), 20_000, TIMEOUT).expect("a stall");
        hbs.credit_stall(stalled);
        assert!(fence_stale_brokers(&img, &mut hbs, 20_000, TIMEOUT).is_empty());
        // Broker 1's queued heartbeat is heard; broker 2 is really gone and
        // is fenced one session after the stall, not never.
        heartbeat(
            &img,
            &mut hbs,
            &hb(1, epochs[0], img.applied, false, false),
            0,
            20_010,
        )
        .unwrap();
        assert!(fence_stale_brokers(&img, &mut hbs, 1_000 + stalled + TIMEOUT, TIMEOUT).is_empty());
        let recs = fence_stale_brokers(&img, &mut hbs, 1_001 + stalled + TIMEOUT, TIMEOUT);
        apply_all(&mut img, &recs);
        assert!(img.brokers[&b(2)].fenced && !img.brokers[&b(1)].fenced);
    }
}
