//! Replication control: leader election and ISR changes (Kafka 3.7's
//! ReplicationControlManager and PartitionChangeBuilder with eligible leader
//! replicas off).
//!
//! - A new leader is the current one if it stays eligible, else the first
//!   replica in assignment order that is in the (target) ISR and active
//!   (registered, unfenced, not in controlled shutdown); with none, the
//!   partition is offline (no leader). Only with `unclean.leader.election.enable`
//!   does an offline partition take the first active replica outside the ISR,
//!   whose ISR then becomes just that leader.
//! - A broker leaving (fenced, controlled shutdown) is removed from every ISR,
//!   except that an ISR never becomes empty: its last member stays.
//! - A broker coming back (unfenced) leads the offline partitions whose ISR
//!   holds it.
//! - Every change bumps `partition_epoch`; a leader change (to none too) bumps
//!   `leader_epoch`.
//! - A leader changes its partition's ISR with AlterPartition, naming the
//!   leader and partition epochs it knows; members it adds must be active.

use super::common::ApiError;
use std::collections::BTreeSet;
pub use strand_metadata::controller_api::{
    AlterPartitionRequest, AlterPartitionState, ElectionResult, ElectionType,
};
use strand_metadata::image::MetadataImage;
use strand_metadata::records::{MetadataRecord, PartitionRecord};
use strand_protocol::ErrorCode;
use strand_types::BrokerId;
use uuid::Uuid;

/// How `partition_change` picks a leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// The first replica if eligible, else keep an eligible leader, else any
    /// eligible replica.
    Preferred,
    /// Keep an eligible leader, else the first eligible replica.
    Online,
    /// As `Online`, then, with no eligible replica, the first acceptable
    /// replica even outside the ISR.
    Unclean,
}

/// The partition's next state given the ISR it should have (`target_isr`)
/// and which brokers may lead (`acceptable`); `None` when nothing changes.
/// An empty `target_isr` leaves the ISR as it is (no empty ISRs without ELR).
pub fn partition_change(
    p: &PartitionRecord,
    target_isr: &[BrokerId],
    election: Election,
    acceptable: impl Fn(BrokerId) -> bool,
) -> Option<PartitionRecord> {
    build_change(p, ChangeTarget::isr(p, target_isr), election, acceptable)
}

/// What a partition change aims at (Kafka's PartitionChangeBuilder
/// targets): its replica sets and ISR before leader election and before a
/// reassignment in flight is completed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeTarget {
    pub replicas: Vec<BrokerId>,
    /// Empty: the partition keeps its ISR.
    pub isr: Vec<BrokerId>,
    pub adding: Vec<BrokerId>,
    pub removing: Vec<BrokerId>,
    /// A replica's new log directory (AssignReplicasToDirs); every other
    /// replica keeps its own, and one new to the partition is unassigned.
    pub assign_dir: Option<(BrokerId, Uuid)>,
}

impl ChangeTarget {
    /// The partition's replica sets as they are, with `isr` as the ISR.
    pub fn isr(p: &PartitionRecord, isr: &[BrokerId]) -> ChangeTarget {
        ChangeTarget {
            replicas: p.replicas.clone(),
            isr: isr.to_vec(),
            adding: p.adding_replicas.clone(),
            removing: p.removing_replicas.clone(),
            assign_dir: None,
        }
    }

    /// Completes a reassignment in flight once it can (Kafka's
    /// maybeCompleteReassignment): the ISR less the removing replicas is
    /// not empty and holds every adding replica (and every remaining
    /// replica when fewer are added than removed). The removing replicas
    /// then leave the replicas and the ISR.
    fn complete_reassignment(&mut self) {
        if self.adding.is_empty() && self.removing.is_empty() {
            return;
        }
        let isr: Vec<BrokerId> = self
            .isr
            .iter()
            .copied()
            .filter(|r| !self.removing.contains(r))
            .collect();
        let replicas: Vec<BrokerId> = self
            .replicas
            .iter()
            .copied()
            .filter(|r| !self.removing.contains(r))
            .collect();
        if isr.is_empty() || replicas.is_empty() || !self.adding.iter().all(|r| isr.contains(r)) {
            return;
        }
        // A move that shrinks the replica count completes only with every
        // remaining replica in sync (Kafka 4.4, KAFKA-19975).
        if self.adding.len() < self.removing.len() && !replicas.iter().all(|r| isr.contains(r)) {
            return;
        }
        self.replicas = replicas;
        self.isr = isr;
        self.adding.clear();
        self.removing.clear();
    }
}

/// The partition's next state for `target` (a reassignment in flight
/// completed when it can), electing a leader as `election` says among the
/// target's replicas; `None` when nothing changes. The leader epoch moves
/// when the leader changes, and when replicas leave the assignment (so the
/// removed ones are fenced, as Kafka does).
pub fn build_change(
    p: &PartitionRecord,
    mut target: ChangeTarget,
    election: Election,
    acceptable: impl Fn(BrokerId) -> bool,
) -> Option<PartitionRecord> {
    if target.isr.is_empty() {
        target.isr = p.isr.clone();
    }
    target.complete_reassignment();
    let replicas = &target.replicas;
    let eligible = |r: BrokerId| target.isr.contains(&r) && replicas.contains(&r) && acceptable(r);
    let first_eligible = |skip: usize| replicas.iter().skip(skip).copied().find(|&r| eligible(r));
    let current = p.leader.filter(|&l| eligible(l));
    let (leader, unclean) = match election {
        Election::Preferred => match replicas.first() {
            Some(&r) if eligible(r) => (Some(r), false),
            _ if current.is_some() => (current, false),
            _ => (first_eligible(1), false),
        },
        Election::Online | Election::Unclean => {
            if current.is_some() {
                (current, false)
            } else if let Some(r) = first_eligible(0) {
                (Some(r), false)
            } else if let (Election::Unclean, Some(r)) =
                (election, replicas.iter().copied().find(|&r| acceptable(r)))
            {
                (Some(r), true)
            } else {
                (None, false)
            }
        }
    };
    let isr = if let (true, Some(l)) = (unclean && leader != p.leader, leader) {
        vec![l]
    } else {
        target.isr.clone()
    };
    let mut directories = p.directories_for(&target.replicas);
    if let Some((r, dir)) = target.assign_dir {
        if let Some(i) = target.replicas.iter().position(|&x| x == r) {
            directories.resize(target.replicas.len(), Uuid::nil());
            directories[i] = dir;
            if directories.iter().all(Uuid::is_nil) {
                directories.clear();
            }
        }
    }
    if leader == p.leader
        && isr == p.isr
        && target.replicas == p.replicas
        && target.adding == p.adding_replicas
        && target.removing == p.removing_replicas
        && directories == p.directories
    {
        return None;
    }
    let replicas_removed = p.replicas.iter().any(|r| !target.replicas.contains(r));
    Some(PartitionRecord {
        isr,
        leader,
        leader_epoch: if leader != p.leader || replicas_removed {
            p.leader_epoch.next()
        } else {
            p.leader_epoch
        },
        partition_epoch: p.partition_epoch.next(),
        replicas: target.replicas,
        adding_replicas: target.adding,
        removing_replicas: target.removing,
        directories,
        ..p.clone()
    })
}

/// The topic's `unclean.leader.election.enable`: its override, else the
/// cluster-wide dynamic broker default (resource name ""), else false.
/// (The controller's static setting acts through
/// [`elect_unclean_leaders`].)
pub fn unclean_election_enabled(image: &MetadataImage, topic: &str) -> bool {
    unclean_election_setting(image, topic).unwrap_or(false)
}

/// The topic's override of `unclean.leader.election.enable`, else the
/// cluster-wide dynamic default; None when neither is set.
fn unclean_election_setting(image: &MetadataImage, topic: &str) -> Option<bool> {
    const KEY: &str = "unclean.leader.election.enable";
    image
        .topics
        .get(topic)
        .and_then(|t| t.configs.get(KEY))
        .or_else(|| image.broker_configs.get("").and_then(|c| c.get(KEY)))
        .map(|v| v.eq_ignore_ascii_case("true"))
}

