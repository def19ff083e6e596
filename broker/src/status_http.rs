//! The HTTP listener of `strand.http.listener`: `/metrics` (Prometheus'
//! text format, [`crate::metrics`]), `/health/live` and `/health/ready`,
//! and a status page (`/`, which polls `/status.json`). It serves nothing
//! else, and is off unless configured.
//!
//! It starts before the broker registers and recovers its logs, so a probe
//! sees the broker not ready while it does (`/health/ready` answers 503
//! with the checks that failed). Ready means: registered, unfenced, every
//! partition the start-up found loaded, the client listeners bound, and no
//! log directory offline: what
//! a load balancer or a Kubernetes readiness probe needs before sending
//! clients.
//!
//! A scrape reads state without waiting on any request's work: a group
//! whose state a request holds is left out of that scrape's lag.

use crate::metrics::StateSample;
use crate::node::Node;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

/// Appends a registry's metrics to a scrape.
pub type AppendMetrics = Box<dyn Fn(&mut String) + Send + Sync>;

/// What the endpoints read: the node once it exists, and the start-up's
/// progress before that.
#[derive(Default)]
pub struct Status {
    node: OnceLock<Arc<Node>>,
    loaded: AtomicBool,
    /// The client listeners are bound.
    serving: AtomicBool,
    /// A controller-only process: ready once its controller runs.
    controller_only: AtomicBool,
    /// True while this process is the active controller (combined or
    /// controller-only nodes).
    active_controller: OnceLock<Box<dyn Fn() -> bool + Send + Sync>>,
    /// Appends the controller's metrics (combined or controller-only nodes).
    controller_metrics: OnceLock<AppendMetrics>,
}

impl Status {
    pub fn new() -> Arc<Status> {
        Arc::new(Status::default())
    }

    /// The broker exists (it has registered).
    pub fn set_node(&self, node: Arc<Node>) {
        let _ = self.node.set(node);
    }

    /// The start-up's partitions are open (log recovery is over).
    pub fn set_loaded(&self) {
        self.loaded.store(true, Ordering::Release);
    }

    /// This process has no broker: ready once its controller runs.
    pub fn set_controller_only(&self) {
        self.controller_only.store(true, Ordering::Release);
        self.set_loaded();
    }

    /// The client listeners are bound.
    pub fn set_serving(&self) {
        self.serving.store(true, Ordering::Release);
    }

    pub fn set_active_controller(&self, f: Box<dyn Fn() -> bool + Send + Sync>) {
        let _ = self.active_controller.set(f);
    }

    pub fn set_controller_metrics(&self, f: AppendMetrics) {
        let _ = self.controller_metrics.set(f);
    }

    fn is_active_controller(&self) -> bool {
        self.active_controller.get().is_some_and(|f| f())
    }

    /// The readiness checks, each with whether it holds.
    pub fn readiness(&self) -> Vec<(&'static str, bool)> {
        if self.controller_only.load(Ordering::Acquire) {
            return vec![("controller_running", true)];
        }
        let node = self.node.get();
        let registered = node.is_some();
        let unfenced = node.is_some_and(|n| {
            n.broker
                .image()
                .brokers
                .get(&n.broker.node_id())
                .is_some_and(|b| !b.fenced)
        });
        let loaded = self.loaded.load(Ordering::Acquire);
        let serving = self.serving.load(Ordering::Acquire);
        let dirs_online =
            node.is_some_and(|n| n.broker.log_dirs.all().iter().all(|d| !d.is_offline()));
        vec![
            ("registered", registered),
            ("unfenced", unfenced),
            ("partitions_loaded", loaded),
            ("listeners_bound", serving),
            ("log_dirs_online", dirs_online),
        ]
    }

    /// The status page's data (None before the broker exists).
    pub fn status_text(&self) -> Option<String> {
        let node = self.node.get()?;
        Some(status_json(node, self.is_active_controller()).to_string())
    }

