//! Authorization (issue 18) with Kafka's StandardAuthorizer semantics, API
//! family by API family: a principal without the ACL Kafka requires gets
//! Kafka's error (and nothing happens), with it the request is served.
//! Principals authenticate with SASL/PLAIN on a SASL_PLAINTEXT listener;
//! the PLAINTEXT listener (the inter-broker one) is `User:ANONYMOUS`, a
//! super user, as Kafka deployments name their brokers.
//!
//! What a user relies on: ACLs decide, not the client: a client without
//! WRITE cannot append, without READ cannot read, cannot pose as a follower
//! or write transaction markers, cannot learn which topics exist, and
//! cannot grant itself ACLs.

mod common;

use common::Client;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use strand_compat_tests::harness::free_loopback_port;
use strand_compat_tests::Broker;

const TOPIC_DENIED: i16 = 29;
const GROUP_DENIED: i16 = 30;
const CLUSTER_DENIED: i16 = 31;
const TXN_ID_DENIED: i16 = 53;

fn sb(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

struct Acl<'a> {
    resource_type: i8,
    name: &'a str,
    pattern: i8,
    principal: &'a str,
    operation: i8,
    permission: i8,
}

// Wire codes: resource 2 topic, 3 group, 4 cluster, 5 transactional id;
// pattern 3 literal, 4 prefixed; operation 3 read, 4 write, 5 create,
// 6 delete, 7 alter, 8 describe, 9 cluster action; permission 2 deny, 3 allow.
fn allow<'a>(resource_type: i8, name: &'a str, principal: &'a str, operation: i8) -> Acl<'a> {
    Acl {
        resource_type,
        name,
        pattern: 3,
        principal,
        operation,
        permission: 3,
    }
}

fn create_acls(c: &mut Client, acls: &[Acl]) -> Vec<i16> {
    let req = CreateAclsRequest::default().with_creations(
        acls.iter()
            .map(|a| {
                create_acls_request::AclCreation::default()
                    .with_resource_type(a.resource_type)
                    .with_resource_name(sb(a.name))
                    .with_resource_pattern_type(a.pattern)
                    .with_principal(sb(a.principal))
                    .with_host(sb("*"))
                    .with_operation(a.operation)
                    .with_permission_type(a.permission)
            })
            .collect(),
    );
    let resp: CreateAclsResponse = c.call(ApiKey::CreateAcls, 3, &req).unwrap();
    resp.results.iter().map(|r| r.error_code).collect()
}

/// A connection authenticated as `user` over SASL/PLAIN.
fn login(addr: &str, user: &str) -> Client {
    let mut c = Client::connect(addr).unwrap();
    let h: SaslHandshakeResponse = c
        .call(
            ApiKey::SaslHandshake,
            1,
            &SaslHandshakeRequest::default().with_mechanism(sb("PLAIN")),
        )
        .unwrap();
    assert_eq!(h.error_code, 0);
    let token = format!("\0{user}\0{user}-secret");
    let a: SaslAuthenticateResponse = c
        .call(
            ApiKey::SaslAuthenticate,
            2,
            &SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::from(token)),
        )
        .unwrap();
    assert_eq!(a.error_code, 0, "{user} logs in");
    c
}

fn metadata(c: &mut Client, topics: Option<&[&str]>) -> MetadataResponse {
    let req = MetadataRequest::default()
        .with_allow_auto_topic_creation(true)
        .with_topics(topics.map(|ts| {
            ts.iter()
                .map(|t| {
                    metadata_request::MetadataRequestTopic::default()
                        .with_name(Some(TopicName(sb(t))))
                })
                .collect()
        }));
    c.call(ApiKey::Metadata, 12, &req).unwrap()
}

fn topic_codes(md: &MetadataResponse) -> Vec<(String, i16)> {
    let mut v: Vec<(String, i16)> = md
        .topics
        .iter()
        .map(|t| {
            (
                t.name.as_ref().map(|n| n.to_string()).unwrap_or_default(),
                t.error_code,
            )
        })
        .collect();
    v.sort();
    v
}

