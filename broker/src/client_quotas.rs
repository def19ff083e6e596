//! Client quota enforcement, as Kafka's ClientQuotaManager does it: each
//! quota's usage is a rate over `quota.window.num` samples of
//! `quota.window.size.seconds`, counted per (user, client-id) as the quota's
//! entity names them (`strand_metadata::quotas::resolve`). A request that
//! takes the rate over its bound is answered with a throttle time, the time
//! the rate needs to fall back to the bound, and the connection is muted
//! for that long. The rate and throttle arithmetic is [`Rate`], a pure
//! function of (samples, value, now); the manager owns the rates.

use crate::zero_copy::SliceRegistry;
use kafka_protocol::messages::{RequestKind, ResponseKind};
use kafka_protocol::protocol::Encodable;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use strand_metadata::image::MetadataImage;
use strand_metadata::quotas::{
    resolve, QuotaTags, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE,
};

/// What a quota limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuotaType {
    /// Produce request bytes per second (`producer_byte_rate`).
    Produce,
    /// Fetch response bytes per second (`consumer_byte_rate`).
    Fetch,
    /// Request handling time, in percent of one thread (`request_percentage`).
    Request,
}

impl QuotaType {
    pub fn key(self) -> &'static str {
        match self {
            QuotaType::Produce => PRODUCER_BYTE_RATE,
            QuotaType::Fetch => CONSUMER_BYTE_RATE,
            QuotaType::Request => REQUEST_PERCENTAGE,
        }
    }
}

/// `quota.window.num` and `quota.window.size.seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QuotaWindow {
    pub samples: u32,
    pub window_ms: i64,
}

impl Default for QuotaWindow {
    fn default() -> Self {
        QuotaWindow {
            samples: 11,
            window_ms: 1000,
        }
    }
}

/// A rate over sampled windows (Kafka's `Rate` over a `SampledStat`): a
/// ring of `samples + 1` windows, each restarted in place when the ring
/// comes round to it, and emptied once nothing was recorded in it for the
/// whole `samples × window`.
#[derive(Clone, Debug, Default)]
pub struct Rate {
    samples: Vec<Sample>,
    /// The sample being recorded into.
    current: usize,
}

#[derive(Clone, Copy, Debug)]
struct Sample {
    start_ms: i64,
    last_event_ms: i64,
    total: f64,
}

impl Sample {
    fn new(now_ms: i64) -> Sample {
        Sample {
            start_ms: now_ms,
            last_event_ms: now_ms,
            total: 0.0,
        }
    }
}

impl Rate {
    /// Adds `value` at `now_ms`: to the current sample, or to the next one
    /// once the current window is over.
    pub fn record(&mut self, w: QuotaWindow, value: f64, now_ms: i64) {
        if self.samples.is_empty() {
            self.samples.push(Sample::new(now_ms));
            self.current = 0;
        }
        if now_ms - self.samples[self.current].start_ms >= w.window_ms {
            self.current = (self.current + 1) % (w.samples as usize + 1);
            if self.current == self.samples.len() {
                self.samples.push(Sample::new(now_ms));
            } else {
                self.samples[self.current] = Sample::new(now_ms);
            }
        }
        let sample = &mut self.samples[self.current];
        sample.total += value;
        sample.last_event_ms = now_ms;
    }

    /// A sample nothing was recorded in for the whole window counts no more.
    fn purge(&mut self, w: QuotaWindow, now_ms: i64) {
        let expire = i64::from(w.samples) * w.window_ms;
        for sample in &mut self.samples {
            if now_ms - sample.last_event_ms >= expire {
                *sample = Sample::new(now_ms);
            }
        }
    }

    /// The time the rate is measured over: since the oldest sample began,
    /// but never less than all the windows but one (so a first burst is
    /// not measured over a few milliseconds).
    pub fn window_size_ms(&mut self, w: QuotaWindow, now_ms: i64) -> i64 {
        self.purge(w, now_ms);
        self.window_of_purged(w, now_ms)
    }

    /// Units per second at `now_ms`.
    pub fn measure(&mut self, w: QuotaWindow, now_ms: i64) -> f64 {
        self.purge(w, now_ms);
        self.rate_and_window_of_purged(w, now_ms).0
    }

    /// How long to hold the client so that the rate falls back to `bound`:
    /// the excess over the bound, as a share of it, times the window.
    pub fn throttle_ms(&mut self, w: QuotaWindow, bound: f64, now_ms: i64) -> u64 {
        self.purge(w, now_ms);
        let (rate, window) = self.rate_and_window_of_purged(w, now_ms);
        if rate <= bound || bound <= 0.0 {
            return 0;
        }
        // Kafka's cap: the largest int.
        ((rate - bound) / bound * window as f64)
            .round()
            .min(f64::from(i32::MAX)) as u64
    }

