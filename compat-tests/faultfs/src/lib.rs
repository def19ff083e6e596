//! A fault-injecting file layer for disk-fault tests, loaded into a broker
//! with `LD_PRELOAD`. It interposes `fsync` and `fdatasync`: when the file
//! named by `STRAND_FAULTFS_CONTROL` holds a line `fsync PREFIX`, a call on
//! a descriptor whose path starts with PREFIX fails with EIO, as a dying
//! disk's would (the data may be gone from the page cache: the broker must
//! never retry and believe). A line `stall PREFIX` makes such a call wait
//! (a disk that stops answering) until the line is gone, then go on; each
//! call that starts waiting appends a line to `<control>.stalled`, so a test
//! can wait for the stalls it caused. A line `enospc PREFIX` fills the disk
//! under PREFIX: `write`, `pwrite` and `writev` of regular files there
//! fail with ENOSPC, the process's first `write`/`pwrite` part-way (half
//! its bytes land, as on a disk that fills mid-write), every later one
//! outright. Not covered: `fallocate`, creating files, and stdio's own
//! buffered writes (glibc calls its internal write for those). Every other call goes to the C library. The control file is
//! read on each call, so a test turns faults on and off by writing it.
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

/// The control file's path, read once: the write interposers run in every
/// context a write does, where taking the environment's lock is not safe.
fn control_path() -> Option<&'static std::ffi::OsStr> {
    static CONTROL: OnceLock<Option<std::ffi::OsString>> = OnceLock::new();
    CONTROL
        .get_or_init(|| std::env::var_os("STRAND_FAULTFS_CONTROL"))
        .as_deref()
}

/// Whether the control file has a `rule PREFIX` line whose prefix `fd`'s
/// path starts with.
fn rule_applies(rule: &str, fd: c_int) -> bool {
    let Some(control) = control_path() else {
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
    if let Some(control) = control_path() {
        use std::io::Write;
        let mut stalled = control.to_os_string();
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

fn fail(errno: c_int) -> isize {
    // SAFETY: errno is thread-local; setting it is what a failing call does.
    unsafe { *libc::__errno_location() = errno };
    -1
}

fn no_space() -> isize {
    fail(libc::ENOSPC)
}

/// Whether this process's disk has filled: the first write under an
/// `enospc` rule lands part-way and sets it; every later one fails
/// outright. A process whose disk filled is expected to stop (a broker's
/// log directory goes offline), so it is never cleared.
static FILLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether `fd` is a regular file: only those fill a disk. Sockets, pipes
/// and eventfds (tokio's wakers, its signal pipe) skip the control file at
/// the cost of one fstat, which is async-signal-safe.
fn regular_file(fd: c_int) -> bool {
    // SAFETY: fstat writes only into the struct it is given.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFREG
    }
}

/// Under an `enospc` rule: the first write of the process lands half of
/// its bytes (`partial(half)` does it), every later one fails with
/// ENOSPC. `None`: no rule, the real call goes ahead with errno as it was.
fn full_disk(fd: c_int, len: usize, partial: impl FnOnce(usize) -> isize) -> Option<isize> {
    if control_path().is_none() || !regular_file(fd) {
        return None;
    }
    // SAFETY: errno is thread-local; the rule check must not change what
    // the caller sees of it.
    let errno = unsafe { *libc::__errno_location() };
    let applies = rule_applies("enospc", fd);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = errno };
    if !applies {
        return None;
    }
    use std::sync::atomic::Ordering;
    if len >= 2 && !FILLED.swap(true, Ordering::SeqCst) {
        return Some(partial(len / 2));
    }
    FILLED.store(true, Ordering::SeqCst);
    Some(no_space())
}

type WriteFn = unsafe extern "C" fn(c_int, *const libc::c_void, usize) -> isize;
type PwriteFn = unsafe extern "C" fn(c_int, *const libc::c_void, usize, libc::off_t) -> isize;
type WritevFn = unsafe extern "C" fn(c_int, *const libc::iovec, c_int) -> isize;

/// The C library's definition of `name`, of type `F`.
///
/// # Safety
/// `F` must be the function pointer type `name` is declared with.
unsafe fn real<F: Copy>(cell: &OnceLock<usize>, name: &CStr) -> Option<F> {
    let f = *cell.get_or_init(|| libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) as usize);
    // SAFETY: a non-null symbol of the type the caller names.
    (f != 0).then(|| std::mem::transmute_copy::<usize, F>(&f))
}

static WRITE: OnceLock<usize> = OnceLock::new();
static PWRITE: OnceLock<usize> = OnceLock::new();
static PWRITE64: OnceLock<usize> = OnceLock::new();
static WRITEV: OnceLock<usize> = OnceLock::new();

/// # Safety
/// Called by programs as the C library's `write`.
#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const libc::c_void, len: usize) -> isize {
    let Some(f) = real::<WriteFn>(&WRITE, c"write") else {
        return fail(libc::ENOSYS);
    };
    full_disk(fd, len, |n| f(fd, buf, n)).unwrap_or_else(|| f(fd, buf, len))
}

/// # Safety
/// Called by programs as the C library's `pwrite`.
#[no_mangle]
pub unsafe extern "C" fn pwrite(
    fd: c_int,
    buf: *const libc::c_void,
    len: usize,
    at: libc::off_t,
) -> isize {
    let Some(f) = real::<PwriteFn>(&PWRITE, c"pwrite") else {
        return fail(libc::ENOSYS);
    };
    full_disk(fd, len, |n| f(fd, buf, n, at)).unwrap_or_else(|| f(fd, buf, len, at))
}

/// # Safety
/// Called by programs as the C library's `pwrite64` (Rust's `write_at`).
#[no_mangle]
pub unsafe extern "C" fn pwrite64(
    fd: c_int,
    buf: *const libc::c_void,
    len: usize,
    at: libc::off_t,
) -> isize {
    let Some(f) = real::<PwriteFn>(&PWRITE64, c"pwrite64") else {
        return fail(libc::ENOSYS);
    };
    full_disk(fd, len, |n| f(fd, buf, n, at)).unwrap_or_else(|| f(fd, buf, len, at))
}

/// # Safety
/// Called by programs as the C library's `writev`.
#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, count: c_int) -> isize {
    let Some(f) = real::<WritevFn>(&WRITEV, c"writev") else {
        return fail(libc::ENOSYS);
    };
    // Never part-way: one partial vector write is not worth the bookkeeping.
    match full_disk(fd, 0, |_| 0) {
        Some(r) => r,
        None => f(fd, iov, count),
    }
}
