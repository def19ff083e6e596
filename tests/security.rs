//! Security against real clients (issue 18): a broker with a PLAINTEXT
//! listener (the inter-broker one), a SASL_SSL listener (SCRAM-SHA-512 and
//! PLAIN), an SSL listener that requires client certificates, and a
//! SASL_PLAINTEXT listener for the protocol-level checks. Certificates come
//! from a CA made here (rcgen); SCRAM credentials are created through
//! AlterUserScramCredentials as Kafka's admin clients do.
//!
//! What a user relies on: a client with the right credentials produces and
//! reads back every message (acks=all, idempotent, read_committed); a wrong
//! password, an unknown user, a certificate from another CA, an expired
//! certificate or none at all are refused with the right error; nothing
//! but ApiVersions and the SASL exchange is served before authentication.

mod common;

use common::Client;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, KeyUsagePurpose};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use strand_compat_tests::harness::free_loopback_port;
use strand_compat_tests::Broker;

/// A CA and what it signs, written as PEM files.
struct Pki {
    dir: tempfile::TempDir,
}

struct Issuer {
    params: CertificateParams,
    key: KeyPair,
}

impl Issuer {
    fn ca(name: &str) -> Issuer {
        let mut params = CertificateParams::new(vec![]).unwrap();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Issuer {
            params,
            key: KeyPair::generate().unwrap(),
        }
    }

    fn cert_pem(&self) -> String {
        self.params.clone().self_signed(&self.key).unwrap().pem()
    }

