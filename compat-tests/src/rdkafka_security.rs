//! librdkafka's suite with every listener on SASL_SSL (`librdkafka-suite
//! --security sasl_ssl`): the certificates (made once per run with the
//! `openssl` command, in the forms librdkafka's tests read: PEM, DER, an
//! encrypted key and a PKCS#12 bundle), the brokers' settings (clients and
//! brokers on SASL_SSL, the controller listener on mutual TLS), the
//! test.conf lines and `SSL_*` variables the tests take, as upstream's
//! trivup sets them up, and the wait until every broker authenticates the
//! test user.

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The test user (SCRAM-SHA-512, made at format time) and the brokers'
/// own (PLAIN, between brokers).
pub const TEST_USER: &str = "tester";
pub const TEST_PASSWORD: &str = "tester-secret";
const BROKER_USER: &str = "broker";
const BROKER_PASSWORD: &str = "broker-secret";
/// The client key's password (also the PKCS#12 bundle's: 0097 opens it
/// with `ssl.key.password`).
const KEY_PASSWORD: &str = "client-key-secret";

/// The run's certificates.
pub struct SuitePki {
    dir: PathBuf,
}

fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

impl SuitePki {
    /// A CA, the brokers' key and certificate (127.0.0.1 and localhost)
    /// and a client's, in `dir`.
    pub fn create(dir: &Path) -> io::Result<SuitePki> {
        std::fs::create_dir_all(dir)?;
        let dir = dir.canonicalize()?;
        // No argument has a space: each command is one line.
        let run = |line: &str| openssl(&dir, &line.split_whitespace().collect::<Vec<_>>());
        run(
            "req -x509 -newkey rsa:2048 -nodes -days 3650 -subj /CN=strand-suite-ca \
             -addext basicConstraints=critical,CA:TRUE -addext keyUsage=keyCertSign,cRLSign \
             -keyout ca.key -out ca.pem",
        )?;
        std::fs::write(
            dir.join("leaf.ext"),
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n",
        )?;
        for who in ["broker", "client"] {
            run(&format!(
                "req -newkey rsa:2048 -nodes -subj /CN={who} -keyout {who}.key -out {who}.csr"
            ))?;
            run(&format!(
                "x509 -req -in {who}.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 3650 \
                 -out {who}.crt -extfile leaf.ext"
            ))?;
        }
        // The brokers' key store: the PKCS#8 key, then the certificate.
        run("pkcs8 -topk8 -nocrypt -in broker.key -out broker.pk8")?;
        let pem = [
            std::fs::read(dir.join("broker.pk8"))?,
            std::fs::read(dir.join("broker.crt"))?,
        ]
        .concat();
        std::fs::write(dir.join("broker.pem"), pem)?;
        // The client's key, encrypted, and its other forms.
        let pass = format!("pass:{KEY_PASSWORD}");
        run(&format!(
            "pkcs8 -topk8 -v2 aes-256-cbc -in client.key -passout {pass} -out client.enc.key"
        ))?;
        run("x509 -in client.crt -outform DER -out client.der")?;
        run("pkcs8 -topk8 -nocrypt -in client.key -outform DER -out client.key.der")?;
        run("x509 -in ca.pem -outform DER -out ca.der")?;
        run(&format!(
            "pkcs12 -export -inkey client.key -in client.crt -certfile ca.pem -passout {pass} \
             -out client.p12"
        ))?;
        Ok(SuitePki { dir })
    }

