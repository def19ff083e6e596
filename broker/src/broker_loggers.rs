//! Log levels changed at runtime (Kafka's BROKER_LOGGER resource, type 8):
//! DescribeConfigs lists this broker's loggers with their levels and
//! IncrementalAlterConfigs sets or removes one, until the process stops
//! (nothing is written to the metadata log, as in Kafka).
//!
//! A logger is `root` (the level of every target not named otherwise), one
//! of Strand's crates (`strand_broker`, ...) or a module path under one
//! (`strand_broker::replica_manager`): the `tracing` targets. The rules
//! and the answers are Kafka 4.4's (checked side by side in
//! `tests/differential.rs`); applying a change rebuilds the process's log
//! filter through the hook the binary installs.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::OnceLock;
use strand_metadata::controller_api::{ApiError, ConfigOp};
use strand_protocol::ErrorCode;

/// The loggers Strand has besides `root`: its crates' targets, and the
/// Raft library's.
pub const CRATE_LOGGERS: &[&str] = &[
    "openraft",
    "strand",
    "strand_broker",
    "strand_controller",
    "strand_group",
    "strand_log",
    "strand_metadata",
    "strand_partition",
    "strand_protocol",
    "strand_replication",
    "strand_security",
    "strand_txn",
];

/// The levels Kafka accepts, in its error message's order.
const LEVELS: &[&str] = &["DEBUG", "ERROR", "FATAL", "INFO", "TRACE", "WARN"];

/// The levels of the loggers: what the process started with (`RUST_LOG`,
/// else Strand's default) and what was changed since. Pure: `filter`
/// gives the log filter directives to apply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggerLevels {
    root: String,
    /// Levels given at start for named targets.
    base: BTreeMap<String, String>,
    /// Levels set through BROKER_LOGGER since.
    set: BTreeMap<String, String>,
}

impl LoggerLevels {
    /// From a filter's directives (`info,openraft=warn`): the bare level
    /// is root's; `target=level` pairs are kept; anything else (span
    /// filters) is dropped from what is described, not from the filter
    /// until the first change.
    pub fn from_directives(directives: &str) -> LoggerLevels {
        let mut root = "INFO".to_string();
        let mut base = BTreeMap::new();
        for d in directives
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
        {
            match d.split_once('=') {
                None if level_of(d).is_some() => root = level_of(d).unwrap_or("INFO").into(),
                Some((target, level)) if is_target(target) && level_of(level).is_some() => {
                    base.insert(target.to_string(), level_of(level).unwrap_or("INFO").into());
                }
                _ => {}
            }
        }
        LoggerLevels {
            root,
            base,
            set: BTreeMap::new(),
        }
    }

    /// Every logger with its effective level: root, each crate's, and any
    /// module set at start or since.
    pub fn describe(&self) -> Vec<(String, String)> {
        let mut names: Vec<String> = CRATE_LOGGERS.iter().map(|s| s.to_string()).collect();
        names.extend(self.base.keys().cloned());
        names.extend(self.set.keys().cloned());
        names.sort();
        names.dedup();
        let mut out = vec![("root".to_string(), self.root.clone())];
        out.extend(names.into_iter().map(|n| {
            let level = self.level_of(&n);
            (n, level)
        }));
        out
    }

    /// A logger's effective level: its own, else its nearest parent's,
    /// else root's.
    fn level_of(&self, logger: &str) -> String {
        let mut name = logger;
        loop {
            if let Some(l) = self.set.get(name).or_else(|| self.base.get(name)) {
                return l.clone();
            }
            match name.rsplit_once("::") {
                Some((parent, _)) => name = parent,
                None => return self.root.clone(),
            }
        }
    }

