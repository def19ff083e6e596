//! Security rules as pure functions, for the broker to call: the
//! authorization decision with Kafka's `StandardAuthorizer` semantics
//! ([`acl`]), and the server side of SCRAM-SHA-256/512 ([`scram`]) and of
//! PLAIN ([`plain`]). None is wired into the broker yet (issue 18: listeners with TLS and SASL,
//! SaslHandshake/SaslAuthenticate, the ACL and credential records, the
//! checks of every API); the I/O will be the broker's.

pub mod acl;
pub mod jaas;
pub mod plain;
pub mod principal;
pub mod sasl;
pub mod scram;

#[cfg(test)]
mod acl_tests;
