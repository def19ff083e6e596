//! The KIP-848 consumer protocol held side by side with the reference
//! Apache Kafka: one node of each, the same raw requests, the answers a
//! client observes written down as facts (see `differential.rs`).
//!
//! Members choose their own ids (ConsumerGroupHeartbeat v1, KIP-1082), so
//! ids are facts too; topic ids differ between the servers and are written
//! as the topic's name.
//!
//! Needs the reference Kafka: `compat-tests/scripts/fetch-kafka.sh`.

mod common;

use common::facts::{compare, note, Facts};
use common::{creatable_topic, create_topics, eventually, strand_bin, Client};
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest, ConsumerGroupHeartbeatResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    ListGroupsRequest, ListGroupsResponse, MetadataRequest, MetadataResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;
use std::time::Duration;
use strand_compat_tests::cluster::{Cluster, ClusterSpec, KafkaDist, Server};
use strand_group::consumer::embedded;

/// Both servers get these, so that what differs is the implementation.
const SETTINGS: &[(&str, &str)] = &[
    ("auto.create.topics.enable", "false"),
    ("offsets.topic.replication.factor", "1"),
    ("group.initial.rebalance.delay.ms", "0"),
    // Kafka 4.4 computes a group's target assignment at most once a second
    // (KIP-1263) off its thread; Strand computes it in the heartbeat that
    // needs it. Both compute at once here, so that answers follow requests.
    ("group.consumer.assignment.interval.ms", "0"),
    ("group.consumer.min.assignment.interval.ms", "0"),
    ("group.consumer.assignor.offload.enable", "false"),
];

/// Facts that differ on purpose: (fact, why). Each one is in COMPATIBILITY.md.
const KNOWN: &[(&str, &str)] = &[];

fn start_with(server: Server, settings: &[(&str, &str)]) -> Cluster {
    let name = server.name();
    let mut spec = ClusterSpec::combined(1);
    for (k, v) in settings {
        spec = spec.with_override(*k, *v);
    }
    Cluster::start_server(server, spec).unwrap_or_else(|e| panic!("starting {name}: {e}"))
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Topic ids by name, and back (Metadata v12).
struct Topics {
    by_id: BTreeMap<uuid::Uuid, String>,
    by_name: BTreeMap<String, uuid::Uuid>,
}

impl Topics {
    fn read(c: &mut Client) -> Topics {
        let r: MetadataResponse = c
            .call(
                ApiKey::Metadata,
                12,
                &MetadataRequest::default().with_topics(None),
            )
            .expect("Metadata");
        let mut t = Topics {
            by_id: BTreeMap::new(),
            by_name: BTreeMap::new(),
        };
        for topic in r.topics {
            if let Some(name) = topic.name {
                t.by_id.insert(topic.topic_id, name.to_string());
                t.by_name.insert(name.to_string(), topic.topic_id);
            }
        }
        t
    }

    fn name(&self, id: &uuid::Uuid) -> String {
        self.by_id
            .get(id)
            .cloned()
            .unwrap_or_else(|| "(unknown topic id)".into())
    }
}

/// A member's view of one heartbeat: what the tests note (through Debug).
#[allow(dead_code)]
#[derive(Debug)]
struct Beat {
    error: i16,
    message: Option<String>,
    member_epoch: i32,
    heartbeat_interval_ms: i32,
    /// (topic, partitions), or None when the answer has no assignment.
    assignment: Option<Vec<(String, Vec<i32>)>>,
}

struct Member {
    id: String,
    epoch: i32,
    /// What the member holds now (as it reports in TopicPartitions).
    owned: Vec<(String, Vec<i32>)>,
}

impl Member {
    fn new(id: &str) -> Member {
        Member {
            id: id.into(),
            epoch: 0,
            owned: Vec::new(),
        }
    }
}

/// The fields a join (epoch 0) sends; later heartbeats send only what
/// changed, as the Java client does (null for unchanged fields).
#[derive(Default, Clone)]
struct Join<'a> {
    topics: Option<&'a [&'a str]>,
    regex: Option<&'a str>,
    assignor: Option<&'a str>,
    instance_id: Option<&'a str>,
}

fn heartbeat_raw(
    c: &mut Client,
    req: &ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    c.call(ApiKey::ConsumerGroupHeartbeat, 1, req)
        .expect("ConsumerGroupHeartbeat")
}

fn beat_of(r: ConsumerGroupHeartbeatResponse, topics: &Topics) -> Beat {
    Beat {
        error: r.error_code,
        message: r.error_message.map(|m| m.to_string()),
        member_epoch: r.member_epoch,
        heartbeat_interval_ms: r.heartbeat_interval_ms,
        assignment: r.assignment.map(|a| {
            let mut v: Vec<(String, Vec<i32>)> = a
                .topic_partitions
                .iter()
                .map(|tp| {
                    let mut p = tp.partitions.clone();
                    p.sort();
                    (topics.name(&tp.topic_id), p)
                })
                .collect();
            v.sort();
            v
        }),
    }
}

/// One heartbeat of `m` in `group`: a join when its epoch is 0 (with
/// `join`), otherwise reporting what it owns. The member takes the answer:
/// its epoch, and the assignment as what it owns next (a client revokes and
/// takes up partitions at once here).
fn beat(c: &mut Client, topics: &Topics, group: &str, m: &mut Member, join: &Join<'_>) -> Beat {
    let joining = m.epoch == 0;
    let mut req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(&m.id))
        .with_member_epoch(m.epoch)
        .with_instance_id(join.instance_id.map(s))
        .with_rebalance_timeout_ms(if joining { 30_000 } else { -1 })
        .with_topic_partitions(Some(
            m.owned
                .iter()
                .map(|(t, p)| {
                    TopicPartitions::default()
                        .with_topic_id(topics.by_name[t])
                        .with_partitions(p.clone())
                })
                .collect(),
        ));
    if joining {
        req.subscribed_topic_names = join
            .topics
            .map(|t| t.iter().map(|n| TopicName(s(n))).collect());
        req.subscribed_topic_regex = join.regex.map(s);
        req.server_assignor = join.assignor.map(s);
    }
    let b = beat_of(heartbeat_raw(c, &req), topics);
    if b.error == 0 {
        m.epoch = b.member_epoch;
        if let Some(a) = &b.assignment {
            m.owned = a.clone();
        }
    }
    b
}

