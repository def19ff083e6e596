//! CreateAcls and DeleteAcls (Kafka's AclControlManager): a binding is
//! added once (creating one that exists succeeds and adds nothing), and a
//! removal names bindings by id (the broker matched the filters).

use super::common::ApiError;
use strand_metadata::image::MetadataImage;
use strand_metadata::records::{AclRecord, MetadataRecord};
use uuid::Uuid;

/// The record that adds `binding` (with `id`), or none when the same
/// binding exists.
pub fn create_acl(
    image: &MetadataImage,
    binding: &AclRecord,
    id: Uuid,
) -> Result<Vec<MetadataRecord>, ApiError> {
    if image.acls.values().any(|a| a.same_binding(binding)) {
        return Ok(vec![]);
    }
    Ok(vec![MetadataRecord::AccessControlEntry(AclRecord {
        id,
        ..binding.clone()
    })])
}

/// The records that remove those of `ids` that exist.
pub fn remove_acls(image: &MetadataImage, ids: &[Uuid]) -> Vec<MetadataRecord> {
    ids.iter()
        .filter(|id| image.acls.contains_key(id))
        .map(|id| MetadataRecord::RemoveAccessControlEntry { id: *id })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(name: &str) -> AclRecord {
        AclRecord {
            id: Uuid::nil(),
            resource_type: 2,
            resource_name: name.into(),
            pattern_type: 3,
            principal: "User:alice".into(),
            host: "*".into(),
            operation: 3,
            permission_type: 3,
        }
    }

    #[test]
    fn a_binding_is_added_once_and_removed_by_id() {
        let mut img = MetadataImage::default();
        let a = Uuid::from_u128(1);
        for r in create_acl(&img, &acl("t"), a).unwrap() {
            img.apply(&r);
        }
        assert_eq!(img.acls[&a].resource_name, "t");
        assert!(create_acl(&img, &acl("t"), Uuid::from_u128(2))
            .unwrap()
            .is_empty());
        assert_eq!(
            create_acl(&img, &acl("u"), Uuid::from_u128(3))
                .unwrap()
                .len(),
            1
        );
        let recs = remove_acls(&img, &[a, Uuid::from_u128(9)]);
        assert_eq!(recs.len(), 1);
        for r in recs {
            img.apply(&r);
        }
        assert!(img.acls.is_empty());
    }
}