    /// The metrics text, with the state gauges read now.
    pub fn metrics_text(&self) -> String {
        let mut out = String::new();
        if let Some(node) = self.node.get() {
            node.broker
                .metrics
                .refresh(&sample(node, self.is_active_controller()));
            node.broker.metrics.encode_into(&mut out);
        }
        if let Some(controller) = self.controller_metrics.get() {
            controller(&mut out);
        }
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_eof(&mut out);
        out
    }
}

/// The state gauges of `node` (see [`StateSample`]).
pub fn sample(node: &Node, active_controller: bool) -> StateSample {
    let broker = &node.broker;
    let image = broker.image();
    let me = broker.node_id();
    let mut s = StateSample {
        partitions: broker.all_partitions().len() as i64,
        offline_replicas: broker.offline_replica_count() as i64,
        active_controller: i64::from(active_controller),
        offline_log_dirs: broker
            .log_dirs
            .all()
            .iter()
            .filter(|d| d.is_offline())
            .count() as i64,
        cleaner: Some({
            let c = node.cleaner.metrics();
            crate::metrics::CleanerSample {
                max_dirty_percent: c.max_dirty_percent,
                recopy_percent: c.cleaner_recopy_percent,
                max_clean_time_secs: c.max_clean_time_secs,
                max_buffer_utilization_percent: c.max_buffer_utilization_percent,
                uncleanable_partitions: c.uncleanable_partitions_count as i64,
                passes: c.passes as i64,
            }
        }),
        ..Default::default()
    };
    // Log end offsets of the partitions led here, for the lag.
    let mut led_ends = std::collections::HashMap::new();
    for (name, topic) in &image.topics {
        for p in &topic.partitions {
            let index = &p.partition;
            if active_controller && p.leader.is_none() {
                s.offline_partitions += 1;
            }
            if p.leader != Some(me) {
                continue;
            }
            s.leaders += 1;
            match name.as_str() {
                crate::group_coordinator::OFFSETS_TOPIC => s.group_coordinator_partitions += 1,
                crate::txn_coordinator::TXN_TOPIC => s.txn_coordinator_partitions += 1,
                _ => {}
            }
            let replicas = p.replicas.len().saturating_sub(p.adding_replicas.len());
            if p.isr.len() < replicas {
                s.under_replicated += 1;
            }
            if let Some(part) = broker.partition(name, *index) {
                if (p.isr.len() as i64) < i64::from(part.settings().min_insync_replicas) {
                    s.under_min_isr += 1;
                }
                led_ends.insert((name.as_str(), *index), part.offsets().log_end_offset.get());
            }
        }
    }
    if active_controller {
        for b in image.brokers.values() {
            if b.fenced {
                s.fenced_brokers += 1;
            } else {
                s.active_brokers += 1;
            }
        }
    }
    let groups = node.groups.all_groups();
    s.groups = groups.len() as i64;
    for g in groups {
        // A request holds the group: its lag waits for the next scrape.
        let Ok(slot) = g.slot.try_lock() else {
            continue;
        };
        for ((topic, partition), committed) in slot.offsets.committed() {
            if let Some(end) = led_ends.get(&(topic.as_str(), *partition)) {
                s.lag.push((
                    g.id.clone(),
                    topic.clone(),
                    *partition,
                    (end - committed.offset).max(0),
                ));
            }
        }
    }
    s
}

