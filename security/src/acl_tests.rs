//! The authorizer against tables of Kafka's documented cases, and against a
//! model written straight from the rules (a linear scan of every binding).

use crate::acl::*;
use proptest::prelude::*;

fn binding(
    resource_type: ResourceType,
    name: &str,
    pattern_type: PatternType,
    principal: &str,
    host: &str,
    operation: Operation,
    permission: Permission,
) -> AclBinding {
    AclBinding {
        pattern: ResourcePattern {
            resource_type,
            name: name.to_string(),
            pattern_type,
        },
        entry: AccessControlEntry {
            principal: principal.to_string(),
            host: host.to_string(),
            operation,
            permission,
        },
    }
}

fn topic_allow(name: &str, pattern: PatternType, principal: &str, op: Operation) -> AclBinding {
    binding(
        ResourceType::Topic,
        name,
        pattern,
        principal,
        "*",
        op,
        Permission::Allow,
    )
}

fn set(bindings: &[AclBinding]) -> AclSet {
    let mut s = AclSet::new();
    for b in bindings {
        assert!(s.add(b.clone()));
    }
    s
}

fn config(allow_if_none: bool) -> AuthorizerConfig {
    AuthorizerConfig {
        super_users: AuthorizerConfig::parse_super_users("User:admin; User:ops"),
        allow_everyone_if_no_acl_found: allow_if_none,
    }
}

use Operation::*;
use PatternType::*;