    fn path(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Every node's settings: the client listener (named PLAINTEXT by the
    /// harness) and the inter-broker one on SASL_SSL, the controller
    /// listener on mutual TLS. Clients need no certificate on SASL_SSL
    /// (0097 expects that).
    pub fn broker_overrides(&self) -> Vec<(String, String)> {
        let plain = format!(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="{BROKER_USER}" password="{BROKER_PASSWORD}" user_{BROKER_USER}="{BROKER_PASSWORD}";"#
        );
        [
            (
                "listener.security.protocol.map",
                "PLAINTEXT:SASL_SSL,INTERNAL:SASL_SSL,CONTROLLER:SSL".to_string(),
            ),
            ("inter.broker.listener.name", "INTERNAL".into()),
            ("sasl.mechanism.inter.broker.protocol", "PLAIN".into()),
            (
                "listener.name.plaintext.sasl.enabled.mechanisms",
                "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN".into(),
            ),
            (
                "listener.name.plaintext.plain.sasl.jaas.config",
                plain.clone(),
            ),
            (
                "listener.name.internal.sasl.enabled.mechanisms",
                "PLAIN".into(),
            ),
            ("listener.name.internal.plain.sasl.jaas.config", plain),
            ("listener.name.internal.ssl.client.auth", "required".into()),
            (
                "listener.name.controller.ssl.client.auth",
                "required".into(),
            ),
            ("ssl.keystore.type", "PEM".into()),
            ("ssl.keystore.location", self.path("broker.pem")),
            ("ssl.truststore.type", "PEM".into()),
            ("ssl.truststore.location", self.path("ca.pem")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// `strand format` arguments: the test user exists from the start.
    pub fn format_args(&self) -> Vec<String> {
        vec![
            "--add-scram".into(),
            format!("SCRAM-SHA-512=[name={TEST_USER},password={TEST_PASSWORD}]"),
        ]
    }

    /// test.conf lines: every client of every test on SASL_SSL as the test
    /// user, with a client certificate at hand (0097 uses it).
    pub fn client_conf(&self) -> Vec<String> {
        vec![
            "security.protocol=SASL_SSL".into(),
            "sasl.mechanisms=SCRAM-SHA-512".into(),
            format!("sasl.username={TEST_USER}"),
            format!("sasl.password={TEST_PASSWORD}"),
            format!("ssl.ca.location={}", self.path("ca.pem")),
            format!("ssl.certificate.location={}", self.path("client.crt")),
            format!("ssl.key.location={}", self.path("client.enc.key")),
            format!("ssl.key.password={KEY_PASSWORD}"),
        ]
    }

    /// The `SSL_*` variables trivup gives librdkafka's tests (0097).
    pub fn ssl_env(&self) -> Vec<(String, String)> {
        [
            ("SSL_pkcs", "client.p12"),
            ("SSL_pub_der", "client.der"),
            ("SSL_pub_pem", "client.crt"),
            ("SSL_priv_der", "client.key.der"),
            ("SSL_priv_pem", "client.enc.key"),
            ("SSL_ca_der", "ca.der"),
            ("SSL_ca_pem", "ca.pem"),
            ("SSL_all_cas_pem", "ca.pem"),
        ]
        .into_iter()
        .map(|(k, f)| (k.to_string(), self.path(f)))
        .chain([
            ("SSL_client_auth".to_string(), "none".to_string()),
            ("SSL_password".to_string(), KEY_PASSWORD.to_string()),
        ])
        .collect()
    }

    /// Waits until every one of `brokers` (host:port) authenticates the
    /// test user and the cluster lists all of them: the harness only knows
    /// the ports are open. confluent-kafka (`STRAND_PYTHON`) asks.
    pub fn wait_ready(&self, brokers: &[String], timeout: Duration) -> Result<(), String> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/security_client.py");
        let python = std::env::var("STRAND_PYTHON").unwrap_or_else(|_| "python3".into());
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        while Instant::now() < deadline {
            let mut cmd = Command::new(&python);
            cmd.arg(&script)
                .arg("ready")
                .arg(brokers.join(","))
                .arg(brokers.len().to_string());
            for line in self.client_conf() {
                cmd.arg(line.replace("sasl.mechanisms", "sasl.mechanism"));
            }
            let out = cmd.output().map_err(|e| format!("{python}: {e}"))?;
            last = String::from_utf8_lossy(&out.stdout).trim().to_string();
            if last.is_empty() {
                // The check itself failed: say how (its last words).
                let err = String::from_utf8_lossy(&out.stderr);
                last = err.lines().last().unwrap_or("").trim().to_string();
            }
            if last == "ok" {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!("brokers not ready over SASL_SSL: {last}"))
    }
}

/// A `KAFKA_PATH` whose `bin/kafka-acls.sh` (and kafka-topics,
/// kafka-configs) run the reference Kafka's tools (`kafka_tool`:
/// compat-tests/scripts/kafka-tool.sh), for the tests that call them.
pub fn write_kafka_shim(out: &Path, kafka_tool: &Path) -> io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let root = out.join("kafka-shim");
    let bin = root.join("bin");
    std::fs::create_dir_all(&bin)?;
    let tool = kafka_tool.canonicalize()?;
    for name in ["kafka-acls", "kafka-topics", "kafka-configs"] {
        let path = bin.join(format!("{name}.sh"));
        std::fs::write(
            &path,
            format!("#!/bin/sh\nexec '{}' {name} \"$@\"\n", tool.display()),
        )?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(root)
}