    /// [`Rate::window_size_ms`] on samples already purged at `now_ms`.
    fn window_of_purged(&self, w: QuotaWindow, now_ms: i64) -> i64 {
        let oldest = self
            .samples
            .iter()
            .map(|s| s.start_ms)
            .min()
            .unwrap_or(now_ms);
        let elapsed = now_ms - oldest;
        let full = elapsed / w.window_ms;
        let min_full = i64::from(w.samples) - 1;
        let size = if full < min_full {
            elapsed + (min_full - full) * w.window_ms
        } else {
            elapsed
        };
        size.max(1)
    }

    /// The rate and its window, on samples already purged at `now_ms`.
    fn rate_and_window_of_purged(&self, w: QuotaWindow, now_ms: i64) -> (f64, i64) {
        let total: f64 = self.samples.iter().map(|s| s.total).sum();
        let window = self.window_of_purged(w, now_ms);
        (total * 1000.0 / window as f64, window)
    }

    /// When something was last recorded.
    fn last_event(&self) -> Option<i64> {
        self.samples.iter().map(|s| s.last_event_ms).max()
    }
}

/// Each quota's rate by what it limits and whose usage it counts.
type Rates = HashMap<(QuotaType, QuotaTags), Rate>;

/// The rates of every quota in use on this broker.
pub struct ClientQuotaManager {
    window: QuotaWindow,
    /// One owner: every rate behind this one lock, held for a record;
    /// with when idle rates were last swept out.
    rates: Mutex<(Rates, i64)>,
    /// Which quota types some entity sets, for the image it was worked out
    /// on (`applied << 3 | one bit per type`; `u64::MAX`: not yet), so that
    /// a request does not scan every quota entity to learn it.
    types_in_use: AtomicU64,
}

/// Past this many rates, idle ones (nothing recorded within the whole
/// window: their rate is zero) are dropped, so that client ids a client
/// makes up cannot grow the map without bound.
const SWEEP_AT: usize = 4096;

impl ClientQuotaManager {
    pub fn new(window: QuotaWindow) -> ClientQuotaManager {
        ClientQuotaManager {
            window,
            rates: Mutex::new((HashMap::new(), i64::MIN / 2)),
            types_in_use: AtomicU64::new(u64::MAX),
        }
    }

    /// Whether any quota of this type is set (nothing to count otherwise).
    pub fn applies(&self, image: &MetadataImage, kind: QuotaType) -> bool {
        const TYPES: [QuotaType; 3] = [QuotaType::Produce, QuotaType::Fetch, QuotaType::Request];
        let bit = |k: QuotaType| 1u64 << TYPES.iter().position(|t| *t == k).unwrap_or(0);
        if image.client_quotas.is_empty() {
            return false;
        }
        let known = self.types_in_use.load(Ordering::Relaxed);
        let mask = if known != u64::MAX && known >> 3 == image.applied {
            known & 0b111
        } else {
            let mask = TYPES
                .into_iter()
                .filter(|t| {
                    image
                        .client_quotas
                        .values()
                        .any(|keys| keys.contains_key(t.key()))
                })
                .fold(0, |m, t| m | bit(t));
            self.types_in_use
                .store((image.applied << 3) | mask, Ordering::Relaxed);
            mask
        };
        mask & bit(kind) != 0
    }

    /// Counts `value` against the quota of `kind` that applies to
    /// (`user`, `client_id`), if one does; the throttle time it leads to.
    pub fn record(
        &self,
        image: &MetadataImage,
        kind: QuotaType,
        (user, client_id): (&str, &str),
        value: f64,
        now_ms: i64,
    ) -> u64 {
        if image.client_quotas.is_empty() {
            return 0;
        }
        let Some((bound, tags)) = resolve(&image.client_quotas, user, client_id, kind.key()) else {
            return 0;
        };
        let w = self.window;
        let mut rates = self.rates.lock();
        // At most one sweep a window, so that many clients cannot make
        // every request pay for a scan.
        if rates.0.len() >= SWEEP_AT && now_ms >= rates.1 + w.window_ms {
            let horizon = now_ms - i64::from(w.samples) * w.window_ms;
            rates
                .0
                .retain(|_, r| r.last_event().is_some_and(|s| s > horizon));
            rates.1 = now_ms;
        }
        let rates = &mut rates.0;
        let rate = rates.entry((kind, tags)).or_default();
        rate.record(w, value, now_ms);
        rate.throttle_ms(w, bound, now_ms)
    }

