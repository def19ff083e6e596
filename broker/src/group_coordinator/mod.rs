//! The group coordinator's I/O: which `__consumer_offsets` partitions this
//! broker leads (and has loaded), the groups and committed offsets kept for
//! them, and writing group metadata and offsets to the log (acks=all) before
//! acting on them. The group rules themselves are the pure `strand_group`
//! state machine; this module feeds it requests and timers and delivers the
//! responses it decides.

use crate::config::BrokerConfig;
use crate::coordinator_runtime::{
    self, append_committed, append_records, coordinator_partition, for_each_record, wait_committed,
    Coordinator, Loads,
};
use crate::replica_manager::PartitionListener;
use bytes::Bytes;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use strand_group::consumer::{
    codec as consumer_codec, ConsumerGroup, ConsumerGroupConfig, TopicImage,
};
use strand_group::offsets::{GroupOffsets, LoadedGroup, Replay, ReplayRecord};
use strand_group::records;
use strand_group::{
    Group, GroupConfig, GroupMetadataSnapshot, JoinResponse, Outcome, SyncResponse,
};
use strand_partition::Partition;
use strand_protocol::ErrorCode;
use strand_types::{Clock, ProducerId};
use tokio::sync::oneshot;

/// The internal topic holding group metadata and committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// One group on this coordinator: its membership state machine (absent for
/// groups that only have offsets, e.g. from simple commits), its committed
/// offsets, and the JoinGroup/SyncGroup requests it holds.
pub struct GroupEntry {
    pub id: String,
    pub partition: i32,
    /// The coordinator's clock, for what completes after a request (a
    /// persisted snapshot, an unload).
    pub clock: Arc<dyn Clock>,
    pub slot: tokio::sync::Mutex<GroupSlot>,
}

pub struct GroupSlot {
    pub group: Option<Group>,
    /// A consumer-protocol group (KIP-848), kept by replaying its records.
    pub consumer: Option<ConsumerGroup>,
    /// Committed offsets, and those of open transactions (TxnOffsetCommit)
    /// until the producer's marker lands on this partition.
    pub offsets: GroupOffsets,
    /// Set when the partition was unloaded: the entry is stale.
    pub unloaded: bool,
    pending_joins: HashMap<String, oneshot::Sender<JoinResponse>>,
    pending_syncs: HashMap<String, oneshot::Sender<SyncResponse>>,
}

impl GroupSlot {
    fn new(group: Option<Group>, offsets: GroupOffsets) -> Self {
        GroupSlot {
            group,
            consumer: None,
            offsets,
            unloaded: false,
            pending_joins: HashMap::new(),
            pending_syncs: HashMap::new(),
        }
    }

    pub fn hold_join(&mut self, member_id: String) -> oneshot::Receiver<JoinResponse> {
        let (tx, rx) = oneshot::channel();
        self.pending_joins.insert(member_id, tx);
        rx
    }

    pub fn hold_sync(&mut self, member_id: String) -> oneshot::Receiver<SyncResponse> {
        let (tx, rx) = oneshot::channel();
        self.pending_syncs.insert(member_id, tx);
        rx
    }
}

pub struct GroupCoordinator {
    config: Arc<BrokerConfig>,
    /// Session, rebalance and offset-retention timers read this clock.
    pub clock: Arc<dyn Clock>,
    partitions: Loads<()>,
    groups: Mutex<HashMap<String, Arc<GroupEntry>>>,
}

/// Why a request cannot be served by this coordinator now.
pub fn not_here(loading: bool) -> ErrorCode {
    if loading {
        ErrorCode::CoordinatorLoadInProgress
    } else {
        ErrorCode::NotCoordinator
    }
}

impl GroupCoordinator {
    pub fn new(config: Arc<BrokerConfig>, clock: Arc<dyn Clock>) -> Self {
        GroupCoordinator {
            config,
            clock,
            partitions: Loads::default(),
            groups: Mutex::new(HashMap::new()),
        }
    }

    /// The `__consumer_offsets` partition of a group, given its partition count.
    pub fn partition_for(group: &str, partitions: i32) -> i32 {
        coordinator_partition(group, partitions)
    }