fn describe(c: &mut Client, topics: &Topics, groups: &[&str]) -> Vec<String> {
    let r: ConsumerGroupDescribeResponse = c
        .call(
            ApiKey::ConsumerGroupDescribe,
            1,
            &ConsumerGroupDescribeRequest::default()
                .with_group_ids(groups.iter().map(|g| GroupId(s(g))).collect()),
        )
        .expect("ConsumerGroupDescribe");
    let assignment =
        |a: &kafka_protocol::messages::consumer_group_describe_response::Assignment| {
            let mut v: Vec<(String, String, Vec<i32>)> = a
                .topic_partitions
                .iter()
                .map(|tp| {
                    let mut p = tp.partitions.clone();
                    p.sort();
                    (topics.name(&tp.topic_id), tp.topic_name.to_string(), p)
                })
                .collect();
            v.sort();
            v
        };
    r.groups
        .iter()
        .map(|g| {
            let mut members: Vec<String> = g
                .members
                .iter()
                .map(|m| {
                    format!(
                        "{} instance {:?} rack {:?} epoch {} client {} subscribed {:?} regex {:?} \
                         assignment {:?} target {:?} type {}",
                        m.member_id,
                        m.instance_id,
                        m.rack_id,
                        m.member_epoch,
                        m.client_id,
                        m.subscribed_topic_names
                            .iter()
                            .map(|t| t.to_string())
                            .collect::<Vec<_>>(),
                        m.subscribed_topic_regex,
                        assignment(&m.assignment),
                        assignment(&m.target_assignment),
                        m.member_type,
                    )
                })
                .collect();
            members.sort();
            format!(
                "{} error {} {:?} state {} epoch {} assignment epoch {} assignor {} members {:?}",
                g.group_id.0,
                g.error_code,
                g.error_message,
                g.group_state,
                g.group_epoch,
                g.assignment_epoch,
                g.assignor_name,
                members
            )
        })
        .collect()
}

fn list(c: &mut Client, types: &[&str], states: &[&str]) -> (i16, Vec<String>) {
    let r: ListGroupsResponse = c
        .call(
            ApiKey::ListGroups,
            5,
            &ListGroupsRequest::default()
                .with_types_filter(types.iter().map(|t| s(t)).collect())
                .with_states_filter(states.iter().map(|t| s(t)).collect()),
        )
        .expect("ListGroups");
    let mut groups: Vec<String> = r
        .groups
        .iter()
        .map(|g| {
            format!(
                "{} type {} protocol {} state {}",
                g.group_id.0, g.group_type, g.protocol_type, g.group_state
            )
        })
        .collect();
    groups.sort();
    (r.error_code, groups)
}

fn describe_classic(c: &mut Client, group: &str, version: i16) -> String {
    let r: DescribeGroupsResponse = c
        .call(
            ApiKey::DescribeGroups,
            version,
            &DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]),
        )
        .expect("DescribeGroups");
    let g = &r.groups[0];
    let mut members: Vec<String> = g
        .members
        .iter()
        .map(|m| {
            format!(
                "{} instance {:?} client {} metadata {:?} assignment {:?}",
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.member_metadata,
                m.member_assignment
            )
        })
        .collect();
    members.sort();
    format!(
        "error {} {:?} state {} protocol type {} protocol {} members {:?}",
        g.error_code, g.error_message, g.group_state, g.protocol_type, g.protocol_data, members
    )
}

fn commit(
    c: &mut Client,
    group: &str,
    member: &str,
    epoch: i32,
    topic: &str,
    offset: i64,
) -> Vec<i16> {
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    let r: OffsetCommitResponse = c
        .call(
            ApiKey::OffsetCommit,
            9,
            &OffsetCommitRequest::default()
                .with_group_id(GroupId(s(group)))
                .with_member_id(s(member))
                .with_generation_id_or_member_epoch(epoch)
                .with_topics(vec![OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(vec![OffsetCommitRequestPartition::default()
                        .with_partition_index(0)
                        .with_committed_offset(offset)])]),
        )
        .expect("OffsetCommit");
    r.topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect()
}

fn fetch_committed(
    c: &mut Client,
    group: &str,
    member: Option<&str>,
    epoch: i32,
    topic: &str,
) -> String {
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopics,
    };
    let r: OffsetFetchResponse = c
        .call(
            ApiKey::OffsetFetch,
            9,
            &OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
                .with_group_id(GroupId(s(group)))
                .with_member_id(member.map(s))
                .with_member_epoch(epoch)
                .with_topics(Some(vec![OffsetFetchRequestTopics::default()
                    .with_name(TopicName(s(topic)))
                    .with_partition_indexes(vec![0])]))]),
        )
        .expect("OffsetFetch");
    let g = &r.groups[0];
    let parts: Vec<(i32, i64, i16)> = g
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.partition_index, p.committed_offset, p.error_code))
        })
        .collect();
    format!("error {} partitions {:?}", g.error_code, parts)
}

