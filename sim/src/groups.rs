//! The group coordinator's offsets on the leader of `__consumer_offsets-0`,
//! with the broker's own pieces: `strand_group::offsets::GroupOffsets` and
//! its `Replay` (loaded once the HW covers what was read, as
//! `GroupCoordinator` waits), the `strand_group::records` codec, appends
//! acks=all before anything is answered. OffsetCommit commits once written;
//! TxnOffsetCommit first has the transaction coordinator add
//! `__consumer_offsets` to the producer's transaction (KIP-890 part 2, as
//! `handlers::groups::txn_offset_commit` does), appends the producer's
//! transactional records and stages them once written; the producer's
//! marker, once in the HW, commits or drops them. And the plain committer:
//! a client committing ever larger offsets for its own group and fetching
//! them back.

use rand::Rng;
use std::collections::BTreeMap;
use strand_broker::coordinator_runtime::{
    encode_records, encode_records_as, for_each_record, load_is_committed,
};
use strand_group::offsets::{OffsetKey, Replay, ReplayRecord};
use strand_group::records::{self, CommittedOffset};
use strand_partition::AppendOrigin;
use strand_protocol::ErrorCode;
use strand_replication::rules::Acks;
use strand_types::{BrokerId, ProducerId};

use crate::msg::Msg;
use crate::state::{GroupHost, GroupWrite, ParkedTxnCommit, PlainOp, Waiter};
use crate::{offsets_tp, txn_tp, Sim, CLIENT, PLAIN_GROUP, RPC_RETRY_MS, TXN_GROUP};

/// The input partition whose offset the transactional clients of
/// transactional id `txn` commit.
pub(crate) fn txn_input(txn: usize) -> OffsetKey {
    ("input".to_string(), txn as i32)
}

/// The plain committer's partition.
pub(crate) fn plain_input() -> OffsetKey {
    ("input".to_string(), 100)
}

fn value(offset: i64) -> CommittedOffset {
    CommittedOffset {
        offset,
        leader_epoch: -1,
        metadata: String::new(),
        commit_timestamp_ms: 0,
    }
}

impl Sim {
    /// After a reconcile (and at every tick while waiting for the HW):
    /// load the groups when this broker newly leads `__consumer_offsets-0`,
    /// drop them when it no longer does.
    pub(crate) fn groups_reconcile(&mut self, id: i32) {
        let tp = offsets_tp();
        let leading = self
            .node(id)
            .replicas
            .get(&tp)
            .map(|r| r.partition.clone())
            .filter(|p| p.is_leader());
        let Some(p) = leading else {
            if self.node(id).groups.take().is_some() {
                self.note(format!("broker {id}: no longer group coordinator"));
            }
            return;
        };
        let epoch = p.leader_epoch().get();
        if self
            .node(id)
            .groups
            .as_ref()
            .is_some_and(|h| h.epoch == epoch)
        {
            return;
        }
        self.node(id).groups = None;
        let mut replay = Replay::default();
        let scanned = for_each_record(&p, |rec| {
            replay.record(ReplayRecord {
                key: rec.key.as_ref(),
                value: rec.value.as_ref(),
                control: rec.control,
                transactional: rec.transactional,
                producer_id: ProducerId::from_wire(rec.producer_id),
            });
        });
        let Ok(end) = scanned else {
            return; // A failing disk: tried again at the next tick.
        };
        if !load_is_committed(p.offsets().high_watermark, end) {
            return;
        }
        let (loaded, skipped) = replay.finish();
        if !skipped.is_empty() {
            self.broken
                .get_or_insert(format!("group load skipped records: {skipped:?}"));
        }
        let groups = loaded.into_iter().map(|(g, l)| (g, l.offsets)).collect();
        self.note(format!(
            "broker {id}: group coordinator loaded at epoch {epoch}"
        ));
        self.node(id).groups = Some(GroupHost {
            epoch,
            groups,
            writes: BTreeMap::new(),
            adding: BTreeMap::new(),
        });
    }

