//! Topic and config administration. Mutations go to the controller's event
//! loop; answers are read back from the image it publishes.

use crate::replica_manager::ReplicaManager;
use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use strand_metadata::configs::{
    resolve_topic_config, BrokerLayers, ConfigSource, ConfigType, NULL_BROKER_DEFAULTS,
    TOPIC_CONFIGS,
};
use strand_metadata::controller_api::{ApiError, ConfigOp, NewTopic};
use strand_protocol::ErrorCode;

const RESOURCE_TOPIC: i8 = 2;
const RESOURCE_BROKER: i8 = 4;
const RESOURCE_BROKER_LOGGER: i8 = 8;
const RESOURCE_GROUP: i8 = 32;
/// DescribeConfigs' config type of a password (Kafka's `ConfigType.PASSWORD`).
const PASSWORD_CONFIG_TYPE: i8 = 9;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn err_parts(e: &ApiError) -> (i16, Option<StrBytes>) {
    (e.code.code(), Some(s(&e.message)))
}

pub async fn create_topics(
    broker: &ReplicaManager,
    req: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let topics: Vec<NewTopic> = req
        .topics
        .iter()
        .map(|t| NewTopic {
            name: t.name.0.to_string(),
            num_partitions: t.num_partitions,
            replication_factor: t.replication_factor,
            assignments: t
                .assignments
                .iter()
                .map(|a| {
                    (
                        a.partition_index,
                        a.broker_ids.iter().map(|b| b.0).collect(),
                    )
                })
                .collect(),
            configs: t
                .configs
                .iter()
                .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                .collect(),
        })
        .collect();
    // Kafka answers a name given twice with INVALID_REQUEST for both.
    let mut dup = std::collections::HashMap::new();
    for t in &topics {
        *dup.entry(t.name.clone()).or_insert(0) += 1;
    }
    let (unique, _): (Vec<NewTopic>, Vec<NewTopic>) =
        topics.iter().cloned().partition(|t| dup[&t.name] == 1);
    let mut results = broker
        .controller
        .create_topics(unique, req.validate_only)
        .await
        .into_iter();
    broker.reconcile();
    let mut out = Vec::new();
    for t in &topics {
        let mut r = CreatableTopicResult::default()
            .with_name(TopicName(s(&t.name)))
            .with_num_partitions(-1)
            .with_replication_factor(-1);
        if dup[&t.name] > 1 {
            r.error_code = ErrorCode::InvalidRequest.code();
            r.error_message = Some(s(&format!("Create topics request from client `{}` contains multiple entries for the following topics: {}", "", t.name)));
            out.push(r);
            continue;
        }
        match results.next() {
            Some(Ok(created)) => {
                r.topic_id = created.topic_id;
                r.num_partitions = created.num_partitions;
                r.replication_factor = created.replication_factor;
                if version >= 5 {
                    let image = broker.image();
                    let me = broker.node_id().to_string();
                    let layers = BrokerLayers::of(&image, &me, &broker.config.static_props);
                    let overrides: std::collections::BTreeMap<String, String> = t
                        .configs
                        .iter()
                        .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
                        .collect();
                    r.configs = Some(
                        TOPIC_CONFIGS
                            .iter()
                            .map(|d| {
                                let (value, source) = resolve_topic_config(d, &overrides, &layers);
                                CreatableTopicConfigs::default()
                                    .with_name(s(d.name))
                                    .with_value(Some(s(value)))
                                    .with_config_source(source as i8)
                            })
                            .collect(),
                    );
                }
            }
            Some(Err(e)) => {
                (r.error_code, r.error_message) = err_parts(&e);
            }
            None => r.error_code = ErrorCode::UnknownServerError.code(),
        }
        out.push(r);
    }
    CreateTopicsResponse::default().with_topics(out)
}

