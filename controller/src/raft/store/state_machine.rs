//! The state machine: committed entries replayed into the `MetadataImage`.
//!
//! `apply` only changes memory; durability comes from the snapshot, which is
//! persisted when built or installed (synced, on RocksDB) and is where the
//! image restarts from. The backend is a small enum so one type serves both
//! RocksDB and memory.

use super::rocks;
use crate::raft::{Applied, NodeId, TypeConfig};
use openraft::storage::RaftStateMachine;
use openraft::{
    AnyError, BasicNode, Entry, EntryPayload, LogId, OptionalSend, RaftSnapshotBuilder, Snapshot,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership,
};
use parking_lot::Mutex;
use rocksdb::DB;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::io::Cursor;
use std::sync::Arc;
use strand_metadata::image::MetadataImage;
use strand_metadata::records::MetadataRecord;
use tokio::sync::watch;

type Result<T, E = StorageError<NodeId>> = std::result::Result<T, E>;
type Meta = SnapshotMeta<NodeId, BasicNode>;

/// Snapshot data, written from borrowed state.
#[derive(Serialize)]
struct PayloadRef<'a> {
    last_applied: &'a Option<LogId<NodeId>>,
    last_membership: &'a StoredMembership<NodeId, BasicNode>,
    image: &'a MetadataImage,
}

/// Snapshot data, read back.
#[derive(Deserialize)]
struct Payload {
    last_applied: Option<LogId<NodeId>>,
    last_membership: StoredMembership<NodeId, BasicNode>,
    image: MetadataImage,
}

/// Decodes snapshot data and checks it agrees with its meta.
fn decode(meta: &Meta, data: &[u8]) -> Result<Payload, AnyError> {
    let p: Payload = serde_json::from_slice(data).map_err(|e| AnyError::new(&e))?;
    if p.last_applied != meta.last_log_id || p.last_membership != meta.last_membership {
        return Err(AnyError::error(format!(
            "snapshot data (last applied {:?}) does not match its meta ({meta})",
            p.last_applied
        )));
    }
    Ok(p)
}

enum Backend {
    Memory,
    Rocks(Arc<DB>),
}

struct SmState {
    image: MetadataImage,
    last_applied: Option<LogId<NodeId>>,
    last_membership: StoredMembership<NodeId, BasicNode>,
    /// The most recent applied batches, each with the image position before
    /// it: what brokers following the metadata fetch as deltas.
    recent: VecDeque<(u64, Arc<Vec<MetadataRecord>>)>,
}

/// How many recent batches are kept for delta followers; one further behind
/// gets the whole image.
const RECENT_BATCHES: usize = 4096;

struct Current {
    meta: Meta,
    data: Vec<u8>,
}

struct Inner {
    state: Mutex<SmState>,
    current: Mutex<Option<Current>>,
    /// Serializes replacing the current snapshot (persist, then swap), so a
    /// slow build cannot overwrite a newer installed snapshot.
    snapshot_io: tokio::sync::Mutex<()>,
    backend: Backend,
    /// The image after each apply or install. Only sent with `state` locked,
    /// so receivers see images in the order the state took them: the image
    /// never goes backwards, whoever drives the state machine (openraft
    /// serializes `apply` and `install_snapshot`, but a Raft instance that was
    /// shut down keeps its state machine worker until the worker drains, and
    /// clones share this state).
    publish: watch::Sender<Arc<MetadataImage>>,
}

/// The metadata state machine. Clones share state; a clone is also the
/// snapshot builder.
#[derive(Clone)]
pub struct StateMachineStore {
    inner: Arc<Inner>,
}

