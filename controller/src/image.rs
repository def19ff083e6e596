//! The metadata image: what replaying the committed records builds. Brokers
//! read topics, partitions, configs and brokers from here and from nowhere else.

use crate::records::{BrokerRecord, ConfigMap, ConfigResource, MetadataRecord, PartitionRecord};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
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
    pub brokers: BTreeMap<i32, BrokerRecord>,
    pub topics: BTreeMap<String, TopicImage>,
    pub topic_names: BTreeMap<Uuid, String>,
    pub broker_configs: BTreeMap<String, ConfigMap>,
    /// The first producer id not yet handed out to any broker.
    pub next_producer_id: i64,
    /// Number of records applied: the image's position in the metadata log.
    pub applied: u64,
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
                };
                match value {
                    Some(v) => map.insert(name.clone(), v.clone()),
                    None => map.remove(name),
                };
            }
            MetadataRecord::ProducerIds {
                next_producer_id, ..
            } => {
                self.next_producer_id = self.next_producer_id.max(*next_producer_id);
            }
        }
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
mod tests {
    use super::*;
    use crate::records::{BrokerRecord, PartitionRecord};

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
                broker_id: 2,
                broker_epoch: 1,
                host: "h".into(),
                port: 1,
                rack: Some("r".into()),
            }),
            MetadataRecord::Topic {
                name: "t".into(),
                topic_id: id,
            },
            MetadataRecord::Partition(PartitionRecord {
                topic_id: id,
                partition: 0,
                replicas: vec![2],
                isr: vec![2],
                leader: 2,
                leader_epoch: 3,
                partition_epoch: 4,
            }),
            MetadataRecord::Config {
                resource: crate::records::ConfigResource::Topic,
                resource_name: "t".into(),
                name: "retention.ms".into(),
                value: Some("1".into()),
            },
            MetadataRecord::ProducerIds {
                broker_id: 2,
                next_producer_id: 1000,
            },
        ] {
            img.apply(&r);
        }
        let json = serde_json::to_vec(&img).unwrap();
        assert_eq!(serde_json::from_slice::<MetadataImage>(&json).unwrap(), img);
    }
}
