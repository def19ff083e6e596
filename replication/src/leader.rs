//! One partition's state on its leader: follower progress, the ISR and its
//! pending change, the high watermark. Pure and I/O-free: every method is one
//! observation (a local append, a follower fetch, a timer tick, an
//! AlterPartition response, a metadata update) with the time passed in, and
//! returns the decisions it implies (HW advanced, an ISR change to propose).
//! The decisions themselves are the rules in [`crate::rules`].
//!
//! Semantics follow Kafka 3.7's `Partition` / `Replica` (KIP-497 "maximal ISR"):
//! - A follower's LEO is the offset of its last fetch. It counts as caught up
//!   at a fetch that reaches the leader's LEO of that moment, or (at the time of
//!   its previous fetch) one that reaches the leader's LEO of the previous fetch.
//! - HW = min LEO over the maximal ISR (committed ISR plus a pending addition),
//!   also waiting for followers outside it that are caught up and eligible to
//!   join (Kafka's `shouldWaitForReplicaToJoinIsr`). It never moves backwards,
//!   a follower whose LEO is unknown holds it where it is, and it does not
//!   advance while the committed ISR is smaller than the effective min ISR.
//! - One ISR change in flight at a time. An expansion counts in the maximal ISR
//!   at once (stricter, so safe if it fails); a shrink does not count until the
//!   controller commits it (counting it early could advance HW on a smaller
//!   ISR that the controller then refuses).
//!
//! Unlike Kafka, a new leader epoch is not handled in place: [`LeaderState::on_metadata`]
//! answers [`MetadataOutcome::Resign`] and the caller builds a fresh state. Write
//! authority is (broker, leader epoch); acks pending under the old epoch are
//! rejected by [`rules::ack_decision`].

use std::collections::BTreeMap;

use strand_protocol::ErrorCode;
use strand_types::{BrokerEpoch, BrokerId, LeaderEpoch, Offset, PartitionEpoch};

use crate::ack::{self, AckPolicy, AckSettings, FollowerLag, ReplicaAck, ReplicationDecision};
use crate::rules::{self, AckObservation, Acks, FollowerState, PartitionAckState};

/// Kafka's default `replica.lag.time.max.ms`.
pub const DEFAULT_REPLICA_LAG_TIME_MAX_MS: i64 = 30_000;

/// A partition's state as the controller committed it (a partition record or
/// partition-change delta applied to the metadata image).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRegistration {
    pub leader: BrokerId,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
    /// Assignment order.
    pub replicas: Vec<BrokerId>,
    /// Committed ISR, leader included.
    pub isr: Vec<BrokerId>,
}

/// Topic and broker configuration the leader state depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderConfig {
    /// `min.insync.replicas` as configured (capped by the replica count when used).
    pub min_insync_replicas: i32,
    /// `replica.lag.time.max.ms`.
    pub replica_lag_time_max_ms: i64,
    /// `strand.acks.*`: how acks=all is proven.
    pub acks: AckSettings,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        LeaderConfig {
            min_insync_replicas: 1,
            replica_lag_time_max_ms: DEFAULT_REPLICA_LAG_TIME_MAX_MS,
            acks: AckSettings::default(),
        }
    }
}

/// What the leader knows about one follower (Kafka `ReplicaState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerProgress {
    /// The offset of the follower's last fetch; `None` before its first
    /// fetch in this leader epoch.
    pub leo: Option<Offset>,
    /// Last time the follower was caught up with the leader; `None` = not in
    /// this leader epoch (Kafka's 0 for followers outside the ISR).
    pub last_caught_up_ms: Option<i64>,
    /// Time of the follower's last fetch.
    pub last_fetch_ms: Option<i64>,
    /// The highest leader LEO seen at one of its fetches (`None` if none).
    pub last_fetch_leader_leo: Option<Offset>,
    /// May join the ISR (Kafka `isReplicaIsrEligible`: broker not fenced, not
    /// shutting down, broker epoch current). The caller owns this fact.
    pub isr_eligible: bool,
    /// The broker epoch of its last fetch (KIP-903): named for it when the
    /// leader proposes adding it to the ISR.
    pub broker_epoch: Option<BrokerEpoch>,
    /// What it last reported having fsynced (Strand's followers report it
    /// with each fetch); `None` when it has not.
    pub durable: Option<Offset>,
}

