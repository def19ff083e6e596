//! ACL bindings and the authorization decision, with the semantics of
//! Kafka's `StandardAuthorizer` (KRaft): a request by a principal from a host
//! for an operation on a named resource is
//!
//! 1. allowed if the principal is a super user (`super.users`, exact);
//! 2. denied if a DENY binding matches: its pattern matches the resource
//!    (LITERAL: the same name, or the name `*`; PREFIXED: a prefix of the
//!    name), its principal is the request's or `User:*`, its host is the
//!    request's or `*`, and its operation is the one asked or ALL;
//! 3. else allowed if an ALLOW binding matches the same way, where an ALLOW
//!    of READ, WRITE, DELETE or ALTER also grants DESCRIBE, and an ALLOW of
//!    ALTER_CONFIGS also grants DESCRIBE_CONFIGS (Kafka's implied
//!    operations);
//! 4. else, when no binding at all names the resource (whatever its
//!    principal, host or operation), allowed exactly when
//!    `allow.everyone.if.no.acl.found`; otherwise denied.
//!
//! Everything here is pure: [`AclSet`] is the authorizer's state (built from
//! the metadata log's ACL records), [`AclSet::authorize`] the decision,
//! [`AclBindingFilter`] the matching of DescribeAcls and DeleteAcls, and
//! [`validate_new_binding`] the checks of CreateAcls. Wire values convert at
//! the edge (`from_wire` / `wire`).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// The resource name a LITERAL pattern uses to match every resource.
pub const WILDCARD_RESOURCE: &str = "*";
/// The principal an ACL uses to match every user.
pub const WILDCARD_PRINCIPAL: &str = "User:*";
/// The host an ACL uses to match every host.
pub const WILDCARD_HOST: &str = "*";
/// The only name of the cluster resource.
pub const CLUSTER_NAME: &str = "kafka-cluster";

/// Kafka's resource types with their wire codes (`ResourceType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
    TransactionalId,
    DelegationToken,
    User,
}

impl ResourceType {
    pub const ALL: [ResourceType; 6] = [
        ResourceType::Topic,
        ResourceType::Group,
        ResourceType::Cluster,
        ResourceType::TransactionalId,
        ResourceType::DelegationToken,
        ResourceType::User,
    ];

    pub fn wire(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
            ResourceType::TransactionalId => 5,
            ResourceType::DelegationToken => 6,
            ResourceType::User => 7,
        }
    }

    /// A concrete type; `None` for UNKNOWN (0), ANY (1) and other codes.
    pub fn from_wire(code: i8) -> Option<ResourceType> {
        ResourceType::ALL.into_iter().find(|t| t.wire() == code)
    }
}

/// How a binding's resource name matches (`PatternType`): concrete types
/// only; a filter's ANY and MATCH are [`PatternTypeFilter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PatternType {
    Literal,
    Prefixed,
}

impl PatternType {
    pub fn wire(self) -> i8 {
        match self {
            PatternType::Literal => 3,
            PatternType::Prefixed => 4,
        }
    }

    pub fn from_wire(code: i8) -> Option<PatternType> {
        match code {
            3 => Some(PatternType::Literal),
            4 => Some(PatternType::Prefixed),
            _ => None,
        }
    }
}

/// Kafka's ACL operations with their wire codes (`AclOperation`), ANY and
/// UNKNOWN excluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    All,
    Read,
    Write,
    Create,
    Delete,
    Alter,
    Describe,
    ClusterAction,
    DescribeConfigs,
    AlterConfigs,
    IdempotentWrite,
    CreateTokens,
    DescribeTokens,
    /// KIP-939's, on transactional ids (Kafka 4.x).
    TwoPhaseCommit,
}