    /// Takes back a recorded `value` (a throttled fetch whose data is not
    /// sent).
    pub fn unrecord(
        &self,
        image: &MetadataImage,
        kind: QuotaType,
        who: (&str, &str),
        value: f64,
        now_ms: i64,
    ) {
        if let Some((_, tags)) = resolve(&image.client_quotas, who.0, who.1, kind.key()) {
            if let Some(rate) = self.rates.lock().0.get_mut(&(kind, tags)) {
                rate.record(self.window, -value, now_ms);
            }
        }
    }
}

/// Which quotas a request counts against, decided before it runs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Metered {
    /// A produce request's size (`producer_byte_rate`).
    produce_bytes: Option<usize>,
    /// A consumer's fetch: its response's size (`consumer_byte_rate`); it
    /// is answered empty when throttled.
    fetch: bool,
    /// Its handling time (`request_percentage`).
    pub request_time: bool,
}

/// What a request's quotas decided: the connection is not read for this
/// many milliseconds after the answer.
pub type Throttle = u64;

impl ClientQuotaManager {
    /// What `request` (of `frame_len` bytes, from `who`) will count
    /// against. Brokers' own requests (follower fetches, markers), the SASL
    /// exchange (with an ApiVersions before it: `authenticating`) and
    /// acks=0 produces' time count against nothing, as in Kafka; any other
    /// ApiVersions counts against the request quota, as Kafka's handler
    /// throttles it. A consumer's fetch is capped at
    /// what its byte rate allows over the window (Kafka's cap), so that one
    /// response never outgrows the quota and is throttled forever.
    pub fn meter(
        &self,
        image: &MetadataImage,
        (request, version): (&mut RequestKind, i16),
        who: (&str, &str),
        frame_len: usize,
        authenticating: bool,
    ) -> Metered {
        if image.client_quotas.is_empty() {
            return Metered::default();
        }
        let exempt = match &*request {
            // A follower only as the fetch handler takes one (v15+, its
            // ReplicaState; `rules::fetch_origin`): an older fetch claiming
            // a replica id is a consumer's.
            RequestKind::Fetch(r) => version >= 15 && r.replica_state.replica_id.0 >= 0,
            RequestKind::ApiVersions(_) => authenticating,
            RequestKind::SaslHandshake(_)
            | RequestKind::SaslAuthenticate(_)
            | RequestKind::WriteTxnMarkers(_) => true,
            _ => false,
        };
        if exempt {
            return Metered::default();
        }
        if let RequestKind::Fetch(r) = request {
            let q = resolve(&image.client_quotas, who.0, who.1, CONSUMER_BYTE_RATE);
            if let Some((bound, _)) = q {
                let w = self.window;
                let most =
                    bound * f64::from(w.samples.saturating_sub(1)) * w.window_ms as f64 / 1000.0;
                let most = most.min(f64::from(i32::MAX)) as i32;
                r.max_bytes = r.max_bytes.min(most);
                r.min_bytes = r.min_bytes.min(r.max_bytes);
            }
        }
        let acks0 = matches!(&*request, RequestKind::Produce(p) if p.acks == 0);
        Metered {
            produce_bytes: matches!(request, RequestKind::Produce(_))
                .then_some(frame_len)
                .filter(|_| self.applies(image, QuotaType::Produce)),
            fetch: matches!(request, RequestKind::Fetch(_)),
            request_time: !acks0 && self.applies(image, QuotaType::Request),
        }
    }