impl FollowerProgress {
    /// The state of a follower on becoming leader (Kafka `resetReplicaState`
    /// for a new leader): LEO unknown; in-sync members count as caught up now,
    /// so that they get `replica.lag.time.max.ms` to fetch before being dropped.
    fn on_new_leader(in_isr: bool, now_ms: i64) -> Self {
        FollowerProgress {
            leo: None,
            last_caught_up_ms: in_isr.then_some(now_ms),
            last_fetch_ms: None,
            last_fetch_leader_leo: None,
            isr_eligible: true,
            broker_epoch: None,
            durable: None,
        }
    }

    fn rule_state(&self, replica_id: BrokerId) -> FollowerState {
        FollowerState {
            replica_id,
            last_caught_up_time_ms: self.last_caught_up_ms.unwrap_or(i64::MIN),
            log_end_offset: self.leo,
        }
    }
}

/// The ISR change of a proposal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IsrChange {
    /// Add one follower that caught up to the HW in this leader epoch.
    Expand { replica: BrokerId },
    /// Remove followers that have not caught up for `replica.lag.time.max.ms`.
    Shrink { removed: Vec<BrokerId> },
}

/// An ISR change to send to the controller with AlterPartition. While it is
/// pending no other change is proposed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrProposal {
    pub leader_id: BrokerId,
    pub leader_epoch: LeaderEpoch,
    /// The partition epoch the change is based on (AlterPartition `PartitionEpoch`);
    /// the controller refuses it with `INVALID_UPDATE_VERSION` if it is stale.
    pub partition_epoch: PartitionEpoch,
    pub new_isr: Vec<BrokerId>,
    pub change: IsrChange,
    /// The broker epoch each follower in `new_isr` last fetched at, as
    /// AlterPartition names them (Kafka's NewIsrWithEpochs).
    pub broker_epochs: BTreeMap<BrokerId, BrokerEpoch>,
}

/// The controller's answer to an AlterPartition for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterPartitionResult {
    /// The partition state after the request (which may differ from the proposal).
    Ok {
        leader_epoch: LeaderEpoch,
        partition_epoch: PartitionEpoch,
        isr: Vec<BrokerId>,
    },
    /// The partition-level (or request-level) error.
    Err(ErrorCode),
}

/// What [`LeaderState::on_alter_partition_result`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterOutcome {
    /// The controller's ISR and partition epoch are now the committed state.
    Committed { hw_advanced: Option<Offset> },
    /// `OPERATION_NOT_ATTEMPTED` / `INELIGIBLE_REPLICA`: the controller says the
    /// request was not applied; back to the committed state, a new change may be
    /// proposed.
    Reverted { hw_advanced: Option<Offset> },
    /// Our view is stale (`FENCED_LEADER_EPOCH`, `INVALID_UPDATE_VERSION`,
    /// `UNKNOWN_TOPIC_OR_PARTITION`, `UNKNOWN_TOPIC_ID`, `INVALID_REQUEST`,
    /// `NEW_LEADER_ELECTED`, or a success for another leader epoch or an older
    /// partition epoch): the change stays pending, blocking further changes,
    /// until [`LeaderState::on_metadata`] brings the new state.
    AwaitingMetadata,
    /// Any other error: send the same proposal again.
    Retry(IsrProposal),
    /// The answer is for a proposal that is no longer pending: ignored.
    Superseded,
}

/// What [`LeaderState::on_follower_fetch`] decided.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchOutcome {
    /// The new HW if this fetch advanced it.
    pub hw_advanced: Option<Offset>,
    /// An ISR expansion to send with AlterPartition.
    pub proposal: Option<IsrProposal>,
}

/// What [`LeaderState::on_metadata`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataOutcome {
    /// Older than what we hold (leader epoch, then partition epoch): ignored.
    Stale,
    /// Same leader and leader epoch: replicas and ISR replaced, any pending
    /// change dropped (the committed state wins).
    Updated { hw_advanced: Option<Offset> },
    /// Another leader or a new leader epoch: stop leading under this state.
    Resign,
}

