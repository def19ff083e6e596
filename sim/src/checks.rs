//! The invariants: after every event, and once the cluster has converged.

use std::collections::BTreeMap;
use strand_partition::Partition;
use strand_protocol::batch::{control_record_type, BatchIter, ControlType};
use strand_txn::coordinator::TxnState;
use strand_types::{LeaderEpoch, Offset, ProducerEpoch, ProducerId, TopicPartition};

use crate::groups::{plain_input, txn_input};
use crate::state::ClientState;
use crate::state::ClientTxn;
use crate::{
    all_tps, offsets_tp, txn_tp, violation, Report, Sim, Violation, PLAIN_GROUP, TXN_GROUP, TXN_IDS,
};

/// Every batch of `p` from its log start up to `upper`: (base offset,
/// bytes).
fn read_batches(p: &Partition, upper: Offset) -> Vec<(i64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut offset = p.offsets().log_start_offset;
    while offset < upper {
        let Ok(r) = p.read(offset, 1 << 20, upper, true) else {
            break;
        };
        if r.records.is_empty() {
            break;
        }
        for (pos, h) in BatchIter::new(&r.records) {
            if h.base_offset >= offset.get() {
                out.push((h.base_offset, r.records[pos..pos + h.total_size()].to_vec()));
            }
            offset = offset.max(Offset::new(h.next_offset()));
        }
    }
    out
}

impl Sim {
    /// Checked after every event.
    pub(crate) fn check(&mut self) -> Result<(), Violation> {
        if let Some(what) = self.broken.take() {
            return violation(self, what);
        }
        for i in 0..self.nodes.len() {
            let (alive, incarnation, id) = {
                let n = &self.nodes[i];
                (n.alive, n.incarnation, n.id)
            };
            if !alive {
                continue;
            }
            let tps: Vec<TopicPartition> = self.nodes[i].replicas.keys().cloned().collect();
            for tp in tps {
                let p = self.nodes[i].replicas[&tp].partition.clone();
                let Some(isr) = p.maximal_isr() else {
                    if let Some(r) = self.nodes[i].replicas.get_mut(&tp) {
                        r.leading_high = None;
                    }
                    continue;
                };
                let o = p.offsets();
                // HW never passes what an ISR member holds.
                for r in isr {
                    let Some(rp) = self
                        .nodes
                        .get((r.get() - 1) as usize)
                        .filter(|n| n.alive)
                        .and_then(|n| n.replicas.get(&tp))
                        .map(|r| r.partition.clone())
                    else {
                        continue;
                    };
                    let leo = rp.offsets().log_end_offset;
                    if leo < o.high_watermark {
                        return violation(
                            self,
                            format!(
                                "{tp}: leader {id} (epoch {}) has HW {} but ISR member {r} has LEO {leo}",
                                LeaderEpoch::to_wire(o.leading_epoch),
                                o.high_watermark
                            ),
                        );
                    }
                }
                // HW and LSO never move backwards within one leadership.
                let epoch = p.leader_epoch();
                let high = self.nodes[i].replicas[&tp].leading_high;
                match high {
                    Some((inc, e, hw, lso))
                        if inc == incarnation
                            && e == epoch
                            && (o.high_watermark < hw || o.last_stable_offset < lso) =>
                    {
                        return violation(
                            self,
                            format!(
                                "{tp}: leader {id} epoch {epoch}: HW {hw} -> {} / LSO {lso} -> {}",
                                o.high_watermark, o.last_stable_offset
                            ),
                        );
                    }
                    _ => {}
                }
                if let Some(r) = self.nodes[i].replicas.get_mut(&tp) {
                    r.leading_high =
                        Some((incarnation, epoch, o.high_watermark, o.last_stable_offset));
                }
            }
        }
        Ok(())
    }

