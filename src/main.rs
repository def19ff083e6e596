//! `strand`: a Kafka-wire-compatible broker. With no arguments it runs a
//! durable single node (broker and controller) on 127.0.0.1:9092 with its data
//! in ./data. `strand server.properties --override key=value ...` takes Kafka's
//! property names.

// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use clap::{Args, Parser, Subcommand};
use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use strand_broker::config::BrokerConfig;
use strand_broker::controller_link::ControllerLink;
use strand_broker::listener_security::ListenerSecurity;
use strand_broker::replica_manager::ReplicaManager;
use strand_broker::{lifecycle, meta, node, server};
use strand_controller::manager::ControllerConfig;
use strand_controller::{
    BoxRpcStream, PlainRpc, QuorumSettings, RpcFuture, RpcSecurity, StoreKind,
};

/// A Kafka-wire-compatible replicated log: runs a node (broker,
/// controller or both, as server.properties' `process.roles` says).
#[derive(Parser, Debug)]
#[command(
    name = "strand",
    version = concat!(env!("CARGO_PKG_VERSION"), " (", env!("STRAND_GIT_COMMIT"), ")"),
    args_conflicts_with_subcommands = true
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// The node's server.properties (Kafka's keys).
    properties: Option<PathBuf>,
    /// A setting that wins over the file's (repeatable).
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Formats the node's data directory (as `kafka-storage format`).
    Format(Box<FormatArgs>),
    /// Prints a new cluster id (as `kafka-storage random-uuid`).
    RandomUuid,
}

#[derive(Args, Debug)]
struct FormatArgs {
    /// The cluster id (`strand random-uuid` makes one).
    #[arg(short = 't', long)]
    cluster_id: Option<String>,
    /// The node id (else server.properties' `node.id`).
    #[arg(long)]
    node_id: Option<i32>,
    /// The initial controllers: `id@host:port,...`.
    #[arg(short = 'I', long, conflicts_with = "standalone")]
    initial_controllers: Option<String>,
    /// The cluster's metadata.version, as a level name (`4.4-IV2`) or a
    /// release (`3.9`); other features take the release's levels.
    #[arg(short = 'r', long)]
    release_version: Option<String>,
    /// A feature's level, `name=level` (repeatable), over the release's.
    #[arg(short = 'f', long = "feature", value_name = "NAME=LEVEL")]
    features: Vec<String>,
    /// This node alone is the initial controller set.
    #[arg(short = 's', long)]
    standalone: bool,
    /// The voters of `controller.quorum.voters`, if any (the default).
    #[arg(short = 'N', long)]
    no_initial_controllers: bool,
    /// Succeed if the directory is already formatted for this cluster and node.
    #[arg(short = 'g', long)]
    ignore_formatted: bool,
    /// The node's server.properties.
    #[arg(short = 'c', long = "config")]
    config: Option<PathBuf>,
    /// The same, given alone.
    #[arg(conflicts_with = "config")]
    properties: Option<PathBuf>,
    /// A setting that wins over the file's (repeatable).
    #[arg(long = "override", value_name = "KEY=VALUE")]
    overrides: Vec<String>,
    /// A SCRAM user the cluster starts with, as kafka-storage takes it:
    /// `SCRAM-SHA-512=[name=alice,password=alice-secret]` (repeatable).
    #[arg(
        short = 'S',
        long = "add-scram",
        value_name = "MECHANISM=[name=...,password=...]"
    )]
    add_scram: Vec<String>,
}