/// One partition on its leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderState {
    leader_id: BrokerId,
    leader_epoch: LeaderEpoch,
    partition_epoch: PartitionEpoch,
    replicas: Vec<BrokerId>,
    /// Committed ISR (leader included).
    isr: Vec<BrokerId>,
    pending: Option<IsrProposal>,
    followers: BTreeMap<BrokerId, FollowerProgress>,
    hw: Offset,
    leader_leo: Offset,
    /// What the leader has fsynced (its recovery point): under
    /// `strand.acks.durable` the HW counts fsynced offsets only.
    leader_durable: Offset,
    /// The leader's LEO when it took this leader epoch.
    leader_epoch_start_offset: Offset,
    config: LeaderConfig,
}

impl LeaderState {
    /// On becoming leader of `registration` (whose leader is this broker) with
    /// the local log at `leader_leo` and its checkpointed `hw`. Followers' LEOs
    /// are unknown; ISR members count as caught up now. The HW may already
    /// advance (e.g. a single-member ISR); read it with [`Self::hw`].
    pub fn new(
        registration: PartitionRegistration,
        config: LeaderConfig,
        leader_leo: Offset,
        hw: Offset,
        now_ms: i64,
    ) -> Self {
        let followers = registration
            .replicas
            .iter()
            .filter(|&&id| id != registration.leader)
            .map(|&id| {
                let in_isr = registration.isr.contains(&id);
                (id, FollowerProgress::on_new_leader(in_isr, now_ms))
            })
            .collect();
        let mut state = LeaderState {
            leader_id: registration.leader,
            leader_epoch: registration.leader_epoch,
            partition_epoch: registration.partition_epoch,
            replicas: registration.replicas,
            isr: registration.isr,
            pending: None,
            followers,
            hw: hw.min(leader_leo),
            leader_leo,
            leader_durable: Offset::ZERO,
            leader_epoch_start_offset: leader_leo,
            config,
        };
        state.maybe_advance_hw(now_ms);
        state
    }

    pub fn leader_id(&self) -> BrokerId {
        self.leader_id
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.leader_epoch
    }

    pub fn partition_epoch(&self) -> PartitionEpoch {
        self.partition_epoch
    }

    pub fn replicas(&self) -> &[BrokerId] {
        &self.replicas
    }

    /// The committed ISR.
    pub fn isr(&self) -> &[BrokerId] {
        &self.isr
    }

    /// The ISR change in flight, if any.
    pub fn pending(&self) -> Option<&IsrProposal> {
        self.pending.as_ref()
    }

    pub fn follower(&self, replica: BrokerId) -> Option<&FollowerProgress> {
        self.followers.get(&replica)
    }

    pub fn hw(&self) -> Offset {
        self.hw
    }

    pub fn leader_leo(&self) -> Offset {
        self.leader_leo
    }

    pub fn leader_epoch_start_offset(&self) -> Offset {
        self.leader_epoch_start_offset
    }

    pub fn config(&self) -> LeaderConfig {
        self.config
    }

    /// A new configuration (e.g. `min.insync.replicas` changed); takes effect at
    /// the next observation.
    pub fn set_config(&mut self, config: LeaderConfig) {
        self.config = config;
    }

    /// Marks a follower (in)eligible to join the ISR (fenced, shutting down,
    /// stale broker epoch). Unknown replicas are ignored.
    pub fn set_isr_eligible(&mut self, replica: BrokerId, eligible: bool) {
        if let Some(f) = self.followers.get_mut(&replica) {
            f.isr_eligible = eligible;
        }
    }

    /// `min(min.insync.replicas, replica count)`: what the HW and the
    /// completion of acknowledged appends are judged against.
    pub fn effective_min_isr(&self) -> usize {
        rules::effective_min_isr(self.config.min_insync_replicas, self.replicas.len())
    }

    /// The committed ISR plus a pending addition. A pending shrink keeps the
    /// committed (larger) ISR until the controller commits it.
    pub fn maximal_isr(&self) -> Vec<BrokerId> {
        let mut isr = self.isr.clone();
        if let Some(IsrProposal {
            change: IsrChange::Expand { replica },
            ..
        }) = &self.pending
        {
            if !isr.contains(replica) {
                isr.push(*replica);
            }
        }
        isr
    }

