//! The clients: a producer of plain records (acks=all, to the data
//! partitions in turn) and the transactional clients. Each transactional id
//! is run by one application instance at a time, transaction.version 2:
//! InitProducerId, then transactions of one batch per data partition ended
//! by EndTxn (commit or abort), the epoch bumped by each. In a run with
//! faults an instance may abandon its transaction (the coordinator's timeout
//! aborts it) or a new instance of the same id may start while the old one
//! goes on (it must be fenced). Clients find the coordinator and the
//! leaders from the controller's image (as Metadata and FindCoordinator).

use bytes::Bytes;
use rand::Rng;
use std::collections::BTreeMap;
use strand_protocol::kafka_protocol::records::Compression;
use strand_protocol::testing::encode_records_txn;
use strand_protocol::ErrorCode;
use strand_types::TopicPartition;

use crate::groups::txn_input;
use crate::msg::Msg;
use crate::state::{ClientState, ClientTxn, PlainOp, TxnClient, TxnOffsets, TxnSend};
use crate::{
    data_tps, offsets_tp, txn_tp, violation, Sim, Violation, CLIENT, CLIENT_TIMEOUT_MS,
    RPC_RETRY_MS, TXN_GROUP, TXN_IDS,
};

/// A produce error a producer retries.
fn retriable(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::NotLeaderOrFollower
            | ErrorCode::NotEnoughReplicas
            | ErrorCode::NotEnoughReplicasAfterAppend
            | ErrorCode::RequestTimedOut
            | ErrorCode::KafkaStorageError
            | ErrorCode::UnknownTopicOrPartition
    )
}

/// An error after which a real client gives up on its producer (fenced).
fn fatal(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::ProducerFenced
            | ErrorCode::InvalidProducerEpoch
            | ErrorCode::InvalidProducerIdMapping
            | ErrorCode::InvalidTxnState
            | ErrorCode::TransactionalIdAuthorizationFailed
    )
}

impl Sim {
    pub(crate) fn client_tick(&mut self) {
        let now = self.now;
        self.in_flight
            .retain(|_, (sent, _, _)| now - *sent < CLIENT_TIMEOUT_MS);
        // Writes stop once the faults heal, so the replicas can converge.
        if self.healed_at.is_none() && now >= self.next_produce && self.in_flight.len() < 8 {
            self.next_produce = now + self.rng.gen_range(5..40);
            self.next_value += 1;
            let tps = data_tps();
            let tp = tps[self.next_value as usize % tps.len()].clone();
            if let Some(leader) = self.leader_of(&tp) {
                let value = format!("value-{}", self.next_value);
                let batch = Bytes::from(encode_records_txn(
                    &[(None, Some(Bytes::from(value)), now)],
                    -1,
                    -1,
                    -1,
                    Compression::None,
                    false,
                ));
                let id = self.next_id();
                self.produced += 1;
                self.in_flight.insert(id, (now, tp.clone(), batch.clone()));
                self.send(
                    CLIENT,
                    leader,
                    Msg::Produce {
                        id,
                        tp,
                        txn: None,
                        batch,
                    },
                );
            }
        }
        for i in 0..self.clients.len() {
            self.txn_client_tick(i);
        }
        self.plain_committer_tick();
        self.offsets_checker_tick();
    }

    /// Fetches the transactional group's offsets (require_stable) now and
    /// then: what it sees must come from committed transactions, in order.
    fn offsets_checker_tick(&mut self) {
        let now = self.now;
        if let Some((_, at, _)) = self.checker {
            if now - at < RPC_RETRY_MS * 3 {
                return;
            }
        }
        if self.rng.gen_bool(0.9) {
            return;
        }
        let Some(coordinator) = self.leader_of(&offsets_tp()) else {
            return;
        };
        let txn = self.rng.gen_range(0..TXN_IDS.len());
        let id = self.next_id();
        self.checker = Some((id, now, txn));
        self.send(
            CLIENT,
            coordinator,
            Msg::OffsetFetch {
                id,
                group: TXN_GROUP.to_string(),
                key: txn_input(txn),
                require_stable: true,
            },
        );
    }

    fn coordinator(&self) -> Option<i32> {
        self.leader_of(&txn_tp())
    }