impl Operation {
    pub const EVERY: [Operation; 14] = [
        Operation::All,
        Operation::Read,
        Operation::Write,
        Operation::Create,
        Operation::Delete,
        Operation::Alter,
        Operation::Describe,
        Operation::ClusterAction,
        Operation::DescribeConfigs,
        Operation::AlterConfigs,
        Operation::IdempotentWrite,
        Operation::CreateTokens,
        Operation::DescribeTokens,
        Operation::TwoPhaseCommit,
    ];

    pub fn wire(self) -> i8 {
        match self {
            Operation::All => 2,
            Operation::Read => 3,
            Operation::Write => 4,
            Operation::Create => 5,
            Operation::Delete => 6,
            Operation::Alter => 7,
            Operation::Describe => 8,
            Operation::ClusterAction => 9,
            Operation::DescribeConfigs => 10,
            Operation::AlterConfigs => 11,
            Operation::IdempotentWrite => 12,
            Operation::CreateTokens => 13,
            Operation::DescribeTokens => 14,
            Operation::TwoPhaseCommit => 15,
        }
    }

    pub fn from_wire(code: i8) -> Option<Operation> {
        Operation::EVERY.into_iter().find(|o| o.wire() == code)
    }

    /// Whether an ALLOW binding for `self` grants `asked`: the same
    /// operation, ALL, or one that implies it (Kafka's implied operations).
    pub fn allow_grants(self, asked: Operation) -> bool {
        self == asked
            || self == Operation::All
            || (asked == Operation::Describe
                && matches!(
                    self,
                    Operation::Read | Operation::Write | Operation::Delete | Operation::Alter
                ))
            || (asked == Operation::DescribeConfigs && self == Operation::AlterConfigs)
    }

    /// Whether a DENY binding for `self` refuses `asked`: the same
    /// operation or ALL (a deny implies nothing else).
    pub fn deny_refuses(self, asked: Operation) -> bool {
        self == asked || self == Operation::All
    }
}

/// ALLOW or DENY (`AclPermissionType`), ANY and UNKNOWN excluded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Permission {
    Deny,
    Allow,
}

impl Permission {
    pub fn wire(self) -> i8 {
        match self {
            Permission::Deny => 2,
            Permission::Allow => 3,
        }
    }

    pub fn from_wire(code: i8) -> Option<Permission> {
        match code {
            2 => Some(Permission::Deny),
            3 => Some(Permission::Allow),
            _ => None,
        }
    }
}

/// A resource pattern: what a binding applies to.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    /// Whether the pattern covers the resource `resource_type`/`name`.
    pub fn covers(&self, resource_type: ResourceType, name: &str) -> bool {
        self.resource_type == resource_type
            && match self.pattern_type {
                PatternType::Literal => self.name == name || self.name == WILDCARD_RESOURCE,
                PatternType::Prefixed => name.starts_with(self.name.as_str()),
            }
    }
}

/// Who may (or may not) do what from where.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AccessControlEntry {
    /// `Type:name`, e.g. `User:alice`, or [`WILDCARD_PRINCIPAL`].
    pub principal: String,
    /// A client address, or [`WILDCARD_HOST`].
    pub host: String,
    pub operation: Operation,
    pub permission: Permission,
}

impl AccessControlEntry {
    fn applies_to(&self, principal: &str, host: &str) -> bool {
        (self.principal == principal || self.principal == WILDCARD_PRINCIPAL)
            && (self.host == host || self.host == WILDCARD_HOST)
    }
}

/// One ACL: a pattern and an entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    pub pattern: ResourcePattern,
    pub entry: AccessControlEntry,
}

/// The authorizer's settings (`super.users`, `allow.everyone.if.no.acl.found`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthorizerConfig {
    /// Principals (`User:admin`) allowed everything.
    pub super_users: BTreeSet<String>,
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// Parses Kafka's `super.users` value: principals separated by `;`.
    pub fn parse_super_users(value: &str) -> BTreeSet<String> {
        value
            .split(';')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect()
    }
}

/// What the authorizer decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    Denied,
}

