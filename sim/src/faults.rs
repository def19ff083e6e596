//! The seeded fault schedule: what goes wrong, for how long, and the heal.

use rand::Rng;
use std::collections::BTreeMap;
use std::sync::Arc;
use strand_log::storage::Fault;
use strand_metadata::image::MetadataImage;
use strand_partition::log_dir_failure::LogDirFailures;

use crate::{FaultKind, Sim, CLIENT, CONTROLLER, LOG_DIR};

impl Sim {
    pub(crate) fn maybe_fault(&mut self) {
        if self.now < self.next_fault {
            return;
        }
        self.next_fault = self.now + self.rng.gen_range(200..1_200);
        let b = self.rng.gen_range(1..=self.config.brokers);
        let mut kinds = vec![
            FaultKind::Isolate(b),
            FaultKind::CutFromController(b),
            FaultKind::Split(b),
            FaultKind::Loss,
            FaultKind::Pause(b),
            FaultKind::Crash(b),
            FaultKind::DiskFailure(b),
        ];
        if self.config.power_cuts {
            kinds.push(FaultKind::PowerCut(b));
        }
        let kind = kinds[self.rng.gen_range(0..kinds.len())];
        let lasts = self.rng.gen_range(100..2_500);
        self.faults += 1;
        self.note(format!("fault {kind:?} for {lasts} ms"));
        let all: Vec<i32> = (0..=self.config.brokers).chain([CLIENT]).collect();
        match kind {
            FaultKind::Isolate(b) => {
                for &o in &all {
                    if o != b {
                        self.cut.push((b, o));
                    }
                }
            }
            FaultKind::CutFromController(b) => self.cut.push((b, CONTROLLER)),
            FaultKind::Split(b) => {
                // b and the client on one side, the others and the
                // controller on the other.
                for o in 0..=self.config.brokers {
                    if o != b {
                        self.cut.push((b, o));
                        self.cut.push((CLIENT, o));
                    }
                }
            }
            FaultKind::Loss => self.loss = self.rng.gen_range(0.05..0.3),
            FaultKind::Pause(b) => {
                let until = self.now + lasts;
                self.node(b).paused_until = until;
            }
            FaultKind::Crash(b) | FaultKind::PowerCut(b) | FaultKind::DiskFailure(b) => {
                if kind == FaultKind::DiskFailure(b) {
                    self.node(b).storage.inject(Fault::FailSync(LOG_DIR.into()));
                } else {
                    self.crash(b, kind == FaultKind::PowerCut(b));
                }
            }
        }
        self.heals.push((self.now + lasts, kind));
    }

    pub(crate) fn heal_due(&mut self, all: bool) {
        let now = self.now;
        let (due, rest): (Vec<_>, Vec<_>) =
            self.heals.drain(..).partition(|(at, _)| all || *at <= now);
        self.heals = rest;
        for (_, kind) in due {
            self.note(format!("heal {kind:?}"));
            match kind {
                FaultKind::Isolate(b) | FaultKind::Split(b) => self
                    .cut
                    .retain(|&(x, y)| x != b && y != b && x != CLIENT && y != CLIENT),
                FaultKind::CutFromController(b) => self.cut.retain(|&p| p != (b, CONTROLLER)),
                FaultKind::Loss => self.loss = 0.0,
                FaultKind::Pause(b) => self.node(b).paused_until = 0,
                FaultKind::Crash(b) | FaultKind::PowerCut(b) => {
                    if !self.node(b).alive {
                        self.restart(b);
                    }
                }
                FaultKind::DiskFailure(b) => {
                    self.node(b).storage.clear_faults();
                    if !self.node(b).alive {
                        self.restart(b);
                    }
                }
            }
        }
        if all {
            self.cut.clear();
            self.loss = 0.0;
            for id in 1..=self.config.brokers {
                self.node(id).paused_until = 0;
                if !self.node(id).alive {
                    self.node(id).storage.clear_faults();
                    self.restart(id);
                }
            }
        }
    }

    /// kill -9 (or a power cut: unsynced bytes lost or torn): everything in
    /// memory is gone, the disk stays.
    pub(crate) fn crash(&mut self, id: i32, power_cut: bool) {
        let tears: Vec<f64> = (0..8).map(|_| self.rng.gen_range(0.0..=1.0)).collect();
        let n = self.node(id);
        if !n.alive {
            return;
        }
        n.alive = false;
        n.replicas = BTreeMap::new();
        n.failed.clear();
        n.pending.clear();
        n.parked.clear();
        n.coordinator = None;
        n.groups = None;
        if power_cut {
            let mut i = 0;
            n.storage.crash(|_, unsynced| {
                i += 1;
                (unsynced as f64 * tears[i % tears.len()]) as usize
            });
        }
        self.note(format!("broker {id} down (power cut: {power_cut})"));
    }

    pub(crate) fn restart(&mut self, id: i32) {
        let n = self.node(id);
        n.alive = true;
        n.incarnation += 1 << 8;
        n.broker_epoch = None;
        n.started = false;
        n.last_register = i64::MIN / 2;
        n.image = Arc::new(MetadataImage::default());
        n.failures = LogDirFailures::new();
        self.note(format!("broker {id} restarted"));
    }
}
