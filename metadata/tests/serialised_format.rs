//! Metadata records, the image (snapshots) and the controller RPC's messages
//! are stored and sent as serde JSON: the metadata log of an existing cluster
//! must replay, and controllers of two builds must understand each other. The
//! strings below were produced by the code before ids and epochs became
//! newtypes (when they were integers and a missing leader was -1); they must
//! serialise byte for byte the same, and read back to the same values.

use serde::de::DeserializeOwned;
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Debug;
use strand_metadata::controller_api::{
    AlterPartitionRequest, AlterPartitionState, BrokerRegistrationRequest, ControllerReply,
    ControllerRequest, CreatedTopic, HeartbeatRequest, NewTopic,
};
use strand_metadata::image::MetadataImage;
use strand_metadata::records::{BrokerRecord, ConfigResource, MetadataRecord, PartitionRecord};
use strand_types::{BrokerEpoch, BrokerId, LeaderEpoch, PartitionEpoch, ProducerId};
use uuid::Uuid;

fn b(id: i32) -> BrokerId {
    BrokerId::new(id)
}

fn ids(v: &[i32]) -> Vec<BrokerId> {
    v.iter().copied().map(b).collect()
}

fn be(epoch: i64) -> BrokerEpoch {
    BrokerEpoch::new(epoch)
}

fn topic() -> Uuid {
    Uuid::from_u128(0x1234)
}

/// `value` serialises to exactly `json`, and `json` reads back to a value
/// that serialises the same (for types without `PartialEq`) and, through
/// `same`, equals `value`.
fn check<T: Serialize + DeserializeOwned + Debug>(
    value: &T,
    json: &str,
    same: impl Fn(&T, &T) -> bool,
) {
    assert_eq!(serde_json::to_string(value).expect("serialises"), json);
    let read: T = serde_json::from_str(json).unwrap_or_else(|e| panic!("{json}: {e}"));
    assert!(same(&read, value), "{json} read as {read:?}, not {value:?}");
    assert_eq!(serde_json::to_string(&read).expect("serialises"), json);
}

/// A record of every kind, and the strings the integer-typed code wrote.
fn records() -> Vec<(MetadataRecord, &'static str)> {
    let t = topic();
    vec![
        (
            MetadataRecord::ClusterFormatted {
                cluster_id: "c1".into(),
            },
            r#"{"ClusterFormatted":{"cluster_id":"c1"}}"#,
        ),
        (
            MetadataRecord::RegisterBroker(BrokerRecord {
                broker_id: b(2),
                broker_epoch: be(17),
                host: "h".into(),
                port: 9092,
                rack: Some("r1".into()),
                incarnation_id: Uuid::from_u128(3),
                fenced: true,
                in_controlled_shutdown: false,
                endpoints: vec![],
                log_dirs: vec![],
            }),
            r#"{"RegisterBroker":{"broker_id":2,"broker_epoch":17,"host":"h","port":9092,"rack":"r1","incarnation_id":"00000000-0000-0000-0000-000000000003","fenced":true,"in_controlled_shutdown":false}}"#,
        ),
        (
            MetadataRecord::FenceBroker {
                broker_id: b(2),
                broker_epoch: be(17),
            },
            r#"{"FenceBroker":{"broker_id":2,"broker_epoch":17}}"#,
        ),
        (
            MetadataRecord::UnfenceBroker {
                broker_id: b(2),
                broker_epoch: be(17),
            },
            r#"{"UnfenceBroker":{"broker_id":2,"broker_epoch":17}}"#,
        ),
        (
            MetadataRecord::BrokerControlledShutdown {
                broker_id: b(2),
                broker_epoch: be(17),
            },
            r#"{"BrokerControlledShutdown":{"broker_id":2,"broker_epoch":17}}"#,
        ),
        (
            MetadataRecord::Topic {
                name: "t".into(),
                topic_id: t,
            },
            r#"{"Topic":{"name":"t","topic_id":"00000000-0000-0000-0000-000000001234"}}"#,
        ),
        (
            MetadataRecord::Partition(PartitionRecord {
                topic_id: t,
                partition: 0,
                replicas: ids(&[2, 3, 1]),
                isr: ids(&[2, 3]),
                leader: Some(b(2)),
                leader_epoch: LeaderEpoch::new(5),
                partition_epoch: PartitionEpoch::new(7),
                adding_replicas: vec![],
                removing_replicas: vec![],
                directories: vec![],
            }),
            r#"{"Partition":{"topic_id":"00000000-0000-0000-0000-000000001234","partition":0,"replicas":[2,3,1],"isr":[2,3],"leader":2,"leader_epoch":5,"partition_epoch":7}}"#,
        ),
        (
            MetadataRecord::PartitionChange(PartitionRecord {
                topic_id: t,
                partition: 0,
                replicas: ids(&[2, 3, 1]),
                isr: ids(&[2]),
                leader: None,
                leader_epoch: LeaderEpoch::new(6),
                partition_epoch: PartitionEpoch::new(8),
                adding_replicas: vec![],
                removing_replicas: vec![],
                directories: vec![],
            }),
            r#"{"PartitionChange":{"topic_id":"00000000-0000-0000-0000-000000001234","partition":0,"replicas":[2,3,1],"isr":[2],"leader":-1,"leader_epoch":6,"partition_epoch":8}}"#,
        ),
        (
            MetadataRecord::Config {
                resource: ConfigResource::Topic,
                resource_name: "t".into(),
                name: "retention.ms".into(),
                value: Some("1".into()),
            },
            r#"{"Config":{"resource":"Topic","resource_name":"t","name":"retention.ms","value":"1"}}"#,
        ),
        (
            MetadataRecord::Config {
                resource: ConfigResource::Broker,
                resource_name: "2".into(),
                name: "x".into(),
                value: None,
            },
            r#"{"Config":{"resource":"Broker","resource_name":"2","name":"x","value":null}}"#,
        ),
        (
            MetadataRecord::ProducerIds {
                broker_id: b(2),
                next_producer_id: ProducerId::new(5000),
            },
            r#"{"ProducerIds":{"broker_id":2,"next_producer_id":5000}}"#,
        ),
        (
            MetadataRecord::RemoveTopic { topic_id: t },
            r#"{"RemoveTopic":{"topic_id":"00000000-0000-0000-0000-000000001234"}}"#,
        ),
    ]
}

