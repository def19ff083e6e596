//! Pure replication rules: acks, min ISR, high watermark, ISR membership,
//! purgatory completion checks and the ack decision. No I/O, no clocks: every
//! function is a decision from (state, observation).

use strand_protocol::ErrorCode;
use strand_types::{BrokerEpoch, BrokerId, LeaderEpoch, Offset};
use thiserror::Error;

/// `acks` of a produce request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Acks {
    /// `acks=0`: no response is sent.
    None,
    /// `acks=1`: respond after the leader's local append.
    Leader,
    /// `acks=-1` (`all`): respond once HW >= required offset.
    All,
}

/// A produce request's `acks` is not one of 0, 1, -1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("invalid required acks {0}: must be 0, 1 or -1")]
pub struct InvalidRequiredAcks(pub i16);

impl InvalidRequiredAcks {
    /// `INVALID_REQUIRED_ACKS` (21).
    pub fn error_code(&self) -> ErrorCode {
        ErrorCode::InvalidRequiredAcks
    }
}

impl Acks {
    pub fn from_i16(acks: i16) -> Result<Acks, InvalidRequiredAcks> {
        match acks {
            0 => Ok(Acks::None),
            1 => Ok(Acks::Leader),
            -1 => Ok(Acks::All),
            other => Err(InvalidRequiredAcks(other)),
        }
    }

    pub fn as_i16(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }
}

/// `min(min.insync.replicas, replica count)`: the HW of a partition with
/// fewer replicas than the configured minimum still advances for acks=0/1
/// writes (the leader counts as a replica). Never below 1. (Its acks=all
/// writes are refused before the append: see [`check_min_isr_before_append`],
/// which the leader calls with the configured value.)
pub fn effective_min_isr(min_insync_replicas: i32, replica_count: usize) -> usize {
    (min_insync_replicas.max(1) as usize).min(replica_count.max(1))
}

/// Before appending with `acks=all`: `NOT_ENOUGH_REPLICAS` if |ISR| < effective
/// min ISR; nothing is appended then. Other acks are never refused here
/// (Kafka `Partition.appendRecordsToLeader`).
pub fn check_min_isr_before_append(
    acks: Acks,
    isr_len: usize,
    effective_min_isr: usize,
) -> Result<(), ErrorCode> {
    if acks == Acks::All && isr_len < effective_min_isr {
        Err(ErrorCode::NotEnoughReplicas)
    } else {
        Ok(())
    }
}

/// Completion state of one partition of a DelayedProduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionAckState {
    /// HW has not reached the required offset yet.
    Pending,
    /// Done: `None` (success) or `NOT_ENOUGH_REPLICAS_AFTER_APPEND` (the records
    /// are in the log but the ISR had shrunk below min ISR).
    Done(Option<ErrorCode>),
}

/// Kafka's `Partition.checkEnoughReplicasReachOffset`: once HW >= required
/// offset (last offset of the append + 1) the partition is done, successfully
/// iff min ISR <= |maximal ISR|. While |maximal ISR| < min ISR the HW does not
/// advance (see [`advance_high_watermark`]), so a request still short of its
/// offset then is answered `NOT_ENOUGH_REPLICAS_AFTER_APPEND` at once rather
/// than left to time out: its records are in the leader's log but not
/// acknowledged (the client may retry; an idempotent retry is deduplicated).
pub fn produce_partition_state(
    hw: Offset,
    required_offset: Offset,
    maximal_isr_len: usize,
    effective_min_isr: usize,
) -> PartitionAckState {
    if maximal_isr_len < effective_min_isr {
        PartitionAckState::Done(Some(ErrorCode::NotEnoughReplicasAfterAppend))
    } else if hw < required_offset {
        PartitionAckState::Pending
    } else {
        PartitionAckState::Done(None)
    }
}

/// The HW after an observation of the LEOs of the maximal ISR: min LEO over
/// the ISR (leader included; `isr_follower_leos` are the LEOs of the other
/// members, so |ISR| = `isr_follower_leos.len() + 1`). The HW never moves
/// backwards and is not advanced while |ISR| < effective min ISR; a member
/// whose LEO is unknown (`None`) holds it where it is.
pub fn advance_high_watermark(
    current_hw: Offset,
    leader_leo: Offset,
    isr_follower_leos: &[Option<Offset>],
    effective_min_isr: usize,
) -> Offset {
    let isr_len = isr_follower_leos.len() + 1;
    if isr_len < effective_min_isr {
        return current_hw;
    }
    let min_leo = isr_follower_leos
        .iter()
        .try_fold(leader_leo, |min, leo| leo.map(|leo| min.min(leo)));
    match min_leo {
        Some(min_leo) => current_hw.max(min_leo),
        None => current_hw,
    }
}