/// Two members of one group over a 4-partition topic: joins, the hand-over
/// when the second arrives (revocation first), describe and list answers,
/// commits and fetches with good, stale and unknown epochs, bad requests,
/// a static member, leaving.
fn consumer_groups(c: &mut Client, facts: &mut Facts) {
    for (topic, partitions) in [("cg-a", 4), ("cg-b", 2), ("cg-one", 1)] {
        let code = create_topics(c, vec![creatable_topic(topic, partitions, 1, &[])])
            .expect("CreateTopics")
            .topics[0]
            .error_code;
        assert_eq!(code, 0, "CreateTopics {topic}");
    }
    let topics = eventually("the topics' ids", Duration::from_secs(30), || {
        let t = Topics::read(c);
        (t.by_name.len() >= 3).then_some(t)
    });
    let g = "cg";
    let sub: &[&str] = &["cg-a"];
    let join = Join {
        topics: Some(sub),
        assignor: Some("uniform"),
        ..Join::default()
    };
    let mut a = Member::new("member-a-0000000000000");
    let first = first_beat(c, &topics, g, &mut a, &join);
    note(facts, "a joins", &first);
    note(facts, "a confirms", beat(c, &topics, g, &mut a, &join));
    let mut b = Member::new("member-b-0000000000000");
    note(facts, "b joins", beat(c, &topics, g, &mut b, &join));
    note(facts, "describe while b waits", describe(c, &topics, &[g]));
    note(
        facts,
        "a told to revoke",
        beat(c, &topics, g, &mut a, &join),
    );
    note(facts, "a revoked", beat(c, &topics, g, &mut a, &join));
    note(facts, "b takes up", beat(c, &topics, g, &mut b, &join));
    note(facts, "b confirms", beat(c, &topics, g, &mut b, &join));
    note(facts, "a steady", beat(c, &topics, g, &mut a, &join));
    note(facts, "describe stable", describe(c, &topics, &[g, "nope"]));

    // Subscription change: b adds cg-b (the Java client sends the new list).
    let mut req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(g)))
        .with_member_id(s(&b.id))
        .with_member_epoch(b.epoch)
        .with_rebalance_timeout_ms(-1)
        .with_subscribed_topic_names(Some(vec![TopicName(s("cg-a")), TopicName(s("cg-b"))]));
    req.topic_partitions = None;
    let r = beat_of(heartbeat_raw(c, &req), &topics);
    if r.error == 0 {
        b.epoch = r.member_epoch;
        if let Some(x) = &r.assignment {
            b.owned = x.clone();
        }
    }
    note(facts, "b subscribes to cg-b too", &r);
    note(
        facts,
        "a after b's change",
        beat(c, &topics, g, &mut a, &join),
    );
    note(
        facts,
        "b after its change",
        beat(c, &topics, g, &mut b, &join),
    );
    note(
        facts,
        "a after b's change, again",
        beat(c, &topics, g, &mut a, &join),
    );

    note(facts, "list all", list(c, &[], &[]));
    note(facts, "list consumer", list(c, &["consumer"], &[]));
    note(facts, "list CONSUMER", list(c, &["CONSUMER"], &[]));
    note(facts, "list classic", list(c, &["classic"], &[]));
    note(facts, "list stable", list(c, &[], &["stable"]));
    note(facts, "list empty", list(c, &[], &["Empty"]));
    note(facts, "describe groups v5", describe_classic(c, g, 5));
    note(
        facts,
        "describe groups v5 nope",
        describe_classic(c, "nope", 5),
    );
    note(facts, "describe groups v6", describe_classic(c, g, 6));
    note(
        facts,
        "describe groups v6 nope",
        describe_classic(c, "nope", 6),
    );

    note(
        facts,
        "commit a good",
        commit(c, g, &a.id, a.epoch, "cg-a", 5),
    );
    note(
        facts,
        "commit a stale",
        commit(c, g, &a.id, a.epoch - 1, "cg-a", 6),
    );
    note(
        facts,
        "commit a ahead",
        commit(c, g, &a.id, a.epoch + 1, "cg-a", 6),
    );
    note(
        facts,
        "commit unknown member",
        commit(c, g, "nobody", 1, "cg-a", 6),
    );
    note(
        facts,
        "commit empty member",
        commit(c, g, "", -1, "cg-a", 6),
    );
    note(
        facts,
        "fetch a good",
        fetch_committed(c, g, Some(&a.id), a.epoch, "cg-a"),
    );
    note(
        facts,
        "fetch a stale",
        fetch_committed(c, g, Some(&a.id), a.epoch - 1, "cg-a"),
    );
    note(
        facts,
        "fetch unknown member",
        fetch_committed(c, g, Some("nobody"), 3, "cg-a"),
    );
    note(
        facts,
        "fetch no member",
        fetch_committed(c, g, None, -1, "cg-a"),
    );

    // Bad requests.
    let bad = |c: &mut Client,
               label: &str,
               facts: &mut Facts,
               edit: &dyn Fn(&mut ConsumerGroupHeartbeatRequest)| {
        let mut req = ConsumerGroupHeartbeatRequest::default()
            .with_group_id(GroupId(s(g)))
            .with_member_id(s("member-x-0000000000000"))
            .with_member_epoch(0)
            .with_rebalance_timeout_ms(30_000)
            .with_subscribed_topic_names(Some(vec![TopicName(s("cg-a"))]))
            .with_topic_partitions(Some(Vec::new()));
        edit(&mut req);
        note(facts, label, beat_of(heartbeat_raw(c, &req), &topics));
    };
    bad(c, "bad: empty member id", facts, &|r| r.member_id = s(""));
    bad(c, "bad: empty group id", facts, &|r| {
        r.group_id = GroupId(s(""))
    });
    bad(c, "bad: no rebalance timeout", facts, &|r| {
        r.rebalance_timeout_ms = -1
    });
    bad(c, "bad: null topic partitions", facts, &|r| {
        r.topic_partitions = None
    });
    bad(c, "bad: no subscription", facts, &|r| {
        r.subscribed_topic_names = None
    });
    bad(c, "bad: unknown assignor", facts, &|r| {
        r.server_assignor = Some(s("sticky"))
    });
    bad(c, "bad: regex", facts, &|r| {
        r.subscribed_topic_names = None;
        r.subscribed_topic_regex = Some(s("cg-(a"));
    });
    for (label, re) in [
        ("bad: regex, no argument", "*cg"),
        ("bad: regex, open class", "cg-[ab"),
        ("bad: regex, stray paren", "cg-a)"),
    ] {
        bad(c, label, facts, &|r| {
            r.subscribed_topic_names = None;
            r.subscribed_topic_regex = Some(s(re));
        });
    }
    bad(c, "bad: epoch -3", facts, &|r| r.member_epoch = -3);
    bad(c, "bad: static leave without instance", facts, &|r| {
        r.member_epoch = -2
    });
    bad(c, "bad: empty instance id", facts, &|r| {
        r.instance_id = Some(s(""))
    });
    bad(c, "bad: unknown member epoch 3", facts, &|r| {
        r.member_id = s("nobody-00000000000000");
        r.member_epoch = 3;
    });
    let mut stale = Member {
        id: a.id.clone(),
        epoch: a.epoch + 5,
        owned: a.owned.clone(),
    };
    note(
        facts,
        "a ahead of its epoch",
        beat(c, &topics, g, &mut stale, &join),
    );
    note(facts, "describe after fencing", describe(c, &topics, &[g]));

    // b leaves; a (fenced, so rejoining) takes everything over.
    note(facts, "b leaves", leave(c, &topics, g, &b.id));
    note(facts, "describe after b left", describe(c, &topics, &[g]));
    a.epoch = 0;
    a.owned.clear();
    note(facts, "a rejoins", beat(c, &topics, g, &mut a, &join));
    note(
        facts,
        "a rejoined, again",
        beat(c, &topics, g, &mut a, &join),
    );

    // A static member, its leave for now (-2), and the same instance back
    // under a new member id.
    let sg = "cg-static";
    let sjoin = Join {
        topics: Some(sub),
        instance_id: Some("instance-1"),
        ..Join::default()
    };
    let mut s1 = Member::new("member-s1-000000000000");
    note(facts, "static joins", beat(c, &topics, sg, &mut s1, &sjoin));
    note(
        facts,
        "static confirms",
        beat(c, &topics, sg, &mut s1, &sjoin),
    );
    let park = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(sg)))
        .with_member_id(s(&s1.id))
        .with_instance_id(Some(s("instance-1")))
        .with_member_epoch(-2);
    note(
        facts,
        "static leaves for now",
        beat_of(heartbeat_raw(c, &park), &topics),
    );
    note(facts, "describe parked", describe(c, &topics, &[sg]));
    let mut s2 = Member::new("member-s2-000000000000");
    note(
        facts,
        "static back as s2",
        beat(c, &topics, sg, &mut s2, &sjoin),
    );
    let mut s3 = Member::new("member-s3-000000000000");
    note(
        facts,
        "instance taken",
        beat(c, &topics, sg, &mut s3, &sjoin),
    );
    note(facts, "describe static", describe(c, &topics, &[sg]));

    // A regex subscription (resolved asynchronously by Kafka: the answers
    // are awaited until the member holds partitions).
    let rg = "cg-regex";
    let rjoin = Join {
        regex: Some("cg-.*"),
        ..Join::default()
    };
    let mut r1 = Member::new("member-r1-000000000000");
    note(facts, "regex joins", beat(c, &topics, rg, &mut r1, &rjoin));
    let error = eventually("the regex resolved", Duration::from_secs(30), || {
        let b = beat(c, &topics, rg, &mut r1, &rjoin);
        (b.error != 0 || !r1.owned.is_empty()).then_some(b.error)
    });
    note(facts, "regex member's assignment", (error, &r1.owned));
    note(facts, "describe regex", describe(c, &topics, &[rg]));

    // Names and a regex at once (as librdkafka subscribes to a literal
    // topic and a pattern): the names are assigned in the join's answer,
    // the regex's topics once it is resolved.
    let mg = "cg-mixed";
    let names: &[&str] = &["cg-b"];
    let mjoin = Join {
        topics: Some(names),
        regex: Some("cg-a"),
        ..Join::default()
    };
    let mut m1 = Member::new("member-m1-000000000000");
    note(facts, "mixed joins", beat(c, &topics, mg, &mut m1, &mjoin));
    let error = eventually("the mixed regex resolved", Duration::from_secs(30), || {
        let b = beat(c, &topics, mg, &mut m1, &mjoin);
        (b.error != 0 || m1.owned.len() == 2).then_some(b.error)
    });
    note(facts, "mixed member's assignment", (error, &m1.owned));
    note(facts, "describe mixed", describe(c, &topics, &[mg]));

    // The group's end: refused while it has members; once its last member
    // left, deleted (and described as missing), or taken over by a classic
    // member.
    note(facts, "delete a group with members", delete_group(c, mg));
    note(
        facts,
        "classic join into a group with members",
        classic_join(c, mg),
    );
    note(
        facts,
        "last member of the mixed group leaves",
        leave(c, &topics, mg, &m1.id).error,
    );
    note(facts, "delete an empty group", delete_group(c, mg));
    note(
        facts,
        "describe a deleted group",
        describe(c, &topics, &[mg]),
    );
    note(
        facts,
        "last member of the regex group leaves",
        leave(c, &topics, rg, &r1.id).error,
    );
    note(
        facts,
        "classic join into an empty group",
        classic_join(c, rg),
    );
    // (What the group lists as until the classic member completes its
    // join is not noted: Kafka answered both ways in two runs.)
    // A consumer join the group refuses (its regex does not parse) leaves
    // the classic group as it was.
    let bad = Join {
        regex: Some("cg-("),
        ..Join::default()
    };
    let mut r0 = Member::new("member-r0-000000000000");
    note(
        facts,
        "refused consumer join into an empty classic group",
        beat(c, &topics, rg, &mut r0, &bad),
    );
    note(
        facts,
        "the classic group after the refused join",
        list(c, &["classic"], &[]),
    );
    let mut r2 = Member::new("member-r2-000000000000");
    note(
        facts,
        "consumer join into an empty classic group",
        beat(c, &topics, rg, &mut r2, &join),
    );
    note(
        facts,
        "list after the consumer join",
        list(c, &["consumer"], &[]),
    );
}