/// Why a request was decided as it was: for logs and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reason {
    SuperUser,
    /// This binding refused it.
    DeniedBy(AclBinding),
    /// This binding granted it.
    AllowedBy(AclBinding),
    /// Bindings name the resource, none for this principal, host and operation.
    NoMatchingAllow,
    /// No binding names the resource: `allow.everyone.if.no.acl.found` decides.
    NoAclFound,
}

/// Every ACL binding of the cluster, indexed for decisions: by resource
/// type, then literal name, and prefix.
#[derive(Clone, Debug, Default)]
pub struct AclSet {
    by_type: BTreeMap<ResourceType, TypeAcls>,
    len: usize,
}

#[derive(Clone, Debug, Default)]
struct TypeAcls {
    literal: BTreeMap<String, BTreeSet<AccessControlEntry>>,
    prefixed: BTreeMap<String, BTreeSet<AccessControlEntry>>,
}

impl TypeAcls {
    fn map(&self, pattern_type: PatternType) -> &BTreeMap<String, BTreeSet<AccessControlEntry>> {
        match pattern_type {
            PatternType::Literal => &self.literal,
            PatternType::Prefixed => &self.prefixed,
        }
    }

    fn map_mut(
        &mut self,
        pattern_type: PatternType,
    ) -> &mut BTreeMap<String, BTreeSet<AccessControlEntry>> {
        match pattern_type {
            PatternType::Literal => &mut self.literal,
            PatternType::Prefixed => &mut self.prefixed,
        }
    }
}

impl AclSet {
    pub fn new() -> AclSet {
        AclSet::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a binding; false if it was there already.
    pub fn add(&mut self, binding: AclBinding) -> bool {
        let added = self
            .by_type
            .entry(binding.pattern.resource_type)
            .or_default()
            .map_mut(binding.pattern.pattern_type)
            .entry(binding.pattern.name)
            .or_default()
            .insert(binding.entry);
        self.len += usize::from(added);
        added
    }

    /// Removes a binding; false if it was not there.
    pub fn remove(&mut self, binding: &AclBinding) -> bool {
        let Some(acls) = self.by_type.get_mut(&binding.pattern.resource_type) else {
            return false;
        };
        let map = acls.map_mut(binding.pattern.pattern_type);
        let Some(entries) = map.get_mut(&binding.pattern.name) else {
            return false;
        };
        let removed = entries.remove(&binding.entry);
        if entries.is_empty() {
            map.remove(&binding.pattern.name);
        }
        self.len -= usize::from(removed);
        removed
    }

    /// Every binding, in a stable order.
    pub fn iter(&self) -> impl Iterator<Item = AclBinding> + '_ {
        self.by_type.iter().flat_map(|(&resource_type, acls)| {
            [PatternType::Literal, PatternType::Prefixed]
                .into_iter()
                .flat_map(move |pattern_type| {
                    acls.map(pattern_type)
                        .iter()
                        .flat_map(move |(name, entries)| {
                            entries.iter().map(move |entry| AclBinding {
                                pattern: ResourcePattern {
                                    resource_type,
                                    name: name.clone(),
                                    pattern_type,
                                },
                                entry: entry.clone(),
                            })
                        })
                })
        })
    }