    /// Before appending: `acks=all` with |committed ISR| < min.insync.replicas
    /// is refused with `NOT_ENOUGH_REPLICAS`. The configured value, not the
    /// effective one: a topic whose min.insync.replicas exceeds its
    /// replication factor never takes an acks=all write, as in Kafka.
    /// Under the `strand.acks` policies: too few in-sync replicas for the
    /// policy (ReplicaCount(n) needs n, or with the downgrade on at least
    /// min.insync.replicas) is the same refusal.
    pub fn check_min_isr_before_append(&self, acks: Acks) -> Result<(), ErrorCode> {
        rules::check_min_isr_before_append(acks, self.isr.len(), self.configured_min_isr())?;
        let a = self.config.acks;
        match (acks, a.policy) {
            (Acks::All, AckPolicy::ReplicaCount(_)) => ack::needed_replicas(
                a.policy,
                self.isr.len(),
                self.configured_min_isr(),
                a.downgrade,
            )
            .map(|_| ())
            .ok_or(ErrorCode::NotEnoughReplicas),
            _ => Ok(()),
        }
    }

    /// The acknowledgement decision (`ack::decide_replication`) for an
    /// append authorised under `authority_epoch`, with the leader's fsynced
    /// offset and whether the broker's write lease holds. The in-sync set
    /// is the maximal ISR, and so is the eligible set: the controller
    /// elects only ISR members, and the HW (what every member holds) caps
    /// what is acknowledged.
    pub fn decide(
        &self,
        authority_epoch: LeaderEpoch,
        required_offset: Offset,
        leader_durable: Offset,
        lease_valid: bool,
    ) -> ReplicationDecision {
        let in_sync = self.maximal_isr();
        let acks: Vec<ReplicaAck> = self
            .followers
            .iter()
            .filter_map(|(id, f)| {
                Some(ReplicaAck {
                    replica: *id,
                    offset: f.leo?,
                    durable_offset: f.durable,
                })
            })
            .collect();
        let a = self.config.acks;
        ack::decide_replication(&ack::ReplicationObservation {
            authority_epoch,
            leading_epoch: Some(self.leader_epoch),
            lease_valid,
            policy: a.policy,
            durable: a.durable,
            downgrade: a.downgrade,
            min_in_sync: self.effective_min_isr(),
            leader: self.leader_id,
            leader_leo: self.leader_leo,
            leader_durable,
            acks: &acks,
            in_sync: &in_sync,
            eligible: &in_sync,
            high_watermark: self.hw,
            required_offset,
        })
    }

    /// min.insync.replicas as configured (at least 1).
    pub fn configured_min_isr(&self) -> usize {
        self.config.min_insync_replicas.max(1) as usize
    }

    /// A DelayedProduce partition's state for `required_offset` (last offset of
    /// the append + 1), judged on the maximal ISR.
    pub fn ack_state(&self, required_offset: Offset) -> PartitionAckState {
        rules::produce_partition_state(
            self.hw,
            required_offset,
            self.maximal_isr().len(),
            self.effective_min_isr(),
        )
    }

    /// The observation [`rules::ack_decision`] needs for an append authorised
    /// under `authority_epoch`, as seen by this (current) leader.
    pub fn ack_observation(
        &self,
        authority_epoch: LeaderEpoch,
        required_offset: Offset,
    ) -> AckObservation {
        AckObservation {
            authority_epoch,
            current_leader_epoch: self.leader_epoch,
            is_leader: true,
            local_leo: self.leader_leo,
            hw: self.hw,
            required_offset,
            isr_len: self.maximal_isr().len(),
            effective_min_isr: self.effective_min_isr(),
        }
    }

    /// The local log's LEO grew to `new_leo` (an append as leader). Returns the
    /// new HW if it advanced (e.g. the ISR is the leader alone).
    pub fn on_leader_append(&mut self, new_leo: Offset, now_ms: i64) -> Option<Offset> {
        assert!(
            new_leo >= self.leader_leo,
            "leader LEO moved back from {} to {new_leo}",
            self.leader_leo
        );
        self.leader_leo = new_leo;
        self.maybe_advance_hw(now_ms)
    }

