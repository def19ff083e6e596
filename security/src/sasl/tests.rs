use super::*;
use base64::Engine;
use std::collections::BTreeMap;

fn enabled() -> Vec<String> {
    MECHANISMS.iter().map(|m| m.to_string()).collect()
}

fn users() -> PlainUsers {
    PlainUsers(BTreeMap::from([(
        "alice".to_string(),
        "alice-secret".to_string(),
    )]))
}

fn creds<'a>(
    plain: &'a PlainUsers,
    scram: &'a dyn Fn(&str, Mechanism) -> Option<ScramCredential>,
    reauth: i64,
    now_ms: u64,
) -> Credentials<'a> {
    Credentials {
        plain,
        scram,
        nonce: "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        max_reauth_ms: reauth,
        now_ms,
    }
}

fn no_scram(_: &str, _: Mechanism) -> Option<ScramCredential> {
    None
}

/// Before authentication, only ApiVersions and SaslHandshake; during the
/// exchange only SaslAuthenticate; anything else closes, with Kafka's words.
#[test]
fn what_is_served_at_each_stage() {
    let mut s = Session::new();
    assert_eq!(s.gate(Api::ApiVersions, "API_VERSIONS", 0), Gate::Serve);
    assert_eq!(
        s.gate(Api::SaslHandshake, "SASL_HANDSHAKE", 0),
        Gate::Handshake
    );
    for (api, name) in [
        (Api::Other, "METADATA"),
        (Api::SaslAuthenticate, "SASL_AUTHENTICATE"),
    ] {
        assert_eq!(
            s.gate(api, name, 0),
            Gate::Close(format!(
                "Unexpected Kafka request of type {name} during SASL handshake."
            ))
        );
    }
    assert_eq!(
        s.handshake("PLAIN", &enabled(), 0),
        HandshakeAnswer::Accepted
    );
    assert_eq!(
        s.gate(Api::SaslAuthenticate, "SASL_AUTHENTICATE", 0),
        Gate::Authenticate
    );
    for (api, name) in [
        (Api::Other, "PRODUCE"),
        (Api::ApiVersions, "API_VERSIONS"),
        (Api::SaslHandshake, "SASL_HANDSHAKE"),
    ] {
        assert_eq!(
            s.gate(api, name, 0),
            Gate::Close(format!(
                "Unexpected Kafka request of type {name} during SASL authentication."
            ))
        );
    }
    assert_eq!(s.user(), None);
    let plain = users();
    let answer = s.authenticate(b"\0alice\0alice-secret", &creds(&plain, &no_scram, 0, 0));
    assert_eq!(
        answer,
        AuthenticateAnswer::Done {
            message: vec![],
            user: "alice".into(),
            session_lifetime_ms: 0
        }
    );
    assert_eq!(s.user(), Some("alice"));
    assert_eq!(
        s.gate(Api::Other, "PRODUCE", u64::MAX),
        Gate::Serve,
        "no reauth: never expires"
    );
    assert_eq!(
        s.gate(Api::SaslAuthenticate, "SASL_AUTHENTICATE", 0),
        Gate::Authenticate
    );
    assert!(matches!(
        s.authenticate(b"x", &creds(&plain, &no_scram, 0, 0)),
        AuthenticateAnswer::IllegalState(_)
    ));
    assert_eq!(
        s.user(),
        Some("alice"),
        "an illegal SaslAuthenticate keeps the session"
    );
}

#[test]
fn unsupported_mechanisms_and_failed_exchanges() {
    let plain = users();
    let only_scram = vec!["SCRAM-SHA-512".to_string()];
    for (mechanism, list) in [
        ("PLAIN", &only_scram),
        ("GSSAPI", &enabled()),
        ("plain", &enabled()),
    ] {
        assert_eq!(
            Session::new().handshake(mechanism, list, 0),
            HandshakeAnswer::Unsupported,
            "{mechanism}"
        );
    }
    for token in [
        &b"\0alice\0wrong"[..],
        b"\0bob\0alice-secret",
        b"alice-secret",
        b"\0\0",
        b"bob\0alice\0alice-secret",
    ] {
        let mut s = Session::new();
        s.handshake("PLAIN", &enabled(), 0);
        let answer = s.authenticate(token, &creds(&plain, &no_scram, 0, 0));
        let AuthenticateAnswer::Failed { message, .. } = answer else {
            panic!("{token:?}: {answer:?}")
        };
        assert_eq!(
            message,
            "Authentication failed: Invalid username or password"
        );
        assert_eq!(s.user(), None);
    }
    // SCRAM: an unknown user fails at the first message, with Kafka's message.
    let mut s = Session::new();
    s.handshake("SCRAM-SHA-512", &enabled(), 0);
    let answer = s.authenticate(b"n,,n=nobody,r=abc", &creds(&plain, &no_scram, 0, 0));
    assert_eq!(
        answer,
        AuthenticateAnswer::Failed {
            message: "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512".into(),
            reason: ScramError::UnknownUser.to_string(),
        }
    );
}

