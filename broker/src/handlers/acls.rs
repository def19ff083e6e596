//! CreateAcls, DescribeAcls and DeleteAcls, as Kafka's brokers answer
//! them: SECURITY_DISABLED without an authorizer; CLUSTER_AUTHORIZATION_FAILED
//! without ALTER (create, delete) or DESCRIBE (describe) on the cluster;
//! creations checked here (`strand_security::acl::validate_new_binding`)
//! and committed by the controller; filters matched against the image.

use crate::authorizer::binding_of;
use crate::handlers::context::RequestContext;
use crate::replica_manager::ReplicaManager;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeMap;
use strand_metadata::records::AclRecord;
use strand_protocol::ErrorCode;
use strand_security::acl::{
    parse_filter, validate_new_binding, AclBindingFilter, Operation, ResourceType, WireAclCreation,
    WireAclFilter, CLUSTER_NAME,
};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Why the whole request is refused, if it is: (code, message).
fn refused(
    broker: &ReplicaManager,
    ctx: &RequestContext,
    operation: Operation,
    no_authorizer: &str,
) -> Option<(i16, String)> {
    let image = broker.image();
    if !ctx.allowed(
        broker,
        &image,
        operation,
        ResourceType::Cluster,
        CLUSTER_NAME,
    ) {
        return Some((
            ErrorCode::ClusterAuthorizationFailed.code(),
            "Cluster authorization failed.".into(),
        ));
    }
    if !broker.authorizer.enabled() {
        return Some((ErrorCode::SecurityDisabled.code(), no_authorizer.into()));
    }
    None
}

pub async fn create_acls(
    broker: &ReplicaManager,
    ctx: &RequestContext,
    req: CreateAclsRequest,
) -> CreateAclsResponse {
    let n = req.creations.len();
    if let Some((code, message)) = refused(
        broker,
        ctx,
        Operation::Alter,
        "No Authorizer is configured.",
    ) {
        let result = AclCreationResult::default()
            .with_error_code(code)
            .with_error_message(Some(s(&message)));
        return CreateAclsResponse::default().with_results(vec![result; n]);
    }
    let mut results: Vec<Option<AclCreationResult>> = vec![None; n];
    let mut valid = Vec::new();
    for (i, c) in req.creations.iter().enumerate() {
        let wire = WireAclCreation {
            resource_type: c.resource_type,
            name: c.resource_name.as_str(),
            pattern_type: c.resource_pattern_type,
            principal: c.principal.as_str(),
            host: c.host.as_str(),
            operation: c.operation,
            permission: c.permission_type,
        };
        match validate_new_binding(&wire) {
            Ok(_) => valid.push((
                i,
                AclRecord {
                    id: uuid::Uuid::nil(),
                    resource_type: c.resource_type,
                    resource_name: c.resource_name.to_string(),
                    pattern_type: c.resource_pattern_type,
                    principal: c.principal.to_string(),
                    host: c.host.to_string(),
                    operation: c.operation,
                    permission_type: c.permission_type,
                },
            )),
            Err(e) => {
                results[i] = Some(
                    AclCreationResult::default()
                        .with_error_code(e.code().code())
                        .with_error_message(Some(s(&e.to_string()))),
                )
            }
        }
    }
    let (indexes, bindings): (Vec<usize>, Vec<AclRecord>) = valid.into_iter().unzip();
    let committed = broker.controller.create_acls(bindings).await;
    for (i, r) in indexes.into_iter().zip(committed) {
        results[i] = Some(match r {
            Ok(()) => AclCreationResult::default(),
            Err(e) => AclCreationResult::default()
                .with_error_code(e.code.code())
                .with_error_message(Some(s(&e.message))),
        });
    }
    CreateAclsResponse::default()
        .with_results(results.into_iter().map(Option::unwrap_or_default).collect())
}

