//! Small durable files (checkpoints), replaced atomically through
//! `Storage::write_atomic`: a reader sees the old or the new content.

use std::io;
use std::path::Path;

use strand_types::{LeaderEpoch, Offset};

use crate::error::LogError;
use crate::storage::Storage;

/// Checkpoint format version written as the first line.
const VERSION: &str = "0";

/// Writes a single-value checkpoint: `0\n<value>\n`. Values are the wire
/// integers (the caller converts): these files are Kafka's.
pub fn write_value(storage: &dyn Storage, path: &Path, value: i64) -> io::Result<()> {
    storage.write_atomic(path, format!("{VERSION}\n{value}\n").as_bytes())
}

/// Reads a single-value checkpoint; `None` if missing.
pub fn read_value(storage: &dyn Storage, path: &Path) -> Result<Option<i64>, LogError> {
    let Some(raw) = storage.read_opt(path)? else {
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
/// `0\n<count>\n<epoch> <start offset>\n...` (the newtypes print their
/// integers).
pub fn write_epochs(
    storage: &dyn Storage,
    path: &Path,
    entries: &[(LeaderEpoch, Offset)],
) -> io::Result<()> {
    let mut s = format!("{VERSION}\n{}\n", entries.len());
    for (e, o) in entries {
        s.push_str(&format!("{e} {o}\n"));
    }
    storage.write_atomic(path, s.as_bytes())
}

/// Reads the leader-epoch checkpoint; empty if missing. A negative epoch or
/// offset (never written: the cache holds neither) is malformed.
pub fn read_epochs(
    storage: &dyn Storage,
    path: &Path,
) -> Result<Vec<(LeaderEpoch, Offset)>, LogError> {
    let Some(raw) = storage.read_opt(path)? else {
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
        let e = parts
            .next()
            .and_then(|p| p.parse().ok())
            .and_then(LeaderEpoch::from_wire)
            .ok_or_else(corrupt)?;
        let o = parts
            .next()
            .and_then(|p| p.parse().ok())
            .and_then(Offset::from_wire)
            .ok_or_else(corrupt)?;
        out.push((e, o));
    }
    if out.windows(2).any(|w| w[0].0 >= w[1].0 || w[0].1 > w[1].1) {
        return Err(corrupt());
    }
    Ok(out)
}
