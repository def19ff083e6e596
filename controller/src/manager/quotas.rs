//! AlterClientQuotas (Kafka's ClientQuotaControlManager): an entity's
//! changes are checked together (keys its kind takes, sound values) and
//! become one record per changed key; setting a stored value again or
//! removing a key the entity does not have changes nothing.

use super::common::ApiError;
use strand_metadata::image::MetadataImage;
use strand_metadata::quotas::{validate_alteration, QuotaEntity, QuotaOp, QuotaValue};
use strand_metadata::records::MetadataRecord;
use strand_protocol::ErrorCode;

pub fn alter_client_quotas(
    image: &MetadataImage,
    entity: &QuotaEntity,
    ops: &[QuotaOp],
) -> Result<Vec<MetadataRecord>, ApiError> {
    validate_alteration(entity, ops).map_err(|m| ApiError::new(ErrorCode::InvalidRequest, m))?;
    let existing = image.client_quotas.get(entity);
    let stored = |key: &String| existing.and_then(|k| k.get(key)).copied();
    Ok(ops
        .iter()
        .filter(|(key, value)| match value {
            // Setting what is stored, or removing what is not, changes nothing.
            Some(v) => stored(key) != Some(QuotaValue(*v)),
            None => stored(key).is_some(),
        })
        .map(|(key, value)| MetadataRecord::ClientQuota {
            entity: entity.clone(),
            key: key.clone(),
            value: value.map(QuotaValue),
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use strand_metadata::quotas::{PRODUCER_BYTE_RATE, USER};

    #[test]
    fn set_then_remove_and_a_missing_key_is_no_change() {
        let alice = QuotaEntity::new(vec![(USER.into(), Some("alice".into()))]).unwrap();
        let mut image = MetadataImage::default();
        let set = alter_client_quotas(&image, &alice, &[(PRODUCER_BYTE_RATE.into(), Some(1024.0))])
            .unwrap();
        for r in &set {
            image.apply(r);
        }
        assert_eq!(
            image.client_quotas[&alice][PRODUCER_BYTE_RATE],
            QuotaValue(1024.0)
        );
        let removed =
            alter_client_quotas(&image, &alice, &[(PRODUCER_BYTE_RATE.into(), None)]).unwrap();
        assert_eq!(removed.len(), 1);
        for r in &removed {
            image.apply(r);
        }
        assert!(image.client_quotas.is_empty());
        let again = alter_client_quotas(&image, &alice, &[(PRODUCER_BYTE_RATE.into(), None)]);
        assert_eq!(again.unwrap(), vec![]);
        for r in &set {
            image.apply(r);
        }
        let same =
            alter_client_quotas(&image, &alice, &[(PRODUCER_BYTE_RATE.into(), Some(1024.0))]);
        assert_eq!(same.unwrap(), vec![]);
        let bad = alter_client_quotas(&image, &alice, &[(PRODUCER_BYTE_RATE.into(), Some(-5.0))]);
        assert_eq!(bad.unwrap_err().code, ErrorCode::InvalidRequest);
    }
}
