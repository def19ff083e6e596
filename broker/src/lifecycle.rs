//! The broker's life with the controller: BrokerRegistration at start,
//! heartbeats until it is unfenced and from then on, and a controlled shutdown
//! that moves its leaderships away before it exits.

use crate::config::BrokerConfig;
use crate::controller_link::ControllerLink;
use crate::log_dirs::LogDirs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use strand_metadata::controller_api::{
    ApiError, BrokerRegistrationRequest, HeartbeatRequest, LeaseGrant,
};
use strand_metadata::records::BrokerEndpoint;
pub use strand_partition::lease::WriteLease;
use strand_types::{BrokerEpoch, Clock};
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
    cluster_id: &str,
    controller: &ControllerLink,
    lease: &WriteLease,
    clock: &dyn Clock,
    log_dirs: &LogDirs,
) -> Result<Registration, String> {
    let advertised = config.advertised();
    let req = BrokerRegistrationRequest {
        broker_id: config.broker_id(),
        incarnation_id: uuid::Uuid::new_v4(),
        host: advertised.host.clone(),
        port: advertised.port,
        rack: config.broker_rack.clone(),
        // Every client listener it advertises: a client is told the
        // address of the listener it connected on.
        endpoints: config
            .advertised_listeners
            .iter()
            .filter(|l| !config.controller_listener_names.contains(&l.name))
            .map(|l| BrokerEndpoint {
                name: l.name.clone(),
                host: l.host.clone(),
                port: l.port,
            })
            .collect(),
        cluster_id: cluster_id.to_string(),
        log_dirs: log_dirs.online_ids(),
    };
    let deadline = tokio::time::Instant::now() + REGISTRATION_TIMEOUT;
    let broker_epoch = loop {
        match controller.register_broker(req.clone()).await {
            Ok(epoch) => break epoch,
            // Data of another cluster, or several log directories at a
            // metadata.version without them: retrying cannot help.
            Err(e)
                if matches!(
                    e.code,
                    strand_protocol::ErrorCode::InconsistentClusterId
                        | strand_protocol::ErrorCode::UnsupportedVersion
                ) =>
            {
                return Err(format!("broker registration refused: {}", e.message))
            }
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
        let sent_at = clock.monotonic_ms();
        match controller
            .heartbeat(heartbeat_request(
                config,
                broker_epoch,
                applied,
                false,
                log_dirs.offline_ids(),
            ))
            .await
        {
            Ok(reply) if !reply.is_fenced => {
                if let Some(grant) = &reply.lease {
                    lease.install(&to_grant(grant), broker_epoch, sent_at);
                }
                // No partition is open yet, and each opens from an image at
                // least this new: nothing here acts on an older one.
                lease.note_reconciled(applied);
                break;
            }
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
    offline_log_dirs: Vec<uuid::Uuid>,
) -> HeartbeatRequest {
    HeartbeatRequest {
        broker_id: config.broker_id(),
        broker_epoch,
        current_metadata_offset: applied,
        want_fence: false,
        want_shutdown,
        offline_log_dirs,
    }
}

/// The broker's write lease as configured (`strand.write.lease.enable`):
/// when enforced, write-forbidden until the first grant.
pub fn write_lease(config: &BrokerConfig) -> Arc<WriteLease> {
    Arc::new(if config.write_lease_enable {
        WriteLease::enforced(config.write_lease_safety_margin_ms)
    } else {
        WriteLease::unenforced()
    })
}

fn to_grant(g: &LeaseGrant) -> strand_replication::lease::LeaseGrant {
    strand_replication::lease::LeaseGrant {
        broker_epoch: g.broker_epoch,
        generation: g.generation,
        duration_ms: g.duration_ms,
        safe_metadata_offset: g.safe_metadata_offset,
    }
}

/// How soon after an answer a broker whose leases are enforced asks again
/// when an append waits on the safe offset or the metadata moved on: the
/// controller learns of applied offsets only through heartbeats, so a new
/// leader's first writes wait for a few of these rather than a whole
/// heartbeat interval.
const PROMPT_HEARTBEAT: Duration = Duration::from_millis(50);

/// Heartbeats every broker.heartbeat.interval.ms for the life of the
/// broker, installing each lease granted. With leases enforced it also
/// heartbeats promptly once the partitions take up a new image (so the
/// controller learns this broker applied a leadership change, or its own
/// fencing) and when an append waits for a newer safe offset; at once
/// when a log directory goes offline.
pub fn spawn_heartbeats(
    config: Arc<BrokerConfig>,
    controller: ControllerLink,
    registration: &Registration,
    lease: Arc<WriteLease>,
    clock: Arc<dyn Clock>,
    log_dirs: Arc<LogDirs>,
) {
    let epoch = registration.broker_epoch;
    let fenced = registration.fenced.clone();
    tokio::spawn(async move {
        let interval = Duration::from_millis(config.broker_heartbeat_interval_ms);
        let mut reconciled = lease.reconciled();
        let mut next = tokio::time::Instant::now() + interval;
        loop {
            if lease.is_enforced() {
                tokio::select! {
                    _ = tokio::time::sleep_until(next) => {}
                    changed = reconciled.changed() => {
                        if changed.is_ok() {
                            tokio::time::sleep(PROMPT_HEARTBEAT).await;
                        }
                    }
                    _ = lease.wanted() => tokio::time::sleep(PROMPT_HEARTBEAT).await,
                    _ = log_dirs.changed.notified() => {}
                }
            } else {
                tokio::select! {
                    _ = tokio::time::sleep_until(next) => {}
                    _ = log_dirs.changed.notified() => {}
                }
            }
            next = tokio::time::Instant::now() + interval;
            // What the partitions act on, not what the image holds (see
            // `WriteLease::reconciled`).
            let applied = *reconciled.borrow_and_update();
            let sent_at = clock.monotonic_ms();
            // Bounded, so a controller that cannot answer (none elected,
            // or cut off) is asked again rather than waited on.
            let answer = tokio::time::timeout(
                interval,
                controller.heartbeat(heartbeat_request(
                    &config,
                    epoch,
                    applied,
                    false,
                    log_dirs.offline_ids(),
                )),
            )
            .await
            .unwrap_or_else(|_| {
                Err(ApiError::new(
                    strand_protocol::ErrorCode::RequestTimedOut,
                    "no answer within the heartbeat interval",
                ))
            });
            match answer {
                Ok(reply) => {
                    if fenced.swap(reply.is_fenced, Ordering::AcqRel) != reply.is_fenced {
                        tracing::warn!(fenced = reply.is_fenced, "fencing state changed");
                    }
                    if let Some(grant) = &reply.lease {
                        lease.install(&to_grant(grant), epoch, sent_at);
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
    log_dirs: &LogDirs,
) {
    // Bounded: when the whole cluster stops at once there may be no quorum
    // left to answer, and the broker must still exit.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut images = controller.subscribe();
    while tokio::time::Instant::now() < deadline {
        let applied = images.borrow_and_update().applied;
        let request = heartbeat_request(
            config,
            registration.broker_epoch,
            applied,
            true,
            log_dirs.offline_ids(),
        );
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