#[test]
fn every_record_kind_keeps_its_bytes() {
    for (record, json) in records() {
        check(&record, json, PartialEq::eq);
    }
}

/// Snapshots serialise the image: broker ids are map keys there (strings in
/// JSON), and the next producer id a plain number.
#[test]
fn the_image_keeps_its_bytes() {
    let mut image = MetadataImage::default();
    // Everything but RemoveTopic, so the topic is in the image.
    for (record, _) in records().iter().take(11) {
        image.apply(record);
    }
    assert_eq!(image.brokers.keys().copied().collect::<Vec<_>>(), ids(&[2]));
    assert_eq!(image.next_producer_id, ProducerId::new(5000));
    assert_eq!(image.topics["t"].partitions[0].leader, None);
    check(
        &image,
        r#"{"cluster_id":"c1","brokers":{"2":{"broker_id":2,"broker_epoch":17,"host":"h","port":9092,"rack":"r1","incarnation_id":"00000000-0000-0000-0000-000000000003","fenced":false,"in_controlled_shutdown":true}},"topics":{"t":{"name":"t","topic_id":"00000000-0000-0000-0000-000000001234","partitions":[{"topic_id":"00000000-0000-0000-0000-000000001234","partition":0,"replicas":[2,3,1],"isr":[2],"leader":-1,"leader_epoch":6,"partition_epoch":8}],"configs":{"retention.ms":"1"}}},"topic_names":{"00000000-0000-0000-0000-000000001234":"t"},"broker_configs":{"2":{}},"next_producer_id":5000,"applied":11}"#,
        PartialEq::eq,
    );
}