    /// Counts a served request against its quotas and puts the longest
    /// throttle into its response. A throttled fetch is answered empty
    /// (its bytes taken back, its file slices dropped), as Kafka does.
    #[allow(clippy::too_many_arguments)]
    pub fn settle(
        &self,
        image: &MetadataImage,
        metered: Metered,
        who: (&str, &str),
        handling: Duration,
        version: i16,
        response: Option<&mut ResponseKind>,
        slices: &SliceRegistry,
        now_ms: i64,
    ) -> Throttle {
        let mut ms: u64 = 0;
        if let Some(bytes) = metered.produce_bytes {
            ms = ms.max(self.record(image, QuotaType::Produce, who, bytes as f64, now_ms));
        }
        // Kafka counts thread time as a percentage of a second per second,
        // and holds a client for its request time one window at most.
        if metered.request_time {
            let percent_seconds = handling.as_secs_f64() * 100.0;
            let request_ms = self.record(image, QuotaType::Request, who, percent_seconds, now_ms);
            ms = ms.max(request_ms.min(self.window.window_ms as u64));
        }
        let Some(response) = response else {
            // acks=0: no answer to carry the throttle; the connection is
            // held all the same.
            return ms.min(i32::MAX as u64);
        };
        if let (true, ResponseKind::Fetch(fetch)) = (metered.fetch, &mut *response) {
            let size = fetch.compute_size(version).unwrap_or(0) as f64;
            ms = ms.max(self.record(image, QuotaType::Fetch, who, size, now_ms));
            // Throttled by either quota: the data is not sent, nor counted.
            if ms > 0 {
                self.unrecord(image, QuotaType::Fetch, who, size, now_ms);
                fetch.responses.clear();
                drop(slices.take());
            }
        }
        // Kafka's throttles end at its int max; a tiny quota must not hold
        // a connection for longer than the answer says.
        let ms = ms.min(i32::MAX as u64);
        if ms > 0 {
            set_throttle_time(response, ms as i32);
        }
        ms
    }
}