    /// A leaf certificate: (certificate PEM, key PEM).
    fn sign(&self, cn: &str, sans: &[&str], expired: bool) -> (String, String) {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Strand Tests");
        params.distinguished_name.push(DnType::CommonName, cn);
        if expired {
            params.not_before = rcgen::date_time_ymd(2020, 1, 1);
            params.not_after = rcgen::date_time_ymd(2021, 1, 1);
        }
        let key = KeyPair::generate().unwrap();
        let issuer = rcgen::Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

impl Pki {
    fn new() -> (Pki, Issuer) {
        let dir = tempfile::Builder::new()
            .prefix("strand-pki-")
            .tempdir()
            .unwrap();
        (Pki { dir }, Issuer::ca("Strand Test CA"))
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    }
}

fn path_str(p: &Path) -> String {
    p.to_str().unwrap().to_string()
}

fn kcat(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    // Without cargo's LD_LIBRARY_PATH: it names the librdkafka the rdkafka
    // crate built (no TLS), which would replace kcat's own.
    let mut child = Command::new("kcat")
        .env_remove("LD_LIBRARY_PATH")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat runs (the test command installs it)");
    if let Some(text) = stdin {
        child
            .stdin
            .as_mut()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The Python interpreter with confluent-kafka (`STRAND_PYTHON`).
fn python() -> String {
    std::env::var("STRAND_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn py(args: &[&str]) -> String {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("compat-tests/clients/security_client.py");
    let out = Command::new(python())
        .arg(script)
        .args(args)
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        ["ok", "err", "answered", "refused"]
            .iter()
            .any(|p| stdout.starts_with(p)),
        "security_client.py {args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

struct Secured {
    broker: Broker,
    pki: Pki,
    sasl_ssl: String,
    ssl: String,
    sasl_plain: String,
    ca: PathBuf,
    issuer: Issuer,
}

fn start() -> Secured {
    let (pki, ca) = Pki::new();
    let ca_file = pki.write("ca.pem", &ca.cert_pem());
    let (cert, key) = ca.sign("localhost", &["localhost", "127.0.0.1"], false);
    let keystore = pki.write("broker.pem", &format!("{key}{cert}"));
    let (p_sasl_ssl, p_ssl, p_sasl) = (
        free_loopback_port().unwrap(),
        free_loopback_port().unwrap(),
        free_loopback_port().unwrap(),
    );
    let sasl_ssl = format!("127.0.0.1:{p_sasl_ssl}");
    let ssl = format!("127.0.0.1:{p_ssl}");
    let sasl_plain = format!("127.0.0.1:{p_sasl}");
    let keystore = path_str(&keystore);
    let ca_path = path_str(&ca_file);
    let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_carol="carol-secret";"#;
    let extra = [
        ("ssl.keystore.type", "PEM"),
        ("ssl.keystore.location", keystore.as_str()),
        ("ssl.truststore.type", "PEM"),
        ("ssl.truststore.location", ca_path.as_str()),
        ("listener.name.ssl.ssl.client.auth", "required"),
        (
            "listener.name.ssl.ssl.principal.mapping.rules",
            "RULE:^CN=([^,]*),.*$/$1/L,DEFAULT",
        ),
        (
            "listener.name.sasl_ssl.sasl.enabled.mechanisms",
            "SCRAM-SHA-512,PLAIN",
        ),
        ("listener.name.sasl_ssl.plain.sasl.jaas.config", jaas),
        (
            "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
            "PLAIN,SCRAM-SHA-256",
        ),
        ("listener.name.sasl_plaintext.plain.sasl.jaas.config", jaas),
        (
            "listener.name.sasl_plaintext.connections.max.reauth.ms",
            "2000",
        ),
        ("auto.create.topics.enable", "true"),
        ("offsets.topic.replication.factor", "1"),
        ("transaction.state.log.replication.factor", "1"),
        ("transaction.state.log.min.isr", "1"),
    ];
    let broker = Broker::start_with_listeners(
        &common::strand_bin(),
        &[
            ("SASL_SSL", sasl_ssl.as_str()),
            ("SSL", ssl.as_str()),
            ("SASL_PLAINTEXT", sasl_plain.as_str()),
        ],
        &extra,
    )
    .unwrap();
    Secured {
        broker,
        pki,
        sasl_ssl,
        ssl,
        sasl_plain,
        ca: ca_file,
        issuer: ca,
    }
}

#[test]
fn sasl_ssl_scram_and_mutual_tls_with_kcat_and_confluent_kafka() {
    let s = start();
    let plaintext = s.broker.addr();
    let ca = path_str(&s.ca);
    // A SCRAM user, made through the admin API (over PLAINTEXT, the
    // inter-broker listener; no ACLs yet).
    assert_eq!(
        py(&[
            "alter",
            &plaintext,
            "alice",
            "SCRAM-SHA-512",
            "alice-secret"
        ]),
        "ok"
    );
    assert_eq!(
        py(&["describe", &plaintext, "alice"]),
        "ok SCRAM_SHA_512:8192"
    );
    let scram = |user: &str, password: &str| -> Vec<String> {
        [
            "security.protocol=SASL_SSL".to_string(),
            "sasl.mechanism=SCRAM-SHA-512".into(),
            format!("sasl.username={user}"),
            format!("sasl.password={password}"),
            format!("ssl.ca.location={ca}"),
        ]
        .to_vec()
    };
    let args = |bootstrap: &str, cmd: &[&str], conf: &[String]| -> Vec<String> {
        let mut v: Vec<String> = vec![cmd[0].into(), bootstrap.into()];
        v.extend(cmd[1..].iter().map(|s| s.to_string()));
        v.extend(conf.iter().cloned());
        v
    };
    let run = |v: Vec<String>| py(&v.iter().map(String::as_str).collect::<Vec<_>>());
    // confluent-kafka: every message produced with acks=all comes back.
    assert_eq!(
        run(args(
            &s.sasl_ssl,
            &["roundtrip", "scram-topic", "500"],
            &scram("alice", "alice-secret")
        )),
        "ok 500"
    );
    // Wrong password and unknown user: refused as authentication failures.
    for (user, password) in [("alice", "wrong"), ("mallory", "alice-secret")] {
        let out = run(args(
            &s.sasl_ssl,
            &["roundtrip", "scram-topic", "1"],
            &scram(user, password),
        ));
        assert!(
            out.starts_with("err _AUTHENTICATION") && out.contains("Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"),
            "{user}/{password}: {out}"
        );
    }
    // kcat over SASL_SSL: SCRAM-SHA-512 and PLAIN.
    let lines: String = (0..1000).map(|i| format!("kcat-{i}\n")).collect();
    let kcat_conf = |conf: &[String]| -> Vec<String> {
        conf.iter()
            .flat_map(|c| ["-X".to_string(), c.clone()])
            .collect()
    };
    let with = |base: &[&str], conf: &[String]| -> Vec<String> {
        let mut v: Vec<String> = base.iter().map(|s| s.to_string()).collect();
        v.extend(kcat_conf(conf));
        v
    };
    let kc = |v: Vec<String>, stdin: Option<&str>| {
        kcat(&v.iter().map(String::as_str).collect::<Vec<_>>(), stdin)
    };
    let plain_carol = [
        "security.protocol=SASL_SSL".to_string(),
        "sasl.mechanism=PLAIN".into(),
        "sasl.username=carol".into(),
        "sasl.password=carol-secret".into(),
        format!("ssl.ca.location={ca}"),
    ];
    for (conf, topic) in [
        (scram("alice", "alice-secret"), "kcat-scram"),
        (plain_carol.to_vec(), "kcat-plain"),
    ] {
        let (ok, _, err) = kc(
            with(
                &[
                    "-b",
                    &s.sasl_ssl,
                    "-P",
                    "-t",
                    topic,
                    "-X",
                    "acks=all",
                    "-X",
                    "enable.idempotence=true",
                ],
                &conf,
            ),
            Some(&lines),
        );
        assert!(ok, "kcat produce {topic}: {err}");
        let (ok, out, err) = kc(
            with(
                &[
                    "-b",
                    &s.sasl_ssl,
                    "-C",
                    "-t",
                    topic,
                    "-o",
                    "beginning",
                    "-e",
                    "-q",
                ],
                &conf,
            ),
            None,
        );
        assert!(ok, "kcat consume {topic}: {err}");
        assert_eq!(out, lines, "{topic}: every line back, in order");
    }
    // Mutual TLS: the CA's client certificate is served.
    let (cert, key) = s.issuer.sign("Alice-Client", &[], false);
    let client_cert = s.pki.write("client.pem", &cert);
    let client_key = s.pki.write("client.key", &key);
    let mtls = |cert: &Path, key: &Path| -> Vec<String> {
        vec![
            "security.protocol=SSL".into(),
            format!("ssl.ca.location={ca}"),
            format!("ssl.certificate.location={}", path_str(cert)),
            format!("ssl.key.location={}", path_str(key)),
        ]
    };
    let (ok, _, err) = kc(
        with(
            &["-b", &s.ssl, "-P", "-t", "kcat-mtls", "-X", "acks=all"],
            &mtls(&client_cert, &client_key),
        ),
        Some(&lines),
    );
    assert!(ok, "kcat produce over mutual TLS: {err}");
    let (ok, out, err) = kc(
        with(
            &[
                "-b",
                &s.ssl,
                "-C",
                "-t",
                "kcat-mtls",
                "-o",
                "beginning",
                "-e",
                "-q",
            ],
            &mtls(&client_cert, &client_key),
        ),
        None,
    );
    assert!(ok, "kcat consume over mutual TLS: {err}");
    assert_eq!(out, lines);
    assert_eq!(
        run(args(
            &s.ssl,
            &["roundtrip", "py-mtls", "200"],
            &mtls(&client_cert, &client_key)
        )),
        "ok 200"
    );
    // Refused: a certificate of another CA, an expired one, none.
    let rogue = Issuer::ca("Rogue CA");
    let (rcert, rkey) = rogue.sign("Alice-Client", &[], false);
    let (ecert, ekey) = s.issuer.sign("Alice-Client", &[], true);
    let cases = [
        (
            "untrusted",
            Some((
                s.pki.write("rogue.pem", &rcert),
                s.pki.write("rogue.key", &rkey),
            )),
        ),
        (
            "expired",
            Some((
                s.pki.write("expired.pem", &ecert),
                s.pki.write("expired.key", &ekey),
            )),
        ),
        ("no certificate", None),
    ];
    for (what, files) in cases {
        let conf = match &files {
            Some((c, k)) => mtls(c, k),
            None => vec![
                "security.protocol=SSL".into(),
                format!("ssl.ca.location={ca}"),
            ],
        };
        let out = run(args(&s.ssl, &["roundtrip", "py-mtls-refused", "1"], &conf));
        assert!(
            out.starts_with("err _SSL")
                || out.starts_with("err _TRANSPORT")
                || out.starts_with("err _ALL_BROKERS_DOWN"),
            "{what}: {out}"
        );
        let (ok, _, err) = kc(with(&["-b", &s.ssl, "-L", "-m", "5"], &conf), None);
        assert!(!ok, "{what}: kcat -L must fail; {err}");
    }
    // A client that does not trust the broker's CA refuses it.
    let other_ca = s.pki.write("rogue-ca.pem", &rogue.cert_pem());
    let out = run(args(
        &s.sasl_ssl,
        &["roundtrip", "scram-topic", "1"],
        &[
            "security.protocol=SASL_SSL".into(),
            "sasl.mechanism=SCRAM-SHA-512".into(),
            "sasl.username=alice".into(),
            "sasl.password=alice-secret".into(),
            format!("ssl.ca.location={}", path_str(&other_ca)),
        ],
    ));
    assert!(
        out.starts_with("err _SSL")
            || out.starts_with("err _TRANSPORT")
            || out.starts_with("err _ALL_BROKERS_DOWN"),
        "untrusted broker: {out}"
    );
}

fn handshake(c: &mut Client, mechanism: &str) -> SaslHandshakeResponse {
    c.call(
        ApiKey::SaslHandshake,
        1,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_string(mechanism.into())),
    )
    .unwrap()
}

fn authenticate(c: &mut Client, version: i16, token: &[u8]) -> SaslAuthenticateResponse {
    c.call(
        ApiKey::SaslAuthenticate,
        version,
        &SaslAuthenticateRequest::default().with_auth_bytes(bytes::Bytes::copy_from_slice(token)),
    )
    .unwrap()
}

fn metadata(c: &mut Client) -> std::io::Result<MetadataResponse> {
    c.call(
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(None),
    )
}

/// The SASL exchange on the wire, as Kafka runs it: only ApiVersions and
/// SaslHandshake before authentication, a refused mechanism or password
/// answered and the connection closed, the session lifetime reported and
/// enforced (KIP-368), and re-authentication on the same connection.
#[test]
fn nothing_is_served_before_sasl_authentication() {
    let s = start();
    let addr = &s.sasl_plain;
    // Metadata first: closed without an answer.
    let mut c = Client::connect(addr).unwrap();
    assert!(metadata(&mut c).is_err(), "no answer before authentication");
    // ApiVersions is served, then a mechanism not enabled is refused with
    // the enabled ones, and the connection closed.
    let mut c = Client::connect(addr).unwrap();
    let v: ApiVersionsResponse = c
        .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .unwrap();
    assert_eq!(v.error_code, 0);
    let h = handshake(&mut c, "SCRAM-SHA-512");
    assert_eq!(h.error_code, 33, "UNSUPPORTED_SASL_MECHANISM");
    let enabled: Vec<&str> = h.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(enabled, ["PLAIN", "SCRAM-SHA-256"]);
    assert!(c.is_closed());
    // Between handshake and authentication, nothing else either.
    let mut c = Client::connect(addr).unwrap();
    assert_eq!(handshake(&mut c, "PLAIN").error_code, 0);
    assert!(metadata(&mut c).is_err());
    // A wrong password: SASL_AUTHENTICATION_FAILED with Kafka's message, closed.
    let mut c = Client::connect(addr).unwrap();
    handshake(&mut c, "PLAIN");
    let a = authenticate(&mut c, 2, b"\0carol\0nope");
    assert_eq!(a.error_code, 58);
    assert_eq!(
        a.error_message.as_deref(),
        Some("Authentication failed: Invalid username or password")
    );
    assert!(c.is_closed());
    // The right one: served, with the session's lifetime.
    let mut c = Client::connect(addr).unwrap();
    handshake(&mut c, "PLAIN");
    let a = authenticate(&mut c, 2, b"\0carol\0carol-secret");
    assert_eq!((a.error_code, a.session_lifetime_ms), (0, 2000));
    assert!(!metadata(&mut c).unwrap().brokers.is_empty());
    // Re-authentication renews the session on the same connection.
    assert_eq!(handshake(&mut c, "PLAIN").error_code, 0);
    assert_eq!(
        authenticate(&mut c, 2, b"\0carol\0carol-secret").error_code,
        0
    );
    assert!(metadata(&mut c).is_ok());
    // Past its lifetime without re-authenticating, the connection is closed.
    // (The session's end is a time, not a condition to await.)
    std::thread::sleep(std::time::Duration::from_millis(2100));
    assert!(
        metadata(&mut c).is_err(),
        "an expired session serves nothing"
    );
    // SaslHandshake v0 (older clients): the tokens follow as bare frames.
    let mut c = Client::connect(addr).unwrap();
    let h: SaslHandshakeResponse = c
        .call(
            ApiKey::SaslHandshake,
            0,
            &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
        )
        .unwrap();
    assert_eq!(h.error_code, 0);
    c.send_raw(b"\0carol\0carol-secret").unwrap();
    assert!(
        c.read_frame().unwrap().is_empty(),
        "PLAIN's empty final token"
    );
    assert!(!metadata(&mut c).unwrap().brokers.is_empty());
    let mut c = Client::connect(addr).unwrap();
    c.call::<_, SaslHandshakeResponse>(
        ApiKey::SaslHandshake,
        0,
        &SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN")),
    )
    .unwrap();
    c.send_raw(b"\0carol\0wrong").unwrap();
    assert!(
        c.is_closed(),
        "v0 has no error answer: a failed exchange closes"
    );
    // The SASL APIs on a listener without SASL: ILLEGAL_SASL_STATE.
    let mut p = Client::connect(&s.broker.addr()).unwrap();
    assert_eq!(handshake(&mut p, "PLAIN").error_code, 34);
    assert!(metadata(&mut p).is_ok(), "and the connection is kept");
}

/// Every node's key store (key and chain) and trust store, as PEM files.
fn with_pem_stores(
    spec: strand_compat_tests::ClusterSpec,
    keystore: &str,
    ca_file: &str,
) -> strand_compat_tests::ClusterSpec {
    spec.with_override("ssl.keystore.type", "PEM")
        .with_override("ssl.keystore.location", keystore)
        .with_override("ssl.truststore.type", "PEM")
        .with_override("ssl.truststore.location", ca_file)
}

/// Three brokers replicate over a SASL_SSL inter-broker listener (mutual
/// TLS and SASL/PLAIN, sessions of 1.5 s): every follower fetch goes
/// through it, and the brokers re-authenticate before their sessions end
/// (KIP-368; none is closed for an expired session). With
/// min.insync.replicas=3, an acks=all write succeeds only once both
/// followers fetched it over that listener (with a wrong inter-broker
/// password the same writes time out: checked by hand).
#[test]
fn three_brokers_replicate_over_sasl_ssl() {
    use strand_compat_tests::{Cluster, ClusterSpec};
    let (pki, ca) = Pki::new();
    let ca_file = path_str(&pki.write("ca.pem", &ca.cert_pem()));
    let (cert, key) = ca.sign("broker", &["localhost", "127.0.0.1"], false);
    let keystore = path_str(&pki.write("broker.pem", &format!("{key}{cert}")));
    let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" user_broker="broker-secret";"#;
    let mut spec = ClusterSpec::combined(3).with_extra_listener("INTERNAL");
    for (k, v) in [
        (
            "listener.security.protocol.map",
            "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,INTERNAL:SASL_SSL",
        ),
        ("inter.broker.listener.name", "INTERNAL"),
        ("sasl.mechanism.inter.broker.protocol", "PLAIN"),
        ("listener.name.internal.sasl.enabled.mechanisms", "PLAIN"),
        ("listener.name.internal.plain.sasl.jaas.config", jaas),
        ("listener.name.internal.ssl.client.auth", "required"),
        // Sessions of 1.5 s between brokers: they must re-authenticate.
        ("listener.name.internal.connections.max.reauth.ms", "1500"),
    ] {
        spec = spec.with_override(k, v);
    }
    spec = with_pem_stores(spec, &keystore, &ca_file);
    let cluster = Cluster::start(&common::strand_bin(), spec).unwrap();
    let bootstrap = cluster.bootstrap();
    let first = cluster.broker_addr(1).unwrap();
    let mut c = Client::connect(&first).unwrap();
    assert_eq!(
        common::create_topic_with(&mut c, "replicated", 3, 3, &[("min.insync.replicas", "3")])
            .unwrap(),
        0
    );
    assert_eq!(
        py(&["roundtrip", &bootstrap, "replicated", "300"]),
        "ok 300"
    );
    // Every broker's follower fetches re-authenticate before their session
    // ends (KIP-368), so no broker closes another's connection for an
    // expired session.
    let log = |id: i32| std::fs::read_to_string(cluster.log_path(id)).unwrap_or_default();
    for id in cluster.broker_ids() {
        common::eventually(
            "a re-authenticated inter-broker connection",
            std::time::Duration::from_secs(30),
            || {
                log(id)
                    .contains("re-authenticated an inter-broker connection")
                    .then_some(())
            },
        );
    }
    for id in cluster.broker_ids() {
        assert!(
            !log(id).contains("SASL session expired"),
            "node {id} closed a connection whose session expired"
        );
    }
    // The internal listener refuses a client without the broker's
    // credentials even with a trusted certificate.
    let (ccert, ckey) = ca.sign("client", &[], false);
    let internal = cluster.extra_listener_addr(2).unwrap();
    let conf = [
        "security.protocol=SASL_SSL".to_string(),
        "sasl.mechanism=PLAIN".into(),
        "sasl.username=broker".into(),
        "sasl.password=guess".into(),
        format!("ssl.ca.location={ca_file}"),
        format!(
            "ssl.certificate.location={}",
            path_str(&pki.write("c.pem", &ccert))
        ),
        format!("ssl.key.location={}", path_str(&pki.write("c.key", &ckey))),
    ];
    let mut args = vec![
        "roundtrip".to_string(),
        internal,
        "replicated".into(),
        "1".into(),
    ];
    args.extend(conf);
    let out = py(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(out.starts_with("err _AUTHENTICATION"), "{out}");
}

/// Three controllers and three brokers with every listener secured: clients on SASL_SSL
/// (SCRAM-SHA-512), the brokers among themselves on SASL_SSL with mutual
/// TLS and SCRAM-SHA-512 (both users made by `strand format --add-scram`), and
/// the controller listener (Raft, broker registrations and heartbeats,
/// forwarded admin requests) on SSL with `ssl.client.auth=required`. The
/// quorum forms over it and the three brokers register over it (a topic with three
/// replicas and min.insync.replicas=3 takes acks=all writes, which come
/// back through a group). A process without the cluster's certificate is
/// not heard by a controller: a Raft vote at a term far ahead, sent over
/// plain TCP, over TLS without a client certificate, or with a certificate
/// from another CA, gets no answer (the connection is refused before a
/// frame is read), while a harmless request with the brokers' certificate
/// is answered; the cluster serves on afterwards.
#[test]
fn every_listener_secured_and_strangers_cannot_reach_the_quorum() {
    use strand_compat_tests::{Cluster, ClusterSpec};
    let (pki, ca) = Pki::new();
    let ca_file = path_str(&pki.write("ca.pem", &ca.cert_pem()));
    let (cert, key) = ca.sign("broker", &["localhost", "127.0.0.1"], false);
    let keystore = path_str(&pki.write("broker.pem", &format!("{key}{cert}")));
    let broker_cert = path_str(&pki.write("broker.crt", &cert));
    let broker_key = path_str(&pki.write("broker.key", &key));
    let jaas = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="broker-secret";"#;
    // The harness names the client listener PLAINTEXT; here it is SASL_SSL.
    // The SCRAM users exist from the start (`strand format --add-scram`):
    // no listener is open to create them on.
    let mut spec = ClusterSpec::split(3, 3)
        .with_extra_listener("INTERNAL")
        .with_tcp_readiness()
        .with_format_arg("--add-scram")
        .with_format_arg("SCRAM-SHA-512=[name=broker,password=broker-secret]")
        .with_format_arg("--add-scram")
        .with_format_arg("SCRAM-SHA-512=[name=alice,password=alice-secret,iterations=8192]");
    for (k, v) in [
        (
            "listener.security.protocol.map",
            "PLAINTEXT:SASL_SSL,CONTROLLER:SSL,INTERNAL:SASL_SSL",
        ),
        ("inter.broker.listener.name", "INTERNAL"),
        ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
        ("sasl.enabled.mechanisms", "SCRAM-SHA-512"),
        (
            "listener.name.internal.scram-sha-512.sasl.jaas.config",
            jaas,
        ),
        ("listener.name.internal.ssl.client.auth", "required"),
        ("listener.name.controller.ssl.client.auth", "required"),
    ] {
        spec = spec.with_override(k, v);
    }
    spec = with_pem_stores(spec, &keystore, &ca_file);
    let cluster = Cluster::start(&common::strand_bin(), spec).unwrap();
    let bootstrap = cluster.bootstrap();
    let client = [
        "security.protocol=SASL_SSL".to_string(),
        "sasl.mechanism=SCRAM-SHA-512".into(),
        "sasl.username=alice".into(),
        "sasl.password=alice-secret".into(),
        format!("ssl.ca.location={ca_file}"),
    ];
    let with_client = |head: &[&str]| {
        let mut args: Vec<String> = head.iter().map(|s| s.to_string()).collect();
        args.extend(client.iter().cloned());
        py(&args.iter().map(String::as_str).collect::<Vec<_>>())
    };
    assert_eq!(
        with_client(&["create", &bootstrap, "sealed", "3", "3"]),
        "ok"
    );
    assert_eq!(
        with_client(&["roundtrip", &bootstrap, "sealed", "300"]),
        "ok 300"
    );

    let (other_ca_cert, other_ca_key) =
        Issuer::ca("Another CA").sign("intruder", &["127.0.0.1"], false);
    let other = format!(
        "{}:{}",
        path_str(&pki.write("intruder.crt", &other_ca_cert)),
        path_str(&pki.write("intruder.key", &other_ca_key))
    );
    let trusted = format!("{broker_cert}:{broker_key}");
    for id in cluster.controller_ids() {
        let addr = cluster.controller_addr(id).unwrap();
        for stranger in ["plaintext", "none", other.as_str()] {
            let out = py(&["controller-probe", &addr, &ca_file, stranger, "vote"]);
            assert!(
                out.starts_with("refused"),
                "controller {id} heard a stranger ({stranger}): {out}"
            );
        }
        let out = py(&["controller-probe", &addr, &ca_file, &trusted, "harmless"]);
        assert!(
            out.starts_with("answered {\"Controller\""),
            "controller {id} with the cluster's certificate: {out}"
        );
    }
    assert_eq!(
        with_client(&["create", &bootstrap, "after", "3", "3"]),
        "ok"
    );
    assert_eq!(
        with_client(&["roundtrip", &bootstrap, "after", "100"]),
        "ok 100"
    );
}

/// The controller listener on SASL_PLAINTEXT, and on SASL_SSL, with PLAIN
/// (`sasl.mechanism.controller.protocol=PLAIN`, Kafka's settings): three
/// controllers and three brokers form the quorum, register and replicate
/// through it (a topic with three replicas and min.insync.replicas=3 takes
/// acks=all writes that come back through a group), each node logging in
/// as `controller`. With the StandardAuthorizer only super users are
/// admitted. On each controller a Raft vote at a term far ahead gets no
/// answer without a login, with a wrong password, for an unknown user, or
/// from `guest`, a user the listener knows but not a super user;
/// `controller` is answered.
#[test]
fn a_sasl_controller_listener_admits_its_super_users_only() {
    use strand_compat_tests::{Cluster, ClusterSpec};
    let (pki, ca) = Pki::new();
    let ca_file = path_str(&pki.write("ca.pem", &ca.cert_pem()));
    let (cert, key) = ca.sign("controller", &["localhost", "127.0.0.1"], false);
    let keystore = path_str(&pki.write("controller.pem", &format!("{key}{cert}")));
    let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="controller" password="controller-secret" user_controller="controller-secret" user_guest="guest-secret";"#;
    for protocol in ["SASL_PLAINTEXT", "SASL_SSL"] {
        let mut spec = ClusterSpec::split(3, 3);
        let map = format!("PLAINTEXT:PLAINTEXT,CONTROLLER:{protocol}");
        for (k, v) in [
            ("listener.security.protocol.map", map.as_str()),
            ("sasl.mechanism.controller.protocol", "PLAIN"),
            ("listener.name.controller.sasl.enabled.mechanisms", "PLAIN"),
            ("listener.name.controller.plain.sasl.jaas.config", jaas),
            (
                "authorizer.class.name",
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            ),
            ("super.users", "User:controller"),
            ("allow.everyone.if.no.acl.found", "true"),
        ] {
            spec = spec.with_override(k, v);
        }
        let tls = protocol == "SASL_SSL";
        if tls {
            spec = with_pem_stores(spec, &keystore, &ca_file);
        }
        let cluster = Cluster::start(&common::strand_bin(), spec).unwrap();
        let bootstrap = cluster.bootstrap();
        assert_eq!(py(&["create", &bootstrap, "guarded", "3", "3"]), "ok");
        assert_eq!(py(&["roundtrip", &bootstrap, "guarded", "300"]), "ok 300");
        let login = |user: &str, password: &str| {
            let kind = if tls { "sasl+tls" } else { "sasl" };
            format!("{kind}:{user}:{password}")
        };
        for id in cluster.controller_ids() {
            let addr = cluster.controller_addr(id).unwrap();
            let bare = if tls { "none" } else { "plaintext" };
            for stranger in [
                bare.to_string(),
                login("controller", "wrong"),
                login("nobody", "controller-secret"),
                login("guest", "guest-secret"),
            ] {
                let out = py(&["controller-probe", &addr, &ca_file, &stranger, "vote"]);
                assert!(
                    out.starts_with("refused"),
                    "{protocol}: controller {id} heard a stranger ({stranger}): {out}"
                );
            }
            let member = login("controller", "controller-secret");
            let out = py(&["controller-probe", &addr, &ca_file, &member, "harmless"]);
            assert!(
                out.starts_with("answered {\"Controller\""),
                "{protocol}: controller {id} with the cluster's login: {out}"
            );
        }
        assert_eq!(py(&["create", &bootstrap, "after", "3", "3"]), "ok");
        assert_eq!(py(&["roundtrip", &bootstrap, "after", "100"]), "ok 100");
    }
}

/// 200 messages produced acks=all idempotently with the rdkafka crate
/// under `config`, then read back in order through a group.
fn rdkafka_roundtrip(config: &rdkafka::config::ClientConfig, topic: &str) {
    rdkafka_roundtrip_sized(config, topic, 200, 0);
}

/// `count` messages of at least `size` bytes produced acks=all
/// idempotently with the rdkafka crate under `config`, then read back in
/// order through a group, every byte compared.
fn rdkafka_roundtrip_sized(
    config: &rdkafka::config::ClientConfig,
    topic: &str,
    count: usize,
    size: usize,
) {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::Message;
    use std::time::Duration;
    let value_of = |i: usize| {
        let mut v = format!("rdkafka-{i}-");
        while v.len() < size {
            v.push_str(&format!("{i:08x}"));
        }
        v
    };
    let producer: BaseProducer = config
        .clone()
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    for i in 0..count {
        let value = value_of(i);
        let mut record = BaseRecord::<(), str>::to(topic)
            .payload(&value)
            .partition(0);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    producer.poll(Duration::from_millis(10));
                    record = r;
                }
            }
        }
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("every message acknowledged");
    let consumer: BaseConsumer = config
        .clone()
        .set("group.id", format!("{topic}-group"))
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let mut values = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while values.len() < count && std::time::Instant::now() < deadline {
        if let Some(m) = consumer.poll(Duration::from_millis(200)) {
            let m = m.expect("no consume error");
            values.push(String::from_utf8_lossy(m.payload().unwrap_or_default()).into_owned());
        }
    }
    let expected: Vec<String> = (0..count).map(value_of).collect();
    assert!(
        values == expected,
        "{topic}: {} of {count} read back as sent",
        values.len()
    );
}

/// Whether a client of `config` can fetch metadata at all.
fn rdkafka_gets_metadata(config: &rdkafka::config::ClientConfig) -> bool {
    use rdkafka::producer::{BaseProducer, Producer};
    let client: BaseProducer = config.create().unwrap();
    client
        .client()
        .fetch_metadata(None, std::time::Duration::from_secs(10))
        .is_ok()
}

/// Produce requests of about a megabyte over TLS (mutual TLS) and over
/// plaintext: the broker waits for most of such a frame to arrive before it
/// reads on (the socket's receive low-water mark), never for more than the
/// client still has to send. Read back whole and in order; a mark past the
/// frame's end would stall each request until the connection's idle timeout
/// (minutes), far past the flush's minute.
#[test]
fn megabyte_requests_over_tls_and_plaintext_are_read_whole() {
    use rdkafka::config::ClientConfig;
    let s = start();
    let (cert, key) = s.issuer.sign("big-client", &[], false);
    let mut tls = ClientConfig::new();
    tls.set("bootstrap.servers", &s.ssl)
        .set("security.protocol", "SSL")
        .set("ssl.ca.location", path_str(&s.ca))
        .set(
            "ssl.certificate.location",
            path_str(&s.pki.write("big.crt", &cert)),
        )
        .set("ssl.key.location", path_str(&s.pki.write("big.key", &key)));
    let mut plain = ClientConfig::new();
    plain.set("bootstrap.servers", s.broker.addr());
    for (config, topic) in [(&mut tls, "big-tls"), (&mut plain, "big-plain")] {
        // 16 messages of 60,000 bytes to a request.
        config
            .set("linger.ms", "200")
            .set("batch.size", "1000000")
            .set("message.max.bytes", "1000000");
        rdkafka_roundtrip_sized(config, topic, 96, 60_000);
    }
}

/// The rdkafka crate (librdkafka with OpenSSL) over SASL_SSL with
/// SCRAM-SHA-512 and over mutual TLS: 200 messages produced acks=all
/// idempotently come back in order each way; a wrong password, and a
/// client without a certificate, cannot even fetch metadata.
#[test]
fn rdkafka_crate_over_sasl_ssl_scram_and_mutual_tls() {
    use rdkafka::config::ClientConfig;
    let s = start();
    assert_eq!(
        py(&[
            "alter",
            &s.broker.addr(),
            "carl",
            "SCRAM-SHA-512",
            "carl-secret"
        ]),
        "ok"
    );
    let scram = |password: &str| {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &s.sasl_ssl)
            .set("security.protocol", "SASL_SSL")
            .set("sasl.mechanism", "SCRAM-SHA-512")
            .set("sasl.username", "carl")
            .set("sasl.password", password)
            .set("ssl.ca.location", path_str(&s.ca));
        c
    };
    rdkafka_roundtrip(&scram("carl-secret"), "rdkafka-scram");
    assert!(
        !rdkafka_gets_metadata(&scram("wrong")),
        "a wrong password fetches no metadata"
    );

    let (cert, key) = s.issuer.sign("rdkafka-client", &[], false);
    let mut tls = ClientConfig::new();
    tls.set("bootstrap.servers", &s.ssl)
        .set("security.protocol", "SSL")
        .set("ssl.ca.location", path_str(&s.ca));
    let without_certificate = tls.clone();
    tls.set(
        "ssl.certificate.location",
        path_str(&s.pki.write("rk.crt", &cert)),
    )
    .set("ssl.key.location", path_str(&s.pki.write("rk.key", &key)));
    rdkafka_roundtrip(&tls, "rdkafka-mtls");
    assert!(
        !rdkafka_gets_metadata(&without_certificate),
        "a client without a certificate fetches no metadata"
    );
}

/// The subject of the certificate the TLS listener at `addr` presents to
/// a new connection (openssl's one-line form).
fn served_subject(addr: &str, ca: &Path) -> String {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl s_client -connect {addr} -CAfile {} -verify_return_error </dev/null 2>/dev/null | openssl x509 -noout -subject",
            ca.display()
        ))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// ApiVersions v0 with correlation id `id` over a raw stream; the
/// correlation id of the answer.
fn api_versions_over(stream: &mut (impl std::io::Read + Write), id: i32) -> i32 {
    let mut req = vec![0, 18, 0, 0];
    req.extend_from_slice(&id.to_be_bytes());
    req.extend_from_slice(&[0, 1, b't']);
    let mut framed = (req.len() as i32).to_be_bytes().to_vec();
    framed.extend(req);
    stream.write_all(&framed).unwrap();
    stream.flush().unwrap();
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).unwrap();
    let mut body = vec![0u8; i32::from_be_bytes(len) as usize];
    stream.read_exact(&mut body).unwrap();
    i32::from_be_bytes(body[..4].try_into().unwrap())
}

/// A listener's key store replaced at runtime (Kafka's dynamic
/// `listener.name.<listener>.ssl.keystore.location` on the broker's own
/// resource): new connections get the new certificate while one opened
/// before keeps being served; a store that does not load is refused and
/// the current one stays; the cluster-wide resource refuses the setting.
#[test]
fn a_listener_key_store_is_replaced_without_a_restart() {
    let (pki, ca) = Pki::new();
    let ca_file = pki.write("ca.pem", &ca.cert_pem());
    let store = |name: &str| {
        let (cert, key) = ca.sign(name, &["localhost", "127.0.0.1"], false);
        path_str(&pki.write(&format!("{name}.pem"), &format!("{key}{cert}")))
    };
    let (store_a, store_b) = (store("broker-a"), store("broker-b"));
    let ssl = format!("127.0.0.1:{}", free_loopback_port().unwrap());
    let broker = Broker::start_with_listeners(
        &common::strand_bin(),
        &[("SSL", ssl.as_str())],
        &[
            ("ssl.keystore.type", "PEM"),
            ("ssl.keystore.location", store_a.as_str()),
        ],
    )
    .unwrap();
    let first = served_subject(&ssl, &ca_file);
    assert!(first.contains("CN = broker-a"), "{first}");
    // A TLS connection opened before the change, served before it.
    let mut open = Command::new("openssl")
        .args(["s_client", "-quiet", "-verify_return_error", "-connect"])
        .arg(&ssl)
        .arg("-CAfile")
        .arg(&ca_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut conn = {
        struct Piped(std::process::ChildStdin, std::process::ChildStdout);
        impl std::io::Read for Piped {
            fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
                self.1.read(b)
            }
        }
        impl Write for Piped {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.write(b)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                self.0.flush()
            }
        }
        Piped(open.stdin.take().unwrap(), open.stdout.take().unwrap())
    };
    assert_eq!(api_versions_over(&mut conn, 1), 1);