impl StateMachineStore {
    fn new(backend: Backend, current: Option<Current>, state: SmState) -> Self {
        let (publish, _) = watch::channel(Arc::new(state.image.clone()));
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(state),
                current: Mutex::new(current),
                snapshot_io: tokio::sync::Mutex::new(()),
                backend,
                publish,
            }),
        }
    }

    fn empty_state() -> SmState {
        SmState {
            image: MetadataImage::default(),
            last_applied: None,
            last_membership: StoredMembership::default(),
            recent: VecDeque::new(),
        }
    }

    pub(super) fn memory() -> Self {
        Self::new(Backend::Memory, None, Self::empty_state())
    }

    /// Starts from the snapshot persisted in `db`, if any.
    pub(super) fn open_rocks(db: Arc<DB>) -> Result<Self, AnyError> {
        let loaded = rocks::load_snapshot(&db)?;
        let (current, state) = match loaded {
            None => (None, Self::empty_state()),
            Some((meta, data)) => {
                let p = decode(&meta, &data)?;
                let state = SmState {
                    image: p.image,
                    last_applied: p.last_applied,
                    last_membership: p.last_membership,
                    recent: VecDeque::new(),
                };
                (Some(Current { meta, data }), state)
            }
        };
        Ok(Self::new(Backend::Rocks(db), current, state))
    }

    /// The image as of the last apply (or snapshot install).
    pub fn image(&self) -> Arc<MetadataImage> {
        self.inner.publish.borrow().clone()
    }

    /// The records applied since image position `applied`, if they are all
    /// still in the recent window (None: the caller needs the whole image).
    pub fn records_since(&self, applied: u64) -> Option<Vec<MetadataRecord>> {
        let st = self.inner.state.lock();
        if applied == st.image.applied {
            return Some(Vec::new());
        }
        let start = st
            .recent
            .iter()
            .position(|(before, _)| *before == applied)?;
        Some(
            st.recent
                .iter()
                .skip(start)
                .flat_map(|(_, records)| records.iter().cloned())
                .collect(),
        )
    }

    /// A receiver that sees the image after every apply call.
    pub fn subscribe(&self) -> watch::Receiver<Arc<MetadataImage>> {
        self.inner.publish.subscribe()
    }

    /// Publishes `st.image`; the caller holds the state lock (`st`).
    fn publish_locked(&self, st: &SmState) {
        self.inner.publish.send_replace(Arc::new(st.image.clone()));
    }

    /// Persists (`meta`, `data`) and makes it the current snapshot. A built
    /// snapshot (`replace_newer == false`) older than the current one is
    /// dropped: an install overtook it.
    async fn set_current(&self, meta: Meta, data: Vec<u8>, replace_newer: bool) -> Result<()> {
        let _io = self.inner.snapshot_io.lock().await;
        if !replace_newer {
            let current = self.inner.current.lock();
            if let Some(c) = current.as_ref() {
                if c.meta.last_log_id > meta.last_log_id {
                    return Ok(());
                }
            }
        }
        if let Backend::Rocks(db) = &self.inner.backend {
            rocks::save_snapshot(db, &meta, data.clone())
                .await
                .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), e))?;
        }
        *self.inner.current.lock() = Some(Current { meta, data });
        Ok(())
    }
}

fn snapshot_id(last: Option<LogId<NodeId>>) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    match last {
        Some(l) => format!(
            "{}-{}-{}-{nanos}",
            l.leader_id.term, l.leader_id.node_id, l.index
        ),
        None => format!("none-{nanos}"),
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachineStore {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>> {
        let (meta, data) = {
            let st = self.inner.state.lock();
            let data = serde_json::to_vec(&PayloadRef {
                last_applied: &st.last_applied,
                last_membership: &st.last_membership,
                image: &st.image,
            })
            .map_err(|e| StorageIOError::write_snapshot(None, &e))?;
            let meta = Meta {
                last_log_id: st.last_applied,
                last_membership: st.last_membership.clone(),
                snapshot_id: snapshot_id(st.last_applied),
            };
            (meta, data)
        };
        self.set_current(meta.clone(), data.clone(), false).await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>)> {
        let st = self.inner.state.lock();
        Ok((st.last_applied, st.last_membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Applied>>
    where
        I: IntoIterator<Item = Entry<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut replies = Vec::new();
        let result = {
            let mut st = self.inner.state.lock();
            let mut result = Ok(());
            for entry in entries {
                if let Some(last) = st.last_applied {
                    if entry.log_id.index <= last.index {
                        // Applying twice would replay records twice.
                        result = Err(StorageIOError::write_state_machine(AnyError::error(
                            format!("apply of {} at or before last applied {last}", entry.log_id),
                        ))
                        .into());
                        break;
                    }
                }
                match entry.payload {
                    EntryPayload::Blank => {}
                    EntryPayload::Normal(batch) => {
                        let before = st.image.applied;
                        for record in &batch.0 {
                            st.image.apply(record);
                        }
                        if !batch.0.is_empty() {
                            if st.recent.len() == RECENT_BATCHES {
                                st.recent.pop_front();
                            }
                            st.recent.push_back((before, Arc::new(batch.0)));
                        }
                    }
                    EntryPayload::Membership(m) => {
                        st.last_membership = StoredMembership::new(Some(entry.log_id), m);
                    }
                }
                st.last_applied = Some(entry.log_id);
                replies.push(Applied {
                    applied_records: st.image.applied,
                });
            }
            if !replies.is_empty() {
                self.publish_locked(&st);
            }
            result
        };
        result.map(|()| replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, BasicNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<()> {
        let data = snapshot.into_inner();
        let payload = decode(meta, &data)
            .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), e))?;
        // Persist first: if that fails the node stops with the old state intact.
        self.set_current(meta.clone(), data, true).await?;
        let mut st = self.inner.state.lock();
        st.image = payload.image;
        // Deltas from before the snapshot no longer line up with the image.
        st.recent.clear();
        st.last_applied = meta.last_log_id;
        st.last_membership = meta.last_membership.clone();
        self.publish_locked(&st);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot<TypeConfig>>> {
        let current = self.inner.current.lock();
        Ok(current.as_ref().map(|c| Snapshot {
            meta: c.meta.clone(),
            snapshot: Box::new(Cursor::new(c.data.clone())),
        }))
    }
}
