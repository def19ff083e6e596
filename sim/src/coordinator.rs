//! The transaction coordinator on the leader of `__transaction_state-0`:
//! the real [`TxnShard`], loaded from the partition's records when this
//! broker becomes its leader (a new coordinator epoch), dropped when it
//! stops leading; its appends go to that partition acks=all and are
//! reported once the HW covers them, its markers go to the data
//! partitions' leaders as WriteMarker requests, retried until written.
//! What the shard decides is recorded for the checks: a transaction is
//! decided once, and never committed for an instance that a newer
//! instance's grant fenced.

use std::collections::{BTreeMap, BTreeSet};
use strand_broker::coordinator_runtime::{encode_records, for_each_record, load_is_committed};
use strand_protocol::ErrorCode;
use strand_replication::rules::Acks;
use strand_txn::coordinator::TxnState;
use strand_txn::shard::{Answer, Effect, MarkersOutcome, Reply, ShardConfig, TxnShard, WriteId};
use strand_txn::txn_log;
use strand_types::{BrokerId, ProducerEpoch, ProducerId, TopicPartition};

use crate::msg::{Instance, Msg};
use crate::state::{MarkerJob, ShardHost, ShardWaiter, Waiter};
use crate::{txn_tp, Decision, Sim, CLIENT, RPC_RETRY_MS, TXN_IDS, TXN_TIMEOUT_CHECK_MS};

const CONFIG: ShardConfig = ShardConfig {
    max_timeout_ms: 900_000,
};

/// A failed write's follow-ups wait this long (as the broker's runtime does).
const RETRY_BACKOFF_MS: i64 = 200;

impl Sim {
    /// After a reconcile: load the shard when this broker newly leads
    /// `__transaction_state-0` (or leads it at a new epoch), drop it when
    /// it no longer does.
    pub(crate) fn coordinator_reconcile(&mut self, id: i32) {
        let tp = txn_tp();
        let leading = self
            .node(id)
            .replicas
            .get(&tp)
            .map(|r| r.partition.clone())
            .filter(|p| p.is_leader());
        let Some(p) = leading else {
            if self.node(id).coordinator.take().is_some() {
                self.note(format!("broker {id}: no longer transaction coordinator"));
            }
            return;
        };
        let epoch = p.leader_epoch().get();
        if self
            .node(id)
            .coordinator
            .as_ref()
            .is_some_and(|h| h.epoch == epoch)
        {
            return;
        }
        // A shard of an earlier epoch answers nothing any more.
        if self.node(id).coordinator.take().is_some() {
            self.note(format!(
                "broker {id}: coordinator unloaded for epoch {epoch}"
            ));
        }
        let mut records = Vec::new();
        let scanned = for_each_record(&p, |rec| {
            if let (false, Some(key)) = (rec.control, rec.key.as_ref()) {
                records.push((key.clone(), rec.value.clone()));
            }
        });
        let end = match scanned {
            Ok(end) => end,
            Err(e) => {
                // A failing disk: the load is tried again at the next tick.
                self.note(format!("broker {id}: coordinator load failed: {e}"));
                return;
            }
        };
        // Answer only from committed records: until the HW covers what was
        // read, the load is tried again at every tick (requests get
        // NOT_COORDINATOR meanwhile), as `TxnCoordinator` waits.
        if !load_is_committed(p.offsets().high_watermark, end) {
            return;
        }
        let (shard, effects, report) = TxnShard::load(
            0,
            epoch,
            CONFIG,
            records.iter().map(|(k, v)| (&k[..], v.as_deref())),
        );
        if !report.skipped.is_empty() {
            self.broken
                .get_or_insert(format!("coordinator load skipped records: {report:?}"));
        }
        self.coordinator_loads += 1;
        // A Prepare state found by the load is a decision too: its record
        // committed, though the coordinator that wrote it may never have
        // seen that (it died, or its wait timed out).
        let found: Vec<((ProducerId, ProducerEpoch), bool)> = shard
            .all()
            .filter(|m| m.current.state.is_prepare())
            .filter_map(|m| {
                let key = (m.current.producer_id?, m.current.last_producer_epoch?);
                Some((key, m.current.state == TxnState::PrepareCommit))
            })
            .collect();
        for (key, commit) in found {
            self.decide(key, commit);
        }
        self.note(format!(
            "broker {id}: coordinator loaded at epoch {epoch}: {} ids, {} completing",
            report.transactional_ids, report.completing
        ));
        let now = self.now;
        self.node(id).coordinator = Some(ShardHost {
            epoch,
            shard,
            waiting: BTreeMap::new(),
            prepares: BTreeMap::new(),
            markers: Vec::new(),
            retry: Vec::new(),
            last_timeout_check: now,
        });
        self.carry_out(id, effects);
    }