    let alter = |name: &str, value: &str| {
        let mut c = Client::connect(&broker.addr()).unwrap();
        let key = "listener.name.ssl.ssl.keystore.location";
        common::alter_config(&mut c, 4, name, key, Some(value))
    };
    assert_eq!(alter("1", &store_b), (0, String::new()));
    common::eventually(
        "new connections served the new certificate",
        std::time::Duration::from_secs(10),
        || {
            served_subject(&ssl, &ca_file)
                .contains("CN = broker-b")
                .then_some(())
        },
    );
    // The connection opened before is still served.
    assert_eq!(api_versions_over(&mut conn, 2), 2);
    // A store that does not load: refused, the current one stays.
    let (code, message) = alter("1", "/no/such/store.pem");
    assert_eq!(code, 40, "INVALID_CONFIG: {message}");
    assert!(message.contains("/no/such/store.pem"), "{message}");
    assert!(served_subject(&ssl, &ca_file).contains("CN = broker-b"));
    // Each broker's own: not at the cluster-wide level.
    let (code, message) = alter("", &store_a);
    assert_eq!(code, 42, "INVALID_REQUEST: {message}");
    assert!(message.contains("broker id must be specified"), "{message}");
    drop(conn);
    let _ = open.kill();
    let _ = open.wait();
}
