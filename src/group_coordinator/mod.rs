//! The group coordinator's I/O: which `__consumer_offsets` partitions this
//! broker leads (and has loaded), the groups and committed offsets kept for
//! them, and writing group metadata and offsets to the log (acks=all) before
//! acting on them. The group rules themselves are the pure `strand_group`
//! state machine; this module feeds it requests and timers and delivers the
//! responses it decides.

pub mod records;

use crate::broker::{now_ms, Partition};
use crate::config::BrokerConfig;
use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use parking_lot::Mutex;
use records::{CommittedOffset, OffsetsRecord};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;
use strand_protocol::ErrorCode;
use strand_replication::rules::Acks;

/// The internal topic holding group metadata and committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// Where a `__consumer_offsets` partition led here stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Load {
    /// Reading the partition; its groups answer COORDINATOR_LOAD_IN_PROGRESS.
    Loading { epoch: i32 },
    Loaded { epoch: i32 },
}

/// One group's offsets and (once the group state machine lands here) state.
pub struct GroupEntry {
    pub id: String,
    pub partition: i32,
    pub slot: tokio::sync::Mutex<GroupSlot>,
}

pub struct GroupSlot {
    pub offsets: BTreeMap<(String, i32), CommittedOffset>,
    /// Set when the partition was unloaded: the entry is stale.
    pub unloaded: bool,
}

pub struct GroupCoordinator {
    config: Arc<BrokerConfig>,
    partitions: Mutex<HashMap<i32, Load>>,
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
    pub fn new(config: Arc<BrokerConfig>) -> Self {
        GroupCoordinator {
            config,
            partitions: Mutex::new(HashMap::new()),
            groups: Mutex::new(HashMap::new()),
        }
    }

    /// The `__consumer_offsets` partition of a group, given its partition count.
    pub fn partition_for(group: &str, partitions: i32) -> i32 {
        records::coordinator_partition(group, partitions)
    }

    /// Called after every reconcile for each `__consumer_offsets` partition
    /// hosted here: starts loading one this broker now leads (at a new
    /// epoch), unloads one it no longer leads.
    pub fn on_partition(self: &Arc<Self>, partition: &Arc<Partition>) {
        let index = partition.index;
        let leading = partition.is_leader().then(|| partition.leader_epoch());
        let mut parts = self.partitions.lock();
        let current = parts.get(&index).copied();
        match (leading, current) {
            (Some(epoch), Some(Load::Loading { epoch: e } | Load::Loaded { epoch: e }))
                if e == epoch => {}
            (Some(epoch), _) => {
                parts.insert(index, Load::Loading { epoch });
                drop(parts);
                self.unload_groups(index);
                let me = self.clone();
                let p = partition.clone();
                tokio::spawn(async move { me.load(p, epoch).await });
            }
            (None, Some(_)) => {
                parts.remove(&index);
                drop(parts);
                self.unload_groups(index);
                tracing::info!(partition = index, "no longer coordinator for this offsets partition");
            }
            (None, None) => {}
        }
    }

    /// A partition no longer hosted here (topic deleted or reassigned).
    pub fn forget_partition(&self, index: i32) {
        if self.partitions.lock().remove(&index).is_some() {
            self.unload_groups(index);
        }
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
            let marked = match g.slot.try_lock() {
                Ok(mut slot) => {
                    slot.unloaded = true;
                    true
                }
                Err(_) => false,
            };
            if !marked {
                // Busy: mark it as soon as the current request is done.
                tokio::spawn(async move { g.slot.lock().await.unloaded = true });
            }
        }
    }

    /// Reads the whole partition and rebuilds its groups and offsets, then
    /// answers for them (if still leader at `epoch`).
    async fn load(self: Arc<Self>, partition: Arc<Partition>, epoch: i32) {
        let index = partition.index;
        let started = std::time::Instant::now();
        let p = partition.clone();
        let state = tokio::task::spawn_blocking(move || read_offsets_partition(&p)).await;
        let state = match state {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::error!(partition = index, error = %e, "cannot load offsets partition");
                return;
            }
            Err(e) => {
                tracing::error!(partition = index, error = %e, "offsets load task failed");
                return;
            }
        };
        let mut parts = self.partitions.lock();
        if parts.get(&index) != Some(&Load::Loading { epoch }) {
            return; // Leadership moved on while loading.
        }
        let mut groups = self.groups.lock();
        let count = state.len();
        for (id, offsets) in state {
            groups.insert(
                id.clone(),
                Arc::new(GroupEntry {
                    id,
                    partition: index,
                    slot: tokio::sync::Mutex::new(GroupSlot {
                        offsets,
                        unloaded: false,
                    }),
                }),
            );
        }
        parts.insert(index, Load::Loaded { epoch });
        tracing::info!(partition = index, epoch, groups = count, elapsed_ms = started.elapsed().as_millis() as u64, "offsets partition loaded; coordinating its groups");
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
        match self.partitions.lock().get(&index) {
            Some(Load::Loaded { .. }) => {}
            Some(Load::Loading { .. }) => return Err(not_here(true)),
            None => return Err(not_here(false)),
        }
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
            slot: tokio::sync::Mutex::new(GroupSlot {
                offsets: BTreeMap::new(),
                unloaded: false,
            }),
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
}

