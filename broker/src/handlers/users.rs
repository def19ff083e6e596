//! DescribeUserScramCredentials (from the metadata image) and
//! AlterUserScramCredentials (checked here, the keys derived from the
//! salted password here, then committed by the controller), as Kafka's
//! KRaft brokers and ScramControlManager answer them.

use crate::replica_manager::ReplicaManager;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use std::collections::BTreeSet;
use strand_metadata::controller_api::{ApiError, ScramOp, ScramUserOps};
use strand_metadata::image::MetadataImage;
use strand_metadata::records::ScramCredentialRecord;
use strand_protocol::ErrorCode;
use strand_security::scram::{Mechanism, ScramCredential, MAX_ITERATIONS, MIN_ITERATIONS};

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub fn describe_user_scram_credentials(
    broker: &ReplicaManager,
    req: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    let users: Option<Vec<String>> = req
        .users
        .map(|u| u.into_iter().map(|n| n.name.to_string()).collect());
    let results = describe(&broker.image(), users.as_deref())
        .into_iter()
        .map(|(user, r)| {
            let out = DescribeUserScramCredentialsResult::default().with_user(s(&user));
            match r {
                Ok(infos) => out.with_credential_infos(
                    infos
                        .into_iter()
                        .map(|(mechanism, iterations)| {
                            CredentialInfo::default()
                                .with_mechanism(mechanism)
                                .with_iterations(iterations)
                        })
                        .collect(),
                ),
                Err(e) => out
                    .with_error_code(e.code.code())
                    .with_error_message(Some(s(&e.message))),
            }
        })
        .collect();
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

/// Each user asked for (every user with a credential when none or no list
/// is given) with its (mechanism, iterations), or why not.
/// A user's credentials as DescribeUserScramCredentials lists them:
/// (mechanism, iterations).
type Described = Result<Vec<(i8, i32)>, ApiError>;

/// A user's answer to AlterUserScramCredentials.
type Altered = (String, Result<(), ApiError>);

fn describe(image: &MetadataImage, users: Option<&[String]>) -> Vec<(String, Described)> {
    let infos = |user: &str| -> Option<Vec<(i8, i32)>> {
        let creds = image.scram_credentials.get(user)?;
        Some(
            creds
                .values()
                .map(|c| (c.mechanism, c.iterations))
                .collect(),
        )
    };
    let users = match users {
        Some(u) if !u.is_empty() => u,
        _ => {
            return image
                .scram_credentials
                .keys()
                .filter_map(|u| Some((u.clone(), Ok(infos(u)?))))
                .collect()
        }
    };
    let duplicates: BTreeSet<&String> = users
        .iter()
        .enumerate()
        .filter(|(i, u)| users[..*i].contains(u))
        .map(|(_, u)| u)
        .collect();
    let mut seen = BTreeSet::new();
    users
        .iter()
        .filter(|u| seen.insert(u.as_str()))
        .map(|u| {
            let r = if duplicates.contains(u) {
                Err(ApiError::new(
                    ErrorCode::DuplicateResource,
                    format!("Cannot describe SCRAM credentials for the same user twice in a single request: {u}"),
                ))
            } else {
                infos(u).ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::ResourceNotFound,
                        format!("Attempt to describe a user credential that does not exist: {u}"),
                    )
                })
            };
            (u.clone(), r)
        })
        .collect()
}