    /// The bindings a DescribeAcls filter selects (and a DeleteAcls filter
    /// would delete).
    pub fn matching<'a>(
        &'a self,
        filter: &'a AclBindingFilter,
    ) -> impl Iterator<Item = AclBinding> + 'a {
        self.iter().filter(move |b| filter.matches(b))
    }

    /// Every (pattern, entries) whose pattern covers the resource.
    fn covering<'a>(
        &'a self,
        resource_type: ResourceType,
        name: &'a str,
    ) -> impl Iterator<Item = (ResourcePattern, &'a BTreeSet<AccessControlEntry>)> + 'a {
        let acls = self.by_type.get(&resource_type);
        let literal = acls.into_iter().flat_map(move |a| {
            [name, WILDCARD_RESOURCE]
                .into_iter()
                // The wildcard once, even for a resource named `*`.
                .enumerate()
                .filter(move |(i, n)| *i == 0 || *n != name)
                .filter_map(move |(_, n)| a.literal.get_key_value(n))
                .map(move |(n, e)| {
                    (
                        ResourcePattern {
                            resource_type,
                            name: n.clone(),
                            pattern_type: PatternType::Literal,
                        },
                        e,
                    )
                })
        });
        // Each prefix of the name (at character boundaries, the empty one
        // included), looked up.
        let prefixed = acls.into_iter().flat_map(move |a| {
            std::iter::once(0)
                .chain(name.char_indices().map(|(i, c)| i + c.len_utf8()))
                .filter_map(move |end| a.prefixed.get_key_value(&name[..end]))
                .map(move |(n, e)| {
                    (
                        ResourcePattern {
                            resource_type,
                            name: n.clone(),
                            pattern_type: PatternType::Prefixed,
                        },
                        e,
                    )
                })
        });
        literal.chain(prefixed)
    }

    /// The decision for `principal` (`User:alice`) from `host` doing
    /// `operation` on `resource_type`/`name`, and why.
    pub fn authorize(
        &self,
        config: &AuthorizerConfig,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> (Decision, Reason) {
        if config.super_users.contains(principal) {
            return (Decision::Allowed, Reason::SuperUser);
        }
        let mut any_acl = false;
        let mut allowed_by = None;
        for (pattern, entries) in self.covering(resource_type, name) {
            any_acl |= !entries.is_empty();
            for entry in entries.iter().filter(|e| e.applies_to(principal, host)) {
                match entry.permission {
                    Permission::Deny if entry.operation.deny_refuses(operation) => {
                        let binding = AclBinding {
                            pattern,
                            entry: entry.clone(),
                        };
                        return (Decision::Denied, Reason::DeniedBy(binding));
                    }
                    Permission::Allow
                        if allowed_by.is_none() && entry.operation.allow_grants(operation) =>
                    {
                        allowed_by = Some(AclBinding {
                            pattern: pattern.clone(),
                            entry: entry.clone(),
                        });
                    }
                    _ => {}
                }
            }
        }
        match allowed_by {
            Some(binding) => (Decision::Allowed, Reason::AllowedBy(binding)),
            None if !any_acl => {
                let decision = if config.allow_everyone_if_no_acl_found {
                    Decision::Allowed
                } else {
                    Decision::Denied
                };
                (decision, Reason::NoAclFound)
            }
            None => (Decision::Denied, Reason::NoMatchingAllow),
        }
    }
}

impl AclSet {
    /// Whether `principal` may do `operation` on some resource of
    /// `resource_type` (Kafka's `authorizeByResourceType`, used for an
    /// idempotent producer's InitProducerId: WRITE on any topic): an ALLOW
    /// of any pattern that no DENY of the same, a wider or the wildcard
    /// pattern overrides.
    pub fn authorize_any(
        &self,
        config: &AuthorizerConfig,
        principal: &str,
        host: &str,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        if config.super_users.contains(principal) {
            return true;
        }
        let bindings: Vec<AclBinding> = self
            .iter()
            .filter(|b| {
                b.pattern.resource_type == resource_type && b.entry.applies_to(principal, host)
            })
            .collect();
        let denied = |p: &ResourcePattern| {
            bindings.iter().any(|d| {
                d.entry.permission == Permission::Deny
                    && d.entry.operation.deny_refuses(operation)
                    && match d.pattern.pattern_type {
                        PatternType::Literal => {
                            d.pattern.name == WILDCARD_RESOURCE
                                || (p.pattern_type == PatternType::Literal
                                    && d.pattern.name == p.name)
                        }
                        PatternType::Prefixed => p.name.starts_with(d.pattern.name.as_str()),
                    }
            })
        };
        bindings.iter().any(|a| {
            a.entry.permission == Permission::Allow
                && a.entry.operation.allow_grants(operation)
                && !denied(&a.pattern)
        })
    }
}

/// A filter's resource type: ANY or one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResourceTypeFilter {
    Any,
    Is(ResourceType),
}