/// What the leader knows about one follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    pub replica_id: BrokerId,
    /// Last time (ms) the follower's fetch reached the leader's LEO of that moment.
    pub last_caught_up_time_ms: i64,
    /// `None` before its first fetch in this leader epoch.
    pub log_end_offset: Option<Offset>,
}

/// Kafka `Replica.isCaughtUp`: at the leader's LEO, or caught up within the last
/// `replica_lag_time_max_ms`.
pub fn is_caught_up(
    follower: &FollowerState,
    leader_leo: Offset,
    now_ms: i64,
    replica_lag_time_max_ms: i64,
) -> bool {
    follower.log_end_offset == Some(leader_leo)
        || now_ms.saturating_sub(follower.last_caught_up_time_ms) <= replica_lag_time_max_ms
}

/// ISR shrink: the ISR followers that are out of sync (`replica.lag.time.max.ms`).
/// Pass only followers currently in the ISR.
pub fn out_of_sync_replicas(
    now_ms: i64,
    replica_lag_time_max_ms: i64,
    isr_followers: &[FollowerState],
    leader_leo: Offset,
) -> Vec<BrokerId> {
    isr_followers
        .iter()
        .filter(|f| !is_caught_up(f, leader_leo, now_ms, replica_lag_time_max_ms))
        .map(|f| f.replica_id)
        .collect()
}

/// ISR expand (Kafka `Partition.isFollowerInSync`): a follower outside the ISR
/// may rejoin once its LEO >= HW and it has reached the start offset of the
/// leader's current epoch (it has fetched in this epoch). `None` = the leader
/// epoch's start offset is unknown: do not expand. Broker liveness (fenced or
/// shutting down) is the caller's check; so is a follower whose LEO is
/// unknown (it has not fetched in this epoch), which never rejoins.
pub fn can_rejoin_isr(
    follower_leo: Offset,
    hw: Offset,
    leader_epoch_start_offset: Option<Offset>,
) -> bool {
    follower_leo >= hw && leader_epoch_start_offset.is_some_and(|start| follower_leo >= start)
}

/// A leader's answer that the follower's log diverges from its own: the
/// leader's `epoch` (the largest at or below the follower's last fetched
/// epoch) ends at `end_offset`. Either may be unknown to the leader (-1 on
/// the wire), not both: that is the wire's "no divergence".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DivergingEpoch {
    pub epoch: Option<LeaderEpoch>,
    pub end_offset: Option<Offset>,
}

impl DivergingEpoch {
    /// The wire's (epoch, end offset); `None` when both are -1.
    pub fn from_wire(epoch: i32, end_offset: i64) -> Option<DivergingEpoch> {
        let d = DivergingEpoch {
            epoch: LeaderEpoch::from_wire(epoch),
            end_offset: Offset::from_wire(end_offset),
        };
        (d.epoch.is_some() || d.end_offset.is_some()).then_some(d)
    }

    /// The wire's (epoch, end offset) of an optional divergence.
    pub fn to_wire(d: Option<DivergingEpoch>) -> (i32, i64) {
        match d {
            Some(d) => (LeaderEpoch::to_wire(d.epoch), Offset::to_wire(d.end_offset)),
            None => (-1, -1),
        }
    }
}

/// Where a follower truncates when the leader answers its fetch with a
/// diverging epoch (Kafka's `getOffsetTruncationState`).
/// `local_end_for_epoch` is the follower's own (largest epoch <= the
/// leader's epoch, its end offset), `None` when it has none.
/// - leader end offset unknown: the follower's HW;
/// - leader epoch unknown, or the follower has no epoch at or below it: the
///   leader's end offset;
/// - the follower has the same epoch: the smaller of the two ends;
/// - the follower only has an older epoch: the end of that epoch (the next
///   fetch checks again from there).
///
/// Never past the follower's LEO.
pub fn follower_truncation_offset(
    diverging: DivergingEpoch,
    local_end_for_epoch: Option<(LeaderEpoch, Offset)>,
    hw: Offset,
    leo: Offset,
) -> Offset {
    let target = match (diverging.end_offset, diverging.epoch, local_end_for_epoch) {
        (None, _, _) => hw,
        (Some(leader_end), None, _) | (Some(leader_end), _, None) => leader_end,
        (Some(leader_end), Some(epoch), Some((local_epoch, local_end))) if local_epoch == epoch => {
            leader_end.min(local_end)
        }
        (Some(_), Some(_), Some((_, local_end))) => local_end,
    };
    target.min(leo)
}