    fn unload_groups(&self, index: i32) {
        let removed: Vec<Arc<GroupEntry>> = {
            let mut groups = self.groups.lock();
            let ids: Vec<String> = groups
                .iter()
                .filter(|(_, g)| g.partition == index)
                .map(|(id, _)| id.clone())
                .collect();
            ids.iter().filter_map(|id| groups.remove(id)).collect()
        };
        for g in removed {
            // Held requests are answered NOT_COORDINATOR so clients move on.
            tokio::spawn(async move {
                let mut slot = g.slot.lock().await;
                slot.unloaded = true;
                if let Some(group) = slot.group.as_mut() {
                    let outcome = group.unload(g.clock.now_ms());
                    deliver_answers(&mut slot, &outcome);
                }
            });
        }
    }

    /// Reads the whole partition and rebuilds its groups and offsets, then
    /// answers for them (if still leader at `epoch`).
    async fn load_offsets_partition(self: Arc<Self>, partition: Arc<Partition>, epoch: i32) {
        let index = partition.index;
        let started = std::time::Instant::now();
        let p = partition.clone();
        let state = tokio::task::spawn_blocking(move || read_offsets_partition(&p)).await;
        let (state, end) = match state {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::error!(partition = index, error = %e, "cannot load offsets partition; retried at the next reconcile");
                self.partitions.failed(index, epoch);
                return;
            }
            Err(e) => {
                tracing::error!(partition = index, error = %e, "offsets load task failed; retried at the next reconcile");
                self.partitions.failed(index, epoch);
                return;
            }
        };
        // Answer only from committed records (COORDINATOR_LOAD_IN_PROGRESS
        // until the HW covers what was read).
        if !coordinator_runtime::wait_load_committed(&partition, epoch, end).await {
            self.partitions.failed(index, epoch);
            return;
        }
        let count = state.0.len() + state.1.len();
        let installed = self.partitions.finish(index, epoch, (), || {
            self.install_groups(index, state);
        });
        if installed {
            tracing::info!(
                partition = index,
                epoch,
                groups = count,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "offsets partition loaded; coordinating its groups"
            );
        }
    }

    /// Puts a loaded partition's groups in place.
    fn install_groups(&self, index: i32, (state, mut consumers): LoadedState) {
        let mut groups = self.groups.lock();
        let now = self.clock.now_ms();
        let consumer_config = self.consumer_config();
        let only_consumers: Vec<String> = consumers
            .keys()
            .filter(|id| !state.contains_key(*id))
            .cloned()
            .collect();
        let mut take_consumer = |id: &str| {
            consumers.remove(id).map(|mut g| {
                g.on_loaded(&consumer_config, now);
                g
            })
        };
        let mut install = |id: String, group: Option<Group>, offsets: GroupOffsets| {
            let mut slot = GroupSlot::new(group, offsets);
            slot.consumer = take_consumer(&id);
            let entry = GroupEntry {
                id: id.clone(),
                partition: index,
                clock: self.clock.clone(),
                slot: tokio::sync::Mutex::new(slot),
            };
            groups.insert(id, Arc::new(entry));
        };
        for id in only_consumers {
            install(id, None, GroupOffsets::default());
        }
        for (id, loaded) in state {
            let LoadedGroup { offsets, snapshot } = loaded;
            let group = snapshot.and_then(|json| {
                match serde_json::from_slice::<GroupMetadataSnapshot>(&json)
                    .map_err(|e| e.to_string())
                    .and_then(|snap| {
                        Group::from_snapshot(id.clone(), snap, self.group_config(), now)
                            .map_err(|e| e.to_string())
                    }) {
                    Ok(g) => Some(g),
                    Err(e) => {
                        tracing::warn!(group = %id, error = %e, "group metadata unreadable; the group starts empty");
                        None
                    }
                }
            });
            install(id, group, offsets);
        }
    }

    /// The group's entry if this broker coordinates it now; creates an empty
    /// one when `create` and the partition is loaded.
    pub fn group(
        &self,
        id: &str,
        partitions: i32,
        create: bool,
    ) -> Result<Option<Arc<GroupEntry>>, ErrorCode> {
        let index = Self::partition_for(id, partitions);
        self.partitions.loaded(index)?;
        let mut groups = self.groups.lock();
        if let Some(g) = groups.get(id) {
            return Ok(Some(g.clone()));
        }
        if !create {
            return Ok(None);
        }
        let g = Arc::new(GroupEntry {
            id: id.to_string(),
            partition: index,
            clock: self.clock.clone(),
            slot: tokio::sync::Mutex::new(GroupSlot::new(None, GroupOffsets::default())),
        });
        groups.insert(id.to_string(), g.clone());
        Ok(Some(g))
    }

    /// Every group coordinated here (ListGroups).
    pub fn all_groups(&self) -> Vec<Arc<GroupEntry>> {
        self.groups.lock().values().cloned().collect()
    }

    pub fn commit_timeout(&self) -> Duration {
        Duration::from_millis(self.config.offsets_commit_timeout_ms.max(1) as u64)
    }

    /// `group.consumer.*` as the consumer groups follow them.
    pub fn consumer_config(&self) -> ConsumerGroupConfig {
        let num = |k: &str, d: i64| -> i64 {
            self.config
                .setting(k)
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(d)
        };
        let d = ConsumerGroupConfig::default();
        let assignors: Vec<_> = self
            .config
            .setting("group.consumer.assignors")
            .unwrap_or_default()
            .split(',')
            .filter_map(|a| strand_group::consumer::assignor::Assignor::from_name(a.trim()))
            .collect();
        ConsumerGroupConfig {
            session_timeout_ms: num("group.consumer.session.timeout.ms", d.session_timeout_ms),
            heartbeat_interval_ms: num(
                "group.consumer.heartbeat.interval.ms",
                i64::from(d.heartbeat_interval_ms),
            ) as i32,
            max_size: num("group.consumer.max.size", d.max_size as i64).max(1) as usize,
            assignors: if assignors.is_empty() {
                d.assignors
            } else {
                assignors
            },
            migration: strand_group::consumer::MigrationPolicy::parse(
                &self
                    .config
                    .setting("group.consumer.migration.policy")
                    .unwrap_or_else(|| "bidirectional".to_string()),
            ),
            classic_max_size: self.config.group_max_size,
            assignment_interval_ms: num("group.consumer.assignment.interval.ms", 1000).max(0),
        }
    }

    /// `group.consumer.*` with a group's own settings over them (GROUP
    /// config resources): its members' session timeout and heartbeat
    /// interval, and its assignment interval. (After a coordinator load
    /// each member's first session runs for the broker's session timeout;
    /// its next heartbeat applies the group's.)
    pub fn consumer_config_of(
        &self,
        image: &strand_metadata::image::MetadataImage,
        group: &str,
    ) -> ConsumerGroupConfig {
        let mut cfg = self.consumer_config();
        if let Some(own) = image.group_configs.get(group) {
            let num = |k: &str| own.get(k).and_then(|v| v.trim().parse::<i64>().ok());
            if let Some(v) = num("consumer.session.timeout.ms") {
                cfg.session_timeout_ms = v;
            }
            if let Some(v) =
                num("consumer.heartbeat.interval.ms").and_then(|v| i32::try_from(v).ok())
            {
                cfg.heartbeat_interval_ms = v;
            }
            if let Some(v) = num("consumer.assignment.interval.ms") {
                cfg.assignment_interval_ms = v.max(0);
            }
        }
        cfg
    }

    pub fn group_config(&self) -> GroupConfig {
        GroupConfig {
            min_session_timeout_ms: self.config.group_min_session_timeout_ms,
            max_session_timeout_ms: self.config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms: self.config.group_initial_rebalance_delay_ms,
            max_size: self.config.group_max_size,
        }
    }

    /// A transaction marker landed on `__consumer_offsets` partition `index`:
    /// the producer's pending transactional offsets there become committed
    /// offsets (commit) or are dropped (abort). False if the partition is not
    /// loaded here (nothing applied).
    pub async fn on_txn_marker(&self, index: i32, producer_id: ProducerId, commit: bool) -> bool {
        // A partition still loading may have read the log before this marker:
        // the caller answers a retriable error and the coordinator sends the
        // marker again once the groups are loaded (they are in the map
        // before the partition is marked Loaded).
        if self.partitions.loaded(index).is_err() {
            return false;
        }
        let entries: Vec<Arc<GroupEntry>> = self
            .all_groups()
            .into_iter()
            .filter(|g| g.partition == index)
            .collect();
        for entry in entries {
            entry
                .slot
                .lock()
                .await
                .offsets
                .end_transaction(producer_id, commit);
        }
        true
    }

    /// Drops an entry (a deleted group), if it is still the one registered.
    pub fn remove(&self, entry: &Arc<GroupEntry>) {
        let mut groups = self.groups.lock();
        if groups.get(&entry.id).is_some_and(|g| Arc::ptr_eq(g, entry)) {
            groups.remove(&entry.id);
        }
    }

    /// Fires the timers of every group whose deadline has come (initial
    /// rebalance delay, rebalance and session timeouts). `topics`: the
    /// topics consumer-protocol groups may subscribe to, asked for only
    /// when a member is removed.
    pub async fn tick(
        &self,
        partition_of: impl Fn(i32) -> Option<Arc<Partition>>,
        topics: impl Fn() -> TopicImage,
    ) {
        for entry in self.all_groups() {
            let mut slot = entry.slot.lock().await;
            fire_due_timers(
                &entry,
                &mut slot,
                || partition_of(entry.partition),
                self.commit_timeout(),
            );
            self.expire_consumer_members(&entry, &mut slot, &partition_of, &topics)
                .await;
        }
    }

    /// Removes the consumer-protocol members whose session or revocation
    /// time ran out, once their records are written (the group is put back
    /// as it was if they cannot be).
    async fn expire_consumer_members(
        &self,
        entry: &Arc<GroupEntry>,
        slot: &mut GroupSlot,
        partition_of: &impl Fn(i32) -> Option<Arc<Partition>>,
        topics: &impl Fn() -> TopicImage,
    ) {
        let now = entry.clock.now_ms();
        if slot.unloaded {
            return;
        }
        let Some(group) = slot.consumer.as_mut() else {
            return;
        };
        if group.next_deadline().is_none_or(|d| d > now) {
            return;
        }
        let before = group.clone();
        let cfg = self.consumer_config();
        let records = group.tick(now, &topics(), &cfg);
        if records.is_empty() {
            return;
        }
        let written = self
            .write_consumer_change(entry, slot, &records, partition_of(entry.partition), vec![])
            .await;
        match written {
            Ok(()) => tracing::info!(group = %entry.id, "consumer group members expired"),
            Err(e) => {
                tracing::warn!(group = %entry.id, error = ?e, "could not write expired members; retried at the next tick");
                slot.consumer = Some(before);
            }
        }
    }

    /// Writes the records a change of `slot.consumer` made (acks=all). When
    /// they end the group because only classic members are left (the
    /// online downgrade), the classic group it becomes is written in the
    /// same append, put in its place, and starts a rebalance. On an error
    /// the caller puts the consumer group back as it was.
    pub async fn write_consumer_change(
        &self,
        entry: &Arc<GroupEntry>,
        slot: &mut GroupSlot,
        records: &[strand_group::consumer::Record],
        partition: Option<Arc<Partition>>,
        mut kvs: Vec<(Bytes, Option<Bytes>)>,
    ) -> Result<(), ErrorCode> {
        let downgrade = slot.consumer.as_mut().and_then(|g| g.take_downgrade());
        kvs.extend(consumer_record_kvs(&entry.id, records));
        if let Some(snapshot) = &downgrade {
            let json = serde_json::to_vec(snapshot).map_err(|_| ErrorCode::UnknownServerError)?;
            kvs.push((
                records::group_key(&entry.id),
                Some(records::group_value(&json)),
            ));
        }
        let Some(p) = partition.clone() else {
            return Err(ErrorCode::NotCoordinator);
        };
        if !kvs.is_empty() {
            append_committed(&p, &kvs, self.commit_timeout()).await?;
        }
        if let Some(snapshot) = downgrade {
            let now = self.clock.now_ms();
            match Group::from_snapshot(entry.id.clone(), snapshot, self.group_config(), now) {
                Ok(mut classic) => {
                    let outcome = classic.rebalance_after_downgrade(now);
                    slot.consumer = None;
                    slot.group = Some(classic);
                    act(entry, slot, outcome, partition, self.commit_timeout());
                    tracing::info!(group = %entry.id, "consumer group became a classic group (online downgrade)");
                }
                Err(e) => {
                    // Not reachable: the snapshot is made with a leader
                    // among its members and one protocol.
                    tracing::error!(group = %entry.id, error = %e, "downgraded group unreadable; the group is left empty");
                    slot.consumer = None;
                }
            }
        }
        Ok(())
    }
}