/// glibc's malloc, tuned for a broker's churn of large buffers: request
/// frames of up to a megabyte or more, allocated and freed for every
/// produce. By default glibc hands memory at the top of a heap back to the
/// kernel once 2x its (adaptive) mmap threshold is free there, so under a
/// steady produce load the next frame lands on fresh pages and every one of
/// them faults and is zeroed (measured: 170,000 page faults for 1 GB
/// produced over TLS, about 10% of the broker's CPU). Buffers up to 32 MiB
/// come from the heaps, and a heap is trimmed once 32 MiB is free at its top
/// (a thread's heap is at most 64 MiB, so it still gives memory back). An
/// operator's own settings (`GLIBC_TUNABLES`, `MALLOC_*_`) win. Returns what
/// was done, for the log.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn tune_malloc() -> &'static str {
    let operator_set = std::env::vars_os().any(|(k, v)| {
        let k = k.to_string_lossy();
        (k == "GLIBC_TUNABLES" && v.to_string_lossy().contains("malloc"))
            || (k.starts_with("MALLOC_") && k.ends_with('_'))
    });
    if operator_set {
        return "malloc settings from the environment kept";
    }
    // SAFETY: mallopt only sets allocator parameters; called first in
    // main, before any other thread exists. It returns 1 on success.
    let set = unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, 32 << 20) == 1
    };
    if set {
        "malloc mmap and trim thresholds set to 32 MiB"
    } else {
        "malloc thresholds refused by the C library; its defaults kept"
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn tune_malloc() -> &'static str {
    "malloc left as it is (not glibc)"
}

/// The log filter a reload may replace (BROKER_LOGGER), and the
/// directives it started with.
struct LogLevels {
    directives: String,
    handle: tracing_subscriber::reload::Handle<
        tracing_subscriber::EnvFilter,
        tracing_subscriber::Registry,
    >,
}

/// How the log is written: the filter (`RUST_LOG`, else the
/// `strand.log.level` property, else Strand's default) and JSON lines or
/// text; colours only on a terminal. The filter can be replaced at runtime.
fn init_logging(level: Option<&str>, json: bool) -> LogLevels {
    use std::io::IsTerminal;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::EnvFilter;
    let default = strand_broker::broker_loggers::DEFAULT_FILTER;
    let wanted = std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .or_else(|| level.filter(|v| !v.trim().is_empty()).map(str::to_string));
    let (directives, filter, refused) = match wanted {
        Some(v) => match EnvFilter::try_new(&v) {
            Ok(f) => (v, f, None),
            Err(e) => (default.to_string(), EnvFilter::new(default), Some((v, e))),
        },
        None => (default.to_string(), EnvFilter::new(default), None),
    };
    let (filter, handle) = tracing_subscriber::reload::Layer::new(filter);
    let text = (!json).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
    });
    let json = json.then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
    });
    tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json)
        .init();
    if let Some((v, e)) = refused {
        tracing::warn!(filter = %v, error = %e, "the log filter is not valid; using the default");
    }
    LogLevels { directives, handle }
}

fn main() {
    let malloc = tune_malloc();
    let cli = Cli::parse();
    if cli.command.is_some() {
        init_logging(None, false);
    }
    match cli.command {
        Some(Command::Format(f)) => {
            let opts = meta::FormatOptions {
                cluster_id: f.cluster_id,
                node_id: f.node_id,
                initial_controllers: f.initial_controllers,
                ignore_formatted: f.ignore_formatted,
                standalone: f.standalone,
                // `-c FILE` as kafka-storage takes it, or the file alone.
                config: f.config.or(f.properties),
                overrides: f.overrides,
                add_scram: f.add_scram,
                release_version: f.release_version,
                features: f.features,
            };
            match meta::format(&opts) {
                Ok(msg) => {
                    println!("{msg}");
                    return;
                }
                Err(e) => {
                    eprintln!("strand format: {e}");
                    std::process::exit(1);
                }
            }
        }
        Some(Command::RandomUuid) => {
            println!("{}", meta::new_cluster_id());
            return;
        }
        None => {}
    }
    let config = match BrokerConfig::load(cli.properties.as_deref(), &cli.overrides) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("strand: configuration error: {e}");
            std::process::exit(2);
        }
    };
    let log_levels = init_logging(
        config.setting("strand.log.level").as_deref(),
        config.setting("strand.log.format").as_deref() == Some("json"),
    );
    tracing::debug!("{malloc}");
    for (key, why) in config.inert_settings() {
        tracing::warn!(
            key,
            "{key} is accepted but Strand does not act on it: {why}"
        );
    }
    if !config.unused_keys.is_empty() {
        // Kafka logs the same of the keys it was given and does not use.
        tracing::warn!(keys = ?config.unused_keys, "these configurations were supplied but are not used by Strand");
    }
    lifecycle::raise_open_file_limit();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("strand: cannot start runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(config, log_levels)) {
        eprintln!("strand: {e}");
        std::process::exit(1);
    }
}

