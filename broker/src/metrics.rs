//! The broker's metrics, in Prometheus' text format (`prometheus-client`),
//! served on `strand.http.listener` (`status_http`).
//!
//! Names are what the JMX exporter's usual Kafka rules make of Kafka's
//! MBeans (`kafka.server:type=BrokerTopicMetrics,name=MessagesInPerSec`
//! becomes `kafka_server_brokertopicmetrics_messagesin_total`), so that
//! dashboards and alerts written for Kafka read Strand's; times are
//! histograms in milliseconds where Kafka's are JMX histograms. The table
//! of every metric, with its type, labels and meaning, is README.md's
//! "Metrics".
//!
//! Counters and histograms are recorded where things happen (one atomic
//! add; a topic's counters are looked up by name, without allocating after
//! the topic's first request). Gauges that describe state (partitions,
//! leaders, groups, lag) are computed from that state at each scrape
//! ([`BrokerMetrics::refresh`]), so they cannot drift from it.

use parking_lot::RwLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;
use std::time::Duration;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TopicLabels {
    topic: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ListenerLabels {
    listener: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    request: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PurgatoryLabels {
    delayedoperation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LagLabels {
    consumergroup: String,
    topic: String,
    partition: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProtocolLabels {
    protocol: &'static str,
}

/// Milliseconds from 0.25 ms to about 16 s, doubling.
fn ms_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.25, 2.0, 17))
}

type FloatGauge = Gauge<f64, AtomicU64>;

/// A topic's counters, cloned from their families (they share the value).
#[derive(Clone)]
struct TopicCounters {
    messages_in: Counter,
    bytes_in: Counter,
    bytes_out: Counter,
}

/// A request type's handles, cloned from their families.
#[derive(Clone)]
struct RequestHandles {
    requests: Counter,
    total_ms: Histogram,
    /// The total time summed (the status page's mean; not exported).
    total_ms_sum: Counter<f64, AtomicU64>,
    queue_ms: Histogram,
    throttle_ms: Histogram,
}

/// What a scrape reads of the broker's state (filled by the caller, which
/// owns that state).
#[derive(Debug, Default, Clone, PartialEq)]
pub struct StateSample {
    pub partitions: i64,
    pub leaders: i64,
    pub under_replicated: i64,
    pub under_min_isr: i64,
    pub offline_replicas: i64,
    /// 1 on the active controller.
    pub active_controller: i64,
    /// Partitions without a leader (reported by the active controller only,
    /// as Kafka does, so that a sum over the cluster counts each once).
    pub offline_partitions: i64,
    pub fenced_brokers: i64,
    pub active_brokers: i64,
    pub groups: i64,
    pub txn_coordinator_partitions: i64,
    pub group_coordinator_partitions: i64,
    /// (group, topic, partition, lag) where this broker knows both ends.
    pub lag: Vec<(String, String, i32, i64)>,
    pub cleaner: Option<CleanerSample>,
    pub offline_log_dirs: i64,
}

/// The log cleaner's figures (Kafka's cleaner metrics), as a scrape reads them.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct CleanerSample {
    pub max_dirty_percent: f64,
    pub recopy_percent: f64,
    pub max_clean_time_secs: f64,
    pub max_buffer_utilization_percent: f64,
    pub uncleanable_partitions: i64,
    pub passes: i64,
}

/// See [`BrokerMetrics::totals`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Totals {
    pub messages_in: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub produce: (f64, u64),
    pub fetch: (f64, u64),
}