    /// Requests to the coordinator, and the markers' answers.
    pub(crate) fn coordinator_receive(&mut self, id: i32, from: i32, msg: Msg) {
        let now = self.now;
        if self.node(id).coordinator.is_none() {
            let code = ErrorCode::NotCoordinator;
            match msg {
                Msg::InitProducerId { id: req, .. } | Msg::EndTxn { id: req, .. } => self.send(
                    id,
                    from,
                    Msg::CoordinatorReply {
                        id: req,
                        result: Err(code),
                    },
                ),
                Msg::AddPartition { id: req, .. } => self.send(
                    id,
                    from,
                    Msg::AddPartitionReply {
                        id: req,
                        result: Err(code),
                    },
                ),
                _ => {}
            }
            return;
        }
        match msg {
            Msg::InitProducerId {
                id: req,
                txn,
                instance,
            } => {
                let mut fresh = None;
                loop {
                    let host = self.node(id).coordinator.as_mut().expect("checked above");
                    let answer = host.shard.init_producer_id(
                        TXN_IDS[txn],
                        crate::TXN_TIMEOUT_MS,
                        None,
                        fresh,
                        // The cluster's level: transaction.version 2.
                        true,
                        now,
                    );
                    match answer {
                        Answer::NeedProducerId => {
                            fresh = Some(ProducerId::new(self.next_producer_id));
                            self.next_producer_id += 1;
                        }
                        Answer::Now(r) => {
                            if r.is_ok() {
                                self.grant(txn, instance);
                            }
                            let result = r.map(|(p, e)| (Some(p), Some(e)));
                            self.send(id, from, Msg::CoordinatorReply { id: req, result });
                            return;
                        }
                        Answer::Later { write, effects } => {
                            let waiter = ShardWaiter::Client {
                                id: req,
                                grant: Some((txn, instance)),
                            };
                            host.waiting.insert(write, waiter);
                            self.carry_out(id, effects);
                            return;
                        }
                    }
                }
            }
            Msg::EndTxn {
                id: req,
                txn,
                producer_id,
                producer_epoch,
                commit,
            } => {
                let mut fresh = None;
                loop {
                    let host = self.node(id).coordinator.as_mut().expect("checked above");
                    let answer = host.shard.end_txn(
                        TXN_IDS[txn],
                        Some(producer_id),
                        Some(producer_epoch),
                        commit,
                        true,
                        fresh,
                        now,
                    );
                    match answer {
                        Answer::NeedProducerId => {
                            fresh = Some(ProducerId::new(self.next_producer_id));
                            self.next_producer_id += 1;
                        }
                        Answer::Now(result) => {
                            self.send(id, from, Msg::CoordinatorReply { id: req, result });
                            return;
                        }
                        Answer::Later { write, effects } => {
                            let waiter = ShardWaiter::Client {
                                id: req,
                                grant: None,
                            };
                            host.waiting.insert(write, waiter);
                            self.carry_out(id, effects);
                            return;
                        }
                    }
                }
            }
            Msg::AddPartition {
                id: req,
                txn,
                producer_id,
                producer_epoch,
                tp,
            } => {
                let host = self.node(id).coordinator.as_mut().expect("checked above");
                let tps = [(tp.topic.to_string(), tp.partition)];
                match host.shard.add_partitions(
                    TXN_IDS[txn],
                    Some(producer_id),
                    Some(producer_epoch),
                    &tps,
                    2,
                    now,
                ) {
                    Answer::Now(result) => {
                        self.send(id, from, Msg::AddPartitionReply { id: req, result })
                    }
                    Answer::NeedProducerId => self.send(
                        id,
                        from,
                        Msg::AddPartitionReply {
                            id: req,
                            result: Err(ErrorCode::UnknownServerError),
                        },
                    ),
                    Answer::Later { write, effects } => {
                        host.waiting.insert(
                            write,
                            ShardWaiter::Leader {
                                broker: from,
                                id: req,
                            },
                        );
                        self.carry_out(id, effects);
                    }
                }
            }
            Msg::MarkerReply { id: req, result } => {
                let host = self.node(id).coordinator.as_mut().expect("checked above");
                for job in &mut host.markers {
                    let Some((tp, _)) = job.in_flight.remove(&req) else {
                        continue;
                    };
                    match result {
                        Ok(()) => {
                            job.remaining.remove(&tp);
                        }
                        Err(ErrorCode::InvalidProducerEpoch)
                        | Err(ErrorCode::TransactionCoordinatorFenced) => job.fenced = true,
                        // Not written yet (leaderless, not enough replicas,
                        // timed out): sent again.
                        Err(_) => {}
                    }
                }
            }
            _ => {}
        }
    }