pub async fn alter_user_scram_credentials(
    broker: &ReplicaManager,
    req: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    let deletions: Vec<(String, i8)> = req
        .deletions
        .iter()
        .map(|d| (d.name.to_string(), d.mechanism))
        .collect();
    let upsertions: Vec<Upsertion> = req
        .upsertions
        .iter()
        .map(|u| Upsertion {
            name: u.name.to_string(),
            mechanism: u.mechanism,
            iterations: u.iterations,
            salt: u.salt.to_vec(),
            salted_password: u.salted_password.to_vec(),
        })
        .collect();
    let (users, mut refused) = plan(&deletions, &upsertions);
    let names: Vec<String> = users.iter().map(|(u, _)| u.clone()).collect();
    let committed = broker.controller.alter_user_scram_credentials(users).await;
    let mut results: Vec<Altered> = names.into_iter().zip(committed).collect();
    results.append(&mut refused);
    AlterUserScramCredentialsResponse::default().with_results(
        results
            .into_iter()
            .map(|(user, r)| {
                let out = AlterUserScramCredentialsResult::default().with_user(s(&user));
                match r {
                    Ok(()) => out,
                    Err(e) => out
                        .with_error_code(e.code.code())
                        .with_error_message(Some(s(&e.message))),
                }
            })
            .collect(),
    )
}

struct Upsertion {
    name: String,
    mechanism: i8,
    iterations: i32,
    salt: Vec<u8>,
    salted_password: Vec<u8>,
}