    fn txn_client_tick(&mut self, i: usize) {
        let now = self.now;
        let c = self.clients[i].clone();
        match c.state {
            ClientState::Stopped => {}
            ClientState::Init(req) => {
                if req.is_some_and(|(_, at)| now - at < RPC_RETRY_MS) {
                    return;
                }
                let Some(coordinator) = self.coordinator() else {
                    return;
                };
                let id = self.next_id();
                self.clients[i].state = ClientState::Init(Some((id, now)));
                self.send(
                    CLIENT,
                    coordinator,
                    Msg::InitProducerId {
                        id,
                        txn: c.txn,
                        instance: c.instance,
                    },
                );
            }
            ClientState::Idle { at } => {
                if self.healed_at.is_some() || now < at {
                    return;
                }
                let Some((producer_id, epoch)) = c.producer else {
                    self.clients[i].state = ClientState::Init(None);
                    return;
                };
                // Now and then a new instance of the same transactional id
                // starts beside this one, which must then be fenced.
                let live = self
                    .clients
                    .iter()
                    .filter(|o| o.txn == c.txn && !matches!(o.state, ClientState::Stopped))
                    .count();
                if self.config.faults && live == 1 && self.rng.gen_bool(0.1) {
                    let instance = self.clients.iter().filter(|o| o.txn == c.txn).count();
                    self.clients.push(TxnClient {
                        txn: c.txn,
                        instance,
                        producer: None,
                        state: ClientState::Init(None),
                    });
                    self.note(format!(
                        "client: instance {instance} of txn {} starts",
                        c.txn
                    ));
                }
                // A transaction: one batch to every data partition.
                self.owners
                    .insert((producer_id, epoch), (c.txn, c.instance));
                let mut sends = BTreeMap::new();
                for tp in data_tps() {
                    self.next_value += 1;
                    let value = format!("txn-{producer_id}-{epoch}-{}", self.next_value);
                    let batch = Bytes::from(encode_records_txn(
                        &[(None, Some(Bytes::from(value)), now)],
                        producer_id.get(),
                        epoch.get(),
                        0,
                        Compression::None,
                        true,
                    ));
                    sends.insert(
                        tp,
                        TxnSend {
                            batch,
                            requests: Vec::new(),
                            last_sent: None,
                            acked: None,
                            failed: false,
                        },
                    );
                }
                // The input it processed: a position unique to this
                // transaction, committed as the group's offset with it.
                self.next_value += 1;
                let input = self.next_value as i64;
                self.offset_values.insert(input, (producer_id, epoch));
                self.clients[i].state = ClientState::InTxn(ClientTxn {
                    producer_id,
                    epoch,
                    sends,
                    offsets: TxnOffsets {
                        value: input,
                        requests: Vec::new(),
                        last_sent: None,
                        acked: false,
                        failed: false,
                    },
                    started_at: now,
                    end: None,
                    end_request: None,
                    ended: false,
                });
                self.send_batches(i);
            }
            ClientState::InTxn(t) => {
                if t.end.is_none() {
                    if !t.settled() && now - t.started_at < CLIENT_TIMEOUT_MS {
                        self.send_batches(i);
                        return;
                    }
                    // During the faults a client may die mid-transaction:
                    // the coordinator's timeout aborts what it left open.
                    if self.config.faults && self.healed_at.is_none() && self.rng.gen_bool(0.05) {
                        self.note(format!(
                            "client: instance {} of txn {} abandons {:?}",
                            c.instance,
                            c.txn,
                            (t.producer_id, t.epoch)
                        ));
                        self.client_txns.push(t);
                        self.clients[i].state = ClientState::Stopped;
                        return;
                    }
                    let commit = t.all_acknowledged() && self.rng.gen_bool(0.7);
                    if let ClientState::InTxn(t) = &mut self.clients[i].state {
                        t.end = Some(commit);
                    }
                }
                let ClientState::InTxn(t) = &self.clients[i].state else {
                    return;
                };
                if t.end_request.is_some_and(|(_, at)| now - at < RPC_RETRY_MS) {
                    return;
                }
                let (producer_id, producer_epoch, commit) =
                    (t.producer_id, t.epoch, t.end == Some(true));
                let Some(coordinator) = self.coordinator() else {
                    return;
                };
                let id = self.next_id();
                if let ClientState::InTxn(t) = &mut self.clients[i].state {
                    t.end_request = Some((id, now));
                }
                self.send(
                    CLIENT,
                    coordinator,
                    Msg::EndTxn {
                        id,
                        txn: c.txn,
                        producer_id,
                        producer_epoch,
                        commit,
                    },
                );
            }
        }
    }