/// Requests and answers that carry ids and epochs, as the controller RPC
/// sends them between controllers (and brokers) of either build. They have
/// no `PartialEq`: read back, they must print and serialise the same.
#[test]
fn controller_rpc_messages_keep_their_bytes() {
    let t = topic();
    let debug_eq = |a: &dyn Debug, b: &dyn Debug| format!("{a:?}") == format!("{b:?}");
    let requests = vec![
        (
            ControllerRequest::CreateTopics {
                topics: vec![NewTopic {
                    name: "t".into(),
                    num_partitions: -1,
                    replication_factor: -1,
                    assignments: vec![(0, vec![2, 3]), (1, vec![3, 1])],
                    configs: vec![("a".into(), Some("b".into()))],
                }],
                validate_only: false,
            },
            r#"{"CreateTopics":{"topics":[{"name":"t","num_partitions":-1,"replication_factor":-1,"assignments":[[0,[2,3]],[1,[3,1]]],"configs":[["a","b"]]}],"validate_only":false}}"#,
        ),
        (
            ControllerRequest::CreatePartitions {
                topics: vec![
                    ("t".into(), 3, Some(vec![vec![1, 2]])),
                    ("u".into(), 4, None),
                ],
                validate_only: true,
            },
            r#"{"CreatePartitions":{"topics":[["t",3,[[1,2]]],["u",4,null]],"validate_only":true}}"#,
        ),
        (
            ControllerRequest::AllocateProducerIds {
                broker_id: b(2),
                broker_epoch: Some(be(17)),
            },
            r#"{"AllocateProducerIds":{"broker_id":2,"broker_epoch":17}}"#,
        ),
        (
            ControllerRequest::AllocateProducerIds {
                broker_id: b(2),
                broker_epoch: None,
            },
            r#"{"AllocateProducerIds":{"broker_id":2,"broker_epoch":null}}"#,
        ),
        (
            ControllerRequest::RegisterBroker(BrokerRegistrationRequest {
                broker_id: b(2),
                incarnation_id: Uuid::from_u128(3),
                host: "h".into(),
                port: 9092,
                rack: None,
                endpoints: vec![],
                cluster_id: String::new(),
                log_dirs: vec![],
            }),
            r#"{"RegisterBroker":{"broker_id":2,"incarnation_id":"00000000-0000-0000-0000-000000000003","host":"h","port":9092,"rack":null}}"#,
        ),
        (
            ControllerRequest::Heartbeat(HeartbeatRequest {
                broker_id: b(2),
                broker_epoch: be(17),
                current_metadata_offset: 40,
                want_fence: false,
                want_shutdown: true,
                offline_log_dirs: vec![],
            }),
            r#"{"Heartbeat":{"broker_id":2,"broker_epoch":17,"current_metadata_offset":40,"want_fence":false,"want_shutdown":true}}"#,
        ),
        (
            ControllerRequest::AlterPartition(AlterPartitionRequest {
                broker_id: b(2),
                broker_epoch: be(17),
                topic_id: t,
                partition: 0,
                leader_epoch: LeaderEpoch::new(5),
                partition_epoch: PartitionEpoch::new(7),
                new_isr: ids(&[2, 3]),
                broker_epochs: BTreeMap::from([(b(2), be(17)), (b(3), be(21))]),
            }),
            r#"{"AlterPartition":{"broker_id":2,"broker_epoch":17,"topic_id":"00000000-0000-0000-0000-000000001234","partition":0,"leader_epoch":5,"partition_epoch":7,"new_isr":[2,3],"broker_epochs":{"2":17,"3":21}}}"#,
        ),
        (
            ControllerRequest::ElectLeaders {
                election_type: 1,
                partitions: Some(vec![("t".into(), 0)]),
            },
            r#"{"ElectLeaders":{"election_type":1,"partitions":[["t",0]]}}"#,
        ),
    ];
    for (request, json) in &requests {
        check(request, json, |a, b| debug_eq(a, b));
    }
    let replies = vec![
        (
            ControllerReply::ProducerIds(Ok((ProducerId::new(5000), 1000))),
            r#"{"ProducerIds":{"Ok":[5000,1000]}}"#,
        ),
        (
            ControllerReply::Registered(Ok(be(17))),
            r#"{"Registered":{"Ok":17}}"#,
        ),
        (
            ControllerReply::AlterPartition(Ok(AlterPartitionState {
                leader: Some(b(2)),
                leader_epoch: LeaderEpoch::new(5),
                partition_epoch: PartitionEpoch::new(8),
                isr: ids(&[2, 3]),
            })),
            r#"{"AlterPartition":{"Ok":{"leader":2,"leader_epoch":5,"partition_epoch":8,"isr":[2,3]}}}"#,
        ),
        (
            ControllerReply::AlterPartition(Ok(AlterPartitionState {
                leader: None,
                leader_epoch: LeaderEpoch::new(6),
                partition_epoch: PartitionEpoch::new(9),
                isr: ids(&[2]),
            })),
            r#"{"AlterPartition":{"Ok":{"leader":-1,"leader_epoch":6,"partition_epoch":9,"isr":[2]}}}"#,
        ),
        (
            ControllerReply::CreateTopics(vec![Ok(CreatedTopic {
                name: "t".into(),
                topic_id: t,
                num_partitions: 2,
                replication_factor: 2,
            })]),
            r#"{"CreateTopics":[{"Ok":{"name":"t","topic_id":"00000000-0000-0000-0000-000000001234","num_partitions":2,"replication_factor":2}}]}"#,
        ),
    ];
    for (reply, json) in &replies {
        check(reply, json, |a, b| debug_eq(a, b));
    }
}

/// A stored leader of -1 is none; so is any negative one, as the wire reads it.
#[test]
fn a_stored_negative_leader_is_none() {
    let json = r#"{"topic_id":"00000000-0000-0000-0000-000000001234","partition":0,"replicas":[1],"isr":[1],"leader":-7,"leader_epoch":0,"partition_epoch":0}"#;
    let p: PartitionRecord = serde_json::from_str(json).expect("reads");
    assert_eq!(p.leader, None);
}
