//! Run librdkafka 2.12.1's own test suite (tests/test-runner) against Strand, each test
//! number against a freshly started broker or cluster, `--jobs` of them at once. See
//! `--help`.
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use std::fs;
use std::io::{self, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use strand_compat_tests::cluster::{Cluster, ClusterSpec};
use strand_compat_tests::harness::{tail_file, Broker};
use strand_compat_tests::key_value;
use strand_compat_tests::rdkafka_security::{write_kafka_shim, SuitePki};
use strand_compat_tests::rdkafka_suite::{
    normalize_test_number, parse_output, parse_test_list, strip_ansi, verdict, Outcome, RunEnd,
};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

struct Args {
    strand: Option<PathBuf>,
    broker: Option<String>,
    suite: PathBuf,
    tests: Vec<String>,
    must_pass: Vec<String>,
    timeout: u64,
    out: PathBuf,
    kafka_version: String,
    multiplier: Option<f64>,
    conf: Vec<String>,
    overrides: Vec<(String, String)>,
    /// Combined nodes per fresh cluster (1 = a single broker).
    nodes: usize,
    /// (test, key, value): overrides for one test only.
    test_overrides: Vec<(String, String, String)>,
    /// Every listener on SASL_SSL.
    sasl_ssl: bool,
    kafka_tool: Option<PathBuf>,
    /// Test numbers run at once.
    jobs: usize,
}

fn usage_err(msg: impl std::fmt::Display) -> String {
    format!("librdkafka-suite: {msg}\n(see --help)")
}

/// Runs librdkafka's tests/test-runner once per test number. Unless --broker is given,
/// every test number gets a fresh Strand (num.partitions=4, auto.create.topics.enable=true,
/// default.replication.factor=1).
#[derive(clap::Parser, Debug)]
#[command(
    name = "librdkafka-suite",
    after_help = "Output: one line per test as it ends `NNNN PASS|FAIL|SKIP <secs>s [reason]`, then \
`N passed, N failed[, N skipped]`. Exit status: 0, or 1 if a must-pass test failed, 2 on usage \
errors. Environment variables (SUBTESTS, TEST_DEBUG, TEST_LEVEL, TEST_CONSUMER_GROUP_PROTOCOL, \
...) pass through to the test-runner."
)]
struct Cli {
    /// strand binary to start for each test
    #[arg(
        long,
        value_name = "BIN",
        required_unless_present = "broker",
        conflicts_with = "broker"
    )]
    strand: Option<PathBuf>,
    /// start a fresh N-node cluster (combined broker+controller nodes, via the cluster
    /// harness) per test instead of one broker
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = positive)]
    nodes: usize,
    /// use an already running broker at ADDR (host:port) instead
    #[arg(long, value_name = "ADDR", value_parser = host_port)]
    broker: Option<String>,
    /// librdkafka tree built by compat-tests/scripts/build-librdkafka.sh (default:
    /// $STRAND_CACHE/librdkafka-2.12.1, $STRAND_CACHE defaulting to ~/.cache/strand)
    #[arg(long, value_name = "DIR")]
    suite: Option<PathBuf>,
    /// test numbers, one per line, '#' comments (combinable with positional numbers)
    #[arg(long = "list", value_name = "FILE")]
    lists: Vec<PathBuf>,
    /// exit nonzero iff a test listed here was run and did not PASS; if no tests are
    /// given otherwise, runs exactly this list; may be repeated (the lists are joined)
    #[arg(long = "must-pass", value_name = "FILE")]
    must_pass: Vec<PathBuf>,
    /// test numbers not to run (same format), even when listed elsewhere; may be repeated
    #[arg(long = "except", value_name = "FILE")]
    except: Vec<PathBuf>,
    /// run up to N test numbers at once, each with its own fresh broker or cluster; most
    /// of the suite's time is spent waiting on timeouts and sessions, not on CPU
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = positive)]
    jobs: usize,
    /// per-test time limit in seconds; on expiry the runner's process group is killed
    /// and the test counts as FAIL
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..))]
    timeout: u64,
    /// results dir: logs/NNNN.log, logs/NNNN.strand.log (NNNN.nodeN.log with --nodes),
    /// results.tsv
    #[arg(long, value_name = "DIR", default_value = "target/librdkafka-results")]
    out: PathBuf,
    /// TEST_KAFKA_VERSION
    #[arg(long, value_name = "V", default_value = "3.7.1")]
    kafka_version: String,
    /// write test.timeout.multiplier=F into test.conf
    #[arg(long = "timeout-multiplier", value_name = "F", value_parser = positive_f64)]
    multiplier: Option<f64>,
    /// extra test.conf line (repeatable)
    #[arg(long, value_name = "KEY=VALUE", value_parser = key_value_line)]
    conf: Vec<String>,
    /// extra strand --override (repeatable; ignored with --broker)
    #[arg(long = "override", value_name = "KEY=VALUE", value_parser = key_value)]
    overrides: Vec<(String, String)>,
    /// an --override for test NNNN only (repeatable)
    #[arg(long = "test-override", value_name = "NNNN:KEY=VALUE", value_parser = test_override)]
    test_overrides: Vec<(String, String, String)>,
    /// plaintext, or sasl_ssl: every listener of every node on SASL_SSL (clients as a
    /// SCRAM-SHA-512 user made at format time, brokers with PLAIN and mutual TLS between
    /// them, the controller listener on mutual TLS), test.conf and the SSL_* variables
    /// set for it (needs openssl and STRAND_PYTHON with confluent-kafka, which checks
    /// every broker authenticates before each test)
    #[arg(long, value_name = "PROTOCOL", default_value = "plaintext", value_parser = ["plaintext", "sasl_ssl"])]
    security: String,
    /// compat-tests/scripts/kafka-tool.sh: KAFKA_PATH gets bin/kafka-acls.sh,
    /// kafka-topics.sh and kafka-configs.sh that run the reference Kafka's tools
    #[arg(long, value_name = "PATH")]
    kafka_tool: Option<PathBuf>,
    /// test numbers to run
    #[arg(value_name = "TESTNUM", value_parser = test_number)]
    tests: Vec<String>,
}

