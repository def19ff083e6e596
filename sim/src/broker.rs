//! The brokers: registration and heartbeats, the replica manager's plan
//! carried out on every image, replication (the follower's fetch and the
//! leader's answer), acks=all appends waiting for the HW, and the produce
//! path with KIP-890's add-partition step for transactional batches.

use bytes::Bytes;
use std::path::Path;
use std::sync::Arc;
use strand_broker::replica_plan::{local_changes, Role};
use strand_log::{LogConfig, LogError};
use strand_metadata::controller_api::AlterPartitionRequest;
use strand_metadata::records::ConfigMap;
use strand_partition::{
    AppendOutcome, FollowerFetchState, PartitionError, PartitionIo, PartitionSettings,
};
use strand_protocol::batch::BatchHeader;
use strand_protocol::ErrorCode;
use strand_replication::ack::ReplicationDecision;
use strand_replication::leader::{AlterPartitionResult, IsrProposal, LeaderConfig};
use strand_replication::rules::{self, Acks, FetchOrigin, FetchedPartition};
use strand_types::{BrokerId, Clock, Offset, ProducerEpoch, ProducerId, TopicPartition};
use uuid::Uuid;

use crate::msg::{FetchRequest, Msg};
use crate::state::{ParkedProduce, PendingAck, Replica, Waiter};
use crate::{
    offsets_tp, txn_tp, violation, Sim, Violation, ACK_TIMEOUT_MS, CLIENT, CONTROLLER,
    FETCH_MAX_BYTES, FETCH_TIMEOUT_MS, HEARTBEAT_MS, LAG_TIME_MAX_MS, LOG_DIR, RPC_RETRY_MS,
    TXN_IDS,
};

/// A partition's settings from its topic's configs (min.insync.replicas;
/// small segments, so rolls, several segments and recovery across them).
fn settings(configs: &ConfigMap) -> PartitionSettings {
    PartitionSettings {
        log: LogConfig {
            segment_bytes: 2_048,
            index_interval_bytes: 256,
            ..LogConfig::default()
        },
        max_message_bytes: 1 << 20,
        log_append_time: false,
        min_insync_replicas: configs
            .get("min.insync.replicas")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1),
        compacted: false,
        cleaner: Default::default(),
        timestamp_before_max_ms: i64::MAX,
        timestamp_after_max_ms: i64::MAX,
        acks: strand_replication::ack::AckSettings {
            durable: configs
                .get("strand.acks.durable")
                .is_some_and(|v| v == "true"),
            ..Default::default()
        },
        compression: None,
    }
}

impl Sim {
    /// Carries out the replica manager's plan for broker `id`'s image:
    /// opens what is assigned here, then leads or follows each partition
    /// as its registration says; then the transaction coordinator follows
    /// the leadership of `__transaction_state`.
    pub(crate) fn reconcile(&mut self, id: i32) {
        let clock: Arc<dyn Clock> = Arc::new(self.clock.clone());
        let image = self.node(id).image.clone();
        let me = BrokerId::new(id);
        let n = self.node(id);
        let hosted = n
            .replicas
            .iter()
            .map(|(tp, r)| (tp.clone(), r.partition.topic_id))
            .collect();
        let changes = local_changes(&image, me, &hosted, &n.failed, &settings);
        for (tp, _) in &changes.deletes {
            if let Some(r) = self.node(id).replicas.remove(tp) {
                r.partition.mark_deleted();
            }
        }
        for tp in &changes.forget_failed {
            self.node(id).failed.remove(tp);
        }
        for tp in &changes.opens {
            let a = &changes.assigned[tp];
            let n = self.node(id);
            let io = PartitionIo {
                storage: n.storage.shared(),
                clock: clock.clone(),
                lease: Arc::new(strand_partition::lease::WriteLease::unenforced()),
            };
            let dir = format!("{LOG_DIR}/{}-{}", tp.topic, tp.partition);
            let opened = strand_partition::Partition::open_in(
                io,
                Path::new(&dir),
                &tp.topic,
                a.topic_id,
                tp.partition,
                a.replica.clone(),
                a.settings.clone(),
            );
            match opened {
                Ok(p) => {
                    let partition = Arc::new(p.report_failures_to(&n.failures));
                    n.replicas.insert(
                        tp.clone(),
                        Replica {
                            partition,
                            following: None,
                            fetch: None,
                            alters: Vec::new(),
                            leading_high: None,
                        },
                    );
                }
                Err(e) => {
                    // Opening fails only on a failing disk: the broker stops.
                    let line = format!("broker {id} cannot open {tp}: {e}");
                    self.note(line);
                    self.crash(id, false);
                    return;
                }
            }
        }
        let n = self.node(id);
        for (tp, a) in &changes.assigned {
            let Some(r) = n.replicas.get_mut(tp) else {
                continue;
            };
            r.partition.update_settings(a.settings.clone());
            let config = LeaderConfig {
                min_insync_replicas: a.settings.min_insync_replicas,
                replica_lag_time_max_ms: LAG_TIME_MAX_MS,
                acks: a.settings.acks,
            };
            let eligible = |b: BrokerId| image.is_active(b);
            let follows = r
                .partition
                .apply_registration(a.replica.clone(), config, &eligible, me);
            let leader = match (follows, a.role(me)) {
                (true, Role::Follower(l)) => Some(l.get()),
                _ => None,
            };
            if r.following != leader {
                r.following = leader;
                r.fetch = None;
            }
        }
        self.coordinator_reconcile(id);
        self.groups_reconcile(id);
    }