pub async fn delete_topics(
    broker: &ReplicaManager,
    req: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let image = broker.image();
    // v6 names topics by name or id; earlier versions by name only.
    let mut wanted: Vec<(Option<String>, uuid::Uuid, Option<ErrorCode>)> = Vec::new();
    if version >= 6 {
        for t in &req.topics {
            match &t.name {
                Some(n) => wanted.push((Some(n.0.to_string()), t.topic_id, None)),
                None => match image.topic_by_id(t.topic_id) {
                    Some(topic) => wanted.push((Some(topic.name.clone()), t.topic_id, None)),
                    None => wanted.push((None, t.topic_id, Some(ErrorCode::UnknownTopicId))),
                },
            }
        }
    } else {
        for n in &req.topic_names {
            wanted.push((Some(n.0.to_string()), uuid::Uuid::nil(), None));
        }
    }
    let names: Vec<String> = wanted
        .iter()
        .filter(|w| w.2.is_none())
        .filter_map(|w| w.0.clone())
        .collect();
    let mut results = broker.controller.delete_topics(names).await.into_iter();
    broker.reconcile();
    let responses = wanted
        .into_iter()
        .map(|(name, id, early)| {
            let mut r = DeletableTopicResult::default()
                .with_name(name.as_deref().map(|n| TopicName(s(n))))
                .with_topic_id(id);
            if let Some(code) = early {
                r.error_code = code.code();
            } else {
                match results.next() {
                    Some(Ok(topic_id)) => r.topic_id = topic_id,
                    Some(Err(e)) => (r.error_code, r.error_message) = err_parts(&e),
                    None => r.error_code = ErrorCode::UnknownServerError.code(),
                }
            }
            r
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}

pub async fn create_partitions(
    broker: &ReplicaManager,
    req: CreatePartitionsRequest,
) -> CreatePartitionsResponse {
    let topics = req
        .topics
        .iter()
        .map(|t| {
            (
                t.name.0.to_string(),
                t.count,
                t.assignments.as_ref().map(|a| {
                    a.iter()
                        .map(|x| x.broker_ids.iter().map(|b| b.0).collect())
                        .collect()
                }),
            )
        })
        .collect();
    let results = broker
        .controller
        .create_partitions(topics, req.validate_only)
        .await;
    broker.reconcile();
    let out = req
        .topics
        .iter()
        .zip(results)
        .map(|(t, r)| {
            let mut res = CreatePartitionsTopicResult::default().with_name(t.name.clone());
            if let Err(e) = r {
                (res.error_code, res.error_message) = err_parts(&e);
            }
            res
        })
        .collect();
    CreatePartitionsResponse::default().with_results(out)
}

/// A topic's or a group's config as DescribeConfigs lists it (changeable,
/// so never read-only).
fn config_entry(
    d: &strand_metadata::configs::TopicConfigDef,
    value: &str,
    source: ConfigSource,
) -> DescribeConfigsResourceResult {
    DescribeConfigsResourceResult::default()
        .with_name(s(d.name))
        .with_value(Some(s(value)))
        .with_config_source(source as i8)
        .with_read_only(false)
        .with_config_type(d.kind as i8)
}

fn synonym(name: &str, value: &str, source: ConfigSource) -> DescribeConfigsSynonym {
    DescribeConfigsSynonym::default()
        .with_name(s(name))
        .with_value(Some(s(value)))
        .with_source(source as i8)
}

/// One broker config as DescribeConfigs reports it: its value (never a
/// password's), where it comes from, whether it can change without a
/// restart, and its synonyms (every layer that sets it, then the default).
fn broker_config_entry(
    req: &DescribeConfigsRequest,
    key: &str,
    value: &str,
    layers: &BrokerLayers,
    source: ConfigSource,
    per_broker: bool,
) -> DescribeConfigsResourceResult {
    let dynamic = strand_metadata::configs::dynamic_broker_config(key);
    let kind = dynamic
        .or_else(|| strand_metadata::configs::broker_config(key))
        .map(|d| d.kind)
        .or_else(|| {
            TOPIC_CONFIGS
                .iter()
                .find(|d| d.broker_synonym == Some(key))
                .map(|d| d.kind)
        })
        .unwrap_or(ConfigType::String);
    // Kafka's PASSWORD configs: never shown.
    let sensitive = crate::config::is_sensitive(key);
    let shown = |v: &str| (!sensitive).then(|| s(v));
    let mut c = DescribeConfigsResourceResult::default()
        .with_name(s(key))
        .with_value(shown(value))
        .with_config_source(source as i8)
        .with_read_only(dynamic.is_none())
        .with_is_sensitive(sensitive)
        .with_config_type(if sensitive {
            PASSWORD_CONFIG_TYPE
        } else {
            kind as i8
        });
    if req.include_synonyms {
        for (v, src) in layers.all(key) {
            let mut syn = synonym(key, v, src);
            syn.value = shown(v);
            c.synonyms.push(syn);
        }
        // A broker's own answer ends with the default (the cluster-wide
        // resource lists only what is set there), as Kafka's does.
        if per_broker {
            let default = strand_metadata::configs::broker_default_fallback(key)
                .or_else(|| crate::config::BrokerConfig::default_of(key).map(|d| (key, d)));
            if let Some((name, v)) = default {
                let mut syn = synonym(name, v, ConfigSource::Default);
                syn.value = shown(v);
                c.synonyms.push(syn);
            }
        }
    }
    c
}

pub fn describe_configs(
    broker: &ReplicaManager,
    req: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let image = broker.image();
    let me = broker.node_id().to_string();
    let layers = BrokerLayers::of(&image, &me, &broker.config.static_props);
    let mut results = Vec::new();
    for res in &req.resources {
        let name = res.resource_name.to_string();
        let keys: Option<Vec<String>> = res
            .configuration_keys
            .as_ref()
            .map(|k| k.iter().map(|x| x.to_string()).collect());
        let wanted = |k: &str| {
            keys.as_ref()
                .map(|ks| ks.iter().any(|x| x == k))
                .unwrap_or(true)
        };
        let mut r = DescribeConfigsResult::default()
            .with_resource_type(res.resource_type)
            .with_resource_name(res.resource_name.clone());
        match res.resource_type {
            RESOURCE_TOPIC => match image.topics.get(&name) {
                None => {
                    let code = match strand_metadata::validate_topic_name(&name) {
                        Err(_) => ErrorCode::InvalidTopicException,
                        Ok(()) => ErrorCode::UnknownTopicOrPartition,
                    };
                    r.error_code = code.code();
                    r.error_message = Some(s(&format!("Topic {name} does not exist")));
                }
                Some(t) => {
                    for d in TOPIC_CONFIGS.iter().filter(|d| wanted(d.name)) {
                        let (value, source) = resolve_topic_config(d, &t.configs, &layers);
                        let mut c = config_entry(d, value, source);
                        if req.include_synonyms {
                            if let Some(v) = t.configs.get(d.name) {
                                c.synonyms
                                    .push(synonym(d.name, v, ConfigSource::DynamicTopic));
                            }
                            if let Some(bs) = d.broker_synonym {
                                let set = layers.all(bs);
                                let any_set = !set.is_empty();
                                for (v, src) in set {
                                    c.synonyms.push(synonym(bs, v, src));
                                }
                                if !NULL_BROKER_DEFAULTS.contains(&bs) {
                                    c.synonyms
                                        .push(synonym(bs, d.default, ConfigSource::Default));
                                } else if let Some((name, v)) =
                                    strand_metadata::configs::broker_default_fallback(bs)
                                        .filter(|_| any_set)
                                {
                                    c.synonyms.push(synonym(name, v, ConfigSource::Default));
                                }
                            }
                        }
                        if req.include_documentation {
                            c.documentation = Some(s(d.doc));
                        }
                        r.configs.push(c);
                    }
                }
            },
            // The cluster-wide resource: the dynamic defaults set, as
            // Kafka lists them.
            RESOURCE_BROKER if name.is_empty() => {
                let cluster = image.broker_configs.get("").cloned().unwrap_or_default();
                for (k, v) in cluster.iter().filter(|(k, _)| wanted(k)) {
                    let layers = BrokerLayers {
                        broker: None,
                        ..layers
                    };
                    r.configs.push(broker_config_entry(
                        &req,
                        k,
                        v,
                        &layers,
                        ConfigSource::DynamicDefaultBroker,
                        false,
                    ));
                }
            }
            RESOURCE_BROKER => {
                if name != broker.node_id().to_string() {
                    r.error_code = ErrorCode::InvalidRequest.code();
                    r.error_message = Some(s(&format!(
                        "Unexpected broker id, expected {} but received {name}",
                        broker.node_id()
                    )));
                } else {
                    let mut all: std::collections::BTreeMap<String, (String, ConfigSource)> =
                        broker
                            .config
                            .describe()
                            .into_iter()
                            .map(|(k, v, set)| {
                                let src = if set {
                                    ConfigSource::StaticBroker
                                } else {
                                    ConfigSource::Default
                                };
                                (k, (v, src))
                            })
                            .collect();
                    for m in [layers.cluster, layers.broker].into_iter().flatten() {
                        for k in m.keys() {
                            if let Some((v, src)) = layers.get(k) {
                                all.insert(k.clone(), (v.to_string(), src));
                            }
                        }
                    }
                    for (k, (v, source)) in all.iter().filter(|(k, _)| wanted(k)) {
                        let mut c = broker_config_entry(&req, k, v, &layers, *source, true);
                        // A setting whose Kafka default is null, set nowhere:
                        // no value and no synonyms, as Kafka answers.
                        if *source == ConfigSource::Default
                            && NULL_BROKER_DEFAULTS.contains(&k.as_str())
                        {
                            c.value = None;
                            c.synonyms.clear();
                        }
                        r.configs.push(c);
                    }
                }
            }
            // This broker's loggers and their levels (Kafka's
            // DYNAMIC_BROKER_LOGGER_CONFIG entries, type unknown).
            RESOURCE_BROKER_LOGGER => match logger_resource(broker, &name, LoggerCall::Describe) {
                Err(e) => (r.error_code, r.error_message) = err_parts(&e),
                Ok(()) => {
                    r.error_message = Some(s(""));
                    for (logger, level) in broker.loggers.describe() {
                        if wanted(&logger) {
                            r.configs.push(
                                DescribeConfigsResourceResult::default()
                                    .with_name(s(&logger))
                                    .with_value(Some(s(&level)))
                                    .with_config_source(ConfigSource::DynamicBrokerLogger as i8)
                                    .with_read_only(false)
                                    .with_config_type(0),
                            );
                        }
                    }
                }
            },
            // A group's own settings: set for it, or its broker's default.
            RESOURCE_GROUP if name.is_empty() => {
                r.error_code = ErrorCode::InvalidRequest.code();
                r.error_message = Some(s("Group name must not be empty"));
            }
            RESOURCE_GROUP => {
                r.error_message = Some(s(""));
                let set = image.group_configs.get(&name);
                for d in strand_metadata::configs::GROUP_CONFIGS
                    .iter()
                    .filter(|d| wanted(d.name))
                {
                    // The broker setting behind it: set in the broker's
                    // properties (STATIC_BROKER_CONFIG) or its default.
                    let synonym_name = d.broker_synonym.unwrap_or(d.name);
                    let static_value = broker.config.static_props.get(synonym_name);
                    let broker_value = static_value.map_or(d.default, String::as_str);
                    let own = set.and_then(|m| m.get(d.name));
                    let (value, source) = match (own, static_value) {
                        (Some(v), _) => (v.as_str(), ConfigSource::DynamicGroup),
                        (None, Some(v)) => (v.as_str(), ConfigSource::StaticBroker),
                        (None, None) => (broker_value, ConfigSource::Default),
                    };
                    let mut c = config_entry(d, value, source);
                    if req.include_synonyms {
                        if let Some(v) = own {
                            c.synonyms
                                .push(synonym(d.name, v, ConfigSource::DynamicGroup));
                        }
                        if let Some(v) = static_value {
                            c.synonyms
                                .push(synonym(synonym_name, v, ConfigSource::StaticBroker));
                        }
                        c.synonyms
                            .push(synonym(synonym_name, d.default, ConfigSource::Default));
                    }
                    if req.include_documentation {
                        c.documentation = Some(s(d.doc));
                    }
                    r.configs.push(c);
                }
            }
            other => {
                r.error_code = ErrorCode::InvalidRequest.code();
                r.error_message = Some(s(&format!("Unsupported resource type {other}")));
            }
        }
        results.push(r);
    }
    DescribeConfigsResponse::default().with_results(results)
}

/// Which request names a BROKER_LOGGER resource (Kafka's messages differ).
#[derive(Clone, Copy)]
enum LoggerCall {
    Describe,
    Alter,
}

/// A BROKER_LOGGER resource names this broker's id, as Kafka requires.
fn logger_resource(broker: &ReplicaManager, name: &str, call: LoggerCall) -> Result<(), ApiError> {
    let me = broker.node_id();
    match (name.parse::<i32>(), call) {
        (Err(_), LoggerCall::Describe) => Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("Broker id must be an integer, but it is: {name}"),
        )),
        (Err(_), LoggerCall::Alter) => Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("Node id must be an integer, but it is: {name}"),
        )),
        (Ok(id), _) if id == me.get() => Ok(()),
        (Ok(_), LoggerCall::Describe) => Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("Unexpected broker id, expected {me} but received {name}"),
        )),
        (Ok(_), LoggerCall::Alter) => Err(ApiError::new(
            ErrorCode::InvalidRequest,
            format!("Unexpected node id. Expected {me}, but received {name}"),
        )),
    }
}