    /// Requests to the group coordinator.
    pub(crate) fn groups_receive(&mut self, id: i32, from: i32, msg: Msg) {
        let (req, msg) = match msg {
            Msg::OffsetCommit { id: req, .. }
            | Msg::TxnOffsetCommit { id: req, .. }
            | Msg::OffsetFetch { id: req, .. } => (req, msg),
            _ => return,
        };
        let Some(host) = self.node(id).groups.as_ref() else {
            let result = Err(ErrorCode::NotCoordinator);
            self.send(id, from, Msg::OffsetReply { id: req, result });
            return;
        };
        let epoch = host.epoch;
        match msg {
            Msg::OffsetFetch {
                group,
                key,
                require_stable,
                ..
            } => {
                let result = match host.groups.get(&group) {
                    None => Ok(None),
                    Some(o) => o.fetch(&key, require_stable).map(|v| v.map(|c| c.offset)),
                };
                self.send(id, from, Msg::OffsetReply { id: req, result });
            }
            Msg::OffsetCommit {
                group,
                key,
                value: v,
                ..
            } => {
                let kv = (
                    records::offset_key(&group, &key.0, key.1),
                    Some(records::offset_value(&value(v))),
                );
                let write = GroupWrite::Commit {
                    client: req,
                    group,
                    key,
                    value: value(v),
                };
                let appended = match (
                    self.leader_partition(id, &offsets_tp()),
                    encode_records(&[kv], self.now),
                ) {
                    (Some(p), Ok(batch)) if p.leader_epoch().get() == epoch => {
                        p.append(&batch, Acks::All, 3).map_err(|e| e.code)
                    }
                    _ => Err(ErrorCode::NotCoordinator),
                };
                self.group_append(id, epoch, write, appended);
            }
            Msg::TxnOffsetCommit {
                txn,
                producer_id,
                producer_epoch,
                value: v,
                ..
            } => {
                // The transaction coordinator adds the partition first.
                let coordinator = self
                    .node(id)
                    .image
                    .partition(&txn_tp().topic, 0)
                    .and_then(|p| p.leader)
                    .map(BrokerId::get);
                let Some(coordinator) = coordinator else {
                    let result = Err(ErrorCode::CoordinatorLoadInProgress);
                    self.send(id, from, Msg::OffsetReply { id: req, result });
                    return;
                };
                let add_id = self.next_id();
                let deadline = self.now + RPC_RETRY_MS * 3;
                if let Some(host) = self.node(id).groups.as_mut() {
                    host.adding.insert(
                        add_id,
                        ParkedTxnCommit {
                            client: req,
                            producer_id,
                            producer_epoch,
                            key: txn_input(txn),
                            value: v,
                            deadline,
                        },
                    );
                }
                self.send(
                    id,
                    coordinator,
                    Msg::AddPartition {
                        id: add_id,
                        txn,
                        producer_id,
                        producer_epoch,
                        tp: offsets_tp(),
                    },
                );
            }
            _ => {}
        }
    }

    /// The transaction coordinator answered a TxnOffsetCommit's add; false
    /// if `add_id` is not one of the group coordinator's.
    pub(crate) fn groups_added(
        &mut self,
        id: i32,
        add_id: u64,
        result: Result<(), ErrorCode>,
    ) -> bool {
        let Some(host) = self.node(id).groups.as_mut() else {
            return false;
        };
        let Some(parked) = host.adding.remove(&add_id) else {
            return false;
        };
        let epoch = host.epoch;
        if let Err(code) = result {
            // As `handlers::groups::txn_offset_commit` answers: a fenced
            // epoch stays, coordinator trouble becomes retriable.
            let code = match code {
                ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch => {
                    ErrorCode::InvalidProducerEpoch
                }
                ErrorCode::InvalidTxnState | ErrorCode::InvalidProducerIdMapping => code,
                _ => ErrorCode::CoordinatorLoadInProgress,
            };
            self.send(
                id,
                CLIENT,
                Msg::OffsetReply {
                    id: parked.client,
                    result: Err(code),
                },
            );
            return true;
        }
        let kv = (
            records::offset_key(TXN_GROUP, &parked.key.0, parked.key.1),
            Some(records::offset_value(&value(parked.value))),
        );
        let producer = (parked.producer_id, parked.producer_epoch);
        let appended = match (
            self.leader_partition(id, &offsets_tp()),
            encode_records_as(&[kv], Some(producer), self.now),
        ) {
            (Some(p), Ok(batch)) if p.leader_epoch().get() == epoch => p
                .append_from(&batch, Acks::All, 3, AppendOrigin::Coordinator)
                .map_err(|e| e.code),
            _ => Err(ErrorCode::NotCoordinator),
        };
        let write = GroupWrite::Stage {
            client: parked.client,
            group: TXN_GROUP.to_string(),
            producer: parked.producer_id,
            key: parked.key,
            value: value(parked.value),
        };
        self.group_append(id, epoch, write, appended);
        true
    }

