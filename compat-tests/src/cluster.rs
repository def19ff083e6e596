//! Start and control a multi-node `strand` cluster for tests (and for the
//! `strand-cluster` command).
//!
//! A [`Cluster`] formats and starts N `strand` processes on loopback ports it picked
//! itself: either `n` combined nodes (`process.roles=broker,controller`, ids `1..=n`) or
//! `c` controllers (ids `1..=c`) plus `b` brokers (ids `c+1..=c+b`). It waits until the
//! cluster is ready — every running broker answers ApiVersions and, asked with
//! DescribeCluster, lists every running broker registered and unfenced; every running
//! controller-only node accepts TCP connections on its CONTROLLER port — and can then
//! SIGKILL, SIGSTOP/SIGCONT, SIGTERM and restart any node (same ports, same data).
//! Processes are only ever signalled by PID.
//!
//! The same harness runs the reference Apache Kafka ([`Server::Kafka`], jars resolved by
//! `scripts/fetch-kafka.sh`): the same properties (Kafka's own names), formatted with
//! Kafka's `StorageTool` and started as `java ... kafka.Kafka nodeN.properties
//! --override k=v`, so a scenario can ask both the same questions.
//!
//! Layout of the cluster directory:
//!
//! ```text
//! DIR/nodeN/              log.dirs of node N (meta.properties is written by `strand format`)
//! DIR/nodeN.properties    its server.properties
//! DIR/nodeN.log           stdout+stderr of `strand format` and of every start, appended
//! ```

use crate::harness::signal;
use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use kafka_protocol::messages::describe_quorum_request::{PartitionData, TopicData};
use kafka_protocol::messages::{
    ApiVersionsResponse, DescribeClusterRequest, DescribeClusterResponse, DescribeQuorumRequest,
    DescribeQuorumResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion, StrBytes};

use crate::harness::{encode_api_versions_v0, tail_file, DEFAULT_TERM_TIMEOUT, LOG_TAIL_LINES};

/// How long [`Cluster::start`] / [`Cluster::restart`] wait for readiness by default.
/// Override with `STRAND_CLUSTER_START_TIMEOUT_SECS` or [`ClusterSpec::start_timeout`].
pub const DEFAULT_CLUSTER_START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long one `strand format` may run.
pub const FORMAT_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between two readiness polls.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Connect/read/write timeout of one readiness probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
const DESCRIBE_CLUSTER_KEY: i16 = 60;
/// Highest DescribeCluster version we speak (v2 adds `is_fenced`, KIP-1073).
const DESCRIBE_CLUSTER_MAX: i16 = 2;
const CLIENT_ID: &str = "strand-cluster";

/// Shape of the cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// `n` nodes with `process.roles=broker,controller`, ids `1..=n`.
    Combined(usize),
    /// `controllers` controller-only nodes (ids `1..=controllers`) and `brokers`
    /// broker-only nodes (ids `controllers+1..`).
    Split { controllers: usize, brokers: usize },
}

/// What [`Cluster::start`] starts.
#[derive(Clone, Debug)]
pub struct ClusterSpec {
    pub layout: Layout,
    /// Passed to every start of every node as `--override key=value` (they win over the
    /// generated properties file).
    pub overrides: Vec<(String, String)>,
    /// Environment variables of every node process (e.g. `LD_PRELOAD` for a
    /// fault-injecting library).
    pub env: Vec<(String, String)>,
    /// Cluster directory (created if missing; must not already hold node directories).
    /// `None`: a temporary directory removed on drop (kept with `STRAND_KEEP_DATA=1`).
    pub dir: Option<PathBuf>,
    /// Readiness timeout of start and restart; `None`: `STRAND_CLUSTER_START_TIMEOUT_SECS`
    /// or [`DEFAULT_CLUSTER_START_TIMEOUT`].
    pub start_timeout: Option<Duration>,
    /// Linux only: signal the node processes receive when the thread that spawned them
    /// exits (`PR_SET_PDEATHSIG`), so that they do not outlive a killed `strand-cluster`.
    /// Only sensible when one long-lived thread does all starts and restarts.
    pub parent_death_signal: Option<i32>,
    /// Where each node runs (node `i` is `hosts[i - 1]`): its own address and
    /// network namespace, a host of its own that a test can cut off. Empty:
    /// every node on 127.0.0.1 with free ports.
    pub hosts: Vec<NodeHost>,
    /// A second broker listener of this name on every broker (loopback
    /// only: a free port each), listened on and advertised after the
    /// PLAINTEXT one; its security protocol and settings come from
    /// `overrides` (e.g. `inter.broker.listener.name` naming it).
    pub extra_listener: Option<String>,
    /// Readiness is only that every port accepts TCP connections: for a
    /// cluster whose PLAINTEXT-named listener is mapped to a secured
    /// protocol, which the harness's plaintext probe cannot speak; the
    /// test then waits for what it needs with a client that can.
    pub tcp_readiness: bool,
    /// Every node serves `strand.http.listener` (metrics and health) on a
    /// free loopback port of its own ([`Cluster::http_addr`]; Strand only).
    pub http_listener: bool,
    /// More arguments of every node's `strand format` (Strand only: e.g.
    /// `--add-scram`).
    pub format_args: Vec<String>,
    /// Log directories of every node (`log.dirs`): the node's own and
    /// this many more (`nodeN-dirK`, K from 2), as JBOD.
    pub extra_log_dirs: usize,
}

/// A node's own host: an address in a network namespace (`ip netns`). The
/// node listens on `ip:9092` (PLAINTEXT) and `ip:9093` (CONTROLLER) and runs
/// under `ip netns exec NETNS` (which execs it: the PID is the node's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeHost {
    pub ip: String,
    pub netns: String,
}

/// The ports a node on a host of its own listens on.
pub const HOST_BROKER_PORT: u16 = 9092;
pub const HOST_CONTROLLER_PORT: u16 = 9093;

impl ClusterSpec {
    /// `n` combined broker+controller nodes.
    pub fn combined(n: usize) -> Self {
        Self::with_layout(Layout::Combined(n))
    }

    /// `controllers` controller-only nodes plus `brokers` broker-only nodes.
    pub fn split(controllers: usize, brokers: usize) -> Self {
        Self::with_layout(Layout::Split {
            controllers,
            brokers,
        })
    }

    fn with_layout(layout: Layout) -> Self {
        ClusterSpec {
            layout,
            overrides: Vec::new(),
            env: Vec::new(),
            dir: None,
            start_timeout: None,
            parent_death_signal: None,
            hosts: Vec::new(),
            extra_listener: None,
            tcp_readiness: false,
            http_listener: false,
            format_args: Vec::new(),
            extra_log_dirs: 0,
        }
    }

    /// Runs node `i` on `hosts[i - 1]` (see [`NodeHost`]).
    pub fn with_hosts(mut self, hosts: Vec<NodeHost>) -> Self {
        self.hosts = hosts;
        self
    }

    pub fn with_override(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.overrides.push((key.into(), value.into()));
        self
    }

    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn with_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.dir = Some(dir.into());
        self
    }

    /// Every broker also listens on listener `name` ([`ClusterSpec::extra_listener`]).
    pub fn with_extra_listener(mut self, name: impl Into<String>) -> Self {
        self.extra_listener = Some(name.into());
        self
    }

    /// One more argument of every node's `strand format`.
    /// Every node keeps its logs in `n` more directories besides its own.
    pub fn with_http_listener(mut self) -> Self {
        self.http_listener = true;
        self
    }

    pub fn with_extra_log_dirs(mut self, n: usize) -> Self {
        self.extra_log_dirs = n;
        self
    }

    pub fn with_format_arg(mut self, arg: impl Into<String>) -> Self {
        self.format_args.push(arg.into());
        self
    }

    /// [`ClusterSpec::tcp_readiness`].
    pub fn with_tcp_readiness(mut self) -> Self {
        self.tcp_readiness = true;
        self
    }

    pub fn with_start_timeout(mut self, t: Duration) -> Self {
        self.start_timeout = Some(t);
        self
    }
}