/// Splits a request into each user's changes for the controller and the
/// users refused here (Kafka's checks that need no image): a user named
/// twice for one mechanism, an unknown mechanism, iterations out of range,
/// an empty name.
fn plan(deletions: &[(String, i8)], upsertions: &[Upsertion]) -> (Vec<ScramUserOps>, Vec<Altered>) {
    let mut order: Vec<String> = Vec::new();
    let mut ops: std::collections::BTreeMap<String, Vec<ScramOp>> = Default::default();
    let mut errors: std::collections::BTreeMap<String, ApiError> = Default::default();
    let mut seen: BTreeSet<(String, i8)> = BTreeSet::new();
    let mut note = |name: &str, mechanism: i8, op: Result<ScramOp, ApiError>| {
        if !order.iter().any(|u| u == name) {
            order.push(name.to_string());
        }
        if errors.contains_key(name) {
            return;
        }
        let op = if !seen.insert((name.to_string(), mechanism)) {
            Err(ApiError::new(
                ErrorCode::DuplicateResource,
                "A user credential cannot be altered twice in the same request",
            ))
        } else {
            op
        };
        match op {
            Ok(op) => ops.entry(name.to_string()).or_default().push(op),
            Err(e) => {
                errors.insert(name.to_string(), e);
            }
        }
    };
    let unknown = || {
        ApiError::new(
            ErrorCode::UnsupportedSaslMechanism,
            "Unknown SCRAM mechanism",
        )
    };
    let empty = || {
        ApiError::new(
            ErrorCode::UnacceptableCredential,
            "Username must not be empty",
        )
    };
    for (name, mechanism) in deletions {
        let op = if name.is_empty() {
            Err(empty())
        } else if Mechanism::from_wire(*mechanism).is_none() {
            Err(unknown())
        } else {
            Ok(ScramOp::Delete {
                mechanism: *mechanism,
            })
        };
        note(name, *mechanism, op);
    }
    for u in upsertions {
        let op = match Mechanism::from_wire(u.mechanism) {
            _ if u.name.is_empty() => Err(empty()),
            None => Err(unknown()),
            Some(_) if u.iterations < MIN_ITERATIONS as i32 => Err(ApiError::new(
                ErrorCode::UnacceptableCredential,
                "Too few iterations",
            )),
            Some(_) if u.iterations > MAX_ITERATIONS as i32 => Err(ApiError::new(
                ErrorCode::UnacceptableCredential,
                "Too many iterations",
            )),
            Some(m) => {
                let c = ScramCredential::from_salted_password(
                    m,
                    &u.salted_password,
                    &u.salt,
                    u.iterations as u32,
                );
                Ok(ScramOp::Upsert(ScramCredentialRecord {
                    name: u.name.clone(),
                    mechanism: u.mechanism,
                    salt: c.salt,
                    stored_key: c.stored_key,
                    server_key: c.server_key,
                    iterations: u.iterations,
                }))
            }
        };
        note(&u.name, u.mechanism, op);
    }
    let mut to_controller = Vec::new();
    let mut refused = Vec::new();
    for name in order {
        match errors.remove(&name) {
            Some(e) => refused.push((name, Err(e))),
            None => to_controller.push((name.clone(), ops.remove(&name).unwrap_or_default())),
        }
    }
    (to_controller, refused)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn up(name: &str, mechanism: i8, iterations: i32) -> Upsertion {
        Upsertion {
            name: name.into(),
            mechanism,
            iterations,
            salt: b"salt".to_vec(),
            salted_password: vec![7; 32],
        }
    }

    #[test]
    fn alterations_are_checked_per_user() {
        let (ok, refused) = plan(
            &[("dave".into(), 1), ("erin".into(), 3), ("".into(), 1)],
            &[
                up("alice", 1, 4096),
                up("alice", 2, 8192),
                up("bob", 1, 4095),
                up("carol", 2, 16385),
                up("dave", 1, 4096),
                up("frank", 0, 4096),
            ],
        );
        let ok_users: Vec<&str> = ok.iter().map(|(u, _)| u.as_str()).collect();
        assert_eq!(ok_users, ["alice"]);
        assert_eq!(ok[0].1.len(), 2);
        let refused: Vec<(&str, ErrorCode, &str)> = refused
            .iter()
            .map(|(u, r)| {
                let e = r.as_ref().unwrap_err();
                (u.as_str(), e.code, e.message.as_str())
            })
            .collect();
        assert_eq!(
            refused,
            [
                (
                    "dave",
                    ErrorCode::DuplicateResource,
                    "A user credential cannot be altered twice in the same request"
                ),
                (
                    "erin",
                    ErrorCode::UnsupportedSaslMechanism,
                    "Unknown SCRAM mechanism"
                ),
                (
                    "",
                    ErrorCode::UnacceptableCredential,
                    "Username must not be empty"
                ),
                (
                    "bob",
                    ErrorCode::UnacceptableCredential,
                    "Too few iterations"
                ),
                (
                    "carol",
                    ErrorCode::UnacceptableCredential,
                    "Too many iterations"
                ),
                (
                    "frank",
                    ErrorCode::UnsupportedSaslMechanism,
                    "Unknown SCRAM mechanism"
                ),
            ]
        );
        // The stored keys are RFC 5802's from the salted password, never it.
        let ScramOp::Upsert(c) = &ok[0].1[0] else {
            panic!()
        };
        let expected =
            ScramCredential::from_salted_password(Mechanism::Sha256, &[7; 32], b"salt", 4096);
        assert_eq!(
            (c.stored_key.clone(), c.server_key.clone()),
            (expected.stored_key, expected.server_key)
        );
    }

    #[test]
    fn descriptions() {
        let mut image = MetadataImage::default();
        for (name, m) in [("alice", 1), ("alice", 2), ("bob", 2)] {
            image.apply(
                &strand_metadata::records::MetadataRecord::UserScramCredential(
                    ScramCredentialRecord {
                        name: name.into(),
                        mechanism: m,
                        salt: vec![],
                        stored_key: vec![],
                        server_key: vec![],
                        iterations: 4096 * m as i32,
                    },
                ),
            );
        }
        let all = describe(&image, None);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].1.as_ref().unwrap(), &vec![(1, 4096), (2, 8192)]);
        assert_eq!(describe(&image, Some(&[])).len(), 2);
        let some = describe(
            &image,
            Some(&["bob".into(), "zed".into(), "alice".into(), "alice".into()]),
        );
        let codes: Vec<(&str, Option<ErrorCode>)> = some
            .iter()
            .map(|(u, r)| (u.as_str(), r.as_ref().err().map(|e| e.code)))
            .collect();
        assert_eq!(
            codes,
            [
                ("bob", None),
                ("zed", Some(ErrorCode::ResourceNotFound)),
                ("alice", Some(ErrorCode::DuplicateResource))
            ]
        );
    }
}
