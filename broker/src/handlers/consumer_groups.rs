//! The consumer group protocol's APIs (KIP-848): ConsumerGroupHeartbeat and
//! ConsumerGroupDescribe. The group's state machine
//! (`strand_group::consumer::ConsumerGroup`) decides; these handlers find
//! the group, write its records and answer.

use crate::group_coordinator::{consumer_topics, written_error, OFFSETS_TOPIC};
use crate::handlers::context::RequestContext;
use crate::handlers::groups::group_entry;
use crate::node::Node;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use strand_group::consumer::ConsumerGroup;
use strand_protocol::ErrorCode;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// ConsumerGroupHeartbeat (KIP-848): the group's state machine decides,
/// its records are written (acks=all), then the member is answered; a
/// write that fails puts the group back as it was.
pub async fn consumer_group_heartbeat(
    node: &Node,
    ctx: &RequestContext,
    req: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let version = ctx.version;
    use consumer_group_heartbeat_response::{Assignment, TopicPartitions};
    use strand_group::consumer::{self as kip848, Assignment as Partitions};
    let fail = |code: ErrorCode, message: Option<String>| {
        ConsumerGroupHeartbeatResponse::default()
            .with_error_code(code.code())
            .with_error_message(message.map(StrBytes::from_string))
    };
    let broker = &node.broker;
    if !broker.config.serves_consumer_protocol() {
        return fail(ErrorCode::UnsupportedVersion, None);
    }
    let group_id = req.group_id.0.to_string();
    let owned = req.topic_partitions.as_ref().map(|tps| {
        let mut a = Partitions::new();
        for tp in tps {
            a.entry(tp.topic_id)
                .or_default()
                .extend(tp.partitions.iter().copied());
        }
        a
    });
    let mut hb = kip848::HeartbeatRequest {
        member_id: req.member_id.to_string(),
        member_epoch: req.member_epoch,
        instance_id: req.instance_id.as_ref().map(|v| v.to_string()),
        rack_id: req.rack_id.as_ref().map(|v| v.to_string()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_topic_names: req
            .subscribed_topic_names
            .as_ref()
            .map(|ns| ns.iter().map(|n| n.0.to_string()).collect()),
        subscribed_topic_regex: req.subscribed_topic_regex.as_ref().map(|v| v.to_string()),
        server_assignor: req.server_assignor.as_ref().map(|v| v.to_string()),
        owned,
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host.clone(),
    };
    // One metadata snapshot for the whole heartbeat: the group's settings
    // and the topics it is assigned from agree.
    let image = broker.image();
    let cfg = node.groups.consumer_config_of(&image, &group_id);
    if let Err(e) = kip848::validate(&group_id, &hb, version, &cfg) {
        return fail(e.code, Some(e.message));
    }
    if hb.member_id.is_empty() {
        hb.member_id = uuid::Uuid::new_v4().to_string();
    }
    let join = hb.member_epoch == 0;
    let entry = match group_entry(node, &group_id, join).await {
        Ok(Some(e)) => e,
        Ok(None) => {
            return fail(
                ErrorCode::GroupIdNotFound,
                Some(format!("Consumer group {group_id} not found.")),
            )
        }
        Err(code) => return fail(code, None),
    };
    let mut slot = entry.slot.lock().await;
    if slot.unloaded {
        return fail(ErrorCode::NotCoordinator, None);
    }
    let classic_members = slot
        .group
        .as_ref()
        .is_some_and(|g| g.state() != strand_group::GroupState::Empty);
    if classic_members && !join {
        return fail(
            ErrorCode::GroupIdNotFound,
            Some(format!("Group {group_id} is not a consumer group.")),
        );
    }
    if slot.consumer.is_none() && !join {
        return fail(
            ErrorCode::GroupIdNotFound,
            Some(format!("Consumer group {group_id} not found.")),
        );
    }
    let topics = consumer_topics(&image);
    let now = node.groups.clock.now_ms();
    // A classic group ends here when the consumer protocol takes it over:
    // an empty one always (as Kafka does), one with members when the
    // migration policy allows the upgrade (its members kept). Its record
    // is ended in the same write as the new group's first records, and
    // only once the heartbeat has passed its checks (a refused one leaves
    // the classic group as it was).
    let ends_classic = slot.consumer.is_none() && slot.group.is_some();
    let mut upgrade_records = Vec::new();
    let mut group = match (&slot.consumer, &slot.group) {
        (Some(c), _) => c.clone(),
        (None, Some(classic)) if classic_members => {
            match kip848::ConsumerGroup::from_classic(classic, &topics, &cfg, now) {
                Ok((g, records)) => {
                    upgrade_records = records;
                    g
                }
                Err(e) => return fail(e.code, Some(e.message)),
            }
        }
        _ => kip848::ConsumerGroup::new(group_id.clone()),
    };
    let (answer, records) = match group.heartbeat(&hb, &topics, &cfg, now) {
        Ok(done) => done,
        Err(e) => return fail(e.code, Some(e.message)),
    };
    if ends_classic {
        // Held joins and syncs of the classic group are told to rejoin.
        crate::group_coordinator::answer_held(&mut slot, ErrorCode::RebalanceInProgress);
    }
    let mut kvs = Vec::new();
    if ends_classic {
        kvs.push((strand_group::records::group_key(&group_id), None));
    }
    kvs.extend(crate::group_coordinator::consumer_record_kvs(
        &group_id,
        &upgrade_records,
    ));
    let before = slot.consumer.replace(group);
    let classic = if ends_classic {
        slot.group.take()
    } else {
        None
    };
    let written = node
        .groups
        .write_consumer_change(
            &entry,
            &mut slot,
            &records,
            broker.partition(OFFSETS_TOPIC, entry.partition),
            kvs,
        )
        .await;
    if let Err(code) = written {
        slot.consumer = before;
        if classic.is_some() {
            slot.group = classic;
        }
        return fail(written_error(code), None);
    }
    ConsumerGroupHeartbeatResponse::default()
        .with_member_id(Some(StrBytes::from_string(answer.member_id)))
        .with_member_epoch(answer.member_epoch.get())
        .with_heartbeat_interval_ms(answer.heartbeat_interval_ms)
        .with_assignment(answer.assignment.map(|a| {
            Assignment::default().with_topic_partitions(
                a.into_iter()
                    .map(|(t, ps)| {
                        TopicPartitions::default()
                            .with_topic_id(t)
                            .with_partitions(ps.into_iter().collect())
                    })
                    .collect(),
            )
        }))
}

/// ConsumerGroupDescribe: each group as its coordinator holds it; a group
/// that is missing, or not a consumer group, is GROUP_ID_NOT_FOUND.
pub async fn consumer_group_describe(
    node: &Node,
    req: ConsumerGroupDescribeRequest,
) -> ConsumerGroupDescribeResponse {
    use consumer_group_describe_response::DescribedGroup;
    let mut out = Vec::with_capacity(req.group_ids.len());
    let cfg = node.groups.consumer_config();
    let served = node.broker.config.serves_consumer_protocol();
    for gid in req.group_ids {
        let id = gid.0.to_string();
        let mut d = DescribedGroup::default()
            .with_group_id(gid)
            .with_authorized_operations(i32::MIN);
        let not_found = |d: &mut DescribedGroup, msg: String| {
            d.error_code = ErrorCode::GroupIdNotFound.code();
            d.error_message = Some(StrBytes::from_string(msg));
        };
        if !served {
            d.error_code = ErrorCode::UnsupportedVersion.code();
            out.push(d);
            continue;
        }
        let entry = match group_entry(node, &id, false).await {
            Err(code) => {
                d.error_code = code.code();
                out.push(d);
                continue;
            }
            Ok(None) => {
                not_found(&mut d, format!("Group {id} not found."));
                out.push(d);
                continue;
            }
            Ok(Some(entry)) => entry,
        };
        let slot = entry.slot.lock().await;
        if slot.unloaded {
            d.error_code = ErrorCode::NotCoordinator.code();
        } else if let Some(group) = &slot.consumer {
            let names = topic_names(&node.broker.image());
            d = described(d, group, &names, group.assignor(&cfg).name());
        } else if slot
            .group
            .as_ref()
            .is_some_and(|g| g.overview().state != strand_group::GroupState::Dead)
            || !slot.offsets.committed().is_empty()
        {
            not_found(&mut d, format!("Group {id} is not a consumer group."));
        } else {
            not_found(&mut d, format!("Group {id} not found."));
        }
        out.push(d);
    }
    ConsumerGroupDescribeResponse::default().with_groups(out)
}

/// Topic names by id, from the metadata image.
fn topic_names(
    image: &strand_metadata::image::MetadataImage,
) -> std::collections::HashMap<uuid::Uuid, String> {
    image
        .topics
        .values()
        .map(|t| (t.topic_id, t.name.clone()))
        .collect()
}

fn described(
    d: consumer_group_describe_response::DescribedGroup,
    group: &ConsumerGroup,
    names: &std::collections::HashMap<uuid::Uuid, String>,
    assignor: &str,
) -> consumer_group_describe_response::DescribedGroup {
    use consumer_group_describe_response::{Assignment, Member, TopicPartitions};
    // Topics no longer in the image are left out, as Kafka does.
    let assignment = |a: &strand_group::consumer::Assignment| {
        Assignment::default().with_topic_partitions(
            a.iter()
                .filter_map(|(topic, parts)| {
                    let name = names.get(topic)?;
                    Some(
                        TopicPartitions::default()
                            .with_topic_id(*topic)
                            .with_topic_name(TopicName(s(name)))
                            .with_partitions(parts.iter().copied().collect()),
                    )
                })
                .collect(),
        )
    };
    let empty = strand_group::consumer::Assignment::new();
    let members = group
        .members()
        .iter()
        .map(|(id, m)| {
            Member::default()
                .with_member_id(s(id))
                .with_instance_id(m.meta.instance_id.as_deref().map(s))
                .with_rack_id(m.meta.rack_id.as_deref().map(s))
                .with_member_epoch(m.assignment.epoch.get())
                .with_client_id(s(&m.meta.client_id))
                .with_client_host(s(&m.meta.client_host))
                .with_subscribed_topic_names(
                    m.meta
                        .subscribed_topic_names
                        .iter()
                        .map(|t| TopicName(s(t)))
                        .collect(),
                )
                // Kafka describes a member subscribed by names with an
                // empty regex.
                .with_subscribed_topic_regex(Some(s(m
                    .meta
                    .subscribed_topic_regex
                    .as_deref()
                    .unwrap_or(""))))
                .with_assignment(assignment(&m.assignment.assigned))
                .with_target_assignment(assignment(group.target(id).unwrap_or(&empty)))
                // 0: a classic member, 1: a consumer-protocol one.
                .with_member_type(if m.meta.classic.is_some() { 0 } else { 1 })
        })
        .collect();
    d.with_group_state(s(group.state().as_str()))
        .with_group_epoch(group.epoch().get())
        .with_assignment_epoch(group.assignment_epoch().get())
        .with_assignor_name(s(assignor))
        .with_members(members)
}