#[test]
fn decisions_table() {
    let acls = set(&[
        topic_allow("orders", Literal, "User:alice", Read),
        topic_allow("pay-", Prefixed, "User:bob", Write),
        topic_allow("*", Literal, "User:carol", Describe),
        topic_allow("shared", Literal, "User:*", Read),
        binding(
            ResourceType::Topic,
            "pay-secret",
            Literal,
            "User:bob",
            "*",
            All,
            Permission::Deny,
        ),
        binding(
            ResourceType::Topic,
            "orders",
            Literal,
            "User:dave",
            "10.0.0.9",
            Write,
            Permission::Allow,
        ),
        binding(
            ResourceType::Topic,
            "shared",
            Literal,
            "User:*",
            "10.6.6.6",
            Read,
            Permission::Deny,
        ),
        binding(
            ResourceType::Group,
            "g",
            Literal,
            "User:alice",
            "*",
            Read,
            Permission::Allow,
        ),
        binding(
            ResourceType::Cluster,
            CLUSTER_NAME,
            Literal,
            "User:broker",
            "*",
            ClusterAction,
            Permission::Allow,
        ),
        binding(
            ResourceType::Topic,
            "cfg",
            Literal,
            "User:erin",
            "*",
            AlterConfigs,
            Permission::Allow,
        ),
    ]);
    use Decision::{Allowed as A, Denied as D};
    let t = ResourceType::Topic;
    // (principal, host, operation, resource type, name, allow.everyone.if.no.acl.found, decision)
    let cases: &[(&str, &str, Operation, ResourceType, &str, bool, Decision)] = &[
        ("User:alice", "1.1.1.1", Read, t, "orders", false, A),
        // READ implies DESCRIBE; WRITE is not granted by READ.
        ("User:alice", "1.1.1.1", Describe, t, "orders", false, A),
        ("User:alice", "1.1.1.1", Write, t, "orders", false, D),
        // Another principal, a resource with ACLs: denied either way.
        ("User:mallory", "1.1.1.1", Read, t, "orders", true, D),
        // A prefix covers names that start with it, not the others.
        ("User:bob", "1.1.1.1", Write, t, "pay-in", false, A),
        ("User:bob", "1.1.1.1", Describe, t, "pay-in", false, A),
        ("User:bob", "1.1.1.1", Write, t, "pa", false, D),
        // DENY wins over ALLOW, and DENY ALL refuses every operation.
        ("User:bob", "1.1.1.1", Write, t, "pay-secret", false, D),
        ("User:bob", "1.1.1.1", Describe, t, "pay-secret", true, D),
        // The wildcard resource: every topic; DESCRIBE implies nothing else.
        ("User:carol", "1.1.1.1", Describe, t, "anything", false, A),
        ("User:carol", "1.1.1.1", Read, t, "anything", false, D),
        // The wildcard principal, and a deny for one host.
        ("User:zed", "1.1.1.1", Read, t, "shared", false, A),
        ("User:zed", "10.6.6.6", Read, t, "shared", false, D),
        // An ACL for one host only.
        ("User:dave", "10.0.0.9", Write, t, "orders", false, A),
        ("User:dave", "10.0.0.8", Write, t, "orders", false, D),
        // Super users: everything, a deny notwithstanding.
        ("User:admin", "1.1.1.1", Delete, t, "pay-secret", false, A),
        (
            "User:ops",
            "1.1.1.1",
            Alter,
            ResourceType::Cluster,
            CLUSTER_NAME,
            false,
            A,
        ),
        // The resource type is part of the pattern.
        (
            "User:alice",
            "1.1.1.1",
            Read,
            ResourceType::Group,
            "g",
            false,
            A,
        ),
        (
            "User:alice",
            "1.1.1.1",
            Read,
            ResourceType::Group,
            "orders",
            false,
            D,
        ),
        (
            "User:broker",
            "1.1.1.1",
            ClusterAction,
            ResourceType::Cluster,
            CLUSTER_NAME,
            false,
            A,
        ),
        (
            "User:alice",
            "1.1.1.1",
            ClusterAction,
            ResourceType::Cluster,
            CLUSTER_NAME,
            false,
            D,
        ),
        // ALTER_CONFIGS implies DESCRIBE_CONFIGS, not DESCRIBE or ALTER.
        ("User:erin", "1.1.1.1", DescribeConfigs, t, "cfg", false, A),
        ("User:erin", "1.1.1.1", Alter, t, "cfg", false, D),
        // No binding names the resource... except carol's wildcard on
        // topics: a topic always has ACLs in this set.
        (
            "User:alice",
            "1.1.1.1",
            Read,
            ResourceType::TransactionalId,
            "tx",
            true,
            A,
        ),
        (
            "User:alice",
            "1.1.1.1",
            Read,
            ResourceType::TransactionalId,
            "tx",
            false,
            D,
        ),
        ("User:alice", "1.1.1.1", Read, t, "unnamed", true, D),
    ];
    for &(principal, host, op, rt, name, allow_if_none, want) in cases {
        let (got, reason) = acls.authorize(&config(allow_if_none), principal, host, op, rt, name);
        assert_eq!(
            got, want,
            "{principal} from {host}: {op:?} on {rt:?} {name} (allow if none: {allow_if_none}): {reason:?}"
        );
    }
}

#[test]
fn without_any_acl_the_setting_decides() {
    let acls = AclSet::new();
    for allow in [false, true] {
        let (d, r) = acls.authorize(
            &config(allow),
            "User:x",
            "h",
            Read,
            ResourceType::Topic,
            "t",
        );
        assert_eq!(d == Decision::Allowed, allow);
        assert_eq!(r, Reason::NoAclFound);
    }
}

#[test]
fn implied_operations_are_exactly_kafkas() {
    for granted in Operation::EVERY {
        for asked in Operation::EVERY {
            let implied = granted == asked
                || granted == All
                || (asked == Describe && [Read, Write, Delete, Alter].contains(&granted))
                || (asked == DescribeConfigs && granted == AlterConfigs);
            assert_eq!(
                granted.allow_grants(asked),
                implied,
                "{granted:?} -> {asked:?}"
            );
            assert_eq!(
                granted.deny_refuses(asked),
                granted == asked || granted == All,
                "deny {granted:?} -> {asked:?}"
            );
        }
    }
}

