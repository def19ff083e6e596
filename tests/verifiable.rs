//! `kafka-verifiable-producer` and `kafka-verifiable-consumer`, the clients
//! Kafka's own system tests drive, against a 3-node Strand cluster whose
//! partition leader is killed (kill -9) three times while they run (issue
//! 16): the producer is idempotent with acks=all, the consumer a group
//! member committing what it processed; the tools of Kafka 4.4 and of 3.9
//! (older API versions) each run it, and Kafka 4.4's consumer once more with
//! the consumer group protocol (KIP-848, `--group-protocol consumer`), whose
//! group coordinator is killed too. What a user of acks=all relies on:
//! every acknowledged message is consumed, none is consumed twice, and
//! nothing is consumed that was not sent.
//!
//! Needs the reference Kafka's jars: `compat-tests/scripts/fetch-kafka.sh`.

mod common;

use common::tool::Tool;
use common::{create_topic_with, eventually, partition_view, Client};
use std::time::Duration;
use strand_compat_tests::cluster::{Cluster, ClusterSpec, KafkaDist};

const TOPIC: &str = "verifiable";
const PARTITIONS: i32 = 3;
const KILLS: usize = 3;
/// Acknowledged writes between kills, and after the last.
const BETWEEN_KILLS: usize = 2_000;

/// Every partition of the topic led, with all three replicas in sync, as
/// the first node that answers sees it.
fn full_isr(cluster: &Cluster) -> bool {
    (0..PARTITIONS).all(|p| {
        cluster.broker_ids().iter().any(|id| {
            cluster
                .broker_addr(*id)
                .and_then(|a| partition_view(&a, TOPIC, p, Duration::from_secs(2)))
                .is_some_and(|v| v.leader >= 0 && v.isr.len() == 3)
        })
    })
}

/// The leader of partition 0 as node `from` sees it.
fn leader_seen_by(cluster: &Cluster, from: i32) -> Option<i32> {
    let addr = cluster.broker_addr(from)?;
    partition_view(&addr, TOPIC, 0, Duration::from_secs(2))
        .map(|v| v.leader)
        .filter(|l| *l >= 0)
}

/// Both tools of `clients` (a Kafka version) against a fresh cluster.
/// The node leading the `__consumer_offsets` partition of `group`, as the
/// first node that answers FindCoordinator names it.
fn coordinator_of(cluster: &Cluster, group: &str) -> Option<i32> {
    use kafka_protocol::messages::{ApiKey, FindCoordinatorRequest, FindCoordinatorResponse};
    use kafka_protocol::protocol::StrBytes;
    cluster.broker_ids().into_iter().find_map(|id| {
        let mut c = Client::connect(&cluster.broker_addr(id)?).ok()?;
        let r: FindCoordinatorResponse = c
            .call(
                ApiKey::FindCoordinator,
                3,
                &FindCoordinatorRequest::default()
                    .with_key(StrBytes::from_string(group.to_string())),
            )
            .ok()?;
        (r.error_code == 0).then_some(r.node_id.0)
    })
}