/// Roles of one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Combined,
    Controller,
    Broker,
}

impl Role {
    pub fn is_broker(self) -> bool {
        matches!(self, Role::Combined | Role::Broker)
    }
    pub fn is_controller(self) -> bool {
        matches!(self, Role::Combined | Role::Controller)
    }
    /// Value of `process.roles`.
    pub fn process_roles(self) -> &'static str {
        match self {
            Role::Combined => "broker,controller",
            Role::Controller => "controller",
            Role::Broker => "broker",
        }
    }
}

/// Process state of one node as the cluster last left it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeState {
    Running,
    /// SIGSTOPped by [`Cluster::stop`].
    Stopped,
    /// Killed, terminated, or exited by itself.
    Down,
}

struct Node {
    id: i32,
    role: Role,
    /// The address it listens on.
    host: String,
    /// The network namespace it runs in, if any.
    netns: Option<String>,
    broker_port: Option<u16>,
    controller_port: Option<u16>,
    /// The extra listener's port (`ClusterSpec::extra_listener`).
    extra_port: Option<u16>,
    /// `strand.http.listener`'s port (`ClusterSpec::http_listener`).
    http_port: Option<u16>,
    child: Option<Child>,
    pid: u32,
    state: NodeState,
    /// How its last process ended, once reaped.
    exited: Option<ExitStatus>,
}

impl Node {
    fn broker_addr(&self) -> Option<String> {
        self.broker_port.map(|p| format!("{}:{p}", self.host))
    }
    fn controller_addr(&self) -> Option<String> {
        self.controller_port.map(|p| format!("{}:{p}", self.host))
    }

    /// Reap the child if it exited; a running or stopped node that exited becomes Down.
    fn refresh(&mut self) -> Option<ExitStatus> {
        let st = self
            .child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten());
        if st.is_some() {
            self.child = None;
            self.state = NodeState::Down;
            self.exited = st;
        }
        st
    }

    fn status_line(&mut self) -> String {
        self.refresh();
        let (kind, addr) = match (self.broker_addr(), self.controller_addr()) {
            (Some(b), _) => ("broker", b),
            (None, Some(c)) => ("controller", c),
            (None, None) => ("broker", "-".to_string()),
        };
        match self.state {
            NodeState::Running => format!("node {} pid {} {kind} {addr}", self.id, self.pid),
            NodeState::Stopped => {
                format!("node {} pid {} {kind} {addr} stopped", self.id, self.pid)
            }
            NodeState::Down => format!("node {} pid - {kind} {addr} down", self.id),
        }
    }
}

/// What a [`Cluster`] runs on each node.
#[derive(Clone, Debug)]
pub enum Server {
    /// The `strand` binary.
    Strand(PathBuf),
    /// The reference Apache Kafka (KRaft).
    Kafka(KafkaDist),
}

impl Server {
    /// "strand" or "kafka", for logs and reports.
    pub fn name(&self) -> &'static str {
        match self {
            Server::Strand(_) => "strand",
            Server::Kafka(_) => "kafka",
        }
    }
}

/// The reference Apache Kafka as `scripts/fetch-kafka.sh` leaves it: a directory
/// holding `libs/` (the broker, its tools and their dependencies).
#[derive(Clone, Debug)]
pub struct KafkaDist {
    pub dir: PathBuf,
    /// The `java` that runs it (`$JAVA_HOME/bin/java`, else `java` on the PATH).
    pub java: PathBuf,
}

const REFERENCE_POM: &str = include_str!("../reference-kafka/pom.xml");
const CLIENTS_3_9_POM: &str = include_str!("../reference-kafka/clients-3.9/pom.xml");

/// The `<kafka.version>` a pom names.
fn pom_version(pom: &'static str) -> &'static str {
    pom.split_once("<kafka.version>")
        .and_then(|(_, rest)| rest.split_once("</kafka.version>"))
        .map_or("unknown", |(v, _)| v.trim())
}

fn java() -> PathBuf {
    std::env::var_os("JAVA_HOME")
        .map(|h| PathBuf::from(h).join("bin/java"))
        .filter(|j| j.is_file())
        .unwrap_or_else(|| PathBuf::from("java"))
}

impl KafkaDist {
    /// The Kafka version `reference-kafka/pom.xml` resolves.
    pub fn version() -> &'static str {
        pom_version(REFERENCE_POM)
    }

    /// The version of Kafka's tools of the 3.9 line that
    /// `reference-kafka/clients-3.9/pom.xml` resolves.
    pub fn clients_3_9_version() -> &'static str {
        pom_version(CLIENTS_3_9_POM)
    }

    /// Kafka's tools and Java client of the 3.9 line, where
    /// `scripts/fetch-kafka.sh` puts them (`$STRAND_CACHE/kafka-tools-VERSION`):
    /// no broker, only what `kafka-tool.sh` runs, with the older API
    /// versions a 3.x client negotiates.
    pub fn locate_clients_3_9() -> io::Result<KafkaDist> {
        let version = Self::clients_3_9_version();
        let dir = crate::harness::strand_cache().join(format!("kafka-tools-{version}"));
        let jar = dir.join("libs").join(format!("kafka-tools-{version}.jar"));
        if !jar.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} is missing: run compat-tests/scripts/fetch-kafka.sh",
                    jar.display()
                ),
            ));
        }
        Ok(KafkaDist { dir, java: java() })
    }

    /// `$STRAND_KAFKA_DIR`, else `$STRAND_CACHE/kafka-VERSION` (where
    /// `scripts/fetch-kafka.sh` puts it); an error naming the script if its jars are
    /// not there.
    pub fn locate() -> io::Result<KafkaDist> {
        let dir = std::env::var_os("STRAND_KAFKA_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                crate::harness::strand_cache().join(format!("kafka-{}", Self::version()))
            });
        let broker_jar = dir
            .join("libs")
            .join(format!("kafka_2.13-{}.jar", Self::version()));
        if !broker_jar.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} is missing: run compat-tests/scripts/fetch-kafka.sh (or set STRAND_KAFKA_DIR)",
                    broker_jar.display()
                ),
            ));
        }
        Ok(KafkaDist { dir, java: java() })
    }

    /// `java -cp libs/* MAIN` with the harness's logging configuration (everything to
    /// stdout, which goes to the node's log) and a bounded heap.
    pub fn java_command(&self, program: Command, main: &str) -> Command {
        let mut cmd = program;
        cmd.arg("-Xms128m")
            .arg("-Xmx1g")
            .arg("-Djava.awt.headless=true")
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("reference-kafka/log4j2.properties")
                    .display()
            ))
            .arg("-cp")
            .arg(format!("{}/libs/*", self.dir.display()))
            .arg(main);
        cmd
    }
}

/// A running cluster of `strand` (or reference Kafka) nodes. Dropping it SIGKILLs every
/// node process (by PID).
pub struct Cluster {
    server: Server,
    dir: PathBuf,
    tmp: Option<tempfile::TempDir>,
    cluster_id: String,
    voters: String,
    overrides: Vec<(String, String)>,
    env: Vec<(String, String)>,
    start_timeout: Duration,
    parent_death_signal: Option<i32>,
    extra_listener: Option<String>,
    tcp_readiness: bool,
    format_args: Vec<String>,
    extra_log_dirs: usize,
    nodes: Vec<Node>,
    correlation: i32,
}

impl Cluster {
    /// Format and start every node of `spec` with the `strand` binary `bin`, then wait
    /// (up to the start timeout) until the cluster is ready (see [`Cluster::wait_ready`]).
    pub fn start(bin: &Path, spec: ClusterSpec) -> io::Result<Cluster> {
        Self::start_server(Server::Strand(resolve_bin(bin)?), spec)
    }

