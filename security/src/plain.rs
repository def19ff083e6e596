//! SASL PLAIN (RFC 4616) on the server, as Kafka's `PlainSaslServer`: one
//! message `[authzid] NUL authcid NUL passwd`, the authorization id empty or
//! the user name, checked against the listener's configured users (Kafka's
//! JAAS option `user_<name>="<password>"`). Pure: the caller passes the
//! users.

use std::collections::BTreeMap;
use subtle::ConstantTimeEq;

/// Why a PLAIN exchange failed (SASL_AUTHENTICATION_FAILED to the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlainError {
    #[error("invalid SASL/PLAIN message: {0}")]
    Malformed(&'static str),
    #[error("authorization id differs from the user name")]
    AuthzId,
    #[error("invalid user name or password")]
    InvalidCredentials,
}

/// The users a PLAIN listener accepts: name -> password.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlainUsers(pub BTreeMap<String, String>);

impl PlainUsers {
    /// Checks one PLAIN message; returns the authenticated user name.
    pub fn authenticate(&self, message: &[u8]) -> Result<String, PlainError> {
        let mut parts = message.split(|b| *b == 0);
        let (Some(authzid), Some(user), Some(password), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(PlainError::Malformed(
                "expected authzid NUL user NUL password",
            ));
        };
        let user = std::str::from_utf8(user).map_err(|_| PlainError::Malformed("user name"))?;
        if user.is_empty() {
            return Err(PlainError::Malformed("empty user name"));
        }
        if password.is_empty() {
            return Err(PlainError::Malformed("empty password"));
        }
        if !authzid.is_empty() && authzid != user.as_bytes() {
            return Err(PlainError::AuthzId);
        }
        // Compared in constant time; an unknown user is compared against
        // its own password so its answer takes as long as a wrong one.
        let expected = self.0.get(user);
        let same = expected
            .map(|e| e.as_bytes())
            .unwrap_or(password)
            .ct_eq(password);
        if expected.is_some() && bool::from(same) {
            Ok(user.to_string())
        } else {
            Err(PlainError::InvalidCredentials)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_messages() {
        let users = PlainUsers(
            [("alice".to_string(), "alice-secret".to_string())]
                .into_iter()
                .collect(),
        );
        let cases: &[(&[u8], Result<&str, PlainError>)] = &[
            (b"\0alice\0alice-secret", Ok("alice")),
            (b"alice\0alice\0alice-secret", Ok("alice")),
            (b"bob\0alice\0alice-secret", Err(PlainError::AuthzId)),
            (b"\0alice\0wrong", Err(PlainError::InvalidCredentials)),
            (
                b"\0alice\0alice-secreT",
                Err(PlainError::InvalidCredentials),
            ),
            (b"\0bob\0alice-secret", Err(PlainError::InvalidCredentials)),
            (
                b"\0\0alice-secret",
                Err(PlainError::Malformed("empty user name")),
            ),
            (b"\0alice\0", Err(PlainError::Malformed("empty password"))),
            (
                b"\0alice",
                Err(PlainError::Malformed(
                    "expected authzid NUL user NUL password",
                )),
            ),
            (
                b"\0alice\0alice-secret\0x",
                Err(PlainError::Malformed(
                    "expected authzid NUL user NUL password",
                )),
            ),
            (b"\0\xff\0x", Err(PlainError::Malformed("user name"))),
        ];
        for (msg, want) in cases {
            let got = users.authenticate(msg);
            assert_eq!(
                got,
                want.clone().map(str::to_string),
                "{}",
                String::from_utf8_lossy(msg)
            );
        }
    }
}
