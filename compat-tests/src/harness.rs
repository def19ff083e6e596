//! Start and stop `strand` broker processes for tests.
//!
//! A [`Broker`] owns one child process listening on a loopback port it picked itself, a
//! temporary data directory (properties file, `log.dirs`, process log) and knows how to
//! wait until the process answers a Kafka `ApiVersions` v0 request. Processes are only
//! ever signalled by their PID, never by name.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long [`Broker::start`] / [`Broker::restart`] wait for readiness by default.
/// Override with the environment variable `STRAND_START_TIMEOUT_SECS`.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(30);
/// How long [`Broker::terminate`] waits after SIGTERM before it falls back to SIGKILL.
pub const DEFAULT_TERM_TIMEOUT: Duration = Duration::from_secs(15);
/// Number of log lines [`Broker::log_tail`] returns.
pub const LOG_TAIL_LINES: usize = 40;

const LOG_FILE: &str = "strand.log";
const PROPS_FILE: &str = "server.properties";

/// A `strand` process started for a test. Dropping it SIGKILLs the process (by PID) and
/// removes the data directory (unless `STRAND_KEEP_DATA=1` is set).
pub struct Broker {
    bin: PathBuf,
    overrides: Vec<(String, String)>,
    /// Listeners beside the PLAINTEXT one: (name, host:port).
    extra_listeners: Vec<(String, String)>,
    port: u16,
    dir: Option<tempfile::TempDir>,
    dir_path: PathBuf,
    child: Option<Child>,
    pid: u32,
    start_timeout: Duration,
}

impl Broker {
    /// Start `bin` as `bin <dir>/server.properties --override k=v ...` on a free loopback
    /// port with a fresh data directory, and wait until it answers ApiVersions.
    ///
    /// The properties file sets `node.id`, `listeners`, `advertised.listeners` and
    /// `log.dirs`; every entry of `overrides` is passed as `--override key=value` (and
    /// therefore wins over the file).
    pub fn start(bin: &Path, overrides: &[(&str, &str)]) -> io::Result<Broker> {
        Self::start_with_listeners(bin, &[], overrides)
    }

    /// [`Broker::start`] with more listeners after the PLAINTEXT one (which
    /// stays the inter-broker listener the harness probes): each
    /// `(name, host:port)` is listened on and advertised as given; its
    /// security protocol is its name's unless `overrides` map it.
    pub fn start_with_listeners(
        bin: &Path,
        listeners: &[(&str, &str)],
        overrides: &[(&str, &str)],
    ) -> io::Result<Broker> {
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
        let dir = tempfile::Builder::new().prefix("strand-test-").tempdir()?;
        let dir_path = dir.path().to_path_buf();
        let port = free_loopback_port()?;
        let start_timeout = std::env::var("STRAND_START_TIMEOUT_SECS")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or(DEFAULT_START_TIMEOUT);
        let mut broker = Broker {
            bin,
            overrides: overrides
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            extra_listeners: listeners
                .iter()
                .map(|(n, a)| (n.to_string(), a.to_string()))
                .collect(),
            port,
            dir: Some(dir),
            dir_path,
            child: None,
            pid: 0,
            start_timeout,
        };
        broker.write_properties()?;
        broker.spawn_and_wait()?;
        Ok(broker)
    }

    /// `127.0.0.1:PORT`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// PID of the current (or last) process.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The temporary directory holding `server.properties`, `strand.log` and `data/`
    /// (the `log.dirs`).
    pub fn data_dir(&self) -> &Path {
        &self.dir_path
    }

    /// Path of the process log (stdout and stderr of every start, appended).
    pub fn log_path(&self) -> PathBuf {
        self.dir_path.join(LOG_FILE)
    }