    /// [`Cluster::start`] with either server: Strand, or the reference Kafka.
    pub fn start_server(server: Server, spec: ClusterSpec) -> io::Result<Cluster> {
        let roles = roles_of(spec.layout)?;
        let (tmp, dir) = match &spec.dir {
            Some(d) => {
                std::fs::create_dir_all(d)?;
                (None, d.canonicalize()?)
            }
            None => {
                let t = tempfile::Builder::new()
                    .prefix("strand-cluster-")
                    .tempdir()?;
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        for (i, _) in roles.iter().enumerate() {
            let nd = dir.join(format!("node{}", i + 1));
            if nd.exists() && std::fs::read_dir(&nd)?.next().is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{} is not empty; use a fresh cluster directory",
                        nd.display()
                    ),
                ));
            }
        }
        if !spec.hosts.is_empty() && spec.hosts.len() != roles.len() {
            return Err(io::Error::other(format!(
                "{} hosts for {} nodes",
                spec.hosts.len(),
                roles.len()
            )));
        }
        // All ports up front, held open together so that none is handed out twice.
        if spec.extra_listener.is_some() && !spec.hosts.is_empty() {
            return Err(io::Error::other(
                "an extra listener is only supported on loopback",
            ));
        }
        let extra = spec.extra_listener.is_some() as usize;
        let http = spec.http_listener as usize;
        if http == 1 && !spec.hosts.is_empty() {
            return Err(io::Error::other(
                "the HTTP listener is only supported on loopback",
            ));
        }
        let wanted: usize = if spec.hosts.is_empty() {
            roles
                .iter()
                .map(|r| r.is_broker() as usize * (1 + extra) + r.is_controller() as usize + http)
                .sum()
        } else {
            0
        };
        let mut ports = free_loopback_ports(wanted)?.into_iter();
        let mut nodes = Vec::with_capacity(roles.len());
        for (i, role) in roles.iter().enumerate() {
            let host = spec.hosts.get(i);
            // `wanted` counted one port per broker and per controller on loopback.
            let mut port = |fixed: u16| {
                if host.is_some() {
                    fixed
                } else {
                    ports.next().expect("a port was reserved for each role")
                }
            };
            let broker_port = role.is_broker().then(|| port(HOST_BROKER_PORT));
            let controller_port = role.is_controller().then(|| port(HOST_CONTROLLER_PORT));
            let extra_port = (role.is_broker() && extra == 1).then(|| port(0));
            let http_port = (http == 1).then(|| port(0));
            nodes.push(Node {
                id: i as i32 + 1,
                role: *role,
                host: host.map_or_else(|| "127.0.0.1".to_string(), |h| h.ip.clone()),
                netns: host.map(|h| h.netns.clone()),
                broker_port,
                controller_port,
                extra_port,
                http_port,
                child: None,
                pid: 0,
                state: NodeState::Down,
                exited: None,
            });
        }
        let voters = nodes
            .iter()
            .filter_map(|n| n.controller_addr().map(|a| format!("{}@{a}", n.id)))
            .collect::<Vec<_>>()
            .join(",");
        let start_timeout = spec.start_timeout.unwrap_or_else(|| {
            std::env::var("STRAND_CLUSTER_START_TIMEOUT_SECS")
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .map(Duration::from_secs)
                .unwrap_or(DEFAULT_CLUSTER_START_TIMEOUT)
        });
        let mut cluster = Cluster {
            server,
            dir,
            tmp,
            cluster_id: generate_cluster_id()?,
            voters,
            overrides: spec.overrides,
            env: spec.env,
            start_timeout,
            parent_death_signal: spec.parent_death_signal,
            extra_listener: spec.extra_listener,
            tcp_readiness: spec.tcp_readiness,
            format_args: spec.format_args,
            extra_log_dirs: spec.extra_log_dirs,
            nodes,
            correlation: 0,
        };
        for id in cluster.node_ids() {
            cluster.write_properties(id)?;
            cluster.format(id)?;
        }
        for id in cluster.node_ids() {
            cluster.spawn(id)?;
        }
        cluster.wait_ready(cluster.start_timeout)?;
        Ok(cluster)
    }

    /// Every node id, ascending.
    pub fn node_ids(&self) -> Vec<i32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    /// Ids of the nodes with the broker role.
    pub fn broker_ids(&self) -> Vec<i32> {
        self.nodes
            .iter()
            .filter(|n| n.role.is_broker())
            .map(|n| n.id)
            .collect()
    }

    /// Ids of the nodes with the controller role.
    pub fn controller_ids(&self) -> Vec<i32> {
        self.nodes
            .iter()
            .filter(|n| n.role.is_controller())
            .map(|n| n.id)
            .collect()
    }

    pub fn role(&self, id: i32) -> Option<Role> {
        self.node(id).ok().map(|n| n.role)
    }

    /// `host:port,host:port,...` of every broker (whatever its state).
    pub fn bootstrap(&self) -> String {
        self.nodes
            .iter()
            .filter_map(|n| n.broker_addr())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `127.0.0.1:PORT` of the node's PLAINTEXT listener (`None` for controller-only
    /// nodes and unknown ids).
    pub fn broker_addr(&self, id: i32) -> Option<String> {
        self.node(id).ok().and_then(|n| n.broker_addr())
    }

    /// `127.0.0.1:PORT` of the node's CONTROLLER listener (`None` for broker-only nodes).
    /// `127.0.0.1:PORT` of the node's extra listener
    /// ([`ClusterSpec::with_extra_listener`]).
    pub fn extra_listener_addr(&self, id: i32) -> Option<String> {
        let n = self.nodes.iter().find(|n| n.id == id)?;
        n.extra_port.map(|p| format!("{}:{p}", n.host))
    }

    /// `127.0.0.1:PORT` of the node's `strand.http.listener`
    /// ([`ClusterSpec::with_http_listener`]).
    pub fn http_addr(&self, id: i32) -> Option<String> {
        let n = self.nodes.iter().find(|n| n.id == id)?;
        n.http_port.map(|p| format!("{}:{p}", n.host))
    }

    pub fn controller_addr(&self, id: i32) -> Option<String> {
        self.node(id).ok().and_then(|n| n.controller_addr())
    }

    /// `controller.quorum.voters` of this cluster.
    pub fn quorum_voters(&self) -> &str {
        &self.voters
    }

    pub fn cluster_id(&self) -> &str {
        &self.cluster_id
    }

    /// The cluster directory (see the module docs for its layout).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `log.dirs` of node `id`.
    pub fn data_dir(&self, id: i32) -> PathBuf {
        self.dir.join(format!("node{id}"))
    }

    /// Every log directory of node `id` (`log.dirs`), the first being
    /// [`Cluster::data_dir`].
    pub fn log_dirs(&self, id: i32) -> Vec<PathBuf> {
        let mut dirs = vec![self.data_dir(id)];
        dirs.extend(
            (2..2 + self.extra_log_dirs).map(|k| self.dir.join(format!("node{id}-dir{k}"))),
        );
        dirs
    }

    fn log_dirs_value(&self, id: i32) -> String {
        let dirs: Vec<String> = self
            .log_dirs(id)
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        dirs.join(",")
    }

    pub fn properties_path(&self, id: i32) -> PathBuf {
        self.dir.join(format!("node{id}.properties"))
    }

    /// Process log of node `id` (format output and every start, appended).
    pub fn log_path(&self, id: i32) -> PathBuf {
        self.dir.join(format!("node{id}.log"))
    }

    /// The last [`LOG_TAIL_LINES`] lines of node `id`'s log.
    pub fn log_tail(&self, id: i32) -> String {
        tail_file(&self.log_path(id), LOG_TAIL_LINES)
    }

    /// PID of the node's process while it runs or is stopped; `None` when it is down.
    pub fn pid(&mut self, id: i32) -> Option<u32> {
        let n = self.node_mut(id).ok()?;
        n.refresh();
        (n.state != NodeState::Down).then_some(n.pid)
    }

    /// Current state (reaps the process if it exited by itself).
    pub fn state(&mut self, id: i32) -> io::Result<NodeState> {
        let n = self.node_mut(id)?;
        n.refresh();
        Ok(n.state)
    }

    /// How node `id`'s last process ended, once it has (reaped by `state`).
    pub fn exit_status(&mut self, id: i32) -> io::Result<Option<ExitStatus>> {
        let n = self.node_mut(id)?;
        n.refresh();
        Ok(n.exited)
    }

    /// `node ID pid PID broker HOST:PORT`, with ` stopped` appended for a SIGSTOPped node,
    /// and `node ID pid - broker HOST:PORT down` for a node that is not running.
    /// Controller-only nodes show `controller HOST:CONTROLLER_PORT` instead.
    pub fn status_line(&mut self, id: i32) -> io::Result<String> {
        Ok(self.node_mut(id)?.status_line())
    }

    /// SIGKILL node `id` (running or stopped) by PID and reap it.
    pub fn kill9(&mut self, id: i32) -> io::Result<ExitStatus> {
        let n = self.node_mut(id)?;
        let mut child = take_live_child(n)?;
        signal(n.pid, libc::SIGKILL)?;
        n.state = NodeState::Down;
        child.wait()
    }

    /// SIGSTOP node `id` (it must be running).
    pub fn stop(&mut self, id: i32) -> io::Result<()> {
        let n = self.node_mut(id)?;
        n.refresh();
        if n.state != NodeState::Running {
            return Err(io::Error::other(format!("node {id} is not running")));
        }
        signal(n.pid, libc::SIGSTOP)?;
        n.state = NodeState::Stopped;
        wait_all_threads_stopped(n.pid)
    }

    /// SIGCONT node `id` (it must have been stopped with [`Cluster::stop`]).
    pub fn cont(&mut self, id: i32) -> io::Result<()> {
        let n = self.node_mut(id)?;
        n.refresh();
        if n.state != NodeState::Stopped {
            return Err(io::Error::other(format!("node {id} is not stopped")));
        }
        signal(n.pid, libc::SIGCONT)?;
        n.state = NodeState::Running;
        Ok(())
    }

    /// SIGTERM node `id` (SIGCONT first if stopped) and wait up to
    /// [`DEFAULT_TERM_TIMEOUT`] for it to exit; if it does not, SIGKILL it and return an
    /// error (a clean shutdown is expected).
    pub fn terminate(&mut self, id: i32) -> io::Result<ExitStatus> {
        self.terminate_timeout(id, DEFAULT_TERM_TIMEOUT)
    }

    pub fn terminate_timeout(&mut self, id: i32, timeout: Duration) -> io::Result<ExitStatus> {
        let n = self.node_mut(id)?;
        let child = take_live_child(n)?;
        let stopped = n.state == NodeState::Stopped;
        n.state = NodeState::Down;
        let pid = n.pid;
        let mut pending = vec![(id, pid, child, stopped)];
        match term_and_wait(&mut pending, timeout).pop() {
            Some((_, Ok(st))) => Ok(st),
            Some((_, Err(e))) => Err(e),
            None => Err(io::Error::other("internal: no exit status")),
        }
    }

    /// Start node `id` again with the same ports, properties and data (a running or
    /// stopped node is first terminated with SIGTERM), then wait until the cluster is
    /// ready. Not formatted again.
    /// Starts every node that is down (killed, or exited by itself) at once,
    /// then waits for the cluster to be ready: after a kill of every node,
    /// restarting them one at a time would wait for a quorum that the next
    /// start brings.
    pub fn restart_down(&mut self) -> io::Result<Vec<i32>> {
        let mut started = Vec::new();
        for id in self.node_ids() {
            let n = self.node_mut(id)?;
            n.refresh();
            if n.state == NodeState::Down {
                self.spawn(id)?;
                started.push(id);
            }
        }
        if !started.is_empty() {
            self.wait_ready(self.start_timeout)?;
        }
        Ok(started)
    }

    pub fn restart(&mut self, id: i32) -> io::Result<()> {
        let n = self.node_mut(id)?;
        n.refresh();
        if n.state != NodeState::Down {
            self.terminate(id)?;
        }
        self.spawn(id)?;
        self.wait_ready(self.start_timeout)
    }

    /// Start node `id` again (see [`Cluster::restart`]) without waiting for readiness.
    pub fn respawn(&mut self, id: i32) -> io::Result<()> {
        let n = self.node_mut(id)?;
        n.refresh();
        if n.state != NodeState::Down {
            self.terminate(id)?;
        }
        self.spawn(id)
    }

    /// Cleanly stop every node: SIGCONT the stopped ones, SIGTERM all broker-only nodes
    /// and wait, then SIGTERM all remaining nodes at once and wait. Nodes still running
    /// after [`DEFAULT_TERM_TIMEOUT`] are SIGKILLed and reported in the error.
    pub fn shutdown(&mut self) -> io::Result<()> {
        self.shutdown_timeout(DEFAULT_TERM_TIMEOUT)
    }

    pub fn shutdown_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        let mut errors = Vec::new();
        for brokers_only in [true, false] {
            let mut pending = Vec::new();
            for n in self.nodes.iter_mut() {
                if brokers_only && n.role != Role::Broker {
                    continue;
                }
                n.refresh();
                if let Some(child) = n.child.take() {
                    pending.push((n.id, n.pid, child, n.state == NodeState::Stopped));
                    n.state = NodeState::Down;
                }
            }
            for (id, r) in term_and_wait(&mut pending, timeout) {
                if let Err(e) = r {
                    errors.push(format!("node {id}: {e}"));
                }
            }
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(io::Error::other(errors.join("; ")))
        }
    }

    /// Poll (every 100 ms, up to `timeout`) until the cluster is ready:
    ///
    /// * every running controller-only node accepts TCP connections on its CONTROLLER port;
    /// * every running broker answers ApiVersions, and its DescribeCluster answer lists
    ///   every running broker, unfenced, at the address the harness gave it.
    ///
    /// "Running" excludes nodes that are down (killed/terminated) or SIGSTOPped; whether
    /// those are listed does not matter. A node expected to run that exits fails the wait
    /// at once, with its log tail.
    pub fn wait_ready(&mut self, timeout: Duration) -> io::Result<()> {
        let deadline = Instant::now() + timeout;
        let mut attempts = 0u32;
        loop {
            for n in self.nodes.iter_mut() {
                let was = n.state;
                if let Some(st) = n.refresh() {
                    if was != NodeState::Down {
                        let id = n.id;
                        return Err(io::Error::other(format!(
                            "node {id} exited ({st}) while waiting for the cluster; log tail of {}:\n{}",
                            self.log_path(id).display(),
                            self.log_tail(id)
                        )));
                    }
                }
            }
            attempts += 1;
            let problems = self.readiness_problems();
            if problems.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let mut msg = format!(
                    "cluster not ready after {timeout:?} ({attempts} polls):\n  {}",
                    problems
                        .iter()
                        .map(|(_, p)| p.as_str())
                        .collect::<Vec<_>>()
                        .join("\n  ")
                );
                let mut ids: Vec<i32> = problems.iter().map(|(id, _)| *id).collect();
                ids.sort_unstable();
                ids.dedup();
                for id in ids {
                    msg.push_str(&format!(
                        "\nlog tail of node {id} ({}):\n{}",
                        self.log_path(id).display(),
                        tail_file(&self.log_path(id), 15)
                    ));
                }
                return Err(io::Error::new(io::ErrorKind::TimedOut, msg));
            }
            std::thread::sleep(POLL_INTERVAL);
        }
    }

    /// One readiness poll: `(node id, problem)` for everything not ready yet.
    pub fn readiness_problems(&mut self) -> Vec<(i32, String)> {
        let mut problems = Vec::new();
        let live_brokers: Vec<(i32, String)> = self
            .nodes
            .iter()
            .filter(|n| n.state == NodeState::Running)
            .filter_map(|n| n.broker_addr().map(|a| (n.id, a)))
            .collect();
        let live_controllers: Vec<(i32, String)> = self
            .nodes
            .iter()
            .filter(|n| n.state == NodeState::Running && n.role == Role::Controller)
            .filter_map(|n| n.controller_addr().map(|a| (n.id, a)))
            .collect();
        for (id, addr) in &live_controllers {
            let sa: SocketAddr = addr.parse().expect("loopback address");
            if let Err(e) = TcpStream::connect_timeout(&sa, PROBE_TIMEOUT) {
                problems.push((*id, format!("controller {id} ({addr}): {e}")));
            }
        }
        for (id, addr) in &live_brokers {
            self.correlation = self.correlation.wrapping_add(2);
            let sa: SocketAddr = addr.parse().expect("loopback address");
            if self.tcp_readiness {
                if let Err(e) = TcpStream::connect_timeout(&sa, PROBE_TIMEOUT) {
                    problems.push((*id, format!("broker {id} ({addr}): {e}")));
                }
                continue;
            }
            match describe_cluster(sa, self.correlation, PROBE_TIMEOUT) {
                Err(e) => problems.push((*id, format!("broker {id} ({addr}): {e}"))),
                Ok(view) => {
                    for p in view.problems(&live_brokers) {
                        problems.push((*id, format!("broker {id} ({addr}): {p}")));
                    }
                }
            }
        }
        problems
    }

    fn node(&self, id: i32) -> io::Result<&Node> {
        self.nodes
            .iter()
            .find(|n| n.id == id)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no node {id}")))
    }

    fn node_mut(&mut self, id: i32) -> io::Result<&mut Node> {
        self.nodes
            .iter_mut()
            .find(|n| n.id == id)
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("no node {id}")))
    }

    /// The generated properties of node `id`.
    pub fn properties(&self, id: i32) -> io::Result<String> {
        let n = self.node(id)?;
        let mut listeners = Vec::new();
        let mut advertised = Vec::new();
        if let Some(a) = n.broker_addr() {
            listeners.push(format!("PLAINTEXT://{a}"));
            advertised.push(format!("PLAINTEXT://{a}"));
        }
        if let (Some(name), Some(p)) = (&self.extra_listener, n.extra_port) {
            listeners.push(format!("{name}://{}:{p}", n.host));
            advertised.push(format!("{name}://{}:{p}", n.host));
        }
        if let Some(a) = n.controller_addr() {
            listeners.push(format!("CONTROLLER://{a}"));
        }
        let mut text = format!(
            "# written by strand-compat-tests cluster harness\n\
             node.id={}\n\
             process.roles={}\n\
             listeners={}\n",
            n.id,
            n.role.process_roles(),
            listeners.join(",")
        );
        if !advertised.is_empty() {
            text.push_str(&format!("advertised.listeners={}\n", advertised.join(",")));
        }
        if let Some(p) = n.http_port {
            text.push_str(&format!("strand.http.listener={}:{p}\n", n.host));
        }
        text.push_str(&format!(
            "controller.listener.names=CONTROLLER\n\
             controller.quorum.voters={}\n\
             log.dirs={}\n",
            self.voters,
            self.log_dirs_value(id)
        ));
        if let Server::Kafka(_) = self.server {
            // Kafka refuses to start (or to create its internal topics) with
            // these at their defaults on fewer than three brokers; its
            // quickstart sets them the same way.
            let brokers = self.nodes.iter().filter(|n| n.role.is_broker()).count();
            // An extra listener named after its protocol maps to it.
            let extra = match self.extra_listener.as_deref() {
                Some(p @ ("SSL" | "SASL_PLAINTEXT" | "SASL_SSL")) => format!(",{p}:{p}"),
                _ => String::new(),
            };
            text.push_str(&format!(
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT{extra}\n\
                 offsets.topic.replication.factor={}\n\
                 transaction.state.log.replication.factor={}\n\
                 transaction.state.log.min.isr={}\n",
                brokers.min(3),
                brokers.min(3),
                brokers.min(2)
            ));
        }
        Ok(text)
    }

    /// The server the nodes run.
    pub fn server(&self) -> &Server {
        &self.server
    }

    /// The command that runs `main` of the server (`strand`, or Kafka's `java` with its
    /// class path), under `ip netns exec` for a node on a host of its own.
    fn server_command(&self, netns: Option<&str>, kafka_main: &str) -> Command {
        let program = |p: &Path| match netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(p);
                c
            }
            None => Command::new(p),
        };
        match &self.server {
            Server::Strand(bin) => program(bin),
            Server::Kafka(dist) => dist.java_command(program(&dist.java), kafka_main),
        }
    }

    fn program_name(&self) -> String {
        match &self.server {
            Server::Strand(bin) => bin.display().to_string(),
            Server::Kafka(dist) => dist.java.display().to_string(),
        }
    }

    fn write_properties(&self, id: i32) -> io::Result<()> {
        std::fs::create_dir_all(self.data_dir(id))?;
        std::fs::write(self.properties_path(id), self.properties(id)?)
    }

    fn open_log(&self, id: i32) -> io::Result<std::fs::File> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(id))
    }

    /// `strand format [--override K=V (the spec's)]... --cluster-id ID --node-id N
    /// --initial-controllers VOTERS --override log.dirs=DIR nodeN.properties` (Kafka: `StorageTool format -t ID -c
    /// nodeN.properties`, the quorum being the properties' static
    /// `controller.quorum.voters`), bounded by [`FORMAT_TIMEOUT`].
    fn format(&self, id: i32) -> io::Result<()> {
        let mut log = self.open_log(id)?;
        let mut cmd = self.server_command(None, "kafka.tools.StorageTool");
        match self.server {
            // The overrides too: the configuration is checked whole (a
            // listener's protocol may come from them).
            Server::Strand(_) => cmd
                .arg("format")
                .args(
                    self.overrides
                        .iter()
                        .flat_map(|(k, v)| ["--override".to_string(), format!("{k}={v}")]),
                )
                .arg("--cluster-id")
                .arg(&self.cluster_id)
                .arg("--node-id")
                .arg(id.to_string())
                .arg("--initial-controllers")
                .arg(&self.voters)
                .arg("--override")
                .arg(format!("log.dirs={}", self.log_dirs_value(id)))
                .args(&self.format_args)
                .arg(self.properties_path(id)),
            Server::Kafka(_) => cmd
                .arg("format")
                .arg("-t")
                .arg(&self.cluster_id)
                .arg("-c")
                .arg(self.properties_path(id)),
        };
        writeln!(log, "==== strand-cluster: {cmd:?} ====")?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .current_dir(&self.dir);
        let mut child = cmd.spawn().map_err(|e| {
            io::Error::new(e.kind(), format!("spawning {}: {e}", self.program_name()))
        })?;
        let deadline = Instant::now() + FORMAT_TIMEOUT;
        let st = loop {
            if let Some(st) = child.try_wait()? {
                break st;
            }
            if Instant::now() >= deadline {
                let _ = signal(child.id(), libc::SIGKILL);
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("format of node {id} did not finish in {FORMAT_TIMEOUT:?}"),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        if !st.success() {
            return Err(io::Error::other(format!(
                "format of node {id} failed ({st}); log tail:\n{}",
                self.log_tail(id)
            )));
        }
        Ok(())
    }

    /// `strand nodeN.properties --override k=v ...` (Kafka: `java ... kafka.Kafka
    /// nodeN.properties --override k=v ...`), without waiting.
    fn spawn(&mut self, id: i32) -> io::Result<()> {
        let mut log = self.open_log(id)?;
        let netns = self.node(id)?.netns.clone();
        let mut cmd = self.server_command(netns.as_deref(), "kafka.Kafka");
        cmd.arg(self.properties_path(id));
        for (k, v) in &self.overrides {
            cmd.arg("--override").arg(format!("{k}={v}"));
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        writeln!(log, "==== strand-cluster: starting node {id}: {cmd:?} ====")?;
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .current_dir(&self.dir);
        #[cfg(target_os = "linux")]
        if let Some(sig) = self.parent_death_signal {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong) != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = cmd.spawn().map_err(|e| {
            io::Error::new(e.kind(), format!("spawning {}: {e}", self.program_name()))
        })?;
        let n = self.node_mut(id)?;
        n.pid = child.id();
        n.child = Some(child);
        n.state = NodeState::Running;
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in self.nodes.iter_mut() {
            crate::harness::kill_and_reap(n.child.take(), n.pid);
        }
        crate::harness::keep_dir_if_asked(self.tmp.take(), "cluster dir");
    }
}

fn take_live_child(n: &mut Node) -> io::Result<Child> {
    n.refresh();
    if n.state == NodeState::Down {
        return Err(io::Error::other(format!("node {} is not running", n.id)));
    }
    n.child
        .take()
        .ok_or_else(|| io::Error::other(format!("node {} is not running", n.id)))
}

/// SIGTERM (after SIGCONT for stopped ones) every process of `pending` at once and wait
/// for all of them up to `timeout`; the stragglers are SIGKILLed and reported as errors.
fn term_and_wait(
    pending: &mut Vec<(i32, u32, Child, bool)>,
    timeout: Duration,
) -> Vec<(i32, io::Result<ExitStatus>)> {
    let mut out = Vec::new();
    let mut waiting = Vec::new();
    for (id, pid, mut child, stopped) in pending.drain(..) {
        if let Ok(Some(st)) = child.try_wait() {
            out.push((id, Ok(st)));
            continue;
        }
        let r = if stopped {
            signal(pid, libc::SIGCONT)
        } else {
            Ok(())
        }
        .and_then(|_| signal(pid, libc::SIGTERM));
        if let Err(e) = r {
            let _ = signal(pid, libc::SIGKILL);
            let _ = child.wait();
            out.push((id, Err(e)));
            continue;
        }
        waiting.push((id, pid, child));
    }
    let deadline = Instant::now() + timeout;
    while !waiting.is_empty() {
        let mut i = 0;
        while i < waiting.len() {
            match waiting[i].2.try_wait() {
                Ok(Some(st)) => {
                    let (id, _, _) = waiting.swap_remove(i);
                    out.push((id, Ok(st)));
                }
                Ok(None) => i += 1,
                Err(e) => {
                    let (id, _, _) = waiting.swap_remove(i);
                    out.push((id, Err(e)));
                }
            }
        }
        if waiting.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            for (id, pid, mut child) in waiting.drain(..) {
                let _ = signal(pid, libc::SIGKILL);
                let _ = child.wait();
                out.push((
                    id,
                    Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("pid {pid} did not exit within {timeout:?} of SIGTERM; killed it"),
                    )),
                ));
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    out
}

fn roles_of(layout: Layout) -> io::Result<Vec<Role>> {
    let bad = |m: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, m.to_string()));
    match layout {
        Layout::Combined(0) => bad("a cluster needs at least one node"),
        Layout::Combined(n) => Ok(vec![Role::Combined; n]),
        Layout::Split { controllers: 0, .. } => bad("a cluster needs at least one controller"),
        Layout::Split { brokers: 0, .. } => bad("a cluster needs at least one broker"),
        Layout::Split {
            controllers,
            brokers,
        } => {
            let mut v = vec![Role::Controller; controllers];
            v.extend(std::iter::repeat_n(Role::Broker, brokers));
            Ok(v)
        }
    }
}

