//! Online migration between the classic and the consumer protocol: a
//! classic group with a member taken over by a consumer-protocol member,
//! its classic member served through JoinGroup, SyncGroup and Heartbeat in
//! the mixed group without a partition ever held twice, and the group back
//! to classic once only classic members are left.

use bytes::Bytes;
use strand_group::consumer::embedded::{
    decode_assignment, encode_assignment, encode_subscription, Subscription,
};
use strand_group::consumer::{
    Assignment, ClassicJoin, ClassicJoinAnswer, ConsumerGroup, ConsumerGroupConfig, Epoch,
    HeartbeatRequest, MigrationPolicy, TopicId, TopicImage,
};
use strand_group::snapshot::{GroupMetadataSnapshot, MemberSnapshot};
use strand_group::{Group, GroupConfig};
use strand_protocol::ErrorCode;

const T: TopicId = TopicId::from_bytes([7; 16]);

fn topics() -> TopicImage {
    TopicImage::new([("t".to_string(), T, 4)])
}

fn sub(owned: &[i32]) -> Bytes {
    encode_subscription(&Subscription {
        version: 1,
        topics: vec!["t".into()],
        owned: if owned.is_empty() {
            vec![]
        } else {
            vec![("t".into(), owned.to_vec())]
        },
        ..Subscription::default()
    })
}

/// A classic group at generation 3 whose one member `k` holds all of `t`.
fn classic_group() -> Group {
    let snapshot = GroupMetadataSnapshot {
        protocol_type: Some("consumer".into()),
        generation_id: 3,
        protocol_name: Some("range".into()),
        leader: Some("k".into()),
        current_state_timestamp_ms: None,
        members: vec![MemberSnapshot {
            member_id: "k".into(),
            group_instance_id: None,
            client_id: "ck".into(),
            client_host: "/10.0.0.1".into(),
            rebalance_timeout_ms: 30_000,
            session_timeout_ms: 10_000,
            subscription: sub(&[]),
            assignment: encode_assignment(1, &vec![("t".into(), vec![0, 1, 2, 3])]),
        }],
    };
    Group::from_snapshot("g", snapshot, GroupConfig::default(), 0).unwrap()
}

fn rejoin(owned: &[i32]) -> ClassicJoin {
    ClassicJoin {
        member_id: "k".into(),
        rebalance_timeout_ms: 30_000,
        session_timeout_ms: 10_000,
        protocol_type: "consumer".into(),
        protocols: vec![("range".into(), sub(owned))],
        client_id: "ck".into(),
        ..ClassicJoin::default()
    }
}

fn synced(g: &mut ConsumerGroup, generation: i32, now: i64) -> Vec<(String, Vec<i32>)> {
    let b = g
        .classic_sync(
            "k",
            None,
            generation,
            Some("consumer"),
            Some("range"),
            &topics(),
            now,
        )
        .unwrap();
    decode_assignment(&b).unwrap().partitions
}

fn generation(a: ClassicJoinAnswer) -> i32 {
    match a {
        ClassicJoinAnswer::Joined { generation_id, .. } => generation_id,
        other => panic!("not joined: {other:?}"),
    }
}

/// No partition is held by two members, assigned or pending revocation.
fn assert_held_once(g: &ConsumerGroup) {
    let mut seen = std::collections::BTreeSet::new();
    for m in g.members().values() {
        for tp in m.assignment.holds() {
            assert!(seen.insert(tp), "{tp:?} held twice");
        }
    }
}

fn consumer_join() -> HeartbeatRequest {
    HeartbeatRequest {
        member_id: "m".into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Assignment::new()),
        ..HeartbeatRequest::default()
    }
}

