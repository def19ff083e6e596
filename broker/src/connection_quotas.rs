//! Connection quotas for the client listener, with Kafka's settings:
//! `max.connections` (the broker's total: at the limit the listener stops
//! accepting until a connection closes, so new clients wait in the kernel's
//! backlog) and `max.connections.per.ip` (one address past its share has the
//! new connection closed at once). The decision is a pure function; the
//! counts have one owner, and each admitted connection holds a guard that
//! gives its slot back when the connection ends.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use tokio::sync::Notify;

/// The configured limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    pub max_connections: usize,
    pub max_connections_per_ip: usize,
}

/// What to do with a connection the kernel has just handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admission {
    Admit,
    /// Its address already holds `max.connections.per.ip`: close it.
    RefusePerIp,
}

/// Whether a new connection from an address with `from_ip` open connections
/// is admitted. (The broker-wide cap is applied before accepting at all, see
/// [`at_capacity`].)
pub fn admit(from_ip: usize, limits: ConnectionLimits) -> Admission {
    if from_ip >= limits.max_connections_per_ip {
        Admission::RefusePerIp
    } else {
        Admission::Admit
    }
}

/// Whether the listener must stop accepting until a connection closes.
pub fn at_capacity(total: usize, limits: ConnectionLimits) -> bool {
    total >= limits.max_connections
}

#[derive(Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// The open connections of one listener.
pub struct ConnectionQuotas {
    limits: ConnectionLimits,
    counts: Mutex<Counts>,
    /// Woken whenever a connection closes.
    closed: Notify,
}

/// Holds one connection's slot; dropping it frees the slot.
pub struct ConnectionSlot {
    quotas: Arc<ConnectionQuotas>,
    ip: IpAddr,
}

impl ConnectionQuotas {
    pub fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(ConnectionQuotas {
            limits,
            counts: Mutex::default(),
            closed: Notify::new(),
        })
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        // Poisoning needs a panic while the lock is held; the critical
        // sections below only do arithmetic on the map.
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the listener is below `max.connections`.
    pub async fn wait_for_capacity(&self) {
        loop {
            // Register for the wake-up before looking, so a close between
            // the look and the wait is not missed.
            let closed = self.closed.notified();
            if !at_capacity(self.counts().total, self.limits) {
                return;
            }
            closed.await;
        }
    }

    /// Waits until some connection closes (or `limit` passes): the back-off
    /// after an accept error such as running out of file descriptors.
    pub async fn wait_for_a_close(&self, limit: std::time::Duration) {
        let _ = tokio::time::timeout(limit, self.closed.notified()).await;
    }

    /// Takes a slot for a connection from `ip`, or says why not.
    pub fn try_admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, Admission> {
        let mut counts = self.counts();
        let from_ip = counts.per_ip.get(&ip).copied().unwrap_or(0);
        match admit(from_ip, self.limits) {
            Admission::Admit => {
                counts.total += 1;
                *counts.per_ip.entry(ip).or_insert(0) += 1;
                Ok(ConnectionSlot {
                    quotas: self.clone(),
                    ip,
                })
            }
            refused => Err(refused),
        }
    }

    #[cfg(test)]
    fn open(&self) -> (usize, usize) {
        let c = self.counts();
        (c.total, c.per_ip.values().sum())
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        {
            let mut counts = self.quotas.counts();
            counts.total -= 1;
            if let Some(n) = counts.per_ip.get_mut(&self.ip) {
                *n -= 1;
                if *n == 0 {
                    counts.per_ip.remove(&self.ip);
                }
            }
        }
        self.quotas.closed.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ConnectionLimits = ConnectionLimits {
        max_connections: 4,
        max_connections_per_ip: 2,
    };

    #[test]
    fn decisions() {
        // (connections from this ip, admitted?)
        for (from_ip, admitted) in [(0, true), (1, true), (2, false), (9, false)] {
            assert_eq!(
                admit(from_ip, LIMITS) == Admission::Admit,
                admitted,
                "{from_ip}"
            );
        }
        for (total, full) in [(0, false), (3, false), (4, true), (5, true)] {
            assert_eq!(at_capacity(total, LIMITS), full, "{total}");
        }
    }

    #[test]
    fn slots_are_counted_and_given_back() {
        let q = ConnectionQuotas::new(LIMITS);
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let a1 = q.try_admit(a).unwrap();
        let a2 = q.try_admit(a).unwrap();
        assert_eq!(q.try_admit(a).err(), Some(Admission::RefusePerIp));
        let b1 = q.try_admit(b).unwrap();
        assert_eq!(q.open(), (3, 3));
        drop(a1);
        let a3 = q.try_admit(a).unwrap();
        drop((a2, a3, b1));
        assert_eq!(q.open(), (0, 0));
        assert!(q.counts().per_ip.is_empty());
    }

    #[tokio::test]
    async fn capacity_waits_for_a_close() {
        let q = ConnectionQuotas::new(LIMITS);
        let slots: Vec<_> = (0..4)
            .map(|i| q.try_admit(IpAddr::from([10, 0, 0, i])).unwrap())
            .collect();
        let waiter = tokio::spawn({
            let q = q.clone();
            async move { q.wait_for_capacity().await }
        });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(slots);
        waiter.await.unwrap();
    }
}