/// A member's leave for good (epoch -1).
fn leave(c: &mut Client, topics: &Topics, group: &str, member: &str) -> Beat {
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member))
        .with_member_epoch(-1);
    beat_of(heartbeat_raw(c, &req), topics)
}

fn delete_group(c: &mut Client, group: &str) -> Vec<i16> {
    use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};
    let r: DeleteGroupsResponse = c
        .call(
            ApiKey::DeleteGroups,
            2,
            &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s(group))]),
        )
        .expect("DeleteGroups");
    r.results.iter().map(|g| g.error_code).collect()
}

/// A classic JoinGroup (v5, so a first join is told to come back with
/// the member id it is given: MEMBER_ID_REQUIRED when accepted).
fn classic_join(c: &mut Client, group: &str) -> i16 {
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
    let r: JoinGroupResponse = c
        .call(
            ApiKey::JoinGroup,
            5,
            &JoinGroupRequest::default()
                .with_group_id(GroupId(s(group)))
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(10_000)
                .with_protocol_type(s("consumer"))
                .with_protocols(vec![JoinGroupRequestProtocol::default()
                    .with_name(s("range"))
                    .with_metadata(bytes::Bytes::from_static(&[
                        0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                    ]))]),
        )
        .expect("JoinGroup");
    r.error_code
}