    /// A follower, registered at `broker_epoch`, fetched from `fetch_offset`
    /// (its LEO) at `now_ms`. Records its progress and epoch, proposes adding it to the ISR when it may rejoin and nothing is
    /// pending, then re-evaluates the HW over the maximal ISR.
    ///
    /// Errors (nothing recorded): `NOT_LEADER_OR_FOLLOWER` if `replica` is not
    /// a follower of this partition, `OFFSET_OUT_OF_RANGE` if `fetch_offset` is
    /// past the leader's LEO.
    pub fn on_follower_fetch(
        &mut self,
        replica: BrokerId,
        broker_epoch: BrokerEpoch,
        fetch_offset: Offset,
        now_ms: i64,
    ) -> Result<FetchOutcome, ErrorCode> {
        let leader_leo = self.leader_leo;
        let f = self
            .followers
            .get_mut(&replica)
            .ok_or(ErrorCode::NotLeaderOrFollower)?;
        if fetch_offset > leader_leo {
            return Err(ErrorCode::OffsetOutOfRange);
        }
        // Kafka `Replica.updateFetchStateOrThrow`.
        let caught_up_at = if fetch_offset >= leader_leo {
            Some(now_ms)
        } else if f
            .last_fetch_leader_leo
            .is_some_and(|seen| fetch_offset >= seen)
        {
            f.last_fetch_ms
        } else {
            None
        };
        f.last_caught_up_ms = f.last_caught_up_ms.max(caught_up_at);
        f.leo = Some(fetch_offset);
        f.last_fetch_leader_leo = f.last_fetch_leader_leo.max(Some(leader_leo));
        f.last_fetch_ms = Some(now_ms);
        f.broker_epoch = Some(broker_epoch);

        let proposal = self.maybe_expand_isr(replica);
        let hw_advanced = self.maybe_advance_hw(now_ms);
        Ok(FetchOutcome {
            hw_advanced,
            proposal,
        })
    }

    /// What a follower reported having fsynced with the fetch just
    /// recorded by [`Self::on_follower_fetch`] (`None`: it reports none).
    /// Never past what it holds. Returns whether it moved, and the new HW
    /// if that advanced it (under `strand.acks.durable`).
    pub fn on_follower_durable(
        &mut self,
        replica: BrokerId,
        durable: Option<Offset>,
        now_ms: i64,
    ) -> (bool, Option<Offset>) {
        let Some(f) = self.followers.get_mut(&replica) else {
            return (false, None);
        };
        let durable = match (durable, f.leo) {
            (Some(d), Some(leo)) => Some(d.min(leo)),
            _ => None,
        };
        let moved = f.durable != durable;
        f.durable = durable;
        let advanced = if moved && self.config.acks.durable {
            self.maybe_advance_hw(now_ms)
        } else {
            None
        };
        (moved, advanced)
    }

    /// The leader's log is fsynced up to `durable`; returns the new HW if
    /// that advanced it (under `strand.acks.durable`).
    pub fn on_leader_durable(&mut self, durable: Offset, now_ms: i64) -> Option<Offset> {
        let durable = durable.min(self.leader_leo);
        if durable <= self.leader_durable {
            return None;
        }
        self.leader_durable = durable;
        if self.config.acks.durable {
            self.maybe_advance_hw(now_ms)
        } else {
            None
        }
    }

    /// Periodic check (Kafka runs it every `replica.lag.time.max.ms / 2`): a
    /// proposal removing the ISR followers that have not caught up within
    /// `replica.lag.time.max.ms`. Nothing while another change is pending.
    pub fn maybe_shrink_isr(&mut self, now_ms: i64) -> Option<IsrProposal> {
        if self.pending.is_some() {
            return None;
        }
        let isr_followers: Vec<FollowerState> = self
            .isr
            .iter()
            .filter(|&&id| id != self.leader_id)
            .map(|&id| match self.followers.get(&id) {
                Some(f) => f.rule_state(id),
                // An ISR member the leader does not track is out of sync.
                None => FollowerProgress::on_new_leader(false, now_ms).rule_state(id),
            })
            .collect();
        let mut removed = rules::out_of_sync_replicas(
            now_ms,
            self.config.replica_lag_time_max_ms,
            &isr_followers,
            self.leader_leo,
        );
        if removed.is_empty() {
            removed = self.quorum_evictions(now_ms);
        }
        if removed.is_empty() {
            return None;
        }
        let new_isr = self
            .isr
            .iter()
            .copied()
            .filter(|id| !removed.contains(id))
            .collect();
        Some(self.propose(new_isr, IsrChange::Shrink { removed }))
    }