/// Every metric of one broker, and the registry that encodes them.
pub struct BrokerMetrics {
    registry: Registry,
    /// Recording is on only where something serves the metrics
    /// (`strand.http.listener`): otherwise the hot paths skip it.
    enabled: bool,
    messages_in: Family<TopicLabels, Counter>,
    bytes_in: Family<TopicLabels, Counter>,
    bytes_out: Family<TopicLabels, Counter>,
    all_messages_in: Counter,
    all_bytes_in: Counter,
    all_bytes_out: Counter,
    replication_bytes_out: Counter,
    replication_bytes_in: Counter,
    topics: RwLock<HashMap<String, TopicCounters>>,
    requests: Family<RequestLabels, Counter>,
    request_total_ms: Family<RequestLabels, Histogram, fn() -> Histogram>,
    request_queue_ms: Family<RequestLabels, Histogram, fn() -> Histogram>,
    throttle_ms: Family<RequestLabels, Histogram, fn() -> Histogram>,
    /// By API key (Kafka's keys are below 128).
    by_api: Vec<OnceLock<RequestHandles>>,
    purgatory: Family<PurgatoryLabels, Gauge>,
    produce_purgatory: Gauge,
    fetch_purgatory: Gauge,
    pub isr_shrinks: Counter,
    pub isr_expands: Counter,
    pub failed_isr_updates: Counter,
    log_flush_ms: Histogram,
    authentication_ok: Family<ListenerLabels, Counter>,
    authentication_failed: Family<ListenerLabels, Counter>,
    // State, refreshed at each scrape.
    partitions: Gauge,
    leaders: Gauge,
    under_replicated: Gauge,
    under_min_isr: Gauge,
    offline_replicas: Gauge,
    active_controller: Gauge,
    offline_partitions: Gauge,
    fenced_brokers: Gauge,
    active_brokers: Gauge,
    groups: Family<ProtocolLabels, Gauge>,
    txn_partitions: Gauge,
    group_partitions: Gauge,
    lag: Family<LagLabels, Gauge>,
    offline_log_dirs: Gauge,
    cleaner_max_dirty_percent: FloatGauge,
    cleaner_recopy_percent: FloatGauge,
    cleaner_max_clean_time_secs: FloatGauge,
    cleaner_max_buffer_utilization_percent: FloatGauge,
    cleaner_uncleanable_partitions: Gauge,
    cleaner_passes: Gauge,
}

impl Default for BrokerMetrics {
    fn default() -> Self {
        Self::new(true)
    }
}

impl std::fmt::Debug for BrokerMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BrokerMetrics").finish_non_exhaustive()
    }
}