fn follower_fetch(c: &mut Client, topic: &str) -> FetchResponse {
    let req = FetchRequest::default()
        .with_replica_id(BrokerId(1))
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_topics(vec![fetch_request::FetchTopic::default()
            .with_topic(TopicName(sb(topic)))
            .with_partitions(vec![fetch_request::FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20)])]);
    c.call(ApiKey::Fetch, 11, &req).unwrap()
}

/// The StandardAuthorizer, `User:ANONYMOUS` (PLAINTEXT: the brokers and
/// the admin) a super user, PLAIN users alice and bob on SASL_PLAINTEXT.
fn authorizer_settings() -> Vec<(&'static str, &'static str)> {
    vec![
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ),
        ("super.users", "User:ANONYMOUS"),
        (
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
            "PLAIN",
        ),
        (
            "listener.name.sasl_plaintext.plain.sasl.jaas.config",
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="bob-secret";"#,
        ),
        ("auto.create.topics.enable", "true"),
        ("offsets.topic.replication.factor", "1"),
        ("transaction.state.log.replication.factor", "1"),
        ("transaction.state.log.min.isr", "1"),
    ]
}

/// A broker with the StandardAuthorizer, PLAINTEXT (`User:ANONYMOUS`, a
/// super user) and a SASL_PLAINTEXT listener (PLAIN: alice, bob); topics
/// are auto-created. Answers the broker and the SASL listener's address.
fn start_with_authorizer() -> (Broker, String) {
    let sasl = format!("127.0.0.1:{}", free_loopback_port().unwrap());
    let broker = Broker::start_with_listeners(
        &common::strand_bin(),
        &[("SASL_PLAINTEXT", sasl.as_str())],
        &authorizer_settings(),
    )
    .unwrap();
    (broker, sasl)
}