    /// Whether the process is still running (reaps it if it exited).
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => matches!(c.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Exit status if the process has exited (without waiting), `None` while it runs or
    /// when it was already reaped by kill9/terminate.
    pub fn try_exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL the process by PID and reap it.
    pub fn kill9(&mut self) -> io::Result<ExitStatus> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| io::Error::other("broker is not running"))?;
        if let Ok(Some(st)) = child.try_wait() {
            return Ok(st);
        }
        signal(self.pid, libc::SIGKILL)?;
        child.wait()
    }

    /// SIGTERM the process by PID and wait up to [`DEFAULT_TERM_TIMEOUT`] for it to exit;
    /// if it does not, SIGKILL it and return an error (a clean shutdown is expected).
    pub fn terminate(&mut self) -> io::Result<ExitStatus> {
        self.terminate_timeout(DEFAULT_TERM_TIMEOUT)
    }

    pub fn terminate_timeout(&mut self, timeout: Duration) -> io::Result<ExitStatus> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| io::Error::other("broker is not running"))?;
        if let Ok(Some(st)) = child.try_wait() {
            return Ok(st);
        }
        signal(self.pid, libc::SIGTERM)?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = child.try_wait()? {
                return Ok(st);
            }
            if Instant::now() >= deadline {
                let _ = signal(self.pid, libc::SIGKILL);
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "strand (pid {}) did not exit within {:?} of SIGTERM; killed it",
                        self.pid, timeout
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Start the process again on the same port with the same data directory and wait
    /// until it is ready. A still-running process is first stopped with SIGTERM.
    pub fn restart(&mut self) -> io::Result<()> {
        if self.is_running() {
            self.terminate()?;
        } else {
            // reap an exited child, if any
            if let Some(mut c) = self.child.take() {
                let _ = c.wait();
            }
        }
        self.spawn_and_wait()
    }

    /// The last [`LOG_TAIL_LINES`] lines of the process log.
    pub fn log_tail(&self) -> String {
        self.log_tail_lines(LOG_TAIL_LINES)
    }

    pub fn log_tail_lines(&self, lines: usize) -> String {
        tail_file(&self.log_path(), lines)
    }

    fn write_properties(&self) -> io::Result<()> {
        let data = self.dir_path.join("data");
        std::fs::create_dir_all(&data)?;
        let mut listeners = format!("PLAINTEXT://{}", self.addr());
        for (name, addr) in &self.extra_listeners {
            listeners.push_str(&format!(",{name}://{addr}"));
        }
        let text = format!(
            "# written by strand-compat-tests harness\n\
             node.id=1\n\
             listeners={listeners}\n\
             advertised.listeners={listeners}\n\
             log.dirs={}\n",
            data.display()
        );
        std::fs::write(self.dir_path.join(PROPS_FILE), text)
    }

    fn spawn_and_wait(&mut self) -> io::Result<()> {
        let log_path = self.log_path();
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        writeln!(
            log,
            "==== strand-compat-tests: starting {} on {} ====",
            self.bin.display(),
            self.addr()
        )?;
        let mut cmd = Command::new(&self.bin);
        cmd.arg(self.dir_path.join(PROPS_FILE));
        for (k, v) in &self.overrides {
            cmd.arg("--override").arg(format!("{k}={v}"));
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .current_dir(&self.dir_path);
        let child = cmd.spawn().map_err(|e| {
            io::Error::new(e.kind(), format!("spawning {}: {e}", self.bin.display()))
        })?;
        self.pid = child.id();
        self.child = Some(child);
        self.wait_ready()
    }

    /// Bounded retry loop: connect + ApiVersions v0 until it answers, the child exits, or
    /// the start timeout passes.
    fn wait_ready(&mut self) -> io::Result<()> {
        let addr: SocketAddr = ([127, 0, 0, 1], self.port).into();
        let deadline = Instant::now() + self.start_timeout;
        let mut attempt: i32 = 0;
        let mut last_err = String::from("no attempt made");
        loop {
            if let Some(st) = self.try_exit_status() {
                self.child = None;
                return Err(io::Error::other(format!(
                    "strand exited during startup ({st}); log tail:\n{}",
                    self.log_tail()
                )));
            }
            if Instant::now() >= deadline {
                let _ = self.kill9();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "strand not ready on {addr} after {:?} ({attempt} attempts, last: {last_err}); log tail:\n{}",
                        self.start_timeout,
                        self.log_tail()
                    ),
                ));
            }
            attempt += 1;
            match probe_api_versions(addr, attempt, Duration::from_secs(2)) {
                Ok(()) => return Ok(()),
                Err(e) => last_err = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        kill_and_reap(self.child.take(), self.pid);
        keep_dir_if_asked(self.dir.take(), "data dir");
    }
}

/// SIGKILLs (by PID) a child that is still running, then reaps it.
pub(crate) fn kill_and_reap(child: Option<Child>, pid: u32) {
    if let Some(mut child) = child {
        if let Ok(None) = child.try_wait() {
            let _ = signal(pid, libc::SIGKILL);
        }
        let _ = child.wait();
    }
}

/// With STRAND_KEEP_DATA=1, keeps a temporary directory for inspection.
pub(crate) fn keep_dir_if_asked(dir: Option<tempfile::TempDir>, what: &str) {
    if std::env::var("STRAND_KEEP_DATA").is_ok_and(|v| v == "1") {
        if let Some(d) = dir {
            let p = d.keep();
            eprintln!("strand-compat-tests: kept {what} {}", p.display());
        }
    }
}

/// Sends `sig` to a child by PID (never by name).
pub(crate) fn signal(pid: u32, sig: libc::c_int) -> io::Result<()> {
    if pid == 0 {
        return Err(io::Error::other("refusing to signal pid 0"));
    }
    // SAFETY: plain syscall on a PID we spawned (and have not reaped yet).
    let r = unsafe { libc::kill(pid as libc::pid_t, sig) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Where test brokers listen: below Linux's ephemeral range (32768 and
/// up), so the kernel never hands one of these ports to a client's
/// connection or to another `bind(0)`. A port the kernel picked from the
/// ephemeral range could be taken by either while a node is down for a
/// restart, and the node could then not listen again.
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A free loopback port no earlier call of this process has handed out:
/// each process walks [`TEST_PORTS`] from its own starting point, skipping
/// ports something is bound to.
pub fn free_loopback_port() -> io::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    let span = u32::from(TEST_PORTS.end - TEST_PORTS.start);
    if NEXT.load(Ordering::Relaxed) == u32::MAX {
        // Seeded by the process id, so test processes that run at once
        // start far apart.
        let start = (std::process::id().wrapping_mul(2_654_435_761)) % span;
        let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    }
    for _ in 0..span {
        let k = NEXT.fetch_add(1, Ordering::Relaxed) % span;
        let port = TEST_PORTS.start + k as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrInUse,
        "no free loopback port left in the test range",
    ))
}

