//! The broker's log directories (`log.dirs`, several as JBOD; KIP-858).
//!
//! Each directory has its own `meta.properties` with a `directory.id`; the
//! broker registers the ids it loaded and the controller records, per
//! replica, the directory holding it. The first directory also holds the
//! metadata store: its failure stops the broker, as the failure of every
//! directory does. Any other directory fails alone: its partitions go
//! offline here, the heartbeat reports it, and the controller moves their
//! leaderships and ISR places to other replicas while the rest keep serving.

use crate::config::BrokerConfig;
use crate::meta::{self, MetaProperties};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use strand_partition::log_dir_failure::LogDirFailures;
use uuid::Uuid;

/// One log directory.
pub struct LogDir {
    pub path: PathBuf,
    /// Its `directory.id`; nil when it could not be read at start-up.
    pub id: Uuid,
    /// Set by the first failed write, fsync or checkpoint of any log in it.
    pub failures: Arc<LogDirFailures>,
}

impl LogDir {
    pub fn is_offline(&self) -> bool {
        self.failures.is_offline()
    }
}

pub struct LogDirs {
    dirs: Vec<LogDir>,
    /// Woken when a directory has gone offline and its partitions are
    /// stopped: the heartbeat reports it at once.
    pub changed: tokio::sync::Notify,
}

impl LogDirs {
    /// Loads every directory of `log.dirs`. The first one's meta
    /// properties are `meta` (already checked); every other must belong to
    /// the same cluster and node, and ids must differ (else the broker does
    /// not start, as Kafka's). An empty one is given meta properties of
    /// its own (Kafka does the same); one that cannot be read or written
    /// starts offline.
    pub fn load(config: &BrokerConfig, meta: &MetaProperties) -> Result<LogDirs, String> {
        let mut dirs = Vec::new();
        let mut ids = BTreeSet::new();
        for (i, path) in config.log_dirs.iter().enumerate() {
            match Self::load_one(path, meta, i == 0)? {
                Ok(id) => {
                    if !ids.insert(id) {
                        return Err(format!(
                            "{} has directory.id {} as another log directory does",
                            path.display(),
                            meta::encode_uuid(id)
                        ));
                    }
                    dirs.push(LogDir {
                        path: path.clone(),
                        id,
                        failures: LogDirFailures::new(),
                    });
                }
                Err(e) if i == 0 => return Err(e),
                Err(e) => {
                    tracing::error!(dir = %path.display(), error = %e, "log directory cannot be loaded; it is offline");
                    let failures = LogDirFailures::new();
                    failures.fail(path, &std::io::Error::other(e));
                    dirs.push(LogDir {
                        path: path.clone(),
                        id: Uuid::nil(),
                        failures,
                    });
                }
            }
        }
        Ok(LogDirs::new(dirs))
    }

    /// The directory's id; the outer error stops start-up, the inner one
    /// leaves the directory offline.
    fn load_one(
        path: &Path,
        meta: &MetaProperties,
        first: bool,
    ) -> Result<Result<Uuid, String>, String> {
        if let Err(e) = std::fs::create_dir_all(path) {
            return Ok(Err(format!("cannot create {}: {e}", path.display())));
        }
        let found = match meta::read(path) {
            Ok(found) => found,
            Err(e) => return Ok(Err(e)),
        };
        if let Some(m) = &found {
            if m.cluster_id != meta.cluster_id || m.node_id != meta.node_id {
                return Err(format!(
                    "{} belongs to cluster {} node {}, not cluster {} node {}",
                    path.join(meta::META_FILE).display(),
                    m.cluster_id,
                    m.node_id,
                    meta.cluster_id,
                    meta.node_id
                ));
            }
            if let Some(id) = m.directory_id {
                return Ok(Ok(id));
            }
        } else if first {
            return Err(format!("{} is not formatted", path.display()));
        }
        // Written before directories had ids, or a new empty directory.
        let id = meta::new_directory_id();
        let own = MetaProperties {
            directory_id: Some(id),
            ..found.unwrap_or_else(|| meta.clone())
        };
        Ok(meta::write(path, &own)
            .map(|()| id)
            .map_err(|e| format!("cannot write {}: {e}", path.join(meta::META_FILE).display())))
    }

    pub fn new(dirs: Vec<LogDir>) -> LogDirs {
        assert!(!dirs.is_empty(), "at least one log directory");
        LogDirs {
            dirs,
            changed: tokio::sync::Notify::new(),
        }
    }

    /// One directory (the simulation's, and tests').
    pub fn single(path: &Path) -> LogDirs {
        LogDirs::new(vec![LogDir {
            path: path.to_path_buf(),
            id: Uuid::from_u128(u128::from(u32::MAX) + 1),
            failures: LogDirFailures::new(),
        }])
    }

    pub fn all(&self) -> &[LogDir] {
        &self.dirs
    }

    /// The directory holding the metadata store (the first).
    pub fn metadata_dir(&self) -> &LogDir {
        &self.dirs[0]
    }

    /// No partition may be written any more: the metadata directory or
    /// every directory failed (the broker then stops).
    pub fn is_fatal(&self) -> bool {
        self.metadata_dir().is_offline() || self.dirs.iter().all(LogDir::is_offline)
    }

    pub fn online(&self) -> impl Iterator<Item = &LogDir> {
        self.dirs.iter().filter(|d| !d.is_offline())
    }