impl BrokerMetrics {
    pub fn new(enabled: bool) -> BrokerMetrics {
        let mut r = Registry::default();
        let histograms = || Family::new_with_constructor(ms_histogram as fn() -> Histogram);
        let m = BrokerMetrics {
            messages_in: Family::default(),
            bytes_in: Family::default(),
            bytes_out: Family::default(),
            all_messages_in: Counter::default(),
            all_bytes_in: Counter::default(),
            all_bytes_out: Counter::default(),
            replication_bytes_out: Counter::default(),
            replication_bytes_in: Counter::default(),
            topics: RwLock::new(HashMap::new()),
            requests: Family::default(),
            request_total_ms: histograms(),
            request_queue_ms: histograms(),
            throttle_ms: histograms(),
            by_api: (0..128).map(|_| OnceLock::new()).collect(),
            purgatory: Family::default(),
            produce_purgatory: Gauge::default(),
            fetch_purgatory: Gauge::default(),
            isr_shrinks: Counter::default(),
            isr_expands: Counter::default(),
            failed_isr_updates: Counter::default(),
            log_flush_ms: ms_histogram(),
            authentication_ok: Family::default(),
            authentication_failed: Family::default(),
            partitions: Gauge::default(),
            leaders: Gauge::default(),
            under_replicated: Gauge::default(),
            under_min_isr: Gauge::default(),
            offline_replicas: Gauge::default(),
            active_controller: Gauge::default(),
            offline_partitions: Gauge::default(),
            fenced_brokers: Gauge::default(),
            active_brokers: Gauge::default(),
            groups: Family::default(),
            txn_partitions: Gauge::default(),
            group_partitions: Gauge::default(),
            lag: Family::default(),
            offline_log_dirs: Gauge::default(),
            cleaner_max_dirty_percent: FloatGauge::default(),
            cleaner_recopy_percent: FloatGauge::default(),
            cleaner_max_clean_time_secs: FloatGauge::default(),
            cleaner_max_buffer_utilization_percent: FloatGauge::default(),
            cleaner_uncleanable_partitions: Gauge::default(),
            cleaner_passes: Gauge::default(),
            registry: Registry::default(),
            enabled,
        };
        for (name, help, family) in [
            (
                "kafka_server_brokertopicmetrics_messagesin",
                "Records appended by clients, per topic",
                &m.messages_in,
            ),
            (
                "kafka_server_brokertopicmetrics_bytesin",
                "Bytes of record batches appended by clients, per topic",
                &m.bytes_in,
            ),
            (
                "kafka_server_brokertopicmetrics_bytesout",
                "Bytes of records sent to consumers, per topic",
                &m.bytes_out,
            ),
        ] {
            r.register(name, help, family.clone());
        }
        let sub = r.sub_registry_with_prefix("kafka_server_brokertopicmetrics_all");
        sub.register(
            "messagesin",
            "Records appended by clients, every topic",
            m.all_messages_in.clone(),
        );
        sub.register(
            "bytesin",
            "Bytes appended by clients, every topic",
            m.all_bytes_in.clone(),
        );
        sub.register(
            "bytesout",
            "Bytes sent to consumers, every topic",
            m.all_bytes_out.clone(),
        );
        for (name, help, counter) in [
            (
                "kafka_server_brokertopicmetrics_replicationbytesout",
                "Bytes sent to followers",
                &m.replication_bytes_out,
            ),
            (
                "kafka_server_brokertopicmetrics_replicationbytesin",
                "Bytes this broker's followers fetched from their leaders",
                &m.replication_bytes_in,
            ),
            (
                "kafka_server_replicamanager_isrshrinks",
                "ISR shrinks this broker proposed as leader",
                &m.isr_shrinks,
            ),
            (
                "kafka_server_replicamanager_isrexpands",
                "ISR expansions this broker proposed as leader",
                &m.isr_expands,
            ),
            (
                "kafka_server_replicamanager_failedisrupdates",
                "ISR changes the controller refused",
                &m.failed_isr_updates,
            ),
        ] {
            r.register(name, help, counter.clone());
        }
        r.register(
            "kafka_server_socket_server_metrics_successful_authentication",
            "Connections authenticated (SASL, or a connection without SASL accepted), per listener",
            m.authentication_ok.clone(),
        );
        r.register(
            "kafka_server_socket_server_metrics_failed_authentication",
            "Authentications that failed (SASL or TLS), per listener",
            m.authentication_failed.clone(),
        );
        r.register(
            "kafka_network_requestmetrics_requests",
            "Requests answered, per API",
            m.requests.clone(),
        );
        for (name, help, family) in [
            ("kafka_network_requestmetrics_totaltimems", "Milliseconds from a request's last byte read to its response written, per API", &m.request_total_ms),
            ("kafka_network_requestmetrics_requestqueuetimems", "Milliseconds from a request's last byte read to its handler starting (decoding, authentication, quota metering), per API", &m.request_queue_ms),
            ("kafka_network_requestmetrics_throttletimems", "Milliseconds a quota held a connection after a response, per API (throttled requests only)", &m.throttle_ms),
        ] {
            r.register(name, help, family.clone());
        }
        r.register(
            "kafka_server_delayedoperationpurgatory_purgatorysize",
            "Requests waiting: Produce for acks=all, Fetch for min.bytes or a long poll",
            m.purgatory.clone(),
        );
        r.register(
            "kafka_log_logflushstats_logflushrateandtimems",
            "Milliseconds per log flush (fsync) of a partition",
            m.log_flush_ms.clone(),
        );
        r.register(
            "kafka_server_group_coordinator_metrics_group_count",
            "Consumer groups whose coordinator is here, per protocol",
            m.groups.clone(),
        );
        r.register(
            "kafka_consumergroup_lag",
            "A group's committed offset behind the partition's log end offset, where this broker is both the group's coordinator and the partition's leader",
            m.lag.clone(),
        );
        for (name, help, gauge) in [
            ("kafka_server_replicamanager_partitioncount", "Partitions hosted here", &m.partitions),
            ("kafka_server_replicamanager_leadercount", "Partitions led here", &m.leaders),
            (
                "kafka_server_replicamanager_underreplicatedpartitions",
                "Partitions led here whose ISR is smaller than their replicas",
                &m.under_replicated,
            ),
            (
                "kafka_server_replicamanager_underminisrpartitioncount",
                "Partitions led here whose ISR is smaller than min.insync.replicas",
                &m.under_min_isr,
            ),
            (
                "kafka_server_replicamanager_offlinereplicacount",
                "Replicas assigned here that are offline (failed to open, or their log directory failed)",
                &m.offline_replicas,
            ),
            (
                "kafka_controller_kafkacontroller_activecontrollercount",
                "1 on the active controller, 0 elsewhere",
                &m.active_controller,
            ),
            (
                "kafka_controller_kafkacontroller_offlinepartitionscount",
                "Partitions without a leader (on the active controller; 0 elsewhere)",
                &m.offline_partitions,
            ),
            (
                "kafka_controller_kafkacontroller_fencedbrokercount",
                "Registered brokers that are fenced (on the active controller; 0 elsewhere)",
                &m.fenced_brokers,
            ),
            (
                "kafka_controller_kafkacontroller_activebrokercount",
                "Registered brokers that are not fenced (on the active controller; 0 elsewhere)",
                &m.active_brokers,
            ),
            (
                "kafka_server_transaction_coordinator_metrics_partition_count",
                "__transaction_state partitions whose coordinator is here",
                &m.txn_partitions,
            ),
            (
                "kafka_server_group_coordinator_metrics_partition_count",
                "__consumer_offsets partitions whose coordinator is here",
                &m.group_partitions,
            ),
            (
                "kafka_log_logmanager_offlinelogdirectorycount",
                "Log directories that failed",
                &m.offline_log_dirs,
            ),
            (
                "kafka_log_logcleanermanager_uncleanable_partitions_count",
                "Compacted partitions the cleaner gave up on",
                &m.cleaner_uncleanable_partitions,
            ),
            ("kafka_log_logcleaner_passes", "Cleaner passes completed", &m.cleaner_passes),
        ] {
            r.register(name, help, gauge.clone());
        }
        for (name, help, gauge) in [
            ("kafka_log_logcleanermanager_max_dirty_percent", "The dirtiest compacted log's dirty ratio, in percent, at the cleaner's last choice", &m.cleaner_max_dirty_percent),
            ("kafka_log_logcleaner_cleaner_recopy_percent", "Bytes the last pass wrote, in percent of those it read", &m.cleaner_recopy_percent),
            ("kafka_log_logcleaner_max_clean_time_secs", "The longest cleaner pass, in seconds", &m.cleaner_max_clean_time_secs),
            ("kafka_log_logcleaner_max_buffer_utilization_percent", "The offset map's fill in the last pass, in percent", &m.cleaner_max_buffer_utilization_percent),
        ] {
            r.register(name, help, gauge.clone());
        }
        BrokerMetrics { registry: r, ..m }
    }