/// A ConsumerProtocolSubscription v1: topics, no user data, owned
/// partitions (Strand's codec; Kafka decodes the same bytes).
fn subscription(topics: &[&str], owned: &[(&str, Vec<i32>)]) -> bytes::Bytes {
    embedded::encode_subscription(&embedded::Subscription {
        version: 1,
        topics: topics.iter().map(|t| t.to_string()).collect(),
        owned: owned
            .iter()
            .map(|(t, p)| (t.to_string(), p.clone()))
            .collect(),
        ..embedded::Subscription::default()
    })
}

/// A ConsumerProtocolAssignment's partitions, sorted (none if unreadable).
fn assignment_of(b: &[u8]) -> Vec<(String, Vec<i32>)> {
    let mut out = embedded::decode_assignment(b)
        .map(|a| a.partitions)
        .unwrap_or_default();
    for (_, ps) in &mut out {
        ps.sort();
    }
    out.sort();
    out
}

/// A classic member (JoinGroup v5, SyncGroup v3, Heartbeat v3), its id
/// written as `name` in facts: ids are the server's choice.
struct ClassicMember {
    name: &'static str,
    id: String,
    generation: i32,
    protocol: Option<String>,
    owned: Vec<(String, Vec<i32>)>,
}

impl ClassicMember {
    /// `text` with the member's id written as its name.
    fn mask(&self, text: String) -> String {
        if self.id.is_empty() {
            text
        } else {
            text.replace(&self.id, self.name)
        }
    }

    /// JoinGroup: (error, generation, protocol type, protocol, leader is
    /// me, members listed).
    fn join(&mut self, c: &mut Client, group: &str, topics: &[&str]) -> String {
        use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
        use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
        let owned: Vec<(&str, Vec<i32>)> = self
            .owned
            .iter()
            .map(|(t, p)| (t.as_str(), p.clone()))
            .collect();
        let r: JoinGroupResponse = c
            .call(
                ApiKey::JoinGroup,
                5,
                &JoinGroupRequest::default()
                    .with_group_id(GroupId(s(group)))
                    .with_member_id(s(&self.id))
                    .with_session_timeout_ms(30_000)
                    .with_rebalance_timeout_ms(30_000)
                    .with_protocol_type(s("consumer"))
                    .with_protocols(vec![
                        JoinGroupRequestProtocol::default()
                            .with_name(s("cooperative-sticky"))
                            .with_metadata(subscription(topics, &owned)),
                        JoinGroupRequestProtocol::default()
                            .with_name(s("range"))
                            .with_metadata(subscription(topics, &owned)),
                    ]),
            )
            .expect("JoinGroup");
        self.id = r.member_id.to_string();
        if r.error_code == 0 {
            self.generation = r.generation_id;
            self.protocol = r.protocol_name.as_ref().map(|p| p.to_string());
        }
        self.mask(format!(
            "error {} generation {} type {:?} protocol {:?} leader {} members {}",
            r.error_code,
            r.generation_id,
            r.protocol_type.as_ref().map(|t| t.to_string()),
            r.protocol_name.as_ref().map(|t| t.to_string()),
            r.leader,
            r.members.len()
        ))
    }

