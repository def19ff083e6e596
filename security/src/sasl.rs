//! A SASL listener's connection, as Kafka's `SaslServerAuthenticator` runs
//! it: a pure state machine the server feeds each request's API key and the
//! SaslHandshake / SaslAuthenticate payloads, and whose decisions it
//! carries out (answer, serve, close).
//!
//! - Before authentication only ApiVersions and SaslHandshake (v1) are
//!   served; any other request closes the connection. A mechanism that is
//!   not enabled is answered UNSUPPORTED_SASL_MECHANISM with the enabled
//!   ones, and the connection closed.
//! - After the handshake only SaslAuthenticate is accepted until the
//!   exchange ends; a failed exchange is answered SASL_AUTHENTICATION_FAILED
//!   and the connection closed.
//! - Once authenticated, every request is served until the session expires
//!   (`connections.max.reauth.ms`, KIP-368): then only a SaslHandshake that
//!   begins re-authentication keeps the connection, which must prove the
//!   same principal with the same mechanism.

use crate::plain::PlainUsers;
use crate::scram::{Mechanism, ScramCredential, ScramError, ScramServer};

/// The mechanisms Strand serves, by Kafka's names.
pub const MECHANISMS: [&str; 3] = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// A request's place in the exchange, by API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    ApiVersions,
    SaslHandshake,
    SaslAuthenticate,
    Other,
}

/// What the server does with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Gate {
    /// Serve it as usual.
    Serve,
    /// Answer it with [`Session::handshake`].
    Handshake,
    /// Answer it with [`Session::authenticate`].
    Authenticate,
    /// Close the connection without an answer (Kafka's
    /// IllegalSaslStateException, or an expired session).
    Close(String),
}

/// One exchange in progress.
enum Exchange {
    Plain,
    Scram(Box<ScramServer>),
}

enum Stage {
    /// Nothing yet (or re-authentication begun by a handshake).
    Handshake,
    Authenticate(Exchange, String),
    Authenticated,
}

/// The authentication state of one connection.
pub struct Session {
    stage: Stage,
    /// The principal's user name once authenticated (kept through a
    /// re-authentication, which must prove the same one).
    user: Option<String>,
    mechanism: Option<String>,
    /// When the session ends, in the caller's clock (ms); None: never.
    expires_at_ms: Option<u64>,
    /// When the last re-authentication began: Kafka allows one a second.
    last_reauth_ms: Option<u64>,
}

/// Where a handshake leads.
#[derive(Debug, PartialEq, Eq)]
pub enum HandshakeAnswer {
    /// Error NONE with the enabled mechanisms.
    Accepted,
    /// UNSUPPORTED_SASL_MECHANISM with the enabled mechanisms, then close.
    Unsupported,
    /// ILLEGAL_SASL_STATE (a handshake after authentication that may not
    /// begin re-authentication): answered, the connection kept.
    IllegalState(String),
}

/// The answer to one SaslAuthenticate.
#[derive(Debug, PartialEq, Eq)]
pub enum AuthenticateAnswer {
    /// The next challenge; the exchange goes on.
    Challenge(Vec<u8>),
    /// Authenticated as `user`; the final server message and the session's
    /// lifetime to report (0: none).
    Done {
        message: Vec<u8>,
        user: String,
        session_lifetime_ms: i64,
    },
    /// SASL_AUTHENTICATION_FAILED with Kafka's `message`, then close;
    /// `reason` is for the broker's log.
    Failed { message: String, reason: String },
    /// ILLEGAL_SASL_STATE: SaslAuthenticate outside an exchange; answered,
    /// the connection kept.
    IllegalState(String),
}

/// What a SaslAuthenticate step needs from the broker.
pub struct Credentials<'a> {
    pub plain: &'a PlainUsers,
    pub scram: &'a dyn Fn(&str, Mechanism) -> Option<ScramCredential>,
    /// Fresh printable randomness without `,`, for a SCRAM server nonce.
    pub nonce: &'a str,
    /// `connections.max.reauth.ms`; 0 or less: sessions never expire.
    pub max_reauth_ms: i64,
    pub now_ms: u64,
}

impl Default for Session {
    fn default() -> Self {
        Session::new()
    }
}

impl Session {
    pub fn new() -> Session {
        Session {
            stage: Stage::Handshake,
            user: None,
            mechanism: None,
            expires_at_ms: None,
            last_reauth_ms: None,
        }
    }

    /// The authenticated user name, if any.
    pub fn user(&self) -> Option<&str> {
        match self.stage {
            Stage::Authenticated => self.user.as_deref(),
            _ => None,
        }
    }