/// What a client observes of each API family with and without its ACL,
/// as labelled facts: the same questions asked of Strand and of Kafka.
/// `admin` is a super user's connection, `sasl` the SASL_PLAINTEXT
/// listener where alice and bob log in.
fn matrix(admin_addr: &str, sasl: &str) -> Vec<(&'static str, String)> {
    let mut facts: Vec<(&'static str, String)> = Vec::new();
    let mut fact =
        |label: &'static str, v: &dyn std::fmt::Debug| facts.push((label, format!("{v:?}")));
    let mut admin = Client::connect(admin_addr).unwrap();
    for t in ["orders", "payments"] {
        fact(
            "create as admin",
            &common::create_topic_with(&mut admin, t, 1, 1, &[]).unwrap(),
        );
    }
    common::eventually("orders is led", std::time::Duration::from_secs(30), || {
        let (code, _) =
            common::produce_values(&mut admin, "orders", 0, -1, 10_000, &["o-1".into()]).ok()?;
        (code == 0).then_some(())
    });
    let mut alice = login(sasl, "alice");

    // Nothing granted.
    fact(
        "all-topics metadata, no ACL",
        &topic_codes(&metadata(&mut alice, None)),
    );
    fact(
        "named metadata, no ACL",
        &topic_codes(&metadata(&mut alice, Some(&["orders", "nope"]))),
    );
    fact(
        "nope auto-created",
        &metadata(&mut admin, None)
            .topics
            .iter()
            .any(|t| t.name.as_ref().map(|n| n.as_str()) == Some("nope")),
    );
    fact(
        "produce, no WRITE",
        &common::produce_values(&mut alice, "orders", 0, -1, 10_000, &["evil".into()])
            .unwrap()
            .0,
    );
    let f = common::fetch_values(&mut alice, "orders", 0, 0, 0).unwrap();
    fact("fetch, no READ", &(f.error_code, f.records.len()));
    fact(
        "create ACL as alice",
        &create_acls(&mut alice, &[allow(2, "orders", "User:alice", 4)]),
    );

    // READ and WRITE on orders (DESCRIBE implied).
    fact(
        "grant read+write",
        &create_acls(
            &mut admin,
            &[
                allow(2, "orders", "User:alice", 3),
                allow(2, "orders", "User:alice", 4),
            ],
        ),
    );
    common::eventually(
        "alice sees orders",
        std::time::Duration::from_secs(30),
        || (!metadata(&mut alice, None).topics.is_empty()).then_some(()),
    );
    fact(
        "all-topics metadata, granted",
        &topic_codes(&metadata(&mut alice, None)),
    );
    fact(
        "produce, granted",
        &common::produce_values(&mut alice, "orders", 0, -1, 10_000, &["o-2".into()]).unwrap(),
    );
    let f = common::fetch_values(&mut alice, "orders", 0, 0, 0).unwrap();
    let values: Vec<String> = f
        .records
        .iter()
        .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
        .collect();
    fact("fetch, granted", &(f.error_code, values));
    fact(
        "deny write",
        &create_acls(
            &mut admin,
            &[Acl {
                permission: 2,
                ..allow(2, "orders", "User:alice", 4)
            }],
        ),
    );
    common::eventually(
        "the deny applies",
        std::time::Duration::from_secs(30),
        || {
            let (code, _) =
                common::produce_values(&mut alice, "orders", 0, -1, 10_000, &["o-3".into()])
                    .ok()?;
            (code != 0).then_some(())
        },
    );
    fact(
        "produce, denied",
        &common::produce_values(&mut alice, "orders", 0, -1, 10_000, &["o-3".into()])
            .unwrap()
            .0,
    );

    // Posing as a follower; transaction markers.
    let f = follower_fetch(&mut alice, "orders");
    let p = &f.responses[0].partitions[0];
    fact(
        "follower fetch as alice",
        &(p.error_code, p.records.as_ref().map_or(0, |r| r.len())),
    );
    let markers = WriteTxnMarkersRequest::default().with_markers(vec![
        write_txn_markers_request::WritableTxnMarker::default()
            .with_producer_id(ProducerId(1))
            .with_producer_epoch(0)
            .with_transaction_result(true)
            .with_coordinator_epoch(0)
            .with_topics(vec![
                write_txn_markers_request::WritableTxnMarkerTopic::default()
                    .with_name(TopicName(sb("orders")))
                    .with_partition_indexes(vec![0]),
            ]),
    ]);
    let m: WriteTxnMarkersResponse = alice.call(ApiKey::WriteTxnMarkers, 1, &markers).unwrap();
    fact(
        "markers as alice",
        &m.markers[0].topics[0].partitions[0].error_code,
    );

    // Topics.
    let created = common::create_topics(
        &mut alice,
        vec![common::creatable_topic("alice-t", 1, 1, &[])],
    )
    .unwrap();
    fact(
        "create topic, no CREATE",
        &(
            created.topics[0].error_code,
            created.topics[0]
                .error_message
                .as_ref()
                .map(|m| m.to_string()),
        ),
    );
    let deleted: DeleteTopicsResponse = alice
        .call(
            ApiKey::DeleteTopics,
            5,
            &DeleteTopicsRequest::default()
                .with_topic_names(vec![TopicName(sb("payments"))])
                .with_timeout_ms(5000),
        )
        .unwrap();
    fact("delete topic, no DELETE", &deleted.responses[0].error_code);
    fact(
        "grant create on cluster",
        &create_acls(&mut admin, &[allow(4, "kafka-cluster", "User:alice", 5)]),
    );
    let created = common::eventually("CREATE applies", std::time::Duration::from_secs(30), || {
        let r = common::create_topics(
            &mut alice,
            vec![common::creatable_topic("alice-t", 1, 1, &[])],
        )
        .ok()?;
        (r.topics[0].error_code != TOPIC_DENIED).then_some(r.topics[0].error_code)
    });
    fact("create topic, CREATE on cluster", &created);

    // Groups.
    let join = JoinGroupRequest::default()
        .with_group_id(GroupId(sb("g1")))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(sb(""))
        .with_protocol_type(sb("consumer"))
        .with_protocols(vec![join_group_request::JoinGroupRequestProtocol::default(
        )
        .with_name(sb("range"))
        .with_metadata(bytes::Bytes::new())]);
    let j: JoinGroupResponse = alice.call(ApiKey::JoinGroup, 5, &join).unwrap();
    fact("join group, no READ", &j.error_code);
    let fc: FindCoordinatorResponse = alice
        .call(
            ApiKey::FindCoordinator,
            4,
            &FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(vec![sb("g1")]),
        )
        .unwrap();
    fact(
        "find coordinator, no DESCRIBE",
        &fc.coordinators[0].error_code,
    );

    // Transactions and idempotence.
    let init: InitProducerIdResponse = alice
        .call(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(Some(TransactionalId(sb("tx-1"))))
                .with_transaction_timeout_ms(10_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .unwrap();
    fact("init transactional, no WRITE", &init.error_code);
    let mut bob = login(sasl, "bob");
    let idempotent = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(10_000)
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    let init: InitProducerIdResponse = bob.call(ApiKey::InitProducerId, 4, &idempotent).unwrap();
    fact("init idempotent, no WRITE anywhere", &init.error_code);
    let init: InitProducerIdResponse = alice.call(ApiKey::InitProducerId, 4, &idempotent).unwrap();
    fact(
        "init idempotent, WRITE somewhere (denied on orders)",
        &init.error_code,
    );

    // Listing and deleting ACLs.
    let described: DescribeAclsResponse = admin
        .call(
            ApiKey::DescribeAcls,
            3,
            &DescribeAclsRequest::default()
                .with_resource_type_filter(2)
                .with_resource_name_filter(Some(sb("orders")))
                .with_pattern_type_filter(1)
                .with_principal_filter(None)
                .with_host_filter(None)
                .with_operation(1)
                .with_permission_type(1),
        )
        .unwrap();
    let mut listed: Vec<(i8, i8)> = described
        .resources
        .iter()
        .flat_map(|r| r.acls.iter().map(|a| (a.operation, a.permission_type)))
        .collect();
    listed.sort();
    fact("describe acls", &(described.error_code, listed));
    let alice_describes: DescribeAclsResponse = alice
        .call(
            ApiKey::DescribeAcls,
            3,
            &DescribeAclsRequest::default()
                .with_resource_type_filter(1)
                .with_resource_name_filter(None)
                .with_pattern_type_filter(1)
                .with_principal_filter(None)
                .with_host_filter(None)
                .with_operation(1)
                .with_permission_type(1),
        )
        .unwrap();
    fact("describe acls as alice", &alice_describes.error_code);
    let deleted: DeleteAclsResponse = admin
        .call(
            ApiKey::DeleteAcls,
            3,
            &DeleteAclsRequest::default().with_filters(vec![
                delete_acls_request::DeleteAclsFilter::default()
                    .with_resource_type_filter(2)
                    .with_resource_name_filter(Some(sb("orders")))
                    .with_pattern_type_filter(1)
                    .with_principal_filter(Some(sb("User:alice")))
                    .with_host_filter(None)
                    .with_operation(1)
                    .with_permission_type(1),
            ]),
        )
        .unwrap();
    fact(
        "delete acls",
        &(
            deleted.filter_results[0].error_code,
            deleted.filter_results[0].matching_acls.len(),
        ),
    );
    common::eventually(
        "the removal applies",
        std::time::Duration::from_secs(30),
        || metadata(&mut alice, None).topics.is_empty().then_some(()),
    );
    fact(
        "all-topics metadata after removal",
        &topic_codes(&metadata(&mut alice, None)),
    );

    // A group's own configs (GROUP resource): the group's DESCRIBE_CONFIGS
    // and ALTER_CONFIGS.
    let group_configs = |c: &mut Client| -> (i16, i16) {
        use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
        let d: DescribeConfigsResponse = c
            .call(
                ApiKey::DescribeConfigs,
                4,
                &DescribeConfigsRequest::default().with_resources(vec![
                    DescribeConfigsResource::default()
                        .with_resource_type(32)
                        .with_resource_name(sb("g-conf"))
                        .with_configuration_keys(None),
                ]),
            )
            .unwrap();
        let (altered, _) = common::alter_config(
            c,
            32,
            "g-conf",
            "consumer.session.timeout.ms",
            Some("50000"),
        );
        (d.results[0].error_code, altered)
    };
    fact("group configs, no ACL", &group_configs(&mut alice));
    fact(
        "grant describe and alter configs on a group",
        &create_acls(
            &mut admin,
            &[
                allow(3, "g-conf", "User:alice", 10),
                allow(3, "g-conf", "User:alice", 11),
            ],
        ),
    );
    common::eventually(
        "alice may describe g-conf's configs",
        std::time::Duration::from_secs(30),
        || (group_configs(&mut alice).0 == 0).then_some(()),
    );
    fact("group configs, granted", &group_configs(&mut alice));
    facts
}

/// The facts Kafka's rules give; Strand must show exactly these.
#[test]
fn each_api_family_answers_as_kafka_with_and_without_its_acl() {
    let (broker, sasl) = start_with_authorizer();
    let facts = matrix(&broker.addr(), &sasl);
    let none: Vec<(String, i16)> = vec![];
    let expected: Vec<(&str, String)> = vec![
        ("create as admin", "0".into()),
        ("create as admin", "0".into()),
        ("all-topics metadata, no ACL", format!("{none:?}")),
        (
            "named metadata, no ACL",
            format!(
                "{:?}",
                [
                    ("nope".to_string(), TOPIC_DENIED),
                    ("orders".into(), TOPIC_DENIED)
                ]
            ),
        ),
        ("nope auto-created", "false".into()),
        ("produce, no WRITE", TOPIC_DENIED.to_string()),
        ("fetch, no READ", format!("{:?}", (TOPIC_DENIED, 0))),
        ("create ACL as alice", format!("{:?}", [CLUSTER_DENIED])),
        ("grant read+write", "[0, 0]".into()),
        (
            "all-topics metadata, granted",
            format!("{:?}", [("orders".to_string(), 0i16)]),
        ),
        ("produce, granted", "(0, 1)".into()),
        (
            "fetch, granted",
            format!("{:?}", (0i16, ["o-1".to_string(), "o-2".into()])),
        ),
        ("deny write", "[0]".into()),
        ("produce, denied", TOPIC_DENIED.to_string()),
        (
            "follower fetch as alice",
            format!("{:?}", (TOPIC_DENIED, 0)),
        ),
        ("markers as alice", CLUSTER_DENIED.to_string()),
        (
            "create topic, no CREATE",
            format!(
                "{:?}",
                (TOPIC_DENIED, Some("Authorization failed.".to_string()))
            ),
        ),
        ("delete topic, no DELETE", TOPIC_DENIED.to_string()),
        ("grant create on cluster", "[0]".into()),
        ("create topic, CREATE on cluster", "0".into()),
        ("join group, no READ", GROUP_DENIED.to_string()),
        ("find coordinator, no DESCRIBE", GROUP_DENIED.to_string()),
        ("init transactional, no WRITE", TXN_ID_DENIED.to_string()),
        (
            "init idempotent, no WRITE anywhere",
            CLUSTER_DENIED.to_string(),
        ),
        (
            "init idempotent, WRITE somewhere (denied on orders)",
            CLUSTER_DENIED.to_string(),
        ),
        ("describe acls", "(0, [(3, 3), (4, 2), (4, 3)])".into()),
        ("describe acls as alice", CLUSTER_DENIED.to_string()),
        ("delete acls", "(0, 3)".into()),
        ("all-topics metadata after removal", format!("{none:?}")),
        (
            "group configs, no ACL",
            format!("{:?}", (GROUP_DENIED, GROUP_DENIED)),
        ),
        (
            "grant describe and alter configs on a group",
            "[0, 0]".into(),
        ),
        ("group configs, granted", "(0, 0)".into()),
    ];
    let got: Vec<(&str, &str)> = facts.iter().map(|(l, v)| (*l, v.as_str())).collect();
    let want: Vec<(&str, &str)> = expected.iter().map(|(l, v)| (*l, v.as_str())).collect();
    assert_eq!(got, want);
}

/// The same matrix against the reference Kafka (StandardAuthorizer,
/// SASL_PLAINTEXT with PLAIN, PLAINTEXT as the super user's listener): every
/// fact is the same.
#[test]
fn the_acl_matrix_is_kafkas() {
    use strand_compat_tests::{Cluster, ClusterSpec, KafkaDist, Server};
    let dist = KafkaDist::locate().expect("the reference Kafka");
    let run = |server: Server| {
        let mut spec = ClusterSpec::combined(1).with_extra_listener("SASL_PLAINTEXT");
        for (k, v) in authorizer_settings() {
            spec = spec.with_override(k, v);
        }
        let cluster = Cluster::start_server(server, spec).expect("a node starts");
        let facts = matrix(
            &cluster.broker_addr(1).unwrap(),
            &cluster.extra_listener_addr(1).unwrap(),
        );
        (cluster, facts)
    };
    let (_kafka, kafka) = run(Server::Kafka(dist));
    let (_strand, strand) = run(Server::Strand(common::strand_bin()));
    let differ: Vec<String> = kafka
        .iter()
        .zip(&strand)
        .filter(|(k, s)| k != s)
        .map(|(k, s)| format!("{}: Kafka {} / Strand {}", k.0, k.1, s.1))
        .collect();
    assert_eq!(kafka.len(), strand.len());
    assert!(
        differ.is_empty(),
        "facts that differ:\n{}",
        differ.join("\n")
    );
}

/// Without an authorizer, the ACL APIs answer SECURITY_DISABLED (as Kafka).
#[test]
fn acl_apis_without_an_authorizer_are_security_disabled() {
    let broker = Broker::start(&common::strand_bin(), &[]).unwrap();
    let mut c = Client::connect(&broker.addr()).unwrap();
    assert_eq!(create_acls(&mut c, &[allow(2, "t", "User:alice", 3)]), [54]);
    let d: DescribeAclsResponse = c
        .call(
            ApiKey::DescribeAcls,
            3,
            &DescribeAclsRequest::default()
                .with_resource_type_filter(1)
                .with_resource_name_filter(None)
                .with_pattern_type_filter(1)
                .with_principal_filter(None)
                .with_host_filter(None)
                .with_operation(1)
                .with_permission_type(1),
        )
        .unwrap();
    assert_eq!(
        (d.error_code, d.error_message.as_deref()),
        (54, Some("No Authorizer is configured on the broker"))
    );
}

/// Kafka's own `kafka-acls` grants, and a real client (confluent-kafka over
/// SASL_PLAINTEXT as alice) produces acks=all idempotently and consumes in
/// a group under exactly those grants (WRITE and READ on the topic, READ on
/// the groups by prefix); bob, with none, is refused.
#[test]
fn kafka_acls_tool_and_a_real_client() {
    let dist = strand_compat_tests::KafkaDist::locate().expect("the reference Kafka's tools");
    let (broker, sasl) = start_with_authorizer();
    let mut admin = Client::connect(&broker.addr()).unwrap();
    assert_eq!(
        common::create_topic_with(&mut admin, "orders", 2, 1, &[]).unwrap(),
        0
    );
    let addr = broker.addr();
    let tool = |args: &[&str]| common::kafka_tool(&dist.dir, "kafka-acls", &addr, args);
    tool(&[
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--operation",
        "Write",
        "--topic",
        "orders",
    ]);
    tool(&[
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--group",
        "sec-",
        "--resource-pattern-type",
        "prefixed",
    ]);
    let listed = tool(&["--list", "--topic", "orders"]);
    assert!(
        listed.contains("User:alice") && listed.contains("READ") && listed.contains("WRITE"),
        "{listed}"
    );
    let conf = |user: &str| {
        vec![
            "security.protocol=SASL_PLAINTEXT".to_string(),
            "sasl.mechanism=PLAIN".into(),
            format!("sasl.username={user}"),
            format!("sasl.password={user}-secret"),
        ]
    };
    let run = |user: &str| {
        let mut args = vec![
            "roundtrip".to_string(),
            sasl.clone(),
            "orders".into(),
            "200".into(),
        ];
        args.extend(conf(user));
        let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("compat-tests/clients/security_client.py");
        let out = std::process::Command::new(
            std::env::var("STRAND_PYTHON").unwrap_or_else(|_| "python3".into()),
        )
        .arg(script)
        .args(&args)
        .output()
        .expect("python runs");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(run("alice"), "ok 200");
    let refused = run("bob");
    assert!(
        refused.starts_with("err") && refused.contains("AUTHORIZATION"),
        "{refused}"
    );
    tool(&[
        "--remove",
        "--force",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Write",
        "--topic",
        "orders",
    ]);
    let refused = run("alice");
    assert!(
        refused.starts_with("err") && refused.contains("AUTHORIZATION"),
        "{refused}"
    );
}
