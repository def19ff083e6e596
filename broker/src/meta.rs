//! `meta.properties` in the first log dir: which cluster and node this data
//! belongs to, and the initial controller set the format step chose. A
//! multi-node quorum starts only from an explicit `strand format` (like
//! `kafka-storage format`); a single combined node with no data formats itself.

use crate::config::{parse_voters, BrokerConfig, Voter};
use rand::RngCore;
use std::path::{Path, PathBuf};
use strand_metadata::records::{MetadataRecord, ScramCredentialRecord};
use strand_security::scram::{Mechanism, ScramCredential, MAX_ITERATIONS, MIN_ITERATIONS};

pub const META_FILE: &str = "meta.properties";

/// Records the format step asks the first active controller to commit with
/// the cluster's first record (`--add-scram`), as JSON.
pub const BOOTSTRAP_FILE: &str = "bootstrap.json";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaProperties {
    pub cluster_id: String,
    pub node_id: i32,
    /// The voters that bootstrap the quorum; the lowest id initialises it.
    pub initial_controllers: Vec<Voter>,
    /// This log directory's id (KIP-858's `directory.id`); each log
    /// directory has its own. None in files written before Strand kept it.
    pub directory_id: Option<uuid::Uuid>,
}

impl MetaProperties {
    fn render(&self) -> String {
        let voters: Vec<String> = self
            .initial_controllers
            .iter()
            .map(|v| format!("{}@{}", v.id, v.addr))
            .collect();
        let dir = self
            .directory_id
            .map(|d| format!("directory.id={}\n", encode_uuid(d)))
            .unwrap_or_default();
        format!(
            "#Written by strand format; do not edit.\nversion=1\ncluster.id={}\nnode.id={}\ninitial.controllers={}\n{dir}",
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
        let directory_id = get("directory.id")
            .map(|d| decode_uuid(d).ok_or("bad directory.id"))
            .transpose()?;
        Ok(MetaProperties {
            cluster_id,
            node_id,
            initial_controllers,
            directory_id,
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

/// A Kafka Uuid as Kafka prints it: URL-safe base64 without padding.
/// `--initial-controllers`: `id@host:port` each, or Kafka 4.x's
/// `id@host:port:directory-id` (the controller's metadata directory id,
/// base64 as `kafka-storage random-uuid` prints it).
pub fn parse_initial_controllers(value: &str) -> Result<Vec<(Voter, Option<uuid::Uuid>)>, String> {
    let mut voters = Vec::new();
    let mut dirs = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        match item.rsplit_once(':') {
            Some((voter, dir)) if dir.parse::<u16>().is_err() => {
                let id = decode_uuid(dir)
                    .ok_or_else(|| format!("'{dir}' in '{item}' is not a directory id"))?;
                voters.push(voter);
                dirs.push(Some(id));
            }
            _ => {
                voters.push(item);
                dirs.push(None);
            }
        }
    }
    Ok(parse_voters(&voters.join(","))?
        .into_iter()
        .zip(dirs)
        .collect())
}

pub fn encode_uuid(id: uuid::Uuid) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(id.as_bytes())
}

/// The inverse of [`encode_uuid`].
pub fn decode_uuid(s: &str) -> Option<uuid::Uuid> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s.trim())
        .ok()?;
    uuid::Uuid::from_slice(&bytes).ok()
}

/// A new log directory id: random, never one of Kafka's reserved ids
/// (UNASSIGNED, LOST, MIGRATING are 0, 1 and 2; ids below 100 are reserved).
pub fn new_directory_id() -> uuid::Uuid {
    loop {
        let id = uuid::Uuid::new_v4();
        if id.as_u128() >= 100 {
            return id;
        }
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

/// A Kafka-style cluster id: 16 random bytes as URL-safe base64 without
/// padding, drawn again while it would start with '-' (as Kafka's
/// `Uuid.randomUuid` does: `format -t -abc...` reads as an option).
pub fn new_cluster_id() -> String {
    loop {
        let bits = u128::from_be_bytes(uuid::Uuid::new_v4().into_bytes());
        if let Some(id) = cluster_id_from(bits) {
            return id;
        }
    }
}

/// `bits` as a cluster id, or `None` when it would start with '-'.
fn cluster_id_from(mut bits: u128) -> Option<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let id: String = (0..22)
        .map(|_| {
            let c = ALPHABET[(bits >> 122) as usize & 63] as char;
            bits <<= 6;
            c
        })
        .collect();
    (!id.starts_with('-')).then_some(id)
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
        directory_id: Some(new_directory_id()),
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

/// The bootstrap records `strand format` left in `dir`, if any.
pub fn read_bootstrap(dir: &Path) -> Result<Vec<MetadataRecord>, String> {
    let path = dir.join(BOOTSTRAP_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// The feature levels a new cluster starts with, as `kafka-storage format`
/// takes them: `--release-version` (a metadata.version name or release,
/// Kafka 4.4's latest by default) and its features' levels, then each
/// `--feature name=level`. Only levels above 0 are written.
pub fn feature_records(
    release: Option<&str>,
    features: &[String],
) -> Result<Vec<MetadataRecord>, String> {
    use strand_metadata::features::{
        defaults_for, metadata_version_of, supported, LATEST_METADATA_VERSION, METADATA_VERSION,
        METADATA_VERSIONS, SUPPORTED_FEATURES,
    };
    let mv = match release {
        None => LATEST_METADATA_VERSION,
        Some(r) => metadata_version_of(r).ok_or_else(|| {
            let names: Vec<&str> = METADATA_VERSIONS.iter().map(|(_, n)| *n).collect();
            format!(
                "Unknown metadata.version '{r}'. Supported metadata.version are: {}",
                names.join(", ")
            )
        })?,
    };
    let mut levels: std::collections::BTreeMap<String, i16> = defaults_for(mv)
        .into_iter()
        .map(|(n, l)| (n.to_string(), l))
        .collect();
    for f in features {
        let (name, level) = f.split_once('=').ok_or_else(|| {
            format!("Can't parse feature=level string {f}: equals sign not found.")
        })?;
        let level: i16 = level.trim().parse().map_err(|_| {
            format!("Can't parse feature=level string {f}: unable to parse {level} as a short.")
        })?;
        let name = name.trim();
        if name == METADATA_VERSION && release.is_some() {
            return Err(format!(
                "Use --release-version instead of --feature {METADATA_VERSION}={level} to avoid ambiguity."
            ));
        }
        let Some((lo, hi)) = supported(name) else {
            let names: Vec<&str> = SUPPORTED_FEATURES
                .iter()
                .map(|(n, _, _)| *n)
                .filter(|n| *n != METADATA_VERSION)
                .collect();
            return Err(format!(
                "Unsupported feature: {name}. Supported features are: {}",
                names.join(", ")
            ));
        };
        if level < lo || level > hi {
            return Err(format!("No feature:{name} with feature level {level}"));
        }
        levels.insert(name.to_string(), level);
    }
    Ok(levels
        .into_iter()
        .filter(|(_, level)| *level > 0)
        .map(|(name, level)| MetadataRecord::FeatureLevel { name, level })
        .collect())
}

/// `body` split at the commas outside double quotes (a quoted password
/// may hold commas).
fn split_unquoted(body: &str) -> Vec<&str> {
    let (mut fields, mut start, mut quoted) = (Vec::new(), 0, false);
    for (i, c) in body.char_indices() {
        match c {
            '"' => quoted = !quoted,
            ',' if !quoted => {
                fields.push(&body[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    fields.push(&body[start..]);
    fields
}

/// One `--add-scram` argument as Kafka's `kafka-storage format` takes it
/// (`SCRAM-SHA-256=[name=alice,password=alice-secret]`, optionally
/// `iterations=8192`; values may be quoted) as the credential record: the
/// keys are derived here with a fresh salt, the password is not kept.
pub fn scram_record(arg: &str) -> Result<ScramCredentialRecord, String> {
    let bad = |why: &str| format!("--add-scram {arg}: {why}");
    let (mechanism, rest) = arg
        .split_once('=')
        .ok_or_else(|| bad("expected MECHANISM=[...]"))?;
    let mechanism = Mechanism::from_name(mechanism.trim())
        .ok_or_else(|| bad("the mechanism must be SCRAM-SHA-256 or SCRAM-SHA-512"))?;
    let body = rest
        .trim()
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .ok_or_else(|| bad("expected [name=...,password=...]"))?;
    let (mut name, mut password, mut iterations) = (None, None, 4096u32);
    for field in split_unquoted(body) {
        let (k, v) = field
            .split_once('=')
            .ok_or_else(|| bad("expected key=value"))?;
        let v = v.trim().trim_matches('"').to_string();
        match k.trim() {
            "name" => name = Some(v),
            "password" => password = Some(v),
            "iterations" => {
                iterations = v.parse().map_err(|_| bad("iterations must be a number"))?;
                if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
                    return Err(bad(&format!(
                        "iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"
                    )));
                }
            }
            other => return Err(bad(&format!("unknown field {other}"))),
        }
    }
    let name = name
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad("no name"))?;
    let password = password.ok_or_else(|| bad("no password"))?;
    let mut salt = vec![0u8; 32];
    rand::thread_rng().fill_bytes(&mut salt);
    let c = ScramCredential::derive(mechanism, password.as_bytes(), &salt, iterations);
    Ok(ScramCredentialRecord {
        name,
        mechanism: mechanism.wire(),
        salt: c.salt,
        stored_key: c.stored_key,
        server_key: c.server_key,
        iterations: iterations as i32,
    })
}

/// What `strand format` is asked (the binary parses its arguments): Kafka's
/// `kafka-storage format` options (`-t`, `-c`, `--standalone`,
/// `--no-initial-controllers`, `--ignore-formatted`) and Strand's own
/// (`--node-id`, `--initial-controllers`, `--override`).
#[derive(Debug, Clone, Default)]
pub struct FormatOptions {
    pub cluster_id: Option<String>,
    pub node_id: Option<i32>,
    /// `id@host:port,...`
    pub initial_controllers: Option<String>,
    pub ignore_formatted: bool,
    /// This node alone is the initial controller set.
    pub standalone: bool,
    pub config: Option<PathBuf>,
    pub overrides: Vec<String>,
    /// `--add-scram`: `MECHANISM=[name=...,password=...[,iterations=N]]`.
    pub add_scram: Vec<String>,
    /// `--release-version`: the metadata.version (a level name or release).
    pub release_version: Option<String>,
    /// `--feature name=level`.
    pub features: Vec<String>,
}

/// Formats the node's data directory: its cluster id, node id and initial
/// controllers. Without `--standalone` or `--initial-controllers` the
/// voters of `controller.quorum.voters` (if any) are the initial set.
pub fn format(opts: &FormatOptions) -> Result<String, String> {
    let mut overrides = opts.overrides.clone();
    if let Some(n) = opts.node_id {
        overrides.push(format!("node.id={n}"));
    }
    let initial = opts
        .initial_controllers
        .as_deref()
        .map(parse_initial_controllers)
        .transpose()?;
    // Kafka 4.x names each initial controller's metadata directory too
    // (`id@host:port:directory-id`): this node's becomes its first log
    // directory's id.
    let initial_dirs: Vec<(i32, uuid::Uuid)> = initial
        .iter()
        .flatten()
        .filter_map(|(v, d)| d.map(|d| (v.id, d)))
        .collect();
    let initial = initial.map(|voters| voters.into_iter().map(|(v, _)| v).collect::<Vec<_>>());
    let (ignore, standalone) = (opts.ignore_formatted, opts.standalone);
    let config =
        BrokerConfig::load(opts.config.as_deref(), &overrides).map_err(|e| e.to_string())?;
    let cluster_id = opts.cluster_id.clone().ok_or("--cluster-id is required")?;
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
    let mut bootstrap = feature_records(opts.release_version.as_deref(), &opts.features)?;
    for arg in &opts.add_scram {
        bootstrap.push(scram_record(arg).map(MetadataRecord::UserScramCredential)?);
    }
    let metadata_dir_id = initial_dirs
        .iter()
        .find(|(id, _)| *id == config.node_id)
        .map_or_else(new_directory_id, |(_, d)| *d);
    let meta = MetaProperties {
        cluster_id: cluster_id.clone(),
        node_id: config.node_id,
        initial_controllers,
        directory_id: Some(metadata_dir_id),
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    if !bootstrap.is_empty() {
        // Derived keys, not passwords, but a credential all the same: the
        // owner's alone.
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let json = serde_json::to_vec_pretty(&bootstrap).map_err(|e| e.to_string())?;
        let path = dir.join(BOOTSTRAP_FILE);
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| f.write_all(&json))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    write(dir, &meta).map_err(|e| format!("cannot write {}: {e}", dir.display()))?;
    // Every other log directory too, each with its own id (as
    // kafka-storage format does).
    for other in &config.log_dirs[1..] {
        let own = MetaProperties {
            directory_id: Some(new_directory_id()),
            ..meta.clone()
        };
        match read(other)? {
            Some(_) if ignore => continue,
            Some(_) => return Err(format!("{} is already formatted", other.display())),
            None => {}
        }
        write(other, &own).map_err(|e| format!("cannot write {}: {e}", other.display()))?;
    }
    Ok(format!(
        "Formatted {} for cluster {cluster_id}, node {}",
        dir.display(),
        config.node_id
    ))
}

#[cfg(test)]
mod tests {

    #[test]
    fn initial_controllers_in_kafka_4s_form_with_directory_ids() {
        let dir = encode_uuid(uuid::Uuid::new_v4());
        let parsed = parse_initial_controllers(&format!("1@a:9093:{dir},2@b:9093")).unwrap();
        assert_eq!(
            parsed,
            vec![
                (
                    Voter {
                        id: 1,
                        addr: "a:9093".into()
                    },
                    decode_uuid(&dir)
                ),
                (
                    Voter {
                        id: 2,
                        addr: "b:9093".into()
                    },
                    None
                ),
            ]
        );
        assert!(parse_initial_controllers("1@a:9093:not-an-id").is_err());
        assert!(parse_initial_controllers("1@a:port").is_err());
    }

    use super::*;

    /// `--release-version` and `--feature` as kafka-storage takes them.
    #[test]
    fn feature_levels_at_format() {
        let levels = |r: Option<&str>, f: &[&str]| -> Result<Vec<(String, i16)>, String> {
            let f: Vec<String> = f.iter().map(|s| s.to_string()).collect();
            Ok(feature_records(r, &f)?
                .into_iter()
                .map(|rec| match rec {
                    MetadataRecord::FeatureLevel { name, level } => (name, level),
                    other => panic!("{other:?}"),
                })
                .collect())
        };
        let pairs = |v: &[(&str, i16)]| -> Vec<(String, i16)> {
            v.iter().map(|(n, l)| (n.to_string(), *l)).collect()
        };
        assert_eq!(
            levels(None, &[]),
            Ok(pairs(&[
                ("metadata.version", 33),
                ("transaction.version", 2)
            ]))
        );
        assert_eq!(
            levels(Some("3.9"), &[]),
            Ok(pairs(&[("metadata.version", 21)]))
        );
        assert_eq!(
            levels(Some("3.9"), &["transaction.version=2"]),
            Ok(pairs(&[
                ("metadata.version", 21),
                ("transaction.version", 2)
            ]))
        );
        assert_eq!(
            levels(None, &["transaction.version=0"]),
            Ok(pairs(&[("metadata.version", 33)]))
        );
        assert_eq!(levels(Some("4.0-IV3"), &[]).unwrap()[0].1, 25);
        for (r, f, err) in [
            (Some("2.8"), vec![], "Unknown metadata.version '2.8'"),
            (None, vec!["foo.version=1"], "Unsupported feature: foo.version. Supported features are: transaction.version"),
            (None, vec!["transaction.version=3"], "No feature:transaction.version with feature level 3"),
            (None, vec!["transaction.version"], "Can't parse feature=level string transaction.version: equals sign not found."),
            (None, vec!["transaction.version=x"], "Can't parse feature=level string transaction.version=x: unable to parse x as a short."),
            (Some("3.9"), vec!["metadata.version=22"], "Use --release-version instead of --feature metadata.version=22 to avoid ambiguity."),
        ] {
            let e = levels(r, &f).unwrap_err();
            assert!(e.starts_with(err), "{e}");
        }
    }

    /// A cluster id never starts with '-' (62 in the URL-safe alphabet), so
    /// `format -t <id>` never reads it as an option; '_' (63) is fine.
    #[test]
    fn a_cluster_id_never_starts_with_a_dash() {
        assert_eq!(cluster_id_from(62u128 << 122), None);
        assert_eq!(cluster_id_from(u128::MAX >> 6 | 62u128 << 122), None);
        let underscore = cluster_id_from(63u128 << 122).unwrap();
        assert!(underscore.starts_with('_') && underscore.len() == 22);
        assert_eq!(
            cluster_id_from(0).as_deref(),
            Some("AAAAAAAAAAAAAAAAAAAAAA")
        );
        assert!((0..2_000).all(|_| !new_cluster_id().starts_with('-')));
    }

    fn opts(cluster_id: &str, logs: &str) -> FormatOptions {
        FormatOptions {
            cluster_id: Some(cluster_id.into()),
            overrides: vec![logs.into()],
            ..FormatOptions::default()
        }
    }

    #[test]
    fn add_scram_takes_kafkas_form_and_keeps_no_password() {
        let r =
            scram_record("SCRAM-SHA-512=[name=alice,password=\"alice-secret\",iterations=8192]")
                .unwrap();
        assert_eq!(
            (r.name.as_str(), r.mechanism, r.iterations),
            ("alice", 2, 8192)
        );
        // The stored key is the one a client proving that password derives.
        let m = Mechanism::from_name("SCRAM-SHA-512").expect("a mechanism");
        let c = ScramCredential::derive(m, b"alice-secret", &r.salt, 8192);
        assert_eq!(
            (c.stored_key, c.server_key),
            (r.stored_key.clone(), r.server_key.clone())
        );
        let quoted = scram_record("SCRAM-SHA-256=[name=carol,password=\"a,b]c\"]").unwrap();
        let c = ScramCredential::derive(
            Mechanism::from_name("SCRAM-SHA-256").expect("a mechanism"),
            b"a,b]c",
            &quoted.salt,
            4096,
        );
        assert_eq!(
            c.stored_key, quoted.stored_key,
            "a quoted password keeps its comma"
        );
        let r256 = scram_record("SCRAM-SHA-256=[name=bob,password=x]").unwrap();
        assert_eq!((r256.mechanism, r256.iterations), (1, 4096));
        for bad in [
            "SCRAM-SHA-1=[name=a,password=b]",
            "SCRAM-SHA-256=name=a,password=b",
            "SCRAM-SHA-256=[password=b]",
            "SCRAM-SHA-256=[name=a]",
            "SCRAM-SHA-256=[name=a,password=b,iterations=100]",
            "SCRAM-SHA-256=[name=a,password=b,colour=red]",
        ] {
            assert!(scram_record(bad).is_err(), "{bad}");
        }
        // Formatting writes the records for the first controller.
        let dir = tempfile::tempdir().unwrap();
        let logs = format!("log.dirs={}", dir.path().display());
        format(&FormatOptions {
            add_scram: vec!["SCRAM-SHA-512=[name=alice,password=pw]".into()],
            standalone: true,
            overrides: vec![
                logs,
                "listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093".into(),
            ],
            ..opts(&new_cluster_id(), "")
        })
        .unwrap();
        let records = read_bootstrap(dir.path()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(BOOTSTRAP_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        // The feature levels, then the credential.
        assert!(
            matches!(&records[..], [MetadataRecord::FeatureLevel { .. }, MetadataRecord::FeatureLevel { .. }, MetadataRecord::UserScramCredential(c)] if c.name == "alice"),
            "{records:?}"
        );
        assert!(!std::fs::read_to_string(dir.path().join(BOOTSTRAP_FILE))
            .unwrap()
            .contains("pw\""));
    }

    #[test]
    fn format_then_refuse_reformat() {
        let dir = tempfile::tempdir().unwrap();
        let logs = format!("log.dirs={}", dir.path().display());
        let id = new_cluster_id();
        let a = FormatOptions {
            node_id: Some(2),
            initial_controllers: Some("1@127.0.0.1:1,2@127.0.0.1:2".into()),
            ..opts(&id, &logs)
        };
        format(&a).unwrap();
        let meta = read(dir.path()).unwrap().unwrap();
        assert_eq!(
            (
                meta.cluster_id.as_str(),
                meta.node_id,
                meta.initial_controllers.len()
            ),
            (id.as_str(), 2, 2)
        );
        assert!(format(&a).unwrap_err().contains("already formatted"));
        let again = FormatOptions {
            ignore_formatted: true,
            ..a.clone()
        };
        assert!(format(&again).is_ok());
    }

    #[test]
    fn format_errors() {
        let dir = tempfile::tempdir().unwrap();
        let logs = format!("log.dirs={}", dir.path().display());
        let id = new_cluster_id();
        let no_id = FormatOptions {
            cluster_id: None,
            node_id: Some(1),
            ..opts("", &logs)
        };
        assert!(format(&no_id).unwrap_err().contains("--cluster-id"));
        assert!(format(&opts("bad id!", &logs)).is_err());
        let e = format(&FormatOptions {
            node_id: Some(3),
            initial_controllers: Some("1@h:1".into()),
            ..opts(&id, &logs)
        })
        .unwrap_err();
        assert!(e.contains("not in the initial controllers"), "{e}");
        assert!(format(&FormatOptions {
            initial_controllers: Some("x@h:1".into()),
            ..opts(&id, &logs)
        })
        .is_err());
        assert!(format(&FormatOptions {
            initial_controllers: Some("1@h:1".into()),
            standalone: true,
            ..opts(&id, &logs)
        })
        .unwrap_err()
        .contains("exclude each other"));
    }

    #[test]
    fn only_a_lone_combined_node_formats_itself() {
        let dir = tempfile::tempdir().unwrap();
        let logs = format!("log.dirs={}", dir.path().display());
        let cfg = |extra: &[&str]| {
            let mut overrides = vec![logs.clone()];
            overrides.extend(extra.iter().map(|e| e.to_string()));
            BrokerConfig::load(None, &overrides).unwrap()
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
