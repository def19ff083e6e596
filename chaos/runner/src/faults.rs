//! The fault schedule: a pure plan drawn from the seed (which fault, when,
//! for how long; targets drawn too, resolved against the cluster when the
//! fault starts), and its execution against the namespaces and processes.

use crate::net::Net;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io;
use std::path::PathBuf;
use std::time::Duration;
use strand_compat_tests::cluster::{Cluster, NodeState};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum FaultKind {
    /// Cut the leader of a partition off from the other nodes (clients
    /// still reach it: a zombie leader).
    IsolateLeader,
    /// Cut the node the cluster names as controller off from the others.
    IsolateController,
    /// Cut a random node off from the others.
    IsolateNode,
    /// Two halves that share one node: a and c cannot talk, b talks to both.
    Bridge,
    /// One-way packet loss (30-70%) from one node to another.
    Lossy,
    /// One node's outgoing traffic slowed to a trickle (a token bucket of
    /// 256 kbit/s queueing up to 2 s): delay and backlog without loss,
    /// the nearest this kernel comes to netem's delay (it has no
    /// `sch_netem`). The node's followers, clients and controller peers
    /// see its answers late.
    Slow,
    /// SIGSTOP a node, SIGCONT at the end.
    Pause,
    /// kill -9 a node, restart it at the end.
    Kill,
    /// kill -9 every node, restart them all at the end.
    KillAll,
    /// Every fsync under a node's log directory fails (faultfs): the node
    /// takes the directory offline and exits; restarted at the end.
    FailedFsync,
    /// A node's disk fills (faultfs): writes under its log directory fail
    /// with ENOSPC, the first part-way; the node takes the directory
    /// offline and exits; restarted at the end.
    FullDisk,
    /// Moves a random partition of the workload's topics to a random
    /// replica set (two to every node, in a random order) with
    /// AlterPartitionReassignments; half the time cancels it halfway
    /// through the fault's window, in flight or not.
    Reassign,
}

impl FaultKind {
    pub const ALL: [FaultKind; 12] = [
        FaultKind::IsolateLeader,
        FaultKind::IsolateController,
        FaultKind::IsolateNode,
        FaultKind::Bridge,
        FaultKind::Lossy,
        FaultKind::Slow,
        FaultKind::Pause,
        FaultKind::Kill,
        FaultKind::KillAll,
        FaultKind::FailedFsync,
        FaultKind::FullDisk,
        FaultKind::Reassign,
    ];
}

/// One fault of the plan.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// When it starts, from the start of the workload.
    pub at: Duration,
    pub kind: FaultKind,
    /// How long it lasts before everything heals.
    pub lasts: Duration,
    /// Drawn now, so the plan is the seed's: picks among candidates.
    pub pick: u32,
    pub percent: u32,
}

/// The seed's plan for `run`: a quiet start, faults one at a time with
/// quiet gaps, and nothing in the last `quiet_end` (every fault heals
/// before the final reads). The kinds come in rounds, each a shuffle of
/// every kind, so a run of at least as many faults as kinds has them all.
pub fn plan(seed: u64, run: Duration, kinds: &[FaultKind], quiet_end: Duration) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut steps = Vec::new();
    if kinds.is_empty() {
        return steps;
    }
    let mut round: Vec<FaultKind> = Vec::new();
    let mut t = Duration::from_secs(3);
    loop {
        let lasts = Duration::from_millis(rng.gen_range(2_000..8_000));
        if t + lasts + quiet_end > run {
            return steps;
        }
        if round.is_empty() {
            round = kinds.to_vec();
            for i in (1..round.len()).rev() {
                round.swap(i, rng.gen_range(0..=i));
            }
        }
        let kind = round.pop().expect("a round was just refilled");
        steps.push(Step {
            at: t,
            kind,
            lasts,
            pick: rng.gen(),
            percent: rng.gen_range(30..=70),
        });
        t += lasts + Duration::from_millis(rng.gen_range(1_000..4_000));
    }
}