/// Fires the group's timers whose deadline has come, if any. The tick
/// calls it for every group; a JoinGroup calls it once its answer is held,
/// so a join phase with no initial delay (`group.initial.rebalance.delay.ms=0`)
/// completes at once, as Kafka's purgatory completes it, not at the next tick.
pub fn fire_due_timers(
    entry: &Arc<GroupEntry>,
    slot: &mut GroupSlot,
    partition: impl FnOnce() -> Option<Arc<Partition>>,
    timeout: Duration,
) {
    let now = entry.clock.now_ms();
    let due = slot
        .group
        .as_ref()
        .and_then(|g| g.next_deadline())
        .is_some_and(|d| d <= now);
    if !due || slot.unloaded {
        return;
    }
    let Some(group) = slot.group.as_mut() else {
        return;
    };
    let outcome = group.tick(now);
    act(entry, slot, outcome, partition(), timeout);
}

impl GroupCoordinator {
    /// Offset expiration (Kafka `cleanupGroupMetadata`, KIP-211): only groups
    /// without members lose offsets: an offset expires `offsets.retention.minutes`
    /// after the group became Empty (or, for a group that never had members,
    /// after its commit). A group left with no offsets and no members is
    /// deleted. Tombstones are written (acks=all) before the cache forgets.
    pub async fn expire_offsets(
        &self,
        partition_of: impl Fn(i32) -> Option<Arc<Partition>>,
        now: i64,
    ) {
        let retention = self.config.offsets_retention_ms;
        for entry in self.all_groups() {
            let mut slot = entry.slot.lock().await;
            if slot.unloaded {
                continue;
            }
            if slot
                .consumer
                .as_ref()
                .is_some_and(|c| !c.members().is_empty())
            {
                continue;
            }
            let empty_since = match &slot.group {
                Some(g) if g.state() == strand_group::GroupState::Empty => {
                    Some(g.state_timestamp_ms())
                }
                Some(_) => continue,
                None => None,
            };
            let expired: Vec<(String, i32)> = slot
                .offsets
                .committed()
                .iter()
                .filter(|(_, v)| {
                    now.saturating_sub(empty_since.unwrap_or(v.commit_timestamp_ms)) >= retention
                })
                .map(|(k, _)| k.clone())
                .collect();
            if expired.is_empty() {
                continue;
            }
            let drop_group = expired.len() == slot.offsets.committed().len();
            let mut kvs: Vec<(Bytes, Option<Bytes>)> = expired
                .iter()
                .map(|(t, p)| (records::offset_key(&entry.id, t, *p), None))
                .collect();
            if drop_group {
                kvs.push((records::group_key(&entry.id), None));
            }
            let Some(partition) = partition_of(entry.partition) else {
                continue;
            };
            match append_committed(&partition, &kvs, self.commit_timeout()).await {
                Ok(()) => {
                    for k in &expired {
                        slot.offsets.remove(k);
                    }
                    tracing::info!(group = %entry.id, expired = expired.len(), "expired committed offsets");
                    if drop_group {
                        if let Some(g) = slot.group.as_mut() {
                            let _ = g.delete(now);
                        }
                        drop(slot);
                        self.remove(&entry);
                    }
                }
                Err(e) => {
                    tracing::warn!(group = %entry.id, error = ?e, "could not expire offsets")
                }
            }
        }
    }
}