    /// The ids of the directories online now (a registration's LogDirs).
    pub fn online_ids(&self) -> Vec<Uuid> {
        self.online().map(|d| d.id).collect()
    }

    /// The ids of the directories that failed (a heartbeat's OfflineLogDirs).
    pub fn offline_ids(&self) -> Vec<Uuid> {
        self.dirs
            .iter()
            .filter(|d| d.is_offline() && !d.id.is_nil())
            .map(|d| d.id)
            .collect()
    }

    pub fn by_id(&self, id: Uuid) -> Option<&LogDir> {
        self.dirs.iter().find(|d| !id.is_nil() && d.id == id)
    }

    /// The directory a partition directory is in.
    pub fn of_partition_dir(&self, partition_dir: &Path) -> Option<&LogDir> {
        let parent = partition_dir.parent()?;
        self.dirs.iter().find(|d| d.path == parent)
    }
}

/// Where a new replica goes (Kafka's LogManager.nextLogDirs): the online
/// directory with the fewest partitions, the first listed on a tie.
/// `counts[i]` is directory i's partitions, `None` when it is offline.
pub fn choose_dir(counts: &[Option<usize>]) -> Option<usize> {
    counts
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.map(|c| (c, i)))
        .min()
        .map(|(_, i)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_replicas_go_to_the_online_directory_with_the_fewest_partitions() {
        let rows: &[(&[Option<usize>], Option<usize>)] = &[
            (&[Some(0)], Some(0)),
            (&[Some(3), Some(2)], Some(1)),
            (&[Some(2), Some(2)], Some(0)), // a tie: the first listed
            (&[Some(1), Some(2), Some(1)], Some(0)),
            (&[None, Some(9)], Some(1)), // offline: never chosen
            (&[Some(5), None, Some(7)], Some(0)),
            (&[None, None], None),
            (&[], None),
        ];
        for (i, (counts, want)) in rows.iter().enumerate() {
            assert_eq!(choose_dir(counts), *want, "row {i}: {counts:?}");
        }
    }

    #[test]
    fn placing_one_at_a_time_spreads_evenly() {
        let mut counts = vec![Some(0usize); 3];
        for _ in 0..30 {
            let i = choose_dir(&counts).unwrap();
            *counts[i].as_mut().unwrap() += 1;
        }
        assert_eq!(counts, vec![Some(10); 3]);
    }

    fn config(dirs: &[&Path]) -> BrokerConfig {
        let list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        BrokerConfig::load(None, &[format!("log.dirs={}", list.join(","))]).unwrap()
    }

    fn meta(cluster: &str) -> MetaProperties {
        MetaProperties {
            cluster_id: cluster.into(),
            node_id: 1,
            initial_controllers: vec![],
            directory_id: Some(meta::new_directory_id()),
        }
    }

    #[test]
    fn each_directory_gets_an_id_of_its_own_that_survives_a_restart() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        let m = meta("c1c1c1c1c1c1c1c1c1c1c1");
        meta::write(&a, &m).unwrap();
        let cfg = config(&[&a, &b]);
        let first = LogDirs::load(&cfg, &m).unwrap();
        let ids: Vec<Uuid> = first.online_ids();
        assert_eq!(ids.len(), 2);
        assert_eq!(ids[0], m.directory_id.unwrap());
        assert_ne!(ids[0], ids[1]);
        // The empty directory was given meta properties of the same cluster.
        let written = meta::read(&b).unwrap().unwrap();
        assert_eq!(written.cluster_id, m.cluster_id);
        assert_eq!(written.directory_id, Some(ids[1]));
        let again = LogDirs::load(&cfg, &m).unwrap();
        assert_eq!(again.online_ids(), ids);
        assert!(again.offline_ids().is_empty());
    }

    #[test]
    fn an_unreadable_directory_starts_offline_alone() {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("a");
        // A file where the directory should be: it cannot be created.
        let b = t.path().join("b");
        std::fs::write(&b, b"not a directory").unwrap();
        let m = meta("c1c1c1c1c1c1c1c1c1c1c1");
        meta::write(&a, &m).unwrap();
        let dirs = LogDirs::load(&config(&[&a, &b]), &m).unwrap();
        assert_eq!(dirs.online_ids(), vec![m.directory_id.unwrap()]);
        assert!(dirs.all()[1].is_offline() && !dirs.is_fatal());
        // Its id is unknown: nothing to report.
        assert!(dirs.offline_ids().is_empty());
        // The metadata directory unreadable: no start.
        assert!(LogDirs::load(&config(&[&b, &a]), &m).is_err());
    }

    #[test]
    fn a_directory_of_another_cluster_or_a_duplicate_id_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        let m = meta("c1c1c1c1c1c1c1c1c1c1c1");
        meta::write(&a, &m).unwrap();
        meta::write(&b, &meta("c2c2c2c2c2c2c2c2c2c2c2")).unwrap();
        let err = LogDirs::load(&config(&[&a, &b]), &m).err().unwrap();
        assert!(err.contains("belongs to cluster c2c2"), "{err}");
        // A copy of the first directory's file: the same id twice.
        meta::write(&b, &m).unwrap();
        let err = LogDirs::load(&config(&[&a, &b]), &m).err().unwrap();
        assert!(err.contains("as another log directory does"), "{err}");
    }
}