    pub(crate) fn broker_tick(&mut self, id: i32) -> Result<(), Violation> {
        let now = self.now;
        if !self.node(id).alive || self.node(id).paused_until > now {
            return Ok(());
        }
        let Some(registered_epoch) = self.node(id).broker_epoch else {
            if now - self.node(id).last_register >= 300 {
                let register_id = self.next_id();
                self.node(id).last_register = now;
                self.node(id).register_id = register_id;
                let incarnation = Uuid::from_u128(self.node(id).incarnation);
                self.send(
                    id,
                    CONTROLLER,
                    Msg::Register {
                        id: register_id,
                        incarnation,
                    },
                );
            }
            return Ok(());
        };
        if now - self.node(id).last_heartbeat >= HEARTBEAT_MS {
            self.node(id).last_heartbeat = now;
            let applied = self.node(id).image.applied;
            self.send(
                id,
                CONTROLLER,
                Msg::Heartbeat {
                    broker_epoch: registered_epoch,
                    applied,
                },
            );
        }
        let tps: Vec<TopicPartition> = self.node(id).replicas.keys().cloned().collect();
        for tp in tps {
            self.replica_tick(id, &tp);
        }
        self.ack_tick(id)?;
        // A produce whose add-partition step got no answer: the broker
        // answers coordinator trouble NOT_ENOUGH_REPLICAS (retriable).
        let (late, parked): (Vec<_>, Vec<_>) = std::mem::take(&mut self.node(id).parked)
            .into_iter()
            .partition(|p| now >= p.deadline);
        self.node(id).parked = parked;
        for p in late {
            self.resolve(
                id,
                Waiter::Client(p.client_id),
                Err(ErrorCode::NotEnoughReplicas),
            );
        }
        self.coordinator_tick(id);
        self.groups_tick(id);
        self.check_disk(id);
        Ok(())
    }

    /// One partition's follower fetch, ISR shrink, and AlterPartition
    /// timeouts.
    fn replica_tick(&mut self, id: i32, tp: &TopicPartition) {
        let now = self.now;
        let Some(r) = self.node(id).replicas.get(tp) else {
            return;
        };
        let (p, following, fetch) = (r.partition.clone(), r.following, r.fetch);
        // Follower: fetch when no fetch is outstanding. A fetch unanswered
        // for long is abandoned (the fetcher drops its connection).
        if let Some(leader) = following {
            if fetch.is_none_or(|(_, at)| now - at >= FETCH_TIMEOUT_MS) {
                if let Some(FollowerFetchState {
                    fetch_offset,
                    last_fetched_epoch,
                    leader_epoch,
                    durable_offset,
                    ..
                }) = p.follower_fetch_state()
                {
                    let fetch_id = self.next_id();
                    // Replicas exist only once registered (`Node::started`).
                    let Some(broker_epoch) = self.node(id).broker_epoch else {
                        return;
                    };
                    if let Some(r) = self.node(id).replicas.get_mut(tp) {
                        r.fetch = Some((fetch_id, now));
                    }
                    self.send(
                        id,
                        leader,
                        Msg::Fetch(
                            tp.clone(),
                            FetchRequest {
                                id: fetch_id,
                                broker_epoch,
                                leader_epoch,
                                fetch_offset,
                                last_fetched_epoch,
                                durable_offset,
                            },
                        ),
                    );
                }
            }
        }
        let image = self.node(id).image.clone();
        if let Some(proposal) = p.maybe_shrink_isr(&|b| image.is_active(b)) {
            self.send_alter(id, tp, proposal);
        }
        // An AlterPartition whose answer never came fails as the RPC would
        // (the broker's controller channel times out) and is retried.
        let Some(r) = self.node(id).replicas.get_mut(tp) else {
            return;
        };
        let (lost, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut r.alters)
            .into_iter()
            .partition(|(_, at)| now - at >= 1_000);
        r.alters = waiting;
        for (proposal, _) in lost {
            let result = AlterPartitionResult::Err(ErrorCode::RequestTimedOut);
            if let Some(again) = p.on_alter_partition_result(&proposal, result) {
                self.send_alter(id, tp, again);
            }
        }
    }