    /// A newer grant of a transactional id's producer id fences every other
    /// instance: from now on none of their transactions may commit.
    fn grant(&mut self, txn: usize, instance: Instance) {
        self.grants.insert(txn, instance);
        self.note(format!(
            "coordinator: {} granted to instance {instance}",
            TXN_IDS[txn]
        ));
    }

    /// Carries out a shard's effects on broker `id`.
    fn carry_out(&mut self, id: i32, effects: Vec<Effect>) {
        let tp = txn_tp();
        for effect in effects {
            match effect {
                Effect::Append { write, key, value } => {
                    let Some(epoch) = self.node(id).coordinator.as_ref().map(|h| h.epoch) else {
                        return;
                    };
                    // What the write decides, for the checks: a Prepare
                    // record fixes its transaction's outcome.
                    if let Some(record) = value.as_ref().and_then(|v| txn_log::decode_value(v).ok())
                    {
                        if let (Some(pid), Some(data_epoch), true) = (
                            record.producer_id,
                            record.last_producer_epoch,
                            record.state.is_prepare(),
                        ) {
                            let commit = record.state == TxnState::PrepareCommit;
                            if let Some(host) = self.node(id).coordinator.as_mut() {
                                host.prepares.insert(write, ((pid, data_epoch), commit));
                            }
                        }
                    }
                    let appended = match (
                        self.leader_partition(id, &tp),
                        encode_records(&[(key, value)], self.now),
                    ) {
                        (Some(p), Ok(batch)) if p.leader_epoch().get() == epoch => {
                            p.append(&batch, Acks::All, 3).map_err(|e| e.code)
                        }
                        _ => Err(ErrorCode::NotCoordinator),
                    };
                    let waiter = Waiter::Shard { epoch, write };
                    if self.appended(id, &tp, waiter, appended).is_err() {
                        // One appender per epoch broken: reported by check().
                        self.broken.get_or_insert(
                            "two appenders in one epoch of __transaction_state".into(),
                        );
                    }
                }
                Effect::WriteMarkers(markers) => {
                    let remaining: BTreeSet<TopicPartition> = markers
                        .partitions
                        .iter()
                        .map(|(t, p)| TopicPartition::new(t.as_str(), *p))
                        .collect();
                    if let Some(host) = self.node(id).coordinator.as_mut() {
                        host.markers.push(MarkerJob {
                            markers,
                            remaining,
                            in_flight: BTreeMap::new(),
                            fenced: false,
                        });
                    }
                }
            }
        }
    }

    /// A shard's append is committed (or failed): the shard is told, the
    /// waiting request answered, and what follows carried out.
    pub(crate) fn shard_write_done(
        &mut self,
        id: i32,
        epoch: i32,
        write: WriteId,
        result: Result<(), ErrorCode>,
    ) {
        let now = self.now;
        let Some(host) = self
            .node(id)
            .coordinator
            .as_mut()
            .filter(|h| h.epoch == epoch)
        else {
            return; // Of an earlier load: nobody waits for it here.
        };
        let (reply, effects) = host.shard.write_done(write, result, now);
        let waiter = host.waiting.remove(&write);
        let prepare = host.prepares.remove(&write);
        if result.is_ok() {
            if let Some((key, commit)) = prepare {
                self.decide(key, commit);
            }
        }
        match (reply, waiter) {
            (Some(Reply::InitProducerId(r)), Some(ShardWaiter::Client { id: req, grant })) => {
                if let (Ok(_), Some((txn, instance))) = (&r, grant) {
                    self.grant(txn, instance);
                }
                let result = r.map(|(p, e)| (Some(p), Some(e)));
                self.send(id, CLIENT, Msg::CoordinatorReply { id: req, result });
            }
            (Some(Reply::EndTxn(result)), Some(ShardWaiter::Client { id: req, .. })) => {
                self.send(id, CLIENT, Msg::CoordinatorReply { id: req, result });
            }
            (Some(Reply::AddPartitions(result)), Some(ShardWaiter::Leader { broker, id: req })) => {
                self.send(id, broker, Msg::AddPartitionReply { id: req, result });
            }
            _ => {}
        }
        if effects.is_empty() {
            return;
        }
        if result.is_err() {
            if let Some(host) = self.node(id).coordinator.as_mut() {
                host.retry.push((now + RETRY_BACKOFF_MS, effects));
            }
        } else {
            self.carry_out(id, effects);
        }
    }