    /// ReplicaCount's eviction (`ack::quorum_evictions`): ISR followers that
    /// hold up acknowledgements `n` replicas already allow.
    fn quorum_evictions(&self, now_ms: i64) -> Vec<BrokerId> {
        let a = self.config.acks;
        if !matches!(a.policy, AckPolicy::ReplicaCount(_)) {
            return Vec::new();
        }
        let Some(need) = ack::needed_replicas(
            a.policy,
            self.isr.len(),
            self.configured_min_isr(),
            a.downgrade,
        ) else {
            return Vec::new();
        };
        let followers: Vec<FollowerLag> = self
            .isr
            .iter()
            .filter(|&&id| id != self.leader_id)
            .map(|&id| {
                let f = self.followers.get(&id);
                FollowerLag {
                    replica: id,
                    leo: f.and_then(|f| f.leo),
                    last_caught_up_ms: f.and_then(|f| f.last_caught_up_ms).unwrap_or(i64::MIN),
                }
            })
            .collect();
        ack::quorum_evictions(
            need,
            self.leader_leo,
            self.hw,
            &followers,
            now_ms,
            a.eviction_ms,
        )
    }

    /// The controller answered the AlterPartition that carried `sent`.
    pub fn on_alter_partition_result(
        &mut self,
        sent: &IsrProposal,
        result: AlterPartitionResult,
        now_ms: i64,
    ) -> AlterOutcome {
        if self.pending.as_ref() != Some(sent) {
            return AlterOutcome::Superseded;
        }
        match result {
            AlterPartitionResult::Ok {
                leader_epoch,
                partition_epoch,
                isr,
            } => {
                if leader_epoch != self.leader_epoch || partition_epoch < self.partition_epoch {
                    return AlterOutcome::AwaitingMetadata;
                }
                self.isr = isr;
                self.partition_epoch = partition_epoch;
                self.pending = None;
                AlterOutcome::Committed {
                    hw_advanced: self.maybe_advance_hw(now_ms),
                }
            }
            AlterPartitionResult::Err(
                ErrorCode::OperationNotAttempted | ErrorCode::IneligibleReplica,
            ) => {
                self.pending = None;
                AlterOutcome::Reverted {
                    hw_advanced: self.maybe_advance_hw(now_ms),
                }
            }
            AlterPartitionResult::Err(
                ErrorCode::FencedLeaderEpoch
                | ErrorCode::InvalidUpdateVersion
                | ErrorCode::UnknownTopicOrPartition
                | ErrorCode::UnknownTopicId
                | ErrorCode::InvalidRequest
                | ErrorCode::NewLeaderElected,
            ) => AlterOutcome::AwaitingMetadata,
            AlterPartitionResult::Err(_) => AlterOutcome::Retry(sent.clone()),
        }
    }

    /// A newer partition state from the controller. Same leader and leader
    /// epoch: replicas and committed ISR are replaced and a pending change is
    /// dropped; followers new to the assignment start unknown. Otherwise
    /// resign. Older than what we hold: ignored.
    pub fn on_metadata(
        &mut self,
        registration: &PartitionRegistration,
        now_ms: i64,
    ) -> MetadataOutcome {
        let older = (registration.leader_epoch, registration.partition_epoch)
            < (self.leader_epoch, self.partition_epoch);
        if older {
            return MetadataOutcome::Stale;
        }
        if registration.leader != self.leader_id || registration.leader_epoch != self.leader_epoch {
            return MetadataOutcome::Resign;
        }
        let leader_id = self.leader_id;
        self.followers
            .retain(|id, _| registration.replicas.contains(id) && *id != leader_id);
        for &id in &registration.replicas {
            if id != leader_id {
                let in_isr = registration.isr.contains(&id);
                self.followers
                    .entry(id)
                    .or_insert_with(|| FollowerProgress::on_new_leader(in_isr, now_ms));
            }
        }
        self.replicas = registration.replicas.clone();
        self.isr = registration.isr.clone();
        self.partition_epoch = registration.partition_epoch;
        self.pending = None;
        MetadataOutcome::Updated {
            hw_advanced: self.maybe_advance_hw(now_ms),
        }
    }