    /// The acks=all appends waiting for the HW: answered per the ack
    /// decision, or REQUEST_TIMED_OUT at their deadline.
    fn ack_tick(&mut self, id: i32) -> Result<(), Violation> {
        let now = self.now;
        let pending = std::mem::take(&mut self.node(id).pending);
        let mut keep = Vec::new();
        let mut done = Vec::new();
        for a in pending {
            let Some(p) = self
                .node(id)
                .replicas
                .get(&a.tp)
                .map(|r| r.partition.clone())
            else {
                done.push((a.waiter, Err(ErrorCode::NotLeaderOrFollower)));
                continue;
            };
            // Durable acknowledgements: the leader fsyncs what it waits on
            // (the broker does it in `disk::acknowledged`).
            if p.ack_needs_flush(a.required_offset) {
                if let Err(e) = p.flush_to(a.required_offset) {
                    done.push((a.waiter, Err(e.code)));
                    continue;
                }
            }
            match p.ack_decision(a.leader_epoch, a.required_offset) {
                ReplicationDecision::Ack { .. } => done.push((a.waiter, Ok(a.base_offset))),
                ReplicationDecision::Reject(e) => done.push((a.waiter, Err(e))),
                ReplicationDecision::Wait if now >= a.deadline => {
                    done.push((a.waiter, Err(ErrorCode::RequestTimedOut)))
                }
                ReplicationDecision::Wait => keep.push(a),
            }
        }
        self.node(id).pending = keep;
        for (waiter, result) in done {
            self.resolve(id, waiter, result);
        }
        Ok(())
    }

    /// Answers whoever waits for an append (or for its refusal).
    pub(crate) fn resolve(&mut self, id: i32, waiter: Waiter, result: Result<Offset, ErrorCode>) {
        match waiter {
            Waiter::Client(req) => self.send(id, CLIENT, Msg::Reply { id: req, result }),
            Waiter::Marker {
                from,
                id: req,
                offsets,
            } => {
                let mut result = result.map(|_| ());
                if let (Ok(()), Some((producer, commit))) = (result, offsets) {
                    if !self.groups_on_marker(id, producer, commit) {
                        // The groups are loading: the marker comes again.
                        result = Err(ErrorCode::NotEnoughReplicas);
                    }
                }
                self.send(id, from, Msg::MarkerReply { id: req, result });
            }
            Waiter::Group { epoch, write } => {
                self.group_write_done(id, epoch, write, result.map(|_| ()))
            }
            Waiter::Shard { epoch, write } => {
                self.shard_write_done(id, epoch, write, result.map(|_| ()))
            }
        }
    }

    pub(crate) fn send_alter(&mut self, id: i32, tp: &TopicPartition, proposal: IsrProposal) {
        let Some(topic_id) = self.node(id).replicas.get(tp).map(|r| r.partition.topic_id) else {
            return;
        };
        let req = self
            .node(id)
            .broker_epoch
            .map(|broker_epoch| AlterPartitionRequest {
                broker_id: BrokerId::new(id),
                broker_epoch,
                topic_id,
                partition: tp.partition,
                leader_epoch: proposal.leader_epoch,
                partition_epoch: proposal.partition_epoch,
                new_isr: proposal.new_isr.clone(),
                broker_epochs: proposal.broker_epochs.clone(),
            });
        let now = self.now;
        if let Some(r) = self.node(id).replicas.get_mut(tp) {
            r.alters.push((proposal.clone(), now));
        }
        self.send(
            id,
            CONTROLLER,
            Msg::AlterPartition(tp.clone(), req, proposal),
        );
    }