    fn topic(&self, topic: &str) -> TopicCounters {
        if let Some(c) = self.topics.read().get(topic) {
            return c.clone();
        }
        let labels = TopicLabels {
            topic: topic.to_string(),
        };
        let c = TopicCounters {
            messages_in: self.messages_in.get_or_create(&labels).clone(),
            bytes_in: self.bytes_in.get_or_create(&labels).clone(),
            bytes_out: self.bytes_out.get_or_create(&labels).clone(),
        };
        self.topics.write().insert(topic.to_string(), c.clone());
        c
    }

    /// Records appended to `topic` by a client.
    pub fn appended(&self, topic: &str, records: u64, bytes: u64) {
        if !self.enabled {
            return;
        }
        let c = self.topic(topic);
        c.messages_in.inc_by(records);
        c.bytes_in.inc_by(bytes);
        self.all_messages_in.inc_by(records);
        self.all_bytes_in.inc_by(bytes);
    }

    /// Bytes of `topic` sent to a consumer (`follower`: to a follower).
    pub fn sent(&self, topic: &str, bytes: u64, follower: bool) {
        if !self.enabled {
            return;
        }
        if follower {
            self.replication_bytes_out.inc_by(bytes);
        } else {
            self.topic(topic).bytes_out.inc_by(bytes);
            self.all_bytes_out.inc_by(bytes);
        }
    }

