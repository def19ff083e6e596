//! The controller's metrics (Kafka's `ControllerEventManager` and the
//! metadata log's commit latency), in Prometheus' text format; the binary
//! serves them with the broker's on `strand.http.listener`.

use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;

/// Milliseconds from 0.25 ms to about 16 s, doubling.
fn ms_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.25, 2.0, 17))
}

pub struct ControllerMetrics {
    registry: Registry,
    event_queue_ms: Histogram,
    event_processing_ms: Histogram,
    commit_ms: Histogram,
}

impl Default for ControllerMetrics {
    fn default() -> Self {
        let (event_queue_ms, event_processing_ms, commit_ms) =
            (ms_histogram(), ms_histogram(), ms_histogram());
        let mut registry = Registry::default();
        for (name, help, h) in [
            (
                "kafka_controller_controllereventmanager_eventqueuetimems",
                "Milliseconds a request waited in the controller's queue",
                &event_queue_ms,
            ),
            (
                "kafka_controller_controllereventmanager_eventqueueprocessingtimems",
                "Milliseconds the controller spent on a request, its metadata commit included",
                &event_processing_ms,
            ),
            (
                "kafka_server_raft_metrics_commit_latency_ms",
                "Milliseconds from proposing a metadata batch to its commit and apply here",
                &commit_ms,
            ),
        ] {
            registry.register(name, help, h.clone());
        }
        ControllerMetrics {
            registry,
            event_queue_ms,
            event_processing_ms,
            commit_ms,
        }
    }
}

impl std::fmt::Debug for ControllerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerMetrics").finish_non_exhaustive()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

impl ControllerMetrics {
    pub(crate) fn queued(&self, d: Duration) {
        self.event_queue_ms.observe(ms(d));
    }

    pub(crate) fn processed(&self, d: Duration) {
        self.event_processing_ms.observe(ms(d));
    }

    pub(crate) fn committed(&self, d: Duration) {
        self.commit_ms.observe(ms(d));
    }

    /// Appends the metrics, without the end-of-exposition line.
    pub fn encode_into(&self, out: &mut String) {
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_registry(out, &self.registry);
    }
}
