//! Runs the simulation over many seeds. `STRAND_SIM_SEEDS` sets how many
//! (1,000 by default, what `scripts/test.sh` runs), `STRAND_SIM_FIRST_SEED`
//! where to start, `STRAND_SIM_POWER_CUTS=1` adds power cuts. A failure
//! prints the seed and the run's recent history; the same seed replays it.

use strand_sim::{run, Report, SimConfig};

mod common;
use common::env_u64;

#[test]
fn seeds_hold_every_invariant() {
    let seeds = env_u64("STRAND_SIM_SEEDS", 1_000);
    let first = env_u64("STRAND_SIM_FIRST_SEED", 0);
    let config = SimConfig {
        power_cuts: std::env::var("STRAND_SIM_POWER_CUTS").as_deref() == Ok("1"),
        ..SimConfig::default()
    };
    let mut sum = Report::default();
    for seed in first..first + seeds {
        match run(seed, &config) {
            Ok(r) => {
                sum.events += r.events;
                sum.acknowledged += r.acknowledged;
                sum.faults += r.faults;
                sum.leader_epochs += r.leader_epochs;
                sum.committed += r.committed;
                sum.aborted += r.aborted;
                sum.fenced += r.fenced;
                sum.coordinator_loads += r.coordinator_loads;
                sum.transactional_batches += r.transactional_batches;
                sum.offset_commits += r.offset_commits;
                sum.offset_fetches += r.offset_fetches;
            }
            Err(v) => panic!("{v}"),
        }
    }
    println!(
        "{seeds} seeds: {} events, {} faults, {} leader epochs, {} acknowledged records checked, \
         {} transactions committed and {} aborted ({} transactional batches checked against \
         their decision), {} instances fenced, {} coordinator loads, {} offset commits \
         and {} fetches checked",
        sum.events,
        sum.faults,
        sum.leader_epochs,
        sum.acknowledged,
        sum.committed,
        sum.aborted,
        sum.transactional_batches,
        sum.fenced,
        sum.coordinator_loads,
        sum.offset_commits,
        sum.offset_fetches
    );
    // The runs did something: writes were acknowledged through faults,
    // leadership moved, and so did the coordinator; transactions were
    // committed, aborted and fenced.
    let n = seeds as usize;
    assert!(sum.acknowledged > n * 20, "{sum:?}");
    assert!(sum.leader_epochs > n, "leadership never moved: {sum:?}");
    assert!(
        sum.coordinator_loads > n,
        "the coordinator never moved: {sum:?}"
    );
    assert!(sum.committed > n && sum.aborted > n / 2, "{sum:?}");
    assert!(
        sum.fenced > 0 || seeds < 50,
        "no instance was fenced: {sum:?}"
    );
    assert!(sum.offset_commits > n && sum.offset_fetches > n, "{sum:?}");
}

#[test]
fn a_seed_replays_the_same_run() {
    let config = SimConfig::default();
    let a = run(7, &config).map_err(|v| v.to_string());
    let b = run(7, &config).map_err(|v| v.to_string());
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

/// Without faults, every record the producer sent is acknowledged (each
/// checked at its offset), leadership never moves, the coordinator loads
/// once, and transactions are committed.
#[test]
fn without_faults_everything_is_acknowledged() {
    let config = SimConfig {
        faults: false,
        ..SimConfig::default()
    };
    let r = run(1, &config).unwrap_or_else(|v| panic!("{v}"));
    assert!(r.produced > 100, "{r:?}");
    assert!(r.acknowledged >= r.produced, "{r:?}");
    // One leader epoch for each of the four partitions (two of data,
    // __transaction_state, __consumer_offsets).
    assert_eq!(r.leader_epochs, 4, "{r:?}");
    assert!(r.offset_commits > 10 && r.offset_fetches > 10, "{r:?}");
    assert_eq!(r.coordinator_loads, 1, "{r:?}");
    assert!(r.committed > 10, "{r:?}");
    assert_eq!(r.fenced, 0, "{r:?}");
}
