//! AlterUserScramCredentials (Kafka's ScramControlManager): a user's
//! deletions and upsertions apply together or not at all. The broker has
//! already checked what needs no image (mechanisms, iterations, a user
//! named twice for one mechanism) and derived the keys; here a deletion
//! must name a credential that exists.

use super::common::ApiError;
use strand_metadata::controller_api::ScramOp;
use strand_metadata::image::MetadataImage;
use strand_metadata::records::MetadataRecord;
use strand_protocol::ErrorCode;

pub fn alter_user_scram_credentials(
    image: &MetadataImage,
    name: &str,
    ops: &[ScramOp],
) -> Result<Vec<MetadataRecord>, ApiError> {
    let existing = image.scram_credentials.get(name);
    let mut records = Vec::with_capacity(ops.len());
    for op in ops {
        match op {
            ScramOp::Delete { mechanism } => {
                if !existing.is_some_and(|m| m.contains_key(mechanism)) {
                    return Err(ApiError::new(
                        ErrorCode::ResourceNotFound,
                        "Attempt to delete a user credential that does not exist",
                    ));
                }
                records.push(MetadataRecord::RemoveUserScramCredential {
                    name: name.to_string(),
                    mechanism: *mechanism,
                });
            }
            ScramOp::Upsert(c) => {
                debug_assert_eq!(c.name, name, "an upsertion is filed under its user");
                records.push(MetadataRecord::UserScramCredential(c.clone()));
            }
        }
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use strand_metadata::records::ScramCredentialRecord;

    fn cred(name: &str, mechanism: i8) -> ScramCredentialRecord {
        ScramCredentialRecord {
            name: name.into(),
            mechanism,
            salt: vec![1],
            stored_key: vec![2],
            server_key: vec![3],
            iterations: 4096,
        }
    }

    #[test]
    fn deletions_need_a_credential_and_a_users_changes_go_together() {
        let mut img = MetadataImage::default();
        let up = |n, m| ScramOp::Upsert(cred(n, m));
        let recs =
            alter_user_scram_credentials(&img, "alice", &[up("alice", 1), up("alice", 2)]).unwrap();
        for r in &recs {
            img.apply(r);
        }
        assert_eq!(img.scram_credentials["alice"].len(), 2);
        // A deletion of a missing credential fails the user's whole change.
        let err = alter_user_scram_credentials(
            &img,
            "bob",
            &[up("bob", 1), ScramOp::Delete { mechanism: 2 }],
        )
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::ResourceNotFound);
        let recs = alter_user_scram_credentials(
            &img,
            "alice",
            &[
                ScramOp::Delete { mechanism: 1 },
                ScramOp::Delete { mechanism: 2 },
            ],
        )
        .unwrap();
        for r in &recs {
            img.apply(r);
        }
        assert!(
            img.scram_credentials.is_empty(),
            "a user without credentials is gone"
        );
        let err = alter_user_scram_credentials(&img, "alice", &[ScramOp::Delete { mechanism: 1 }])
            .unwrap_err();
        assert_eq!(
            err.message,
            "Attempt to delete a user credential that does not exist"
        );
    }
}
