//! Security rules as pure functions, which the broker calls and whose
//! decisions it carries out (the I/O, nonces, clocks and credentials are
//! the broker's): the authorization decision with Kafka's
//! `StandardAuthorizer` semantics ([`acl`]); a SASL connection's state
//! machine ([`sasl`]) over SCRAM-SHA-256/512 ([`scram`], both sides) and
//! PLAIN ([`plain`]); JAAS entries ([`jaas`]); who a connection is
//! ([`principal`]: certificate subjects and `ssl.principal.mapping.rules`).

pub mod acl;
pub mod jaas;
pub mod plain;
pub mod principal;
pub mod sasl;
pub mod scram;

#[cfg(test)]
mod acl_tests;