/// Groups and offsets of one partition, replayed in log order.
type LoadedState = HashMap<String, BTreeMap<(String, i32), CommittedOffset>>;

fn read_offsets_partition(partition: &Partition) -> Result<LoadedState, String> {
    let mut state: LoadedState = HashMap::new();
    let log = partition.log.read();
    let end = log.log_end_offset();
    let mut offset = log.log_start_offset();
    while offset < end {
        let r = log
            .read(offset, 1 << 20, end, true)
            .map_err(|e| e.to_string())?;
        if r.records.is_empty() {
            break;
        }
        let mut buf = r.records.clone();
        let mut next = offset;
        for (_, h) in strand_protocol::batch::BatchIter::new(&r.records) {
            next = next.max(h.next_offset());
        }
        match RecordBatchDecoder::decode_all(&mut buf) {
            Ok(sets) => {
                for set in sets {
                    for rec in set.records {
                        if rec.control || rec.offset < offset {
                            continue;
                        }
                        apply_record(&mut state, rec.key.as_ref(), rec.value.as_ref());
                    }
                }
            }
            Err(e) => {
                tracing::warn!(topic = OFFSETS_TOPIC, partition = partition.index, offset, error = %e, "undecodable batch skipped")
            }
        }
        if next <= offset {
            break;
        }
        offset = next;
    }
    Ok(state)
}

fn apply_record(state: &mut LoadedState, key: Option<&Bytes>, value: Option<&Bytes>) {
    match records::decode(key, value) {
        Ok(OffsetsRecord::Offset {
            group,
            topic,
            partition,
            value,
        }) => match value {
            Some(v) => {
                state.entry(group).or_default().insert((topic, partition), v);
            }
            None => {
                if let Some(g) = state.get_mut(&group) {
                    g.remove(&(topic, partition));
                }
            }
        },
        Ok(OffsetsRecord::Group { group, snapshot }) => {
            if snapshot.is_none() {
                state.remove(&group);
            } else {
                state.entry(group).or_default();
            }
        }
        Err(e) => tracing::warn!(error = %e, "undecodable offsets record skipped"),
    }
}

/// Encodes key/value records as one batch (no producer id, CreateTime now).
pub fn encode_records(kvs: &[(Bytes, Option<Bytes>)]) -> Result<Bytes, String> {
    let now = now_ms();
    let records: Vec<Record> = kvs
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: i as i64,
            // The encoder starts a new batch unless offset - sequence stays
            // constant; this keeps one batch with base sequence -1 (none).
            sequence: i as i32 - 1,
            timestamp: now,
            key: Some(k.clone()),
            value: v.clone(),
            headers: Default::default(),
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        &records,
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .map_err(|e| e.to_string())?;
    Ok(buf.freeze())
}

/// Appends records to a `__consumer_offsets` partition this broker leads and
/// waits until they are committed (HW), as Kafka's coordinator does with
/// acks=all.
pub async fn append_committed(
    partition: &Partition,
    kvs: &[(Bytes, Option<Bytes>)],
    timeout: Duration,
) -> Result<(), ErrorCode> {
    let batch = encode_records(kvs).map_err(|e| {
        tracing::error!(error = %e, "cannot encode offsets records");
        ErrorCode::UnknownServerError
    })?;
    let outcome = partition
        .append(&batch, Acks::All, 3)
        .map_err(|e| map_append_error(e.code))?;
    let deadline = tokio::time::Instant::now() + timeout;
    partition
        .wait_for_ack(&outcome, deadline)
        .await
        .map_err(map_append_error)
}

/// Kafka's mapping of log append errors to coordinator answers.
fn map_append_error(code: ErrorCode) -> ErrorCode {
    match code {
        ErrorCode::UnknownTopicOrPartition
        | ErrorCode::NotEnoughReplicas
        | ErrorCode::NotEnoughReplicasAfterAppend
        | ErrorCode::RequestTimedOut => ErrorCode::CoordinatorNotAvailable,
        ErrorCode::NotLeaderOrFollower | ErrorCode::KafkaStorageError => {
            ErrorCode::NotCoordinator
        }
        ErrorCode::MessageTooLarge | ErrorCode::RecordListTooLarge | ErrorCode::InvalidFetchSize => {
            ErrorCode::UnknownServerError
        }
        other => other,
    }
}

/// OffsetCommit's group checks (Kafka `validateOffsetCommit`): without group
/// membership only a simple commit (generation < 0) is accepted.
pub fn validate_commit(
    _slot: &mut GroupSlot,
    _member_id: &str,
    generation: i32,
    _instance_id: Option<&str>,
    _now_ms: i64,
) -> Result<(), ErrorCode> {
    if generation < 0 {
        Ok(())
    } else {
        Err(ErrorCode::IllegalGeneration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encoded_records_pass_the_produce_checks() {
        let kvs = vec![
            (records::offset_key("g", "t", 0), Some(Bytes::from_static(b"v"))),
            (records::group_key("g"), None),
        ];
        let batch = encode_records(&kvs).unwrap();
        let headers = strand_protocol::batch::validate_record_set(&batch).unwrap();
        assert_eq!(headers.len(), 1);
        assert!(!headers[0].has_producer_id());
        assert!(strand_protocol::batch::keyless_record_indexes(&batch)
            .unwrap()
            .is_empty());
    }
}
