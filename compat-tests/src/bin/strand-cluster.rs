//! `strand-cluster`: format and start a local multi-node Strand cluster, then control it
//! with one-line commands on stdin. See `--help` and the README ("A 3-node cluster").
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use std::io::{self, BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use strand_compat_tests::cluster::{Cluster, ClusterSpec, KafkaDist, Layout, Server};

/// What `--help` says before the options.
const ABOUT: &str = "\
Formats and starts a local Strand cluster on free 127.0.0.1 ports: N combined
broker+controller nodes (ids 1..N), or C controller-only nodes (ids 1..C) plus B
broker-only nodes (ids C+1..C+B). Waits until every broker is registered and unfenced,
then prints

  node ID pid PID broker HOST:PORT      (one per node; controller-only nodes show
                                         `controller HOST:PORT`, their CONTROLLER port)
  bootstrap HOST:PORT,...
  ready

and reads commands on stdin, one per line:

  kill ID      SIGKILL the node                      -> its new line (`... down`)
  stop ID      SIGSTOP the node                      -> its new line (`... stopped`)
  cont ID      SIGCONT the node                      -> its new line
  restart ID   start it again, same ports and data,  -> its new line
               (SIGTERM first if it runs) and wait
               until the cluster is ready
  wait         wait until the cluster is ready       -> ok
  status       every node's line                     -> the lines, then ok
  quit         stop all nodes cleanly and exit       -> ok
  (end of input is the same as quit)

A bad or failed command answers `error MESSAGE` (details on stderr). Diagnostics go to
stderr; stdout carries only the lines above.";

/// The command line (clap); checked into [`Args`] by [`parse_args`].
#[derive(clap::Parser, Debug)]
#[command(
    name = "strand-cluster",
    about = "Formats and starts a local Strand cluster, controlled from stdin",
    long_about = ABOUT
)]
struct Cli {
    /// N combined nodes (3 for a quorum)
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..),
          required_unless_present_all = ["controllers", "brokers"],
          conflicts_with_all = ["controllers", "brokers"])]
    nodes: Option<u64>,
    /// C controller-only nodes (with --brokers)
    #[arg(long, value_name = "C", value_parser = clap::value_parser!(u64).range(1..), requires = "brokers")]
    controllers: Option<u64>,
    /// B broker-only nodes (with --controllers)
    #[arg(long, value_name = "B", value_parser = clap::value_parser!(u64).range(1..), requires = "controllers")]
    brokers: Option<u64>,
    /// cluster directory: DIR/nodeN (log.dirs), DIR/nodeN.properties, DIR/nodeN.log; kept
    /// on exit. Default: a temporary directory, removed on exit. Must not hold an earlier
    /// cluster.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// strand binary (default: `strand` next to this executable, i.e. in the same target
    /// directory, else `strand` from PATH)
    #[arg(long, value_name = "BIN")]
    strand: Option<PathBuf>,
    /// run the reference Apache Kafka (jars from compat-tests/scripts/fetch-kafka.sh,
    /// STRAND_KAFKA_DIR) instead of Strand, same layout and overrides
    #[arg(long, conflicts_with = "strand")]
    reference_kafka: bool,
    /// extra `--override` for every node start (repeatable)
    #[arg(long = "override", value_name = "KEY=VALUE", value_parser = strand_compat_tests::key_value)]
    overrides: Vec<(String, String)>,
    /// readiness timeout for start and restart, in seconds (default 60)
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    timeout: Option<u64>,
}

#[derive(Debug, PartialEq)]
struct Args {
    layout: Layout,
    dir: Option<PathBuf>,
    strand: Option<PathBuf>,
    reference_kafka: bool,
    overrides: Vec<(String, String)>,
    timeout: Option<Duration>,
}

