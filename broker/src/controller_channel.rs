//! The controller listener's security (`controller.listener.names`, its
//! protocol in `listener.security.protocol.map`): how this node reaches the
//! controllers and how a controller admits Raft peers and brokers. With
//! `SSL` the connection is TLS against the listener's trust store, each
//! side presenting its key store; with `ssl.client.auth=required` a peer
//! without a certificate the trust store accepts is refused in the
//! handshake, before it can vote, append or register. With an authorizer
//! (`authorizer.class.name`) only `super.users` are admitted: the
//! controller listener carries the metadata log itself, so no ACL in that
//! log can open it (Kafka's deployments list the broker and controller
//! principals in `super.users` for the same reason).
//!
//! SASL on the controller listener is refused at start-up (config.rs).

use crate::config::BrokerConfig;
use crate::inter_broker::tls_transport;
use crate::listener_security::ListenerSecurity;
use crate::transport::{Connecting, Stream, Transport};
use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use strand_security::acl::AuthorizerConfig;
use strand_security::principal::{subject_dn, KafkaPrincipal, SslPrincipalMapper};
use tokio_rustls::TlsAcceptor;

pub type Admitting = Pin<Box<dyn Future<Output = std::io::Result<Box<dyn Stream>>> + Send>>;

/// TLS on the controller listener, both directions.
pub struct ControllerChannel {
    /// This node's own controller listener (controller nodes only).
    acceptor: Option<TlsAcceptor>,
    mapper: SslPrincipalMapper,
    /// With an authorizer: the principals admitted.
    admitted: Option<BTreeSet<String>>,
    connector: Arc<dyn Transport>,
}

impl ControllerChannel {
    /// The channel for `config`'s controller listener; None for PLAINTEXT.
    pub fn build(config: &BrokerConfig) -> Result<Option<ControllerChannel>, String> {
        let Some(name) = config.controller_listener_names.first() else {
            return Ok(None);
        };
        let protocol = config.security_protocol(name);
        if !protocol.uses_tls() {
            return Ok(None);
        }
        let setting = |key: &str| config.listener_setting(name, key);
        let connector = tls_transport(name, &setting)?;
        let (acceptor, mapper) = if config.is_controller() {
            let security = ListenerSecurity::build(config, name)?;
            if setting("ssl.client.auth").as_deref() != Some("required") {
                tracing::warn!(listener = %name, "the controller listener is TLS without ssl.client.auth=required: any process that reaches it can vote and register");
            }
            (security.tls, security.principal_mapper)
        } else {
            let mapper = SslPrincipalMapper::parse("DEFAULT")
                .map_err(|e| format!("ssl.principal.mapping.rules: {e}"))?;
            (None, mapper)
        };
        let admitted = config
            .setting("authorizer.class.name")
            .filter(|c| !c.is_empty())
            .map(|_| {
                AuthorizerConfig::parse_super_users(
                    &config.setting("super.users").unwrap_or_default(),
                )
            });
        Ok(Some(ControllerChannel {
            acceptor,
            mapper,
            admitted,
            connector,
        }))
    }

    /// Opens a connection to a controller listener.
    pub fn connect(&self, addr: &str) -> Connecting {
        self.connector.connect(addr)
    }

    /// Admits a connection to this node's controller listener: the TLS
    /// handshake (with the client certificate `ssl.client.auth` asks for),
    /// then, with an authorizer, the certificate's principal among the
    /// super users.
    pub fn accept(&self, stream: tokio::net::TcpStream, peer: SocketAddr) -> Admitting {
        let acceptor = self.acceptor.clone();
        let mapper = self.mapper.clone();
        let admitted = self.admitted.clone();
        Box::pin(async move {
            stream.set_nodelay(true)?;
            let Some(acceptor) = acceptor else {
                return Err(std::io::Error::other(
                    "this node has no controller listener",
                ));
            };
            let tls = acceptor.accept(stream).await?;
            let principal = match tls.get_ref().1.peer_certificates().and_then(|c| c.first()) {
                Some(der) => {
                    let name = subject_dn(der)
                        .and_then(|dn| mapper.user_name(&dn))
                        .map_err(std::io::Error::other)?;
                    KafkaPrincipal::user(name)
                }
                None => KafkaPrincipal::anonymous(),
            };
            if let Some(admitted) = &admitted {
                if !admitted.contains(&principal.to_string()) {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        format!("{principal} is not a super user: not admitted to the controller listener"),
                    ));
                }
            }
            tracing::debug!(%peer, %principal, "controller listener admitted a peer");
            Ok(Box::new(tls) as Box<dyn Stream>)
        })
    }
}