    /// Checks and applies one resource's operations (all or none), with
    /// Kafka's errors.
    pub fn apply(&mut self, ops: &[(String, ConfigOp)]) -> Result<(), ApiError> {
        let mut next = self.clone();
        for (logger, op) in ops {
            if logger != "root" && !is_known(logger) {
                return Err(ApiError::new(
                    ErrorCode::InvalidConfig,
                    format!("Logger {logger} does not exist!"),
                ));
            }
            match op {
                ConfigOp::Set(level) => {
                    if !LEVELS.contains(&level.as_str()) {
                        return Err(ApiError::new(
                            ErrorCode::InvalidConfig,
                            format!(
                                "Cannot set the log level of {logger} to {level} as it is not a supported log level. Valid log levels are {}",
                                LEVELS.join(", ")
                            ),
                        ));
                    }
                    if logger == "root" {
                        next.root = level.clone();
                    } else {
                        next.set.insert(logger.clone(), level.clone());
                    }
                }
                ConfigOp::Delete if logger == "root" => {
                    return Err(ApiError::new(
                        ErrorCode::InvalidRequest,
                        "Removing the log level of the root logger is not allowed",
                    ));
                }
                ConfigOp::Delete => {
                    next.set.remove(logger);
                    next.base.remove(logger);
                }
                ConfigOp::Append(_) => return Err(not_allowed("APPEND")),
                ConfigOp::Subtract(_) => return Err(not_allowed("SUBTRACT")),
            }
        }
        *self = next;
        Ok(())
    }

    /// The log filter's directives for these levels.
    pub fn filter(&self) -> String {
        let mut out = vec![filter_level(&self.root).to_string()];
        let mut targets = self.base.clone();
        targets.extend(self.set.clone());
        for (t, l) in targets {
            out.push(format!("{t}={}", filter_level(&l)));
        }
        out.join(",")
    }
}

fn not_allowed(op: &str) -> ApiError {
    ApiError::new(
        ErrorCode::InvalidRequest,
        format!("{op} operation is not allowed for the BROKER_LOGGER resource"),
    )
}

/// A filter directive's level as Kafka names it.
fn level_of(s: &str) -> Option<&'static str> {
    match s.trim().to_ascii_lowercase().as_str() {
        "trace" => Some("TRACE"),
        "debug" => Some("DEBUG"),
        "info" => Some("INFO"),
        "warn" => Some("WARN"),
        "error" => Some("ERROR"),
        _ => None,
    }
}

/// A Kafka level as the filter names it (FATAL: errors only).
fn filter_level(level: &str) -> &'static str {
    match level {
        "TRACE" => "trace",
        "DEBUG" => "debug",
        "WARN" => "warn",
        "ERROR" | "FATAL" => "error",
        _ => "info",
    }
}