fn resolve_bin(bin: &Path) -> io::Result<PathBuf> {
    let bin = if bin.components().count() > 1 && bin.is_relative() {
        std::env::current_dir()?.join(bin)
    } else {
        bin.to_path_buf()
    };
    if bin.components().count() > 1 && !bin.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("strand binary {} does not exist", bin.display()),
        ));
    }
    Ok(bin)
}

/// `n` distinct free loopback ports, none handed out before by this
/// process and none the kernel gives to connections
/// ([`crate::harness::free_loopback_port`]).
pub fn free_loopback_ports(n: usize) -> io::Result<Vec<u16>> {
    (0..n)
        .map(|_| crate::harness::free_loopback_port())
        .collect()
}

/// A fresh cluster id like Kafka's `Uuid.randomUuid()`: 16 random bytes, URL-safe
/// base64 without padding (22 characters), never starting with `-`.
pub fn generate_cluster_id() -> io::Result<String> {
    let mut f = std::fs::File::open("/dev/urandom")?;
    loop {
        let mut b = [0u8; 16];
        f.read_exact(&mut b)?;
        if b.iter().all(|&x| x == 0) {
            continue;
        }
        let s = base64url_nopad(&b);
        if !s.starts_with('-') {
            return Ok(s);
        }
    }
}