    /// A broker whose log directory failed stops, as the binary does.
    pub(crate) fn check_disk(&mut self, id: i32) {
        if self.node(id).alive && self.node(id).failures.is_offline() {
            self.note(format!("broker {id}: log directory failed"));
            self.crash(id, false);
        }
    }

    pub(crate) fn broker_receive(&mut self, id: i32, from: i32, msg: Msg) -> Result<(), Violation> {
        match msg {
            Msg::RegisterReply {
                id: register_id,
                broker_epoch,
            } if self.node(id).broker_epoch.is_none()
                && self.node(id).register_id == register_id =>
            {
                self.node(id).broker_epoch = Some(broker_epoch);
                self.note(format!("broker {id} registered at epoch {broker_epoch}"));
            }
            Msg::Image(image) if image.applied > self.node(id).image.applied => {
                let n = self.node(id);
                n.image = image;
                // Start-up waits until this incarnation's registration is
                // in the image and unfenced.
                if !n.started {
                    let epoch = n.broker_epoch;
                    n.started = n
                        .image
                        .brokers
                        .get(&BrokerId::new(id))
                        .is_some_and(|b| Some(b.broker_epoch) == epoch && !b.fenced);
                }
                if self.node(id).started {
                    self.reconcile(id);
                }
            }
            Msg::AlterPartitionReply(tp, proposal, result) => {
                let Some(r) = self.node(id).replicas.get_mut(&tp) else {
                    return Ok(());
                };
                let Some(i) = r.alters.iter().position(|(p, _)| *p == proposal) else {
                    // Already given up on (and retried).
                    return Ok(());
                };
                r.alters.remove(i);
                let p = r.partition.clone();
                if let Some(again) = p.on_alter_partition_result(&proposal, result) {
                    self.send_alter(id, &tp, again);
                }
            }
            Msg::Fetch(tp, req) => self.serve_fetch(id, from, tp, req),
            Msg::FetchReply {
                tp,
                id: fetch_id,
                leader_epoch,
                fetch_offset,
                fetched,
                records,
            } => {
                let Some(r) = self.node(id).replicas.get_mut(&tp) else {
                    return Ok(());
                };
                if r.following != Some(from) || r.fetch.map(|(f, _)| f) != Some(fetch_id) {
                    return Ok(());
                }
                r.fetch = None;
                let p = r.partition.clone();
                if let Err(e) = p.apply_fetched(leader_epoch, fetch_offset, &fetched, &records) {
                    self.note(format!("broker {id}: follower write to {tp} failed: {e}"));
                }
            }
            Msg::Produce {
                id: req,
                tp,
                txn,
                batch,
            } => self.produce(id, req, tp, txn, batch)?,
            Msg::AddPartitionReply { id: add_id, result } => {
                if self.groups_added(id, add_id, result) {
                    return Ok(());
                }
                let Some(i) = self.node(id).parked.iter().position(|p| p.add_id == add_id) else {
                    return Ok(());
                };
                let parked = self.node(id).parked.remove(i);
                match result {
                    Ok(()) => self.append_produce(
                        id,
                        parked.client_id,
                        &parked.tp,
                        &parked.batch,
                        Some(parked.guard),
                    )?,
                    // As `TxnCoordinator::verify_in_transaction` answers:
                    // a fenced epoch is INVALID_PRODUCER_EPOCH, coordinator
                    // trouble (concurrent, loading, moved) the retriable
                    // NOT_ENOUGH_REPLICAS.
                    Err(code) => {
                        let code = match code {
                            ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch => {
                                ErrorCode::InvalidProducerEpoch
                            }
                            ErrorCode::InvalidTxnState | ErrorCode::InvalidProducerIdMapping => {
                                code
                            }
                            _ => ErrorCode::NotEnoughReplicas,
                        };
                        self.resolve(id, Waiter::Client(parked.client_id), Err(code));
                    }
                }
            }
            Msg::WriteMarker {
                id: req,
                tp,
                producer_id,
                producer_epoch,
                commit,
                coordinator_epoch,
                transaction_version,
            } => {
                let appended = match self.leader_partition(id, &tp) {
                    Some(p) => p
                        .write_txn_marker(
                            producer_id,
                            producer_epoch,
                            coordinator_epoch,
                            commit,
                            transaction_version,
                        )
                        .map_err(|e| e.code),
                    None => Err(ErrorCode::NotLeaderOrFollower),
                };
                let offsets = producer_id
                    .filter(|_| tp == offsets_tp())
                    .map(|p| (p, commit));
                let waiter = Waiter::Marker {
                    from,
                    id: req,
                    offsets,
                };
                self.appended(id, &tp, waiter, appended)?;
            }
            other @ (Msg::InitProducerId { .. }
            | Msg::EndTxn { .. }
            | Msg::AddPartition { .. }
            | Msg::MarkerReply { .. }) => self.coordinator_receive(id, from, other),
            other @ (Msg::OffsetCommit { .. }
            | Msg::TxnOffsetCommit { .. }
            | Msg::OffsetFetch { .. }) => self.groups_receive(id, from, other),
            _ => {}
        }
        self.check_disk(id);
        Ok(())
    }