#[test]
fn wire_codes_round_trip_and_refuse_any_and_unknown() {
    for t in ResourceType::ALL {
        assert_eq!(ResourceType::from_wire(t.wire()), Some(t));
    }
    for o in Operation::EVERY {
        assert_eq!(Operation::from_wire(o.wire()), Some(o));
    }
    for code in [0i8, 1, -1, 16, 100] {
        assert_eq!(Operation::from_wire(code), None, "{code}");
    }
    for code in [0i8, 1, 8, -3] {
        assert_eq!(ResourceType::from_wire(code), None, "{code}");
        assert_eq!(Permission::from_wire(code), None, "{code}");
    }
    assert_eq!(PatternType::from_wire(2), None, "MATCH is a filter's only");
    assert_eq!(
        PatternTypeFilter::from_wire(2),
        Some(PatternTypeFilter::Match)
    );
    assert_eq!(
        ResourceTypeFilter::from_wire(1),
        Some(ResourceTypeFilter::Any)
    );
}

#[test]
fn filters_table() {
    let acls = set(&[
        topic_allow("foo", Literal, "User:a", Read),
        topic_allow("fo", Prefixed, "User:a", Read),
        topic_allow("*", Literal, "User:b", Write),
        topic_allow("bar", Literal, "User:b", Read),
        binding(
            ResourceType::Group,
            "foo",
            Literal,
            "User:a",
            "*",
            Read,
            Permission::Deny,
        ),
    ]);
    let names = |f: &AclBindingFilter| {
        let mut v: Vec<String> = acls
            .matching(f)
            .map(|b| {
                format!(
                    "{:?}:{}:{:?}",
                    b.pattern.resource_type, b.pattern.name, b.pattern.pattern_type
                )
            })
            .collect();
        v.sort();
        v
    };
    let any = AclBindingFilter::any();
    assert_eq!(names(&any).len(), 5);
    // MATCH: every pattern that covers the name, of any pattern type.
    let m = AclBindingFilter {
        resource_type: ResourceTypeFilter::Is(ResourceType::Topic),
        name: Some("foo".into()),
        pattern_type: PatternTypeFilter::Match,
        ..AclBindingFilter::any()
    };
    assert_eq!(
        names(&m),
        ["Topic:*:Literal", "Topic:fo:Prefixed", "Topic:foo:Literal"]
    );
    // ANY with a name: that exact name, any pattern type, any resource type.
    let a = AclBindingFilter {
        name: Some("foo".into()),
        ..AclBindingFilter::any()
    };
    assert_eq!(names(&a), ["Group:foo:Literal", "Topic:foo:Literal"]);
    // One pattern type, exact name.
    let p = AclBindingFilter {
        name: Some("fo".into()),
        pattern_type: PatternTypeFilter::Is(Prefixed),
        ..AclBindingFilter::any()
    };
    assert_eq!(names(&p), ["Topic:fo:Prefixed"]);
    // Entry fields.
    let e = AclBindingFilter {
        principal: Some("User:b".into()),
        operation: Some(Read),
        ..AclBindingFilter::any()
    };
    assert_eq!(names(&e), ["Topic:bar:Literal"]);
    let d = AclBindingFilter {
        permission: Some(Permission::Deny),
        ..AclBindingFilter::any()
    };
    assert_eq!(names(&d), ["Group:foo:Literal"]);
}