impl ResourceTypeFilter {
    /// `None` for UNKNOWN and codes Kafka does not define.
    pub fn from_wire(code: i8) -> Option<ResourceTypeFilter> {
        match code {
            1 => Some(ResourceTypeFilter::Any),
            c => ResourceType::from_wire(c).map(ResourceTypeFilter::Is),
        }
    }
}

/// A filter's pattern type: ANY (any type, exact name), MATCH (every
/// pattern that covers the name), or one type (exact name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatternTypeFilter {
    Any,
    Match,
    Is(PatternType),
}

impl PatternTypeFilter {
    pub fn from_wire(code: i8) -> Option<PatternTypeFilter> {
        match code {
            1 => Some(PatternTypeFilter::Any),
            2 => Some(PatternTypeFilter::Match),
            c => PatternType::from_wire(c).map(PatternTypeFilter::Is),
        }
    }
}

/// DescribeAcls' and DeleteAcls' filter (`AclBindingFilter`); `None` and
/// ANY match anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AclBindingFilter {
    pub resource_type: ResourceTypeFilter,
    pub name: Option<String>,
    pub pattern_type: PatternTypeFilter,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: Option<Operation>,
    pub permission: Option<Permission>,
}

impl AclBindingFilter {
    /// Matches every binding.
    pub fn any() -> AclBindingFilter {
        AclBindingFilter {
            resource_type: ResourceTypeFilter::Any,
            name: None,
            pattern_type: PatternTypeFilter::Any,
            principal: None,
            host: None,
            operation: None,
            permission: None,
        }
    }

    pub fn matches_pattern(&self, pattern: &ResourcePattern) -> bool {
        if let ResourceTypeFilter::Is(t) = self.resource_type {
            if t != pattern.resource_type {
                return false;
            }
        }
        let Some(name) = &self.name else {
            return match self.pattern_type {
                PatternTypeFilter::Is(p) => p == pattern.pattern_type,
                PatternTypeFilter::Any | PatternTypeFilter::Match => true,
            };
        };
        match self.pattern_type {
            PatternTypeFilter::Any => *name == pattern.name,
            PatternTypeFilter::Is(p) => p == pattern.pattern_type && *name == pattern.name,
            PatternTypeFilter::Match => pattern.covers(pattern.resource_type, name),
        }
    }

    pub fn matches_entry(&self, entry: &AccessControlEntry) -> bool {
        self.principal
            .as_ref()
            .is_none_or(|p| *p == entry.principal)
            && self.host.as_ref().is_none_or(|h| *h == entry.host)
            && self.operation.is_none_or(|o| o == entry.operation)
            && self.permission.is_none_or(|p| p == entry.permission)
    }

    pub fn matches(&self, binding: &AclBinding) -> bool {
        self.matches_pattern(&binding.pattern) && self.matches_entry(&binding.entry)
    }
}

/// A DescribeAcls / DeleteAcls filter as it came off the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireAclFilter<'a> {
    pub resource_type: i8,
    pub name: Option<&'a str>,
    pub pattern_type: i8,
    pub principal: Option<&'a str>,
    pub host: Option<&'a str>,
    pub operation: i8,
    pub permission: i8,
}

/// The wire code of ANY in every ACL enum.
const ANY_CODE: i8 = 1;