    /// The partition if this broker leads it.
    pub(crate) fn leader_partition(
        &mut self,
        id: i32,
        tp: &TopicPartition,
    ) -> Option<Arc<strand_partition::Partition>> {
        self.node(id)
            .replicas
            .get(tp)
            .map(|r| r.partition.clone())
            .filter(|p| p.is_leader())
    }

    /// A client's produce: a transactional batch that would open a
    /// transaction on the partition first has the coordinator add the
    /// partition (KIP-890 part 2), as `handlers::produce` does.
    fn produce(
        &mut self,
        id: i32,
        req: u64,
        tp: TopicPartition,
        txn: Option<usize>,
        batch: Bytes,
    ) -> Result<(), Violation> {
        let Some(p) = self.leader_partition(id, &tp) else {
            self.resolve(id, Waiter::Client(req), Err(ErrorCode::NotLeaderOrFollower));
            return Ok(());
        };
        let header = BatchHeader::parse(&batch)
            .ok()
            .filter(|h| h.is_transactional());
        // The verification guard is taken first, as `handlers::produce`
        // does (the sim's clients are transaction.version 2: each EndTxn
        // bumps the epoch).
        let verification = match (header, txn) {
            (Some(h), Some(_)) => ProducerId::from_wire(h.producer_id).map(|pid| {
                p.start_verification(pid, ProducerEpoch::from_wire(h.producer_epoch), true)
            }),
            _ => None,
        };
        let guard = match verification {
            None => return self.append_produce(id, req, &tp, &batch, None),
            Some((guard, true)) => return self.append_produce(id, req, &tp, &batch, Some(guard)),
            Some((guard, false)) => guard,
        };
        let (Some(h), Some(txn)) = (header, txn) else {
            return Ok(());
        };
        let coordinator = self
            .node(id)
            .image
            .partition(&txn_tp().topic, 0)
            .and_then(|p| p.leader)
            .map(BrokerId::get);
        let (Some(coordinator), Some(producer_id), Some(producer_epoch)) = (
            coordinator,
            ProducerId::from_wire(h.producer_id),
            ProducerEpoch::from_wire(h.producer_epoch),
        ) else {
            self.resolve(id, Waiter::Client(req), Err(ErrorCode::NotEnoughReplicas));
            return Ok(());
        };
        let add_id = self.next_id();
        let deadline = self.now + RPC_RETRY_MS * 3;
        self.node(id).parked.push(ParkedProduce {
            client_id: req,
            tp: tp.clone(),
            batch,
            guard,
            add_id,
            deadline,
        });
        debug_assert!(txn < TXN_IDS.len());
        self.send(
            id,
            coordinator,
            Msg::AddPartition {
                id: add_id,
                txn,
                producer_id,
                producer_epoch,
                tp,
            },
        );
        Ok(())
    }

    fn append_produce(
        &mut self,
        id: i32,
        req: u64,
        tp: &TopicPartition,
        batch: &Bytes,
        guard: Option<strand_txn::VerificationGuard>,
    ) -> Result<(), Violation> {
        let appended = match (self.leader_partition(id, tp), guard) {
            (Some(p), Some(guard)) => p.append_verified(batch, Acks::All, 9, guard),
            (Some(p), None) => p.append(batch, Acks::All, 9),
            (None, _) => Err(PartitionError::new(
                ErrorCode::NotLeaderOrFollower,
                "not the leader",
            )),
        }
        .map_err(|e| e.code);
        self.appended(id, tp, Waiter::Client(req), appended)
    }