/// What a follower does with its leader's answer for one partition (Kafka's
/// AbstractFetcherThread: processing a partition's fetch data, divergence
/// first, then out-of-range handling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowerFetchAction {
    /// The logs diverge: truncate to where they agree, computed from the
    /// leader's (epoch, end offset) by [`follower_truncation_offset`].
    TruncateToDivergence(DivergingEpoch),
    /// Append the records (possibly none) and take the leader's HW and log
    /// start offset.
    Append,
    /// The fetch offset is below the leader's log start: start the log
    /// over there.
    RestartAt(Offset),
    /// The follower's log is longer than the leader's: cut it back to the
    /// leader's HW.
    TruncateTo(Offset),
    /// Nothing to apply; fetch again (an error the next fetch may clear).
    Retry,
}

/// The leader's answer for one partition, as a follower sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchedPartition {
    pub error: Option<ErrorCode>,
    /// `None` when the logs agree.
    pub diverging_epoch: Option<DivergingEpoch>,
    /// `None` when the answer carries none (-1, as error answers may).
    pub high_watermark: Option<Offset>,
    pub log_start_offset: Option<Offset>,
}

pub fn follower_fetch_action(
    fetch_offset: Offset,
    fetched: &FetchedPartition,
) -> FollowerFetchAction {
    use FollowerFetchAction::*;
    match fetched.error {
        None => match fetched.diverging_epoch {
            Some(d) => TruncateToDivergence(d),
            None => Append,
        },
        Some(ErrorCode::OffsetOutOfRange) => {
            match (fetched.log_start_offset, fetched.high_watermark) {
                (Some(start), _) if fetch_offset < start => RestartAt(start),
                (_, Some(hw)) => TruncateTo(hw),
                _ => Retry,
            }
        }
        Some(_) => Retry,
    }
}

/// DelayedFetch: complete once enough bytes are available. Errors, leadership
/// or epoch changes, and a diverging epoch also complete a fetch; the I/O
/// layer checks those first.
pub fn fetch_can_complete(bytes_available: usize, min_bytes: usize) -> bool {
    bytes_available >= min_bytes
}

/// Kafka `Partition.getLocalLog`: a request carrying `current_leader_epoch`
/// (Fetch, ListOffsets, OffsetForLeaderEpoch) against this replica's epoch.
/// `None` (-1 on the wire) skips the check.
pub fn check_request_leader_epoch(
    request_epoch: Option<LeaderEpoch>,
    current_leader_epoch: LeaderEpoch,
) -> Result<(), ErrorCode> {
    match request_epoch {
        Some(e) if e < current_leader_epoch => Err(ErrorCode::FencedLeaderEpoch),
        Some(e) if e > current_leader_epoch => Err(ErrorCode::UnknownLeaderEpoch),
        _ => Ok(()),
    }
}

/// Whether a fetch may be answered from a snapshot of the partition's
/// offsets, checked on every read of the fetch, including after it waited:
/// a fetch accepted in one leader term is never answered with another
/// term's data (Kafka's DelayedFetch completes with the error when the
/// replica stops leading or its leader epoch moves, cases A and E).
/// `leading`: the epoch this broker leads at in the snapshot, `None` when
/// it does not lead; `request_epoch`: the fetch's current leader epoch,
/// `None` when it carries -1 (then only leadership is checked).
pub fn check_fetch_term(
    leading: Option<LeaderEpoch>,
    request_epoch: Option<LeaderEpoch>,
) -> Result<(), ErrorCode> {
    match leading {
        None => Err(ErrorCode::NotLeaderOrFollower),
        Some(ours) => check_request_leader_epoch(request_epoch, ours),
    }
}

/// Whether a fetch may be answered by a replica that does not lead: a
/// consumer's fetch from v11 on (KIP-392 fetch from follower: Kafka serves
/// it from any replica, up to that replica's high watermark); never a
/// follower's, nor a consumer's older fetch.
pub fn fetch_reads_any_replica(version: i16, from_follower: bool) -> bool {
    !from_follower && version >= 11
}

