//! What ships besides the binary, checked where no container runtime or
//! init system runs: LICENSE is the licence Cargo.toml names; the systemd
//! unit passes `systemd-analyze verify` (when systemd's tools are here) and
//! keeps its hardening; the container definition builds in one stage and
//! runs in another, as a user without rights, with its data on a volume.

mod common;

use std::path::Path;

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_license_is_the_one_cargo_names() {
    let cargo = read("Cargo.toml");
    assert!(cargo.contains("license = \"Apache-2.0\""));
    let license = read("LICENSE");
    assert!(license.contains("Apache License") && license.contains("Version 2.0, January 2004"));
    assert!(
        license.contains("END OF TERMS AND CONDITIONS"),
        "the whole licence"
    );
}

#[test]
fn the_systemd_unit_verifies_and_is_hardened() {
    let unit = read("packaging/strand.service");
    for line in [
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "DynamicUser=yes",
        "StateDirectory=strand",
        "KillSignal=SIGTERM",
        "CapabilityBoundingSet=",
        "SystemCallFilter=@system-service",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} missing");
    }
    let analyze = Path::new("/usr/bin/systemd-analyze");
    if !analyze.exists() {
        eprintln!("systemd-analyze is not installed: the unit is not verified");
        return;
    }
    // verify needs the binary the unit starts: the one just built.
    let dir = tempfile::tempdir().unwrap();
    let unit_path = dir.path().join("strand.service");
    std::fs::write(
        &unit_path,
        unit.replace(
            "/usr/local/bin/strand",
            &common::strand_bin().display().to_string(),
        ),
    )
    .unwrap();
    let out = std::process::Command::new(analyze)
        .arg("verify")
        .arg(&unit_path)
        .output()
        .unwrap();
    let said =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && said.trim().is_empty(), "{said}");
}

#[test]
fn the_container_runs_as_a_user_on_a_volume() {
    let file = read("packaging/Containerfile");
    let from: Vec<&str> = file.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(from.len(), 2, "a build stage and a runtime stage: {from:?}");
    assert!(
        from[0].ends_with(" AS build") && !from[1].contains("rust"),
        "{from:?}"
    );
    let user = file
        .lines()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("a USER line");
    assert!(user != "root" && user != "0", "runs as {user}");
    assert!(file.lines().any(|l| l == "VOLUME /var/lib/strand"));
    let entry = file.lines().find(|l| l.starts_with("ENTRYPOINT")).unwrap();
    assert!(entry.contains("log.dirs=/var/lib/strand/data"), "{entry}");
    assert!(
        entry.contains("strand.http.listener=0.0.0.0:9464"),
        "{entry}"
    );
    // The build uses the lock file, as scripts/broker.sh does.
    assert!(file.contains("cargo build --release --locked --bin strand"));
}
