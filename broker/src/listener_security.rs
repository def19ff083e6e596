//! What a listener's security protocol needs at run time, built once at
//! start-up from Kafka's settings (`BrokerConfig::listener_setting`: the
//! `listener.name.<listener>.` form first): the TLS server configuration
//! (PEM key store and trust store, `ssl.client.auth`,
//! `ssl.enabled.protocols`), the certificate subject's mapping to a user
//! (`ssl.principal.mapping.rules`) and the SASL settings
//! (`sasl.enabled.mechanisms`, the PLAIN users of
//! `listener.name.<listener>.plain.sasl.jaas.config`,
//! `connections.max.reauth.ms`). A setting Strand cannot honour stops
//! start-up with its name; nothing is served half-secured.

use crate::config::{BrokerConfig, SecurityProtocol};
use pkcs8::der::Decode;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use std::sync::Arc;
use strand_security::plain::PlainUsers;
use strand_security::principal::SslPrincipalMapper;
use tokio_rustls::rustls;

pub struct ListenerSecurity {
    pub protocol: SecurityProtocol,
    /// Set for SSL and SASL_SSL; replaced when the listener's key or trust
    /// store changes at runtime (new connections take the new one, open
    /// ones keep theirs).
    pub tls: Option<TlsAcceptorCell>,
    /// The client certificate's subject to a user name (SSL listeners).
    pub principal_mapper: SslPrincipalMapper,
    /// Set for SASL_PLAINTEXT and SASL_SSL.
    pub sasl: Option<SaslListener>,
}

pub struct SaslListener {
    /// `sasl.enabled.mechanisms`, Kafka's names.
    pub enabled: Vec<String>,
    /// PLAIN's users (empty unless PLAIN is enabled).
    pub plain: PlainUsers,
    /// `connections.max.reauth.ms`: 0 means sessions never expire.
    pub max_reauth_ms: i64,
    /// The listener's name, the authentication metrics' label.
    pub listener: String,
}

impl ListenerSecurity {
    /// PLAINTEXT: no TLS, no SASL; everyone is `User:ANONYMOUS`.
    pub fn plaintext() -> ListenerSecurity {
        ListenerSecurity {
            protocol: SecurityProtocol::Plaintext,
            tls: None,
            principal_mapper: SslPrincipalMapper::parse("DEFAULT")
                .expect("DEFAULT is a valid mapping rule"),
            sasl: None,
        }
    }

    /// The security of listener `listener`, or why it cannot start.
    pub fn build(config: &BrokerConfig, listener: &str) -> Result<ListenerSecurity, String> {
        let protocol = config.security_protocol(listener);
        let setting = |key: &str| config.listener_setting(listener, key);
        let mapping = setting("ssl.principal.mapping.rules").unwrap_or_else(|| "DEFAULT".into());
        let principal_mapper = SslPrincipalMapper::parse(&mapping)
            .map_err(|e| format!("listener {listener}: ssl.principal.mapping.rules: {e}"))?;
        let tls = if protocol.uses_tls() {
            let config = tls_server_config(listener, &setting)?;
            Some(TlsAcceptorCell::new(Arc::new(config)))
        } else {
            None
        };
        let sasl = if protocol.uses_sasl() {
            Some(sasl_listener(listener, &setting)?)
        } else {
            None
        };
        Ok(ListenerSecurity {
            protocol,
            tls,
            principal_mapper,
            sasl,
        })
    }
}

pub use strand_metadata::configs::DYNAMIC_TLS_KEYS;

/// A listener's TLS server configuration, replaceable while it serves.
pub struct TlsAcceptorCell(parking_lot::RwLock<tokio_rustls::TlsAcceptor>);

impl TlsAcceptorCell {
    fn new(config: Arc<rustls::ServerConfig>) -> Self {
        TlsAcceptorCell(parking_lot::RwLock::new(config.into()))
    }

    /// The acceptor for a new connection.
    pub fn current(&self) -> tokio_rustls::TlsAcceptor {
        self.0.read().clone()
    }
}

impl ListenerSecurity {
    /// The TLS server configuration of `listener` with `dynamic` (this
    /// broker's dynamic configs, `listener.name.<listener>.ssl.*`) over
    /// its static settings; the reason it cannot be built otherwise.
    pub fn tls_config_with(
        config: &BrokerConfig,
        listener: &str,
        dynamic: &std::collections::BTreeMap<String, String>,
    ) -> Result<Arc<rustls::ServerConfig>, String> {
        let prefix = format!("listener.name.{}.", listener.to_lowercase());
        let setting = |key: &str| {
            match dynamic.get(&format!("{prefix}{key}")) {
                Some(v) if DYNAMIC_TLS_KEYS.contains(&key) => Some(v.clone()),
                _ => config.listener_setting(listener, key),
            }
            .filter(|v| !v.is_empty())
        };
        tls_server_config(listener, &setting).map(Arc::new)
    }