/// The status page's data: the cluster as this broker sees it (brokers,
/// topics with leader, replicas, ISR; the groups coordinated here with
/// their lag) and its running totals, from which the page draws rates.
pub fn status_json(node: &Node, active_controller: bool) -> serde_json::Value {
    use serde_json::json;
    let broker = &node.broker;
    let image = broker.image();
    let brokers: Vec<_> = image
        .brokers
        .values()
        .map(|b| {
            let state = if b.fenced {
                "fenced"
            } else if b.in_controlled_shutdown {
                "shutting down"
            } else {
                "active"
            };
            json!({"id": b.broker_id.get(), "host": b.host, "port": b.port, "rack": b.rack, "state": state})
        })
        .collect();
    let topics: Vec<_> = image
        .topics
        .iter()
        .map(|(name, t)| {
            let partitions: Vec<_> = t
                .partitions
                .iter()
                .map(|p| {
                    let ids = |v: &[strand_types::BrokerId]| {
                        v.iter().map(|b| b.get()).collect::<Vec<_>>()
                    };
                    let replicas = p.replicas.len().saturating_sub(p.adding_replicas.len());
                    json!({
                        "partition": p.partition,
                        "leader": p.leader.map(|b| b.get()),
                        "replicas": ids(&p.replicas),
                        "isr": ids(&p.isr),
                        "under_replicated": p.isr.len() < replicas,
                    })
                })
                .collect();
            json!({"name": name, "partitions": partitions})
        })
        .collect();
    let sample = sample(node, active_controller);
    let mut groups: Vec<serde_json::Value> = Vec::new();
    for g in node.groups.all_groups() {
        let Ok(slot) = g.slot.try_lock() else {
            continue;
        };
        let (state, members) = slot.group.as_ref().map_or(("Empty".to_string(), 0), |gr| {
            (gr.state().to_string(), gr.members().len())
        });
        let lag: Vec<_> = sample
            .lag
            .iter()
            .filter(|(id, ..)| *id == g.id)
            .map(|(_, topic, partition, lag)| json!({"topic": topic, "partition": partition, "lag": lag}))
            .collect();
        groups.push(json!({"id": g.id, "state": state, "members": members, "lag": lag}));
    }
    let t = broker.metrics.totals();
    json!({
        "node_id": broker.node_id().get(),
        "cluster_id": image.cluster_id,
        "active_controller": active_controller,
        "time_ms": std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        "brokers": brokers,
        "topics": topics,
        "groups": groups,
        "totals": {
            "messages_in": t.messages_in,
            "bytes_in": t.bytes_in,
            "bytes_out": t.bytes_out,
            "produce_ms": t.produce.0,
            "produce_requests": t.produce.1,
            "fetch_ms": t.fetch.0,
            "fetch_requests": t.fetch.1,
        },
    })
}

/// Serves the endpoints on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, status: Arc<Status>) {
    let app = axum::Router::new()
        .route(
            "/metrics",
            get({
                let status = status.clone();
                move || async move {
                    let text =
                        tokio::task::spawn_blocking(move || status.metrics_text())
                            .await
                            .unwrap_or_default();
                    (
                        [(
                            header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        text,
                    )
                }
            }),
        )
        .route(
            "/",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
                    include_str!("status.html"),
                )
            }),
        )
        .route(
            "/status.json",
            get({
                let status = status.clone();
                move || async move {
                    let body = tokio::task::spawn_blocking(move || status.status_text())
                        .await
                        .unwrap_or_default();
                    match body {
                        Some(body) => (
                            StatusCode::OK,
                            [(header::CONTENT_TYPE, "application/json")],
                            body,
                        ),
                        None => (
                            StatusCode::SERVICE_UNAVAILABLE,
                            [(header::CONTENT_TYPE, "application/json")],
                            "{\"error\":\"the broker is starting\"}".to_string(),
                        ),
                    }
                }
            }),
        )
        .route("/health/live", get(|| async { "live\n" }))
        .route(
            "/health/ready",
            get(move || async move {
                let checks = status.readiness();
                let ready = checks.iter().all(|(_, ok)| *ok);
                let body = serde_json::json!({
                    "ready": ready,
                    "checks": checks.iter().map(|(k, v)| (k.to_string(), serde_json::Value::Bool(*v))).collect::<serde_json::Map<_, _>>(),
                });
                let code = if ready {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                (
                    code,
                    [(header::CONTENT_TYPE, "application/json")],
                    format!("{body}\n"),
                )
                    .into_response()
            }),
        );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "the HTTP listener stopped");
    }
}