/// Stops the process at once, as Kafka's `Exit.halt`: `_exit` runs no
/// destructor, atexit handler or C++ static destructor, so nothing of a
/// failed directory (the controller's RocksDB store is in it too) is
/// flushed, closed or waited on; what was acknowledged is already synced.
fn halt(why: &str) -> ! {
    // Not eprintln!: a full disk may hold stderr's file too, and eprintln!
    // panics when the write fails.
    let _ = writeln!(
        std::io::stderr(),
        "strand: {why}; stopped without a clean shutdown; the logs are recovered at the next start"
    );
    // SAFETY: _exit ends the process; nothing runs after it.
    unsafe { libc::_exit(1) }
}

/// The controller listener's TLS (the broker crate's) as the controller
/// crate's connection hooks.
struct ControllerSecurity(strand_broker::controller_channel::ControllerChannel);

impl RpcSecurity for ControllerSecurity {
    fn connect(&self, addr: &str) -> RpcFuture<BoxRpcStream> {
        let connecting = self.0.connect(addr);
        Box::pin(async move { Ok(Box::new(connecting.await?) as BoxRpcStream) })
    }

    fn accept(
        &self,
        stream: tokio::net::TcpStream,
        peer: std::net::SocketAddr,
    ) -> RpcFuture<BoxRpcStream> {
        let admitting = self.0.accept(stream, peer);
        Box::pin(async move { Ok(Box::new(admitting.await?) as BoxRpcStream) })
    }
}

