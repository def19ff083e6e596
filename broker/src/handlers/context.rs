//! What a handler knows of the request beyond its body.

pub struct RequestContext {
    pub version: i16,
    /// Who sent it (`User:ANONYMOUS` unless TLS or SASL authenticated the
    /// connection).
    pub principal: strand_security::principal::KafkaPrincipal,
    pub client_id: String,
    /// The client's address as Kafka reports it ("/127.0.0.1").
    pub client_host: String,
    /// The listener the request came in on: brokers are described by
    /// their address on it.
    pub listener: std::sync::Arc<str>,
    /// The file slices the response's records are sent from (zero-copy
    /// fetch: `crate::zero_copy`).
    pub slices: crate::zero_copy::SliceRegistry,
}
