//! The layout stays honest: dependency arrows between the workspace's crates
//! point one way, as ARCHITECTURE.md draws them, and no file of the broker
//! imports a file that (directly or through others) imports it back.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Each workspace crate and the workspace crates its code may depend on
/// (normal dependencies). A crate missing here fails the test, so a new one
/// is placed deliberately.
const ALLOWED: &[(&str, &[&str])] = &[
    ("strand-types", &[]),
    ("strand-protocol", &[]),
    ("strand-metadata", &["strand-types", "strand-protocol"]),
    ("strand-log", &["strand-types", "strand-protocol"]),
    ("strand-txn", &["strand-types", "strand-protocol"]),
    ("strand-replication", &["strand-types", "strand-protocol"]),
    ("strand-group", &["strand-types", "strand-protocol"]),
    ("strand-security", &["strand-protocol"]),
    (
        "strand-partition",
        &[
            "strand-types",
            "strand-protocol",
            "strand-log",
            "strand-txn",
            "strand-replication",
        ],
    ),
    (
        "strand-controller",
        &["strand-types", "strand-protocol", "strand-metadata"],
    ),
    (
        "strand-sim",
        &[
            "strand-types",
            "strand-protocol",
            "strand-metadata",
            "strand-log",
            "strand-replication",
            "strand-partition",
            "strand-controller",
            "strand-txn",
            "strand-group",
            "strand-broker",
        ],
    ),
    ("strand-faultfs", &[]),
    // Histories and their checker: pure, and nothing of ours.
    ("strand-chaos", &[]),
    // The chaos runner: clusters through the harness, judged by the checker.
    (
        "strand-chaos-runner",
        &["strand-chaos", "strand-compat-tests"],
    ),
    ("strand-compat-tests", &[]),
    (
        "strand-broker",
        &[
            "strand-types",
            "strand-protocol",
            "strand-metadata",
            "strand-log",
            "strand-txn",
            "strand-replication",
            "strand-group",
            "strand-partition",
            "strand-security",
        ],
    ),
    // The binary: starts the controller and the broker.
    (
        "strand",
        &[
            "strand-types",
            "strand-broker",
            "strand-controller",
            "strand-partition",
        ],
    ),
];

/// Only the controller links the consensus and its store.
const QUORUM_ONLY: &[&str] = &["openraft", "rocksdb"];
const QUORUM_CRATES: &[&str] = &["strand-controller"];

struct Package {
    name: String,
    /// (dependency name, kind: None for normal, "dev", "build").
    deps: Vec<(String, Option<String>)>,
}

fn workspace_packages() -> Vec<Package> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).expect("metadata is JSON");
    meta["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .map(|p| Package {
            name: p["name"].as_str().expect("name").to_string(),
            deps: p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .map(|d| {
                    (
                        d["name"].as_str().expect("dependency name").to_string(),
                        d["kind"].as_str().map(str::to_string),
                    )
                })
                .collect(),
        })
        .collect()
}

#[test]
fn crate_dependencies_point_one_way() {
    let packages = workspace_packages();
    let members: BTreeSet<&str> = packages.iter().map(|p| p.name.as_str()).collect();
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(k, v)| (*k, v.iter().copied().collect()))
        .collect();
    let mut wrong = Vec::new();
    for p in &packages {
        let Some(may) = allowed.get(p.name.as_str()) else {
            wrong.push(format!("{} is not placed in ALLOWED", p.name));
            continue;
        };
        for (dep, kind) in &p.deps {
            let normal = kind.as_deref() != Some("dev");
            if normal && members.contains(dep.as_str()) && !may.contains(dep.as_str()) {
                wrong.push(format!("{} -> {dep} is not an allowed arrow", p.name));
            }
            if QUORUM_ONLY.contains(&dep.as_str()) && !QUORUM_CRATES.contains(&p.name.as_str()) {
                wrong.push(format!(
                    "{} links {dep}, which only the controller may",
                    p.name
                ));
            }
            // Tests may use lower crates, never a crate above them.
            if !normal && members.contains(dep.as_str()) && reaches(&allowed, dep, &p.name) {
                wrong.push(format!(
                    "{} dev-depends on {dep}, which depends on it",
                    p.name
                ));
            }
        }
    }
    // Every allowed arrow is acyclic, so the table itself is a layering.
    for (name, _) in ALLOWED {
        for next in &allowed[name] {
            assert!(
                !reaches(&allowed, next, name),
                "ALLOWED has a cycle through {name} and {next}"
            );
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn reaches(allowed: &BTreeMap<&str, BTreeSet<&str>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_string()];
    while let Some(c) = stack.pop() {
        if c == to {
            return true;
        }
        if seen.insert(c.clone()) {
            if let Some(next) = allowed.get(c.as_str()) {
                stack.extend(next.iter().map(|n| n.to_string()));
            }
        }
    }
    false
}

/// A source file of the broker binary and the module path it defines.
struct SourceFile {
    module: Vec<String>,
    /// Child modules it declares with `mod name;`.
    children: BTreeSet<String>,
    /// Its code up to its first `#[cfg(test)]` (tests, kept at the end of
    /// a file, may reach anywhere), without comments.
    code: String,
}

fn module_of(root: &Path, path: &Path) -> Vec<String> {
    let rel = path.strip_prefix(root).expect("under src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "main" | "lib")
    ) {
        parts.pop();
    }
    parts
}

fn source_files(root: &Path) -> Vec<SourceFile> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path: PathBuf = entry.expect("entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("read source");
                let code: String = text
                    .lines()
                    .take_while(|l| l.trim() != "#[cfg(test)]")
                    .map(|l| match l.find("//") {
                        Some(i) if !l[..i].contains('"') => &l[..i],
                        _ => l,
                    })
                    .collect::<Vec<_>>()
                    .join("\n");
                let children = code
                    .lines()
                    .filter_map(|l| {
                        let l = l.trim();
                        let l = l.strip_prefix("pub ").unwrap_or(l);
                        l.strip_prefix("mod ")?
                            .strip_suffix(';')
                            .map(str::to_string)
                    })
                    .collect();
                out.push(SourceFile {
                    module: module_of(root, &path),
                    children,
                    code,
                });
            }
        }
    }
    out
}

