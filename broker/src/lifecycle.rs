//! The broker's life with the controller: BrokerRegistration at start,
//! heartbeats until it is unfenced and from then on, and a controlled shutdown
//! that moves its leaderships away before it exits.

use crate::config::BrokerConfig;
use crate::controller_link::ControllerLink;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use strand_metadata::controller_api::{BrokerRegistrationRequest, HeartbeatRequest};
use strand_types::BrokerEpoch;
use tokio::signal::unix::{signal, SignalKind};

/// This broker's registration: its epoch, and whether the controller fences it.
pub struct Registration {
    pub broker_epoch: BrokerEpoch,
    pub fenced: Arc<AtomicBool>,
}

/// How long start-up waits for the quorum before giving up.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(120);

/// Registers with the active controller (retrying while there is none) and
/// heartbeats until the controller unfences this broker.
/// Raises the soft limit on open files to the hard limit, as the JVM does
/// for Kafka: every client connection and segment file holds a descriptor,
/// and the usual soft limit (1024) is reached by clients alone.
pub fn raise_open_file_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write only the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            let before = lim.rlim_cur;
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) == 0 {
                tracing::info!(
                    from = before,
                    to = lim.rlim_max,
                    "raised the open-file limit"
                );
            }
        }
    }
}

pub async fn register(
    config: &BrokerConfig,
    controller: &ControllerLink,
) -> Result<Registration, String> {
    let advertised = config.advertised();
    let req = BrokerRegistrationRequest {
        broker_id: config.broker_id(),
        incarnation_id: uuid::Uuid::new_v4(),
        host: advertised.host.clone(),
        port: advertised.port,
        rack: config.broker_rack.clone(),
    };
    let deadline = tokio::time::Instant::now() + REGISTRATION_TIMEOUT;
    let broker_epoch = loop {
        match controller.register_broker(req.clone()).await {
            Ok(epoch) => break epoch,
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::info!(error = %e.message, "broker registration not accepted yet; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(format!("broker registration failed: {}", e.message)),
        }
    };
    tracing::info!(
        broker_epoch = broker_epoch.get(),
        "registered with the controller"
    );
    let registration = Registration {
        broker_epoch,
        fenced: Arc::new(AtomicBool::new(true)),
    };
    // Heartbeat as soon as the local image has our registration, until unfenced.
    let mut images = controller.subscribe();
    loop {
        let applied = images.borrow_and_update().applied;
        match controller
            .heartbeat(heartbeat_request(config, broker_epoch, applied, false))
            .await
        {
            Ok(reply) if !reply.is_fenced => break,
            Ok(_) => {}
            Err(e) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = %e.message, "heartbeat failed")
            }
            Err(e) => return Err(format!("could not get unfenced: {}", e.message)),
        }
        if tokio::time::Instant::now() >= deadline {
            return Err("the controller did not unfence this broker in time".into());
        }
        // Wait for newer metadata (or a short while) before the next heartbeat.
        let _ = tokio::time::timeout(Duration::from_millis(250), images.changed()).await;
    }
    registration.fenced.store(false, Ordering::Release);
    tracing::info!("unfenced by the controller");
    Ok(registration)
}

fn heartbeat_request(
    config: &BrokerConfig,
    broker_epoch: BrokerEpoch,
    applied: u64,
    want_shutdown: bool,
) -> HeartbeatRequest {
    HeartbeatRequest {
        broker_id: config.broker_id(),
        broker_epoch,
        current_metadata_offset: applied,
        want_fence: false,
        want_shutdown,
    }
}

/// Heartbeats every broker.heartbeat.interval.ms for the life of the broker.
pub fn spawn_heartbeats(
    config: Arc<BrokerConfig>,
    controller: ControllerLink,
    registration: &Registration,
) {
    let epoch = registration.broker_epoch;
    let fenced = registration.fenced.clone();
    tokio::spawn(async move {
        let mut tick =
            tokio::time::interval(Duration::from_millis(config.broker_heartbeat_interval_ms));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let applied = controller.image().applied;
            match controller
                .heartbeat(heartbeat_request(&config, epoch, applied, false))
                .await
            {
                Ok(reply) => {
                    if fenced.swap(reply.is_fenced, Ordering::AcqRel) != reply.is_fenced {
                        tracing::warn!(fenced = reply.is_fenced, "fencing state changed");
                    }
                }
                Err(e) => tracing::warn!(error = %e.message, "heartbeat failed"),
            }
        }
    });
}

/// Controlled shutdown: asks the controller to move this broker's
/// leaderships away and waits (bounded) until it says the broker may stop.
pub async fn controlled_shutdown(
    config: &BrokerConfig,
    controller: &ControllerLink,
    registration: &Registration,
) {
    // Bounded: when the whole cluster stops at once there may be no quorum
    // left to answer, and the broker must still exit.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut images = controller.subscribe();
    while tokio::time::Instant::now() < deadline {
        let applied = images.borrow_and_update().applied;
        let request = heartbeat_request(config, registration.broker_epoch, applied, true);
        match tokio::time::timeout_at(deadline, controller.heartbeat(request)).await {
            Ok(Ok(reply)) if reply.should_shutdown => {
                tracing::info!("controlled shutdown complete");
                return;
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e.message, "controlled shutdown: controller unreachable; stopping anyway");
                return;
            }
            Err(_) => break,
        }
        let _ = tokio::time::timeout(Duration::from_millis(200), images.changed()).await;
    }
    tracing::warn!("controlled shutdown did not finish in time; stopping anyway");
}

/// Waits for SIGTERM or SIGINT.
pub async fn wait_for_signal() -> Result<(), String> {
    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
        _ = int.recv() => tracing::info!("SIGINT: shutting down"),
    }
    Ok(())
}