    /// Serves new connections with `tls` (a TLS listener only).
    pub fn replace_tls(&self, tls: Arc<rustls::ServerConfig>) {
        if let Some(cell) = &self.tls {
            *cell.0.write() = tls.into();
        }
    }
}

fn sasl_listener(listener: &str, setting: Setting) -> Result<SaslListener, String> {
    let enabled: Vec<String> = setting("sasl.enabled.mechanisms")
        .unwrap_or_default()
        .split(',')
        .map(|m| m.trim().to_string())
        .filter(|m| !m.is_empty())
        .collect();
    if enabled.is_empty() {
        return Err(format!(
            "listener {listener}: sasl.enabled.mechanisms is empty"
        ));
    }
    for m in &enabled {
        if !strand_security::sasl::MECHANISMS.contains(&m.as_str()) {
            return Err(format!(
                "listener {listener}: SASL mechanism {m} (sasl.enabled.mechanisms) is not implemented by Strand; it serves {}",
                strand_security::sasl::MECHANISMS.join(", ")
            ));
        }
    }
    let mut plain = PlainUsers::default();
    if enabled.iter().any(|m| m == "PLAIN") {
        let key = "plain.sasl.jaas.config";
        let jaas = setting(key).ok_or_else(|| {
            format!(
                "listener {listener}: PLAIN is enabled but listener.name.{}.{key} is not set (its user_<name>=\"<password>\" options are the users)",
                listener.to_lowercase()
            )
        })?;
        let entry = strand_security::jaas::parse(&jaas)
            .map_err(|e| format!("listener {listener}: {key}: {e}"))?;
        plain = PlainUsers(entry.plain_users());
    }
    let max_reauth_ms = setting("connections.max.reauth.ms")
        .unwrap_or_default()
        .parse::<i64>()
        .unwrap_or(0);
    Ok(SaslListener {
        enabled,
        plain,
        max_reauth_ms,
        listener: listener.to_string(),
    })
}

fn read_setting_file(listener: &str, key: &str, path: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("listener {listener}: {key} {path}: {e}"))
}

/// A listener's settings by key (`BrokerConfig::listener_setting`).
pub(crate) type Setting<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Only PEM key and trust stores have a form rustls reads (JKS and PKCS12
/// are Java's); a store that is not configured needs no type.
fn check_store_types(listener: &str, setting: Setting) -> Result<(), String> {
    for (key, location, inline) in [
        (
            "ssl.keystore.type",
            "ssl.keystore.location",
            "ssl.keystore.key",
        ),
        (
            "ssl.truststore.type",
            "ssl.truststore.location",
            "ssl.truststore.certificates",
        ),
    ] {
        let kind = setting(key).unwrap_or_default();
        let unset = setting(location).is_none() && setting(inline).is_none();
        if !kind.eq_ignore_ascii_case("PEM") && !unset {
            return Err(format!(
                "listener {listener}: {key}: {kind} key stores are not supported by Strand: set {key}=PEM"
            ));
        }
    }
    Ok(())
}

/// The key store: a PEM file with the private key and the certificate
/// chain (`ssl.keystore.location`), or both given inline; None when none
/// is configured.
pub(crate) fn key_store(
    listener: &str,
    setting: Setting,
) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>, String> {
    let fail = |key: &str, why: String| format!("listener {listener}: {key}: {why}");
    check_store_types(listener, setting)?;
    let pem = match (
        setting("ssl.keystore.location"),
        setting("ssl.keystore.key"),
        setting("ssl.keystore.certificate.chain"),
    ) {
        (Some(path), None, None) => read_setting_file(listener, "ssl.keystore.location", &path)?,
        (None, Some(key), Some(chain)) => format!("{key}\n{chain}").into_bytes(),
        (None, None, None) => return Ok(None),
        _ => {
            return Err(fail(
                "ssl.keystore.location",
                "give either ssl.keystore.location or ssl.keystore.key with ssl.keystore.certificate.chain".into(),
            ))
        }
    };
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<_, _>>()
        .map_err(|e| fail("ssl.keystore", format!("certificates: {e}")))?;
    if chain.is_empty() {
        return Err(fail(
            "ssl.keystore",
            "no certificate in the key store".into(),
        ));
    }
    let key = private_key(
        &pem,
        setting("ssl.key.password").or_else(|| setting("ssl.keystore.password")),
    )
    .map_err(|e| fail("ssl.keystore", e))?;
    Ok(Some((chain, key)))
}

/// The crypto provider and `ssl.enabled.protocols` of a listener.
pub(crate) fn provider_and_versions(
    listener: &str,
    setting: Setting,
) -> Result<
    (
        Arc<rustls::crypto::CryptoProvider>,
        Vec<&'static rustls::SupportedProtocolVersion>,
    ),
    String,
> {
    let versions = protocol_versions(&setting("ssl.enabled.protocols").unwrap_or_default())
        .map_err(|e| format!("listener {listener}: ssl.enabled.protocols: {e}"))?;
    Ok((
        Arc::new(rustls::crypto::aws_lc_rs::default_provider()),
        versions,
    ))
}

fn tls_server_config(listener: &str, setting: Setting) -> Result<rustls::ServerConfig, String> {
    let fail = |key: &str, why: String| format!("listener {listener}: {key}: {why}");
    let (chain, key) = key_store(listener, setting)?.ok_or_else(|| {
        fail(
            "ssl.keystore.location",
            "a TLS listener needs a key store (ssl.keystore.location, or ssl.keystore.key and ssl.keystore.certificate.chain)".into(),
        )
    })?;
    let (provider, versions) = provider_and_versions(listener, setting)?;
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| fail("ssl.enabled.protocols", e.to_string()))?;
    let client_auth = setting("ssl.client.auth").unwrap_or_else(|| "none".into());
    let builder = if client_auth == "none" {
        builder.with_no_client_auth()
    } else {
        let roots = trust_store(listener, setting)?;
        let verifier =
            rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        let verifier = if client_auth == "requested" {
            verifier.allow_unauthenticated()
        } else {
            verifier
        };
        let verifier = verifier
            .build()
            .map_err(|e| fail("ssl.truststore", e.to_string()))?;
        builder.with_client_cert_verifier(verifier)
    };
    builder
        .with_single_cert(chain, key)
        .map_err(|e| fail("ssl.keystore", e.to_string()))
}

