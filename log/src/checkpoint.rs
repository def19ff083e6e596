//! Small durable files: written to `name.tmp`, fsynced, renamed over `name`,
//! then the directory is fsynced, so a reader sees the old or the new content.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use crate::LogError;

/// Checkpoint format version written as the first line.
const VERSION: &str = "0";

pub fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Atomically replaces `path` with `data`.
pub fn write_atomic(path: &Path, data: &[u8]) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent() {
        fsync_dir(dir)?;
    }
    Ok(())
}

/// Reads a whole file; `None` if it does not exist.
pub fn read_opt(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Writes a single-value checkpoint: `0\n<value>\n`.
pub fn write_value(path: &Path, value: i64) -> io::Result<()> {
    write_atomic(path, format!("{VERSION}\n{value}\n").as_bytes())
}

/// Reads a single-value checkpoint; `None` if missing.
pub fn read_value(path: &Path) -> Result<Option<i64>, LogError> {
    let Some(raw) = read_opt(path)? else {
        return Ok(None);
    };
    let corrupt = || LogError::Corrupt(format!("malformed checkpoint file {}", path.display()));
    let text = std::str::from_utf8(&raw).map_err(|_| corrupt())?;
    let mut lines = text.lines();
    if lines.next() != Some(VERSION) {
        return Err(corrupt());
    }
    let v = lines
        .next()
        .and_then(|l| l.trim().parse::<i64>().ok())
        .ok_or_else(corrupt)?;
    Ok(Some(v))
}

/// Writes the leader-epoch checkpoint in Kafka's text format:
/// `0\n<count>\n<epoch> <start offset>\n...`.
pub fn write_epochs(path: &Path, entries: &[(i32, i64)]) -> io::Result<()> {
    let mut s = format!("{VERSION}\n{}\n", entries.len());
    for (e, o) in entries {
        s.push_str(&format!("{e} {o}\n"));
    }
    write_atomic(path, s.as_bytes())
}

pub fn read_epochs(path: &Path) -> Result<Vec<(i32, i64)>, LogError> {
    let Some(raw) = read_opt(path)? else {
        return Ok(Vec::new());
    };
    let corrupt = || {
        LogError::Corrupt(format!(
            "malformed leader-epoch checkpoint {}",
            path.display()
        ))
    };
    let text = std::str::from_utf8(&raw).map_err(|_| corrupt())?;
    let mut lines = text.lines();
    if lines.next() != Some(VERSION) {
        return Err(corrupt());
    }
    let n: usize = lines
        .next()
        .and_then(|l| l.trim().parse().ok())
        .ok_or_else(corrupt)?;
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let line = lines.next().ok_or_else(corrupt)?;
        let mut parts = line.split_whitespace();
        let e: i32 = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(corrupt)?;
        let o: i64 = parts
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(corrupt)?;
        out.push((e, o));
    }
    if out.windows(2).any(|w| w[0].0 >= w[1].0 || w[0].1 > w[1].1) {
        return Err(corrupt());
    }
    Ok(out)
}