/// Delivers an outcome: answers held requests, starts the metadata writes it
/// asks for (each reports back through `Group::on_persisted`, whose outcome is
/// delivered the same way).
pub fn act(
    entry: &Arc<GroupEntry>,
    slot: &mut GroupSlot,
    outcome: Outcome,
    partition: Option<Arc<Partition>>,
    timeout: Duration,
) {
    deliver_answers(slot, &outcome);
    for persist in outcome.persists {
        let entry = entry.clone();
        let partition = partition.clone();
        // Appended here, in order, under the group's lock: the log holds the
        // group's snapshots in the order the state machine made them, so a
        // reload never picks an older one. Only the wait for the HW runs apart.
        let appended = match (&partition, serde_json::to_vec(&persist.snapshot)) {
            (Some(p), Ok(json)) => {
                let kv = (
                    records::group_key(&entry.id),
                    Some(records::group_value(&json)),
                );
                append_records(p, &[kv]).map(|o| (p.clone(), o))
            }
            (None, _) => Err(ErrorCode::NotCoordinator),
            (_, Err(e)) => {
                tracing::error!(group = %entry.id, error = %e, "cannot encode group metadata");
                Err(ErrorCode::UnknownServerError)
            }
        };
        tokio::spawn(async move {
            let result = match appended {
                Ok((p, outcome)) => wait_committed(&p, &outcome, timeout).await,
                Err(e) => Err(e),
            };
            let mut slot = entry.slot.lock().await;
            if slot.unloaded {
                return;
            }
            if let Some(group) = slot.group.as_mut() {
                let outcome = group.on_persisted(persist.id, result, entry.clock.now_ms());
                act(&entry, &mut slot, outcome, partition, timeout);
            }
        });
    }
}