    /// SyncGroup; as the leader, giving itself `assign`: (error, the
    /// partitions it is given). It then owns them.
    fn sync(&mut self, c: &mut Client, group: &str, assign: Option<&[(&str, Vec<i32>)]>) -> String {
        use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
        use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};
        let assignments = assign
            .map(|a| {
                let named: Vec<(String, Vec<i32>)> =
                    a.iter().map(|(t, p)| (t.to_string(), p.clone())).collect();
                vec![SyncGroupRequestAssignment::default()
                    .with_member_id(s(&self.id))
                    .with_assignment(embedded::encode_assignment(1, &named))]
            })
            .unwrap_or_default();
        let r: SyncGroupResponse = c
            .call(
                ApiKey::SyncGroup,
                5,
                &SyncGroupRequest::default()
                    .with_group_id(GroupId(s(group)))
                    .with_member_id(s(&self.id))
                    .with_generation_id(self.generation)
                    .with_protocol_type(Some(s("consumer")))
                    .with_protocol_name(self.protocol.as_deref().map(s))
                    .with_assignments(assignments),
            )
            .expect("SyncGroup");
        let got = assignment_of(&r.assignment);
        if r.error_code == 0 {
            self.owned = got.clone();
        }
        format!("error {} assignment {:?}", r.error_code, got)
    }

    fn heartbeat(&self, c: &mut Client, group: &str) -> i16 {
        use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};
        let r: HeartbeatResponse = c
            .call(
                ApiKey::Heartbeat,
                4,
                &HeartbeatRequest::default()
                    .with_group_id(GroupId(s(group)))
                    .with_member_id(s(&self.id))
                    .with_generation_id(self.generation),
            )
            .expect("Heartbeat");
        r.error_code
    }
}

/// ListGroups' line for `group`, if listed.
fn listed(c: &mut Client, group: &str) -> Vec<String> {
    list(c, &[], &[])
        .1
        .into_iter()
        .filter(|l| l.starts_with(group))
        .collect()
}

/// Online migration (group.consumer.migration.policy=bidirectional): a
/// classic group with a member taken over by a consumer-protocol member,
/// its classic member served in the mixed group, and the group back to
/// classic when the consumer-protocol member leaves.
fn migration(c: &mut Client, facts: &mut Facts) {
    let topics = Topics::read(c);
    let g = "cg-migrate";
    let mut k = ClassicMember {
        name: "classic-k",
        id: String::new(),
        generation: -1,
        protocol: None,
        owned: Vec::new(),
    };
    note(
        facts,
        "migrate: classic first join",
        k.join(c, g, &["cg-a"]),
    );
    let joined = k.join(c, g, &["cg-a"]);
    note(facts, "migrate: classic join with its id", joined);
    let all: &[(&str, Vec<i32>)] = &[("cg-a", vec![0, 1, 2, 3])];
    note(
        facts,
        "migrate: classic leader syncs",
        k.sync(c, g, Some(all)),
    );
    note(facts, "migrate: classic group listed", listed(c, g));
    // The upgrade: a consumer-protocol member joins the classic group.
    let sub: &[&str] = &["cg-a"];
    let join = Join {
        topics: Some(sub),
        assignor: Some("uniform"),
        ..Join::default()
    };
    let mut m = Member::new("member-mig-00000000000");
    note(
        facts,
        "migrate: consumer joins the classic group",
        beat(c, &topics, g, &mut m, &join),
    );
    note(facts, "migrate: mixed group listed", listed(c, g));
    note(
        facts,
        "migrate: mixed group described",
        k.mask(describe(c, &topics, &[g]).join("\n")),
    );
    note(
        facts,
        "migrate: DescribeGroups of the mixed group",
        describe_classic(c, g, 5),
    );
    note(
        facts,
        "migrate: classic heartbeat after the upgrade",
        k.heartbeat(c, g),
    );
    // The classic member rejoins owning what it holds (cooperative), then
    // again having given up what it was told to.
    note(
        facts,
        "migrate: classic rejoins owning all",
        k.join(c, g, &["cg-a"]),
    );
    note(
        facts,
        "migrate: classic syncs in the mixed group",
        k.sync(c, g, None),
    );
    note(
        facts,
        "migrate: classic heartbeat while revoking",
        k.heartbeat(c, g),
    );
    note(
        facts,
        "migrate: classic rejoins having revoked",
        k.join(c, g, &["cg-a"]),
    );
    note(facts, "migrate: classic syncs again", k.sync(c, g, None));
    note(
        facts,
        "migrate: classic heartbeat when stable",
        k.heartbeat(c, g),
    );
    note(
        facts,
        "migrate: consumer takes the released partitions",
        beat(c, &topics, g, &mut m, &join),
    );
    note(
        facts,
        "migrate: classic heartbeat after that",
        k.heartbeat(c, g),
    );
    note(
        facts,
        "migrate: mixed group described when stable",
        k.mask(describe(c, &topics, &[g]).join("\n")),
    );
    // The downgrade: the consumer-protocol member leaves.
    note(
        facts,
        "migrate: consumer leaves the mixed group",
        leave(c, &topics, g, &m.id).error,
    );
    note(
        facts,
        "migrate: group listed after the downgrade",
        listed(c, g),
    );
    note(
        facts,
        "migrate: ConsumerGroupDescribe after the downgrade",
        describe(c, &topics, &[g]),
    );
    note(
        facts,
        "migrate: classic heartbeat after the downgrade",
        k.heartbeat(c, g),
    );
    note(
        facts,
        "migrate: classic rejoins the classic group",
        k.join(c, g, &["cg-a"]),
    );
    note(
        facts,
        "migrate: classic leader syncs after the downgrade",
        k.sync(c, g, Some(all)),
    );
    note(
        facts,
        "migrate: classic group after the downgrade",
        k.mask(describe_classic(c, g, 5)),
    );
}