/// The checked arguments of a command line (`argv` without the program
/// name); `Ok(None)` for `--help`.
fn parse_args(argv: Vec<String>) -> Result<Option<Args>, String> {
    use clap::Parser;
    let cli = match Cli::try_parse_from(std::iter::once("strand-cluster".to_string()).chain(argv)) {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayHelp => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    let to = |n: u64| n as usize;
    let layout = match (cli.nodes, cli.controllers, cli.brokers) {
        (Some(n), None, None) => Layout::Combined(to(n)),
        (None, Some(c), Some(b)) => Layout::Split {
            controllers: to(c),
            brokers: to(b),
        },
        _ => return Err("--nodes N (or --controllers C --brokers B) is required".into()),
    };
    Ok(Some(Args {
        layout,
        dir: cli.dir,
        strand: cli.strand,
        reference_kafka: cli.reference_kafka,
        overrides: cli.overrides,
        timeout: cli.timeout.map(Duration::from_secs),
    }))
}

#[derive(Debug, PartialEq, Eq)]
enum Cmd {
    Kill(i32),
    Stop(i32),
    Cont(i32),
    Restart(i32),
    Wait,
    Status,
    Quit,
}

/// `Ok(None)` for a blank line.
fn parse_command(line: &str) -> Result<Option<Cmd>, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((&verb, rest)) = words.split_first() else {
        return Ok(None);
    };
    let id = |rest: &[&str]| -> Result<i32, String> {
        match rest {
            [id] => id
                .parse::<i32>()
                .map_err(|_| format!("{verb}: bad node id {id:?}")),
            [] => Err(format!("{verb}: missing node id")),
            _ => Err(format!("{verb}: expected one node id")),
        }
    };
    let none = |rest: &[&str], c: Cmd| -> Result<Option<Cmd>, String> {
        if rest.is_empty() {
            Ok(Some(c))
        } else {
            Err(format!("{verb} takes no argument"))
        }
    };
    match verb {
        "kill" => Ok(Some(Cmd::Kill(id(rest)?))),
        "stop" => Ok(Some(Cmd::Stop(id(rest)?))),
        "cont" => Ok(Some(Cmd::Cont(id(rest)?))),
        "restart" => Ok(Some(Cmd::Restart(id(rest)?))),
        "wait" => none(rest, Cmd::Wait),
        "status" => none(rest, Cmd::Status),
        "quit" | "exit" => none(rest, Cmd::Quit),
        other => Err(format!("unknown command {other:?}")),
    }
}

/// `strand` in the directory of this executable (or its parent, for `deps/`), else
/// plain `strand` (looked up in PATH).
fn default_strand() -> PathBuf {
    if let Ok(exe) = std::env::current_exe() {
        let mut dir = exe.parent();
        for _ in 0..2 {
            let Some(d) = dir else { break };
            let cand = d.join("strand");
            if cand.is_file() {
                return cand;
            }
            dir = d.parent();
        }
    }
    PathBuf::from("strand")
}

/// Print one answer line (or several), flushed: the reader is usually a pipe.
fn answer(out: &mut impl Write, lines: &[String]) {
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
    let _ = out.flush();
}

/// `error FIRST-LINE` on stdout, the full message on stderr.
fn error_line(msg: &str) -> String {
    let first = msg.lines().next().unwrap_or("").trim();
    if msg.lines().count() > 1 {
        eprintln!("strand-cluster: {msg}");
    }
    format!("error {first}")
}

