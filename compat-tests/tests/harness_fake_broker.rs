//! Broker lifecycle (start, restart on the same port/dir, SIGKILL, SIGTERM) against
//! `testdata/fake-strand.py`, a stand-in that only answers ApiVersions v0.
//! Skipped when python3 is not installed.

use std::path::PathBuf;
use strand_compat_tests::Broker;

fn fake() -> Option<PathBuf> {
    let ok = std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("python3 not available; skipping");
        return None;
    }
    Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/fake-strand.py"))
}

#[test]
fn lifecycle() {
    let Some(bin) = fake() else { return };
    let mut b = Broker::start(&bin, &[("num.partitions", "4")]).unwrap();
    let addr = b.addr();
    assert!(addr.starts_with("127.0.0.1:"));
    let props = std::fs::read_to_string(b.data_dir().join("server.properties")).unwrap();
    assert!(
        props.contains(&format!("listeners=PLAINTEXT://{addr}")),
        "{props}"
    );
    assert!(
        b.log_tail().contains("--override', 'num.partitions=4'"),
        "{}",
        b.log_tail()
    );
    let pid1 = b.pid();

    // crash + restart: same port, same dir, new pid
    let st = b.kill9().unwrap();
    assert!(!st.success());
    assert!(!b.is_running());
    b.restart().unwrap();
    assert_eq!(b.addr(), addr);
    assert_ne!(b.pid(), pid1);

    // restart of a running broker goes through SIGTERM
    let pid2 = b.pid();
    b.restart().unwrap();
    assert_ne!(b.pid(), pid2);
    assert!(b.log_tail().contains("SIGTERM, bye"));

    // clean shutdown
    let st = b.terminate().unwrap();
    assert!(st.success(), "{st}");
    let dir = b.data_dir().to_path_buf();
    drop(b);
    assert!(!dir.exists());
}

#[test]
fn drop_kills() {
    let Some(bin) = fake() else { return };
    let b = Broker::start(&bin, &[]).unwrap();
    let pid = b.pid() as libc::pid_t;
    drop(b);
    // reaped and gone: kill(pid, 0) fails with ESRCH
    let r = unsafe { libc::kill(pid, 0) };
    assert_eq!(r, -1);
}