fn positive(v: &str) -> Result<usize, String> {
    v.parse::<usize>()
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| format!("expected a positive number, got {v:?}"))
}

fn positive_f64(v: &str) -> Result<f64, String> {
    v.parse::<f64>()
        .ok()
        .filter(|m| *m > 0.0)
        .ok_or_else(|| format!("not a positive number: {v:?}"))
}

fn host_port(v: &str) -> Result<String, String> {
    if v.contains(':') {
        Ok(v.to_string())
    } else {
        Err(format!("expected host:port, got {v:?}"))
    }
}

fn key_value_line(v: &str) -> Result<String, String> {
    key_value(v).map(|_| v.to_string())
}

fn test_number(v: &str) -> Result<String, String> {
    normalize_test_number(v)
}

fn test_override(v: &str) -> Result<(String, String, String), String> {
    let bad = || format!("expected NNNN:KEY=VALUE, got {v:?}");
    let (num, kv) = v.split_once(':').ok_or_else(bad)?;
    let (k, x) = kv.split_once('=').ok_or_else(bad)?;
    Ok((normalize_test_number(num)?, k.to_string(), x.to_string()))
}

/// Reads the lists `flag` names.
fn read_lists(flag: &str, files: &[PathBuf]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for f in files {
        let text =
            fs::read_to_string(f).map_err(|e| usage_err(format!("{flag} {}: {e}", f.display())))?;
        out.extend(
            parse_test_list(&text)
                .map_err(|e| usage_err(format!("{flag} {}: {e}", f.display())))?,
        );
    }
    Ok(out)
}