/// [`check_fetch_term`] for a fetch that any replica may answer: the leader
/// checks as for any fetch; a follower checks the request's epoch against
/// the partition's leader epoch as it knows it.
pub fn check_replica_fetch_term(
    leading: Option<LeaderEpoch>,
    known_leader_epoch: LeaderEpoch,
    request_epoch: Option<LeaderEpoch>,
) -> Result<(), ErrorCode> {
    match leading {
        Some(_) => check_fetch_term(leading, request_epoch),
        None => check_request_leader_epoch(request_epoch, known_leader_epoch),
    }
}

/// One observation of a partition for the ack decision of one pending append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckObservation {
    /// Leader epoch under which the append was authorised.
    pub authority_epoch: LeaderEpoch,
    /// The partition's leader epoch now.
    pub current_leader_epoch: LeaderEpoch,
    /// This broker is the partition's leader now and holds write authority.
    pub is_leader: bool,
    pub local_leo: Offset,
    pub hw: Offset,
    /// Last offset of the append + 1.
    pub required_offset: Offset,
    /// |maximal ISR|, leader included.
    pub isr_len: usize,
    pub effective_min_isr: usize,
}

/// The ack decision for one pending append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckDecision {
    /// Authority lost: the append is not acknowledged (it may or may not survive).
    Reject(ErrorCode),
    /// Replication has not reached the required offset yet.
    Wait,
    /// Acknowledge with the proven HW; `error` is `NOT_ENOUGH_REPLICAS_AFTER_APPEND`
    /// when the ISR shrank below min ISR.
    Ack {
        hw: Offset,
        error: Option<ErrorCode>,
    },
}

/// The ack decision as one pure function of one observation (brief, RocketMQ
/// seeds): stale or lost authority -> `Reject(NOT_LEADER_OR_FOLLOWER)`; HW short
/// of the required offset -> `Wait`; else `Ack` as [`produce_partition_state`].
///
/// Produce requests carry no leader epoch, so a leadership change answers
/// `NOT_LEADER_OR_FOLLOWER` (what Kafka's DelayedProduce returns when the
/// partition is no longer led locally); FENCED_LEADER_EPOCH is for requests
/// that carry an epoch, see [`check_request_leader_epoch`]. Unlike Kafka, an
/// epoch change while the request waits is a rejection even if this broker
/// leads again: offsets written under the old epoch may have been truncated and
/// rewritten.
pub fn ack_decision(obs: &AckObservation) -> AckDecision {
    if !obs.is_leader || obs.authority_epoch != obs.current_leader_epoch {
        return AckDecision::Reject(ErrorCode::NotLeaderOrFollower);
    }
    if obs.local_leo < obs.required_offset {
        return AckDecision::Wait;
    }
    match produce_partition_state(
        obs.hw,
        obs.required_offset,
        obs.isr_len,
        obs.effective_min_isr,
    ) {
        PartitionAckState::Pending => AckDecision::Wait,
        PartitionAckState::Done(error) => AckDecision::Ack { hw: obs.hw, error },
    }
}

/// Who a Fetch comes from, as the leader treats it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchOrigin {
    /// Read up to the HW (or LSO); moves no replica state.
    Consumer,
    /// A follower replica: reads up to the LEO and reports its LEO.
    Follower(BrokerId),
}

/// KIP-903, strictly: only a Fetch v15+ whose ReplicaState names a
/// registered broker at its current broker epoch is a follower's.
/// `registered_epoch` is the image's broker epoch for the claimed id (`None`:
/// not registered). Older versions carry no broker epoch, so whatever replica
/// id they claim they are read as consumers; a claimed id at another epoch
/// (a stale or spoofed follower) is refused with STALE_BROKER_EPOCH. A
/// spoofed follower could otherwise move a follower's LEO, and so the HW
/// that acks=all answers on.
///
/// `replica_id` and `replica_epoch` are the request's, `None` where it
/// carries -1.
pub fn fetch_origin(
    version: i16,
    replica_id: Option<BrokerId>,
    replica_epoch: Option<BrokerEpoch>,
    registered_epoch: Option<BrokerEpoch>,
) -> Result<FetchOrigin, ErrorCode> {
    let replica_id = match replica_id {
        Some(id) if version >= 15 => id,
        _ => return Ok(FetchOrigin::Consumer),
    };
    match (registered_epoch, replica_epoch) {
        (Some(registered), Some(claimed)) if registered == claimed => {
            Ok(FetchOrigin::Follower(replica_id))
        }
        _ => Err(ErrorCode::StaleBrokerEpoch),
    }
}
