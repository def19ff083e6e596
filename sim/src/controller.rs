//! The controller: the real decision functions of `strand_controller`
//! over one image, applied at once (the quorum's own simulation is
//! `controller/tests/quorum_sim.rs`), broadcast to every broker.

use std::sync::Arc;
use strand_controller::manager::cluster::{
    caught_up_offset, fence_stale_brokers, heartbeat, register_broker, BrokerRegistrationRequest,
    HeartbeatRequest,
};
use strand_controller::manager::replication::alter_partition;
use strand_controller::manager::{create_topic, ApiError, NewTopic};
use strand_metadata::records::MetadataRecord;
use strand_protocol::ErrorCode;
use strand_replication::leader::AlterPartitionResult;
use strand_types::BrokerId;
use uuid::Uuid;

use crate::msg::Msg;
use crate::{
    Sim, CONTROLLER, DATA_PARTITIONS, DATA_TOPIC, OFFSETS_TOPIC, SESSION_TIMEOUT_MS, TXN_TOPIC,
};

impl Sim {
    pub(crate) fn apply(&mut self, records: Vec<MetadataRecord>) {
        if records.is_empty() {
            return;
        }
        for r in &records {
            self.controller.image.apply(r);
        }
        let parts: Vec<String> = self
            .controller
            .image
            .topics
            .values()
            .flat_map(|t| {
                t.partitions.iter().map(move |p| {
                    format!(
                        "{}-{} leader {} epoch {} isr {:?}",
                        t.name,
                        p.partition,
                        BrokerId::to_wire(p.leader),
                        p.leader_epoch,
                        p.isr
                    )
                })
            })
            .collect();
        if !parts.is_empty() {
            self.note(format!("controller: {}", parts.join("; ")));
        }
        self.broadcast();
    }

    fn broadcast(&mut self) {
        self.controller.last_broadcast = self.now;
        let image = Arc::new(self.controller.image.clone());
        for id in 1..=self.config.brokers {
            self.send(CONTROLLER, id, Msg::Image(image.clone()));
        }
    }

    pub(crate) fn controller_tick(&mut self) {
        let now = self.now as u64;
        let stale = fence_stale_brokers(
            &self.controller.image,
            &mut self.controller.heartbeats,
            now,
            SESSION_TIMEOUT_MS,
        );
        self.apply(stale);
        let all_active =
            (1..=self.config.brokers).all(|b| self.controller.image.is_active(BrokerId::new(b)));
        let topics = [
            (DATA_TOPIC, DATA_PARTITIONS, Uuid::from_u128(1)),
            (TXN_TOPIC, 1, Uuid::from_u128(2)),
            (OFFSETS_TOPIC, 1, Uuid::from_u128(3)),
        ];
        for (name, partitions, id) in topics {
            if all_active && !self.controller.image.topics.contains_key(name) {
                let t = NewTopic {
                    name: name.into(),
                    num_partitions: partitions,
                    replication_factor: 3,
                    assignments: vec![],
                    configs: {
                        let mut c = vec![("min.insync.replicas".into(), Some("2".into()))];
                        // With power cuts, acknowledgements and the HW count
                        // fsynced copies only: what they promise must
                        // survive losing every unsynced byte.
                        if self.config.power_cuts {
                            c.push(("strand.acks.durable".into(), Some("true".into())));
                        }
                        c
                    },
                };
                let stripe = self.seed as usize % 3;
                let created = create_topic(
                    &self.controller.image,
                    &self.controller.config,
                    &t,
                    id,
                    stripe,
                );
                if let Ok((records, _)) = created {
                    self.apply(records);
                }
            }
        }
        if self.now - self.controller.last_broadcast >= 300 {
            self.broadcast();
        }
    }

    pub(crate) fn controller_receive(&mut self, from: i32, msg: Msg) {
        let now = self.now as u64;
        match msg {
            Msg::Register {
                id: register_id,
                incarnation,
            } => {
                let req = BrokerRegistrationRequest {
                    broker_id: BrokerId::new(from),
                    incarnation_id: incarnation,
                    host: format!("b{from}"),
                    port: 9092,
                    rack: None,
                    endpoints: vec![],
                    cluster_id: String::new(),
                    log_dirs: vec![],
                };
                let registered = register_broker(
                    &self.controller.image,
                    &mut self.controller.heartbeats,
                    &req,
                    now,
                    SESSION_TIMEOUT_MS,
                );
                if let Ok((records, broker_epoch)) = registered {
                    self.apply(records);
                    self.send(
                        CONTROLLER,
                        from,
                        Msg::RegisterReply {
                            id: register_id,
                            broker_epoch,
                        },
                    );
                }
            }
            Msg::Heartbeat {
                broker_epoch,
                applied,
            } => {
                let Some(b) = self.controller.image.brokers.get(&BrokerId::new(from)) else {
                    return;
                };
                let req = HeartbeatRequest {
                    broker_id: BrokerId::new(from),
                    broker_epoch,
                    current_metadata_offset: applied,
                    want_fence: false,
                    want_shutdown: false,
                    offline_log_dirs: vec![],
                };
                let caught_up = caught_up_offset(b);
                if let Ok((records, _)) = heartbeat(
                    &self.controller.image,
                    &mut self.controller.heartbeats,
                    &req,
                    caught_up,
                    now,
                ) {
                    self.apply(records);
                }
            }
            Msg::AlterPartition(tp, req, proposal) => {
                let decision = match req {
                    Some(req) => alter_partition(&self.controller.image, &req),
                    None => Err(ApiError::new(
                        ErrorCode::StaleBrokerEpoch,
                        format!("No broker epoch given by broker {from}"),
                    )),
                };
                let result = match decision {
                    Ok((records, state)) => {
                        self.apply(records);
                        AlterPartitionResult::Ok {
                            leader_epoch: state.leader_epoch,
                            partition_epoch: state.partition_epoch,
                            isr: state.isr,
                        }
                    }
                    Err(e) => AlterPartitionResult::Err(e.code),
                };
                self.send(
                    CONTROLLER,
                    from,
                    Msg::AlterPartitionReply(tp, proposal, result),
                );
            }
            _ => {}
        }
    }
}