/// Checks a filter: ANY (1) is "anything" for every field; UNKNOWN (0)
/// and codes Kafka does not define are INVALID_REQUEST.
pub fn parse_filter(f: &WireAclFilter<'_>) -> Result<AclBindingFilter, AclError> {
    let resource_type = ResourceTypeFilter::from_wire(f.resource_type)
        .ok_or(AclError::InvalidResourceType(f.resource_type))?;
    let pattern_type = PatternTypeFilter::from_wire(f.pattern_type)
        .ok_or(AclError::InvalidPatternType(f.pattern_type))?;
    let operation = match f.operation {
        ANY_CODE => None,
        code => Some(Operation::from_wire(code).ok_or(AclError::InvalidOperation(code))?),
    };
    let permission = match f.permission {
        ANY_CODE => None,
        code => Some(Permission::from_wire(code).ok_or(AclError::InvalidPermission(code))?),
    };
    Ok(AclBindingFilter {
        resource_type,
        name: f.name.map(str::to_string),
        pattern_type,
        principal: f.principal.map(str::to_string),
        host: f.host.map(str::to_string),
        operation,
        permission,
    })
}

/// Why CreateAcls refuses a binding: Kafka answers INVALID_REQUEST for each
/// (the messages are this crate's; their wording against the reference
/// Kafka is still to be checked).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclError {
    #[error("Invalid resourceType {0}")]
    InvalidResourceType(i8),
    #[error("Invalid patternType {0}")]
    InvalidPatternType(i8),
    #[error("Invalid operation {0}")]
    InvalidOperation(i8),
    #[error("Invalid permissionType {0}")]
    InvalidPermission(i8),
    #[error("Resource name should not be empty")]
    EmptyResourceName,
    #[error("The only valid name for the CLUSTER resource is kafka-cluster, not {0}")]
    InvalidClusterName(String),
    #[error("Could not parse principal from `{0}`: expected Type:name")]
    InvalidPrincipal(String),
}

impl AclError {
    /// The error code Kafka answers with.
    pub fn code(&self) -> strand_protocol::ErrorCode {
        strand_protocol::ErrorCode::InvalidRequest
    }
}

/// A CreateAcls creation as it came off the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireAclCreation<'a> {
    pub resource_type: i8,
    pub name: &'a str,
    pub pattern_type: i8,
    pub principal: &'a str,
    pub host: &'a str,
    pub operation: i8,
    pub permission: i8,
}

/// Checks one CreateAcls creation and builds its binding.
pub fn validate_new_binding(c: &WireAclCreation<'_>) -> Result<AclBinding, AclError> {
    let resource_type = ResourceType::from_wire(c.resource_type)
        .ok_or(AclError::InvalidResourceType(c.resource_type))?;
    let pattern_type = PatternType::from_wire(c.pattern_type)
        .ok_or(AclError::InvalidPatternType(c.pattern_type))?;
    let operation =
        Operation::from_wire(c.operation).ok_or(AclError::InvalidOperation(c.operation))?;
    let permission =
        Permission::from_wire(c.permission).ok_or(AclError::InvalidPermission(c.permission))?;
    if c.name.is_empty() {
        return Err(AclError::EmptyResourceName);
    }
    if resource_type == ResourceType::Cluster && c.name != CLUSTER_NAME {
        return Err(AclError::InvalidClusterName(c.name.to_string()));
    }
    if !c.principal.contains(':') {
        return Err(AclError::InvalidPrincipal(c.principal.to_string()));
    }
    Ok(AclBinding {
        pattern: ResourcePattern {
            resource_type,
            name: c.name.to_string(),
            pattern_type,
        },
        entry: AccessControlEntry {
            principal: c.principal.to_string(),
            host: c.host.to_string(),
            operation,
            permission,
        },
    })
}

impl fmt::Display for AclBinding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(pattern=({:?}, {}, {:?}), entry=({}, {}, {:?}, {:?}))",
            self.pattern.resource_type,
            self.pattern.name,
            self.pattern.pattern_type,
            self.entry.principal,
            self.entry.host,
            self.entry.operation,
            self.entry.permission
        )
    }
}
