//! `meta.properties` in the first log dir: which cluster and node this data
//! belongs to, and the initial controller set the format step chose. A
//! multi-node quorum starts only from an explicit `strand format` (like
//! `kafka-storage format`); a single combined node with no data formats itself.

use crate::config::{parse_voters, BrokerConfig, Voter};
use std::path::Path;

pub const META_FILE: &str = "meta.properties";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub cluster_id: String,
    pub node_id: i32,
    /// The voters that bootstrap the quorum; the lowest id initialises it.
    pub initial_controllers: Vec<Voter>,
}

impl MetaProperties {
    fn render(&self) -> String {
        let voters: Vec<String> = self
            .initial_controllers
            .iter()
            .map(|v| format!("{}@{}", v.id, v.addr))
            .collect();
        format!(
            "#Written by strand format; do not edit.\nversion=1\ncluster.id={}\nnode.id={}\ninitial.controllers={}\n",
            self.cluster_id,
            self.node_id,
            voters.join(",")
        )
    }

    fn parse(text: &str) -> Result<MetaProperties, String> {
        let get = |key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix('=')))
                .map(str::trim)
        };
        let cluster_id = get("cluster.id")
            .filter(|s| !s.is_empty())
            .ok_or("missing cluster.id")?
            .to_string();
        let node_id = get("node.id")
            .ok_or("missing node.id")?
            .parse()
            .map_err(|_| "bad node.id")?;
        let initial_controllers = parse_voters(get("initial.controllers").unwrap_or(""))?;
        Ok(MetaProperties {
            cluster_id,
            node_id,
            initial_controllers,
        })
    }
}

pub fn read(dir: &Path) -> Result<Option<MetaProperties>, String> {
    let path = dir.join(META_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => MetaProperties::parse(&text)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

pub fn write(dir: &Path, meta: &MetaProperties) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join("meta.properties.tmp");
    std::fs::write(&tmp, meta.render())?;
    std::fs::File::open(&tmp)?.sync_all()?;
    std::fs::rename(&tmp, dir.join(META_FILE))?;
    std::fs::File::open(dir)?.sync_all()
}

/// A Kafka-style cluster id: 16 random bytes as URL-safe base64 without padding.
pub fn new_cluster_id() -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut bits = u128::from_be_bytes(uuid::Uuid::new_v4().into_bytes());
    (0..22)
        .map(|_| {
            let c = ALPHABET[(bits >> 122) as usize & 63] as char;
            bits <<= 6;
            c
        })
        .collect()
}

/// Checks this node's data against its configuration, formatting a fresh
/// single combined node. Returns the meta properties to run with.
pub fn load_or_self_format(config: &BrokerConfig) -> Result<MetaProperties, String> {
    let dir = &config.log_dirs[0];
    if let Some(meta) = read(dir)? {
        if meta.node_id != config.node_id {
            return Err(format!(
                "{} belongs to node {} but node.id is {}",
                dir.join(META_FILE).display(),
                meta.node_id,
                config.node_id
            ));
        }
        return Ok(meta);
    }
    // Only a lone combined node may format itself: a list of peers is no
    // proof of membership, so a quorum needs the explicit format step.
    let alone = config.quorum_voters.is_empty()
        || (config.quorum_voters.len() == 1 && config.quorum_voters[0].id == config.node_id);
    if !(config.is_controller() && config.is_broker() && alone) {
        return Err(format!("{} is not formatted: run `strand format --cluster-id ID --node-id {} --initial-controllers ...` first", dir.display(), config.node_id));
    }
    // No controller listener: a lone voter needs no network.
    let addr = own_controller_addr(config).unwrap_or_else(|| "127.0.0.1:0".into());
    let meta = MetaProperties {
        cluster_id: new_cluster_id(),
        node_id: config.node_id,
        initial_controllers: vec![Voter {
            id: config.node_id,
            addr,
        }],
    };
    write(dir, &meta)
        .map_err(|e| format!("cannot write {}: {e}", dir.join(META_FILE).display()))?;
    tracing::info!(cluster_id = %meta.cluster_id, "formatted a new single-node cluster");
    Ok(meta)
}

/// Where this node's controller is reached: its advertised controller
/// listener, else the listener itself (an empty host: 127.0.0.1).
fn own_controller_addr(config: &BrokerConfig) -> Option<String> {
    let l = config.controller_listener()?;
    let advertised = config
        .advertised_listeners
        .iter()
        .find(|a| a.name == l.name)
        .unwrap_or(l);
    let host = if advertised.host.is_empty() {
        "127.0.0.1"
    } else {
        &advertised.host
    };
    Some(format!("{host}:{}", advertised.port))
}

