//! DescribeClientQuotas (from the metadata image) and AlterClientQuotas
//! (entities checked here, changes checked and committed by the
//! controller), as Kafka's KRaft brokers answer them. The rules are
//! `strand_metadata::quotas`'.

use crate::replica_manager::ReplicaManager;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use strand_metadata::quotas::{
    filter_matches, parse_filter, validate_alteration, FilterError, QuotaEntity,
};
use strand_protocol::ErrorCode;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub fn describe_client_quotas(
    broker: &ReplicaManager,
    req: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    use describe_client_quotas_response::{EntityData, EntryData, ValueData};
    let components: Vec<(String, i8, Option<String>)> = req
        .components
        .iter()
        .map(|c| {
            let name = c._match.as_ref().map(|m| m.to_string());
            (c.entity_type.to_string(), c.match_type, name)
        })
        .collect();
    let filter = match parse_filter(&components) {
        Ok(f) => f,
        Err(FilterError::Invalid(m)) => return refused(ErrorCode::InvalidRequest, m),
        Err(FilterError::UnsupportedType(m)) => return refused(ErrorCode::UnsupportedVersion, m),
    };
    let image = broker.image();
    let entries = image
        .client_quotas
        .iter()
        .filter(|(entity, _)| filter_matches(entity, &filter, req.strict))
        .map(|(entity, keys)| {
            EntryData::default()
                .with_entity(
                    entity
                        .components()
                        .iter()
                        .map(|(t, n)| {
                            EntityData::default()
                                .with_entity_type(s(t))
                                .with_entity_name(n.as_deref().map(s))
                        })
                        .collect(),
                )
                .with_values(
                    keys.iter()
                        .map(|(k, v)| ValueData::default().with_key(s(k)).with_value(v.0))
                        .collect(),
                )
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}

fn refused(code: ErrorCode, message: String) -> DescribeClientQuotasResponse {
    DescribeClientQuotasResponse::default()
        .with_error_code(code.code())
        .with_error_message(Some(s(&message)))
        .with_entries(None)
}

pub async fn alter_client_quotas(
    broker: &ReplicaManager,
    req: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    use alter_client_quotas_response::{EntityData, EntryData};
    let mut answers: Vec<EntryData> = Vec::with_capacity(req.entries.len());
    let mut valid: Vec<(usize, QuotaEntity, Vec<_>)> = Vec::new();
    let mut duplicates: Vec<(usize, String)> = Vec::new();
    // Entities by their components as named (each type's last name), as
    // Kafka keys them before any check: a later entry naming the same
    // entity, valid or not, is answered as the duplicate.
    type Named = std::collections::BTreeMap<String, Option<String>>;
    let mut seen: std::collections::HashMap<Named, usize> = std::collections::HashMap::new();
    for entry in &req.entries {
        let echo: Vec<EntityData> = entry
            .entity
            .iter()
            .map(|e| {
                EntityData::default()
                    .with_entity_type(e.entity_type.clone())
                    .with_entity_name(e.entity_name.clone())
            })
            .collect();
        let named: Named = entry
            .entity
            .iter()
            .map(|e| {
                (
                    e.entity_type.to_string(),
                    e.entity_name.as_ref().map(|n| n.to_string()),
                )
            })
            .collect();
        // An entity named again: Kafka answers it once, refused, though
        // its first entry's changes are still made.
        if let Some(&slot) = seen.get(&named) {
            let shown = strand_metadata::quotas::display_entity(
                named.iter().map(|(t, n)| (t.as_str(), n.as_deref())),
            );
            duplicates.push((slot, format!("Ignoring duplicate entity {shown}")));
            continue;
        }
        seen.insert(named.clone(), answers.len());
        let components = named.into_iter().collect();
        let ops = entry
            .ops
            .iter()
            .map(|op| (op.key.to_string(), (!op.remove).then_some(op.value)))
            .collect::<Vec<_>>();
        // Success carries no message (null, not empty, as Kafka's).
        let answer = EntryData::default()
            .with_entity(echo)
            .with_error_message(None);
        // Checked here as the controller checks them (the controller
        // checks again): a value JSON cannot carry (an infinite one) must
        // be refused before it is forwarded.
        let checked =
            QuotaEntity::new(components).and_then(|e| validate_alteration(&e, &ops).map(|()| e));
        match checked {
            Ok(entity) => valid.push((answers.len(), entity, ops)),
            Err(message) => {
                answers.push(
                    answer
                        .with_error_code(ErrorCode::InvalidRequest.code())
                        .with_error_message(Some(s(&message))),
                );
                continue;
            }
        }
        answers.push(answer);
    }
    let (slots, entries): (Vec<usize>, Vec<_>) = valid
        .into_iter()
        .map(|(slot, entity, ops)| (slot, (entity, ops)))
        .unzip();
    let results = if entries.is_empty() {
        Vec::new()
    } else {
        broker
            .controller
            .alter_client_quotas(entries, req.validate_only)
            .await
    };
    for (slot, result) in slots.into_iter().zip(results) {
        if let Err(e) = result {
            let a = &mut answers[slot];
            a.error_code = e.code.code();
            a.error_message = Some(s(&e.message));
        }
    }
    for (slot, message) in duplicates {
        let a = &mut answers[slot];
        a.error_code = ErrorCode::InvalidRequest.code();
        a.error_message = Some(s(&message));
    }
    AlterClientQuotasResponse::default().with_entries(answers)
}
