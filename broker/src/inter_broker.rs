//! How this broker connects to the others (follower fetches, transaction
//! markers, KIP-890 verification): with the security protocol of the
//! inter-broker listener (`inter.broker.listener.name`), as Kafka does.
//! TLS verifies the other broker against the listener's trust store (and
//! its host name, unless `ssl.endpoint.identification.algorithm` is empty)
//! and presents the listener's key store when it has one (mutual TLS);
//! SASL authenticates with `sasl.mechanism.inter.broker.protocol` and the
//! `username`/`password` of that mechanism's
//! `listener.name.<listener>.<mechanism>.sasl.jaas.config`.

use crate::config::BrokerConfig;
use crate::listener_security::{key_store, provider_and_versions, trust_store};
use crate::transport::{Connecting, SaslCredentials, Stream, TcpTransport, Transport};
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use std::sync::Arc;
use tokio_rustls::rustls;
use tokio_rustls::rustls::client::danger::{
    HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier,
};

/// TCP, then TLS and SASL as the inter-broker listener needs.
pub struct SecureTransport {
    tls: Option<tokio_rustls::TlsConnector>,
    sasl: Option<SaslCredentials>,
}

/// The transport for the inter-broker listener of `config`: plain TCP for
/// PLAINTEXT.
pub fn transport(config: &BrokerConfig) -> Result<Arc<dyn Transport>, String> {
    if !config.is_broker() || config.advertised_listeners.is_empty() {
        return Ok(TcpTransport::shared());
    }
    let listener = config.advertised().name.clone();
    let protocol = config.security_protocol(&listener);
    if !protocol.uses_tls() && !protocol.uses_sasl() {
        return Ok(TcpTransport::shared());
    }
    let setting = |key: &str| config.listener_setting(&listener, key);
    let tls = if protocol.uses_tls() {
        Some(tls_connector(&listener, &setting)?)
    } else {
        None
    };
    let sasl = if protocol.uses_sasl() {
        Some(sasl_credentials(config, &listener)?)
    } else {
        None
    };
    Ok(Arc::new(SecureTransport { tls, sasl }))
}

/// TLS alone to `listener`'s peers (the controller listener's channel).
pub(crate) fn tls_transport(
    listener: &str,
    setting: &dyn Fn(&str) -> Option<String>,
) -> Result<Arc<dyn Transport>, String> {
    Ok(Arc::new(SecureTransport {
        tls: Some(tls_connector(listener, setting)?),
        sasl: None,
    }))
}

fn sasl_credentials(config: &BrokerConfig, listener: &str) -> Result<SaslCredentials, String> {
    let mechanism = config
        .listener_setting(listener, "sasl.mechanism.inter.broker.protocol")
        .unwrap_or_default();
    if !strand_security::sasl::MECHANISMS.contains(&mechanism.as_str()) {
        return Err(format!(
            "sasl.mechanism.inter.broker.protocol: {mechanism} is not implemented by Strand; set one of {}",
            strand_security::sasl::MECHANISMS.join(", ")
        ));
    }
    let key = format!("{}.sasl.jaas.config", mechanism.to_lowercase());
    let (username, password) = jaas_login(
        listener,
        &key,
        &|k: &str| config.listener_setting(listener, k),
        "inter-broker SASL",
    )?;
    Ok(SaslCredentials {
        mechanism,
        username,
        password,
    })
}

/// The `username` and `password` options of `listener`'s JAAS entry `key`
/// (`listener.name.<listener>.<key>`, else `<key>`): what this node
/// presents to `purpose`'s peers.
pub(crate) fn jaas_login(
    listener: &str,
    key: &str,
    setting: &dyn Fn(&str) -> Option<String>,
    purpose: &str,
) -> Result<(String, String), String> {
    let name = format!("listener.name.{}.{key}", listener.to_lowercase());
    let jaas = setting(key).ok_or_else(|| {
        format!(
            "{purpose}: {name} is not set (its username and password are what this node presents)"
        )
    })?;
    let entry = strand_security::jaas::parse(&jaas).map_err(|e| format!("{key}: {e}"))?;
    let get =
        |k: &str| {
            entry.options.get(k).cloned().ok_or_else(|| {
                format!("{purpose}: {name} has no {k} option (what this node presents)")
            })
        };
    Ok((get("username")?, get("password")?))
}

fn tls_connector(
    listener: &str,
    setting: &dyn Fn(&str) -> Option<String>,
) -> Result<tokio_rustls::TlsConnector, String> {
    let (provider, versions) = provider_and_versions(listener, setting)?;
    let roots = Arc::new(trust_store(listener, setting)?);
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("listener {listener}: ssl.enabled.protocols: {e}"))?;
    let verify_host = setting("ssl.endpoint.identification.algorithm")
        .is_some_and(|a| a.eq_ignore_ascii_case("https"));
    let builder = if verify_host {
        builder.with_root_certificates(roots)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(ChainOnly { roots, provider }))
    };
    let config = match key_store(listener, setting)? {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| format!("listener {listener}: ssl.keystore: {e}"))?,
        None => builder.with_no_client_auth(),
    };
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// `ssl.endpoint.identification.algorithm=` (empty): the chain must lead to
/// the trust store, whatever name the certificate gives.
#[derive(Debug)]
struct ChainOnly {
    roots: Arc<rustls::RootCertStore>,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let cert = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_cert_signed_by_trust_anchor(
            &cert,
            &self.roots,
            intermediates,
            now,
            self.provider.signature_verification_algorithms.all,
        )?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

impl Transport for SecureTransport {
    fn connect(&self, addr: &str) -> Connecting {
        let addr = addr.to_string();
        let tls = self.tls.clone();
        Box::pin(async move {
            let stream = tokio::net::TcpStream::connect(&addr).await?;
            stream.set_nodelay(true)?;
            let Some(tls) = tls else {
                return Ok(Box::new(stream) as Box<dyn Stream>);
            };
            let host = addr
                .rsplit_once(':')
                .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
                .unwrap_or(&addr)
                .to_string();
            let name = ServerName::try_from(host)
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            let stream = tls.connect(name, stream).await?;
            Ok(Box::new(stream) as Box<dyn Stream>)
        })
    }

    fn sasl(&self) -> Option<&SaslCredentials> {
        self.sasl.as_ref()
    }
}