/// Unclean elections for leaderless partitions (Kafka 4.4's periodic
/// maybeTriggerUncleanLeaderElectionForLeaderlessPartitions, every
/// `unclean.leader.election.interval.ms`): each partition with no leader
/// whose topic allows it (its override, else the cluster-wide dynamic
/// default, else `static_default`: the controller's server.properties)
/// takes an eligible replica, from outside the ISR if none in it is; at
/// most `max` changes, and whether more may be due.
pub fn elect_unclean_leaders(
    image: &MetadataImage,
    static_default: bool,
    max: usize,
) -> (Vec<MetadataRecord>, bool) {
    let mut out = Vec::new();
    for (name, topic) in &image.topics {
        if !unclean_election_setting(image, name).unwrap_or(static_default) {
            continue;
        }
        for p in topic.partitions.iter().filter(|p| p.leader.is_none()) {
            if out.len() == max {
                return (out, true);
            }
            if let Some(change) = partition_change(p, &p.isr, Election::Unclean, |r| {
                image.is_eligible_replica(p, r)
            }) {
                tracing::warn!(topic = %name, partition = p.partition, leader = ?change.leader, "unclean leader election for an offline partition");
                out.push(MetadataRecord::PartitionChange(change));
            }
        }
    }
    (out, false)
}

/// Partition changes for the partitions `select` picks, removing
/// `remove` from ISRs and leadership and treating `add` as active even
/// though the image does not show it so yet (Kafka's
/// generateLeaderAndIsrUpdates).
fn leader_and_isr_updates(
    image: &MetadataImage,
    remove: Option<BrokerId>,
    add: Option<BrokerId>,
    select: impl Fn(&PartitionRecord) -> bool,
) -> Vec<MetadataRecord> {
    let added = add.and_then(|a| image.brokers.get(&a));
    let mut out = Vec::new();
    for (name, topic) in &image.topics {
        let election = if unclean_election_enabled(image, name) {
            Election::Unclean
        } else {
            Election::Online
        };
        for p in topic.partitions.iter().filter(|p| select(p)) {
            let target: Vec<BrokerId> = p
                .isr
                .iter()
                .copied()
                .filter(|&r| Some(r) != remove)
                .collect();
            let acceptable = |r: BrokerId| {
                Some(r) != remove
                    && match added.filter(|a| a.broker_id == r) {
                        Some(a) => a.has_online_dir(p.directory_of(r)),
                        None => image.is_eligible_replica(p, r),
                    }
            };
            if let Some(change) = partition_change(p, &target, election, acceptable) {
                out.push(MetadataRecord::PartitionChange(change));
            }
        }
    }
    out
}

/// Log directories of a broker failed (KIP-858, a heartbeat's
/// OfflineLogDirs): its replicas in them leave ISRs and leaderships as a
/// fenced broker's would, the others keep theirs; then the broker's online
/// directories are recorded without them. Nothing when none of them is
/// still online.
pub fn handle_dirs_offline(
    image: &MetadataImage,
    broker_id: BrokerId,
    offline: &[Uuid],
) -> Vec<MetadataRecord> {
    let Some(b) = image.brokers.get(&broker_id) else {
        return vec![];
    };
    if !b.log_dirs.iter().any(|d| offline.contains(d)) {
        return vec![];
    }
    let mut records = leader_and_isr_updates(image, Some(broker_id), None, |p| {
        offline.contains(&p.directory_of(broker_id))
            && (p.leader == Some(broker_id) || p.isr.contains(&broker_id))
    });
    records.push(MetadataRecord::BrokerLogDirs {
        broker_id,
        broker_epoch: b.broker_epoch,
        log_dirs: b
            .log_dirs
            .iter()
            .copied()
            .filter(|d| !offline.contains(d))
            .collect(),
    });
    records
}

/// AssignReplicasToDirs for one replica (Kafka's
/// handleAssignReplicasToDirs): records the directory the broker keeps
/// it in; a replica assigned to a directory that is not online leaves the
/// ISR and its leadership. `Ok(None)`: already recorded so.
pub fn assign_replica_to_dir(
    image: &MetadataImage,
    broker_id: BrokerId,
    topic_id: Uuid,
    partition: i32,
    dir: Uuid,
) -> Result<Option<PartitionRecord>, ApiError> {
    let Some(topic) = image.topic_by_id(topic_id) else {
        return Err(ApiError::new(
            ErrorCode::UnknownTopicId,
            format!("Unknown topic id {topic_id}"),
        ));
    };
    let Some(p) = usize::try_from(partition)
        .ok()
        .and_then(|i| topic.partitions.get(i))
    else {
        return Err(ApiError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("Unknown partition {}-{partition}", topic.name),
        ));
    };
    if !p.replicas.contains(&broker_id) {
        return Err(ApiError::new(
            ErrorCode::NotLeaderOrFollower,
            format!(
                "Broker {broker_id} is not a replica of {}-{partition}",
                topic.name
            ),
        ));
    }
    if p.directory_of(broker_id) == dir {
        return Ok(None);
    }
    let online = image
        .brokers
        .get(&broker_id)
        .is_some_and(|b| b.has_online_dir(dir));
    let mut target = ChangeTarget::isr(p, &p.isr);
    target.assign_dir = Some((broker_id, dir));
    if !online && p.isr.len() > 1 {
        target.isr.retain(|&r| r != broker_id);
    }
    let election = if unclean_election_enabled(image, &topic.name) {
        Election::Unclean
    } else {
        Election::Online
    };
    let acceptable = |r: BrokerId| {
        if r == broker_id {
            online && image.is_active(r)
        } else {
            image.is_eligible_replica(p, r)
        }
    };
    Ok(build_change(p, target, election, acceptable))
}

/// True when the broker leads at least one partition.
pub fn has_leaderships(image: &MetadataImage, broker_id: BrokerId) -> bool {
    image
        .topics
        .values()
        .flat_map(|t| &t.partitions)
        .any(|p| p.leader == Some(broker_id))
}

/// Moves the broker out of every ISR and leadership (the partition changes
/// only, no broker record).
pub fn remove_broker_from_partitions(
    image: &MetadataImage,
    broker_id: BrokerId,
) -> Vec<MetadataRecord> {
    leader_and_isr_updates(image, Some(broker_id), None, |p| {
        p.leader == Some(broker_id) || p.isr.contains(&broker_id)
    })
}

/// A broker is fenced: partition changes moving it out of ISRs and
/// leaderships, then `FenceBroker` (left out if it is already fenced).
pub fn handle_broker_fenced(image: &MetadataImage, broker_id: BrokerId) -> Vec<MetadataRecord> {
    let Some(b) = image.brokers.get(&broker_id) else {
        return vec![];
    };
    let mut records = remove_broker_from_partitions(image, broker_id);
    if !b.fenced {
        records.push(MetadataRecord::FenceBroker {
            broker_id,
            broker_epoch: b.broker_epoch,
        });
    }
    records
}

/// A broker is unfenced: `UnfenceBroker`, then it leads the offline
/// partitions whose ISR holds it (or, with unclean election, whose replicas do).
pub fn handle_broker_unfenced(image: &MetadataImage, broker_id: BrokerId) -> Vec<MetadataRecord> {
    let Some(b) = image.brokers.get(&broker_id) else {
        return vec![];
    };
    let mut records = vec![MetadataRecord::UnfenceBroker {
        broker_id,
        broker_epoch: b.broker_epoch,
    }];
    records.extend(leader_and_isr_updates(image, None, Some(broker_id), |p| {
        p.leader.is_none()
    }));
    records
}