    /// The coordinator decided transaction `key` (producer id, epoch of
    /// its data): once, and a commit only for the instance that holds the
    /// transactional id's latest grant.
    fn decide(&mut self, key: (ProducerId, ProducerEpoch), commit: bool) {
        let now = self.now;
        if let Some(d) = self.decisions.get(&key) {
            if d.commit != commit {
                let what = format!(
                    "transaction {key:?} decided {} at {} ms and {} now",
                    if d.commit { "commit" } else { "abort" },
                    d.at - crate::START_MS,
                    if commit { "commit" } else { "abort" }
                );
                self.broken.get_or_insert(what);
            }
            return;
        }
        self.decisions.insert(key, Decision { commit, at: now });
        self.note(format!(
            "coordinator: {} {key:?}",
            if commit { "commit" } else { "abort" }
        ));
        if commit {
            if let Some(&(txn, instance)) = self.owners.get(&key) {
                let holder = self.grants.get(&txn).copied();
                if holder != Some(instance) {
                    let what = format!(
                        "instance {instance} of {} committed transaction {key:?} after instance {holder:?} was granted the id",
                        TXN_IDS[txn]
                    );
                    self.broken.get_or_insert(what);
                }
            }
        }
    }

    /// Timers: effects re-asked after a failed write, timed-out
    /// transactions, and the marker writes.
    pub(crate) fn coordinator_tick(&mut self, id: i32) {
        let now = self.now;
        // A load waiting for its records to be committed.
        self.coordinator_reconcile(id);
        let Some(host) = self.node(id).coordinator.as_mut() else {
            return;
        };
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut host.retry)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        host.retry = later;
        let mut effects: Vec<Effect> = due.into_iter().flat_map(|(_, e)| e).collect();
        if now - host.last_timeout_check >= TXN_TIMEOUT_CHECK_MS {
            host.last_timeout_check = now;
            effects.extend(host.shard.abort_timed_out(now, true));
        }
        // Markers: a finished job tells the shard; the others send what is
        // not in flight (a request unanswered for long is sent again).
        let jobs = std::mem::take(&mut host.markers);
        let mut keep = Vec::new();
        let mut done = Vec::new();
        for mut job in jobs {
            job.in_flight.retain(|_, (_, at)| now - *at < RPC_RETRY_MS);
            if job.fenced {
                done.push((job.markers, MarkersOutcome::Fenced));
            } else if job.remaining.is_empty() {
                done.push((job.markers, MarkersOutcome::Written));
            } else {
                keep.push(job);
            }
        }
        for (markers, outcome) in done {
            let host = self.node(id).coordinator.as_mut().expect("checked above");
            effects.extend(host.shard.markers_done(&markers, outcome, now));
        }
        let image = self.node(id).image.clone();
        let mut sends = Vec::new();
        for job in &mut keep {
            let in_flight: BTreeSet<TopicPartition> =
                job.in_flight.values().map(|(tp, _)| tp.clone()).collect();
            let targets: Vec<TopicPartition> = job
                .remaining
                .iter()
                .filter(|tp| !in_flight.contains(*tp))
                .cloned()
                .collect();
            for tp in targets {
                match image.partition(&tp.topic, tp.partition) {
                    // A deleted partition needs no marker.
                    None => {
                        job.remaining.remove(&tp);
                    }
                    Some(p) if p.leader.is_some() => {
                        let leader = BrokerId::to_wire(p.leader);
                        self.next_id += 1;
                        let req = self.next_id;
                        job.in_flight.insert(req, (tp.clone(), now));
                        sends.push((leader, req, tp, job.markers.clone()));
                    }
                    Some(_) => {} // Leaderless for now.
                }
            }
        }
        let host = self.node(id).coordinator.as_mut().expect("checked above");
        host.markers = keep;
        for (leader, req, tp, m) in sends {
            self.send(
                id,
                leader,
                Msg::WriteMarker {
                    id: req,
                    tp,
                    producer_id: m.producer_id,
                    producer_epoch: m.producer_epoch,
                    commit: m.commit,
                    coordinator_epoch: m.coordinator_epoch,
                    transaction_version: m.transaction_version,
                },
            );
        }
        self.carry_out(id, effects);
    }
}
