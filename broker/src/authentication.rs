//! Who is on a connection, and the SASL exchange that establishes it: the
//! server asks [`ConnAuth::admit`] about every request before serving it and
//! does what it answers. The rules are `strand_security::sasl::Session`'s;
//! this module supplies the listener's settings, the SCRAM credentials of
//! the metadata image, nonces and the clock, and speaks the wire types.

use crate::listener_security::ListenerSecurity;
use crate::node::Node;
use bytes::Bytes;
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use rand::distributions::{Alphanumeric, DistString};
use strand_protocol::ErrorCode;
use strand_security::principal::KafkaPrincipal;
use strand_security::sasl::{Api, AuthenticateAnswer, Credentials, Gate, HandshakeAnswer, Session};
use strand_security::scram::{Mechanism, ScramCredential};

/// What the server does with one request.
pub enum Admission {
    Serve,
    /// Answer with this, keep the connection.
    Answer(ResponseKind),
    /// Answer with this, then close (a refused mechanism, failed credentials).
    AnswerThenClose(ResponseKind),
    /// Close without an answer.
    Close(String),
}

/// One connection's authentication.
pub struct ConnAuth {
    /// Who the connection is: `User:ANONYMOUS` until SASL authenticates it.
    pub principal: KafkaPrincipal,
    /// SASL listeners only.
    session: Option<Session>,
    /// After a SaslHandshake v0, the exchange's tokens come as bare frames
    /// (no Kafka header), and are answered the same way.
    raw_tokens: bool,
}

/// The answer to a bare SASL token (after SaslHandshake v0).
pub enum RawAnswer {
    /// Write this token as a frame.
    Token(Vec<u8>),
    /// Close the connection (a failed exchange: v0 has no error answer).
    Close(String),
}

impl ConnAuth {
    /// `principal` is the TLS one (a client certificate's) or anonymous.
    pub fn new(security: &ListenerSecurity, principal: KafkaPrincipal) -> ConnAuth {
        ConnAuth {
            principal,
            session: security.sasl.as_ref().map(|_| Session::new()),
            raw_tokens: false,
        }
    }

    /// Whether the next frame is a bare SASL token (SaslHandshake v0).
    /// Whether the connection is still in its SASL exchange (before its
    /// first successful authentication): what it sends is the exchange's,
    /// which Kafka's authenticator answers outside any quota.
    pub fn authenticating(&self) -> bool {
        self.session.as_ref().is_some_and(|s| s.user().is_none())
    }

    pub fn wants_raw_token(&self) -> bool {
        self.raw_tokens
    }

    /// One bare token of a SaslHandshake v0 exchange.
    pub fn raw_token(
        &mut self,
        node: &Node,
        security: &ListenerSecurity,
        token: &[u8],
    ) -> RawAnswer {
        match self.exchange(node, security, token) {
            Exchanged::Continue(bytes) => RawAnswer::Token(bytes),
            Exchanged::Done(bytes, _) => {
                self.raw_tokens = false;
                RawAnswer::Token(bytes)
            }
            Exchanged::Failed(_, reason) | Exchanged::Illegal(reason) => RawAnswer::Close(reason),
        }
    }

    /// One SASL token through the session's exchange.
    fn exchange(&mut self, node: &Node, security: &ListenerSecurity, token: &[u8]) -> Exchanged {
        let (Some(session), Some(sasl)) = (self.session.as_mut(), security.sasl.as_ref()) else {
            return Exchanged::Illegal("not a SASL listener".into());
        };
        let now_ms = node.broker.clock.now_ms().max(0) as u64;
        let image = node.broker.image();
        let scram = |user: &str, m: Mechanism| -> Option<ScramCredential> {
            let c = image.scram_credentials.get(user)?.get(&m.wire())?;
            Some(ScramCredential {
                mechanism: m,
                salt: c.salt.clone(),
                iterations: u32::try_from(c.iterations).ok()?,
                stored_key: c.stored_key.clone(),
                server_key: c.server_key.clone(),
            })
        };
        let nonce = Alphanumeric.sample_string(&mut rand::thread_rng(), 32);
        let creds = Credentials {
            plain: &sasl.plain,
            scram: &scram,
            nonce: &nonce,
            max_reauth_ms: sasl.max_reauth_ms,
            now_ms,
        };
        match session.authenticate(token, &creds) {
            AuthenticateAnswer::Challenge(bytes) => Exchanged::Continue(bytes),
            AuthenticateAnswer::Done {
                message,
                user,
                session_lifetime_ms,
            } => {
                tracing::debug!(%user, "SASL authentication succeeded");
                node.broker.metrics.authentication(&sasl.listener, true);
                self.principal = KafkaPrincipal::user(user);
                Exchanged::Done(message, session_lifetime_ms)
            }
            AuthenticateAnswer::Failed { message, reason } => {
                tracing::info!(%reason, "SASL authentication failed");
                node.broker.metrics.authentication(&sasl.listener, false);
                Exchanged::Failed(message, reason)
            }
            AuthenticateAnswer::IllegalState(why) => Exchanged::Illegal(why),
        }
    }