fn base64url_nopad(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        let chars = chunk.len() + 1;
        for i in 0..chars {
            out.push(A[((v >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

// ---------------------------------------------------------------------------------
// Wire: ApiVersions v0 and DescribeCluster v0-v2, via kafka-protocol.

/// One broker as listed by DescribeCluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListedBroker {
    pub id: i32,
    pub host: String,
    pub port: i32,
    /// Only reported by DescribeCluster v2+; `false` for older versions, which (in
    /// Kafka) list unfenced brokers only.
    pub fenced: bool,
}

/// A decoded DescribeCluster answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterView {
    /// The DescribeCluster version used.
    pub version: i16,
    pub cluster_id: String,
    pub controller_id: i32,
    pub brokers: Vec<ListedBroker>,
}

impl ClusterView {
    /// What keeps `expected` (`(broker id, host:port)`) from being ready in this view:
    /// missing brokers, fenced brokers, brokers listed at another address.
    pub fn problems(&self, expected: &[(i32, String)]) -> Vec<String> {
        let mut out = Vec::new();
        for (id, addr) in expected {
            match self.brokers.iter().find(|b| b.id == *id) {
                None => out.push(format!("does not list broker {id} yet")),
                Some(b) if b.fenced => out.push(format!("lists broker {id} as fenced")),
                Some(b) if format!("{}:{}", b.host, b.port) != *addr => out.push(format!(
                    "lists broker {id} at {}:{}, expected {addr}",
                    b.host, b.port
                )),
                Some(_) => {}
            }
        }
        out
    }
}

fn invalid(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Size-prefixed DescribeCluster request of `version` (0-2): request header v2, client
/// id `strand-cluster`; v1+ asks for brokers (`endpoint_type=1`), v2 asks to include
/// fenced brokers (so that `is_fenced` is meaningful).
pub fn encode_describe_cluster(correlation_id: i32, version: i16) -> io::Result<Vec<u8>> {
    if !(0..=DESCRIBE_CLUSTER_MAX).contains(&version) {
        return Err(invalid(format!("DescribeCluster v{version} not supported")));
    }
    let header = RequestHeader::default()
        .with_request_api_key(DESCRIBE_CLUSTER_KEY)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(CLIENT_ID.to_string())));
    let mut req =
        DescribeClusterRequest::default().with_include_cluster_authorized_operations(false);
    if version >= 1 {
        req = req.with_endpoint_type(1);
    }
    if version >= 2 {
        req = req.with_include_fenced_brokers(true);
    }
    let mut body = Vec::new();
    header
        .encode(&mut body, DescribeClusterRequest::header_version(version))
        .map_err(|e| invalid(format!("encoding request header: {e}")))?;
    req.encode(&mut body, version)
        .map_err(|e| invalid(format!("encoding DescribeCluster: {e}")))?;
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// Decode a DescribeCluster response frame (without its size prefix): response header
/// v1, then the body of `version`. Checks the correlation id and the error code.
pub fn decode_describe_cluster(
    frame: &[u8],
    version: i16,
    correlation_id: i32,
) -> io::Result<ClusterView> {
    let mut buf = frame;
    let header = ResponseHeader::decode(&mut buf, DescribeClusterResponse::header_version(version))
        .map_err(|e| invalid(format!("decoding DescribeCluster response header: {e}")))?;
    if header.correlation_id != correlation_id {
        return Err(invalid(format!(
            "DescribeCluster response correlation id {}, expected {correlation_id}",
            header.correlation_id
        )));
    }
    let resp = DescribeClusterResponse::decode(&mut buf, version)
        .map_err(|e| invalid(format!("decoding DescribeCluster v{version} response: {e}")))?;
    if resp.error_code != 0 {
        return Err(invalid(format!(
            "DescribeCluster error code {}{}",
            resp.error_code,
            resp.error_message
                .as_ref()
                .map(|m| format!(": {}", m.as_str()))
                .unwrap_or_default()
        )));
    }
    Ok(ClusterView {
        version,
        cluster_id: resp.cluster_id.as_str().to_string(),
        controller_id: resp.controller_id.0,
        brokers: resp
            .brokers
            .iter()
            .map(|b| ListedBroker {
                id: b.broker_id.0,
                host: b.host.as_str().to_string(),
                port: b.port,
                fenced: b.is_fenced,
            })
            .collect(),
    })
}

/// Decode an ApiVersions v0 response frame (without its size prefix) into
/// `(api_key, min, max)` entries.
pub fn decode_api_versions_v0(
    frame: &[u8],
    correlation_id: i32,
) -> io::Result<Vec<(i16, i16, i16)>> {
    let mut buf = frame;
    let header = ResponseHeader::decode(&mut buf, 0)
        .map_err(|e| invalid(format!("decoding ApiVersions response header: {e}")))?;
    if header.correlation_id != correlation_id {
        return Err(invalid(format!(
            "ApiVersions response correlation id {}, expected {correlation_id}",
            header.correlation_id
        )));
    }
    let resp = ApiVersionsResponse::decode(&mut buf, 0)
        .map_err(|e| invalid(format!("decoding ApiVersions v0 response: {e}")))?;
    if resp.error_code != 0 {
        return Err(invalid(format!(
            "ApiVersions error code {}",
            resp.error_code
        )));
    }
    Ok(resp
        .api_keys
        .iter()
        .map(|k| (k.api_key, k.min_version, k.max_version))
        .collect())
}

/// The DescribeCluster version to use given a broker's ApiVersions: the highest both
/// sides speak (`None` if the broker does not serve DescribeCluster).
pub fn pick_describe_cluster_version(apis: &[(i16, i16, i16)]) -> Option<i16> {
    let (_, lo, hi) = apis.iter().find(|(k, _, _)| *k == DESCRIBE_CLUSTER_KEY)?;
    let v = (*hi).min(DESCRIBE_CLUSTER_MAX);
    (v >= *lo && v >= 0).then_some(v)
}

fn read_frame(s: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = i32::from_be_bytes(len);
    if !(4..=1 << 24).contains(&len) {
        return Err(invalid(format!("response has implausible size {len}")));
    }
    let mut frame = vec![0u8; len as usize];
    s.read_exact(&mut frame)?;
    Ok(frame)
}

/// Connect to `addr`, send ApiVersions v0 (correlation id `correlation_id`), then
/// DescribeCluster at the highest common version (correlation id `correlation_id + 1`)
/// on the same connection.
pub fn describe_cluster(
    addr: SocketAddr,
    correlation_id: i32,
    timeout: Duration,
) -> io::Result<ClusterView> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    s.write_all(&encode_api_versions_v0(correlation_id, CLIENT_ID))?;
    let apis = decode_api_versions_v0(&read_frame(&mut s)?, correlation_id)?;
    let version = pick_describe_cluster_version(&apis).ok_or_else(|| {
        invalid(format!(
            "broker does not advertise DescribeCluster v0-v{DESCRIBE_CLUSTER_MAX}"
        ))
    })?;
    let corr = correlation_id.wrapping_add(1);
    s.write_all(&encode_describe_cluster(corr, version)?)?;
    decode_describe_cluster(&read_frame(&mut s)?, version, corr)
}

/// The active controller (the leader of `__cluster_metadata`) as the node
/// at `addr` reports it in DescribeQuorum v0: the node a fault on "the
/// controller" must hit. DescribeCluster names the node asked, as KRaft
/// brokers do, so it cannot tell.
pub fn active_controller(addr: SocketAddr, timeout: Duration) -> io::Result<i32> {
    const DESCRIBE_QUORUM_KEY: i16 = 55;
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let header = RequestHeader::default()
        .with_request_api_key(DESCRIBE_QUORUM_KEY)
        .with_request_api_version(0)
        .with_correlation_id(7)
        .with_client_id(Some(StrBytes::from_string(CLIENT_ID.to_string())));
    let req = DescribeQuorumRequest::default().with_topics(vec![TopicData::default()
        .with_topic_name(TopicName(StrBytes::from_static_str("__cluster_metadata")))
        .with_partitions(vec![PartitionData::default().with_partition_index(0)])]);
    let mut body = Vec::new();
    header
        .encode(&mut body, DescribeQuorumRequest::header_version(0))
        .map_err(|e| invalid(format!("encoding request header: {e}")))?;
    req.encode(&mut body, 0)
        .map_err(|e| invalid(format!("encoding DescribeQuorum: {e}")))?;
    let mut out = (body.len() as i32).to_be_bytes().to_vec();
    out.extend_from_slice(&body);
    s.write_all(&out)?;
    let frame = read_frame(&mut s)?;
    let mut buf = frame.as_slice();
    let header = ResponseHeader::decode(&mut buf, DescribeQuorumResponse::header_version(0))
        .map_err(|e| invalid(format!("decoding DescribeQuorum response header: {e}")))?;
    if header.correlation_id != 7 {
        return Err(invalid("DescribeQuorum response for another request"));
    }
    let resp = DescribeQuorumResponse::decode(&mut buf, 0)
        .map_err(|e| invalid(format!("decoding DescribeQuorum v0 response: {e}")))?;
    let p = resp
        .topics
        .first()
        .and_then(|t| t.partitions.first())
        .ok_or_else(|| invalid("DescribeQuorum answered no partition"))?;
    if resp.error_code != 0 || p.error_code != 0 || p.leader_id.0 < 0 {
        return Err(invalid(format!(
            "DescribeQuorum: error {}/{}, leader {}",
            resp.error_code, p.error_code, p.leader_id.0
        )));
    }
    Ok(p.leader_id.0)
}

/// Waits until every thread of `pid` is in the stopped state ('T' in
/// /proc/PID/task/*/stat): `kill` only queues a SIGSTOP, and a test that
/// relies on the node doing nothing more must not race its delivery.
fn wait_all_threads_stopped(pid: u32) -> io::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))?;
        let mut all = true;
        for t in tasks {
            let stat = std::fs::read_to_string(t?.path().join("stat")).unwrap_or_default();
            // The state follows the parenthesised command name, which may
            // itself hold spaces or parentheses.
            let state = stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next());
            if !matches!(state, Some('T') | Some('t') | None) {
                all = false;
                break;
            }
        }
        if all {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(io::Error::other(format!(
                "pid {pid} did not stop within 10s"
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn compact_str(out: &mut Vec<u8>, s: &str) {
        out.push(s.len() as u8 + 1);
        out.extend_from_slice(s.as_bytes());
    }

    /// A DescribeCluster response built byte by byte from the schema.
    fn hand_built_response(version: i16, corr: i32, brokers: &[(i32, &str, i32, bool)]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&corr.to_be_bytes());
        r.push(0); // response header v1 tagged fields
        r.extend_from_slice(&0i32.to_be_bytes()); // throttle_time_ms
        r.extend_from_slice(&0i16.to_be_bytes()); // error_code
        r.push(0); // error_message: null
        if version >= 1 {
            r.push(1); // endpoint_type = brokers
        }
        compact_str(&mut r, "MkU3OEVBNTcwNTJENDM2Qg");
        r.extend_from_slice(&2i32.to_be_bytes()); // controller_id
        r.push(brokers.len() as u8 + 1); // compact array
        for (id, host, port, fenced) in brokers {
            r.extend_from_slice(&id.to_be_bytes());
            compact_str(&mut r, host);
            r.extend_from_slice(&port.to_be_bytes());
            r.push(0); // rack: null
            if version >= 2 {
                r.push(*fenced as u8);
            }
            r.push(0); // tagged fields
        }
        r.extend_from_slice(&i32::MIN.to_be_bytes()); // cluster_authorized_operations
        r.push(0); // tagged fields
        r
    }

    #[test]
    fn describe_cluster_request_v1_bytes() {
        let b = encode_describe_cluster(9, 1).unwrap();
        let mut want = Vec::new();
        want.extend_from_slice(&60i16.to_be_bytes());
        want.extend_from_slice(&1i16.to_be_bytes());
        want.extend_from_slice(&9i32.to_be_bytes());
        want.extend_from_slice(&(CLIENT_ID.len() as i16).to_be_bytes()); // header v2 client id: int16 string
        want.extend_from_slice(CLIENT_ID.as_bytes());
        want.push(0); // header tagged fields
        want.push(0); // include_cluster_authorized_operations
        want.push(1); // endpoint_type
        want.push(0); // body tagged fields
        assert_eq!(&b[..4], &(want.len() as i32).to_be_bytes());
        assert_eq!(&b[4..], &want[..]);
    }

    #[test]
    fn describe_cluster_request_v0_and_v2_bytes() {
        let v0 = encode_describe_cluster(1, 0).unwrap();
        // header (2+2+4+2+14+1) + include_auth + tags
        assert_eq!(v0.len(), 4 + 25 + 2);
        assert_eq!(&v0[v0.len() - 2..], &[0, 0]);
        let v2 = encode_describe_cluster(1, 2).unwrap();
        // ... + endpoint_type + include_fenced_brokers
        assert_eq!(&v2[v2.len() - 4..], &[0, 1, 1, 0]);
        assert!(encode_describe_cluster(1, 3).is_err());
    }

    #[test]
    fn describe_cluster_response_v2_decodes() {
        let frame = hand_built_response(
            2,
            77,
            &[(1, "127.0.0.1", 9001, false), (2, "127.0.0.1", 9002, true)],
        );
        let v = decode_describe_cluster(&frame, 2, 77).unwrap();
        assert_eq!(v.cluster_id, "MkU3OEVBNTcwNTJENDM2Qg");
        assert_eq!(v.controller_id, 2);
        assert_eq!(
            v.brokers,
            vec![
                ListedBroker {
                    id: 1,
                    host: "127.0.0.1".into(),
                    port: 9001,
                    fenced: false
                },
                ListedBroker {
                    id: 2,
                    host: "127.0.0.1".into(),
                    port: 9002,
                    fenced: true
                },
            ]
        );
        let expected = vec![
            (1, "127.0.0.1:9001".to_string()),
            (2, "127.0.0.1:9002".to_string()),
            (3, "127.0.0.1:9003".to_string()),
        ];
        assert_eq!(
            v.problems(&expected),
            vec!["lists broker 2 as fenced", "does not list broker 3 yet"]
        );
        assert!(v.problems(&expected[..1]).is_empty());
        assert_eq!(
            v.problems(&[(1, "127.0.0.1:1".to_string())]),
            vec!["lists broker 1 at 127.0.0.1:9001, expected 127.0.0.1:1"]
        );
    }

    #[test]
    fn describe_cluster_response_v0_v1_decode() {
        for version in [0, 1] {
            let frame = hand_built_response(version, 5, &[(4, "localhost", 1234, false)]);
            let v = decode_describe_cluster(&frame, version, 5).unwrap();
            assert_eq!(v.version, version);
            assert_eq!(
                v.brokers,
                vec![ListedBroker {
                    id: 4,
                    host: "localhost".into(),
                    port: 1234,
                    fenced: false
                }]
            );
        }
    }

    #[test]
    fn describe_cluster_response_errors() {
        let frame = hand_built_response(2, 5, &[]);
        let e = decode_describe_cluster(&frame, 2, 6).unwrap_err();
        assert!(e.to_string().contains("correlation id 5"), "{e}");
        // error code 15 (COORDINATOR_NOT_AVAILABLE) with a message
        let mut f = Vec::new();
        f.extend_from_slice(&5i32.to_be_bytes());
        f.push(0);
        f.extend_from_slice(&0i32.to_be_bytes());
        f.extend_from_slice(&15i16.to_be_bytes());
        compact_str(&mut f, "not yet");
        f.push(1);
        compact_str(&mut f, "x");
        f.extend_from_slice(&(-1i32).to_be_bytes());
        f.push(1); // no brokers
        f.extend_from_slice(&0i32.to_be_bytes());
        f.push(0);
        let e = decode_describe_cluster(&f, 1, 5).unwrap_err();
        assert!(e.to_string().contains("error code 15: not yet"), "{e}");
        // truncated
        let frame = hand_built_response(2, 5, &[(1, "h", 1, false)]);
        assert!(decode_describe_cluster(&frame[..frame.len() - 6], 2, 5).is_err());
    }

    #[test]
    fn api_versions_v0_decode_and_pick() {
        let mut f = Vec::new();
        f.extend_from_slice(&3i32.to_be_bytes());
        f.extend_from_slice(&0i16.to_be_bytes());
        f.extend_from_slice(&2i32.to_be_bytes());
        for (k, lo, hi) in [(18i16, 0i16, 3i16), (60, 0, 1)] {
            f.extend_from_slice(&k.to_be_bytes());
            f.extend_from_slice(&lo.to_be_bytes());
            f.extend_from_slice(&hi.to_be_bytes());
        }
        let apis = decode_api_versions_v0(&f, 3).unwrap();
        assert_eq!(apis, vec![(18, 0, 3), (60, 0, 1)]);
        assert_eq!(pick_describe_cluster_version(&apis), Some(1));
        assert_eq!(pick_describe_cluster_version(&[(60, 0, 5)]), Some(2));
        assert_eq!(pick_describe_cluster_version(&[(60, 3, 5)]), None);
        assert_eq!(pick_describe_cluster_version(&[(18, 0, 3)]), None);
    }

    /// describe_cluster against a fake broker speaking ApiVersions v0 + DescribeCluster v2.
    #[test]
    fn describe_cluster_against_fake_server() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let req = read_frame(&mut s).unwrap();
            assert_eq!(&req[0..4], &[0, 18, 0, 0]);
            let corr = i32::from_be_bytes(req[4..8].try_into().unwrap());
            let mut resp = Vec::new();
            resp.extend_from_slice(&corr.to_be_bytes());
            resp.extend_from_slice(&0i16.to_be_bytes());
            resp.extend_from_slice(&1i32.to_be_bytes());
            for x in [60i16, 0, 2] {
                resp.extend_from_slice(&x.to_be_bytes());
            }
            s.write_all(&(resp.len() as i32).to_be_bytes()).unwrap();
            s.write_all(&resp).unwrap();
            let req = read_frame(&mut s).unwrap();
            assert_eq!(&req[0..4], &[0, 60, 0, 2]);
            let corr = i32::from_be_bytes(req[4..8].try_into().unwrap());
            let resp = hand_built_response(2, corr, &[(1, "127.0.0.1", 1, false)]);
            s.write_all(&(resp.len() as i32).to_be_bytes()).unwrap();
            s.write_all(&resp).unwrap();
        });
        let v = describe_cluster(addr, 10, Duration::from_secs(2)).unwrap();
        assert_eq!(v.version, 2);
        assert_eq!(v.brokers.len(), 1);
        h.join().unwrap();
    }

    #[test]
    fn cluster_ids_look_like_kafkas() {
        for _ in 0..50 {
            let id = generate_cluster_id().unwrap();
            assert_eq!(id.len(), 22, "{id}");
            assert!(!id.starts_with('-'));
            assert!(id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        }
        assert_eq!(base64url_nopad(&[0xfb, 0xff]), "-_8");
        assert_eq!(base64url_nopad(b"Man"), "TWFu");
        assert_eq!(base64url_nopad(&[0u8; 16]), "AAAAAAAAAAAAAAAAAAAAAA");
    }

    #[test]
    fn roles_and_ids() {
        assert_eq!(
            roles_of(Layout::Combined(3)).unwrap(),
            vec![Role::Combined; 3]
        );
        assert_eq!(
            roles_of(Layout::Split {
                controllers: 1,
                brokers: 2
            })
            .unwrap(),
            vec![Role::Controller, Role::Broker, Role::Broker]
        );
        assert!(roles_of(Layout::Combined(0)).is_err());
        assert!(roles_of(Layout::Split {
            controllers: 0,
            brokers: 1
        })
        .is_err());
        assert!(roles_of(Layout::Split {
            controllers: 1,
            brokers: 0
        })
        .is_err());
        let ports = free_loopback_ports(6).unwrap();
        let mut d = ports.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), 6);
    }
}