    /// What to do with a request of `api` at `now_ms`.
    pub fn gate(&self, api: Api, name: &str, now_ms: u64) -> Gate {
        match (&self.stage, api) {
            (Stage::Handshake, Api::ApiVersions) if self.user.is_none() => Gate::Serve,
            (Stage::Handshake, Api::SaslHandshake) => Gate::Handshake,
            (Stage::Handshake, _) => Gate::Close(format!(
                "Unexpected Kafka request of type {name} during SASL handshake."
            )),
            (Stage::Authenticate(..), Api::SaslAuthenticate) => Gate::Authenticate,
            (Stage::Authenticate(..), _) => Gate::Close(format!(
                "Unexpected Kafka request of type {name} during SASL authentication."
            )),
            (Stage::Authenticated, Api::SaslHandshake) => Gate::Handshake,
            (Stage::Authenticated, _) if self.expired(now_ms) => {
                Gate::Close("SASL session expired (connections.max.reauth.ms)".into())
            }
            (Stage::Authenticated, Api::SaslAuthenticate) => Gate::Authenticate,
            (Stage::Authenticated, _) => Gate::Serve,
        }
    }

    fn expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|t| now_ms >= t)
    }

    /// A SaslHandshake for `mechanism`, given the listener's enabled ones.
    pub fn handshake(
        &mut self,
        mechanism: &str,
        enabled: &[String],
        now_ms: u64,
    ) -> HandshakeAnswer {
        if let Stage::Authenticated = self.stage {
            // Re-authentication (KIP-368): at most one start a second, and
            // only with the mechanism that authenticated the connection.
            if self
                .last_reauth_ms
                .is_some_and(|t| now_ms.saturating_sub(t) < 1000)
            {
                return HandshakeAnswer::IllegalState(format!(
                    "Unexpected handshake request with client mechanism {mechanism}, enabled mechanisms are {enabled:?}"
                ));
            }
            if self.mechanism.as_deref() != Some(mechanism) {
                return HandshakeAnswer::Unsupported;
            }
            self.last_reauth_ms = Some(now_ms);
        }
        if !enabled.iter().any(|m| m == mechanism) || !MECHANISMS.contains(&mechanism) {
            return HandshakeAnswer::Unsupported;
        }
        let exchange = match Mechanism::from_name(mechanism) {
            Some(m) => Exchange::Scram(Box::new(ScramServer::new(m))),
            None => Exchange::Plain,
        };
        self.stage = Stage::Authenticate(exchange, mechanism.to_string());
        HandshakeAnswer::Accepted
    }

    /// One SaslAuthenticate token.
    pub fn authenticate(&mut self, token: &[u8], creds: &Credentials) -> AuthenticateAnswer {
        let stage = std::mem::replace(&mut self.stage, Stage::Handshake);
        let (mut exchange, mechanism) = match stage {
            Stage::Authenticate(exchange, mechanism) => (exchange, mechanism),
            other => {
                self.stage = other;
                return AuthenticateAnswer::IllegalState(
                    "SaslAuthenticate request received after successful authentication".into(),
                );
            }
        };
        // Kafka's message for a failed SCRAM exchange (the reason is not
        // told to the client).
        let failed = |reason: &ScramError| {
            AuthenticateAnswer::Failed {
            message: format!(
                "Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"
            ),
            reason: reason.to_string(),
        }
        };
        let done = match &mut exchange {
            Exchange::Plain => match creds.plain.authenticate(token) {
                Ok(user) => (Vec::new(), user),
                // Kafka's PlainSaslServer message.
                Err(e) => {
                    return AuthenticateAnswer::Failed {
                        message: "Authentication failed: Invalid username or password".into(),
                        reason: e.to_string(),
                    }
                }
            },
            Exchange::Scram(server) => {
                if server.expects_client_first() {
                    let scram = creds.scram;
                    let mech = server.mechanism();
                    return match server.client_first(token, |u| scram(u, mech), creds.nonce) {
                        Ok(challenge) => {
                            self.stage = Stage::Authenticate(exchange, mechanism);
                            AuthenticateAnswer::Challenge(challenge)
                        }
                        Err(e) => failed(&e),
                    };
                }
                match server.client_final(token) {
                    Ok(done) => done,
                    Err(e) => return failed(&e),
                }
            }
        };
        let (message, user) = done;
        if let Some(previous) = &self.user {
            if *previous != user {
                let message = format!(
                    "Cannot change principals during re-authentication from User:{previous}: User:{user}"
                );
                return AuthenticateAnswer::Failed {
                    reason: message.clone(),
                    message,
                };
            }
        }
        self.user = Some(user.clone());
        self.mechanism = Some(mechanism);
        self.stage = Stage::Authenticated;
        let lifetime = creds.max_reauth_ms.max(0);
        self.expires_at_ms = (lifetime > 0).then(|| creds.now_ms.saturating_add(lifetime as u64));
        AuthenticateAnswer::Done {
            message,
            user,
            session_lifetime_ms: lifetime,
        }
    }
}

#[cfg(test)]
mod tests;