fn is_target(s: &str) -> bool {
    !s.is_empty()
        && s.split("::")
            .all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

/// One of Strand's loggers: a crate's target or a module path under one.
fn is_known(logger: &str) -> bool {
    is_target(logger) && CRATE_LOGGERS.contains(&logger.split("::").next().unwrap_or_default())
}

/// Replaces the process's log filter with these directives.
pub type ReloadFilter = Box<dyn Fn(&str) -> Result<(), String> + Send + Sync>;

/// The broker's loggers and the hook that applies their levels to the
/// process's log filter (installed by the binary; none in tests and the
/// simulation, where changes are only recorded).
pub struct BrokerLoggers {
    levels: Mutex<LoggerLevels>,
    reload: OnceLock<ReloadFilter>,
}

impl Default for BrokerLoggers {
    fn default() -> Self {
        BrokerLoggers {
            levels: Mutex::new(LoggerLevels::from_directives(DEFAULT_FILTER)),
            reload: OnceLock::new(),
        }
    }
}

/// The log filter when `RUST_LOG` sets none.
pub const DEFAULT_FILTER: &str = "info,openraft=warn";

impl BrokerLoggers {
    /// The levels the process started with and the hook that applies new
    /// ones (called once, by the binary).
    pub fn install(&self, directives: &str, reload: ReloadFilter) {
        *self.levels.lock() = LoggerLevels::from_directives(directives);
        let _ = self.reload.set(reload);
    }

    pub fn describe(&self) -> Vec<(String, String)> {
        self.levels.lock().describe()
    }

    /// Applies one resource's operations (unless `validate_only`) to the
    /// levels and the log filter.
    pub fn alter(&self, ops: &[(String, ConfigOp)], validate_only: bool) -> Result<(), ApiError> {
        let mut levels = self.levels.lock();
        let mut next = levels.clone();
        next.apply(ops)?;
        if validate_only {
            return Ok(());
        }
        if let Some(reload) = self.reload.get() {
            reload(&next.filter()).map_err(|e| ApiError::new(ErrorCode::UnknownServerError, e))?;
        }
        tracing::info!(filter = %next.filter(), "log levels changed");
        *levels = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(l: &str, v: &str) -> (String, ConfigOp) {
        (l.into(), ConfigOp::Set(v.into()))
    }

    fn level(levels: &LoggerLevels, name: &str) -> String {
        levels
            .describe()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, l)| l)
            .unwrap_or_default()
    }

    #[test]
    fn levels_from_the_start_filter_and_changed_at_runtime() {
        let mut l = LoggerLevels::from_directives("info,openraft=warn");
        assert_eq!(level(&l, "root"), "INFO");
        assert_eq!(level(&l, "openraft"), "WARN");
        assert_eq!(level(&l, "strand_broker"), "INFO");
        l.apply(&[set("strand_broker::replica_manager", "DEBUG")])
            .unwrap();
        assert_eq!(level(&l, "strand_broker::replica_manager"), "DEBUG");
        assert_eq!(level(&l, "strand_broker"), "INFO");
        l.apply(&[set("root", "WARN")]).unwrap();
        assert_eq!(level(&l, "strand_log"), "WARN");
        assert_eq!(
            l.filter(),
            "warn,openraft=warn,strand_broker::replica_manager=debug"
        );
        // Removing a logger's level: it inherits again.
        l.apply(&[("strand_broker::replica_manager".into(), ConfigOp::Delete)])
            .unwrap();
        assert_eq!(l.level_of("strand_broker::replica_manager"), "WARN");
        assert!(l
            .describe()
            .iter()
            .all(|(n, _)| n != "strand_broker::replica_manager"));
        // FATAL: errors only.
        l.apply(&[set("strand_log", "FATAL")]).unwrap();
        assert!(l.filter().contains("strand_log=error"));
    }

    /// Kafka 4.4's refusals (tests/differential.rs compares them).
    #[test]
    fn refusals_as_kafka_answers_them() {
        let mut l = LoggerLevels::from_directives("info");
        let before = l.clone();
        let cases: Vec<((String, ConfigOp), ErrorCode, &str)> = vec![
            (set("root", "LOUD"), ErrorCode::InvalidConfig, "Cannot set the log level of root to LOUD as it is not a supported log level. Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN"),
            (set("root", "warn"), ErrorCode::InvalidConfig, "Cannot set the log level of root to warn as it is not a supported log level. Valid log levels are DEBUG, ERROR, FATAL, INFO, TRACE, WARN"),
            (set("no.such.logger", "INFO"), ErrorCode::InvalidConfig, "Logger no.such.logger does not exist!"),
            (set("kafka::server", "INFO"), ErrorCode::InvalidConfig, "Logger kafka::server does not exist!"),
            (("root".into(), ConfigOp::Delete), ErrorCode::InvalidRequest, "Removing the log level of the root logger is not allowed"),
            (("root".into(), ConfigOp::Append("INFO".into())), ErrorCode::InvalidRequest, "APPEND operation is not allowed for the BROKER_LOGGER resource"),
            (("root".into(), ConfigOp::Subtract("INFO".into())), ErrorCode::InvalidRequest, "SUBTRACT operation is not allowed for the BROKER_LOGGER resource"),
        ];
        for (i, (op, code, message)) in cases.into_iter().enumerate() {
            let e = l.apply(&[op]).unwrap_err();
            assert_eq!((e.code, e.message.as_str()), (code, message), "case {i}");
            assert_eq!(l, before, "case {i}: nothing applied");
        }
        // All or none: a good change before a bad one is not kept.
        assert!(l
            .apply(&[set("root", "DEBUG"), set("root", "LOUD")])
            .is_err());
        assert_eq!(l, before);
    }
}