async fn run(config: Arc<BrokerConfig>, log_levels: LogLevels) -> Result<(), String> {
    // Key stores, trust stores and SASL settings are read first: a listener
    // that cannot be secured as configured stops start-up before anything
    // else happens.
    let securities = config
        .client_listeners()
        .map(|l| {
            Ok((
                l.name.clone(),
                Arc::new(ListenerSecurity::build(&config, &l.name)?),
            ))
        })
        .collect::<Result<BTreeMap<String, Arc<ListenerSecurity>>, String>>()?;
    let inter_broker = strand_broker::inter_broker::transport(&config)?;
    let controller_rpc: Arc<dyn RpcSecurity> =
        match strand_broker::controller_channel::ControllerChannel::build(&config)? {
            Some(channel) => Arc::new(ControllerSecurity(channel)),
            None => PlainRpc::shared(),
        };
    // The metrics and health listener first: a probe sees the node not
    // ready while it registers and recovers its logs.
    let status = strand_broker::status_http::Status::new();
    if let Some(addr) = config
        .setting("strand.http.listener")
        .filter(|v| !v.is_empty())
    {
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|e| format!("cannot listen on {addr} (strand.http.listener): {e}"))?;
        tracing::info!(%addr, "serving /metrics, /health/live and /health/ready");
        tokio::spawn(strand_broker::status_http::serve(listener, status.clone()));
    }
    let log_dir = config.log_dirs[0].clone();
    std::fs::create_dir_all(&log_dir)
        .map_err(|e| format!("cannot create log dir {}: {e}", log_dir.display()))?;
    let meta = meta::load_or_self_format(&config)?;
    let log_dirs = Arc::new(strand_broker::log_dirs::LogDirs::load(&config, &meta)?);
    let voters: BTreeMap<u64, String> = if config.quorum_voters.is_empty() {
        meta.initial_controllers
            .iter()
            .map(|v| (v.id as u64, v.addr.clone()))
            .collect()
    } else {
        config
            .quorum_voters
            .iter()
            .map(|v| (v.id as u64, v.addr.clone()))
            .collect()
    };
    let mut metadata_stopped = None;
    let controller = if config.is_controller() {
        let listener = match config.controller_listener() {
            Some(l) => {
                let addr = l
                    .bind_addr()
                    .map_err(|e| format!("invalid controller listener: {e}"))?;
                Some(
                    tokio::net::TcpListener::bind(addr)
                        .await
                        .map_err(|e| format!("cannot listen on {addr}: {e}"))?,
                )
            }
            None => None,
        };
        let node = strand_controller::start_controller(QuorumSettings {
            node_id: config.node_id as u64,
            cluster_id: meta.cluster_id.clone(),
            voters: voters.clone(),
            initial_voters: meta
                .initial_controllers
                .iter()
                .map(|v| (v.id as u64, v.addr.clone()))
                .collect(),
            store: StoreKind::Rocks(log_dir.join("__cluster_metadata-0")),
            election_timeout_ms: config.election_timeout_ms,
            session_timeout_ms: config.broker_session_timeout_ms as u64,
            write_lease_ms: config.write_lease_ms,
            listener,
            rpc: controller_rpc.clone(),
            bootstrap: meta::read_bootstrap(&log_dir)?,
            controller: ControllerConfig {
                node_id: config.broker_id(),
                num_partitions: config.num_partitions,
                default_replication_factor: config.default_replication_factor,
                producer_id_block_size: 1000,
                max_replication_factor: usize::MAX,
                leader_balance_interval_ms: if config.auto_leader_rebalance_enable {
                    Some(config.leader_imbalance_check_interval_ms)
                } else {
                    None
                },
                unclean_leader_election_enable: config
                    .setting("unclean.leader.election.enable")
                    .is_some_and(|v| v.trim().eq_ignore_ascii_case("true")),
                unclean_election_interval_ms: Some(config.unclean_leader_election_interval_ms),
                group_bounds: strand_controller::manager::GroupBounds::from_settings(|k| {
                    config.setting(k)
                }),
            },
            clock: strand_types::SystemClock::shared(),
            seed: None,
        })
        .await
        .map_err(|e| format!("controller start failed: {e}"))?;
        metadata_stopped = Some(node.stopped());
        let controller_metrics = node.metrics.clone();
        status.set_controller_metrics(Box::new(move |out| controller_metrics.encode_into(out)));
        let raft_metrics = node.raft.metrics();
        status.set_active_controller(Box::new(move || {
            let m = raft_metrics.borrow();
            m.current_leader == Some(m.id)
        }));
        node.handle
    } else {
        strand_controller::remote_handle(&voters, controller_rpc.clone())
    };
    // This node's Raft stopped for good (its metadata store failed a write
    // or an fsync): it can neither vote nor learn new metadata, and a
    // broker on a frozen image would serve stale leaderships. Pending
    // forever on a broker-only node.
    let metadata_failed = async move {
        match metadata_stopped {
            Some(stopped) => stopped.await,
            None => std::future::pending().await,
        }
    };
    if !config.is_broker() {
        status.set_controller_only();
        tracing::info!(node_id = config.node_id, "controller is running");
        tokio::select! {
            signalled = lifecycle::wait_for_signal() => signalled?,
            why = metadata_failed => {
                tracing::error!(error = %why, "the metadata store failed: stopping");
                halt(&format!("metadata store failed ({why})"));
            }
        }
        return Ok(());
    }
    // The broker sees the controller only through its API (typed calls and
    // the published image), not the controller crate.
    let controller = ControllerLink::new(controller.client(), controller.subscribe());
    let clock = strand_types::SystemClock::shared();
    let lease = lifecycle::write_lease(&config);
    let registration = lifecycle::register(
        &config,
        &meta.cluster_id,
        &controller,
        &lease,
        &*clock,
        &log_dirs,
    )
    .await?;
    lifecycle::spawn_heartbeats(
        config.clone(),
        controller.clone(),
        &registration,
        lease.clone(),
        clock.clone(),
        log_dirs.clone(),
    );
    let broker = Arc::new(ReplicaManager::new(
        config.clone(),
        controller.clone(),
        registration.broker_epoch,
        clock,
        inter_broker,
        lease,
        log_dirs.clone(),
    ));
    broker.install_tls_listeners(
        securities
            .iter()
            .map(|(name, security)| (name.clone(), security.clone()))
            .collect(),
    );
    let reload = log_levels.handle;
    broker.loggers.install(
        &log_levels.directives,
        Box::new(move |directives| {
            let filter =
                tracing_subscriber::EnvFilter::try_new(directives).map_err(|e| e.to_string())?;
            reload.reload(filter).map_err(|e| e.to_string())
        }),
    );
    let node = node::Node::new(broker.clone());
    status.set_node(node.clone());
    let image = broker.image();
    broker.finish_pending_deletes();
    broker.remove_orphan_dirs(&image);
    broker.reconcile();
    status.set_loaded();
    broker.resume_replica_moves();
    tracing::info!(
        partitions = broker.all_partitions().len(),
        "partitions opened"
    );

    // The node's background work: reconciliation with each new image,
    // housekeeping, group and transaction timers, ISR shrink.
    node.spawn_background();

    // Every client listener at once (Kafka's several `listeners`, e.g. an
    // internal and an external one): each answers with the brokers'
    // addresses on itself.
    let (shutdown_tx, shutdown_rx) = tokio::sync::watch::channel(false);
    let mut servers = Vec::new();
    for listener_cfg in config.client_listeners() {
        let security = securities[&listener_cfg.name].clone();
        let addr = listener_cfg
            .bind_addr()
            .map_err(|e| format!("invalid listener address: {e}"))?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        tracing::info!(%addr, listener = %listener_cfg.name, security_protocol = security.protocol.name(), node_id = config.node_id, cluster_id = %image.cluster_id, "strand is serving");
        servers.push(tokio::spawn(server::serve_secured(
            listener,
            listener_cfg.name.as_str().into(),
            security,
            node.clone(),
            shutdown_rx.clone(),
        )));
    }

    status.set_serving();

    // Each log directory that fails stops its own partitions; the
    // metadata directory's failure, or the last one's, stops the broker.
    let (fatal_tx, mut fatal_rx) = tokio::sync::mpsc::channel::<String>(1);
    for i in 0..log_dirs.all().len() {
        let (broker, fatal_tx) = (broker.clone(), fatal_tx.clone());
        tokio::spawn(async move {
            let what = broker.log_dirs.all()[i].failures.wait().await;
            if broker.log_dirs.is_fatal() {
                let _ = fatal_tx.send(what).await;
            } else {
                let b = broker.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    b.handle_log_dir_failure(&b.log_dirs.all()[i])
                })
                .await;
            }
        });
    }
    tokio::select! {
        signalled = lifecycle::wait_for_signal() => signalled?,
        Some(what) = fatal_rx.recv() => {
            // Kafka halts once every log directory has failed, or the
            // metadata one; the leaderships go first so clients are not
            // left waiting for the session timeout. Never the clean path:
            // it would flush and checkpoint the failed logs.
            tracing::error!(error = %what, "the log directory failed: handing over leaderships and stopping");
            let b = broker.clone();
            let _ = tokio::task::spawn_blocking(move || b.stop_fetchers()).await;
            lifecycle::controlled_shutdown(&config, &controller, &registration, &log_dirs).await;
            halt(&format!("log directory failed ({what})"));
        }
        why = metadata_failed => {
            // The first log directory: the metadata store lives in it.
            tracing::error!(error = %why, "the metadata store failed: handing over leaderships and stopping");
            let b = broker.clone();
            let _ = tokio::task::spawn_blocking(move || b.stop_fetchers()).await;
            lifecycle::controlled_shutdown(&config, &controller, &registration, &log_dirs).await;
            halt(&format!("metadata store failed ({why})"));
        }
    }
    lifecycle::controlled_shutdown(&config, &controller, &registration, &log_dirs).await;
    let _ = shutdown_tx.send(true);
    for server in servers {
        let _ = server.await;
    }
    if log_dirs.all().iter().any(|d| d.is_offline()) {
        // A log failed while stopping: nothing may be flushed or marked clean.
        return Err(
            "log directory failed during shutdown; stopped without a clean shutdown".into(),
        );
    }
    let b = broker.clone();
    let _ = tokio::task::spawn_blocking(move || b.shutdown()).await;
    tracing::info!("clean shutdown complete");
    Ok(())
}