pub fn describe_acls(
    broker: &ReplicaManager,
    ctx: &RequestContext,
    req: DescribeAclsRequest,
) -> DescribeAclsResponse {
    if let Some((code, message)) = refused(
        broker,
        ctx,
        Operation::Describe,
        "No Authorizer is configured on the broker",
    ) {
        return DescribeAclsResponse::default()
            .with_error_code(code)
            .with_error_message(Some(s(&message)));
    }
    let filter = match parse_filter(&WireAclFilter {
        resource_type: req.resource_type_filter,
        name: req.resource_name_filter.as_deref(),
        pattern_type: req.pattern_type_filter,
        principal: req.principal_filter.as_deref(),
        host: req.host_filter.as_deref(),
        operation: req.operation,
        permission: req.permission_type,
    }) {
        Ok(f) => f,
        Err(e) => {
            return DescribeAclsResponse::default()
                .with_error_code(e.code().code())
                .with_error_message(Some(s(&e.to_string())))
        }
    };
    let image = broker.image();
    let mut resources: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for r in matching(&image, &filter) {
        resources
            .entry((r.resource_type, r.resource_name.clone(), r.pattern_type))
            .or_default()
            .push(
                AclDescription::default()
                    .with_principal(s(&r.principal))
                    .with_host(s(&r.host))
                    .with_operation(r.operation)
                    .with_permission_type(r.permission_type),
            );
    }
    DescribeAclsResponse::default().with_resources(
        resources
            .into_iter()
            .map(|((resource_type, name, pattern_type), acls)| {
                DescribeAclsResource::default()
                    .with_resource_type(resource_type)
                    .with_resource_name(s(&name))
                    .with_pattern_type(pattern_type)
                    .with_acls(acls)
            })
            .collect(),
    )
}

/// The image's bindings a filter matches.
fn matching<'a>(
    image: &'a strand_metadata::image::MetadataImage,
    filter: &'a AclBindingFilter,
) -> impl Iterator<Item = &'a AclRecord> + 'a {
    image
        .acls
        .values()
        .filter(move |r| binding_of(r).is_some_and(|b| filter.matches(&b)))
}

pub async fn delete_acls(
    broker: &ReplicaManager,
    ctx: &RequestContext,
    req: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let n = req.filters.len();
    if let Some((code, message)) = refused(
        broker,
        ctx,
        Operation::Alter,
        "No Authorizer is configured.",
    ) {
        let result = DeleteAclsFilterResult::default()
            .with_error_code(code)
            .with_error_message(Some(s(&message)));
        return DeleteAclsResponse::default().with_filter_results(vec![result; n]);
    }
    let image = broker.image();
    let mut ids = Vec::new();
    let mut results = Vec::with_capacity(n);
    for f in &req.filters {
        let parsed = parse_filter(&WireAclFilter {
            resource_type: f.resource_type_filter,
            name: f.resource_name_filter.as_deref(),
            pattern_type: f.pattern_type_filter,
            principal: f.principal_filter.as_deref(),
            host: f.host_filter.as_deref(),
            operation: f.operation,
            permission: f.permission_type,
        });
        let filter = match parsed {
            Ok(filter) => filter,
            Err(e) => {
                results.push(
                    DeleteAclsFilterResult::default()
                        .with_error_code(e.code().code())
                        .with_error_message(Some(s(&e.to_string()))),
                );
                continue;
            }
        };
        let matched: Vec<DeleteAclsMatchingAcl> = matching(&image, &filter)
            .map(|r| {
                ids.push(r.id);
                DeleteAclsMatchingAcl::default()
                    .with_resource_type(r.resource_type)
                    .with_resource_name(s(&r.resource_name))
                    .with_pattern_type(r.pattern_type)
                    .with_principal(s(&r.principal))
                    .with_host(s(&r.host))
                    .with_operation(r.operation)
                    .with_permission_type(r.permission_type)
            })
            .collect();
        results.push(DeleteAclsFilterResult::default().with_matching_acls(matched));
    }
    ids.sort_unstable();
    ids.dedup();
    if !ids.is_empty() {
        if let Err(e) = broker.controller.remove_acls(ids).await {
            for r in &mut results {
                if r.error_code == 0 {
                    *r = DeleteAclsFilterResult::default()
                        .with_error_code(e.code.code())
                        .with_error_message(Some(s(&e.message)));
                }
            }
        }
    }
    DeleteAclsResponse::default().with_filter_results(results)
}
