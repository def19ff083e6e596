//! Replication throttles (KIP-73), as Kafka's ReplicationQuotaManager
//! applies them while partitions move: a topic names the replicas to
//! throttle (`leader.replication.throttled.replicas`,
//! `follower.replication.throttled.replicas`: `partition:broker` pairs or
//! `*`), a broker caps the bytes per second it sends to, or fetches for,
//! those of its replicas (`leader.replication.throttled.rate`,
//! `follower.replication.throttled.rate`, dynamic broker configs).
//!
//! Only replicas outside the ISR are held back (a replica in sync keeps
//! acknowledgements moving): a leader leaves a throttled partition out of
//! a follower's answer while its rate is over the bound, a follower leaves
//! it out of its fetch. Both record the bytes of every throttled
//! partition they move. The rate is [`Rate`] over
//! `replication.quota.window.num` windows of
//! `replication.quota.window.size.seconds`.

use crate::client_quotas::{QuotaWindow, Rate};
use parking_lot::{Mutex, RwLock};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use strand_metadata::configs::BrokerLayers;
use strand_metadata::image::MetadataImage;
use strand_types::BrokerId;

/// A topic's throttled replica list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThrottledReplicas {
    /// `*`: every replica of every partition.
    All,
    /// `partition:broker` pairs.
    Some(BTreeSet<(i32, i32)>),
}

impl ThrottledReplicas {
    /// Parses Kafka's format (the controller validated it; an entry that
    /// does not parse is ignored).
    pub fn parse(value: &str) -> ThrottledReplicas {
        if value.trim() == "*" {
            return ThrottledReplicas::All;
        }
        ThrottledReplicas::Some(
            value
                .split(',')
                .filter_map(|e| {
                    let (p, b) = e.trim().split_once(':')?;
                    Some((p.trim().parse().ok()?, b.trim().parse().ok()?))
                })
                .collect(),
        )
    }

    pub fn contains(&self, partition: i32, broker: BrokerId) -> bool {
        match self {
            ThrottledReplicas::All => true,
            ThrottledReplicas::Some(set) => set.contains(&(partition, broker.get())),
        }
    }
}

/// One direction's quota: its bound (u64::MAX: none) and the rate of the
/// throttled bytes moved.
#[derive(Debug)]
pub struct ReplicationQuota {
    /// Read on every follower fetch of a throttled topic: no lock.
    bound: AtomicU64,
    rate: Mutex<Rate>,
    window: QuotaWindow,
}

impl ReplicationQuota {
    fn new(window: QuotaWindow) -> Self {
        ReplicationQuota {
            bound: AtomicU64::new(u64::MAX),
            rate: Mutex::new(Rate::default()),
            window,
        }
    }

    /// The rate of throttled bytes is over the bound.
    pub fn is_exceeded(&self, now_ms: i64) -> bool {
        let bound = self.bound();
        bound != u64::MAX && self.rate.lock().measure(self.window, now_ms) > bound as f64
    }

    /// Counts `bytes` of throttled replicas moved at `now_ms`.
    pub fn record(&self, bytes: usize, now_ms: i64) {
        if bytes > 0 && self.bound() != u64::MAX {
            self.rate.lock().record(self.window, bytes as f64, now_ms);
        }
    }

    /// How long until the rate is back within the bound (0: it is).
    pub fn wait_ms(&self, now_ms: i64) -> u64 {
        let bound = self.bound();
        if bound == u64::MAX {
            return 0;
        }
        self.rate
            .lock()
            .throttle_ms(self.window, bound as f64, now_ms)
    }

    pub fn bound(&self) -> u64 {
        self.bound.load(Ordering::Relaxed)
    }

    fn set_bound(&self, bound: u64) {
        self.bound.store(bound, Ordering::Relaxed);
    }
}

/// A topic's lists: (leader side, follower side).
type TopicThrottles = (Option<ThrottledReplicas>, Option<ThrottledReplicas>);

/// This broker's throttles: both quotas and the topics' lists, refreshed
/// from the image at each reconciliation.
#[derive(Debug)]
pub struct ReplicationThrottles {
    me: BrokerId,
    pub leader: ReplicationQuota,
    pub follower: ReplicationQuota,
    /// Copies between this broker's log directories (AlterReplicaLogDirs;
    /// `replica.alter.log.dirs.io.max.bytes.per.second`): every move.
    pub alter_log_dirs: ReplicationQuota,
    /// Per topic with a list.
    topics: RwLock<HashMap<String, TopicThrottles>>,
}