/// Shared by AlterConfigs and IncrementalAlterConfigs: topic, broker and
/// group configs go to the controller; log levels (BROKER_LOGGER, incremental
/// only) are this broker's own.
/// One resource of an AlterConfigs request: type, name, operations.
type ResourceOps = (i8, String, Vec<(String, ConfigOp)>);

async fn alter(
    broker: &ReplicaManager,
    resources: Vec<ResourceOps>,
    incremental: bool,
    validate_only: bool,
) -> Vec<(i8, String, Result<(), ApiError>)> {
    // A change of this broker's TLS stores is refused here when they would
    // not load (only this broker can read them); others go on.
    let me = broker.node_id().to_string();
    let refused: Vec<Option<ApiError>> = resources
        .iter()
        .map(|(ty, name, ops)| {
            (*ty == RESOURCE_BROKER && *name == me)
                .then(|| broker.check_tls_change(ops).err())
                .flatten()
                .map(|e| ApiError::new(ErrorCode::InvalidConfig, e))
        })
        .collect();
    let of_type = |ty: i8| -> Vec<strand_metadata::controller_api::TopicConfigOps> {
        resources
            .iter()
            .zip(&refused)
            .filter(|(r, refused)| r.0 == ty && refused.is_none())
            .map(|(r, _)| (r.1.clone(), r.2.clone()))
            .collect()
    };
    let mut topic_results = broker
        .controller
        .alter_topic_configs(of_type(RESOURCE_TOPIC), incremental, validate_only)
        .await
        .into_iter();
    let mut broker_results = broker
        .controller
        .alter_broker_configs(of_type(RESOURCE_BROKER), incremental, validate_only)
        .await
        .into_iter();
    let mut group_results = broker
        .controller
        .alter_group_configs(of_type(RESOURCE_GROUP), incremental, validate_only)
        .await
        .into_iter();
    broker.reconcile();
    let missing = || {
        Err(ApiError::new(
            ErrorCode::UnknownServerError,
            "missing result",
        ))
    };
    resources
        .into_iter()
        .zip(refused)
        .map(|((ty, name, ops), refused)| {
            let r = match (ty, refused) {
                (_, Some(e)) => Err(e),
                (RESOURCE_TOPIC, None) => topic_results.next().unwrap_or_else(missing),
                (RESOURCE_BROKER, None) => broker_results.next().unwrap_or_else(missing),
                (RESOURCE_GROUP, None) => group_results.next().unwrap_or_else(missing),
                (RESOURCE_BROKER_LOGGER, None) if incremental => {
                    logger_resource(broker, &name, LoggerCall::Alter)
                        .and_then(|()| broker.loggers.alter(&ops, validate_only))
                }
                // The legacy AlterConfigs does not take log levels (Kafka's words).
                (RESOURCE_BROKER_LOGGER, None) => Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("Unknown resource type {ty}"),
                )),
                _ => Err(ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("Unsupported resource type {ty}"),
                )),
            };
            (ty, name, r)
        })
        .collect()
}

