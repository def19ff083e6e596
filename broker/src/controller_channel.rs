//! The controller listener's security (`controller.listener.names`, its
//! protocol in `listener.security.protocol.map`): how this node reaches the
//! controllers and how a controller admits Raft peers and brokers, before
//! it reads a single request from them.
//!
//! - `SSL`: TLS against the listener's trust store, each side presenting
//!   its key store; with `ssl.client.auth=required` a peer without a
//!   certificate the trust store accepts is refused in the handshake. The
//!   principal is the certificate's mapped subject.
//! - `SASL_PLAINTEXT` / `SASL_SSL` (over TLS as above): SASL/PLAIN, as
//!   `sasl.mechanism.controller.protocol=PLAIN` selects in Kafka; the users
//!   are the listener's `plain.sasl.jaas.config` `user_<name>` options and
//!   each node presents that entry's `username`/`password`. The principal
//!   is the user. SCRAM cannot serve here (its credentials live in the
//!   metadata log the controllers serve: Kafka does not take it either),
//!   nor GSSAPI (not implemented): start-up says so (config.rs).
//!
//! The controller RPC is Strand's own framing (4-byte length, JSON), not
//! Kafka's protocol, so the SASL step is one frame each way:
//! `{"mechanism":"PLAIN","token":[bytes]}` and `{"authenticated":true}` or
//! `{"error":"..."}`.
//!
//! With an authorizer (`authorizer.class.name`) only `super.users` are
//! admitted: the controller listener carries the metadata log itself, so
//! no ACL in that log can open it (Kafka's deployments list the broker and
//! controller principals in `super.users` for the same reason).

use crate::config::BrokerConfig;
use crate::inter_broker::{jaas_login, tls_transport};
use crate::listener_security::ListenerSecurity;
use crate::transport::{Connecting, Stream, TcpTransport, Transport};
use std::collections::BTreeSet;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use strand_security::acl::AuthorizerConfig;
use strand_security::plain::PlainUsers;
use strand_security::principal::{subject_dn, KafkaPrincipal, SslPrincipalMapper};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::TlsAcceptor;

pub type Admitting = Pin<Box<dyn Future<Output = std::io::Result<Box<dyn Stream>>> + Send>>;

/// The largest SASL frame either side reads (a PLAIN token is a name and
/// a password).
const MAX_SASL_FRAME: usize = 8 * 1024;

/// How long a failed authentication's answer waits (Kafka's
/// `connection.failed.authentication.delay.ms` default): one guess per
/// connection and per delay.
const FAILED_AUTHENTICATION_DELAY: Duration = Duration::from_millis(100);

