//! Time as the protocol reads it. Every decision that depends on time (ISR
//! lag, session timeouts, roll and retention) asks a [`Clock`], so a
//! simulation can run them on time it controls: [`SystemClock`] is the wall
//! clock, [`ManualClock`] moves only when told.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch: timestamps, and what Kafka times
    /// with its wall clock.
    fn now_ms(&self) -> i64;

    /// Milliseconds on a clock that never jumps (from an arbitrary start):
    /// timeouts that must not fire because the wall clock was stepped or
    /// the machine was paused, such as broker sessions (Kafka times them
    /// with `System.nanoTime`).
    fn monotonic_ms(&self) -> i64;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl SystemClock {
    pub fn shared() -> Arc<dyn Clock> {
        Arc::new(SystemClock)
    }
}

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }

    fn monotonic_ms(&self) -> i64 {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        let start = *START.get_or_init(std::time::Instant::now);
        i64::try_from(start.elapsed().as_millis()).unwrap_or(i64::MAX)
    }
}

/// A clock that only moves when told (simulations, tests). Clones share
/// the same time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    pub fn starting_at(now_ms: i64) -> ManualClock {
        ManualClock(Arc::new(AtomicI64::new(now_ms)))
    }

    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    /// The same time: a manual clock only moves forward when told.
    fn monotonic_ms(&self) -> i64 {
        self.now_ms()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told_and_clones_share_it() {
        let c = ManualClock::starting_at(1_000);
        let d = c.clone();
        assert_eq!(c.now_ms(), 1_000);
        d.advance(250);
        assert_eq!(c.now_ms(), 1_250);
        c.set(5);
        assert_eq!(d.now_ms(), 5);
        assert!(SystemClock.now_ms() > 1_600_000_000_000);
    }
}