/// Paths written in `code` as `a::b::c` (identifier segments joined by
/// `::`), each as its segments.
fn paths_in(code: &str) -> Vec<Vec<String>> {
    let bytes = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    while i < bytes.len() {
        if ident(bytes[i]) && (i == 0 || !(ident(bytes[i - 1]) || bytes[i - 1] == b':')) {
            let mut segs = Vec::new();
            let mut j = i;
            loop {
                let start = j;
                while j < bytes.len() && ident(bytes[j]) {
                    j += 1;
                }
                segs.push(code[start..j].to_string());
                if code[j..].starts_with("::") && bytes.get(j + 2).is_some_and(|b| ident(*b)) {
                    j += 2;
                } else {
                    break;
                }
            }
            // `a::b` names b in a; `a::{...}` names a.
            if segs.len() > 1 || code[j..].starts_with("::{") {
                out.push(segs);
            }
            i = j;
        } else {
            i += 1;
        }
    }
    out
}

/// Every crate's source directory.
const SOURCE_DIRS: &[&str] = &[
    "src",
    "types/src",
    "protocol/src",
    "metadata/src",
    "log/src",
    "txn/src",
    "replication/src",
    "group/src",
    "partition/src",
    "controller/src",
    "broker/src",
    "sim/src",
    "compat-tests/src",
];

#[test]
fn no_file_imports_a_file_that_imports_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for dir in SOURCE_DIRS {
        check_no_cycle(&root.join(dir), dir == &"broker/src");
    }
}

fn check_no_cycle(root: &Path, broker: bool) {
    let files = source_files(root);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    // The longest prefix of `path` that names a file's module.
    let file_of = |path: &[String]| -> Vec<String> {
        (0..=path.len())
            .rev()
            .map(|k| path[..k].to_vec())
            .find(|p| modules.contains(p))
            .unwrap_or_default()
    };
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for f in &files {
        let mut targets = BTreeSet::new();
        for path in paths_in(&f.code) {
            let absolute: Vec<String> = match path[0].as_str() {
                "crate" => path[1..].to_vec(),
                "super" => {
                    let mut m = f.module.clone();
                    let mut rest = &path[..];
                    while rest.first().is_some_and(|s| s == "super") {
                        m.pop();
                        rest = &rest[1..];
                    }
                    m.extend(rest.iter().cloned());
                    m
                }
                "self" => f.module.iter().chain(&path[1..]).cloned().collect(),
                first if f.children.contains(first) => {
                    f.module.iter().chain(&path).cloned().collect()
                }
                _ => continue,
            };
            let target = file_of(&absolute);
            if target != f.module {
                targets.insert(target);
            }
        }
        edges.insert(f.module.clone(), targets);
    }
    // Depth-first search for a cycle, reporting its files.
    fn visit(
        m: &Vec<String>,
        edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        stack: &mut Vec<Vec<String>>,
        done: &mut BTreeSet<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        if let Some(at) = stack.iter().position(|s| s == m) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(m.clone());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        stack.push(m.clone());
        for next in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, edges, stack, done) {
                return Some(c);
            }
        }
        stack.pop();
        done.insert(m.clone());
        None
    }
    let name = |m: &Vec<String>| {
        if m.is_empty() {
            "the crate root".to_string()
        } else {
            m.join("::")
        }
    };
    let mut done = BTreeSet::new();
    for m in edges.keys() {
        if let Some(cycle) = visit(m, &edges, &mut Vec::new(), &mut done) {
            let names: Vec<String> = cycle.iter().map(name).collect();
            panic!(
                "import cycle between files of {}: {}",
                root.display(),
                names.join(" -> ")
            );
        }
    }
    if broker {
        // The graph is not vacuous: the server reaches the handlers, the
        // handlers the node, the node the replica manager.
        let has = |a: &str, b: &str| {
            edges
                .get(&vec![a.to_string()])
                .is_some_and(|t| t.contains(&vec![b.to_string()]))
        };
        assert!(
            has("server", "handlers") && has("handlers", "node") && has("node", "replica_manager")
        );
    }
}

/// The broker's data path links no consensus: nothing the broker depends
/// on, directly or through other crates of ours, is a quorum crate (it
/// reaches the controller through `strand_metadata::controller_api`).
#[test]
fn the_broker_does_not_link_the_quorum() {
    let packages = workspace_packages();
    let deps: BTreeMap<&str, Vec<&str>> = packages
        .iter()
        .map(|p| {
            let normal = p
                .deps
                .iter()
                .filter(|(_, kind)| kind.as_deref() != Some("dev"))
                .map(|(d, _)| d.as_str())
                .collect();
            (p.name.as_str(), normal)
        })
        .collect();
    let mut seen = BTreeSet::new();
    let mut todo = vec!["strand-broker"];
    while let Some(c) = todo.pop() {
        if !seen.insert(c) {
            continue;
        }
        todo.extend(deps.get(c).into_iter().flatten().copied());
    }
    let linked: Vec<&str> = seen
        .iter()
        .copied()
        .filter(|c| QUORUM_CRATES.contains(c) || QUORUM_ONLY.contains(c))
        .collect();
    assert!(linked.is_empty(), "the broker links {linked:?}");
}