fn scenario(dist: &KafkaDist, clients: &str, group_protocol: &str) {
    println!(
        "## Kafka {clients}'s verifiable producer and consumer ({group_protocol} group protocol)"
    );
    let mut cluster = Cluster::start(
        &common::strand_bin(),
        ClusterSpec::combined(3)
            .with_override("default.replication.factor", "3")
            .with_override("offsets.topic.replication.factor", "3")
            .with_override("min.insync.replicas", "2")
            .with_override("group.initial.rebalance.delay.ms", "0")
            .with_override("broker.session.timeout.ms", "4000")
            .with_override("broker.heartbeat.interval.ms", "500")
            .with_override("auto.create.topics.enable", "false"),
    )
    .expect("a 3-node cluster");
    let first = cluster
        .broker_addr(cluster.broker_ids()[0])
        .expect("an address");
    let mut c = Client::connect(&first).expect("a connection");
    assert_eq!(
        create_topic_with(
            &mut c,
            TOPIC,
            PARTITIONS,
            3,
            &[("min.insync.replicas", "2")]
        )
        .unwrap(),
        0
    );
    eventually("a full ISR", Duration::from_secs(60), || {
        full_isr(&cluster).then_some(())
    });
    let dir = tempfile::tempdir().expect("a scratch directory");
    let bootstrap = cluster.bootstrap();
    let mut producer = Tool::verifiable_producer(dist, &bootstrap, TOPIC, dir.path());
    let group = "verifiable-group";
    let consumer = Tool::verifiable_consumer_with(
        dist,
        &bootstrap,
        TOPIC,
        group,
        false,
        dir.path(),
        &["--group-protocol", group_protocol],
    );
    // The consumer protocol's run also loses its group coordinator once,
    // after the first leader kill: the group is loaded by another node from
    // its records, members keep their epochs and assignments.
    let coordinator_kill_after = (group_protocol == "consumer").then_some(1);

    // Kill partition 0's leader each time more writes were acknowledged,
    // and bring it back into the ISR before the next.
    for round in 1..=KILLS + 1 {
        let target = producer.count("producer_send_success") + BETWEEN_KILLS;
        eventually(
            &format!(
                "{target} acknowledged writes before kill {round}; the producer's last events:\n{}",
                producer.tail()
            ),
            Duration::from_secs(180),
            || {
                assert!(
                    producer.count("shutdown_complete") == 0,
                    "the producer stopped early: {}",
                    producer.tail()
                );
                (producer.count("producer_send_success") >= target).then_some(())
            },
        );
        if round > KILLS {
            break;
        }
        let victim = cluster
            .broker_ids()
            .into_iter()
            .find_map(|id| leader_seen_by(&cluster, id))
            .expect("a leader of partition 0");
        cluster.kill9(victim).expect("kill -9 the leader");
        let others: Vec<i32> = cluster
            .broker_ids()
            .into_iter()
            .filter(|id| *id != victim)
            .collect();
        eventually(
            &format!("a leader other than {victim}"),
            Duration::from_secs(60),
            || {
                others
                    .iter()
                    .find_map(|id| leader_seen_by(&cluster, *id))
                    .filter(|l| *l != victim)
            },
        );
        cluster.restart(victim).expect("restart the old leader");
        eventually(
            &format!("{victim} back in every ISR"),
            Duration::from_secs(120),
            || full_isr(&cluster).then_some(()),
        );
        println!("kill {round}: node {victim} killed, another leader named, back in sync");
        if coordinator_kill_after == Some(round) {
            let coordinator =
                eventually("the group's coordinator", Duration::from_secs(60), || {
                    coordinator_of(&cluster, group)
                });
            let before = producer.count("producer_send_success");
            cluster.kill9(coordinator).expect("kill -9 the coordinator");
            eventually(
                &format!("a coordinator other than {coordinator}"),
                Duration::from_secs(60),
                || coordinator_of(&cluster, group).filter(|c| *c != coordinator),
            );
            cluster
                .restart(coordinator)
                .expect("restart the old coordinator");
            eventually(
                &format!("{coordinator} back in every ISR"),
                Duration::from_secs(120),
                || full_isr(&cluster).then_some(()),
            );
            eventually(
                "writes acknowledged after the coordinator kill",
                Duration::from_secs(120),
                || (producer.count("producer_send_success") > before + BETWEEN_KILLS).then_some(()),
            );
            println!("coordinator {coordinator} killed, another took the group, back in sync");
        }
    }

    let delivery =
        common::tool::finish_delivery(&mut producer, &consumer, Duration::from_secs(120), &|_| {
            false
        });
    assert!(
        delivery.failed.len() < delivery.sent as usize / 10,
        "most sends acknowledged through the kills: {} failed",
        delivery.failed.len()
    );
}

/// Kafka 4.4's tools, then 3.9's (which negotiate older versions of
/// Produce, Fetch, the group APIs and InitProducerId).
#[test]
fn every_acknowledged_message_is_consumed_once_across_leader_kills() {
    let current = KafkaDist::locate().expect("the reference Kafka");
    scenario(&current, KafkaDist::version(), "classic");
    let older = KafkaDist::locate_clients_3_9().expect("Kafka's 3.9 tools");
    scenario(&older, KafkaDist::clients_3_9_version(), "classic");
}

/// Kafka 4.4's verifiable consumer with the consumer group protocol
/// (KIP-848): three leader kills and a coordinator kill.
#[test]
fn every_acknowledged_message_is_consumed_once_by_a_consumer_protocol_group() {
    let current = KafkaDist::locate().expect("the reference Kafka");
    scenario(&current, KafkaDist::version(), "consumer");
}