#[test]
fn creations_are_validated() {
    let ok = WireAclCreation {
        resource_type: 2,
        name: "t",
        pattern_type: 3,
        principal: "User:a",
        host: "*",
        operation: 3,
        permission: 3,
    };
    assert_eq!(
        validate_new_binding(&ok),
        Ok(topic_allow("t", Literal, "User:a", Read))
    );
    let bad = [
        (
            WireAclCreation {
                resource_type: 1,
                ..ok.clone()
            },
            AclError::InvalidResourceType(1),
        ),
        (
            WireAclCreation {
                pattern_type: 2,
                ..ok.clone()
            },
            AclError::InvalidPatternType(2),
        ),
        (
            WireAclCreation {
                pattern_type: 1,
                ..ok.clone()
            },
            AclError::InvalidPatternType(1),
        ),
        (
            WireAclCreation {
                operation: 1,
                ..ok.clone()
            },
            AclError::InvalidOperation(1),
        ),
        (
            WireAclCreation {
                permission: 1,
                ..ok.clone()
            },
            AclError::InvalidPermission(1),
        ),
        (
            WireAclCreation {
                name: "",
                ..ok.clone()
            },
            AclError::EmptyResourceName,
        ),
        (
            WireAclCreation {
                principal: "alice",
                ..ok.clone()
            },
            AclError::InvalidPrincipal("alice".into()),
        ),
        (
            WireAclCreation {
                resource_type: 4,
                name: "my-cluster",
                ..ok.clone()
            },
            AclError::InvalidClusterName("my-cluster".into()),
        ),
    ];
    for (creation, err) in bad {
        assert_eq!(validate_new_binding(&creation), Err(err));
    }
}

// ---- the model ----

/// The rules of the module's documentation, over a plain list.
fn model(
    bindings: &[AclBinding],
    config: &AuthorizerConfig,
    principal: &str,
    host: &str,
    op: Operation,
    rt: ResourceType,
    name: &str,
) -> Decision {
    if config.super_users.contains(principal) {
        return Decision::Allowed;
    }
    let covering: Vec<&AclBinding> = bindings
        .iter()
        .filter(|b| {
            b.pattern.resource_type == rt
                && match b.pattern.pattern_type {
                    Literal => b.pattern.name == name || b.pattern.name == "*",
                    Prefixed => name.starts_with(&b.pattern.name),
                }
        })
        .collect();
    let applies = |b: &&&AclBinding| {
        (b.entry.principal == principal || b.entry.principal == "User:*")
            && (b.entry.host == host || b.entry.host == "*")
    };
    if covering.iter().filter(applies).any(|b| {
        b.entry.permission == Permission::Deny
            && (b.entry.operation == op || b.entry.operation == All)
    }) {
        return Decision::Denied;
    }
    if covering
        .iter()
        .filter(applies)
        .any(|b| b.entry.permission == Permission::Allow && b.entry.operation.allow_grants(op))
    {
        return Decision::Allowed;
    }
    if covering.is_empty() && config.allow_everyone_if_no_acl_found {
        Decision::Allowed
    } else {
        Decision::Denied
    }
}

fn small_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("*".to_string()),
        Just(String::new()),
        "[ab]{1,3}",
        "é[ab]{0,2}",
    ]
}

fn arb_binding() -> impl Strategy<Value = AclBinding> {
    (
        prop::sample::select(vec![ResourceType::Topic, ResourceType::Group]),
        small_name(),
        prop::sample::select(vec![Literal, Prefixed]),
        prop::sample::select(vec!["User:a", "User:b", "User:*"]),
        prop::sample::select(vec!["h1", "h2", "*"]),
        prop::sample::select(Operation::EVERY.to_vec()),
        prop::sample::select(vec![Permission::Allow, Permission::Deny]),
    )
        .prop_map(|(rt, name, pt, pr, h, op, perm)| binding(rt, &name, pt, pr, h, op, perm))
}