/// The key store's private key: PKCS#8, PKCS#1 or SEC1 in the clear, or an
/// encrypted PKCS#8 key (`ENCRYPTED PRIVATE KEY`) with `password`.
fn private_key(pem: &[u8], password: Option<String>) -> Result<PrivateKeyDer<'static>, String> {
    let text = String::from_utf8_lossy(pem);
    if let Some(start) = text.find("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        let end_marker = "-----END ENCRYPTED PRIVATE KEY-----";
        let end = text[start..]
            .find(end_marker)
            .ok_or("unterminated encrypted private key")?
            + start
            + end_marker.len();
        let password = password.ok_or("the private key is encrypted: set ssl.key.password")?;
        let (_, der) = pkcs8::der::pem::decode_vec(text[start..end].as_bytes())
            .map_err(|e| format!("encrypted private key: {e}"))?;
        let encrypted = pkcs8::EncryptedPrivateKeyInfo::from_der(&der)
            .map_err(|e| format!("encrypted private key: {e}"))?;
        let plain = encrypted
            .decrypt(password.as_bytes())
            .map_err(|_| "the private key cannot be decrypted with ssl.key.password".to_string())?;
        return Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            plain.as_bytes().to_vec(),
        )));
    }
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| format!("private key: {e}"))
}

pub(crate) fn trust_store(
    listener: &str,
    setting: Setting,
) -> Result<rustls::RootCertStore, String> {
    let pem = match (
        setting("ssl.truststore.location"),
        setting("ssl.truststore.certificates"),
    ) {
        (Some(path), None) => read_setting_file(listener, "ssl.truststore.location", &path)?,
        (None, Some(certs)) => certs.into_bytes(),
        (None, None) => {
            return Err(format!(
                "listener {listener}: a trust store is needed (ssl.truststore.location or ssl.truststore.certificates) to verify certificates"
            ))
        }
        (Some(_), Some(_)) => {
            return Err(format!(
                "listener {listener}: give ssl.truststore.location or ssl.truststore.certificates, not both"
            ))
        }
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|e| format!("listener {listener}: trust store: {e}"))?;
        roots
            .add(cert)
            .map_err(|e| format!("listener {listener}: trust store: {e}"))?;
    }
    if roots.is_empty() {
        return Err(format!(
            "listener {listener}: the trust store holds no certificate"
        ));
    }
    Ok(roots)
}

/// `ssl.enabled.protocols`: TLSv1.2 and TLSv1.3 (older ones are not
/// served; listing them with a newer one is allowed).
fn protocol_versions(
    value: &str,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, String> {
    let mut out = Vec::new();
    for p in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match p {
            "TLSv1.3" => out.push(&rustls::version::TLS13),
            "TLSv1.2" => out.push(&rustls::version::TLS12),
            "TLSv1" | "TLSv1.1" => {}
            other => return Err(format!("unknown protocol {other}")),
        }
    }
    if out.is_empty() {
        return Err("none of TLSv1.2, TLSv1.3 is enabled".into());
    }
    Ok(out)
}