/// `strand format --cluster-id ID --node-id N --initial-controllers id@host:port,...
/// [--ignore-formatted] [server.properties] [--override k=v ...]`, or Kafka's
/// `kafka-storage format` form: `-t ID -c server.properties`, with
/// `--standalone` (this node alone is the initial controller set) or
/// `--no-initial-controllers` (the voters of `controller.quorum.voters`, if
/// any).
pub fn format_command(args: &[String]) -> Result<String, String> {
    let mut rest = Vec::new();
    let (mut cluster_id, mut node_id, mut initial, mut ignore) = (None, None, None, false);
    let mut standalone = false;
    let mut i = 0;
    while i < args.len() {
        let value = || {
            args.get(i + 1)
                .cloned()
                .ok_or(format!("{} needs a value", args[i]))
        };
        match args[i].as_str() {
            "--cluster-id" | "-t" => cluster_id = Some(value()?),
            "--node-id" => {
                node_id = Some(
                    value()?
                        .parse::<i32>()
                        .map_err(|_| "--node-id needs a number".to_string())?,
                )
            }
            "--initial-controllers" => initial = Some(parse_voters(&value()?)?),
            "--ignore-formatted" | "-g" => {
                ignore = true;
                i += 1;
                continue;
            }
            "--standalone" | "-s" => {
                standalone = true;
                i += 1;
                continue;
            }
            "--no-initial-controllers" | "-N" => {
                i += 1;
                continue;
            }
            "--config" | "-c" => rest.push(value()?),
            _ => {
                rest.push(args[i].clone());
                i += 1;
                continue;
            }
        }
        i += 2;
    }
    let mut pairs_args = rest;
    if let Some(n) = node_id {
        pairs_args.push("--override".into());
        pairs_args.push(format!("node.id={n}"));
    }
    let config = BrokerConfig::from_args(&pairs_args).map_err(|e| e.to_string())?;
    let cluster_id = cluster_id.ok_or("--cluster-id is required")?;
    if cluster_id.len() < 16
        || !cluster_id
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_')
    {
        return Err(format!(
            "cluster id '{cluster_id}' is not a valid id (generate one with `strand random-uuid`)"
        ));
    }
    let initial_controllers = match (initial, standalone) {
        (Some(_), true) => {
            return Err("--standalone and --initial-controllers exclude each other".into())
        }
        (Some(v), false) => v,
        (None, true) => vec![Voter {
            id: config.node_id,
            addr: own_controller_addr(&config)
                .ok_or("--standalone needs a controller listener (controller.listener.names)")?,
        }],
        (None, false) => config.quorum_voters.clone(),
    };
    if config.is_controller() && !initial_controllers.iter().any(|v| v.id == config.node_id) {
        return Err(format!(
            "node {} is a controller but not in the initial controllers",
            config.node_id
        ));
    }
    let dir = &config.log_dirs[0];
    if let Some(existing) = read(dir)? {
        if ignore && existing.cluster_id == cluster_id && existing.node_id == config.node_id {
            return Ok(format!(
                "{} is already formatted for cluster {cluster_id}",
                dir.display()
            ));
        }
        return Err(format!(
            "{} is already formatted (cluster {}, node {})",
            dir.display(),
            existing.cluster_id,
            existing.node_id
        ));
    }
    let meta = MetaProperties {
        cluster_id: cluster_id.clone(),
        node_id: config.node_id,
        initial_controllers,
    };
    write(dir, &meta).map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
    Ok(format!(
        "Formatted {} for cluster {cluster_id}, node {}",
        dir.display(),
        config.node_id
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn format_then_refuse_reformat() {
        let dir = tempfile::tempdir().unwrap();
        let logs = format!("log.dirs={}", dir.path().display());
        let id = new_cluster_id();
        let a = args(&[
            "--cluster-id",
            &id,
            "--node-id",
            "2",
            "--initial-controllers",
            "1@127.0.0.1:1,2@127.0.0.1:2",
            "--override",
            &logs,
        ]);
        format_command(&a).unwrap();
        let meta = read(dir.path()).unwrap().unwrap();
        assert_eq!(
            (
                meta.cluster_id.as_str(),
                meta.node_id,
                meta.initial_controllers.len()
            ),
            (id.as_str(), 2, 2)
        );
        assert!(format_command(&a)
            .unwrap_err()
            .contains("already formatted"));
        let mut again = a.clone();
        again.push("--ignore-formatted".into());
        assert!(format_command(&again).is_ok());
    }

    #[test]
    fn format_errors() {
        let dir = tempfile::tempdir().unwrap();
        let logs = format!("log.dirs={}", dir.path().display());
        let id = new_cluster_id();
        assert!(
            format_command(&args(&["--node-id", "1", "--override", &logs]))
                .unwrap_err()
                .contains("--cluster-id")
        );
        assert!(format_command(&args(&["--cluster-id", "bad id!", "--override", &logs])).is_err());
        let e = format_command(&args(&[
            "--cluster-id",
            &id,
            "--node-id",
            "3",
            "--initial-controllers",
            "1@h:1",
            "--override",
            &logs,
        ]))
        .unwrap_err();
        assert!(e.contains("not in the initial controllers"), "{e}");
        assert!(format_command(&args(&[
            "--cluster-id",
            &id,
            "--initial-controllers",
            "x@h:1",
            "--override",
            &logs
        ]))
        .is_err());
    }

    #[test]
    fn only_a_lone_combined_node_formats_itself() {
        let dir = tempfile::tempdir().unwrap();
        let logs = format!("log.dirs={}", dir.path().display());
        let cfg = |extra: &[&str]| {
            let mut a = args(&["--override", &logs]);
            for e in extra {
                a.push("--override".into());
                a.push(e.to_string());
            }
            BrokerConfig::from_args(&a).unwrap()
        };
        let quorum = cfg(&["controller.quorum.voters=1@127.0.0.1:1,2@127.0.0.1:2"]);
        assert!(load_or_self_format(&quorum)
            .unwrap_err()
            .contains("not formatted"));
        let lone = cfg(&[]);
        let meta = load_or_self_format(&lone).unwrap();
        assert_eq!(
            load_or_self_format(&lone).unwrap(),
            meta,
            "a formatted node keeps its identity"
        );
        let other = cfg(&["node.id=5"]);
        assert!(load_or_self_format(&other)
            .unwrap_err()
            .contains("belongs to node 1"));
    }
}