impl ReplicationThrottles {
    pub fn new(me: BrokerId, window: QuotaWindow) -> Self {
        ReplicationThrottles {
            me,
            leader: ReplicationQuota::new(window),
            follower: ReplicationQuota::new(window),
            alter_log_dirs: ReplicationQuota::new(window),
            topics: RwLock::new(HashMap::new()),
        }
    }

    /// Takes the bounds and lists the image (and server.properties) set.
    pub fn refresh(&self, image: &MetadataImage, broker: &BrokerLayers) {
        let bound = |key: &str| {
            broker
                .get(key)
                .and_then(|(v, _)| v.trim().parse::<u64>().ok())
                // Kafka's default, Long.MAX_VALUE, is no bound.
                .filter(|b| *b < i64::MAX as u64)
                .unwrap_or(u64::MAX)
        };
        self.leader
            .set_bound(bound("leader.replication.throttled.rate"));
        self.follower
            .set_bound(bound("follower.replication.throttled.rate"));
        self.alter_log_dirs
            .set_bound(bound("replica.alter.log.dirs.io.max.bytes.per.second"));
        let list = |configs: &strand_metadata::records::ConfigMap, key: &str| {
            configs
                .get(key)
                .filter(|v| !v.trim().is_empty())
                .map(|v| ThrottledReplicas::parse(v))
        };
        let topics = image
            .topics
            .values()
            .filter_map(|t| {
                let leader = list(&t.configs, "leader.replication.throttled.replicas");
                let follower = list(&t.configs, "follower.replication.throttled.replicas");
                (leader.is_some() || follower.is_some())
                    .then(|| (t.name.clone(), (leader, follower)))
            })
            .collect();
        *self.topics.write() = topics;
    }

    /// This broker's replica of `topic`-`partition` is throttled as a leader.
    pub fn leader_throttled(&self, topic: &str, partition: i32) -> bool {
        self.throttled(&self.leader, topic, partition, |(l, _)| l)
    }

    /// This broker's replica of `topic`-`partition` is throttled as a follower.
    pub fn follower_throttled(&self, topic: &str, partition: i32) -> bool {
        self.throttled(&self.follower, topic, partition, |(_, f)| f)
    }

    /// The quota has a bound and the side's list `side` picks names this
    /// broker's replica.
    fn throttled(
        &self,
        quota: &ReplicationQuota,
        topic: &str,
        partition: i32,
        side: fn(&TopicThrottles) -> &Option<ThrottledReplicas>,
    ) -> bool {
        quota.bound() != u64::MAX
            && self.topics.read().get(topic).is_some_and(|t| {
                side(t)
                    .as_ref()
                    .is_some_and(|list| list.contains(partition, self.me))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttled_replica_lists() {
        let b = BrokerId::new;
        let all = ThrottledReplicas::parse(" * ");
        assert!(all.contains(3, b(9)));
        let some = ThrottledReplicas::parse("0:101, 0:102,1:101,bad,2:x");
        assert!(some.contains(0, b(101)));
        assert!(some.contains(0, b(102)));
        assert!(some.contains(1, b(101)));
        assert!(!some.contains(1, b(102)));
        assert!(!some.contains(2, b(101)));
        assert_eq!(
            ThrottledReplicas::parse(""),
            ThrottledReplicas::Some(BTreeSet::new())
        );
    }

    /// A quota is exceeded once the bytes recorded over the window pass
    /// the bound, and no more once the window has moved past them.
    #[test]
    fn a_quota_holds_the_rate_to_its_bound() {
        let w = QuotaWindow {
            samples: 11,
            window_ms: 1000,
        };
        let q = ReplicationQuota::new(w);
        // No bound: never exceeded, nothing recorded.
        q.record(1 << 30, 0);
        assert!(!q.is_exceeded(0));
        q.set_bound(1000);
        // 10 windows' worth at the start is the bound exactly (the rate
        // is measured over at least 10 windows).
        q.record(10_000, 0);
        assert!(!q.is_exceeded(0));
        q.record(1, 0);
        assert!(q.is_exceeded(0));
        // A sender that sends only while not exceeded moves about the
        // bound per second over a long run.
        let mut sent = 10_001u64;
        let mut now = 0i64;
        while now < 60_000 {
            now += 10;
            if !q.is_exceeded(now) {
                q.record(500, now);
                sent += 500;
            }
        }
        let rate = sent as f64 / 60.0;
        assert!((900.0..=1300.0).contains(&rate), "{rate} bytes/s");
    }
}