#[test]
fn a_classic_group_is_upgraded_served_and_downgraded() {
    let cfg = ConsumerGroupConfig::default();
    let topics = topics();
    let (mut g, records) = ConsumerGroup::from_classic(&classic_group(), &topics, &cfg, 0).unwrap();
    assert!(!records.is_empty());
    assert_eq!(g.epoch(), Epoch::new(3));
    let k = &g.members()["k"];
    assert_eq!(k.assignment.epoch, Epoch::new(3));
    assert_eq!(k.assignment.assigned[&T].len(), 4);
    assert_eq!(k.meta.classic.as_ref().unwrap().session_timeout_ms, 10_000);
    // A coordinator replaying the records holds the same group.
    let mut replayed = ConsumerGroup::new("g");
    for r in &records {
        replayed.replay(r);
    }
    assert_eq!(replayed.members(), g.members());

    // The consumer-protocol member joins: nothing until k lets go.
    let (answer, _) = g.heartbeat(&consumer_join(), &topics, &cfg, 0).unwrap();
    assert_eq!(answer.member_epoch, Epoch::new(4));
    assert_eq!(answer.assignment, Some(Assignment::new()));
    assert_held_once(&g);
    // k is told to rejoin; an old generation is refused.
    let e = g.classic_heartbeat("k", None, 3, 1).unwrap_err();
    assert_eq!(e.code, ErrorCode::RebalanceInProgress);
    let e = g.classic_heartbeat("k", None, 2, 1).unwrap_err();
    assert_eq!(e.code, ErrorCode::IllegalGeneration);
    // Rejoining while it still owns everything: it keeps its epoch and is
    // given only what stays with it.
    let (a, _) = g
        .classic_join(&rejoin(&[0, 1, 2, 3]), &topics, &cfg, 2)
        .unwrap();
    assert_eq!(generation(a), 3);
    let kept = synced(&mut g, 3, 2);
    assert_eq!(kept.len(), 1);
    let kept_partitions = kept[0].1.clone();
    assert_eq!(kept_partitions.len(), 2);
    assert_held_once(&g);
    let e = g.classic_heartbeat("k", None, 3, 3).unwrap_err();
    assert_eq!(e.code, ErrorCode::RebalanceInProgress);
    // The consumer member still gets nothing: k has not let go.
    let req = HeartbeatRequest {
        member_epoch: 4,
        rebalance_timeout_ms: -1,
        subscribed_topic_names: None,
        ..consumer_join()
    };
    let (answer, _) = g.heartbeat(&req, &topics, &cfg, 3).unwrap();
    assert_eq!(answer.assignment, None);
    // k gives up the rest and joins again: it is at the group's epoch.
    let (a, _) = g
        .classic_join(&rejoin(&kept_partitions), &topics, &cfg, 4)
        .unwrap();
    assert_eq!(generation(a), 4);
    assert_eq!(synced(&mut g, 4, 4), kept);
    g.classic_heartbeat("k", None, 4, 5).unwrap();
    // A commit at the old generation is refused as Kafka refuses it.
    assert_eq!(
        g.check_offset_commit("k", 3, [(T, kept_partitions[0])]),
        Err(ErrorCode::IllegalGeneration)
    );
    g.check_offset_commit("k", 4, [(T, kept_partitions[0])])
        .unwrap();
    // Now the consumer member takes the other two.
    let (answer, _) = g.heartbeat(&req, &topics, &cfg, 6).unwrap();
    let mine = answer.assignment.expect("told its partitions");
    assert_eq!(mine[&T].len(), 2);
    assert!(mine[&T].iter().all(|p| !kept_partitions.contains(p)));
    assert_held_once(&g);

    // The consumer member leaves: k alone is a classic group again, at
    // the group's epoch, holding its target.
    let leave = HeartbeatRequest {
        member_epoch: -1,
        ..consumer_join()
    };
    let (_, records) = g.heartbeat(&leave, &topics, &cfg, 7).unwrap();
    assert!(!records.is_empty());
    let snapshot = g.take_downgrade().expect("downgraded");
    assert!(g.members().is_empty());
    assert_eq!(snapshot.generation_id, 4);
    assert_eq!(snapshot.protocol_name.as_deref(), Some("range"));
    assert_eq!(snapshot.leader.as_deref(), Some("k"));
    assert_eq!(snapshot.members.len(), 1);
    // Its target when the group ended (recomputed in the classic group's
    // rebalance).
    let a = decode_assignment(&snapshot.members[0].assignment).unwrap();
    assert_eq!(a.partitions, kept);
    let classic = Group::from_snapshot("g", snapshot, GroupConfig::default(), 7).unwrap();
    assert_eq!(classic.generation_id(), 4);
}