/// Writes a consumer group's records (acks=all) and waits for the HW.
pub async fn append_consumer_records(
    partition: &Partition,
    group: &str,
    records: &[strand_group::consumer::Record],
    timeout: Duration,
) -> Result<(), ErrorCode> {
    append_committed(partition, &consumer_record_kvs(group, records), timeout).await
}

/// The keys and values of a consumer group's records, as written to
/// `__consumer_offsets`.
pub fn consumer_record_kvs(
    group: &str,
    records: &[strand_group::consumer::Record],
) -> Vec<(Bytes, Option<Bytes>)> {
    records
        .iter()
        .map(|r| consumer_codec::encode(group, r))
        .collect()
}

/// Answers every held JoinGroup and SyncGroup with `code` (a classic group
/// taken over by the consumer protocol).
pub fn answer_held(slot: &mut GroupSlot, code: ErrorCode) {
    for (member, tx) in slot.pending_joins.drain() {
        let _ = tx.send(JoinResponse::error(member, code));
    }
    for (_, tx) in slot.pending_syncs.drain() {
        let _ = tx.send(SyncResponse::error(code));
    }
}

/// Answers the held JoinGroup/SyncGroup requests an outcome completed.
fn deliver_answers(slot: &mut GroupSlot, outcome: &Outcome) {
    for (member, response) in &outcome.joins {
        if let Some(tx) = slot.pending_joins.remove(member) {
            let _ = tx.send(response.clone());
        }
    }
    for (member, response) in &outcome.syncs {
        if let Some(tx) = slot.pending_syncs.remove(member) {
            let _ = tx.send(response.clone());
        }
    }
}