fn run_command(cluster: &mut Cluster, cmd: &Cmd) -> Result<Vec<String>, String> {
    let line = |c: &mut Cluster, id: i32| c.status_line(id).map_err(|e| e.to_string());
    match *cmd {
        Cmd::Kill(id) => {
            cluster.kill9(id).map_err(|e| e.to_string())?;
            Ok(vec![line(cluster, id)?])
        }
        Cmd::Stop(id) => {
            cluster.stop(id).map_err(|e| e.to_string())?;
            Ok(vec![line(cluster, id)?])
        }
        Cmd::Cont(id) => {
            cluster.cont(id).map_err(|e| e.to_string())?;
            Ok(vec![line(cluster, id)?])
        }
        Cmd::Restart(id) => {
            // report an unknown id before anything else happens
            cluster.status_line(id).map_err(|e| e.to_string())?;
            cluster
                .restart(id)
                .map_err(|e| format!("restart {id}: {e}"))?;
            Ok(vec![line(cluster, id)?])
        }
        Cmd::Wait => {
            let t = Duration::from_secs(60);
            cluster.wait_ready(t).map_err(|e| e.to_string())?;
            Ok(vec!["ok".into()])
        }
        Cmd::Status => {
            let mut v = Vec::new();
            for id in cluster.node_ids() {
                v.push(line(cluster, id)?);
            }
            v.push("ok".into());
            Ok(v)
        }
        Cmd::Quit => {
            cluster.shutdown().map_err(|e| format!("quit: {e}"))?;
            Ok(vec!["ok".into()])
        }
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args().skip(1).collect()) {
        Ok(Some(a)) => a,
        Ok(None) => {
            let _ = <Cli as clap::CommandFactory>::command().print_long_help();
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("strand-cluster: {e}");
            return ExitCode::from(2);
        }
    };
    let server = if args.reference_kafka {
        match KafkaDist::locate() {
            Ok(dist) => Server::Kafka(dist),
            Err(e) => {
                eprintln!("strand-cluster: {e}");
                answer(&mut io::stdout().lock(), &[format!("error {e}")]);
                return ExitCode::FAILURE;
            }
        }
    } else {
        Server::Strand(args.strand.clone().unwrap_or_else(default_strand))
    };
    let spec = ClusterSpec {
        layout: args.layout,
        overrides: args.overrides.clone(),
        env: Vec::new(),
        dir: args.dir.clone(),
        start_timeout: args.timeout,
        // node processes get SIGTERM if this process dies without `quit`
        parent_death_signal: Some(libc::SIGTERM),
        hosts: Vec::new(),
        extra_listener: None,
        tcp_readiness: false,
        http_listener: false,
        format_args: Vec::new(),
        extra_log_dirs: 0,
    };
    let mut stdout = io::stdout().lock();
    eprintln!(
        "strand-cluster: starting {:?} with {}",
        args.layout,
        server.name()
    );
    let mut cluster = match Cluster::start_server(server, spec) {
        Ok(c) => c,
        Err(e) => {
            let mut msg = e.to_string();
            if e.kind() == io::ErrorKind::NotFound && msg.contains("spawning") {
                msg.push_str(
                    "\n(build the broker first: `cargo build --bin strand`, or pass --strand BIN)",
                );
            }
            eprintln!("strand-cluster: {msg}");
            let first = msg.lines().next().unwrap_or("").trim();
            answer(&mut stdout, &[format!("error {first}")]);
            return ExitCode::FAILURE;
        }
    };
    eprintln!(
        "strand-cluster: cluster id {} in {} (logs: nodeN.log)",
        cluster.cluster_id(),
        cluster.dir().display()
    );
    let mut lines = Vec::new();
    for id in cluster.node_ids() {
        match cluster.status_line(id) {
            Ok(l) => lines.push(l),
            Err(e) => lines.push(error_line(&e.to_string())),
        }
    }
    lines.push(format!("bootstrap {}", cluster.bootstrap()));
    lines.push("ready".into());
    answer(&mut stdout, &lines);

    let stdin = io::stdin();
    let mut input = stdin.lock();
    let mut buf = String::new();
    loop {
        buf.clear();
        let cmd = match input.read_line(&mut buf) {
            Ok(0) => Cmd::Quit,
            Ok(_) => match parse_command(&buf) {
                Ok(Some(c)) => c,
                Ok(None) => continue,
                Err(e) => {
                    answer(&mut stdout, &[error_line(&e)]);
                    continue;
                }
            },
            Err(e) => {
                eprintln!("strand-cluster: reading stdin: {e}");
                Cmd::Quit
            }
        };
        let quit = cmd == Cmd::Quit;
        let ok = match run_command(&mut cluster, &cmd) {
            Ok(l) => {
                answer(&mut stdout, &l);
                true
            }
            Err(e) => {
                answer(&mut stdout, &[error_line(&e)]);
                false
            }
        };
        if quit {
            drop(cluster);
            return if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Result<Option<Args>, String> {
        parse_args(s.split_whitespace().map(String::from).collect())
    }

    #[test]
    fn parses_nodes_dir_overrides() {
        let a = args("--nodes 3 --dir /tmp/x --override num.partitions=3 --override=a.b=c=d")
            .unwrap()
            .unwrap();
        assert_eq!(a.layout, Layout::Combined(3));
        assert_eq!(a.dir, Some(PathBuf::from("/tmp/x")));
        assert_eq!(
            a.overrides,
            vec![
                ("num.partitions".to_string(), "3".to_string()),
                ("a.b".to_string(), "c=d".to_string())
            ]
        );
        assert_eq!(a.strand, None);
        assert_eq!(a.timeout, None);
    }

    #[test]
    fn parses_split_layout_and_options() {
        let a = args("--controllers 3 --brokers=2 --strand target/debug/strand --timeout 90")
            .unwrap()
            .unwrap();
        assert_eq!(
            a.layout,
            Layout::Split {
                controllers: 3,
                brokers: 2
            }
        );
        assert_eq!(a.strand, Some(PathBuf::from("target/debug/strand")));
        assert_eq!(a.timeout, Some(Duration::from_secs(90)));
        assert_eq!(a.dir, None);
    }

    #[test]
    fn rejects_bad_args() {
        assert_eq!(args("--help").unwrap(), None);
        assert_eq!(args("--nodes 3 -h").unwrap(), None);
        for bad in [
            "",
            "--nodes",
            "--nodes 0",
            "--nodes x",
            "--nodes 3 --brokers 2",
            "--controllers 3",
            "--brokers 3",
            "--nodes 3 --override foo",
            "--nodes 3 --override =x",
            "--nodes 3 --timeout 0",
            "--nodes 3 --bogus",
            "--nodes 3 extra",
        ] {
            assert!(args(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn parses_commands() {
        assert_eq!(parse_command("kill 2\n"), Ok(Some(Cmd::Kill(2))));
        assert_eq!(parse_command("  stop   3 "), Ok(Some(Cmd::Stop(3))));
        assert_eq!(parse_command("cont 3"), Ok(Some(Cmd::Cont(3))));
        assert_eq!(parse_command("restart 1"), Ok(Some(Cmd::Restart(1))));
        assert_eq!(parse_command("status"), Ok(Some(Cmd::Status)));
        assert_eq!(parse_command("wait"), Ok(Some(Cmd::Wait)));
        assert_eq!(parse_command("quit"), Ok(Some(Cmd::Quit)));
        assert_eq!(parse_command("   \n"), Ok(None));
        assert_eq!(parse_command(""), Ok(None));
        for bad in [
            "kill",
            "kill x",
            "kill 1 2",
            "status 1",
            "quit now",
            "frobnicate 1",
            "KILL 1",
        ] {
            assert!(parse_command(bad).is_err(), "{bad:?} should be rejected");
        }
        assert_eq!(
            parse_command("frob 1").unwrap_err(),
            "unknown command \"frob\""
        );
        assert_eq!(parse_command("kill").unwrap_err(), "kill: missing node id");
    }

    #[test]
    fn error_lines_are_one_line() {
        assert_eq!(error_line("no node 7"), "error no node 7");
        assert_eq!(
            error_line("restart 2: timed out\nlog tail"),
            "error restart 2: timed out"
        );
    }
}