    /// Kafka `maybeExpandIsr`: propose adding `replica` when nothing is pending,
    /// it is outside the ISR, eligible, and may rejoin (LEO >= HW and >= the
    /// start offset of this leader epoch).
    fn maybe_expand_isr(&mut self, replica: BrokerId) -> Option<IsrProposal> {
        let f = self.followers.get(&replica)?;
        if self.pending.is_some() || self.isr.contains(&replica) || !f.isr_eligible {
            return None;
        }
        let leo = f.leo?;
        if !rules::can_rejoin_isr(leo, self.hw, Some(self.leader_epoch_start_offset)) {
            return None;
        }
        let mut new_isr = self.isr.clone();
        new_isr.push(replica);
        Some(self.propose(new_isr, IsrChange::Expand { replica }))
    }

    fn propose(&mut self, new_isr: Vec<BrokerId>, change: IsrChange) -> IsrProposal {
        debug_assert!(self.pending.is_none());
        let broker_epochs = new_isr
            .iter()
            .filter_map(|r| Some((*r, self.followers.get(r)?.broker_epoch?)))
            .collect();
        let proposal = IsrProposal {
            leader_id: self.leader_id,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            new_isr,
            change,
            broker_epochs,
        };
        self.pending = Some(proposal.clone());
        proposal
    }

    /// Kafka `maybeIncrementLeaderHW`: nothing while the committed ISR is under
    /// the effective min ISR; else [`rules::advance_high_watermark`] over the
    /// LEOs of the maximal ISR's followers and of the caught-up, eligible
    /// followers about to join. Returns the new HW if it advanced.
    fn maybe_advance_hw(&mut self, now_ms: i64) -> Option<Offset> {
        let min_isr = self.effective_min_isr();
        if self.isr.len() < min_isr {
            return None;
        }
        let maximal = self.maximal_isr();
        // A follower outside the ISR that is about to rejoin is waited for
        // (Kafka's shouldWaitForReplicaToJoinIsr): caught up within the lag
        // limit, or under replica-count within the eviction time, so a
        // follower evicted for holding up acknowledgements is not waited
        // for again until it catches up.
        let lag_ms = match self.config.acks.policy {
            AckPolicy::ReplicaCount(_) => self
                .config
                .replica_lag_time_max_ms
                .min(self.config.acks.eviction_ms),
            _ => self.config.replica_lag_time_max_ms,
        };
        // Under strand.acks.durable the HW counts what replicas have
        // fsynced: a consumer never reads what a power cut of every replica
        // could take back.
        let durable = self.config.acks.durable;
        let mut holding: Vec<Option<Offset>> = self
            .followers
            .iter()
            .filter(|(id, f)| {
                maximal.contains(id)
                    || (f.isr_eligible
                        && rules::is_caught_up(
                            &f.rule_state(**id),
                            self.leader_leo,
                            now_ms,
                            lag_ms,
                        ))
            })
            .map(|(_, f)| if durable { f.durable } else { f.leo })
            .collect();
        // An ISR member the leader does not track has an unknown LEO.
        holding.extend(
            maximal
                .iter()
                .filter(|id| **id != self.leader_id && !self.followers.contains_key(id))
                .map(|_| None),
        );
        let leader_holds = if durable {
            self.leader_durable
        } else {
            self.leader_leo
        };
        let new_hw = rules::advance_high_watermark(self.hw, leader_holds, &holding, min_isr);
        debug_assert!(new_hw >= self.hw && new_hw <= self.leader_leo);
        if new_hw > self.hw {
            self.hw = new_hw;
            Some(new_hw)
        } else {
            None
        }
    }
}