proptest! {
    /// The indexed decision is the model's, for any set of bindings and any
    /// request, with and without super users and the no-ACL setting.
    #[test]
    fn authorize_is_the_model(
        bindings in prop::collection::vec(arb_binding(), 0..12),
        principal in prop::sample::select(vec!["User:a", "User:b", "User:c", "User:admin"]),
        host in prop::sample::select(vec!["h1", "h2", "h3"]),
        op in prop::sample::select(Operation::EVERY.to_vec()),
        rt in prop::sample::select(vec![ResourceType::Topic, ResourceType::Group]),
        name in small_name(),
        allow_if_none in any::<bool>(),
        super_admin in any::<bool>(),
    ) {
        let mut acls = AclSet::new();
        let mut unique = Vec::new();
        for b in &bindings {
            if acls.add(b.clone()) {
                unique.push(b.clone());
            }
        }
        prop_assert_eq!(acls.len(), unique.len());
        let config = AuthorizerConfig {
            super_users: if super_admin { ["User:admin".to_string()].into() } else { Default::default() },
            allow_everyone_if_no_acl_found: allow_if_none,
        };
        let (got, _) = acls.authorize(&config, principal, host, op, rt, &name);
        prop_assert_eq!(got, model(&unique, &config, principal, host, op, rt, &name));
    }

    /// Removing what was added leaves what was there; `iter` lists exactly
    /// the bindings held.
    #[test]
    fn add_and_remove_keep_the_set(
        bindings in prop::collection::vec(arb_binding(), 0..12),
        removed in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut acls = AclSet::new();
        let mut model: std::collections::BTreeSet<AclBinding> = Default::default();
        for b in &bindings {
            prop_assert_eq!(acls.add(b.clone()), model.insert(b.clone()));
        }
        for i in removed {
            if bindings.is_empty() { break; }
            let b = i.get(&bindings);
            prop_assert_eq!(acls.remove(b), model.remove(b));
        }
        let mut listed: Vec<AclBinding> = acls.iter().collect();
        listed.sort();
        prop_assert_eq!(listed, model.into_iter().collect::<Vec<_>>());
    }
}

/// Kafka's authorizeByResourceType: some topic may be written unless every
/// allowing pattern is overridden by a deny.
#[test]
fn authorize_any_table() {
    let cfg = AuthorizerConfig::default();
    let b = |name: &str, pattern: PatternType, op: Operation, perm: Permission| AclBinding {
        pattern: ResourcePattern {
            resource_type: ResourceType::Topic,
            name: name.into(),
            pattern_type: pattern,
        },
        entry: AccessControlEntry {
            principal: "User:alice".into(),
            host: "*".into(),
            operation: op,
            permission: perm,
        },
    };
    use Operation::*;
    use PatternType::*;
    use Permission::*;
    let cases: Vec<(Vec<AclBinding>, bool)> = vec![
        (vec![], false),
        (vec![b("t", Literal, Write, Allow)], true),
        (vec![b("t", Literal, Read, Allow)], false),
        (vec![b("t", Literal, All, Allow)], true),
        (
            vec![b("t", Literal, Write, Allow), b("t", Literal, Write, Deny)],
            false,
        ),
        (
            vec![b("t", Literal, Write, Allow), b("u", Literal, Write, Deny)],
            true,
        ),
        (
            vec![b("t", Literal, Write, Allow), b("*", Literal, All, Deny)],
            false,
        ),
        (
            vec![
                b("app-x", Literal, Write, Allow),
                b("app-", Prefixed, Write, Deny),
            ],
            false,
        ),
        (
            vec![
                b("app-", Prefixed, Write, Allow),
                b("app-x", Literal, Write, Deny),
            ],
            true,
        ),
        (
            vec![
                b("app-", Prefixed, Write, Allow),
                b("app", Prefixed, Write, Deny),
            ],
            false,
        ),
    ];
    for (bindings, expected) in cases {
        let mut set = AclSet::new();
        for x in &bindings {
            set.add(x.clone());
        }
        assert_eq!(
            set.authorize_any(
                &cfg,
                "User:alice",
                "10.0.0.1",
                Operation::Write,
                ResourceType::Topic
            ),
            expected,
            "{bindings:?}"
        );
        assert!(
            !set.authorize_any(
                &cfg,
                "User:bob",
                "10.0.0.1",
                Operation::Write,
                ResourceType::Topic
            ),
            "alice's bindings grant bob nothing"
        );
    }
    let sup = AuthorizerConfig {
        super_users: ["User:root".to_string()].into(),
        allow_everyone_if_no_acl_found: false,
    };
    assert!(AclSet::new().authorize_any(
        &sup,
        "User:root",
        "h",
        Operation::Write,
        ResourceType::Topic
    ));
}
