//! Broker sessions are timed on the monotonic clock: a wall clock stepped
//! forward (NTP, or a virtual machine paused and resumed: the wall clock
//! jumps, the monotonic one does not) fences no broker that keeps
//! heartbeating, while a broker that stops heartbeating is still fenced
//! after `broker.session.timeout.ms`. (A single node once fenced itself,
//! and lost every leadership, after a 35 s pause of its machine.) And a
//! controller that was itself stalled credits the stall to every session
//! before it fences anyone.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use strand_controller::manager::cluster::{BrokerRegistrationRequest, HeartbeatRequest};
use strand_controller::manager::ControllerConfig;
use strand_controller::{start_controller, ControllerHandle, QuorumSettings, StoreKind};
use strand_types::{BrokerEpoch, BrokerId, Clock, SystemClock};
use uuid::Uuid;

/// The real clocks, each with an offset a test can jump.
#[derive(Default)]
struct JumpingClock {
    wall: AtomicI64,
    monotonic: AtomicI64,
}

impl Clock for JumpingClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.wall.load(Ordering::SeqCst)
    }

    fn monotonic_ms(&self) -> i64 {
        SystemClock.monotonic_ms() + self.monotonic.load(Ordering::SeqCst)
    }
}

const SESSION_MS: u64 = 2_000;

fn settings(clock: Arc<JumpingClock>) -> QuorumSettings {
    let voters: BTreeMap<u64, String> = [(1, "127.0.0.1:1".to_string())].into();
    QuorumSettings {
        node_id: 1,
        cluster_id: "sessions".into(),
        voters: voters.clone(),
        initial_voters: voters,
        store: StoreKind::Memory,
        election_timeout_ms: 150,
        session_timeout_ms: SESSION_MS,
        write_lease_ms: strand_controller::DEFAULT_WRITE_LEASE_MS,
        listener: None,
        rpc: strand_controller::PlainRpc::shared(),
        bootstrap: Vec::new(),
        controller: ControllerConfig {
            node_id: BrokerId::new(1),
            num_partitions: 1,
            default_replication_factor: 1,
            producer_id_block_size: 1000,
            max_replication_factor: usize::MAX,
            leader_balance_interval_ms: None,
            unclean_leader_election_enable: false,
            unclean_election_interval_ms: None,
            group_bounds: Default::default(),
        },
        clock,
        seed: None,
    }
}

async fn register(h: &ControllerHandle, broker_id: i32) -> BrokerEpoch {
    let epoch = h
        .client()
        .register_broker(BrokerRegistrationRequest {
            broker_id: BrokerId::new(broker_id),
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
    heartbeat(h, broker_id, epoch).await;
    epoch
}

async fn heartbeat(h: &ControllerHandle, broker_id: i32, broker_epoch: BrokerEpoch) -> bool {
    h.client()
        .heartbeat(HeartbeatRequest {
            broker_id: BrokerId::new(broker_id),
            broker_epoch,
            current_metadata_offset: u64::MAX,
            want_fence: false,
            want_shutdown: false,
            offline_log_dirs: vec![],
        })
        .await
        .unwrap()
        .is_fenced
}

fn fenced(h: &ControllerHandle, broker_id: i32) -> bool {
    h.image()
        .brokers
        .get(&BrokerId::new(broker_id))
        .is_some_and(|b| b.fenced)
}

/// Broker 11 heartbeats every second (the controller checks sessions every
/// 250 ms, so a check falls between the jump and the next heartbeat);
/// broker 12 stops. Returns when 12 is fenced: sessions were checked after
/// the jump.
async fn run(jump: impl FnOnce(&Arc<JumpingClock>)) -> bool {
    let clock = Arc::new(JumpingClock::default());
    let node = start_controller(settings(clock.clone())).await.unwrap();
    let h = node.handle.clone();
    let e11 = register(&h, 11).await;
    register(&h, 12).await;
    assert!(!fenced(&h, 11) && !fenced(&h, 12));
    let beating = {
        let h = h.clone();
        tokio::spawn(async move {
            loop {
                heartbeat(&h, 11, e11).await;
                tokio::time::sleep(Duration::from_millis(1_000)).await;
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    jump(&clock);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !fenced(&h, 12) {
        assert!(
            Instant::now() < deadline,
            "broker 12 stopped heartbeating and was never fenced"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fenced_11 = fenced(&h, 11);
    beating.abort();
    fenced_11
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wall_clock_jump_fences_no_heartbeating_broker() {
    let fenced_11 = run(|c| c.wall.store(60_000, Ordering::SeqCst)).await;
    assert!(
        !fenced_11,
        "a 60 s step of the wall clock fenced a broker that kept heartbeating"
    );
}

/// A controller that was itself not running (its process paused, as a
/// SIGSTOP or a paused machine does: the session clock jumps between two of
/// its events) has heard no heartbeat meanwhile; it credits the stall to
/// every session, so the heartbeating broker 11 stays unfenced while the
/// silent broker 12 is still fenced a session later. (Chaos seed 212: a
/// leader and active controller paused 2.8 s fenced every broker when it
/// resumed, before reading the heartbeats queued for it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_controller_fences_no_heartbeating_broker() {
    let fenced_11 = run(|c| c.monotonic.store(60_000, Ordering::SeqCst)).await;
    assert!(
        !fenced_11,
        "a controller stalled 60 s fenced a broker whose heartbeats were queued"
    );
}

/// The control: a session clock that runs 3.4 times too fast, in steps too
/// small to be a stall (600 ms per 250 ms), ages broker 11's one-second
/// heartbeat gaps past the 2 s session and fences it (so the tests above
/// can fail).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_clock_running_fast_does_fence_it() {
    let fenced_11 = run(|c| {
        let c = c.clone();
        tokio::spawn(async move {
            loop {
                c.monotonic.fetch_add(600, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
    })
    .await;
    assert!(
        fenced_11,
        "sessions aged 3.4 s between heartbeats were not fenced"
    );
}
