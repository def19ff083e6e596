//! AlterPartition and ElectLeaders through `ControllerHandle` on a lone
//! in-memory controller: a leader shrinks and expands its ISR, a fenced
//! preferred leader comes back, rejoins the ISR and is elected again; and the
//! new requests and replies survive the JSON the controller RPC forwards.

use std::collections::BTreeMap;
use strand_controller::manager::cluster::{BrokerRegistrationRequest, HeartbeatRequest};
use strand_controller::manager::{
    AlterPartitionRequest, AlterPartitionState, ControllerConfig, ElectionType, NewTopic,
};
use strand_controller::{
    start_controller, ControllerHandle, ControllerReply, ControllerRequest, QuorumSettings,
    StoreKind,
};
use strand_protocol::ErrorCode;
use strand_types::{BrokerEpoch, BrokerId, LeaderEpoch, PartitionEpoch};
use uuid::Uuid;

const BROKERS: [BrokerId; 3] = [BrokerId::new(11), BrokerId::new(12), BrokerId::new(13)];

fn settings() -> QuorumSettings {
    let voters: BTreeMap<u64, String> = [(1, "127.0.0.1:1".to_string())].into();
    QuorumSettings {
        node_id: 1,
        cluster_id: "replication-api".into(),
        voters: voters.clone(),
        initial_voters: voters,
        store: StoreKind::Memory,
        election_timeout_ms: 150,
        session_timeout_ms: 60_000,
        write_lease_ms: strand_controller::DEFAULT_WRITE_LEASE_MS,
        listener: None,
        rpc: strand_controller::PlainRpc::shared(),
        bootstrap: Vec::new(),
        controller: ControllerConfig {
            node_id: BrokerId::new(1),
            num_partitions: 1,
            default_replication_factor: 3,
            producer_id_block_size: 1000,
            max_replication_factor: usize::MAX,
            leader_balance_interval_ms: None,
            unclean_leader_election_enable: false,
            unclean_election_interval_ms: None,
            group_bounds: Default::default(),
        },
        clock: strand_types::SystemClock::shared(),
        seed: None,
    }
}

async fn heartbeat(
    h: &ControllerHandle,
    broker_id: BrokerId,
    broker_epoch: BrokerEpoch,
    want_fence: bool,
) {
    let reply = h
        .client()
        .heartbeat(HeartbeatRequest {
            broker_id,
            broker_epoch,
            current_metadata_offset: u64::MAX,
            want_fence,
            want_shutdown: false,
            offline_log_dirs: vec![],
        })
        .await
        .unwrap();
    assert_eq!(reply.is_fenced, want_fence, "broker {broker_id}");
}

/// Registers and unfences every broker of `BROKERS`: their epochs.
async fn register_all(h: &ControllerHandle) -> BTreeMap<BrokerId, BrokerEpoch> {
    let mut epochs = BTreeMap::new();
    for id in BROKERS {
        let epoch = h
            .client()
            .register_broker(BrokerRegistrationRequest {
                broker_id: id,
                incarnation_id: Uuid::new_v4(),
                host: "127.0.0.1".into(),
                port: 9092,
                rack: None,
                endpoints: vec![],
                cluster_id: String::new(),
                log_dirs: vec![],
            })
            .await
            .unwrap();
        epochs.insert(id, epoch);
        heartbeat(h, id, epoch, false).await;
    }
    epochs
}