/// What a fault needs of the world when it starts.
pub struct World<'a> {
    pub cluster: &'a mut Cluster,
    pub net: &'a Net,
    /// Leaders of the workload's partitions (node ids), as the clients see them.
    pub leaders: Vec<i32>,
    /// The node the cluster names as controller.
    pub controller: Option<i32>,
    /// faultfs's control file, if the nodes run with it.
    pub faultfs_control: Option<PathBuf>,
    /// The workload's topics and their partition counts.
    pub topics: Vec<(String, i32)>,
}

/// Starts a fault; returns what was done, for the log.
pub fn start(step: &Step, w: &mut World<'_>) -> io::Result<String> {
    let nodes = w.cluster.node_ids();
    let n = nodes.len() as u32;
    let pick = |k: u32| nodes[((step.pick / (k + 1)) % n) as usize];
    let others = |x: i32| nodes.iter().copied().filter(move |y| *y != x);
    let isolate = |w: &World<'_>, x: i32| -> io::Result<()> {
        for y in others(x) {
            w.net.cut(x, y)?;
        }
        Ok(())
    };
    Ok(match step.kind {
        FaultKind::IsolateLeader => {
            let x = if w.leaders.is_empty() {
                pick(0)
            } else {
                w.leaders[(step.pick as usize) % w.leaders.len()]
            };
            isolate(w, x)?;
            format!("isolate leader {x}")
        }
        FaultKind::IsolateController => {
            let x = w.controller.unwrap_or_else(|| pick(0));
            isolate(w, x)?;
            format!("isolate controller {x}")
        }
        FaultKind::IsolateNode => {
            let x = pick(0);
            isolate(w, x)?;
            format!("isolate {x}")
        }
        FaultKind::Bridge => {
            let b = pick(0);
            let ends: Vec<i32> = others(b).collect();
            for (i, a) in ends.iter().enumerate() {
                for c in &ends[i + 1..] {
                    w.net.cut(*a, *c)?;
                }
            }
            format!("bridge through {b}")
        }
        FaultKind::Lossy => {
            let from = pick(0);
            let to: Vec<i32> = others(from).collect();
            let to = to[(step.pick as usize / 7) % to.len()];
            w.net.lossy(from, to, step.percent)?;
            format!("{}% loss {from} -> {to}", step.percent)
        }
        FaultKind::Slow => {
            let x = pick(0);
            w.net.slow(x)?;
            format!("slow egress of {x}")
        }
        FaultKind::Pause => {
            let x = pick(0);
            w.cluster.stop(x)?;
            format!("pause {x}")
        }
        FaultKind::Kill => {
            let x = pick(0);
            w.cluster.kill9(x)?;
            format!("kill -9 {x}")
        }
        FaultKind::KillAll => {
            for x in &nodes {
                if w.cluster.state(*x)? != NodeState::Down {
                    w.cluster.kill9(*x)?;
                }
            }
            "kill -9 every node".to_string()
        }
        FaultKind::FailedFsync => faultfs_rule(w, "fsync", pick(0), "fsync fails on")?,
        FaultKind::FullDisk => faultfs_rule(w, "enospc", pick(0), "disk full on")?,
        FaultKind::Reassign => reassign(step, w, &nodes)?,
    })
}

/// The Reassign fault: the move drawn from the step (which partition, which
/// replicas in which order, whether to cancel), sent to the first broker
/// that answers; a cancel is sent from a thread of its own halfway through
/// the window.
fn reassign(step: &Step, w: &World<'_>, nodes: &[i32]) -> io::Result<String> {
    use rand::seq::SliceRandom;
    let mut rng = StdRng::seed_from_u64(u64::from(step.pick));
    let Some((topic, partitions)) = w.topics.choose(&mut rng).cloned() else {
        return Ok("no topics to reassign".into());
    };
    let partition = rng.gen_range(0..partitions.max(1));
    let size = rng.gen_range(2.min(nodes.len())..=nodes.len());
    let mut target = nodes.to_vec();
    target.shuffle(&mut rng);
    target.truncate(size);
    let addrs: Vec<String> = nodes
        .iter()
        .filter_map(|id| w.cluster.broker_addr(*id))
        .collect();
    let error = alter_reassignment(&addrs, &topic, partition, Some(&target))?;
    let cancel = step.percent % 2 == 1;
    if cancel {
        let (topic, addrs, after) = (topic.clone(), addrs.clone(), step.lasts / 2);
        std::thread::spawn(move || {
            std::thread::sleep(after);
            // NO_REASSIGNMENT_IN_PROGRESS when it already completed.
            let _ = alter_reassignment(&addrs, &topic, partition, None);
        });
    }
    Ok(format!(
        "reassign {topic}-{partition} to {target:?} (answer {error}){}",
        if cancel { ", cancelled halfway" } else { "" }
    ))
}

