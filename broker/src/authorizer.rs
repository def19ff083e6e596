//! The broker's authorizer: Kafka's StandardAuthorizer decision
//! (`strand_security::acl::AclSet::authorize`) over the ACL bindings of the
//! metadata image, with `super.users` and `allow.everyone.if.no.acl.found`.
//! Off unless `authorizer.class.name` names it: then everything is allowed,
//! as in Kafka without an authorizer. The indexed set is rebuilt when the
//! image's ACLs change (compared by the image's position).

use crate::config::BrokerConfig;
use parking_lot::Mutex;
use std::sync::Arc;
use strand_metadata::image::MetadataImage;
use strand_metadata::records::AclRecord;
use strand_security::acl::{
    AccessControlEntry, AclBinding, AclSet, AuthorizerConfig, Decision, Operation, PatternType,
    Permission, ResourcePattern, ResourceType,
};

pub struct Authorizer {
    /// `authorizer.class.name` names one.
    enabled: bool,
    config: AuthorizerConfig,
    /// The set built from the image at this position (`applied`).
    cache: Mutex<(u64, Arc<AclSet>)>,
}

impl Authorizer {
    pub fn new(config: &BrokerConfig) -> Authorizer {
        Authorizer {
            enabled: config.setting("authorizer.class.name").is_some(),
            config: AuthorizerConfig {
                super_users: AuthorizerConfig::parse_super_users(
                    &config.setting("super.users").unwrap_or_default(),
                ),
                allow_everyone_if_no_acl_found: config
                    .setting("allow.everyone.if.no.acl.found")
                    .is_some_and(|v| v == "true"),
            },
            cache: Mutex::new((u64::MAX, Arc::new(AclSet::new()))),
        }
    }

    /// Whether an authorizer is configured (CreateAcls and friends answer
    /// SECURITY_DISABLED without one).
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// The bindings of `image`, indexed.
    pub fn acls(&self, image: &MetadataImage) -> Arc<AclSet> {
        let mut cache = self.cache.lock();
        if cache.0 != image.applied {
            let mut set = AclSet::new();
            for record in image.acls.values() {
                if let Some(binding) = binding_of(record) {
                    set.add(binding);
                }
            }
            *cache = (image.applied, Arc::new(set));
        }
        cache.1.clone()
    }

    /// Whether `principal` (`User:alice`) from `host` may do `operation` on
    /// the resource.
    pub fn allowed(
        &self,
        image: &MetadataImage,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> bool {
        if !self.enabled {
            return true;
        }
        let (decision, reason) = self.acls(image).authorize(
            &self.config,
            principal,
            host,
            operation,
            resource_type,
            name,
        );
        if decision == Decision::Denied {
            tracing::debug!(
                principal,
                host,
                ?operation,
                ?resource_type,
                name,
                ?reason,
                "denied"
            );
        }
        decision == Decision::Allowed
    }

    /// Whether `principal` may do `operation` on some resource of the type
    /// (`AclSet::authorize_any`).
    pub fn allowed_on_any(
        &self,
        image: &MetadataImage,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        !self.enabled
            || self.acls(image).authorize_any(
                &self.config,
                principal,
                host,
                operation,
                resource_type,
            )
    }
}

/// A record's binding (None for codes this broker does not know: such a
/// record grants nothing).
pub fn binding_of(r: &AclRecord) -> Option<AclBinding> {
    Some(AclBinding {
        pattern: ResourcePattern {
            resource_type: ResourceType::from_wire(r.resource_type)?,
            name: r.resource_name.clone(),
            pattern_type: PatternType::from_wire(r.pattern_type)?,
        },
        entry: AccessControlEntry {
            principal: r.principal.clone(),
            host: r.host.clone(),
            operation: Operation::from_wire(r.operation)?,
            permission: Permission::from_wire(r.permission_type)?,
        },
    })
}