/// The run `cli` asks for: its lists read, its paths checked.
fn resolve(cli: Cli) -> Result<Args, String> {
    let mut tests = cli.tests;
    tests.extend(read_lists("--list", &cli.lists)?);
    let must_pass = read_lists("--must-pass", &cli.must_pass)?;
    if tests.is_empty() {
        if must_pass.is_empty() {
            return Err(usage_err(
                "no tests given: pass test numbers, --list FILE or --must-pass FILE",
            ));
        }
        tests = must_pass.clone();
    }
    let except: std::collections::HashSet<String> =
        read_lists("--except", &cli.except)?.into_iter().collect();
    // dedup, keep order
    let mut seen = std::collections::HashSet::new();
    tests.retain(|t| !except.contains(t) && seen.insert(t.clone()));

    let mut strand = cli.strand;
    if let Some(s) = &strand {
        if s.is_file() {
            strand = Some(
                s.canonicalize()
                    .map_err(|e| usage_err(format!("--strand {}: {e}", s.display())))?,
            );
        } else if s.components().count() > 1 || find_in_path(&s.to_string_lossy()).is_none() {
            return Err(usage_err(format!("--strand {}: no such file", s.display())));
        }
    }
    let suite = cli
        .suite
        .unwrap_or_else(strand_compat_tests::default_suite_dir);
    let runner = suite.join("tests/test-runner");
    if !runner.is_file() {
        return Err(usage_err(format!(
            "{} not found; build it with compat-tests/scripts/build-librdkafka.sh or pass --suite DIR",
            runner.display()
        )));
    }
    let suite = suite
        .canonicalize()
        .map_err(|e| usage_err(format!("--suite: {e}")))?;
    Ok(Args {
        nodes: cli.nodes,
        strand,
        broker: cli.broker,
        suite,
        tests,
        must_pass,
        timeout: cli.timeout,
        out: cli.out,
        kafka_version: cli.kafka_version,
        multiplier: cli.multiplier,
        conf: cli.conf,
        overrides: cli.overrides,
        test_overrides: cli.test_overrides,
        sasl_ssl: cli.security == "sasl_ssl",
        kafka_tool: cli.kafka_tool,
        jobs: cli.jobs,
    })
}

fn find_in_path(prog: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join(prog))
            .find(|f| f.is_file())
    })
}