/// AlterPartitionReassignments of one partition (None cancels) at the first
/// broker that answers: the partition's error code.
fn alter_reassignment(
    addrs: &[String],
    topic: &str,
    partition: i32,
    target: Option<&[i32]>,
) -> io::Result<i16> {
    use kafka_protocol::messages::alter_partition_reassignments_request::{
        ReassignablePartition, ReassignableTopic,
    };
    use kafka_protocol::messages::{
        AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, ApiKey, BrokerId,
        TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    let req = AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![ReassignableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_string())))
            .with_partitions(vec![ReassignablePartition::default()
                .with_partition_index(partition)
                .with_replicas(
                    target.map(|t| t.iter().map(|b| BrokerId(*b)).collect()),
                )])]);
    let mut last = io::Error::other("no broker to ask");
    for addr in addrs {
        match strand_compat_tests::wire::call::<_, AlterPartitionReassignmentsResponse>(
            addr,
            ApiKey::AlterPartitionReassignments,
            0,
            &req,
            Duration::from_secs(15),
        ) {
            Ok(resp) if resp.error_code != 0 => return Ok(resp.error_code),
            Ok(resp) => {
                return Ok(resp
                    .responses
                    .first()
                    .and_then(|t| t.partitions.first())
                    .map_or(-1, |p| p.error_code))
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Sets faultfs's `rule` on node `x`'s data directory; what was done, for
/// the log.
fn faultfs_rule(w: &World<'_>, rule: &str, x: i32, what: &str) -> io::Result<String> {
    let Some(control) = &w.faultfs_control else {
        return Ok(format!("{rule} faults unavailable (no faultfs)"));
    };
    // The trailing slash: the directory's contents, not the node's log
    // file beside it (`nodeN.log`).
    let dir = w.cluster.data_dir(x);
    std::fs::write(control, format!("{rule} {}/\n", dir.display()))?;
    Ok(format!("{what} {x}"))
}

/// Ends every fault: the network whole, paused nodes continued, faultfs
/// rules cleared, stopped or exited nodes restarted.
pub fn heal(w: &mut World<'_>) -> io::Result<()> {
    w.net.heal()?;
    if let Some(control) = &w.faultfs_control {
        std::fs::write(control, "")?;
    }
    for x in w.cluster.node_ids() {
        if w.cluster.state(x)? == NodeState::Stopped {
            w.cluster.cont(x)?;
        }
    }
    w.cluster.restart_down()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_is_the_seed_s_and_ends_quiet() {
        let run = Duration::from_secs(60);
        let quiet = Duration::from_secs(5);
        let a = plan(7, run, &FaultKind::ALL, quiet);
        assert_eq!(a, plan(7, run, &FaultKind::ALL, quiet));
        assert_ne!(a, plan(8, run, &FaultKind::ALL, quiet));
        assert!(a.len() >= 4, "{a:?}");
        for w in a.windows(2) {
            assert!(
                w[0].at + w[0].lasts < w[1].at,
                "faults one at a time: {w:?}"
            );
        }
        let last = a.last().unwrap();
        assert!(last.at + last.lasts + quiet <= run);
        assert!(plan(7, run, &[], quiet).is_empty());
        let only = plan(9, run, &[FaultKind::Pause], quiet);
        assert!(only.iter().all(|s| s.kind == FaultKind::Pause));
        // Every kind within the first round.
        let long = plan(3, Duration::from_secs(120), &FaultKind::ALL, quiet);
        assert!(long.len() >= FaultKind::ALL.len(), "{}", long.len());
        for k in FaultKind::ALL {
            assert!(
                long[..FaultKind::ALL.len()].iter().any(|s| s.kind == k),
                "{k:?} missing from the first round"
            );
        }
    }
}
