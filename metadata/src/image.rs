//! The metadata image: what replaying the committed records builds. Brokers
//! read topics, partitions, configs and brokers from here and from nowhere else.

use crate::quotas::ClientQuotas;
use crate::records::{
    AclRecord, BrokerRecord, ConfigMap, ConfigResource, MetadataRecord, PartitionRecord,
    ScramCredentialRecord,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use strand_types::{BrokerEpoch, BrokerId, ProducerId};
use uuid::Uuid;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicImage {
    pub name: String,
    pub topic_id: Uuid,
    /// Indexed by partition id; ids are dense from 0.
    pub partitions: Vec<PartitionRecord>,
    pub configs: ConfigMap,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataImage {
    pub cluster_id: String,
    pub brokers: BTreeMap<BrokerId, BrokerRecord>,
    pub topics: BTreeMap<String, TopicImage>,
    pub topic_names: BTreeMap<Uuid, String>,
    pub broker_configs: BTreeMap<String, ConfigMap>,
    /// The first producer id not yet handed out to any broker.
    pub next_producer_id: ProducerId,
    /// Number of records applied: the image's position in the metadata log.
    pub applied: u64,
    /// SCRAM credentials by user name, then mechanism code.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub scram_credentials: BTreeMap<String, BTreeMap<i8, ScramCredentialRecord>>,
    /// ACL bindings by id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub acls: BTreeMap<Uuid, AclRecord>,
    /// Client quotas by entity (serialised as pairs: JSON keys are strings).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty", with = "as_pairs")]
    pub client_quotas: ClientQuotas,
    /// Finalized feature levels written by `FeatureLevel` records (level
    /// 0 removes); empty in a log from before features were recorded (see
    /// [`MetadataImage::finalized_features`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub features: BTreeMap<String, i16>,
    /// Whether any `FeatureLevel` record was applied (a log that set every
    /// feature to 0 is not a log from before features).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub features_recorded: bool,
    /// Groups' own settings (GROUP config resources) by group id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub group_configs: BTreeMap<String, ConfigMap>,
}

/// A map with structured keys, serialised as a list of (key, value) pairs.
mod as_pairs {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    pub fn serialize<S: Serializer, K: Serialize, V: Serialize>(
        map: &BTreeMap<K, V>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_seq(map.iter())
    }

    pub fn deserialize<
        'de,
        D: Deserializer<'de>,
        K: Deserialize<'de> + Ord,
        V: Deserialize<'de>,
    >(
        d: D,
    ) -> Result<BTreeMap<K, V>, D::Error> {
        Ok(Vec::<(K, V)>::deserialize(d)?.into_iter().collect())
    }
}

impl MetadataImage {
    /// Applies one committed record. Records come from the controller's own
    /// handlers, so each names things that exist; a record that does not
    /// (possible only with a damaged log) is skipped rather than trusted.
    pub fn apply(&mut self, record: &MetadataRecord) {
        self.applied += 1;
        match record {
            MetadataRecord::ClusterFormatted { cluster_id } => self.cluster_id = cluster_id.clone(),
            MetadataRecord::RegisterBroker(b) => {
                self.brokers.insert(b.broker_id, b.clone());
            }
            MetadataRecord::FenceBroker {
                broker_id,
                broker_epoch,
            } => {
                if let Some(b) = self.broker_at_epoch(*broker_id, *broker_epoch) {
                    b.fenced = true;
                }
            }
            MetadataRecord::UnfenceBroker {
                broker_id,
                broker_epoch,
            } => {
                if let Some(b) = self.broker_at_epoch(*broker_id, *broker_epoch) {
                    b.fenced = false;
                    b.in_controlled_shutdown = false;
                }
            }
            MetadataRecord::BrokerControlledShutdown {
                broker_id,
                broker_epoch,
            } => {
                if let Some(b) = self.broker_at_epoch(*broker_id, *broker_epoch) {
                    b.in_controlled_shutdown = true;
                }
            }
            MetadataRecord::UnregisterBroker {
                broker_id,
                broker_epoch,
            } => {
                if self.broker_at_epoch(*broker_id, *broker_epoch).is_some() {
                    self.brokers.remove(broker_id);
                }
            }
            MetadataRecord::BrokerLogDirs {
                broker_id,
                broker_epoch,
                log_dirs,
            } => {
                if let Some(b) = self.broker_at_epoch(*broker_id, *broker_epoch) {
                    b.log_dirs = log_dirs.clone();
                }
            }
            MetadataRecord::Topic { name, topic_id } => {
                self.topic_names.insert(*topic_id, name.clone());
                self.topics.insert(
                    name.clone(),
                    TopicImage {
                        name: name.clone(),
                        topic_id: *topic_id,
                        ..Default::default()
                    },
                );
            }
            MetadataRecord::Partition(p) => {
                let Some(topic) = self.topic_by_id_mut(p.topic_id) else {
                    return;
                };
                let idx = p.partition as usize;
                if idx < topic.partitions.len() {
                    topic.partitions[idx] = p.clone();
                } else if idx == topic.partitions.len() {
                    topic.partitions.push(p.clone());
                }
            }
            MetadataRecord::PartitionChange(p) => {
                let Some(topic) = self.topic_by_id_mut(p.topic_id) else {
                    return;
                };
                let Some(cur) = usize::try_from(p.partition)
                    .ok()
                    .and_then(|i| topic.partitions.get_mut(i))
                else {
                    return;
                };
                if p.partition_epoch > cur.partition_epoch && p.leader_epoch >= cur.leader_epoch {
                    *cur = p.clone();
                }
            }
            MetadataRecord::RemoveTopic { topic_id } => {
                if let Some(name) = self.topic_names.remove(topic_id) {
                    self.topics.remove(&name);
                }
            }
            MetadataRecord::Config {
                resource,
                resource_name,
                name,
                value,
            } => {
                let map = match resource {
                    ConfigResource::Topic => match self.topics.get_mut(resource_name) {
                        Some(t) => &mut t.configs,
                        None => return,
                    },
                    ConfigResource::Broker => self
                        .broker_configs
                        .entry(resource_name.clone())
                        .or_default(),
                    ConfigResource::Group => {
                        self.group_configs.entry(resource_name.clone()).or_default()
                    }
                };
                match value {
                    Some(v) => map.insert(name.clone(), v.clone()),
                    None => map.remove(name),
                };
                // A group with nothing set is no entry at all.
                if *resource == ConfigResource::Group
                    && self
                        .group_configs
                        .get(resource_name)
                        .is_some_and(|m| m.is_empty())
                {
                    self.group_configs.remove(resource_name);
                }
            }
            MetadataRecord::ProducerIds {
                next_producer_id, ..
            } => {
                self.next_producer_id = self.next_producer_id.max(*next_producer_id);
            }
            MetadataRecord::UserScramCredential(c) => {
                self.scram_credentials
                    .entry(c.name.clone())
                    .or_default()
                    .insert(c.mechanism, c.clone());
            }
            MetadataRecord::AccessControlEntry(acl) => {
                self.acls.insert(acl.id, acl.clone());
            }
            MetadataRecord::RemoveAccessControlEntry { id } => {
                self.acls.remove(id);
            }
            MetadataRecord::ClientQuota { entity, key, value } => match value {
                Some(v) => {
                    self.client_quotas
                        .entry(entity.clone())
                        .or_default()
                        .insert(key.clone(), *v);
                }
                None => {
                    if let Some(keys) = self.client_quotas.get_mut(entity) {
                        keys.remove(key);
                        if keys.is_empty() {
                            self.client_quotas.remove(entity);
                        }
                    }
                }
            },
            MetadataRecord::FeatureLevel { name, level } => {
                self.features_recorded = true;
                if *level > 0 {
                    self.features.insert(name.clone(), *level);
                } else {
                    self.features.remove(name);
                }
            }
            MetadataRecord::RemoveUserScramCredential { name, mechanism } => {
                if let Some(user) = self.scram_credentials.get_mut(name) {
                    user.remove(mechanism);
                    if user.is_empty() {
                        self.scram_credentials.remove(name);
                    }
                }
            }
        }
    }

    /// The finalized feature levels (those above 0). A metadata log from
    /// before Strand recorded features served Kafka 4.4's protocols with
    /// transaction.version 2: it reads as the latest metadata.version and
    /// transaction.version 2 until a FeatureLevel record says otherwise.
    pub fn finalized_features(&self) -> BTreeMap<String, i16> {
        if self.features_recorded {
            return self.features.clone();
        }
        crate::features::defaults_for(crate::features::LATEST_METADATA_VERSION)
            .into_iter()
            .map(|(n, l)| (n.to_string(), l))
            .collect()
    }

    /// A feature's finalized level (0 when not finalized).
    pub fn feature_level(&self, name: &str) -> i16 {
        self.finalized_features().get(name).copied().unwrap_or(0)
    }

    fn broker_at_epoch(&mut self, id: BrokerId, epoch: BrokerEpoch) -> Option<&mut BrokerRecord> {
        self.brokers
            .get_mut(&id)
            .filter(|b| b.broker_epoch == epoch)
    }

    /// A registered broker that may lead and join ISRs.
    pub fn is_active(&self, broker_id: BrokerId) -> bool {
        self.brokers
            .get(&broker_id)
            .is_some_and(BrokerRecord::is_active)
    }

    /// Whether replica `r` of `p` may lead or join the ISR: its broker is
    /// active and the log directory holding the replica is online (KIP-858).
    pub fn is_eligible_replica(&self, p: &PartitionRecord, r: BrokerId) -> bool {
        self.brokers
            .get(&r)
            .is_some_and(|b| b.is_active() && b.has_online_dir(p.directory_of(r)))
    }

    fn topic_by_id_mut(&mut self, id: Uuid) -> Option<&mut TopicImage> {
        let name = self.topic_names.get(&id)?;
        self.topics.get_mut(name)
    }

    pub fn topic_by_id(&self, id: Uuid) -> Option<&TopicImage> {
        self.topics.get(self.topic_names.get(&id)?)
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionRecord> {
        let t = self.topics.get(topic)?;
        if partition < 0 {
            return None;
        }
        t.partitions.get(partition as usize)
    }
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::records::{BrokerRecord, PartitionRecord};
    use strand_types::{LeaderEpoch, PartitionEpoch};

    fn b(id: i32) -> BrokerId {
        BrokerId::new(id)
    }

    fn be(epoch: i64) -> BrokerEpoch {
        BrokerEpoch::new(epoch)
    }

    /// Snapshots serialize the image; a round trip must be lossless.
    #[test]
    fn image_round_trips_through_json() {
        let mut img = MetadataImage::default();
        let id = uuid::Uuid::from_u128(9);
        for r in [
            MetadataRecord::ClusterFormatted {
                cluster_id: "c".into(),
            },
            MetadataRecord::RegisterBroker(BrokerRecord {
                broker_id: b(2),
                broker_epoch: be(1),
                host: "h".into(),
                port: 1,
                rack: Some("r".into()),
                incarnation_id: uuid::Uuid::from_u128(3),
                fenced: true,
                in_controlled_shutdown: false,
                endpoints: vec![],
                log_dirs: vec![],
            }),
            MetadataRecord::UnfenceBroker {
                broker_id: b(2),
                broker_epoch: be(1),
            },
            MetadataRecord::Topic {
                name: "t".into(),
                topic_id: id,
            },
            MetadataRecord::Partition(PartitionRecord {
                topic_id: id,
                partition: 0,
                replicas: vec![b(2)],
                isr: vec![b(2)],
                leader: Some(b(2)),
                leader_epoch: LeaderEpoch::new(3),
                partition_epoch: PartitionEpoch::new(4),
                adding_replicas: vec![],
                removing_replicas: vec![],
                directories: vec![],
            }),
            MetadataRecord::PartitionChange(PartitionRecord {
                topic_id: id,
                partition: 0,
                replicas: vec![b(2)],
                isr: vec![b(2)],
                leader: None,
                leader_epoch: LeaderEpoch::new(4),
                partition_epoch: PartitionEpoch::new(5),
                adding_replicas: vec![],
                removing_replicas: vec![],
                directories: vec![],
            }),
            MetadataRecord::Config {
                resource: crate::records::ConfigResource::Topic,
                resource_name: "t".into(),
                name: "retention.ms".into(),
                value: Some("1".into()),
            },
            MetadataRecord::ProducerIds {
                broker_id: b(2),
                next_producer_id: ProducerId::new(1000),
            },
        ] {
            img.apply(&r);
        }
        let json = serde_json::to_vec(&img).unwrap();
        assert_eq!(serde_json::from_slice::<MetadataImage>(&json).unwrap(), img);
    }

    /// Broker state records apply only to the current registration epoch;
    /// partition changes only to existing partitions and only forwards.
    #[test]
    fn broker_and_partition_change_table() {
        let id = uuid::Uuid::from_u128(9);
        let base = || {
            let mut img = MetadataImage::default();
            img.apply(&MetadataRecord::RegisterBroker(BrokerRecord {
                broker_id: b(1),
                broker_epoch: be(5),
                fenced: true,
                ..Default::default()
            }));
            img.apply(&MetadataRecord::Topic {
                name: "t".into(),
                topic_id: id,
            });
            img.apply(&MetadataRecord::Partition(PartitionRecord {
                topic_id: id,
                partition: 0,
                replicas: vec![b(1)],
                isr: vec![b(1)],
                leader: Some(b(1)),
                leader_epoch: LeaderEpoch::new(2),
                partition_epoch: PartitionEpoch::new(3),
                adding_replicas: vec![],
                removing_replicas: vec![],
                directories: vec![],
            }));
            img
        };
        // Leaders and epochs as the wire writes them: a leader of -1 is none.
        let change = |leader: i32, leader_epoch: i32, partition_epoch: i32, partition: i32| {
            MetadataRecord::PartitionChange(PartitionRecord {
                topic_id: id,
                partition,
                replicas: vec![b(1)],
                isr: vec![b(1)],
                leader: BrokerId::from_wire(leader),
                leader_epoch: LeaderEpoch::new(leader_epoch),
                partition_epoch: PartitionEpoch::new(partition_epoch),
                adding_replicas: vec![],
                removing_replicas: vec![],
                directories: vec![],
            })
        };
        // (records, broker fenced, in controlled shutdown, p0 (leader, leader epoch, partition epoch))
        let cases: Vec<(Vec<MetadataRecord>, bool, bool, (i32, i32, i32))> = vec![
            (vec![], true, false, (1, 2, 3)),
            (
                vec![MetadataRecord::UnfenceBroker {
                    broker_id: b(1),
                    broker_epoch: be(5),
                }],
                false,
                false,
                (1, 2, 3),
            ),
            (
                vec![MetadataRecord::UnfenceBroker {
                    broker_id: b(1),
                    broker_epoch: be(4),
                }],
                true,
                false,
                (1, 2, 3),
            ),
            (
                vec![MetadataRecord::UnfenceBroker {
                    broker_id: b(2),
                    broker_epoch: be(5),
                }],
                true,
                false,
                (1, 2, 3),
            ),
            (
                vec![
                    MetadataRecord::UnfenceBroker {
                        broker_id: b(1),
                        broker_epoch: be(5),
                    },
                    MetadataRecord::BrokerControlledShutdown {
                        broker_id: b(1),
                        broker_epoch: be(5),
                    },
                ],
                false,
                true,
                (1, 2, 3),
            ),
            (
                vec![
                    MetadataRecord::BrokerControlledShutdown {
                        broker_id: b(1),
                        broker_epoch: be(5),
                    },
                    MetadataRecord::UnfenceBroker {
                        broker_id: b(1),
                        broker_epoch: be(5),
                    },
                    MetadataRecord::FenceBroker {
                        broker_id: b(1),
                        broker_epoch: be(5),
                    },
                ],
                true,
                false,
                (1, 2, 3),
            ),
            (vec![change(-1, 3, 4, 0)], true, false, (-1, 3, 4)),
            (vec![change(-1, 3, 3, 0)], true, false, (1, 2, 3)),
            (vec![change(-1, 1, 4, 0)], true, false, (1, 2, 3)),
            (vec![change(-1, 3, 4, 1)], true, false, (1, 2, 3)),
        ];
        for (i, (records, fenced, shutdown, p0)) in cases.into_iter().enumerate() {
            let mut img = base();
            for r in &records {
                img.apply(r);
            }
            let broker = &img.brokers[&b(1)];
            assert_eq!(
                (broker.fenced, broker.in_controlled_shutdown),
                (fenced, shutdown),
                "case {i}"
            );
            let p = &img.topics["t"].partitions;
            assert_eq!(p.len(), 1, "case {i}");
            let (leader, leader_epoch, partition_epoch) = p0;
            assert_eq!(
                (p[0].leader, p[0].leader_epoch, p[0].partition_epoch),
                (
                    BrokerId::from_wire(leader),
                    LeaderEpoch::new(leader_epoch),
                    PartitionEpoch::new(partition_epoch)
                ),
                "case {i}"
            );
        }
    }
}