/// A broker enters controlled shutdown: `BrokerControlledShutdown` (if not
/// already in it), then partition changes moving it out of ISRs and leaderships.
pub fn handle_controlled_shutdown(
    image: &MetadataImage,
    broker_id: BrokerId,
) -> Vec<MetadataRecord> {
    let Some(b) = image.brokers.get(&broker_id) else {
        return vec![];
    };
    let mut records = Vec::new();
    if !b.in_controlled_shutdown {
        records.push(MetadataRecord::BrokerControlledShutdown {
            broker_id,
            broker_epoch: b.broker_epoch,
        });
    }
    records.extend(remove_broker_from_partitions(image, broker_id));
    records
}

/// The most partition changes one leader-balancing pass writes (Kafka's
/// `maxElectionsPerImbalance`).
pub const MAX_ELECTIONS_PER_BALANCE: usize = 1000;

/// Automatic leader balancing (Kafka 4.x's maybeBalancePartitionLeaders,
/// `auto.leader.rebalance.enable`): a preferred election for every
/// partition whose leader is not its first replica, where that replica is
/// in the ISR and active; at most `max` changes, and whether more may be
/// due (then the pass runs again soon).
pub fn balance_partition_leaders(image: &MetadataImage, max: usize) -> (Vec<MetadataRecord>, bool) {
    let mut out = Vec::new();
    for p in image.topics.values().flat_map(|t| &t.partitions) {
        if p.leader.is_some() && p.leader == p.replicas.first().copied() {
            continue;
        }
        if out.len() == max {
            return (out, true);
        }
        let preferred = p.replicas.first().copied();
        if let Some(change) = partition_change(p, &p.isr, Election::Preferred, |r| {
            image.is_eligible_replica(p, r)
        }) {
            // Only a move to the preferred replica: one that merely
            // elects some other replica of a leaderless partition is the
            // unfencing path's to make.
            if change.leader == preferred {
                out.push(MetadataRecord::PartitionChange(change));
            }
        }
    }
    (out, false)
}

/// ElectLeaders. `partitions == None` means every partition, and then the
/// partitions that need no election are left out of the results.
pub fn elect_leaders(
    image: &MetadataImage,
    election_type: ElectionType,
    partitions: Option<&[(String, i32)]>,
) -> (Vec<MetadataRecord>, Vec<ElectionResult>) {
    let all: Vec<(String, i32)>;
    let (items, skip_not_needed) = match partitions {
        Some(p) => (p, false),
        None => {
            all = image
                .topics
                .iter()
                .flat_map(|(n, t)| (0..t.partitions.len() as i32).map(move |i| (n.clone(), i)))
                .collect();
            (&all[..], true)
        }
    };
    let mut records = Vec::new();
    let mut results = Vec::new();
    for (topic, partition) in items {
        let r = elect_leader(image, election_type, topic, *partition);
        match r {
            Ok(Some(change)) => {
                records.push(MetadataRecord::PartitionChange(change));
                results.push(((topic.clone(), *partition), Ok(())));
            }
            Ok(None) if skip_not_needed => {}
            Ok(None) => results.push((
                (topic.clone(), *partition),
                Err(ApiError::new(
                    ErrorCode::ElectionNotNeeded,
                    "Leader election not needed for topic partition.",
                )),
            )),
            Err(e) => results.push(((topic.clone(), *partition), Err(e))),
        }
    }
    (records, results)
}

/// Preferred-leader ElectLeaders for the given partitions.
pub fn elect_preferred(
    image: &MetadataImage,
    partitions: &[(String, i32)],
) -> (Vec<MetadataRecord>, Vec<ElectionResult>) {
    elect_leaders(image, ElectionType::Preferred, Some(partitions))
}

/// Ok(None): no election needed.
fn elect_leader(
    image: &MetadataImage,
    election_type: ElectionType,
    topic: &str,
    partition: i32,
) -> Result<Option<PartitionRecord>, ApiError> {
    let Some(p) = image.partition(topic, partition) else {
        return Err(ApiError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("No such partition as {topic}-{partition}"),
        ));
    };
    let (election, failure) = match election_type {
        ElectionType::Preferred => {
            if p.leader.is_some() && p.replicas.first().copied() == p.leader {
                return Ok(None);
            }
            (Election::Preferred, ErrorCode::PreferredLeaderNotAvailable)
        }
        ElectionType::Unclean => {
            if p.leader.is_some() {
                return Ok(None);
            }
            (Election::Unclean, ErrorCode::EligibleLeadersNotAvailable)
        }
    };
    match partition_change(p, &p.isr, election, |r| image.is_eligible_replica(p, r)) {
        Some(change) => Ok(Some(change)),
        None => Err(ApiError::new(
            failure,
            format!("Unable to elect a leader for {topic}-{partition}"),
        )),
    }
}

/// AlterPartition for one partition (Kafka 3.7's alterPartition and
/// validateAlterPartitionData, without ELR or leader recovery state). Checks,
/// in Kafka's order: the broker epoch; the topic id; the partition; epochs
/// newer than the controller's (NOT_CONTROLLER: this controller is likely
/// behind); an older leader epoch; the requester leading; an older partition
/// epoch; the ISR's shape (non-empty, distinct replicas, holds the leader);
/// then members added to the ISR must be active and named at their
/// registered broker epoch (KIP-903: a member whose epoch is missing or
/// stale is INELIGIBLE_REPLICA, as Kafka answers). An ISR equal to the current
/// one as a set changes nothing; otherwise one `PartitionChange` with the
/// ISR in the request's order, the next partition epoch, the same leader.
pub fn alter_partition(
    image: &MetadataImage,
    req: &AlterPartitionRequest,
) -> Result<(Vec<MetadataRecord>, AlterPartitionState), ApiError> {
    let err = |code, message: String| Err(ApiError::new(code, message));
    let broker = req.broker_id;
    match image.brokers.get(&broker) {
        None => {
            return err(
                ErrorCode::StaleBrokerEpoch,
                format!("No broker registration found for broker {broker}"),
            )
        }
        Some(b) if b.broker_epoch != req.broker_epoch => {
            return err(
                ErrorCode::StaleBrokerEpoch,
                format!(
                    "Expected broker epoch {}, but got broker epoch {}",
                    b.broker_epoch, req.broker_epoch
                ),
            )
        }
        Some(_) => {}
    }
    let Some(topic) = image.topic_by_id(req.topic_id) else {
        return err(
            ErrorCode::UnknownTopicId,
            format!("No topic with id {}", req.topic_id),
        );
    };
    let name = &topic.name;
    let partition = req.partition;
    let Some(p) = image.partition(name, partition) else {
        return err(
            ErrorCode::UnknownTopicOrPartition,
            format!("No such partition as {name}-{partition}"),
        );
    };
    let rejected = |why: String| {
        format!("Rejecting AlterPartition request from node {broker} for {name}-{partition} because {why}.")
    };
    if req.leader_epoch > p.leader_epoch {
        return err(
            ErrorCode::NotController,
            rejected(format!(
                "the leader epoch {} is newer than the controller's {}",
                req.leader_epoch, p.leader_epoch
            )),
        );
    }
    if req.partition_epoch > p.partition_epoch {
        return err(
            ErrorCode::NotController,
            rejected(format!(
                "the partition epoch {} is newer than the controller's {}",
                req.partition_epoch, p.partition_epoch
            )),
        );
    }
    if req.leader_epoch < p.leader_epoch {
        return err(
            ErrorCode::FencedLeaderEpoch,
            rejected(format!(
                "the current leader epoch is {}, not {}",
                p.leader_epoch, req.leader_epoch
            )),
        );
    }
    if Some(broker) != p.leader {
        return err(
            ErrorCode::InvalidRequest,
            rejected(format!(
                "the current leader is {}",
                BrokerId::to_wire(p.leader)
            )),
        );
    }
    if req.partition_epoch < p.partition_epoch {
        return err(
            ErrorCode::InvalidUpdateVersion,
            rejected(format!(
                "the current partition epoch is {}, not {}",
                p.partition_epoch, req.partition_epoch
            )),
        );
    }
    let new_isr: BTreeSet<BrokerId> = req.new_isr.iter().copied().collect();
    if new_isr.len() != req.new_isr.len() || !new_isr.iter().all(|r| p.replicas.contains(r)) {
        return err(
            ErrorCode::InvalidRequest,
            rejected(format!(
                "it specified an invalid ISR {}",
                wire_list(&req.new_isr)
            )),
        );
    }
    if !p.leader.is_some_and(|l| new_isr.contains(&l)) {
        return err(
            ErrorCode::InvalidRequest,
            rejected(format!(
                "it specified an invalid ISR {} that doesn't include itself",
                wire_list(&req.new_isr)
            )),
        );
    }
    let ineligible: Vec<String> = req
        .new_isr
        .iter()
        .filter(|r| !p.isr.contains(r))
        .filter_map(|&r| match image.brokers.get(&r) {
            None => Some(format!("{r} (not registered)")),
            Some(b) if b.in_controlled_shutdown => Some(format!("{r} (shutting down)")),
            Some(b) if b.fenced => Some(format!("{r} (fenced)")),
            Some(b) if !b.has_online_dir(p.directory_of(r)) => {
                Some(format!("{r} (offline log directory)"))
            }
            Some(b) => match req.broker_epochs.get(&r) {
                Some(&e) if e == b.broker_epoch => None,
                Some(&e) => Some(format!(
                    "{r} (broker epoch {e}, registered at {})",
                    b.broker_epoch
                )),
                None => Some(format!("{r} (no broker epoch given)")),
            },
        })
        .collect();
    if !ineligible.is_empty() {
        return err(
            ErrorCode::IneligibleReplica,
            rejected(format!(
                "it specified ineligible replicas [{}] in the new ISR {}",
                ineligible.join(", "),
                wire_list(&req.new_isr)
            )),
        );
    }
    if new_isr == p.isr.iter().copied().collect::<BTreeSet<BrokerId>>() {
        return Ok((vec![], p.into()));
    }
    // Through the change builder: an ISR that now holds every replica a
    // reassignment adds completes it, which may move the leadership off
    // a removed requester (the answer then says NEW_LEADER_ELECTED).
    let leader = p.leader;
    let target = ChangeTarget::isr(p, &req.new_isr);
    let acceptable = |r: BrokerId| Some(r) == leader || image.is_eligible_replica(p, r);
    let Some(change) = build_change(p, target, Election::Online, acceptable) else {
        return Ok((vec![], p.into()));
    };
    let state = AlterPartitionState::from(&change);
    Ok((vec![MetadataRecord::PartitionChange(change)], state))
}