/// The controller listener's security, both directions.
pub struct ControllerChannel {
    /// This node listens on the controller listener (controller nodes).
    listening: bool,
    /// SSL and SASL_SSL: the server side of TLS (controller nodes).
    acceptor: Option<TlsAcceptor>,
    mapper: SslPrincipalMapper,
    /// SASL_*: the users a controller admits.
    sasl_users: Option<Arc<PlainUsers>>,
    /// SASL_*: the user name and password this node presents.
    sasl_login: Option<(String, String)>,
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
        if !protocol.uses_tls() && !protocol.uses_sasl() {
            return Ok(None);
        }
        let setting = |key: &str| config.listener_setting(name, key);
        let connector = if protocol.uses_tls() {
            tls_transport(name, &setting)?
        } else {
            TcpTransport::shared()
        };
        let sasl_login = if protocol.uses_sasl() {
            Some(jaas_login(
                name,
                "plain.sasl.jaas.config",
                &setting,
                &format!("controller listener {name}"),
            )?)
        } else {
            None
        };
        let listening = config.is_controller();
        let (acceptor, mapper, sasl_users) = if listening {
            let security = ListenerSecurity::build(config, name)?;
            if protocol.uses_sasl() {
                let sasl = security
                    .sasl
                    .as_ref()
                    .filter(|s| s.enabled.iter().any(|m| m == "PLAIN"));
                if sasl.is_none() {
                    return Err(format!(
                        "controller listener {name}: sasl.mechanism.controller.protocol is PLAIN, so listener.name.{}.sasl.enabled.mechanisms must include PLAIN",
                        name.to_lowercase()
                    ));
                }
            } else if setting("ssl.client.auth").as_deref() != Some("required") {
                tracing::warn!(listener = %name, "the controller listener is TLS without ssl.client.auth=required: any process that reaches it can vote and register");
            }
            let users = security.sasl.map(|s| Arc::new(s.plain));
            (
                security.tls.map(|t| t.current()),
                security.principal_mapper,
                users,
            )
        } else {
            let mapper = SslPrincipalMapper::parse("DEFAULT")
                .map_err(|e| format!("ssl.principal.mapping.rules: {e}"))?;
            (None, mapper, None)
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
            listening,
            acceptor,
            mapper,
            sasl_users,
            sasl_login,
            admitted,
            connector,
        }))
    }

    /// Opens a connection to a controller listener (and authenticates on
    /// it, with SASL).
    pub fn connect(&self, addr: &str) -> Connecting {
        let connecting = self.connector.connect(addr);
        let login = self.sasl_login.clone();
        Box::pin(async move {
            let mut stream = connecting.await?;
            if let Some((user, password)) = login {
                let token = format!("\0{user}\0{password}").into_bytes();
                let hello = serde_json::json!({ "mechanism": "PLAIN", "token": token });
                write_frame(&mut stream, &hello).await?;
                let answer = read_frame(&mut stream).await?;
                if answer.get("authenticated") != Some(&serde_json::Value::Bool(true)) {
                    let why = answer
                        .get("error")
                        .and_then(|e| e.as_str())
                        .unwrap_or("no answer");
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::PermissionDenied,
                        format!("the controller listener refused this node's SASL/PLAIN login as {user}: {why}"),
                    ));
                }
            }
            Ok(stream)
        })
    }

    /// Admits a connection to this node's controller listener: the TLS
    /// handshake (with the client certificate `ssl.client.auth` asks for),
    /// the SASL login, then, with an authorizer, the principal among the
    /// super users.
    pub fn accept(&self, stream: tokio::net::TcpStream, peer: SocketAddr) -> Admitting {
        let listening = self.listening;
        let acceptor = self.acceptor.clone();
        let mapper = self.mapper.clone();
        let users = self.sasl_users.clone();
        let admitted = self.admitted.clone();
        Box::pin(async move {
            stream.set_nodelay(true)?;
            if !listening {
                return Err(std::io::Error::other(
                    "this node has no controller listener",
                ));
            }
            let (mut stream, mut principal) = match acceptor {
                Some(acceptor) => {
                    let tls = acceptor.accept(stream).await?;
                    let principal =
                        match tls.get_ref().1.peer_certificates().and_then(|c| c.first()) {
                            Some(der) => {
                                let name = subject_dn(der)
                                    .and_then(|dn| mapper.user_name(&dn))
                                    .map_err(std::io::Error::other)?;
                                KafkaPrincipal::user(name)
                            }
                            None => KafkaPrincipal::anonymous(),
                        };
                    (Box::new(tls) as Box<dyn Stream>, principal)
                }
                None => (
                    Box::new(stream) as Box<dyn Stream>,
                    KafkaPrincipal::anonymous(),
                ),
            };
            // With SASL the principal is the SASL user (as on Kafka's
            // SASL_SSL listeners), whatever certificate was shown.
            if let Some(users) = &users {
                principal = KafkaPrincipal::user(sasl_login(&mut stream, users).await?);
            }
            let refused = admitted
                .as_ref()
                .filter(|a| !a.contains(&principal.to_string()))
                .map(|_| {
                    format!(
                        "{principal} is not a super user: not admitted to the controller listener"
                    )
                });
            if users.is_some() {
                let answer = match &refused {
                    None => serde_json::json!({ "authenticated": true }),
                    Some(why) => serde_json::json!({ "error": why }),
                };
                write_frame(&mut stream, &answer).await?;
            }
            if let Some(why) = refused {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::PermissionDenied,
                    why,
                ));
            }
            tracing::debug!(%peer, %principal, "controller listener admitted a peer");
            Ok(stream)
        })
    }
}

/// The server's side of the SASL/PLAIN step: the user (the caller answers
/// once it has admitted the principal), or the refusal, answered after
/// Kafka's failed-authentication delay.
async fn sasl_login(stream: &mut Box<dyn Stream>, users: &PlainUsers) -> std::io::Result<String> {
    let hello = read_frame(stream).await?;
    let mechanism = hello.get("mechanism").and_then(|m| m.as_str());
    let token: Option<Vec<u8>> = hello
        .get("token")
        .and_then(|t| serde_json::from_value(t.clone()).ok());
    let refused = match (mechanism, token) {
        (Some("PLAIN"), Some(token)) => match users.authenticate(&token) {
            Ok(user) => return Ok(user),
            Err(e) => format!("Authentication failed: Invalid username or password ({e})"),
        },
        (Some(m), _) if m != "PLAIN" => {
            format!("Unsupported SASL mechanism {m} (the controller listener takes PLAIN)")
        }
        _ => "malformed SASL login".to_string(),
    };
    tokio::time::sleep(FAILED_AUTHENTICATION_DELAY).await;
    let _ = write_frame(
        stream,
        &serde_json::json!({ "error": "Authentication failed: Invalid username or password" }),
    )
    .await;
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        refused,
    ))
}

async fn write_frame(
    stream: &mut Box<dyn Stream>,
    value: &serde_json::Value,
) -> std::io::Result<()> {
    let body = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame.extend_from_slice(&body);
    stream.write_all(&frame).await?;
    stream.flush().await
}

async fn read_frame(stream: &mut Box<dyn Stream>) -> std::io::Result<serde_json::Value> {
    let mut len = [0u8; 4];
    stream.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > MAX_SASL_FRAME {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a SASL frame of {len} bytes on the controller listener"),
        ));
    }
    let mut body = vec![0u8; len];
    stream.read_exact(&mut body).await?;
    serde_json::from_slice(&body)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}
