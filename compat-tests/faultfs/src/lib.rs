//! A fault-injecting file layer for disk-fault tests, loaded into a broker
//! with `LD_PRELOAD`. It interposes `fsync` and `fdatasync`: when the file
//! named by `STRAND_FAULTFS_CONTROL` holds a line `fsync PREFIX`, a call on
//! a descriptor whose path starts with PREFIX fails with EIO, as a dying
//! disk's would (the data may be gone from the page cache: the broker must
//! never retry and believe). A line `stall PREFIX` makes such a call wait
//! (a disk that stops answering) until the line is gone, then go on; each
//! call that starts waiting appends a line to `<control>.stalled`, so a test
//! can wait for the stalls it caused. Every other call goes to the C
//! library. The control file is read on each call, so a test turns faults
//! on and off by writing it.
// Every dependency a crate declares is one it uses (dev-dependencies are
// checked by the test builds that use them).
#![cfg_attr(not(test), deny(unused_crate_dependencies))]
// Outside tests an unwrap names its invariant: `expect("...")`.
#![cfg_attr(not(test), deny(clippy::unwrap_used))]

use std::ffi::{c_int, CStr};
use std::sync::OnceLock;

type SyncFn = unsafe extern "C" fn(c_int) -> c_int;

fn next(name: &CStr) -> Option<SyncFn> {
    // SAFETY: dlsym with RTLD_NEXT finds the C library's definition of a
    // symbol of this very signature (fsync and fdatasync: int f(int)).
    unsafe {
        let f = libc::dlsym(libc::RTLD_NEXT, name.as_ptr());
        (!f.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, SyncFn>(f))
    }
}

/// Whether the control file has a `rule PREFIX` line whose prefix `fd`'s
/// path starts with.
fn rule_applies(rule: &str, fd: c_int) -> bool {
    let Some(control) = std::env::var_os("STRAND_FAULTFS_CONTROL") else {
        return false;
    };
    let Ok(rules) = std::fs::read_to_string(control) else {
        return false;
    };
    let Ok(path) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else {
        return false;
    };
    let path = path.to_string_lossy();
    rules
        .lines()
        .filter_map(|l| l.strip_prefix(rule)?.strip_prefix(' '))
        .any(|prefix| !prefix.trim().is_empty() && path.starts_with(prefix.trim()))
}

/// While a `stall` rule covers `fd`, waits (recording the stall once).
fn stall_while_asked(fd: c_int) {
    if !rule_applies("stall", fd) {
        return;
    }
    if let Some(control) = std::env::var_os("STRAND_FAULTFS_CONTROL") {
        use std::io::Write;
        let mut stalled = control;
        stalled.push(".stalled");
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(stalled)
        {
            let _ = writeln!(f, "{fd}");
        }
    }
    while rule_applies("stall", fd) {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

fn interpose(fd: c_int, real: &OnceLock<Option<SyncFn>>, name: &CStr) -> c_int {
    stall_while_asked(fd);
    if rule_applies("fsync", fd) {
        // SAFETY: errno is thread-local; setting it is what a failing call does.
        unsafe { *libc::__errno_location() = libc::EIO };
        return -1;
    }
    match real.get_or_init(|| next(name)) {
        // SAFETY: the C library's own function, called as it is declared.
        Some(f) => unsafe { f(fd) },
        None => {
            // SAFETY: as above.
            unsafe { *libc::__errno_location() = libc::ENOSYS };
            -1
        }
    }
}

static FSYNC: OnceLock<Option<SyncFn>> = OnceLock::new();
static FDATASYNC: OnceLock<Option<SyncFn>> = OnceLock::new();

/// # Safety
/// Called by programs as the C library's `fsync`.
#[no_mangle]
pub unsafe extern "C" fn fsync(fd: c_int) -> c_int {
    interpose(fd, &FSYNC, c"fsync")
}

/// # Safety
/// Called by programs as the C library's `fdatasync`.
#[no_mangle]
pub unsafe extern "C" fn fdatasync(fd: c_int) -> c_int {
    interpose(fd, &FDATASYNC, c"fdatasync")
}