    /// Everything healed: every broker up and in every ISR, caught up with
    /// each leader's LEO and HW; no client in the middle of anything; the
    /// coordinator loaded, with no transaction open or ending.
    pub(crate) fn converged(&self) -> bool {
        for tp in all_tps() {
            let Some(record) = self.controller.image.partition(&tp.topic, tp.partition) else {
                return false;
            };
            let Some(leader) = self.leader_of(&tp) else {
                return false;
            };
            if record.isr.len() != self.config.brokers as usize {
                return false;
            }
            let Some(lp) = self.nodes[(leader - 1) as usize]
                .replicas
                .get(&tp)
                .map(|r| r.partition.clone())
            else {
                return false;
            };
            if !lp.is_leader() || lp.leader_epoch() != record.leader_epoch {
                return false;
            }
            let lo = lp.offsets();
            if lo.high_watermark != lo.log_end_offset {
                return false;
            }
            let caught_up = self.nodes.iter().all(|n| {
                n.alive
                    && n.replicas.get(&tp).is_some_and(|r| {
                        let o = r.partition.offsets();
                        o.log_end_offset == lo.log_end_offset
                            && o.high_watermark == lo.high_watermark
                    })
            });
            if !caught_up {
                return false;
            }
        }
        if self
            .clients
            .iter()
            .any(|c| matches!(c.state, ClientState::Init(_) | ClientState::InTxn(_)))
        {
            return false;
        }
        let Some(group_leader) = self.leader_of(&offsets_tp()) else {
            return false;
        };
        let g = &self.nodes[(group_leader - 1) as usize];
        if g.groups
            .as_ref()
            .is_none_or(|h| !h.writes.is_empty() || !h.adding.is_empty())
        {
            return false;
        }
        let Some(coordinator) = self.leader_of(&txn_tp()) else {
            return false;
        };
        let n = &self.nodes[(coordinator - 1) as usize];
        let Some(host) = &n.coordinator else {
            return false;
        };
        host.waiting.is_empty()
            && host.markers.is_empty()
            && host.retry.is_empty()
            && n.pending.is_empty()
            && n.parked.is_empty()
            && host.shard.all().all(|m| {
                m.pending.is_none()
                    && matches!(
                        m.current.state,
                        TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
                    )
            })
    }

    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        for tp in all_tps() {
            let record = self.controller.image.partition(&tp.topic, tp.partition);
            let nodes: Vec<String> = self
                .nodes
                .iter()
                .map(|n| {
                    let o = n.replicas.get(&tp).map(|r| r.partition.offsets());
                    format!(
                        "b{}{} {:?}",
                        n.id,
                        if n.alive { "" } else { " (down)" },
                        o.map(|o| (o.log_end_offset, o.high_watermark, o.last_stable_offset))
                    )
                })
                .collect();
            parts.push(format!(
                "{tp}: {:?}; {}",
                record.map(|r| (r.leader, r.leader_epoch, r.isr.clone())),
                nodes.join(", ")
            ));
        }
        let clients: Vec<String> = self
            .clients
            .iter()
            .map(|c| {
                let state = match &c.state {
                    ClientState::Init(_) => "init".to_string(),
                    ClientState::Idle { .. } => "idle".to_string(),
                    ClientState::InTxn(t) => {
                        format!("in txn {:?} end {:?}", (t.producer_id, t.epoch), t.end)
                    }
                    ClientState::Stopped => "stopped".to_string(),
                };
                format!("txn {} instance {}: {state}", c.txn, c.instance)
            })
            .collect();
        let coordinator: Vec<String> = self
            .nodes
            .iter()
            .filter_map(|n| n.coordinator.as_ref().map(|h| (n.id, h)))
            .map(|(id, h)| {
                let ids: Vec<String> = h
                    .shard
                    .all()
                    .map(|m| {
                        format!(
                            "{} {:?} pending {}",
                            m.transactional_id,
                            m.current.state,
                            m.pending.is_some()
                        )
                    })
                    .collect();
                format!(
                    "coordinator b{id} epoch {}: [{}], {} waiting, {} marker jobs, {} retries",
                    h.epoch,
                    ids.join(", "),
                    h.waiting.len(),
                    h.markers.len(),
                    h.retry.len()
                )
            })
            .collect();
        format!(
            "{}; clients: {}; {}",
            parts.join("; "),
            clients.join(", "),
            coordinator.join("; ")
        )
    }

    pub(crate) fn final_check(&mut self) -> Result<Report, Violation> {
        let mut transactional_batches = 0;
        let mut acknowledged = 0;
        for tp in all_tps() {
            let Some(leader) = self.leader_of(&tp) else {
                return violation(self, format!("{tp}: no leader at the end"));
            };
            let lp = self.nodes[(leader - 1) as usize].replicas[&tp]
                .partition
                .clone();
            let o = lp.offsets();
            let log = read_batches(&lp, o.high_watermark);
            // The replicas agree up to the HW.
            for n in &self.nodes {
                let p = n.replicas[&tp].partition.clone();
                let theirs = read_batches(&p, o.high_watermark);
                if theirs != log {
                    let at = theirs.iter().zip(&log).position(|(a, b)| a != b);
                    let show = |l: &[(i64, Vec<u8>)], i: usize| -> Vec<(i64, i32)> {
                        l.iter()
                            .skip(i.saturating_sub(2))
                            .take(5)
                            .map(|(o, b)| (*o, i32::from_be_bytes([b[12], b[13], b[14], b[15]])))
                            .collect()
                    };
                    let i = at.unwrap_or(theirs.len().min(log.len()));
                    return violation(
                        self,
                        format!(
                            "{tp}: broker {} disagrees with leader {leader} below the HW {}: \
                             (offset, leader epoch) from batch {i}: theirs {:?}, leader's {:?}; \
                             lengths {} and {}",
                            n.id,
                            o.high_watermark,
                            show(&theirs, i),
                            show(&log, i),
                            theirs.len(),
                            log.len()
                        ),
                    );
                }
            }
            if tp == txn_tp() || tp == offsets_tp() {
                continue;
            }
            // No acknowledged record is lost: the batch is at its offset, as
            // sent (everything from the magic byte on: offsets and epoch
            // excepted).
            let by_offset: BTreeMap<i64, Vec<u8>> = log.iter().cloned().collect();
            let in_txn = self.clients.iter().filter_map(|c| match &c.state {
                ClientState::InTxn(t) => Some(t),
                _ => None,
            });
            let txns: Vec<&ClientTxn> = self.client_txns.iter().chain(in_txn).collect();
            let mut acked: Vec<(i64, Vec<u8>)> = self
                .acked
                .iter()
                .filter(|((t, _), _)| *t == tp)
                .map(|((_, o), b)| (*o, b.to_vec()))
                .collect();
            for t in txns {
                if let Some(s) = t.sends.get(&tp) {
                    if let Some(offset) = s.acked {
                        acked.push((offset.get(), s.batch.to_vec()));
                    }
                }
            }
            for (offset, batch) in &acked {
                match by_offset.get(offset) {
                    Some(b) if b.get(16..) == batch.get(16..) => {}
                    other => {
                        return violation(
                            self,
                            format!(
                            "{tp}: acknowledged record at offset {offset} lost (found {:?} bytes)",
                            other.map(Vec::len)
                        ),
                        )
                    }
                }
            }
            acknowledged += acked.len();
            // Every transactional batch is decided by a later marker of its
            // producer, and that marker is the coordinator's decision for
            // its transaction: nothing of an aborted or fenced transaction
            // is visible, everything of a committed one is.
            let mut open: BTreeMap<ProducerId, Vec<(i64, ProducerEpoch)>> = BTreeMap::new();
            for (offset, bytes) in &log {
                let Ok(h) = strand_protocol::batch::BatchHeader::parse(bytes) else {
                    continue;
                };
                if !h.is_transactional() {
                    continue;
                }
                let (Some(pid), Some(epoch)) = (
                    ProducerId::from_wire(h.producer_id),
                    ProducerEpoch::from_wire(h.producer_epoch),
                ) else {
                    continue;
                };
                if !h.is_control() {
                    open.entry(pid).or_default().push((*offset, epoch));
                    continue;
                }
                let commit = control_record_type(bytes) == Some(ControlType::Commit);
                for (data_offset, data_epoch) in open.remove(&pid).unwrap_or_default() {
                    transactional_batches += 1;
                    match self.decisions.get(&(pid, data_epoch)) {
                        Some(d) if d.commit == commit => {}
                        decided => {
                            return violation(
                                self,
                                format!(
                                    "{tp} offset {data_offset}: transaction {:?} is {} by the marker at {offset}, \
                                     but the coordinator decided {:?}",
                                    (pid, data_epoch),
                                    if commit { "committed" } else { "aborted" },
                                    decided.map(|d| d.commit)
                                ),
                            );
                        }
                    }
                }
            }
            if let Some((pid, batches)) = open.into_iter().find(|(_, b)| !b.is_empty()) {
                return violation(
                    self,
                    format!("{tp}: transactional batches of {pid} at {batches:?} have no marker (a hanging transaction)"),
                );
            }
            // Markers completed every transaction.
            if o.last_stable_offset != o.high_watermark {
                return violation(
                    self,
                    format!(
                        "{tp}: LSO {} below HW {} after every transaction ended",
                        o.last_stable_offset, o.high_watermark
                    ),
                );
            }
        }
        // Every transaction whose commit the client was told succeeded was
        // decided commit (and so, above, is visible whole).
        for t in &self.client_txns {
            if t.end == Some(true) && t.ended {
                let decided = self.decisions.get(&(t.producer_id, t.epoch));
                if !decided.is_some_and(|d| d.commit) {
                    return violation(
                        self,
                        format!(
                            "transaction {:?}: EndTxn(commit) answered without error, but the coordinator decided {:?}",
                            (t.producer_id, t.epoch),
                            decided.map(|d| d.commit)
                        ),
                    );
                }
            }
        }
        // The group coordinator's offsets: each transactional input at the
        // position its last committed transaction consumed up to; the
        // plain group's at least its last acknowledged commit.
        let leader = self.leader_of(&offsets_tp()).expect("converged: a leader");
        let groups = self.nodes[(leader - 1) as usize]
            .groups
            .as_ref()
            .expect("converged: the groups are loaded")
            .groups
            .clone();
        for txn in 0..TXN_IDS.len() {
            let expected = self
                .offset_values
                .iter()
                .filter_map(|(v, key)| {
                    let d = self.decisions.get(key).filter(|d| d.commit)?;
                    (self.owners.get(key)?.0 == txn).then_some((d.at, *v))
                })
                .max()
                .map(|(_, v)| v);
            let got = groups
                .get(TXN_GROUP)
                .and_then(|o| o.get(&txn_input(txn)))
                .map(|c| c.offset);
            if got != expected {
                return violation(
                    self,
                    format!(
                        "the transactional group's offset for input {txn} is {got:?}, but its last committed transaction consumed up to {expected:?}"
                    ),
                );
            }
            if groups
                .get(TXN_GROUP)
                .is_some_and(|o| o.pending_producers().count() > 0)
            {
                return violation(self, "transactional offsets still staged at the end".into());
            }
        }
        let plain = groups
            .get(PLAIN_GROUP)
            .and_then(|o| o.get(&plain_input()))
            .map_or(0, |c| c.offset);
        if !self.plain.may_read(plain, self.plain.acked) {
            return violation(
                self,
                format!(
                    "the plain group's offset is {plain}: {} was acknowledged, {} the last sent",
                    self.plain.acked, self.plain.sent
                ),
            );
        }
        let committed = self.decisions.values().filter(|d| d.commit).count();
        Ok(Report {
            events: self.events,
            acknowledged,
            produced: self.produced,
            faults: self.faults,
            leader_epochs: self.appenders.len(),
            committed,
            aborted: self.decisions.len() - committed,
            fenced: self.fenced,
            coordinator_loads: self.coordinator_loads,
            transactional_batches,
            offset_commits: self.plain.acked as usize,
            offset_fetches: self.plain.fetches,
        })
    }
}