fn exit_code(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

/// Removes the client-side offset files (`offset.store.method=file`, written
/// into the tests directory as `<topic>-<partition>.offset`) that earlier runs
/// left; once per run, before any test starts, since tests run at once share
/// the directory. Test topic names come from a random generator that can repeat across
/// runs, and a leftover file then starts a consumer at an old run's offset
/// (0014 once hung at EOF this way in the 3-node pass after the 1-node pass).
fn remove_stale_offset_files(tests_dir: &Path) {
    let Ok(entries) = fs::read_dir(tests_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with("rdkafkatest_") && name.ends_with(".offset") {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Run the test-runner for one number; returns how it ended and its wall time.
fn run_runner(
    args: &Args,
    (num, addr): (&str, &str),
    conf: &Path,
    log: &Path,
    env: &[(String, String)],
) -> io::Result<(RunEnd, f64)> {
    let tests_dir = args.suite.join("tests");
    let ld = {
        let mut v = format!(
            "{}:{}",
            args.suite.join("src").display(),
            args.suite.join("src-cpp").display()
        );
        if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
            if !old.is_empty() {
                v.push(':');
                v.push_str(&old.to_string_lossy());
            }
        }
        v
    };
    let logf = fs::File::create(log)?;
    // stdbuf: keep stdout line buffered so the summary table survives the runner's
    // final abort() (it asserts when a test failed or threads leaked).
    let mut cmd = match find_in_path("stdbuf") {
        Some(sb) => {
            let mut c = Command::new(sb);
            c.args(["-oL", "-eL", "./test-runner"]);
            c
        }
        None => Command::new("./test-runner"),
    };
    cmd.args(["-p1", "-L"])
        .current_dir(&tests_dir)
        .env("TESTS", num)
        .env("TEST_KAFKA_VERSION", &args.kafka_version)
        .env("RDKAFKA_TEST_CONF", conf)
        .env("TEST_SCENARIO", "default")
        .env("BROKERS", addr)
        .env("LD_LIBRARY_PATH", ld)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::from(logf.try_clone()?))
        .stderr(Stdio::from(logf))
        .process_group(0);
    let t0 = Instant::now();
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let _ = fs::write(log, format!("failed to start test-runner: {e}\n"));
            return Ok((RunEnd::NotStarted, 0.0));
        }
    };
    let pgid = child.id() as libc::pid_t;
    let limit = Duration::from_secs(args.timeout);
    loop {
        if let Some(st) = child.try_wait()? {
            return Ok((RunEnd::Exited(exit_code(st)), t0.elapsed().as_secs_f64()));
        }
        let interrupted = INTERRUPTED.load(Ordering::SeqCst);
        if t0.elapsed() >= limit || interrupted {
            // SAFETY: signals the process group we created for this child only.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
            let _ = child.wait();
            let mut f = fs::OpenOptions::new().append(true).open(log)?;
            let _ = writeln!(
                f,
                "\n==== librdkafka-suite: {} after {}s; killed process group {pgid} ====",
                if interrupted {
                    "interrupted"
                } else {
                    "timed out"
                },
                t0.elapsed().as_secs()
            );
            return Ok((RunEnd::TimedOut(args.timeout), t0.elapsed().as_secs_f64()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("    {l}\n")).collect()
}

fn main() -> ExitCode {
    let args = match resolve(<Cli as clap::Parser>::parse()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
    }

    let logs = args.out.join("logs");
    if let Err(e) = fs::create_dir_all(&logs) {
        eprintln!("librdkafka-suite: cannot create {}: {e}", logs.display());
        return ExitCode::from(2);
    }
    let out = args.out.canonicalize().unwrap_or_else(|_| args.out.clone());
    let logs = out.join("logs");
    let mut tsv = String::from("test\tresult\tsecs\treason\n");

    let overrides: Vec<(String, String)> = [
        ("num.partitions", "4"),
        ("auto.create.topics.enable", "true"),
        ("default.replication.factor", "1"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .chain(args.overrides.iter().cloned())
    .collect();
    let ov: Vec<(&str, &str)> = overrides
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();

    // SASL_SSL: one set of certificates for the run.
    let pki = if args.sasl_ssl {
        match SuitePki::create(&out.join("pki")) {
            Ok(p) => Some(p),
            Err(e) => {
                eprintln!("librdkafka-suite: making certificates: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        None
    };
    let mut env: Vec<(String, String)> = pki.as_ref().map(SuitePki::ssl_env).unwrap_or_default();
    if let Some(tool) = &args.kafka_tool {
        match write_kafka_shim(&out, tool) {
            Ok(root) => env.push(("KAFKA_PATH".into(), root.display().to_string())),
            Err(e) => {
                eprintln!("librdkafka-suite: --kafka-tool {}: {e}", tool.display());
                return ExitCode::from(2);
            }
        }
    }
    eprintln!(
        "librdkafka-suite: {} test(s), suite {}, results {}",
        args.tests.len(),
        args.suite.display(),
        out.display()
    );
    remove_stale_offset_files(&args.suite.join("tests"));
    let run = Run {
        args: &args,
        logs: &logs,
        ov: &ov,
        pki: pki.as_ref(),
        env: &env,
    };
    // Workers take the next test number in list order and print each
    // test's lines whole when it ends; the table keeps the list's order.
    let next = AtomicUsize::new(0);
    let reports: Mutex<Vec<Option<Report>>> = Mutex::new(vec![None; args.tests.len()]);
    std::thread::scope(|scope| {
        for _ in 0..args.jobs.min(args.tests.len()) {
            scope.spawn(|| loop {
                if INTERRUPTED.load(Ordering::SeqCst) {
                    break;
                }
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(num) = args.tests.get(i) else {
                    break;
                };
                let report = run.test(num);
                {
                    let mut o = io::stdout().lock();
                    let _ = o.write_all(report.printed.as_bytes());
                    let _ = o.flush();
                }
                // A worker that panicked poisons the lock; the reports are
                // still whole (each is stored in one assignment).
                let mut r = reports.lock().unwrap_or_else(|p| p.into_inner());
                r[i] = Some(report);
            });
        }
    });
    let reports = reports.into_inner().unwrap_or_else(|p| p.into_inner());
    if INTERRUPTED.load(Ordering::SeqCst) {
        let not_run = args
            .tests
            .iter()
            .zip(&reports)
            .filter(|(_, r)| r.is_none())
            .count();
        eprintln!("librdkafka-suite: interrupted; {not_run} test(s) not run");
    }
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    let mut must_fail = Vec::new();
    for (num, r) in args.tests.iter().zip(&reports) {
        let Some(r) = r else { continue };
        tsv.push_str(&format!(
            "{num}\t{}\t{:.1}\t{}\n",
            r.outcome.as_str(),
            r.secs,
            r.reason
        ));
        match r.outcome {
            Outcome::Pass => passed += 1,
            Outcome::Fail => failed += 1,
            Outcome::Skip => skipped += 1,
        }
        if r.outcome != Outcome::Pass && args.must_pass.contains(num) {
            must_fail.push(if r.reason.is_empty() {
                num.clone()
            } else {
                format!("{num} ({})", r.reason)
            });
        }
    }
    let _ = fs::write(out.join("results.tsv"), tsv);
    if !must_fail.is_empty() {
        println!("must-pass tests that did not pass:");
        for f in &must_fail {
            println!("  {f}");
        }
    }
    if skipped > 0 {
        println!("{passed} passed, {failed} failed, {skipped} skipped");
    } else {
        println!("{passed} passed, {failed} failed");
    }
    if !must_fail.is_empty() || INTERRUPTED.load(Ordering::SeqCst) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// How one test number ended, and the lines printed for it.
#[derive(Clone)]
struct Report {
    outcome: Outcome,
    secs: f64,
    /// One line: no tabs or newlines.
    reason: String,
    printed: String,
}

impl Report {
    fn failed(num: &str, secs: f64, reason: String, detail: String) -> Report {
        let reason = reason.replace(['\n', '\t'], " ");
        Report {
            printed: format!("{num} FAIL {secs:.1}s {reason}\n{detail}"),
            outcome: Outcome::Fail,
            secs,
            reason,
        }
    }
}

/// What every test of a run shares.
struct Run<'a> {
    args: &'a Args,
    logs: &'a Path,
    /// Strand overrides for every test.
    ov: &'a [(&'a str, &'a str)],
    pki: Option<&'a SuitePki>,
    /// Variables for the test-runner.
    env: &'a [(String, String)],
}

impl Run<'_> {
    /// Starts the test's broker or cluster, runs the test-runner for `num`
    /// against it, then ends them.
    fn test(&self, num: &str) -> Report {
        let args = self.args;
        let logs = self.logs;
        let log = logs.join(format!("{num}.log"));
        let conf_path = logs.join(format!("{num}.test.conf"));
        let t0 = Instant::now();

        // broker
        let mut broker = None;
        let mut cluster = None;
        let mut ov = self.ov.to_vec();
        for (_, k, v) in args.test_overrides.iter().filter(|(n, _, _)| n == num) {
            ov.push((k.as_str(), v.as_str()));
        }
        let secured = self.pki.map(|p| (p, p.broker_overrides()));
        let started = match (&args.broker, &args.strand) {
            (Some(a), _) => Ok(a.clone()),
            // Secured nodes come up through the cluster harness even alone:
            // it can wait for open ports, and the SASL_SSL check follows.
            (None, Some(bin)) if args.nodes > 1 || secured.is_some() => {
                let mut spec = ClusterSpec::combined(args.nodes);
                for (k, v) in &ov {
                    spec = spec.with_override(*k, *v);
                }
                if let Some((pki, settings)) = &secured {
                    spec = spec.with_extra_listener("INTERNAL").with_tcp_readiness();
                    for (k, v) in settings {
                        spec = spec.with_override(k, v);
                    }
                    for a in pki.format_args() {
                        spec = spec.with_format_arg(a);
                    }
                }
                Cluster::start(bin, spec)
                    .map_err(|e| e.to_string())
                    .and_then(|c| {
                        let brokers: Vec<String> = c
                            .broker_ids()
                            .iter()
                            .filter_map(|id| c.broker_addr(*id))
                            .collect();
                        let a = c.bootstrap();
                        cluster = Some(c);
                        match &secured {
                            Some((pki, _)) => pki
                                .wait_ready(&brokers, Duration::from_secs(60))
                                .map(|()| a),
                            None => Ok(a),
                        }
                    })
                    .map_err(io::Error::other)
            }
            (None, Some(bin)) => Broker::start(bin, &ov).map(|b| {
                let a = b.addr();
                broker = Some(b);
                a
            }),
            // clap requires one of them.
            (None, None) => Err(io::Error::other("neither --strand nor --broker")),
        };
        let addr = match started {
            Ok(a) => a,
            Err(e) => {
                if let Some(mut c) = cluster.take() {
                    let _ = c.shutdown();
                }
                let first = e.to_string().lines().next().unwrap_or("").to_string();
                let reason = format!(
                    "strand did not start: {}",
                    first.split("; log tail").next().unwrap_or("")
                );
                return Report::failed(
                    num,
                    t0.elapsed().as_secs_f64(),
                    reason,
                    format!("  strand startup error:\n{}", indent(&e.to_string())),
                );
            }
        };

        // test.conf
        let mut conf = format!("bootstrap.servers={addr}\n");
        if let Some(m) = args.multiplier {
            conf.push_str(&format!("test.timeout.multiplier={m}\n"));
        }
        let secured_conf = self.pki.map(SuitePki::client_conf).unwrap_or_default();
        for c in args.conf.iter().chain(&secured_conf) {
            conf.push_str(c);
            conf.push('\n');
        }
        let (end, secs) = match fs::write(&conf_path, conf) {
            Err(e) => {
                let _ = fs::write(
                    &log,
                    format!("librdkafka-suite: writing {}: {e}\n", conf_path.display()),
                );
                (RunEnd::NotStarted, 0.0)
            }
            Ok(()) => match run_runner(args, (num, &addr), &conf_path, &log, self.env) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("librdkafka-suite: running test-runner for {num}: {e}");
                    (RunEnd::NotStarted, 0.0)
                }
            },
        };
        let raw = fs::read(&log).unwrap_or_default();
        let parsed = parse_output(&String::from_utf8_lossy(&raw), num);
        let mut v = verdict(&parsed, end);

        // broker post-mortem
        let mut broker_tail = String::new();
        if let Some(b) = broker.as_mut() {
            if let Some(st) = b.try_exit_status() {
                v.reason = format!(
                    "{}{}strand exited during the test ({st})",
                    v.reason,
                    if v.reason.is_empty() { "" } else { "; " }
                );
                if v.outcome != Outcome::Fail {
                    v.outcome = Outcome::Fail;
                }
            } else if let Err(e) = b.terminate() {
                eprintln!("  note: {e}");
            }
            broker_tail = b.log_tail_lines(30);
            let _ = fs::copy(b.log_path(), logs.join(format!("{num}.strand.log")));
        }
        drop(broker);
        if let Some(mut c) = cluster.take() {
            for id in c.broker_ids() {
                broker_tail.push_str(&format!("--- node {id}\n{}", c.log_tail(id)));
                let _ = fs::copy(c.log_path(id), logs.join(format!("{num}.node{id}.log")));
            }
            if let Err(e) = c.shutdown() {
                eprintln!("  note: {e}");
            }
        }

        let reason = v.reason.replace(['\n', '\t'], " ");
        let mut printed = format!(
            "{num} {} {secs:.1}s{}{}\n",
            v.outcome.as_str(),
            if reason.is_empty() { "" } else { " " },
            reason
        );
        if v.outcome == Outcome::Fail {
            // Broker logs first and the test's own last lines after them, so
            // that a log viewer showing only the end of the output (CI) shows
            // why the test failed.
            if args.strand.is_some() {
                printed.push_str(&format!(
                    "  --- strand log tail ({}):\n{}",
                    logs.join(format!("{num}.strand.log")).display(),
                    indent(&broker_tail)
                ));
            }
            let tail = strip_ansi(&tail_file(&log, 30));
            printed.push_str(&format!(
                "  --- last 30 lines of {}:\n{}",
                log.display(),
                indent(&tail)
            ));
            printed.push_str(&format!("  --- {num} FAIL {secs:.1}s {reason}\n"));
        }
        Report {
            outcome: v.outcome,
            secs,
            reason,
            printed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::{CommandFactory, Parser};

    #[test]
    fn the_command_lines_of_the_test_command_parse() {
        Cli::command().debug_assert();
        let one = Cli::try_parse_from([
            "librdkafka-suite",
            "--strand",
            "strand",
            "--security",
            "sasl_ssl",
            "--jobs",
            "4",
            "--list",
            "a.txt",
            "--except",
            "b.txt",
            "--except",
            "c.txt",
            "--must-pass",
            "m.txt",
            "--test-override",
            "142:connections.max.reauth.ms=10000",
            "--override",
            "default.replication.factor=3",
            "--timeout-multiplier",
            "3",
            "0001",
            "4",
        ])
        .unwrap();
        assert_eq!(
            (one.jobs, one.nodes, one.security.as_str()),
            (4, 1, "sasl_ssl")
        );
        assert_eq!(one.except.len(), 2);
        assert_eq!(one.tests, ["0001", "0004"]);
        assert_eq!(
            one.test_overrides,
            [(
                "0142".to_string(),
                "connections.max.reauth.ms".to_string(),
                "10000".to_string()
            )]
        );
        assert_eq!(one.multiplier, Some(3.0));
        for bad in [
            &["librdkafka-suite", "0001"][..],
            &["librdkafka-suite", "--strand", "s", "--broker", "h:1", "1"],
            &["librdkafka-suite", "--broker", "nohostport", "1"],
            &["librdkafka-suite", "--strand", "s", "--jobs", "0", "1"],
            &[
                "librdkafka-suite",
                "--strand",
                "s",
                "--security",
                "ssl",
                "1",
            ],
            &[
                "librdkafka-suite",
                "--strand",
                "s",
                "--override",
                "novalue",
                "1",
            ],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?}");
        }
    }
}