pub async fn alter_configs(
    broker: &ReplicaManager,
    req: AlterConfigsRequest,
) -> AlterConfigsResponse {
    let resources = req
        .resources
        .iter()
        .map(|r| {
            let ops = r
                .configs
                .iter()
                .map(|c| {
                    (
                        c.name.to_string(),
                        c.value
                            .as_ref()
                            .map(|v| ConfigOp::Set(v.to_string()))
                            .unwrap_or(ConfigOp::Delete),
                    )
                })
                .collect();
            (r.resource_type, r.resource_name.to_string(), ops)
        })
        .collect();
    let out = alter(broker, resources, false, req.validate_only).await;
    let responses = out
        .into_iter()
        .map(|(ty, name, r)| {
            let mut resp = alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(ty)
                .with_resource_name(s(&name))
                .with_error_message(None);
            if let Err(e) = r {
                (resp.error_code, resp.error_message) = err_parts(&e);
            }
            resp
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}

pub async fn incremental_alter_configs(
    broker: &ReplicaManager,
    req: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut bad_op = Vec::new();
    let resources = req
        .resources
        .iter()
        .map(|r| {
            let ops = r
                .configs
                .iter()
                .map(|c| {
                    let v = c.value.as_ref().map(|v| v.to_string()).unwrap_or_default();
                    let op = match c.config_operation {
                        0 => ConfigOp::Set(v),
                        1 => ConfigOp::Delete,
                        2 => ConfigOp::Append(v),
                        3 => ConfigOp::Subtract(v),
                        _ => {
                            bad_op.push(r.resource_name.to_string());
                            ConfigOp::Delete
                        }
                    };
                    (c.name.to_string(), op)
                })
                .collect();
            (r.resource_type, r.resource_name.to_string(), ops)
        })
        .collect::<Vec<_>>();
    let out = if bad_op.is_empty() {
        alter(broker, resources, true, req.validate_only).await
    } else {
        resources
            .into_iter()
            .map(|(ty, n, _)| {
                (
                    ty,
                    n,
                    Err(ApiError::new(
                        ErrorCode::InvalidRequest,
                        "unknown config operation",
                    )),
                )
            })
            .collect()
    };
    let responses = out
        .into_iter()
        .map(|(ty, name, r)| {
            let mut resp =
                incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                    .with_resource_type(ty)
                    .with_resource_name(s(&name))
                    .with_error_message(None);
            if let Err(e) = r {
                (resp.error_code, resp.error_message) = err_parts(&e);
            }
            resp
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

pub fn describe_log_dirs(
    broker: &ReplicaManager,
    req: DescribeLogDirsRequest,
) -> DescribeLogDirsResponse {
    let filter = req.topics.as_ref();
    let wanted = |p: &strand_partition::Partition| {
        filter.is_none_or(|f| {
            f.iter()
                .any(|t| t.topic.0.as_str() == p.topic && t.partitions.contains(&p.index))
        })
    };
    let partitions = broker.all_partitions();
    // Every directory of `log.dirs`, each with the partitions in it; an
    // offline one answers KAFKA_STORAGE_ERROR alone, as Kafka's does.
    let results = broker
        .log_dirs
        .all()
        .iter()
        .map(|dir| {
            let abs = std::fs::canonicalize(&dir.path).unwrap_or_else(|_| dir.path.clone());
            let result =
                DescribeLogDirsResult::default().with_log_dir(s(&abs.display().to_string()));
            if dir.is_offline() {
                return result.with_error_code(ErrorCode::KafkaStorageError.code());
            }
            let mut by_topic: std::collections::BTreeMap<String, Vec<DescribeLogDirsPartition>> =
                Default::default();
            for p in partitions
                .iter()
                .filter(|p| p.dir().parent() == Some(&dir.path) && wanted(p))
            {
                by_topic.entry(p.topic.clone()).or_default().push(
                    DescribeLogDirsPartition::default()
                        .with_partition_index(p.index)
                        .with_partition_size(p.size_bytes() as i64),
                );
            }
            // Replicas moving here (AlterReplicaLogDirs): the copy, with
            // how far it is behind the replica it copies.
            for (tp, m) in broker.replica_moves() {
                if m.dest != dir.id {
                    continue;
                }
                let Some(p) = partitions
                    .iter()
                    .find(|p| p.topic == *tp.topic && p.index == tp.partition)
                else {
                    continue;
                };
                if !wanted(p) {
                    continue;
                }
                let lag = p.offsets().log_end_offset.get() - m.future_log_end_offset();
                by_topic.entry(p.topic.clone()).or_default().push(
                    DescribeLogDirsPartition::default()
                        .with_partition_index(p.index)
                        .with_partition_size(m.future_size() as i64)
                        .with_offset_lag(lag.max(0))
                        .with_is_future_key(true),
                );
            }
            let (total, usable) = disk_space(&dir.path);
            let topics = by_topic
                .into_iter()
                .map(|(t, ps)| {
                    DescribeLogDirsTopic::default()
                        .with_name(TopicName(s(&t)))
                        .with_partitions(ps)
                })
                .collect();
            result
                .with_topics(topics)
                .with_total_bytes(total)
                .with_usable_bytes(usable)
        })
        .collect();
    DescribeLogDirsResponse::default().with_results(results)
}

fn disk_space(dir: &std::path::Path) -> (i64, i64) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return (-1, -1);
    };
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path and `st` a properly sized out-parameter.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return (-1, -1);
    }
    (
        (st.f_blocks as i64) * st.f_frsize as i64,
        (st.f_bavail as i64) * st.f_frsize as i64,
    )
}

/// ElectLeaders: preferred or unclean elections, decided by the controller.
/// No partitions listed (null) means every partition.
pub async fn elect_leaders(
    broker: &ReplicaManager,
    req: ElectLeadersRequest,
) -> ElectLeadersResponse {
    use kafka_protocol::messages::elect_leaders_response::{
        PartitionResult, ReplicaElectionResult,
    };
    use strand_metadata::controller_api::ElectionType;
    let election_type = match req.election_type {
        0 => ElectionType::Preferred,
        1 => ElectionType::Unclean,
        _ => {
            return ElectLeadersResponse::default()
                .with_error_code(ErrorCode::InvalidRequest.code());
        }
    };
    let partitions: Option<Vec<(String, i32)>> = req.topic_partitions.as_ref().map(|tps| {
        tps.iter()
            .flat_map(|t| t.partitions.iter().map(|&p| (t.topic.0.to_string(), p)))
            .collect()
    });
    let results = match broker
        .controller
        .elect_leaders(election_type, partitions)
        .await
    {
        Ok(r) => r,
        Err(e) => return ElectLeadersResponse::default().with_error_code(e.code.code()),
    };
    broker.reconcile();
    let mut out: Vec<ReplicaElectionResult> = Vec::new();
    for ((topic, partition), r) in results {
        let mut pr = PartitionResult::default().with_partition_id(partition);
        if let Err(e) = r {
            (pr.error_code, pr.error_message) = err_parts(&e);
        }
        match out.iter_mut().find(|t| t.topic.0.as_str() == topic) {
            Some(t) => t.partition_result.push(pr),
            None => out.push(
                ReplicaElectionResult::default()
                    .with_topic(TopicName(s(&topic)))
                    .with_partition_result(vec![pr]),
            ),
        }
    }
    ElectLeadersResponse::default().with_replica_election_results(out)
}