/// RFC 7677's exchange through a session, then re-authentication (KIP-368):
/// the lifetime is reported, an expired session serves nothing but a
/// handshake, and re-authentication keeps the principal.
#[test]
fn scram_exchange_session_lifetime_and_reauthentication() {
    let b64 = base64::engine::general_purpose::STANDARD;
    let salt = b64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
    let user_cred = ScramCredential::derive(Mechanism::Sha256, b"pencil", &salt, 4096);
    let lookup = move |u: &str, m: Mechanism| -> Option<ScramCredential> {
        (m == Mechanism::Sha256 && u == "user").then(|| user_cred.clone())
    };
    let plain = users();
    let mut s = Session::new();
    let exchange = |s: &mut Session, name: &str, now: u64| -> AuthenticateAnswer {
        let c = creds(&plain, &lookup, 60_000, now);
        let first = s.authenticate(format!("n,,n={name},r=rOprNGfwEbeRWgbNEkqO").as_bytes(), &c);
        assert!(
            matches!(first, AuthenticateAnswer::Challenge(_)),
            "{first:?}"
        );
        assert_eq!(
            s.gate(Api::SaslAuthenticate, "SASL_AUTHENTICATE", now),
            Gate::Authenticate
        );
        // RFC 7677's proof (the client's nonce and salt are the RFC's).
        s.authenticate(b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=", &c)
    };
    assert_eq!(
        s.handshake("SCRAM-SHA-256", &enabled(), 0),
        HandshakeAnswer::Accepted
    );
    let done = exchange(&mut s, "user", 1_000);
    assert_eq!(
        done,
        AuthenticateAnswer::Done {
            message: b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=".to_vec(),
            user: "user".into(),
            session_lifetime_ms: 60_000,
        }
    );
    assert_eq!(s.gate(Api::Other, "FETCH", 60_999), Gate::Serve);
    assert!(
        matches!(s.gate(Api::Other, "FETCH", 61_000), Gate::Close(_)),
        "expired"
    );
    assert_eq!(
        s.gate(Api::SaslHandshake, "SASL_HANDSHAKE", 61_000),
        Gate::Handshake
    );
    // Another mechanism may not re-authenticate the connection.
    let mut t = Session::new();
    t.handshake("SCRAM-SHA-256", &enabled(), 0);
    exchange(&mut t, "user", 0);
    assert_eq!(
        t.handshake("PLAIN", &enabled(), 5_000),
        HandshakeAnswer::Unsupported
    );
    // Re-authentication with the same principal renews the session.
    assert_eq!(
        s.handshake("SCRAM-SHA-256", &enabled(), 61_000),
        HandshakeAnswer::Accepted
    );
    assert!(matches!(
        exchange(&mut s, "user", 61_000),
        AuthenticateAnswer::Done { .. }
    ));
    assert_eq!(s.gate(Api::Other, "FETCH", 120_999), Gate::Serve);
    // A second start within a second is refused, the session kept.
    assert!(matches!(
        s.handshake("SCRAM-SHA-256", &enabled(), 61_500),
        HandshakeAnswer::IllegalState(_)
    ));
    assert_eq!(s.user(), Some("user"));
}

/// Re-authenticating as someone else fails, with Kafka's message.
#[test]
fn reauthentication_keeps_the_principal() {
    let mut plain = users();
    plain.0.insert("bob".into(), "bob-secret".into());
    let mut s = Session::new();
    s.handshake("PLAIN", &enabled(), 0);
    let c = creds(&plain, &no_scram, 10_000, 0);
    assert!(matches!(
        s.authenticate(b"\0alice\0alice-secret", &c),
        AuthenticateAnswer::Done { .. }
    ));
    assert_eq!(
        s.handshake("PLAIN", &enabled(), 5_000),
        HandshakeAnswer::Accepted
    );
    let AuthenticateAnswer::Failed { message, .. } = s.authenticate(b"\0bob\0bob-secret", &c)
    else {
        panic!()
    };
    assert_eq!(
        message,
        "Cannot change principals during re-authentication from User:alice: User:bob"
    );
}
