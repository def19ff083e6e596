//! Runs the simulation over many seeds. `STRAND_SIM_SEEDS` sets how many
//! (1,000 by default, what `scripts/test.sh` runs), `STRAND_SIM_FIRST_SEED`
//! where to start, `STRAND_SIM_POWER_CUTS=1` adds power cuts. A failure
//! prints the seed and the run's recent history; the same seed replays it.

use strand_sim::{run, SimConfig};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn seeds_hold_every_invariant() {
    let seeds = env_u64("STRAND_SIM_SEEDS", 1_000);
    let first = env_u64("STRAND_SIM_FIRST_SEED", 0);
    let config = SimConfig {
        power_cuts: std::env::var("STRAND_SIM_POWER_CUTS").as_deref() == Ok("1"),
        ..SimConfig::default()
    };
    let (mut acked, mut txns, mut faults, mut epochs, mut events) = (0, 0, 0, 0, 0);
    for seed in first..first + seeds {
        match run(seed, &config) {
            Ok(r) => {
                acked += r.acknowledged;
                txns += r.transactions;
                faults += r.faults;
                epochs += r.leader_epochs;
                events += r.events;
            }
            Err(v) => panic!("{v}"),
        }
    }
    println!(
        "{seeds} seeds: {events} events, {faults} faults, {epochs} leader epochs, \
         {acked} acknowledged records checked, {txns} transactions"
    );
    // The runs did something: writes were acknowledged through faults and
    // leadership moved.
    assert!(
        acked > seeds as usize * 20,
        "only {acked} acknowledged records"
    );
    assert!(epochs > seeds as usize, "leadership never moved");
}

#[test]
fn a_seed_replays_the_same_run() {
    let config = SimConfig::default();
    let a = run(7, &config).map_err(|v| v.to_string());
    let b = run(7, &config).map_err(|v| v.to_string());
    assert_eq!(format!("{a:?}"), format!("{b:?}"));
}

#[test]
fn without_faults_everything_is_acknowledged() {
    let config = SimConfig {
        faults: false,
        ..SimConfig::default()
    };
    let r = run(1, &config).unwrap_or_else(|v| panic!("{v}"));
    assert_eq!(r.leader_epochs, 1, "{r:?}");
    assert!(r.acknowledged > 100, "{r:?}");
}