    /// Bytes a follower here appended from its leader.
    pub fn replicated_in(&self, bytes: u64) {
        if !self.enabled {
            return;
        }
        self.replication_bytes_in.inc_by(bytes);
    }

    /// Forgets a deleted topic's counters (Kafka removes its metrics).
    pub fn remove_topic(&self, topic: &str) {
        if self.topics.write().remove(topic).is_some() {
            let labels = TopicLabels {
                topic: topic.to_string(),
            };
            self.messages_in.remove(&labels);
            self.bytes_in.remove(&labels);
            self.bytes_out.remove(&labels);
        }
    }

    fn request(&self, api_key: i16, name: impl FnOnce() -> String) -> Option<&RequestHandles> {
        let slot = self.by_api.get(usize::try_from(api_key).ok()?)?;
        Some(slot.get_or_init(|| {
            let labels = RequestLabels { request: name() };
            RequestHandles {
                requests: self.requests.get_or_create(&labels).clone(),
                total_ms: self.request_total_ms.get_or_create(&labels).clone(),
                total_ms_sum: Counter::default(),
                queue_ms: self.request_queue_ms.get_or_create(&labels).clone(),
                throttle_ms: self.throttle_ms.get_or_create(&labels).clone(),
            }
        }))
    }

    /// One request answered: its queue and total time, and the throttle a
    /// quota gave it.
    pub fn answered(
        &self,
        api_key: i16,
        name: impl FnOnce() -> String,
        queue: Duration,
        total: Duration,
        throttle_ms: u64,
    ) {
        if !self.enabled {
            return;
        }
        let Some(h) = self.request(api_key, name) else {
            return;
        };
        h.requests.inc();
        h.queue_ms.observe(queue.as_secs_f64() * 1e3);
        h.total_ms.observe(total.as_secs_f64() * 1e3);
        h.total_ms_sum.inc_by(total.as_secs_f64() * 1e3);
        if throttle_ms > 0 {
            h.throttle_ms.observe(throttle_ms as f64);
        }
    }

    /// Running totals for the status page: (records in, bytes in, bytes
    /// out, Produce and Fetch as (milliseconds summed, requests)).
    pub fn totals(&self) -> Totals {
        let api = |key: usize| {
            self.by_api[key]
                .get()
                .map_or((0.0, 0), |h| (h.total_ms_sum.get(), h.requests.get()))
        };
        Totals {
            messages_in: self.all_messages_in.get(),
            bytes_in: self.all_bytes_in.get(),
            bytes_out: self.all_bytes_out.get(),
            produce: api(0),
            fetch: api(1),
        }
    }

    /// A request waits in a purgatory until the guard is dropped.
    pub fn waiting(&self, produce: bool) -> PurgatoryGuard {
        let g = if produce {
            &self.produce_purgatory
        } else {
            &self.fetch_purgatory
        };
        g.inc();
        PurgatoryGuard(g.clone())
    }

    /// What a log reports its flush times to (None: not recorded).
    pub fn flush_listener(&self) -> Option<strand_log::FlushListener> {
        if !self.enabled {
            return None;
        }
        let h = self.log_flush_ms.clone();
        Some(std::sync::Arc::new(move |d: Duration| {
            h.observe(d.as_secs_f64() * 1e3)
        }))
    }

    /// A listener's authentication counters, at zero.
    pub fn listener_started(&self, listener: &str) {
        let labels = ListenerLabels {
            listener: listener.to_string(),
        };
        let _ = self.authentication_ok.get_or_create(&labels);
        let _ = self.authentication_failed.get_or_create(&labels);
    }

    /// One authentication on `listener` (once per connection, so
    /// the label's allocation is not on a request's path).
    pub fn authentication(&self, listener: &str, succeeded: bool) {
        let family = if succeeded {
            &self.authentication_ok
        } else {
            &self.authentication_failed
        };
        family
            .get_or_create(&ListenerLabels {
                listener: listener.to_string(),
            })
            .inc();
    }