fn state(h: &ControllerHandle) -> AlterPartitionState {
    let img = h.image();
    let p = &img.topics["t"].partitions[0];
    AlterPartitionState {
        leader: p.leader,
        leader_epoch: p.leader_epoch,
        partition_epoch: p.partition_epoch,
        isr: p.isr.clone(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_partition_and_elect_leaders_through_the_handle() {
    let node = start_controller(settings()).await.unwrap();
    let h = node.handle.clone();
    let epochs = register_all(&h).await;
    // replication_factor -1: default.replication.factor (3).
    let created = h
        .client()
        .create_topics(
            vec![NewTopic {
                name: "t".into(),
                num_partitions: -1,
                replication_factor: -1,
                ..Default::default()
            }],
            false,
        )
        .await;
    let created = created[0].clone().unwrap();
    assert_eq!(created.replication_factor, 3);
    let replicas = h.image().topics["t"].partitions[0].replicas.clone();
    let (preferred, others) = (replicas[0], &replicas[1..]);
    assert_eq!(state(&h).leader, Some(preferred));
    let req =
        |broker_id: BrokerId, s: &AlterPartitionState, isr: &[BrokerId]| AlterPartitionRequest {
            broker_id,
            broker_epoch: epochs[&broker_id],
            topic_id: created.topic_id,
            partition: 0,
            leader_epoch: s.leader_epoch,
            partition_epoch: s.partition_epoch,
            new_isr: isr.to_vec(),
            broker_epochs: isr.iter().map(|r| (*r, epochs[r])).collect(),
        };

    // Shrink to the leader alone, then a retry of the same request is stale.
    let before = state(&h);
    let shrink = req(preferred, &before, &[preferred]);
    let after = h.client().alter_partition(shrink.clone()).await.unwrap();
    assert_eq!(after.isr, vec![preferred]);
    assert_eq!(after.partition_epoch, before.partition_epoch.next());
    assert_eq!(state(&h), after);
    let err = h.client().alter_partition(shrink).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidUpdateVersion);
    // Expand back; the same set again writes nothing.
    let full = h
        .client()
        .alter_partition(req(preferred, &after, &replicas))
        .await
        .unwrap();
    assert_eq!(
        (full.isr.clone(), full.partition_epoch),
        (replicas.clone(), PartitionEpoch::new(2))
    );
    let same = h
        .client()
        .alter_partition(req(preferred, &full, &replicas))
        .await
        .unwrap();
    assert_eq!(same, full);
    assert_eq!(state(&h), full);
    // Only the leader may ask.
    let err = h
        .client()
        .alter_partition(req(others[0], &full, &replicas))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidRequest);

    // Nothing needs an election.
    assert_eq!(
        h.client()
            .elect_leaders(ElectionType::Preferred, None)
            .await
            .unwrap(),
        vec![]
    );
    let tp = ("t".to_string(), 0);
    let r = h
        .client()
        .elect_leaders(ElectionType::Preferred, Some(vec![tp.clone()]))
        .await
        .unwrap();
    assert_eq!(
        r[0].1.as_ref().unwrap_err().code,
        ErrorCode::ElectionNotNeeded
    );

    // The preferred leader is fenced: leadership moves, it leaves the ISR.
    heartbeat(&h, preferred, epochs[&preferred], true).await;
    let moved = state(&h);
    assert_eq!(moved.leader, Some(others[0]));
    let moved_leader = moved.leader.expect("the partition has a leader");
    assert!(!moved.isr.contains(&preferred));
    // Fenced, it cannot rejoin the ISR.
    let mut back = moved.isr.clone();
    back.push(preferred);
    let err = h
        .client()
        .alter_partition(req(moved_leader, &moved, &back))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::IneligibleReplica);
    // Not in the ISR: no preferred election yet.
    let r = h
        .client()
        .elect_leaders(ElectionType::Preferred, Some(vec![tp.clone()]))
        .await
        .unwrap();
    assert_eq!(
        r[0].1.as_ref().unwrap_err().code,
        ErrorCode::PreferredLeaderNotAvailable
    );
    // Unfenced, the new leader adds it back, and it is elected again.
    heartbeat(&h, preferred, epochs[&preferred], false).await;
    let rejoined = h
        .client()
        .alter_partition(req(moved_leader, &moved, &back))
        .await
        .unwrap();
    assert_eq!(rejoined.isr, back);
    let r = h
        .client()
        .elect_leaders(ElectionType::Preferred, None)
        .await
        .unwrap();
    assert_eq!(r, vec![(tp.clone(), Ok(()))]);
    let elected = state(&h);
    assert_eq!(elected.leader, Some(preferred));
    assert_eq!(elected.leader_epoch, rejoined.leader_epoch.next());
    // The old leader's epoch is fenced now.
    let err = h
        .client()
        .alter_partition(req(moved_leader, &rejoined, &back))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::FencedLeaderEpoch);

    // Unclean: the partition is online; unknown partitions are reported.
    let r = h
        .client()
        .elect_leaders(
            ElectionType::Unclean,
            Some(vec![tp.clone(), ("nope".into(), 0)]),
        )
        .await
        .unwrap();
    let codes: Vec<_> = r
        .iter()
        .map(|(_, r)| r.as_ref().unwrap_err().code)
        .collect();
    assert_eq!(
        codes,
        vec![
            ErrorCode::ElectionNotNeeded,
            ErrorCode::UnknownTopicOrPartition
        ]
    );
    // An unknown election type on the wire fails each partition.
    let reply = h
        .call(ControllerRequest::ElectLeaders {
            election_type: 7,
            partitions: Some(vec![tp.clone()]),
        })
        .await
        .unwrap();
    let ControllerReply::ElectLeaders(r) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(r[0].1.as_ref().unwrap_err().code, ErrorCode::InvalidRequest);
    assert_eq!(state(&h), elected);
    node.raft.shutdown().await.unwrap();
}