/// Puts a throttle time into a response (the larger of it and one there).
fn set_throttle_time(response: &mut ResponseKind, ms: i32) {
    macro_rules! set {
        ($($kind:ident),*) => {
            match response {
                $(ResponseKind::$kind(r) => r.throttle_time_ms = r.throttle_time_ms.max(ms),)*
                // Responses without the field (or never throttled): the
                // muted connection alone holds the client back.
                _ => {}
            }
        };
    }
    set!(
        Produce,
        Fetch,
        ListOffsets,
        Metadata,
        OffsetCommit,
        OffsetFetch,
        FindCoordinator,
        JoinGroup,
        Heartbeat,
        LeaveGroup,
        SyncGroup,
        DescribeGroups,
        ListGroups,
        CreateTopics,
        DeleteTopics,
        DeleteRecords,
        InitProducerId,
        OffsetForLeaderEpoch,
        AddPartitionsToTxn,
        AddOffsetsToTxn,
        EndTxn,
        TxnOffsetCommit,
        DescribeAcls,
        CreateAcls,
        DeleteAcls,
        DescribeConfigs,
        AlterConfigs,
        DescribeLogDirs,
        CreatePartitions,
        DeleteGroups,
        ElectLeaders,
        IncrementalAlterConfigs,
        OffsetDelete,
        DescribeClientQuotas,
        AlterClientQuotas,
        DescribeUserScramCredentials,
        AlterUserScramCredentials,
        DescribeProducers,
        DescribeTransactions,
        ListTransactions,
        DescribeCluster,
        ApiVersions,
        AlterReplicaLogDirs,
        AlterPartitionReassignments,
        ListPartitionReassignments,
        UnregisterBroker,
        UpdateFeatures,
        ConsumerGroupHeartbeat,
        ConsumerGroupDescribe,
        DescribeTopicPartitions
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: QuotaWindow = QuotaWindow {
        samples: 11,
        window_ms: 1000,
    };

    #[test]
    fn a_first_burst_is_measured_over_all_windows_but_one() {
        let mut r = Rate::default();
        r.record(W, 10_000.0, 0);
        // 10 windows of a second: 1,000 per second, not 10,000 per 1 ms.
        assert_eq!(r.window_size_ms(W, 1), 10_001);
        assert!((r.measure(W, 0) - 1000.0).abs() < 1e-9);
        // Under a bound of 1,000/s: no throttle; under 500/s: the excess
        // (one bound's worth) times the window.
        assert_eq!(r.throttle_ms(W, 1000.0, 0), 0);
        assert_eq!(r.throttle_ms(W, 500.0, 0), 10_000);
    }

    #[test]
    fn samples_roll_and_old_ones_expire() {
        let mut r = Rate::default();
        for s in 0..30 {
            r.record(W, 100.0, s * 1000);
        }
        // Only the last 11 windows count: 1,100 over 10 s (the oldest began
        // 10 s ago), 110 per second.
        assert!((r.measure(W, 29_000) - 110.0).abs() < 1e-9);
        // Long idle: nothing is left, the rate is zero.
        assert_eq!(r.measure(W, 100_000), 0.0);
        assert_eq!(r.throttle_ms(W, 1.0, 100_000), 0);
    }

    #[test]
    fn a_steady_client_under_the_bound_is_not_throttled_and_one_above_it_is() {
        let mut at = Rate::default();
        let mut above = Rate::default();
        let mut throttled = 0;
        for ms in (0..60_000).step_by(100) {
            // 900/s: even measured with the current window's first
            // record (eleven samples' worth over ten seconds), under 1,000.
            at.record(W, 90.0, ms);
            assert_eq!(at.throttle_ms(W, 1000.0, ms), 0, "at {ms}");
            above.record(W, 200.0, ms); // 2,000/s
            throttled = above.throttle_ms(W, 1000.0, ms);
        }
        // Twice the bound: held about as long as the window measured (10
        // to 11 s): what brings the rate back to the bound.
        assert!((10_000..=11_100).contains(&throttled), "{throttled}");
    }

    #[test]
    fn only_a_follower_as_the_fetch_handler_takes_one_is_exempt() {
        use kafka_protocol::messages::{BrokerId, FetchRequest};
        use strand_metadata::quotas::{QuotaEntity, QuotaValue, CLIENT_ID};
        let mut image = MetadataImage::default();
        image
            .client_quotas
            .entry(QuotaEntity::new(vec![(CLIENT_ID.into(), None)]).unwrap())
            .or_default()
            .insert(CONSUMER_BYTE_RATE.into(), QuotaValue(1000.0));
        let m = ClientQuotaManager::new(W);
        let who = ("ANONYMOUS", "c");
        // A v11 fetch claiming replica 0 is a consumer's: metered, and
        // capped at the window's allowance (1,000 B/s over 10 windows).
        let mut old = RequestKind::Fetch(
            FetchRequest::default()
                .with_replica_id(BrokerId(0))
                .with_max_bytes(i32::MAX),
        );
        assert!(m.meter(&image, (&mut old, 11), who, 100, false).fetch);
        let RequestKind::Fetch(capped) = &old else {
            unreachable!()
        };
        assert_eq!(capped.max_bytes, 10_000);
        // A v15 fetch naming itself in ReplicaState is a follower's.
        let mut follower = FetchRequest::default();
        follower.replica_state.replica_id = BrokerId(2);
        let mut follower = RequestKind::Fetch(follower);
        assert!(!m.meter(&image, (&mut follower, 15), who, 100, false).fetch);
    }

    #[test]
    fn rates_are_per_entity_and_unrecording_takes_back() {
        use strand_metadata::quotas::{QuotaEntity, QuotaValue, USER};
        let mut image = MetadataImage::default();
        let default_user = QuotaEntity::new(vec![(USER.into(), None)]).unwrap();
        image
            .client_quotas
            .entry(default_user)
            .or_default()
            .insert(PRODUCER_BYTE_RATE.into(), QuotaValue(1000.0));
        let m = ClientQuotaManager::new(W);
        // Each user has the default quota to itself.
        assert!(m.record(&image, QuotaType::Produce, ("a", "x"), 20_000.0, 0) > 0);
        assert_eq!(
            m.record(&image, QuotaType::Produce, ("b", "x"), 5_000.0, 0),
            0
        );
        // No fetch quota: nothing counted.
        assert_eq!(m.record(&image, QuotaType::Fetch, ("a", "x"), 1e9, 0), 0);
        m.unrecord(&image, QuotaType::Produce, ("a", "x"), 20_000.0, 0);
        assert_eq!(m.record(&image, QuotaType::Produce, ("a", "x"), 1.0, 0), 0);
    }

    #[test]
    fn which_quota_types_apply_follows_the_image() {
        use strand_metadata::quotas::{QuotaEntity, QuotaValue, USER};
        let m = ClientQuotaManager::new(W);
        let mut image = MetadataImage::default();
        assert!(!m.applies(&image, QuotaType::Produce));
        let user = QuotaEntity::new(vec![(USER.into(), None)]).unwrap();
        let set = |image: &mut MetadataImage, key: &str| {
            image
                .client_quotas
                .entry(user.clone())
                .or_default()
                .insert(key.into(), QuotaValue(1000.0));
            image.applied += 1;
        };
        set(&mut image, PRODUCER_BYTE_RATE);
        assert!(m.applies(&image, QuotaType::Produce));
        assert!(!m.applies(&image, QuotaType::Request));
        set(&mut image, REQUEST_PERCENTAGE);
        assert!(m.applies(&image, QuotaType::Request));
        assert!(m.applies(&image, QuotaType::Produce));
        assert!(!m.applies(&image, QuotaType::Fetch));
        image.client_quotas.clear();
        image.applied += 1;
        assert!(!m.applies(&image, QuotaType::Produce));
    }
}