    /// Sends (again) each batch of client `i`'s transaction that is not
    /// acknowledged, refused, or in flight (a request unanswered for long,
    /// or answered with a retriable error, is sent again), and the
    /// transaction's offsets.
    fn send_batches(&mut self, i: usize) {
        let now = self.now;
        let ClientState::InTxn(t) = &self.clients[i].state else {
            return;
        };
        let o = &t.offsets;
        let offsets_due =
            !o.acked && !o.failed && o.last_sent.is_none_or(|at| now - at >= RPC_RETRY_MS);
        let (pid, epoch, value) = (t.producer_id, t.epoch, o.value);
        if let (true, Some(coordinator)) = (offsets_due, self.leader_of(&offsets_tp())) {
            let id = self.next_id();
            let txn = self.clients[i].txn;
            if let ClientState::InTxn(t) = &mut self.clients[i].state {
                t.offsets.requests.push(id);
                t.offsets.last_sent = Some(now);
            }
            self.send(
                CLIENT,
                coordinator,
                Msg::TxnOffsetCommit {
                    id,
                    txn,
                    producer_id: pid,
                    producer_epoch: epoch,
                    value,
                },
            );
        }
        let ClientState::InTxn(t) = &self.clients[i].state else {
            return;
        };
        let due: Vec<(TopicPartition, Bytes)> = t
            .sends
            .iter()
            .filter(|(_, s)| {
                s.acked.is_none()
                    && !s.failed
                    && s.last_sent.is_none_or(|at| now - at >= RPC_RETRY_MS)
            })
            .map(|(tp, s)| (tp.clone(), s.batch.clone()))
            .collect();
        let txn = self.clients[i].txn;
        for (tp, batch) in due {
            let Some(leader) = self.leader_of(&tp) else {
                continue;
            };
            let id = self.next_id();
            if let ClientState::InTxn(t) = &mut self.clients[i].state {
                if let Some(s) = t.sends.get_mut(&tp) {
                    s.requests.push(id);
                    s.last_sent = Some(now);
                }
            }
            self.send(
                CLIENT,
                leader,
                Msg::Produce {
                    id,
                    tp,
                    txn: Some(txn),
                    batch,
                },
            );
        }
    }

    /// An OffsetReply: the plain committer's, the checker's, or a
    /// transaction's TxnOffsetCommit.
    fn offset_reply(
        &mut self,
        id: u64,
        result: Result<Option<i64>, ErrorCode>,
    ) -> Result<(), Violation> {
        if let Some((req, _, op)) = self.plain.in_flight {
            if req == id {
                self.plain.in_flight = None;
                match (op, result) {
                    (PlainOp::Commit(v), Ok(_)) => self.plain.acked = self.plain.acked.max(v),
                    (PlainOp::Fetch(floor), Ok(got)) => {
                        self.plain.fetches += 1;
                        let got = got.unwrap_or(0);
                        if !self.plain.may_read(got, floor) {
                            return violation(
                                self,
                                format!(
                                    "OffsetFetch of the plain group returned {got}: its commit of {floor} was acknowledged before the fetch, {} was the last sent, {:?} were given up on",
                                    self.plain.sent, self.plain.unknown
                                ),
                            );
                        }
                    }
                    // Refused (not the coordinator, loading, timed out): the
                    // next tick sends another.
                    (_, Err(_)) => {}
                }
                return Ok(());
            }
        }
        if let Some((req, _, txn)) = self.checker {
            if req == id {
                self.checker = None;
                if let Ok(Some(v)) = result {
                    let owner = self.offset_values.get(&v).copied();
                    let committed = owner
                        .and_then(|k| self.decisions.get(&k))
                        .is_some_and(|d| d.commit);
                    if !committed {
                        return violation(
                            self,
                            format!(
                                "the transactional group's offset for input {txn} is {v}, from transaction {owner:?}, which the coordinator decided {:?}",
                                owner.and_then(|k| self.decisions.get(&k)).map(|d| d.commit)
                            ),
                        );
                    }
                    let high = self.fetched_high.entry(txn as i32).or_insert(v);
                    if v < *high {
                        let before = *high;
                        return violation(
                            self,
                            format!("the transactional group's offset for input {txn} went back from {before} to {v}"),
                        );
                    }
                    *high = v;
                }
                return Ok(());
            }
        }
        let mut refused = None;
        for c in &mut self.clients {
            let ClientState::InTxn(t) = &mut c.state else {
                continue;
            };
            if !t.offsets.requests.contains(&id) {
                continue;
            }
            match result {
                Ok(_) => t.offsets.acked = true,
                Err(
                    ErrorCode::NotCoordinator
                    | ErrorCode::CoordinatorLoadInProgress
                    | ErrorCode::CoordinatorNotAvailable
                    | ErrorCode::RequestTimedOut
                    | ErrorCode::NotEnoughReplicas,
                ) => {
                    if t.offsets.requests.last() == Some(&id) {
                        t.offsets.last_sent = None;
                    }
                }
                Err(e) => {
                    t.offsets.failed = true;
                    refused = Some((c.txn, c.instance, e));
                }
            }
        }
        if let Some((txn, instance, e)) = refused {
            self.note(format!(
                "client: instance {instance} of txn {txn}: TxnOffsetCommit refused {e:?}"
            ));
        }
        Ok(())
    }