    pub fn admit(
        &mut self,
        node: &Node,
        security: &ListenerSecurity,
        key: ApiKey,
        version: i16,
        request: &RequestKind,
    ) -> Admission {
        let now_ms = node.broker.clock.now_ms().max(0) as u64;
        let (Some(session), Some(sasl)) = (self.session.as_mut(), security.sasl.as_ref()) else {
            // Not a SASL listener: the SASL APIs are answered as Kafka's
            // request handler answers them there.
            return match request {
                RequestKind::SaslHandshake(r) => Admission::Answer(ResponseKind::SaslHandshake(
                    SaslHandshakeResponse::default()
                        .with_error_code(ErrorCode::IllegalSaslState.code())
                        .with_mechanisms(vec![]),
                ))
                .also(|| tracing::debug!(mechanism = %r.mechanism.as_str(), "SaslHandshake on a listener without SASL")),
                RequestKind::SaslAuthenticate(_) => Admission::Answer(illegal_authenticate()),
                _ => Admission::Serve,
            };
        };
        let api = match key {
            ApiKey::ApiVersions => Api::ApiVersions,
            ApiKey::SaslHandshake => Api::SaslHandshake,
            ApiKey::SaslAuthenticate => Api::SaslAuthenticate,
            _ => Api::Other,
        };
        match session.gate(api, &kafka_api_name(key), now_ms) {
            Gate::Serve => Admission::Serve,
            Gate::Close(why) => Admission::Close(why),
            Gate::Handshake => {
                let RequestKind::SaslHandshake(r) = request else {
                    return Admission::Close("SaslHandshake expected".into());
                };
                let mechanisms: Vec<StrBytes> = sasl
                    .enabled
                    .iter()
                    .map(|m| StrBytes::from_string(m.clone()))
                    .collect();
                let response = |code: Option<ErrorCode>| {
                    ResponseKind::SaslHandshake(
                        SaslHandshakeResponse::default()
                            .with_error_code(strand_protocol::code(code))
                            .with_mechanisms(mechanisms.clone()),
                    )
                };
                match session.handshake(r.mechanism.as_str(), &sasl.enabled, now_ms) {
                    HandshakeAnswer::Accepted => {
                        // v0: the tokens follow as bare frames (before KIP-152).
                        self.raw_tokens = version == 0;
                        Admission::Answer(response(None))
                    }
                    HandshakeAnswer::Unsupported => Admission::AnswerThenClose(response(Some(
                        ErrorCode::UnsupportedSaslMechanism,
                    ))),
                    HandshakeAnswer::IllegalState(why) => {
                        tracing::debug!(%why, "SaslHandshake refused");
                        Admission::Answer(response(Some(ErrorCode::IllegalSaslState)))
                    }
                }
            }
            Gate::Authenticate => {
                let RequestKind::SaslAuthenticate(r) = request else {
                    return Admission::Close("SaslAuthenticate expected".into());
                };
                let response = SaslAuthenticateResponse::default();
                match self.exchange(node, security, &r.auth_bytes) {
                    Exchanged::Continue(bytes) => {
                        Admission::Answer(ResponseKind::SaslAuthenticate(
                            response.with_auth_bytes(Bytes::from(bytes)),
                        ))
                    }
                    Exchanged::Done(bytes, lifetime) => {
                        Admission::Answer(ResponseKind::SaslAuthenticate(
                            response
                                .with_auth_bytes(Bytes::from(bytes))
                                .with_session_lifetime_ms(lifetime),
                        ))
                    }
                    Exchanged::Failed(message, _) => {
                        Admission::AnswerThenClose(ResponseKind::SaslAuthenticate(
                            response
                                .with_error_code(ErrorCode::SaslAuthenticationFailed.code())
                                .with_error_message(Some(StrBytes::from_string(message))),
                        ))
                    }
                    Exchanged::Illegal(_) => Admission::Answer(illegal_authenticate()),
                }
            }
        }
    }
}

/// Where one token left the exchange.
enum Exchanged {
    Continue(Vec<u8>),
    /// Authenticated: the final server message and the session's lifetime.
    Done(Vec<u8>, i64),
    /// Kafka's message, and the reason for the log.
    Failed(String, String),
    Illegal(String),
}

trait Also {
    fn also(self, f: impl FnOnce()) -> Self;
}

impl Also for Admission {
    fn also(self, f: impl FnOnce()) -> Self {
        f();
        self
    }
}

fn illegal_authenticate() -> ResponseKind {
    ResponseKind::SaslAuthenticate(
        SaslAuthenticateResponse::default()
            .with_error_code(ErrorCode::IllegalSaslState.code())
            .with_error_message(Some(StrBytes::from_static_str(
                "SaslAuthenticate request received after successful authentication",
            ))),
    )
}

/// Kafka's name of an API (`ApiKeys`' constant: `METADATA`,
/// `SASL_HANDSHAKE`), as its messages print it.
pub fn kafka_api_name(key: ApiKey) -> String {
    let camel = format!("{key:?}");
    let mut out = String::with_capacity(camel.len() + 4);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_uppercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_names_are_kafkas() {
        assert_eq!(kafka_api_name(ApiKey::Metadata), "METADATA");
        assert_eq!(kafka_api_name(ApiKey::SaslHandshake), "SASL_HANDSHAKE");
        assert_eq!(
            kafka_api_name(ApiKey::DescribeUserScramCredentials),
            "DESCRIBE_USER_SCRAM_CREDENTIALS"
        );
    }
}