/// A GROUP config resource (type 32): DescribeConfigs and
/// IncrementalAlterConfigs answers, as `(error, message)` and entries by
/// name: `(name, value, source, read-only, type, synonyms)`.
fn describe_group_configs(
    c: &mut Client,
    group: &str,
    keys: Option<&[&str]>,
) -> (i16, Option<String>, Vec<String>) {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
    let r: DescribeConfigsResponse = c
        .call(
            ApiKey::DescribeConfigs,
            4,
            &DescribeConfigsRequest::default()
                .with_include_synonyms(true)
                .with_resources(vec![DescribeConfigsResource::default()
                    .with_resource_type(32)
                    .with_resource_name(s(group))
                    .with_configuration_keys(
                        keys.map(|ks| ks.iter().map(|k| s(k)).collect()),
                    )]),
        )
        .expect("DescribeConfigs");
    let res = &r.results[0];
    let mut entries: Vec<String> = res
        .configs
        .iter()
        .map(|e| {
            format!(
                "{} = {:?} source {} read-only {} type {} synonyms {:?}",
                e.name,
                e.value.as_ref().map(|v| v.to_string()),
                e.config_source,
                e.read_only,
                e.config_type,
                e.synonyms
                    .iter()
                    .map(|y| (
                        y.name.to_string(),
                        y.value.as_ref().map(|v| v.to_string()),
                        y.source
                    ))
                    .collect::<Vec<_>>()
            )
        })
        .collect();
    entries.sort();
    (
        res.error_code,
        res.error_message.as_ref().map(|m| m.to_string()),
        entries,
    )
}

fn alter_group_config(
    c: &mut Client,
    group: &str,
    key: &str,
    value: Option<&str>,
) -> (i16, String) {
    common::alter_config(c, 32, group, key, value)
}

/// Per-group settings (KIP-848's GROUP config resource): what a group
/// lists before anything is set, what is refused (names, values, the
/// bounds the broker's `group.consumer.min/max.*` settings put on them),
/// what a member is told once its group's heartbeat interval is set, and
/// what is left after the group is deleted.
fn group_configs(c: &mut Client, facts: &mut Facts) {
    let g = "cg-conf";
    // Each entry a fact of its own, by name (what a group lists at first).
    let (code, message, entries) = describe_group_configs(c, g, None);
    note(
        facts,
        "group configs of a group never seen",
        (code, message, entries.len()),
    );
    for e in entries {
        let name = e.split(' ').next().unwrap_or("").to_string();
        note(facts, format!("group config listed: {name}"), e);
    }
    for (label, key, value) in [
        (
            "session timeout within bounds",
            "consumer.session.timeout.ms",
            Some("50000"),
        ),
        (
            "session timeout below the minimum",
            "consumer.session.timeout.ms",
            Some("1000"),
        ),
        (
            "session timeout above the maximum",
            "consumer.session.timeout.ms",
            Some("70000"),
        ),
        (
            "heartbeat interval within bounds",
            "consumer.heartbeat.interval.ms",
            Some("6000"),
        ),
        (
            "heartbeat interval below the minimum",
            "consumer.heartbeat.interval.ms",
            Some("4000"),
        ),
        (
            "heartbeat interval above the maximum",
            "consumer.heartbeat.interval.ms",
            Some("20000"),
        ),
        (
            "heartbeat interval that is no number",
            "consumer.heartbeat.interval.ms",
            Some("often"),
        ),
        ("an unknown name", "consumer.no.such.config", Some("1")),
        (
            "a broker setting's name",
            "group.consumer.session.timeout.ms",
            Some("50000"),
        ),
        (
            "an unset config deleted",
            "streams.num.standby.replicas",
            None,
        ),
    ] {
        note(
            facts,
            format!("group config {label}"),
            alter_group_config(c, g, key, value),
        );
    }
    note(
        facts,
        "group config on an empty group name",
        alter_group_config(c, "", "consumer.session.timeout.ms", Some("50000")),
    );
    note(
        facts,
        "group configs of an empty group name",
        describe_group_configs(c, "", Some(&["consumer.session.timeout.ms"])),
    );
    note(
        facts,
        "group configs after the changes",
        describe_group_configs(
            c,
            g,
            Some(&[
                "consumer.session.timeout.ms",
                "consumer.heartbeat.interval.ms",
            ]),
        ),
    );
    // A member is told the group's own heartbeat interval (on a topic
    // made long before: a topic made just now may not be in Kafka's
    // coordinator's metadata yet).
    let topics = Topics::read(c);
    let sub: &[&str] = &["cg-b"];
    let join = Join {
        topics: Some(sub),
        ..Join::default()
    };
    let mut m = Member::new("member-conf-0000000000");
    note(
        facts,
        "a member of a group with its own heartbeat interval",
        beat(c, &topics, g, &mut m, &join),
    );
    note(
        facts,
        "the member leaves",
        leave(c, &topics, g, &m.id).error,
    );
    note(facts, "the group deleted", delete_group(c, g));
    note(
        facts,
        "group configs after the group's deletion",
        describe_group_configs(
            c,
            g,
            Some(&[
                "consumer.session.timeout.ms",
                "consumer.heartbeat.interval.ms",
            ]),
        ),
    );
}

/// The uniform assignor with partitions that do not divide evenly: one
/// partition, held by a member, when a member whose id sorts first joins.
fn odd_partitions(c: &mut Client, facts: &mut Facts) {
    let topics = Topics::read(c);
    let g = "cg-odd";
    let sub: &[&str] = &["cg-one"];
    let join = Join {
        topics: Some(sub),
        assignor: Some("uniform"),
        ..Join::default()
    };
    let mut holder = Member::new("member-z-old-000000000");
    note(
        facts,
        "odd: the first member joins",
        beat(c, &topics, g, &mut holder, &join),
    );
    let mut newcomer = Member::new("member-a-new-000000000");
    note(
        facts,
        "odd: a member that sorts first joins",
        beat(c, &topics, g, &mut newcomer, &join),
    );
    note(
        facts,
        "odd: the first member's next heartbeat",
        beat(c, &topics, g, &mut holder, &join),
    );
    note(
        facts,
        "odd: the newcomer's next heartbeat",
        beat(c, &topics, g, &mut newcomer, &join),
    );
    note(facts, "odd: described", describe(c, &topics, &[g]));
}