    pub(crate) fn client_receive(&mut self, msg: Msg) -> Result<(), Violation> {
        let now = self.now;
        match msg {
            Msg::Reply { id, result } => {
                if let Some((_, tp, batch)) = self.in_flight.remove(&id) {
                    if let Ok(offset) = result {
                        self.acked.insert((tp, offset.get()), batch);
                    }
                    return Ok(());
                }
                let mut refused = None;
                for c in &mut self.clients {
                    let ClientState::InTxn(t) = &mut c.state else {
                        continue;
                    };
                    let Some(send) = t.sends.values_mut().find(|s| s.requests.contains(&id)) else {
                        continue;
                    };
                    match result {
                        Ok(offset) => send.acked = Some(offset),
                        // Retriable: sent again (same sequence: a
                        // duplicate is answered with the first offset).
                        Err(e) if retriable(e) => {
                            if send.requests.last() == Some(&id) {
                                send.last_sent = None;
                            }
                        }
                        Err(e) => {
                            send.failed = true;
                            refused = Some((c.txn, c.instance, e));
                        }
                    }
                }
                if let Some((txn, instance, e)) = refused {
                    self.note(format!(
                        "client: instance {instance} of txn {txn}: produce refused {e:?}"
                    ));
                }
            }
            Msg::OffsetReply { id, result } => return self.offset_reply(id, result),
            Msg::CoordinatorReply { id, result } => {
                let Some(i) = self.clients.iter().position(|c| match &c.state {
                    ClientState::Init(Some((r, _))) => *r == id,
                    ClientState::InTxn(t) => t.end_request.is_some_and(|(r, _)| r == id),
                    _ => false,
                }) else {
                    return Ok(());
                };
                let c = self.clients[i].clone();
                let next_at = now + self.rng.gen_range(20..150);
                match (c.state, result) {
                    (ClientState::Init(_), Ok((Some(pid), Some(epoch)))) => {
                        self.clients[i].producer = Some((pid, epoch));
                        self.clients[i].state = ClientState::Idle { at: next_at };
                    }
                    (ClientState::InTxn(mut t), Ok((Some(pid), Some(epoch)))) => {
                        t.ended = true;
                        self.client_txns.push(t);
                        self.clients[i].producer = Some((pid, epoch));
                        self.clients[i].state = ClientState::Idle { at: next_at };
                    }
                    (state, Err(code)) if fatal(code) => {
                        self.note(format!(
                            "client: instance {} of txn {} fenced ({code:?})",
                            c.instance, c.txn
                        ));
                        self.fenced += 1;
                        if let ClientState::InTxn(t) = state {
                            self.client_txns.push(t);
                        }
                        self.clients[i].state = ClientState::Stopped;
                    }
                    // Retriable (not the coordinator, loading, concurrent,
                    // timed out): asked again.
                    (ClientState::Init(_), _) => self.clients[i].state = ClientState::Init(None),
                    (ClientState::InTxn(_), _) => {
                        if let ClientState::InTxn(t) = &mut self.clients[i].state {
                            t.end_request = None;
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
        Ok(())
    }
}