/// Encode a Kafka ApiVersions v0 request (request header v1, empty body), size-prefixed.
pub fn encode_api_versions_v0(correlation_id: i32, client_id: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity(16 + client_id.len());
    body.extend_from_slice(&18i16.to_be_bytes()); // api_key ApiVersions
    body.extend_from_slice(&0i16.to_be_bytes()); // api_version 0
    body.extend_from_slice(&correlation_id.to_be_bytes());
    body.extend_from_slice(&(client_id.len() as i16).to_be_bytes());
    body.extend_from_slice(client_id.as_bytes());
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&(body.len() as i32).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Connect to `addr`, send ApiVersions v0 and read a response carrying the same
/// correlation id (and error code NONE).
pub fn probe_api_versions(
    addr: SocketAddr,
    correlation_id: i32,
    timeout: Duration,
) -> io::Result<()> {
    let mut s = TcpStream::connect_timeout(&addr, timeout)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    s.set_nodelay(true)?;
    s.write_all(&encode_api_versions_v0(correlation_id, "probe"))?;
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let len = i32::from_be_bytes(len);
    if !(6..=1 << 20).contains(&len) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("ApiVersions response has implausible size {len}"),
        ));
    }
    let mut resp = vec![0u8; len as usize];
    s.read_exact(&mut resp)?;
    let corr = i32::from_be_bytes([resp[0], resp[1], resp[2], resp[3]]);
    if corr != correlation_id {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("ApiVersions response correlation id {corr}, expected {correlation_id}"),
        ));
    }
    let err = i16::from_be_bytes([resp[4], resp[5]]);
    if err != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("ApiVersions v0 answered with error code {err}"),
        ));
    }
    Ok(())
}

/// Last `lines` lines of a (possibly large) text file; reads at most the final 256 KiB.
pub fn tail_file(path: &Path, lines: usize) -> String {
    let mut f = match File::open(path) {
        Ok(f) => f,
        Err(e) => return format!("(cannot read {}: {e})", path.display()),
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let start = len.saturating_sub(256 * 1024);
    if f.seek(SeekFrom::Start(start)).is_err() {
        return String::new();
    }
    let mut buf = Vec::new();
    let _ = f.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    let from = all.len().saturating_sub(lines);
    all[from..].join("\n")
}

/// `$STRAND_CACHE`, defaulting to `$HOME/.cache/strand`: where the scripts build and
/// fetch what the tests need.
pub fn strand_cache() -> std::path::PathBuf {
    std::env::var_os("STRAND_CACHE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
                .join(".cache/strand")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_versions_v0_encoding() {
        let b = encode_api_versions_v0(7, "probe");
        assert_eq!(
            b,
            [
                0, 0, 0, 15, // size
                0, 18, 0, 0, // api key, version
                0, 0, 0, 7, // correlation id
                0, 5, b'p', b'r', b'o', b'b', b'e'
            ]
        );
    }

    /// A fake broker answering ApiVersions v0: the probe accepts it.
    #[test]
    fn probe_against_fake_server() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            let mut len = [0u8; 4];
            s.read_exact(&mut len).unwrap();
            let mut req = vec![0u8; i32::from_be_bytes(len) as usize];
            s.read_exact(&mut req).unwrap();
            assert_eq!(&req[0..4], &[0, 18, 0, 0]);
            let corr = &req[4..8];
            let mut resp = Vec::new();
            resp.extend_from_slice(corr);
            resp.extend_from_slice(&0i16.to_be_bytes());
            resp.extend_from_slice(&0i32.to_be_bytes()); // empty api array
            s.write_all(&(resp.len() as i32).to_be_bytes()).unwrap();
            s.write_all(&resp).unwrap();
        });
        probe_api_versions(addr, 42, Duration::from_secs(2)).unwrap();
        h.join().unwrap();
    }

    #[test]
    fn probe_refused() {
        let port = free_loopback_port().unwrap();
        assert!(
            probe_api_versions(([127, 0, 0, 1], port).into(), 1, Duration::from_millis(200))
                .is_err()
        );
    }

    /// A "broker" that exits immediately: start fails with the log tail.
    #[test]
    fn start_reports_early_exit() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("fake-strand");
        std::fs::write(&script, "#!/bin/sh\necho \"fake strand got: $*\"\nexit 3\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = match Broker::start(&script, &[("num.partitions", "4")]) {
            Ok(_) => panic!("fake broker must not become ready"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("exited during startup"), "{err}");
        assert!(err.contains("--override num.partitions=4"), "{err}");
        assert!(err.contains("server.properties"), "{err}");
    }
}
