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

/// A broker with the StandardAuthorizer, PLAINTEXT (`User:ANONYMOUS`, a
/// super user) and a SASL_PLAINTEXT listener (PLAIN: alice, bob); topics
/// are auto-created. Answers the broker and the SASL listener's address.
fn start_with_authorizer() -> (Broker, String) {
    let sasl = format!("127.0.0.1:{}", free_loopback_port().unwrap());
    let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="bob-secret";"#;
    let broker = Broker::start_with_listeners(
        &common::strand_bin(),
        &[("SASL_PLAINTEXT", sasl.as_str())],
        &[
            (
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            ),
            ("super.users", "User:ANONYMOUS"),
            (
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
                "PLAIN",
            ),
            ("listener.name.sasl_plaintext.plain.sasl.jaas.config", jaas),
            ("auto.create.topics.enable", "true"),
            ("offsets.topic.replication.factor", "1"),
            ("transaction.state.log.replication.factor", "1"),
            ("transaction.state.log.min.isr", "1"),
        ],
    )
    .unwrap();
    (broker, sasl)
}

#[test]
fn each_api_family_answers_as_kafka_with_and_without_its_acl() {
    let (broker, sasl) = start_with_authorizer();
    let mut admin = Client::connect(&broker.addr()).unwrap();
    for t in ["orders", "payments"] {
        assert_eq!(
            common::create_topic_with(&mut admin, t, 1, 1, &[]).unwrap(),
            0
        );
    }
    assert_eq!(
        common::produce_values(&mut admin, "orders", 0, -1, 10_000, &["o-1".into()])
            .unwrap()
            .0,
        0
    );
    let mut alice = login(&sasl, "alice");

    // Nothing granted: alice sees no topic, and a named one (existing or
    // not) is TOPIC_AUTHORIZATION_FAILED, never auto-created.
    assert!(metadata(&mut alice, None).topics.is_empty());
    assert_eq!(
        topic_codes(&metadata(&mut alice, Some(&["orders", "nope"]))),
        [
            ("nope".into(), TOPIC_DENIED),
            ("orders".into(), TOPIC_DENIED)
        ]
    );
    assert!(
        !metadata(&mut admin, None)
            .topics
            .iter()
            .any(|t| t.name.as_ref().map(|n| n.as_str()) == Some("nope")),
        "not auto-created"
    );
    // Produce and fetch: refused, nothing appended or read.
    assert_eq!(
        common::produce_values(&mut alice, "orders", 0, -1, 10_000, &["evil".into()])
            .unwrap()
            .0,
        TOPIC_DENIED
    );
    let f = common::fetch_values(&mut alice, "orders", 0, 0, 0).unwrap();
    assert_eq!((f.error_code, f.records.len()), (TOPIC_DENIED, 0));
    // alice cannot grant herself anything.
    assert_eq!(
        create_acls(&mut alice, &[allow(2, "orders", "User:alice", 4)]),
        [CLUSTER_DENIED]
    );

    // Granted by the admin: READ and WRITE on "orders" (DESCRIBE implied).
    assert_eq!(
        create_acls(
            &mut admin,
            &[
                allow(2, "orders", "User:alice", 3),
                allow(2, "orders", "User:alice", 4)
            ]
        ),
        [0, 0]
    );
    assert_eq!(
        topic_codes(&metadata(&mut alice, None)),
        [("orders".into(), 0)],
        "alice sees orders, not payments"
    );
    let (code, offset) =
        common::produce_values(&mut alice, "orders", 0, -1, 10_000, &["o-2".into()]).unwrap();
    assert_eq!((code, offset), (0, 1), "the refused write appended nothing");
    let f = common::fetch_values(&mut alice, "orders", 0, 0, 0).unwrap();
    let values: Vec<&[u8]> = f.records.iter().map(|(_, v)| v.as_ref()).collect();
    assert_eq!((f.error_code, values), (0, vec![&b"o-1"[..], b"o-2"]));
    // A DENY wins over the ALLOW.
    assert_eq!(
        create_acls(
            &mut admin,
            &[Acl {
                permission: 2,
                ..allow(2, "orders", "User:alice", 4)
            }]
        ),
        [0]
    );
    assert_eq!(
        common::produce_values(&mut alice, "orders", 0, -1, 10_000, &["o-3".into()])
            .unwrap()
            .0,
        TOPIC_DENIED
    );

    // Posing as a follower needs ClusterAction: every partition refused,
    // no data. Transaction markers likewise (CLUSTER_AUTHORIZATION_FAILED).
    let f = follower_fetch(&mut alice, "orders");
    let p = &f.responses[0].partitions[0];
    assert_eq!(
        (p.error_code, p.records.as_ref().map_or(0, |r| r.len())),
        (TOPIC_DENIED, 0)
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
    assert_eq!(
        m.markers[0].topics[0].partitions[0].error_code,
        CLUSTER_DENIED
    );
    // The super user (the brokers' principal) is served.
    let f = follower_fetch(&mut admin, "orders");
    assert_eq!(f.responses[0].partitions[0].error_code, 0);

    // Topics: creation and deletion need CREATE / DELETE.
    let created = common::create_topics(
        &mut alice,
        vec![common::creatable_topic("alice-t", 1, 1, &[])],
    )
    .unwrap();
    assert_eq!(
        (
            created.topics[0].error_code,
            created.topics[0].error_message.as_deref()
        ),
        (TOPIC_DENIED, Some("Authorization failed."))
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
    assert_eq!(deleted.responses[0].error_code, TOPIC_DENIED);
    assert!(
        metadata(&mut admin, Some(&["payments"])).topics[0].error_code == 0,
        "payments still there"
    );
    assert_eq!(
        create_acls(&mut admin, &[allow(4, "kafka-cluster", "User:alice", 5)]),
        [0]
    );
    let created = common::create_topics(
        &mut alice,
        vec![common::creatable_topic("alice-t", 1, 1, &[])],
    )
    .unwrap();
    assert_eq!(created.topics[0].error_code, 0, "CREATE on the cluster");

    // Groups: READ on the group.
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
    assert_eq!(j.error_code, GROUP_DENIED);
    let fc: FindCoordinatorResponse = alice
        .call(
            ApiKey::FindCoordinator,
            4,
            &FindCoordinatorRequest::default()
                .with_key_type(0)
                .with_coordinator_keys(vec![sb("g1")]),
        )
        .unwrap();
    assert_eq!(fc.coordinators[0].error_code, GROUP_DENIED);

    // Transactions: WRITE on the transactional id.
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
    assert_eq!(init.error_code, TXN_ID_DENIED);
    // bob has nothing at all: an idempotent producer needs WRITE somewhere.
    let mut bob = login(&sasl, "bob");
    let init: InitProducerIdResponse = bob
        .call(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(10_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .unwrap();
    assert_eq!(init.error_code, CLUSTER_DENIED);

    // ACLs are listed to the admin and gone once deleted.
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
    assert_eq!(described.error_code, 0);
    assert_eq!(described.resources.len(), 1);
    assert_eq!(
        described.resources[0].acls.len(),
        3,
        "read, write, the deny"
    );
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
    assert_eq!(deleted.filter_results[0].matching_acls.len(), 3);
    common::eventually(
        "ACL removal applied",
        std::time::Duration::from_secs(10),
        || {
            metadata(&mut alice, None)
                .topics
                .iter()
                .all(|t| t.name.as_ref().map(|n| n.as_str()) != Some("orders"))
                .then_some(())
        },
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
    let tool = |args: &[&str]| {
        let out = std::process::Command::new(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("compat-tests/scripts/kafka-tool.sh"),
        )
        .arg("kafka-acls")
        .args(["--bootstrap-server", &broker.addr()])
        .args(args)
        .env("STRAND_KAFKA_DIR", &dist.dir)
        .output()
        .expect("kafka-acls runs");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "kafka-acls {args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    };
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