    /// An append's outcome: it waits for the HW, or its refusal is
    /// answered at once. Checks that one broker appends per leader epoch.
    pub(crate) fn appended(
        &mut self,
        id: i32,
        tp: &TopicPartition,
        waiter: Waiter,
        appended: Result<AppendOutcome, ErrorCode>,
    ) -> Result<(), Violation> {
        match appended {
            Ok(o) => {
                let key = (tp.clone(), o.leader_epoch);
                if let Some(&other) = self.appenders.get(&key) {
                    if other != id {
                        return violation(
                            self,
                            format!(
                                "brokers {other} and {id} both appended to {tp} in leader epoch {}",
                                o.leader_epoch
                            ),
                        );
                    }
                }
                self.appenders.insert(key, id);
                let deadline = self.now + ACK_TIMEOUT_MS;
                self.node(id).pending.push(PendingAck {
                    tp: tp.clone(),
                    waiter,
                    leader_epoch: o.leader_epoch,
                    base_offset: o.base_offset,
                    required_offset: o.required_offset,
                    deadline,
                });
            }
            Err(code) => self.resolve(id, waiter, Err(code)),
        }
        Ok(())
    }

    fn serve_fetch(&mut self, id: i32, from: i32, tp: TopicPartition, req: FetchRequest) {
        let FetchRequest {
            id: fetch_id,
            broker_epoch,
            leader_epoch,
            fetch_offset,
            last_fetched_epoch,
            durable_offset,
        } = req;
        let image = self.node(id).image.clone();
        let registered = image
            .brokers
            .get(&BrokerId::new(from))
            .map(|b| b.broker_epoch);
        let mut fetched = FetchedPartition {
            error: None,
            diverging_epoch: None,
            high_watermark: None,
            log_start_offset: None,
        };
        let mut records = Bytes::new();
        let origin = rules::fetch_origin(
            15,
            BrokerId::from_wire(from),
            Some(broker_epoch),
            registered,
        );
        let partition = self.node(id).replicas.get(&tp).map(|r| r.partition.clone());
        match (origin, partition) {
            (Err(code), _) => fetched.error = Some(code),
            (Ok(FetchOrigin::Consumer), _) | (_, None) => {
                fetched.error = Some(ErrorCode::NotLeaderOrFollower)
            }
            (Ok(FetchOrigin::Follower(follower)), Some(p)) => {
                let checked = if p.is_leader() {
                    p.check_leader_epoch(Some(leader_epoch))
                } else {
                    Err(ErrorCode::NotLeaderOrFollower)
                };
                let recorded = checked.and_then(|()| {
                    p.record_follower_fetch(
                        follower,
                        broker_epoch,
                        fetch_offset,
                        last_fetched_epoch,
                        Some(durable_offset),
                    )
                });
                match recorded {
                    Err(code) => fetched.error = Some(code),
                    Ok(proposal) => {
                        if let Some(proposal) = proposal {
                            self.send_alter(id, &tp, proposal);
                        }
                        let offsets = p.offsets();
                        fetched.high_watermark = Some(offsets.high_watermark);
                        fetched.log_start_offset = Some(offsets.log_start_offset);
                        if let Some(d) = p.diverging_epoch(last_fetched_epoch, fetch_offset) {
                            fetched.diverging_epoch = Some(d);
                        } else {
                            match p.read(
                                fetch_offset,
                                FETCH_MAX_BYTES,
                                offsets.log_end_offset,
                                true,
                            ) {
                                Ok(r) => records = r.records,
                                Err(LogError::OffsetOutOfRange { .. }) => {
                                    fetched.error = Some(ErrorCode::OffsetOutOfRange)
                                }
                                Err(_) => fetched.error = Some(ErrorCode::KafkaStorageError),
                            }
                        }
                    }
                }
            }
        }
        self.send(
            id,
            from,
            Msg::FetchReply {
                tp,
                id: fetch_id,
                leader_epoch,
                fetch_offset,
                fetched,
                records,
            },
        );
    }
}