/// Every group of one partition, replayed in log order.
type LoadedState = (
    BTreeMap<String, LoadedGroup>,
    BTreeMap<String, ConsumerGroup>,
);

/// Replays a `__consumer_offsets` partition (`strand_group::offsets::Replay`),
/// with the LEO it read up to.
fn read_offsets_partition(
    partition: &Partition,
) -> Result<(LoadedState, strand_types::Offset), String> {
    let mut replay = Replay::default();
    let mut consumers: BTreeMap<String, ConsumerGroup> = BTreeMap::new();
    let end = for_each_record(partition, |rec| {
        if let Some(key) = rec
            .key
            .as_ref()
            .filter(|k| consumer_codec::is_consumer_group_key(k))
        {
            match consumer_codec::decode(key, rec.value.as_deref()) {
                Ok(Some((group, record))) => consumers
                    .entry(group.clone())
                    .or_insert_with(|| ConsumerGroup::new(group))
                    .replay(&record),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(partition = partition.index, error = %e, "undecodable consumer group record skipped")
                }
            }
            return;
        }
        replay.record(ReplayRecord {
            key: rec.key.as_ref(),
            value: rec.value.as_ref(),
            control: rec.control,
            transactional: rec.transactional,
            producer_id: ProducerId::from_wire(rec.producer_id),
        });
    })?;
    let (state, skipped) = replay.finish();
    for e in skipped {
        tracing::warn!(partition = partition.index, error = %e, "undecodable offsets record skipped");
    }
    // A group whose last member left and whose offsets are gone is over.
    // An ended group (its metadata tombstoned) is gone.
    consumers.retain(|_, g| g.exists() && (!g.members().is_empty() || state.contains_key(g.id())));
    Ok(((state, consumers), end))
}