/// Forwarded requests and replies travel as JSON.
#[test]
fn new_requests_and_replies_round_trip_through_json() {
    let alter = AlterPartitionRequest {
        broker_id: BrokerId::new(1),
        broker_epoch: BrokerEpoch::new(7),
        topic_id: Uuid::from_u128(5),
        partition: 2,
        leader_epoch: LeaderEpoch::new(3),
        partition_epoch: PartitionEpoch::new(4),
        new_isr: vec![BrokerId::new(1), BrokerId::new(2)],
        broker_epochs: [
            (BrokerId::new(1), BrokerEpoch::new(7)),
            (BrokerId::new(2), BrokerEpoch::new(9)),
        ]
        .into_iter()
        .collect(),
    };
    let requests = [
        ControllerRequest::AlterPartition(alter),
        ControllerRequest::ElectLeaders {
            election_type: 1,
            partitions: Some(vec![("t".into(), 0)]),
        },
        ControllerRequest::ElectLeaders {
            election_type: 0,
            partitions: None,
        },
    ];
    for r in requests {
        let json = serde_json::to_value(&r).unwrap();
        let back: ControllerRequest = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), json);
    }
    let err = strand_controller::manager::ApiError::new(ErrorCode::FencedLeaderEpoch, "old");
    let replies = [
        ControllerReply::AlterPartition(Ok(AlterPartitionState {
            leader: Some(BrokerId::new(1)),
            leader_epoch: LeaderEpoch::new(2),
            partition_epoch: PartitionEpoch::new(3),
            isr: vec![BrokerId::new(1)],
        })),
        ControllerReply::AlterPartition(Ok(AlterPartitionState {
            leader: None,
            leader_epoch: LeaderEpoch::new(2),
            partition_epoch: PartitionEpoch::new(3),
            isr: vec![BrokerId::new(1)],
        })),
        ControllerReply::AlterPartition(Err(err.clone())),
        ControllerReply::ElectLeaders(vec![(("t".into(), 0), Ok(())), (("t".into(), 1), Err(err))]),
    ];
    for r in replies {
        let json = serde_json::to_value(&r).unwrap();
        let back: ControllerReply = serde_json::from_value(json.clone()).unwrap();
        assert_eq!(serde_json::to_value(&back).unwrap(), json);
    }
}

/// `unclean.leader.election.enable=true` in the controller's
/// server.properties (no topic or cluster-wide dynamic setting): a
/// partition whose only in-sync replica is fenced takes an out-of-sync
/// replica as its leader at the next check, as Kafka's controller does
/// with its static config, without waiting for
/// `unclean.leader.election.interval.ms`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_static_unclean_setting_elects_an_out_of_sync_replica() {
    let mut s = settings();
    s.controller.unclean_leader_election_enable = true;
    s.controller.unclean_election_interval_ms = Some(300_000);
    let node = start_controller(s).await.unwrap();
    let h = node.handle.clone();
    let epochs = register_all(&h).await;
    let created = h
        .client()
        .create_topics(
            vec![NewTopic {
                name: "t".into(),
                num_partitions: 1,
                replication_factor: 3,
                ..Default::default()
            }],
            false,
        )
        .await[0]
        .clone()
        .unwrap();
    let replicas = h.image().topics["t"].partitions[0].replicas.clone();
    let leader = replicas[0];
    // The leader alone in sync, then fenced: offline, no clean choice.
    let s = state(&h);
    h.client()
        .alter_partition(AlterPartitionRequest {
            broker_id: leader,
            broker_epoch: epochs[&leader],
            topic_id: created.topic_id,
            partition: 0,
            leader_epoch: s.leader_epoch,
            partition_epoch: s.partition_epoch,
            new_isr: vec![leader],
            broker_epochs: [(leader, epochs[&leader])].into(),
        })
        .await
        .unwrap();
    heartbeat(&h, leader, epochs[&leader], true).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let elected = loop {
        let s = state(&h);
        if s.leader.is_some() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no unclean election: {s:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(elected.leader, Some(replicas[1]));
    assert_eq!(elected.isr, vec![replicas[1]]);
}