/// Broker ids as Kafka's messages print a list of them: `[1, 2]`.
fn wire_list(ids: &[BrokerId]) -> String {
    format!("{:?}", ids.iter().map(|r| r.get()).collect::<Vec<_>>())
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::manager::testutil::{
        add_topic, apply_all, b, be, ids, image_with_brokers, topic_id, wire,
    };
    use std::collections::BTreeMap;
    use strand_metadata::records::ConfigResource;
    use strand_types::{BrokerEpoch, LeaderEpoch, PartitionEpoch};
    use uuid::Uuid;

    /// Tables write leaders as the wire does: -1 is none.
    fn leader(v: i32) -> Option<BrokerId> {
        BrokerId::from_wire(v)
    }

    fn part(replicas: &[i32], isr: &[i32], leader_id: i32) -> PartitionRecord {
        PartitionRecord {
            topic_id: Uuid::nil(),
            partition: 0,
            replicas: ids(replicas),
            isr: ids(isr),
            leader: leader(leader_id),
            leader_epoch: LeaderEpoch::new(5),
            partition_epoch: PartitionEpoch::new(9),
            adding_replicas: vec![],
            removing_replicas: vec![],
            directories: vec![],
        }
    }

    /// The change builder: (replicas, isr, leader, target isr, election,
    /// inactive brokers) -> Some((leader, isr)) or None for no change.
    #[test]
    fn partition_change_table() {
        use Election::*;
        type Case = (
            &'static [i32],
            &'static [i32],
            i32,
            &'static [i32],
            Election,
            &'static [i32],
            Option<(i32, &'static [i32])>,
        );
        let cases: &[Case] = &[
            // Nothing changes.
            (&[1, 2, 3], &[1, 2, 3], 1, &[1, 2, 3], Online, &[], None),
            // Leader 1 removed: first eligible replica in assignment order.
            (
                &[1, 2, 3],
                &[1, 2, 3],
                1,
                &[2, 3],
                Online,
                &[1],
                Some((2, &[2, 3])),
            ),
            (
                &[1, 3, 2],
                &[1, 2, 3],
                1,
                &[2, 3],
                Online,
                &[1],
                Some((3, &[2, 3])),
            ),
            // The next in order is not in the ISR: skip it.
            (&[1, 2, 3], &[1, 3], 1, &[3], Online, &[1], Some((3, &[3]))),
            // The next in order is fenced: skip it.
            (
                &[1, 2, 3],
                &[1, 2, 3],
                1,
                &[2, 3],
                Online,
                &[1, 2],
                Some((3, &[2, 3])),
            ),
            // A follower leaves: the ISR shrinks, the leader stays.
            (
                &[1, 2, 3],
                &[1, 2, 3],
                1,
                &[1, 3],
                Online,
                &[2],
                Some((1, &[1, 3])),
            ),
            // The last ISR member leaves: offline, the ISR keeps it.
            (&[1, 2], &[1], 1, &[], Online, &[1], Some((-1, &[1]))),
            // Only fenced ISR members: offline, ISR shrinks to the target.
            (
                &[1, 2, 3],
                &[1, 2],
                1,
                &[2],
                Online,
                &[1, 2],
                Some((-1, &[2])),
            ),
            // Unclean: an active replica outside the ISR leads alone.
            (&[1, 2, 3], &[1], 1, &[], Unclean, &[1], Some((2, &[2]))),
            (
                &[1, 2, 3],
                &[1],
                -1,
                &[1],
                Unclean,
                &[1, 2],
                Some((3, &[3])),
            ),
            // Unclean but nobody is active: stays offline, no change.
            (&[1, 2], &[1], -1, &[1], Unclean, &[1, 2], None),
            // Offline partition, ISR member back: it leads.
            (&[1, 2], &[2], -1, &[2], Online, &[1], Some((2, &[2]))),
            // Offline and the ISR member still down: no change.
            (&[1, 2], &[2], -1, &[2], Online, &[2], None),
            // Preferred: the first replica takes over when eligible.
            (
                &[1, 2, 3],
                &[1, 2, 3],
                2,
                &[1, 2, 3],
                Preferred,
                &[],
                Some((1, &[1, 2, 3])),
            ),
            // Preferred not in the ISR: keep the current leader (no change).
            (&[1, 2, 3], &[2, 3], 2, &[2, 3], Preferred, &[], None),
            // Preferred fenced, current leader gone: next eligible.
            (
                &[1, 2, 3],
                &[1, 2, 3],
                -1,
                &[1, 2, 3],
                Preferred,
                &[1],
                Some((2, &[1, 2, 3])),
            ),
            // Online keeps an eligible non-preferred leader.
            (&[1, 2, 3], &[1, 2, 3], 3, &[1, 2, 3], Online, &[], None),
        ];
        for (i, (replicas, isr, before, target, election, inactive, want)) in
            cases.iter().enumerate()
        {
            let p = part(replicas, isr, *before);
            let got = partition_change(&p, &ids(target), *election, |r| {
                !inactive.contains(&r.get())
            });
            match want {
                None => assert_eq!(got, None, "case {i}"),
                Some((l, isr)) => {
                    let got = got.unwrap_or_else(|| panic!("case {i}: no change"));
                    assert_eq!(
                        (got.leader, got.isr.clone()),
                        (leader(*l), ids(isr)),
                        "case {i}"
                    );
                    assert_eq!(got.partition_epoch, PartitionEpoch::new(10), "case {i}");
                    let bump = i32::from(*l != *before);
                    assert_eq!(got.leader_epoch, LeaderEpoch::new(5 + bump), "case {i}");
                    assert_eq!(got.replicas, p.replicas, "case {i}");
                }
            }
        }
    }

    /// (leader, ISR) of each partition, as the wire writes them (-1: none).
    fn leaders_and_isrs(img: &MetadataImage, topic: &str) -> Vec<(i32, Vec<i32>)> {
        img.topics[topic]
            .partitions
            .iter()
            .map(|p| {
                (
                    BrokerId::to_wire(p.leader),
                    p.isr.iter().map(|r| r.get()).collect(),
                )
            })
            .collect()
    }

    /// Fence then unfence a broker across a topic, with and without unclean
    /// election: (fenced broker, unclean, after fencing, after unfencing).
    #[test]
    fn fence_and_unfence_table() {
        type Row = (i32, bool, Vec<(i32, Vec<i32>)>, Vec<(i32, Vec<i32>)>);
        let rows: Vec<Row> = vec![
            (
                1,
                false,
                vec![(2, vec![2, 3]), (-1, vec![1]), (3, vec![3]), (2, vec![2])],
                vec![(2, vec![2, 3]), (1, vec![1]), (3, vec![3]), (2, vec![2])],
            ),
            (
                1,
                true,
                vec![(2, vec![2, 3]), (2, vec![2]), (3, vec![3]), (2, vec![2])],
                vec![(2, vec![2, 3]), (2, vec![2]), (3, vec![3]), (2, vec![2])],
            ),
            (
                2,
                false,
                vec![(1, vec![1, 3]), (1, vec![1]), (3, vec![3]), (-1, vec![2])],
                vec![(1, vec![1, 3]), (1, vec![1]), (3, vec![3]), (2, vec![2])],
            ),
        ];
        for (i, (broker, unclean, fenced, unfenced)) in rows.into_iter().enumerate() {
            let mut img = image_with_brokers(&[1, 2, 3]);
            add_topic(
                &mut img,
                "t",
                &[
                    (&[1, 2, 3], &[1, 2, 3], 1),
                    (&[1, 2], &[1], 1),
                    (&[3, 1], &[3], 3),
                    (&[2, 1], &[2], 2),
                ],
            );
            if unclean {
                img.apply(&MetadataRecord::Config {
                    resource: ConfigResource::Topic,
                    resource_name: "t".into(),
                    name: "unclean.leader.election.enable".into(),
                    value: Some("true".into()),
                });
            }
            let before = img.topics["t"].partitions.clone();
            let broker = b(broker);
            let recs = handle_broker_fenced(&img, broker);
            assert!(
                matches!(recs.last(), Some(MetadataRecord::FenceBroker { broker_id, .. }) if *broker_id == broker)
            );
            apply_all(&mut img, &recs);
            assert!(img.brokers[&broker].fenced);
            assert!(!has_leaderships(&img, broker), "row {i}");
            assert_eq!(leaders_and_isrs(&img, "t"), fenced, "row {i} fenced");
            for (was, a) in before.iter().zip(&img.topics["t"].partitions) {
                let changed = (was.leader, &was.isr) != (a.leader, &a.isr);
                assert_eq!(
                    a.partition_epoch.get(),
                    was.partition_epoch.get() + i32::from(changed)
                );
                assert_eq!(
                    a.leader_epoch.get(),
                    was.leader_epoch.get() + i32::from(a.leader != was.leader)
                );
            }
            // Fencing again changes nothing.
            assert!(handle_broker_fenced(&img, broker).is_empty(), "row {i}");
            let recs = handle_broker_unfenced(&img, broker);
            assert!(matches!(recs[0], MetadataRecord::UnfenceBroker { .. }));
            apply_all(&mut img, &recs);
            assert!(!img.brokers[&broker].fenced);
            assert_eq!(leaders_and_isrs(&img, "t"), unfenced, "row {i} unfenced");
        }
    }

    #[test]
    fn controlled_shutdown_moves_leaders_and_isr() {
        let mut img = image_with_brokers(&[1, 2]);
        add_topic(
            &mut img,
            "t",
            &[
                (&[1, 2], &[1, 2], 1),
                (&[2, 1], &[2, 1], 2),
                (&[1, 2], &[1], 1),
            ],
        );
        let recs = handle_controlled_shutdown(&img, b(1));
        assert!(matches!(
            recs[0],
            MetadataRecord::BrokerControlledShutdown { broker_id, .. } if broker_id == b(1)
        ));
        apply_all(&mut img, &recs);
        assert!(img.brokers[&b(1)].in_controlled_shutdown && !img.brokers[&b(1)].fenced);
        assert_eq!(
            leaders_and_isrs(&img, "t"),
            vec![(2, vec![2]), (2, vec![2]), (-1, vec![1])]
        );
        assert!(!has_leaderships(&img, b(1)));
        // A second call changes nothing.
        assert_eq!(handle_controlled_shutdown(&img, b(1)), vec![]);
    }

    #[test]
    fn unclean_setting_resolution() {
        let mut img = image_with_brokers(&[1]);
        add_topic(&mut img, "t", &[(&[1], &[1], 1)]);
        let set = |img: &mut MetadataImage, resource, name: &str, v: Option<&str>| {
            img.apply(&MetadataRecord::Config {
                resource,
                resource_name: name.into(),
                name: "unclean.leader.election.enable".into(),
                value: v.map(String::from),
            })
        };
        assert!(!unclean_election_enabled(&img, "t"));
        set(&mut img, ConfigResource::Broker, "", Some("true"));
        assert!(unclean_election_enabled(&img, "t"));
        set(&mut img, ConfigResource::Topic, "t", Some("false"));
        assert!(!unclean_election_enabled(&img, "t"));
    }

    #[test]
    fn elect_leaders_table() {
        let mut img = image_with_brokers(&[1, 2, 3]);
        add_topic(
            &mut img,
            "t",
            &[
                (&[1, 2], &[1, 2], 2), // preferred 1 eligible
                (&[1, 2], &[1, 2], 1), // already preferred
                (&[3, 2], &[2], 2),    // preferred out of ISR
                (&[1, 3], &[3], -1),   // offline, 3 fenced below
            ],
        );
        img.apply(&MetadataRecord::FenceBroker {
            broker_id: b(3),
            broker_epoch: be(103),
        });
        let p = |i: i32| ("t".to_string(), i);
        let cases: Vec<(ElectionType, (String, i32), Result<Option<i32>, ErrorCode>)> = vec![
            (ElectionType::Preferred, p(0), Ok(Some(1))),
            (
                ElectionType::Preferred,
                p(1),
                Err(ErrorCode::ElectionNotNeeded),
            ),
            (
                ElectionType::Preferred,
                p(2),
                Err(ErrorCode::PreferredLeaderNotAvailable),
            ),
            (
                ElectionType::Preferred,
                p(9),
                Err(ErrorCode::UnknownTopicOrPartition),
            ),
            (
                ElectionType::Preferred,
                ("nope".into(), 0),
                Err(ErrorCode::UnknownTopicOrPartition),
            ),
            (
                ElectionType::Unclean,
                p(0),
                Err(ErrorCode::ElectionNotNeeded),
            ),
            (ElectionType::Unclean, p(3), Ok(Some(1))),
        ];
        for (i, (ty, tp, want)) in cases.into_iter().enumerate() {
            let (recs, results) = elect_leaders(&img, ty, Some(std::slice::from_ref(&tp)));
            assert_eq!(results.len(), 1);
            match want {
                Ok(Some(leader)) => {
                    assert_eq!(results[0].1, Ok(()), "case {i}");
                    let [MetadataRecord::PartitionChange(c)] = &recs[..] else {
                        panic!("case {i}: {recs:?}")
                    };
                    assert_eq!(c.leader, Some(b(leader)), "case {i}");
                    assert_eq!(c.topic_id, topic_id("t"));
                }
                Ok(None) => unreachable!(),
                Err(code) => {
                    assert!(recs.is_empty(), "case {i}");
                    assert_eq!(results[0].1.as_ref().unwrap_err().code, code, "case {i}");
                }
            }
        }
        // All partitions: the ones needing no election are left out.
        let (recs, results) = elect_leaders(&img, ElectionType::Preferred, None);
        assert_eq!(recs.len(), 1);
        let ids: Vec<_> = results.iter().map(|(tp, _)| tp.1).collect();
        assert_eq!(ids, vec![0, 2, 3]);
        let (recs, _) = elect_preferred(&img, &[p(0)]);
        apply_all(&mut img, &recs);
        assert_eq!(img.topics["t"].partitions[0].leader, Some(b(1)));
        assert_eq!(
            img.topics["t"].partitions[0].leader_epoch,
            LeaderEpoch::new(1)
        );
    }

    /// Brokers 1-3 active, 4 fenced, 5 in controlled shutdown, 6 never
    /// registered. t-0: replicas 1-6, ISR [1, 2], leader 1, epochs 3/7.
    /// t-1: ISR [2, 4] led by 2, with the fenced 4 still in it.
    fn alter_image() -> MetadataImage {
        use crate::manager::testutil::broker;
        let mut img = image_with_brokers(&[1, 2, 3, 5]);
        img.apply(&MetadataRecord::RegisterBroker(broker(4, None, true)));
        img.apply(&MetadataRecord::BrokerControlledShutdown {
            broker_id: b(5),
            broker_epoch: be(105),
        });
        add_topic(
            &mut img,
            "t",
            &[(&[1, 2, 3, 4, 5, 6], &[1, 2], 1), (&[2, 4, 1], &[2, 4], 2)],
        );
        img.apply(&MetadataRecord::PartitionChange(PartitionRecord {
            topic_id: topic_id("t"),
            partition: 0,
            replicas: ids(&[1, 2, 3, 4, 5, 6]),
            isr: ids(&[1, 2]),
            leader: Some(b(1)),
            leader_epoch: LeaderEpoch::new(3),
            partition_epoch: PartitionEpoch::new(7),
            adding_replicas: vec![],
            removing_replicas: vec![],
            directories: vec![],
        }));
        img
    }

    /// (broker, broker epoch, topic id, partition, leader epoch, partition
    /// epoch, new ISR) -> the error, or Ok((ISR after, whether a record is
    /// written)). Ids and epochs as the controller RPC may carry them: an ISR
    /// member of -1 too.
    #[test]
    fn alter_partition_table() {
        let img = alter_image();
        let t = topic_id("t");
        let other = Uuid::from_u128(77);
        type Case = (
            (i32, i64, Uuid, i32, i32, i32, &'static [i32]),
            Result<(&'static [i32], bool), ErrorCode>,
        );
        use ErrorCode::*;
        let cases: Vec<Case> = vec![
            // Shrink, keeping the request's order.
            ((1, 101, t, 0, 3, 7, &[1]), Ok((&[1], true))),
            // Expand with an active replica.
            ((1, 101, t, 0, 3, 7, &[1, 2, 3]), Ok((&[1, 2, 3], true))),
            ((1, 101, t, 0, 3, 7, &[3, 1, 2]), Ok((&[3, 1, 2], true))),
            // Shrink and expand at once.
            ((1, 101, t, 0, 3, 7, &[1, 3]), Ok((&[1, 3], true))),
            // The same set: nothing to write.
            ((1, 101, t, 0, 3, 7, &[1, 2]), Ok((&[1, 2], false))),
            ((1, 101, t, 0, 3, 7, &[2, 1]), Ok((&[1, 2], false))),
            // Only added members must be active: the fenced 4 may stay.
            ((2, 102, t, 1, 0, 0, &[2, 4, 1]), Ok((&[2, 4, 1], true))),
            ((2, 102, t, 1, 0, 0, &[2]), Ok((&[2], true))),
            // The broker epoch.
            ((1, 100, t, 0, 3, 7, &[1]), Err(StaleBrokerEpoch)),
            ((9, 109, t, 0, 3, 7, &[1]), Err(StaleBrokerEpoch)),
            // Unknown topic or partition.
            ((1, 101, other, 0, 3, 7, &[1]), Err(UnknownTopicId)),
            ((1, 101, t, 2, 3, 7, &[1]), Err(UnknownTopicOrPartition)),
            ((1, 101, t, -1, 3, 7, &[1]), Err(UnknownTopicOrPartition)),
            // Epochs newer than the controller's: it is likely behind.
            ((1, 101, t, 0, 4, 7, &[1]), Err(NotController)),
            ((1, 101, t, 0, 3, 8, &[1]), Err(NotController)),
            // An older leader epoch, checked before leadership.
            ((1, 101, t, 0, 2, 7, &[1]), Err(FencedLeaderEpoch)),
            ((2, 102, t, 0, 2, 7, &[2]), Err(FencedLeaderEpoch)),
            // Not the leader.
            ((2, 102, t, 0, 3, 7, &[1, 2]), Err(InvalidRequest)),
            ((1, 101, t, 1, 0, 0, &[2, 1]), Err(InvalidRequest)),
            // An older partition epoch.
            ((1, 101, t, 0, 3, 6, &[1]), Err(InvalidUpdateVersion)),
            // The ISR's shape.
            ((1, 101, t, 0, 3, 7, &[]), Err(InvalidRequest)),
            ((1, 101, t, 0, 3, 7, &[1, 2, 1]), Err(InvalidRequest)),
            ((1, 101, t, 0, 3, 7, &[1, 7]), Err(InvalidRequest)),
            ((1, 101, t, 0, 3, 7, &[2, 3]), Err(InvalidRequest)),
            ((1, 101, t, 0, 3, 7, &[-1, 1]), Err(InvalidRequest)),
            // Added members that may not join: fenced, shutting down, unregistered.
            ((1, 101, t, 0, 3, 7, &[1, 2, 4]), Err(IneligibleReplica)),
            ((1, 101, t, 0, 3, 7, &[1, 5]), Err(IneligibleReplica)),
            ((1, 101, t, 0, 3, 7, &[1, 3, 6]), Err(IneligibleReplica)),
        ];
        for (i, ((broker_id, broker_epoch, topic, partition, le, pe, isr), want)) in
            cases.into_iter().enumerate()
        {
            let req = AlterPartitionRequest {
                broker_id: b(broker_id),
                broker_epoch: be(broker_epoch),
                topic_id: topic,
                partition,
                leader_epoch: LeaderEpoch::new(le),
                partition_epoch: PartitionEpoch::new(pe),
                new_isr: isr.iter().map(|&r| wire(r.into())).collect(),
                broker_epochs: registered_epochs(&img, isr),
            };
            let got = alter_partition(&img, &req);
            match want {
                Err(code) => assert_eq!(got.unwrap_err().code, code, "case {i}"),
                Ok((want_isr, changed)) => {
                    let (recs, state) = got.unwrap_or_else(|e| panic!("case {i}: {e:?}"));
                    let before = &img.topics["t"].partitions[partition as usize];
                    let expected = AlterPartitionState {
                        leader: before.leader,
                        leader_epoch: before.leader_epoch,
                        partition_epoch: PartitionEpoch::new(
                            before.partition_epoch.get() + i32::from(changed),
                        ),
                        isr: ids(want_isr),
                    };
                    assert_eq!(state, expected, "case {i}");
                    if !changed {
                        assert!(recs.is_empty(), "case {i}: {recs:?}");
                        continue;
                    }
                    let [MetadataRecord::PartitionChange(c)] = &recs[..] else {
                        panic!("case {i}: {recs:?}")
                    };
                    assert_eq!(AlterPartitionState::from(c), expected, "case {i}");
                    assert_eq!(
                        (c.topic_id, c.partition, &c.replicas),
                        (before.topic_id, before.partition, &before.replicas),
                        "case {i}"
                    );
                    // The image takes the change as written.
                    let mut img = img.clone();
                    apply_all(&mut img, &recs);
                    assert_eq!(&img.topics["t"].partitions[partition as usize], c);
                }
            }
        }
    }

    /// Each member's registered broker epoch, as a current leader names them.
    fn registered_epochs(img: &MetadataImage, isr: &[i32]) -> BTreeMap<BrokerId, BrokerEpoch> {
        isr.iter()
            .filter_map(|&r| BrokerId::from_wire(r))
            .filter_map(|r| img.brokers.get(&r).map(|x| (r, x.broker_epoch)))
            .collect()
    }

    /// KIP-903: a member being added is named at its registered broker
    /// epoch, or the change is refused; members already in the ISR are not
    /// judged by it.
    #[test]
    fn added_members_need_their_registered_broker_epoch() {
        let img = alter_image();
        // Epochs as the controller RPC may carry them: -1 too.
        let req = |isr: &[i32], epochs: &[(i32, i64)]| AlterPartitionRequest {
            broker_id: b(1),
            broker_epoch: be(101),
            topic_id: topic_id("t"),
            partition: 0,
            leader_epoch: LeaderEpoch::new(3),
            partition_epoch: PartitionEpoch::new(7),
            new_isr: ids(isr),
            broker_epochs: epochs.iter().map(|&(r, e)| (b(r), wire(e))).collect(),
        };
        let code =
            |r: &AlterPartitionRequest| alter_partition(&img, r).map(|_| ()).map_err(|e| e.code);
        let registered = img.brokers[&b(3)].broker_epoch.get();
        // (new ISR, epochs named) -> answer; the ISR is [1, 2] and 3 is added.
        let cases: Vec<(&[i32], Vec<(i32, i64)>, Result<(), ErrorCode>)> = vec![
            (&[1, 2, 3], vec![(3, registered)], Ok(())),
            (
                &[1, 2, 3],
                vec![(3, registered - 1)],
                Err(ErrorCode::IneligibleReplica),
            ),
            (
                &[1, 2, 3],
                vec![(3, registered + 1)],
                Err(ErrorCode::IneligibleReplica),
            ),
            (&[1, 2, 3], vec![], Err(ErrorCode::IneligibleReplica)),
            (
                &[1, 2, 3],
                vec![(2, registered)],
                Err(ErrorCode::IneligibleReplica),
            ),
            // Staying members are not judged by the epoch named for them.
            (&[1, 2], vec![(2, -1)], Ok(())),
            (&[1], vec![], Ok(())),
        ];
        for (i, (isr, epochs, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                code(&req(isr, &epochs)),
                want,
                "case {i}: {isr:?} {epochs:?}"
            );
        }
    }

    /// Once a change is applied, the old partition epoch is stale and the
    /// new one is current.
    #[test]
    fn alter_partition_sequence() {
        let mut img = alter_image();
        let epochs = registered_epochs(&img, &[1, 2, 3]);
        let req = |pe: i32, isr: &[i32]| AlterPartitionRequest {
            broker_id: b(1),
            broker_epoch: be(101),
            topic_id: topic_id("t"),
            partition: 0,
            leader_epoch: LeaderEpoch::new(3),
            partition_epoch: PartitionEpoch::new(pe),
            new_isr: ids(isr),
            broker_epochs: epochs.clone(),
        };
        let (recs, state) = alter_partition(&img, &req(7, &[1])).unwrap();
        apply_all(&mut img, &recs);
        assert_eq!(state.partition_epoch, PartitionEpoch::new(8));
        assert_eq!(
            alter_partition(&img, &req(7, &[1, 2])).unwrap_err().code,
            ErrorCode::InvalidUpdateVersion
        );
        let (recs, state) = alter_partition(&img, &req(8, &[1, 2, 3])).unwrap();
        apply_all(&mut img, &recs);
        assert_eq!(
            (state.partition_epoch, state.isr),
            (PartitionEpoch::new(9), ids(&[1, 2, 3]))
        );
        assert_eq!(img.topics["t"].partitions[0].isr, ids(&[1, 2, 3]));
        // A fenced leader loses leadership, so its requests stop counting.
        let recs = handle_broker_fenced(&img, b(1));
        apply_all(&mut img, &recs);
        let p = &img.topics["t"].partitions[0];
        let stale = AlterPartitionRequest {
            leader_epoch: LeaderEpoch::new(3),
            ..req(p.partition_epoch.get(), &[1, 2])
        };
        assert_eq!(
            alter_partition(&img, &stale).unwrap_err().code,
            ErrorCode::FencedLeaderEpoch
        );
    }

    /// Leaders go back to the first replica where it is in sync and
    /// active; at most `max` per pass.
    #[test]
    fn leader_balancing() {
        let mut img = image_with_brokers(&[1, 2, 3]);
        add_topic(
            &mut img,
            "t",
            &[
                (&[1, 2, 3], &[1, 2, 3], 2), // moves to 1
                (&[2, 3, 1], &[2, 3, 1], 2), // balanced
                (&[3, 1, 2], &[1, 2], 1),    // 3 out of sync: stays
                (&[1, 2], &[1, 2], 2),       // moves to 1, but 1 is fenced below
                (&[2, 1], &[2, 1], 1),       // moves to 2
            ],
        );
        let (recs, more) = balance_partition_leaders(&img, MAX_ELECTIONS_PER_BALANCE);
        assert!(!more);
        let moved: Vec<(i32, Option<BrokerId>)> = recs
            .iter()
            .map(|r| match r {
                MetadataRecord::PartitionChange(c) => (c.partition, c.leader),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            moved,
            vec![(0, Some(b(1))), (3, Some(b(1))), (4, Some(b(2)))]
        );
        let (recs, more) = balance_partition_leaders(&img, 2);
        assert_eq!((recs.len(), more), (2, true));
        let fence = handle_broker_fenced(&img, b(1));
        apply_all(&mut img, &fence);
        let (recs, _) = balance_partition_leaders(&img, MAX_ELECTIONS_PER_BALANCE);
        assert!(recs.is_empty(), "1 fenced: nothing to move back: {recs:?}");
    }

    #[test]
    fn election_type_wire_values() {
        assert_eq!(ElectionType::try_from(0), Ok(ElectionType::Preferred));
        assert_eq!(ElectionType::try_from(1), Ok(ElectionType::Unclean));
        assert_eq!(
            ElectionType::try_from(2).unwrap_err().code,
            ErrorCode::InvalidRequest
        );
        for t in [ElectionType::Preferred, ElectionType::Unclean] {
            assert_eq!(ElectionType::try_from(t as u8), Ok(t));
        }
    }

    /// The periodic unclean election: offline partitions whose topic
    /// allows it (override, cluster-wide dynamic default, else the
    /// controller's static setting) take an eligible replica outside the
    /// ISR; the others stay offline.
    #[test]
    fn leaderless_partitions_take_unclean_leaders_where_their_topic_allows() {
        let mut img = image_with_brokers(&[1, 2, 3]);
        // Each topic: replicas [1, 2], ISR [1] with 1 fenced: offline.
        for t in ["plain", "on", "off"] {
            add_topic(&mut img, t, &[(&[1, 2], &[1], -1)]);
        }
        let set = |img: &mut MetadataImage, topic: &str, v: &str| {
            img.apply(&MetadataRecord::Config {
                resource: ConfigResource::Topic,
                resource_name: topic.into(),
                name: "unclean.leader.election.enable".into(),
                value: Some(v.into()),
            })
        };
        // Fenced before any setting: all offline (the settings set later
        // act through the periodic check, as Kafka's dynamic ones do).
        let fence = handle_broker_fenced(&img, b(1));
        apply_all(&mut img, &fence);
        set(&mut img, "on", "true");
        set(&mut img, "off", "false");
        let elected = |img: &MetadataImage, static_default: bool| -> Vec<String> {
            let (recs, more) = elect_unclean_leaders(img, static_default, 10);
            assert!(!more);
            let mut names: Vec<String> = recs
                .iter()
                .map(|r| match r {
                    MetadataRecord::PartitionChange(p) => {
                        assert_eq!((p.leader, p.isr.clone()), (Some(b(2)), ids(&[2])));
                        img.topic_names[&p.topic_id].clone()
                    }
                    other => panic!("{other:?}"),
                })
                .collect();
            names.sort();
            names
        };
        assert_eq!(elected(&img, false), vec!["on"]);
        assert_eq!(elected(&img, true), vec!["on", "plain"]);
        // The cluster-wide dynamic default wins over the static one.
        img.apply(&MetadataRecord::Config {
            resource: ConfigResource::Broker,
            resource_name: String::new(),
            name: "unclean.leader.election.enable".into(),
            value: Some("false".into()),
        });
        assert_eq!(elected(&img, true), vec!["on"]);
        // At most `max` a pass, and more is due.
        let (recs, more) = elect_unclean_leaders(&img, false, 0);
        assert!(recs.is_empty() && more);
    }

    /// KIP-858: broker 1 keeps its replicas in directories A and B; B
    /// fails. Its replicas in B leave ISRs and leaderships (the sole
    /// replica's partition goes offline), those in A keep theirs; nothing
    /// elects or re-admits a replica in B until it is assigned to an
    /// online directory again.
    #[test]
    fn a_failed_log_directory_takes_only_its_replicas_offline() {
        let (dir_a, dir_b, dir_c) = (
            Uuid::from_u128(1001),
            Uuid::from_u128(1002),
            Uuid::from_u128(1003),
        );
        let mut img = image_with_brokers(&[1, 2, 3]);
        let mut b1 = img.brokers[&b(1)].clone();
        b1.log_dirs = vec![dir_a, dir_b];
        img.apply(&MetadataRecord::RegisterBroker(b1));
        add_topic(
            &mut img,
            "t",
            &[
                (&[1, 2, 3], &[1, 2, 3], 1), // in A
                (&[1, 2, 3], &[1, 2, 3], 1), // in B, leads
                (&[2, 1, 3], &[2, 1, 3], 2), // in B, follows
                (&[1], &[1], 1),             // in B, alone
            ],
        );
        let t = topic_id("t");
        for (partition, dir) in [(0, dir_a), (1, dir_b), (2, dir_b), (3, dir_b)] {
            let before = img.topics["t"].partitions[partition as usize].clone();
            let change = assign_replica_to_dir(&img, b(1), t, partition, dir)
                .unwrap()
                .expect("a new directory is recorded");
            // Recorded as it is: same leader and ISR, the next partition epoch.
            assert_eq!((change.leader, &change.isr), (before.leader, &before.isr));
            assert_eq!(change.partition_epoch, before.partition_epoch.next());
            assert_eq!(change.directory_of(b(1)), dir);
            assert!(change.directory_of(b(2)).is_nil());
            img.apply(&MetadataRecord::PartitionChange(change));
        }
        // Recorded already: nothing to write.
        assert_eq!(
            assign_replica_to_dir(&img, b(1), t, 1, dir_b).unwrap(),
            None
        );
        // Refusals: not a replica, unknown partition, unknown topic.
        let code = |r: Result<Option<PartitionRecord>, ApiError>| r.unwrap_err().code;
        add_topic(&mut img, "u", &[(&[2], &[2], 2)]);
        assert_eq!(
            code(assign_replica_to_dir(&img, b(1), topic_id("u"), 0, dir_a)),
            ErrorCode::NotLeaderOrFollower
        );
        assert_eq!(
            code(assign_replica_to_dir(&img, b(1), t, 9, dir_a)),
            ErrorCode::UnknownTopicOrPartition
        );
        assert_eq!(
            code(assign_replica_to_dir(
                &img,
                b(1),
                Uuid::from_u128(5),
                0,
                dir_a
            )),
            ErrorCode::UnknownTopicId
        );

        let recs = handle_dirs_offline(&img, b(1), &[dir_b]);
        apply_all(&mut img, &recs);
        assert_eq!(
            leaders_and_isrs(&img, "t"),
            vec![
                (1, vec![1, 2, 3]),
                (2, vec![2, 3]),
                (2, vec![2, 3]),
                (-1, vec![1])
            ]
        );
        assert_eq!(img.brokers[&b(1)].log_dirs, vec![dir_a]);
        // Reported again at the next heartbeat: nothing more to do.
        assert!(handle_dirs_offline(&img, b(1), &[dir_b]).is_empty());
        // An unknown directory changes nothing either.
        assert!(handle_dirs_offline(&img, b(1), &[dir_c]).is_empty());

        // Neither a preferred election nor leader balancing picks 1 for t-1.
        assert!(matches!(
            elect_leader(&img, ElectionType::Preferred, "t", 1),
            Err(e) if e.code == ErrorCode::PreferredLeaderNotAvailable
        ));
        assert!(balance_partition_leaders(&img, 10).0.is_empty());
        // The leader of t-1 may not add 1 back to its ISR.
        let p1 = img.topics["t"].partitions[1].clone();
        let add_back = AlterPartitionRequest {
            broker_id: b(2),
            broker_epoch: img.brokers[&b(2)].broker_epoch,
            topic_id: t,
            partition: 1,
            leader_epoch: p1.leader_epoch,
            partition_epoch: p1.partition_epoch,
            new_isr: ids(&[2, 3, 1]),
            broker_epochs: registered_epochs(&img, &[1, 2, 3]),
        };
        let e = alter_partition(&img, &add_back).unwrap_err();
        assert_eq!(e.code, ErrorCode::IneligibleReplica);
        assert!(
            e.message.contains("1 (offline log directory)"),
            "{}",
            e.message
        );
        // Fenced and unfenced again, broker 1 still does not lead t-3.
        let fence = handle_broker_fenced(&img, b(1));
        apply_all(&mut img, &fence);
        let unfence = handle_broker_unfenced(&img, b(1));
        apply_all(&mut img, &unfence);
        assert_eq!(leaders_and_isrs(&img, "t")[3], (-1, vec![1]));
        assert_eq!(leaders_and_isrs(&img, "t")[0], (2, vec![2, 3]));

        // The replica of t-1 recreated in A: eligible again, so the leader
        // may add it back.
        let change = assign_replica_to_dir(&img, b(1), t, 1, dir_a)
            .unwrap()
            .unwrap();
        img.apply(&MetadataRecord::PartitionChange(change));
        let p1 = img.topics["t"].partitions[1].clone();
        let add_back = AlterPartitionRequest {
            partition_epoch: p1.partition_epoch,
            ..add_back
        };
        let (recs, state) = alter_partition(&img, &add_back).unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(state.isr, ids(&[2, 3, 1]));

        // A replica in the ISR assigned to a directory that is not online
        // leaves the ISR (t-0's replica on 1, back in its ISR first).
        let mut p0 = img.topics["t"].partitions[0].clone();
        p0.isr = ids(&[2, 3, 1]);
        p0.partition_epoch = p0.partition_epoch.next();
        img.apply(&MetadataRecord::PartitionChange(p0));
        let change = assign_replica_to_dir(&img, b(1), t, 0, dir_b)
            .unwrap()
            .unwrap();
        assert_eq!(
            (BrokerId::to_wire(change.leader), change.isr.clone()),
            (2, ids(&[2, 3]))
        );
    }
}