/// OffsetCommit's group checks (Kafka `validateOffsetCommit`): by the group's
/// state machine when it has one, else only a simple commit (generation < 0).
pub fn validate_commit(
    slot: &mut GroupSlot,
    member_id: &str,
    generation: i32,
    instance_id: Option<&str>,
    now_ms: i64,
) -> Result<(), ErrorCode> {
    match slot.group.as_mut() {
        Some(g) => g.validate_offset_commit(member_id, generation, instance_id, now_ms),
        None => strand_group::offset_commit_without_group(generation),
    }
}

impl PartitionListener for GroupCoordinator {
    fn topic(&self) -> &'static str {
        OFFSETS_TOPIC
    }

    /// Called after every reconcile for each `__consumer_offsets` partition
    /// hosted here: starts loading one this broker now leads (at a new
    /// epoch), unloads one it no longer leads.
    fn on_partition(self: Arc<Self>, partition: &Arc<Partition>) {
        coordinator_runtime::on_partition(&self, partition);
    }

    /// A partition no longer hosted here (topic deleted or reassigned).
    fn forget_partition(&self, index: i32) {
        coordinator_runtime::forget_partition(self, index);
    }
}

impl Coordinator for GroupCoordinator {
    type State = ();
    const WHAT: &'static str = "groups";

    fn loads(&self) -> &Loads<()> {
        &self.partitions
    }

    fn unload(&self, index: i32) {
        self.unload_groups(index);
    }

    fn load(
        self: Arc<Self>,
        partition: Arc<Partition>,
        epoch: i32,
    ) -> impl std::future::Future<Output = ()> + Send {
        self.load_offsets_partition(partition, epoch)
    }
}

/// The topics a consumer-protocol group may subscribe to: every topic of
/// the image, internal ones too (Kafka matches a regex against them all;
/// franz-go's Test848RegexBrokerResolves consumes `__consumer_offsets`).
pub fn consumer_topics(image: &strand_metadata::image::MetadataImage) -> TopicImage {
    TopicImage::new(
        image
            .topics
            .values()
            .map(|t| (t.name.clone(), t.topic_id, t.partitions.len() as i32)),
    )
}

/// A failed write's error as Kafka's coordinator answers it.
pub fn written_error(code: ErrorCode) -> ErrorCode {
    match code {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::RequestTimedOut => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => ErrorCode::NotCoordinator,
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A group's own session timeout and heartbeat interval (GROUP
    /// configs) lie over the broker's `group.consumer.*`; other groups keep
    /// the broker's.
    #[test]
    fn a_groups_own_settings_lie_over_the_brokers() {
        let config = BrokerConfig::from_pairs(vec![(
            "group.consumer.session.timeout.ms".into(),
            "50000".into(),
        )])
        .unwrap();
        let coordinator =
            GroupCoordinator::new(Arc::new(config), strand_types::SystemClock::shared());
        let mut image = strand_metadata::image::MetadataImage::default();
        image.group_configs.insert(
            "g".into(),
            [
                ("consumer.session.timeout.ms", "55000"),
                ("consumer.heartbeat.interval.ms", "7000"),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        );
        let own = coordinator.consumer_config_of(&image, "g");
        assert_eq!(
            (own.session_timeout_ms, own.heartbeat_interval_ms),
            (55_000, 7_000)
        );
        let other = coordinator.consumer_config_of(&image, "h");
        assert_eq!(
            (other.session_timeout_ms, other.heartbeat_interval_ms),
            (50_000, 5_000)
        );
    }
}