/// A member's first heartbeat, retried while the coordinator loads (the
/// offsets topic is made by the first FindCoordinator).
fn first_beat(c: &mut Client, topics: &Topics, g: &str, m: &mut Member, join: &Join<'_>) -> Beat {
    eventually(
        "a loaded group coordinator",
        Duration::from_secs(60),
        || {
            let _: FindCoordinatorResponse = c
                .call(
                    ApiKey::FindCoordinator,
                    3,
                    &FindCoordinatorRequest::default().with_key(s(g)),
                )
                .ok()?;
            let b = beat(c, topics, g, m, join);
            (![14, 15, 16].contains(&b.error)).then_some(b)
        },
    )
}

/// KIP-1263 with its default interval (1 s): a target is computed at most
/// once per interval; a join within it is answered from the old target,
/// and the new one comes when the interval is over, without a heartbeat.
fn assignment_interval(c: &mut Client, facts: &mut Facts) {
    for (topic, partitions) in [("ai", 4), ("ai-more", 2)] {
        let code = create_topics(c, vec![creatable_topic(topic, partitions, 1, &[])])
            .expect("CreateTopics")
            .topics[0]
            .error_code;
        assert_eq!(code, 0, "CreateTopics {topic}");
    }
    let topics = eventually("the topics' ids", Duration::from_secs(30), || {
        let t = Topics::read(c);
        (t.by_name.contains_key("ai") && t.by_name.contains_key("ai-more")).then_some(t)
    });
    let g = "cg-interval";
    let sub: &[&str] = &["ai"];
    let join = Join {
        topics: Some(sub),
        ..Join::default()
    };
    let mut a = Member::new("member-ia-000000000000");
    let first = first_beat(c, &topics, g, &mut a, &join);
    note(facts, "interval: the first member joins", first);
    let mut b = Member::new("member-ib-000000000000");
    note(
        facts,
        "interval: a second member joins at once",
        beat(c, &topics, g, &mut b, &join),
    );
    note(
        facts,
        "interval: described at once",
        describe(c, &topics, &[g]),
    );
    // Described (not a heartbeat) until the target's epoch is the group's.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let computed = loop {
        let d = describe(c, &topics, &[g]).join("");
        if d.contains("state Reconciling") || d.contains("state Stable") {
            break true;
        }
        if std::time::Instant::now() > deadline {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    note(
        facts,
        "interval: the target comes without a heartbeat",
        computed,
    );
    note(
        facts,
        "interval: described after",
        describe(c, &topics, &[g]),
    );
    note(
        facts,
        "interval: the first member's next heartbeat",
        beat(c, &topics, g, &mut a, &join),
    );
    // A group left empty, then joined again at once (as librdkafka's 0045
    // unsubscribes and subscribes again).
    let g2 = "cg-interval-rejoin";
    let mut r = Member::new("member-ir-000000000000");
    note(
        facts,
        "interval: a lone member joins",
        beat(c, &topics, g2, &mut r, &join),
    );
    note(
        facts,
        "interval: the lone member leaves",
        leave(c, &topics, g2, &r.id),
    );
    let mut r = Member::new("member-ir-000000000000");
    note(
        facts,
        "interval: it joins again at once",
        beat(c, &topics, g2, &mut r, &join),
    );
    let mut r2 = Member::new("member-ir2-00000000000");
    note(
        facts,
        "interval: a second member joins the rejoined group at once",
        beat(c, &topics, g2, &mut r2, &join),
    );
    // A lone member changing its subscription within the interval (as
    // librdkafka's 0045 subscribes many times in a row).
    let g3 = "cg-interval-resubscribe";
    let mut l = Member::new("member-il-000000000000");
    note(
        facts,
        "interval: a member joins a new group",
        beat(c, &topics, g3, &mut l, &join),
    );
    let more: &[&str] = &["ai", "ai-more"];
    let req = ConsumerGroupHeartbeatRequest::default()
        .with_group_id(GroupId(s(g3)))
        .with_member_id(s(&l.id))
        .with_member_epoch(l.epoch)
        .with_subscribed_topic_names(Some(more.iter().map(|n| TopicName(s(n))).collect()))
        .with_topic_partitions(Some(
            l.owned
                .iter()
                .map(|(t, p)| {
                    TopicPartitions::default()
                        .with_topic_id(topics.by_name[t])
                        .with_partitions(p.clone())
                })
                .collect(),
        ));
    note(
        facts,
        "interval: the lone member subscribes to more at once",
        beat_of(heartbeat_raw(c, &req), &topics),
    );
}

/// One node of each server with `settings`, `steps` run against each, and
/// their facts compared (`known`: the listed differences).
fn side_by_side(
    settings: &[(&str, &str)],
    steps: &[fn(&mut Client, &mut Facts)],
    known: &[(&str, &str)],
) {
    let kafka = KafkaDist::locate().expect("the reference Kafka");
    let run = |server: Server| {
        let cluster = start_with(server, settings);
        let mut c = Client::connect(&cluster.bootstrap()).expect("connect");
        let mut facts = Facts::new();
        for step in steps {
            step(&mut c, &mut facts);
        }
        facts
    };
    let strand_facts = run(Server::Strand(strand_bin()));
    let kafka_facts = run(Server::Kafka(kafka));
    compare(&strand_facts, &kafka_facts, known);
}

/// The assignment interval at its default (1 s) on both.
#[test]
fn the_assignment_interval_is_kept_as_kafka_keeps_it() {
    let settings: Vec<(&str, &str)> = SETTINGS
        .iter()
        .copied()
        .filter(|(k, _)| !k.contains("assignment.interval"))
        .collect();
    side_by_side(&settings, &[assignment_interval], &[]);
}

#[test]
fn consumer_groups_answer_as_kafka_does() {
    side_by_side(
        SETTINGS,
        &[consumer_groups, group_configs, odd_partitions, migration],
        KNOWN,
    );
}
