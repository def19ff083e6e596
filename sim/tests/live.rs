//! Runs the live simulation (the broker's own async code on a simulated
//! network and paused time) over a few seeds: `STRAND_LIVE_SEEDS` sets how
//! many (3 by default), `STRAND_LIVE_FIRST_SEED` where to start.

use strand_sim::live::{run_live, LiveConfig, LiveReport};

mod common;
use common::env_u64;

#[test]
fn live_seeds_hold_every_invariant() {
    let seeds = env_u64("STRAND_LIVE_SEEDS", 3);
    let first = env_u64("STRAND_LIVE_FIRST_SEED", 0);
    let config = LiveConfig::default();
    let mut sum = LiveReport::default();
    for seed in first..first + seeds {
        let started = std::time::Instant::now();
        let r = run_live(seed, &config).unwrap_or_else(|v| panic!("live seed {seed}: {v}"));
        println!("live seed {seed}: {r:?} in {:?}", started.elapsed());
        sum.acknowledged += r.acknowledged;
        sum.refused += r.refused;
        sum.faults += r.faults;
        sum.leader_epochs += r.leader_epochs;
        sum.commits += r.commits;
        sum.samples += r.samples;
        sum.transactions_committed += r.transactions_committed;
        sum.transactions_aborted += r.transactions_aborted;
        sum.controller_changes += r.controller_changes;
        sum.generations += r.generations;
        sum.overlapping_leaders += r.overlapping_leaders;
        sum.elective_moves += r.elective_moves;
        sum.isr_shrinks += r.isr_shrinks;
        sum.syncs += r.syncs;
    }
    println!("{seeds} live seeds: {sum:?}");
    // The runs did something: writes were acknowledged through faults and
    // leadership moved.
    assert!(sum.faults >= seeds, "{sum:?}");
    assert!(sum.acknowledged > 100 * seeds, "{sum:?}");
    assert!(sum.leader_epochs > 2 * seeds, "{sum:?}");
    assert!(sum.controller_changes >= 1, "{sum:?}");
    // Leaderships moved away from live leaders that still held a lease,
    // and two brokers led a partition at once: the write lease is what
    // kept one of them from writing.
    assert!(
        sum.elective_moves >= 1 && sum.overlapping_leaders > 0,
        "{sum:?}"
    );
    assert!(
        sum.generations >= seeds && sum.syncs >= 2 * seeds,
        "{sum:?}"
    );
    assert!(sum.commits > 10 * seeds, "{sum:?}");
    assert!(sum.transactions_committed > 10 * seeds, "{sum:?}");
    assert!(sum.transactions_aborted > seeds, "{sum:?}");
}