#[test]
fn the_policy_decides_whether_groups_with_members_move() {
    let topics = topics();
    for (policy, upgrades, downgrades) in [
        (MigrationPolicy::Bidirectional, true, true),
        (MigrationPolicy::Upgrade, true, false),
        (MigrationPolicy::Downgrade, false, true),
        (MigrationPolicy::Disabled, false, false),
    ] {
        let cfg = ConsumerGroupConfig {
            migration: policy,
            ..ConsumerGroupConfig::default()
        };
        match ConsumerGroup::from_classic(&classic_group(), &topics, &cfg, 0) {
            Ok(_) => assert!(upgrades, "{policy:?}"),
            Err(e) => {
                assert!(!upgrades, "{policy:?}");
                assert_eq!(e.code, ErrorCode::GroupIdNotFound);
                assert_eq!(
                    e.message,
                    "Cannot upgrade classic group g to consumer group because online upgrade is disabled."
                );
            }
        }
        // A classic member joins a consumer-protocol group whatever the
        // policy; when the last consumer-protocol member leaves, the group
        // goes back to classic only if the policy allows.
        let mut g = ConsumerGroup::new("g");
        g.heartbeat(&consumer_join(), &topics, &cfg, 0).unwrap();
        let join = ClassicJoin {
            member_id: String::new(),
            fresh_id: "k".into(),
            ..rejoin(&[])
        };
        g.classic_join(&join, &topics, &cfg, 0).unwrap();
        let leave = HeartbeatRequest {
            member_epoch: -1,
            ..consumer_join()
        };
        g.heartbeat(&leave, &topics, &cfg, 1).unwrap();
        assert_eq!(g.take_downgrade().is_some(), downgrades, "{policy:?}");
        assert_eq!(g.members().contains_key("k"), !downgrades, "{policy:?}");
    }
}

#[test]
fn classic_members_are_checked_as_kafka_checks_them() {
    let cfg = ConsumerGroupConfig::default();
    let topics = topics();
    let mut g = ConsumerGroup::new("g");
    g.heartbeat(&consumer_join(), &topics, &cfg, 0).unwrap();
    // JoinGroup v4+ without an id: an id is handed out first.
    let first = ClassicJoin {
        member_id: String::new(),
        fresh_id: "k".into(),
        requires_known_member_id: true,
        ..rejoin(&[])
    };
    let (a, records) = g.classic_join(&first, &topics, &cfg, 0).unwrap();
    assert_eq!(
        a,
        ClassicJoinAnswer::MemberIdRequired {
            member_id: "k".into()
        }
    );
    assert!(records.is_empty());
    // Not the consumer protocol type, or no protocol the others support.
    let other_type = ClassicJoin {
        protocol_type: "connect".into(),
        ..rejoin(&[])
    };
    let e = g.classic_join(&other_type, &topics, &cfg, 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::InconsistentGroupProtocol);
    let long_session = ClassicJoin {
        session_timeout_ms: 45_000,
        ..rejoin(&[])
    };
    g.classic_join(&long_session, &topics, &cfg, 0).unwrap();
    let roundrobin = ClassicJoin {
        member_id: "k2".into(),
        protocols: vec![("roundrobin".into(), sub(&[]))],
        ..rejoin(&[])
    };
    let e = g.classic_join(&roundrobin, &topics, &cfg, 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::InconsistentGroupProtocol);
    // SyncGroup and Heartbeat: unknown members, consumer-protocol members,
    // other protocol names.
    let e = g.classic_heartbeat("nobody", None, 1, 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownMemberId);
    let e = g.classic_heartbeat("m", None, 1, 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownMemberId);
    let epoch = g.members()["k"].assignment.epoch.get();
    let e = g
        .classic_sync("k", None, epoch, None, Some("sticky"), &topics, 0)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InconsistentGroupProtocol);
    // A classic member that misses its sync is removed at its rebalance
    // timeout.
    assert!(g.tick(29_999, &topics, &cfg).is_empty());
    assert!(!g.tick(30_000, &topics, &cfg).is_empty());
    assert!(!g.members().contains_key("k"));
}

#[test]
fn bad_classic_metadata_is_refused_not_trusted() {
    let cfg = ConsumerGroupConfig::default();
    let topics = topics();
    let mut g = ConsumerGroup::new("g");
    g.heartbeat(&consumer_join(), &topics, &cfg, 0).unwrap();
    let junk = ClassicJoin {
        protocols: vec![(
            "range".into(),
            Bytes::from_static(&[0, 1, 0x7f, 0xff, 0xff, 0xff]),
        )],
        ..rejoin(&[])
    };
    let e = g.classic_join(&junk, &topics, &cfg, 0).unwrap_err();
    assert_eq!(e.code, ErrorCode::UnknownServerError);
    assert!(!g.members().contains_key("k"));
}