    /// Sets the state gauges from `s`.
    pub fn refresh(&self, s: &StateSample) {
        self.partitions.set(s.partitions);
        self.leaders.set(s.leaders);
        self.under_replicated.set(s.under_replicated);
        self.under_min_isr.set(s.under_min_isr);
        self.offline_replicas.set(s.offline_replicas);
        self.active_controller.set(s.active_controller);
        self.offline_partitions.set(s.offline_partitions);
        self.fenced_brokers.set(s.fenced_brokers);
        self.active_brokers.set(s.active_brokers);
        self.groups
            .get_or_create(&ProtocolLabels {
                protocol: "classic",
            })
            .set(s.groups);
        self.txn_partitions.set(s.txn_coordinator_partitions);
        self.group_partitions.set(s.group_coordinator_partitions);
        self.offline_log_dirs.set(s.offline_log_dirs);
        self.lag.clear();
        for (group, topic, partition, lag) in &s.lag {
            self.lag
                .get_or_create(&LagLabels {
                    consumergroup: group.clone(),
                    topic: topic.clone(),
                    partition: partition.to_string(),
                })
                .set(*lag);
        }
        for (labels, gauge) in [
            ("Produce", &self.produce_purgatory),
            ("Fetch", &self.fetch_purgatory),
        ] {
            self.purgatory
                .get_or_create(&PurgatoryLabels {
                    delayedoperation: labels,
                })
                .set(gauge.get());
        }
        if let Some(c) = &s.cleaner {
            self.cleaner_max_dirty_percent.set(c.max_dirty_percent);
            self.cleaner_recopy_percent.set(c.recopy_percent);
            self.cleaner_max_clean_time_secs.set(c.max_clean_time_secs);
            self.cleaner_max_buffer_utilization_percent
                .set(c.max_buffer_utilization_percent);
            self.cleaner_uncleanable_partitions
                .set(c.uncleanable_partitions);
            self.cleaner_passes.set(c.passes);
        }
    }

    /// Every metric in Prometheus' text format (OpenMetrics).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        self.encode_into(&mut out);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_eof(&mut out);
        out
    }

    /// Appends every metric, without the end-of-exposition line.
    pub fn encode_into(&self, out: &mut String) {
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode_registry(out, &self.registry);
    }
}

/// A request in a purgatory (see [`BrokerMetrics::waiting`]).
pub struct PurgatoryGuard(Gauge);

impl Drop for PurgatoryGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_jmx_exporters() {
        let m = BrokerMetrics::new(true);
        m.appended("t", 3, 100);
        m.sent("t", 40, false);
        m.answered(
            0,
            || "Produce".into(),
            Duration::from_micros(300),
            Duration::from_millis(2),
            0,
        );
        m.refresh(&StateSample {
            under_replicated: 1,
            lag: vec![("g".into(), "t".into(), 0, 7)],
            ..Default::default()
        });
        let text = m.encode();
        for line in [
            "kafka_server_brokertopicmetrics_messagesin_total{topic=\"t\"} 3",
            "kafka_server_brokertopicmetrics_bytesin_total{topic=\"t\"} 100",
            "kafka_server_brokertopicmetrics_bytesout_total{topic=\"t\"} 40",
            "kafka_server_brokertopicmetrics_all_messagesin_total 3",
            "kafka_network_requestmetrics_requests_total{request=\"Produce\"} 1",
            "kafka_network_requestmetrics_totaltimems_count{request=\"Produce\"} 1",
            "kafka_server_replicamanager_underreplicatedpartitions 1",
            "kafka_consumergroup_lag{consumergroup=\"g\",topic=\"t\",partition=\"0\"} 7",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        m.remove_topic("t");
        assert!(!m.encode().contains("topic=\"t\"} 3"));
    }

    #[test]
    fn purgatory_size_follows_the_guards() {
        let m = BrokerMetrics::new(true);
        let a = m.waiting(true);
        let _b = m.waiting(true);
        let _c = m.waiting(false);
        drop(a);
        m.refresh(&StateSample::default());
        let text = m.encode();
        assert!(text.contains(
            "kafka_server_delayedoperationpurgatory_purgatorysize{delayedoperation=\"Produce\"} 1"
        ));
        assert!(text.contains(
            "kafka_server_delayedoperationpurgatory_purgatorysize{delayedoperation=\"Fetch\"} 1"
        ));
    }
}