    fn group_append(
        &mut self,
        id: i32,
        epoch: i32,
        write: GroupWrite,
        appended: Result<strand_partition::AppendOutcome, ErrorCode>,
    ) {
        let write_id = self.next_id();
        let client = match &write {
            GroupWrite::Commit { client, .. } | GroupWrite::Stage { client, .. } => *client,
        };
        if appended.is_ok() {
            if let Some(host) = self.node(id).groups.as_mut() {
                host.writes.insert(write_id, write);
            }
        }
        let waiter = Waiter::Group {
            epoch,
            write: write_id,
        };
        match appended {
            Ok(_) => {
                if self.appended(id, &offsets_tp(), waiter, appended).is_err() {
                    self.broken
                        .get_or_insert("two appenders in one epoch of __consumer_offsets".into());
                }
            }
            Err(code) => {
                self.send(
                    id,
                    CLIENT,
                    Msg::OffsetReply {
                        id: client,
                        result: Err(code),
                    },
                );
            }
        }
    }

    /// A group write is committed (or failed): the cache follows, the
    /// client is answered.
    pub(crate) fn group_write_done(
        &mut self,
        id: i32,
        epoch: i32,
        write: u64,
        result: Result<(), ErrorCode>,
    ) {
        let Some(host) = self.node(id).groups.as_mut().filter(|h| h.epoch == epoch) else {
            return;
        };
        let Some(w) = host.writes.remove(&write) else {
            return;
        };
        let client = match w {
            GroupWrite::Commit {
                client,
                group,
                key,
                value,
            } => {
                if result.is_ok() {
                    host.groups.entry(group).or_default().commit([(key, value)]);
                }
                client
            }
            GroupWrite::Stage {
                client,
                group,
                producer,
                key,
                value,
            } => {
                if result.is_ok() {
                    host.groups
                        .entry(group)
                        .or_default()
                        .stage(producer, [(key, value)]);
                }
                client
            }
        };
        let result = result.map(|()| None);
        self.send(id, CLIENT, Msg::OffsetReply { id: client, result });
    }

    /// A marker on `__consumer_offsets` is in the HW: the producer's staged
    /// offsets are committed or dropped. False when the groups are not
    /// loaded here (the marker is answered retriable and sent again).
    pub(crate) fn groups_on_marker(&mut self, id: i32, producer: ProducerId, commit: bool) -> bool {
        let Some(host) = self.node(id).groups.as_mut() else {
            return false;
        };
        for offsets in host.groups.values_mut() {
            offsets.end_transaction(producer, commit);
        }
        true
    }

    /// TxnOffsetCommits whose add got no answer: retriable.
    pub(crate) fn groups_tick(&mut self, id: i32) {
        self.groups_reconcile(id);
        let now = self.now;
        let Some(host) = self.node(id).groups.as_mut() else {
            return;
        };
        let (late, waiting): (BTreeMap<_, _>, BTreeMap<_, _>) = std::mem::take(&mut host.adding)
            .into_iter()
            .partition(|(_, p)| now >= p.deadline);
        host.adding = waiting;
        for (_, p) in late {
            let result = Err(ErrorCode::CoordinatorLoadInProgress);
            self.send(
                id,
                CLIENT,
                Msg::OffsetReply {
                    id: p.client,
                    result,
                },
            );
        }
    }

    /// The plain committer: one commit or fetch in flight at a time.
    pub(crate) fn plain_committer_tick(&mut self) {
        let now = self.now;
        if let Some((_, at, op)) = self.plain.in_flight {
            if now - at < RPC_RETRY_MS * 3 {
                return;
            }
            if let PlainOp::Commit(v) = op {
                self.plain.unknown.insert(v);
            }
            self.plain.in_flight = None;
        }
        let Some(coordinator) = self.leader_of(&offsets_tp()) else {
            return;
        };
        let id = self.next_id();
        let fetch = self.rng.gen_bool(0.4);
        let msg = if fetch || self.healed_at.is_some() {
            // What a fetch must return at least: the highest value whose
            // commit was answered before it was sent.
            self.plain.in_flight = Some((id, now, PlainOp::Fetch(self.plain.acked)));
            Msg::OffsetFetch {
                id,
                group: PLAIN_GROUP.to_string(),
                key: plain_input(),
                require_stable: false,
            }
        } else {
            self.plain.sent += 1;
            self.plain.in_flight = Some((id, now, PlainOp::Commit(self.plain.sent)));
            Msg::OffsetCommit {
                id,
                group: PLAIN_GROUP.to_string(),
                key: plain_input(),
                value: self.plain.sent,
            }
        };
        self.send(CLIENT, coordinator, msg);
    }
}
