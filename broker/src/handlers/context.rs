//! What a handler knows of the request beyond its body.

pub struct RequestContext {
    pub version: i16,
    /// Who sent it (`User:ANONYMOUS` unless TLS or SASL authenticated the
    /// connection).
    pub principal: strand_security::principal::KafkaPrincipal,
    pub client_id: String,
    /// The client's address as Kafka reports it ("/127.0.0.1").
    pub client_host: String,
    /// The client's address as ACLs name hosts ("127.0.0.1").
    pub client_ip: String,
    /// The listener the request came in on: brokers are described by
    /// their address on it.
    pub listener: std::sync::Arc<str>,
    /// The file slices the response's records are sent from (zero-copy
    /// fetch: `crate::zero_copy`).
    pub slices: crate::zero_copy::SliceRegistry,
}

impl RequestContext {
    /// Whether this request's principal, from its address, may do
    /// `operation` on the resource (always, without an authorizer).
    pub fn allowed(
        &self,
        broker: &crate::replica_manager::ReplicaManager,
        image: &strand_metadata::image::MetadataImage,
        operation: strand_security::acl::Operation,
        resource_type: strand_security::acl::ResourceType,
        name: &str,
    ) -> bool {
        broker.authorizer.allowed(
            image,
            &self.principal.to_string(),
            &self.client_ip,
            operation,
            resource_type,
            name,
        )
    }
}
