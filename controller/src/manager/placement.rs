//! Replica placement (Kafka's StripedReplicaPlacer, rack-alternating) and the
//! checks on manual replica assignments.
//!
//! Usable brokers are the registered ones not in controlled shutdown; fenced
//! brokers are usable as followers (they join the ISR once unfenced) but never
//! placed first, so every new partition starts with an unfenced leader. The
//! brokers are interleaved rack by rack (r0b0, r1b0, r2b0, r0b1, ...) after
//! rotating the rack order and each rack's brokers by the caller's random
//! `start`; leaders stripe over the unfenced brokers of that list, and each
//! follower is the next broker of the list on a rack the partition does not
//! use yet (unfenced before fenced), falling back to used racks only when
//! every rack holds a replica.

use super::common::ApiError;
use std::collections::BTreeMap;
use strand_metadata::image::MetadataImage;
use strand_protocol::ErrorCode;
use strand_types::BrokerId;

/// A broker replicas may be placed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsableBroker {
    pub id: BrokerId,
    pub rack: Option<String>,
    pub fenced: bool,
}

/// The image's registered brokers that are not in controlled shutdown, by id.
pub fn usable_brokers(image: &MetadataImage) -> Vec<UsableBroker> {
    image
        .brokers
        .values()
        .filter(|b| !b.in_controlled_shutdown)
        .map(|b| UsableBroker {
            id: b.broker_id,
            rack: b.rack.clone(),
            fenced: b.fenced,
        })
        .collect()
}

fn invalid_rf(msg: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidReplicationFactor, msg)
}

/// Places `partitions` partitions of `replication_factor` replicas on the
/// image's usable brokers. `start` is the caller's randomness.
pub fn place(
    image: &MetadataImage,
    partitions: i32,
    replication_factor: i16,
    start: usize,
) -> Result<Vec<Vec<BrokerId>>, ApiError> {
    place_on(
        &usable_brokers(image),
        partitions,
        replication_factor,
        start,
    )
}

/// The rack-alternating broker list: racks (sorted, `None` first) rotated by
/// `start`, each rack's brokers (by id) rotated by `start`, interleaved.
fn rack_alternating(brokers: &[UsableBroker], start: usize) -> Vec<&UsableBroker> {
    let mut racks: BTreeMap<Option<&str>, Vec<&UsableBroker>> = BTreeMap::new();
    for b in brokers {
        racks.entry(b.rack.as_deref()).or_default().push(b);
    }
    let mut racks: Vec<Vec<&UsableBroker>> = racks.into_values().collect();
    for r in &mut racks {
        r.sort_by_key(|b| b.id);
        let n = r.len();
        r.rotate_left(start % n);
    }
    let n = racks.len();
    racks.rotate_left(start % n.max(1));
    let longest = racks.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest)
        .flat_map(|i| racks.iter().filter_map(move |r| r.get(i).copied()))
        .collect()
}

/// The placement core over an explicit broker list.
pub fn place_on(
    brokers: &[UsableBroker],
    partitions: i32,
    replication_factor: i16,
    start: usize,
) -> Result<Vec<Vec<BrokerId>>, ApiError> {
    if replication_factor <= 0 {
        return Err(invalid_rf(format!(
            "Invalid replication factor {replication_factor}: the replication factor must be positive."
        )));
    }
    let rf = replication_factor as usize;
    if rf > brokers.len() {
        return Err(invalid_rf(format!(
            // Kafka 4.4's words (it can also cordon log directories, KIP-1066).
            "Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only {} broker(s) are registered or some brokers have all their log directories cordoned.",
            brokers.len()
        )));
    }
    let list = rack_alternating(brokers, start);
    let unfenced: Vec<usize> = (0..list.len()).filter(|&i| !list[i].fenced).collect();
    if unfenced.is_empty() {
        return Err(invalid_rf(format!(
            "Unable to replicate the partition {rf} time(s): All brokers are currently fenced."
        )));
    }
    let n = list.len();
    let mut out = Vec::with_capacity(partitions.max(0) as usize);
    for k in 0..partitions.max(0) as usize {
        let leader_pos = unfenced[k % unfenced.len()];
        let mut chosen = vec![leader_pos];
        // Vary the followers from one round over the leaders to the next.
        let shift = (k / unfenced.len()) % (n - 1).max(1);
        let mut cursor = leader_pos + 1 + shift;
        while chosen.len() < rf {
            let used_racks: Vec<Option<&str>> =
                chosen.iter().map(|&i| list[i].rack.as_deref()).collect();
            let tier = |i: usize| {
                let new_rack = !used_racks.contains(&list[i].rack.as_deref());
                match (new_rack, list[i].fenced) {
                    (true, false) => 0,
                    (true, true) => 1,
                    (false, false) => 2,
                    (false, true) => 3,
                }
            };
            let pick = (0..n)
                .map(|j| (cursor + j) % n)
                .filter(|i| !chosen.contains(i))
                .min_by_key(|&i| tier(i))
                .expect("rf <= brokers");
            chosen.push(pick);
            cursor = pick + 1;
        }
        out.push(chosen.into_iter().map(|i| list[i].id).collect());
    }
    Ok(out)
}

fn invalid_assignment(msg: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidReplicaAssignment, msg)
}

/// Kafka's checks on one manual partition assignment: not empty, registered
/// brokers only, no broker twice, and `replication_factor` replicas if given.
/// `replicas` are the request's broker ids as the wire carries them (a
/// negative one is not registered); once valid, they are returned as
/// `BrokerId`s.
pub fn validate_manual_assignment(
    image: &MetadataImage,
    replicas: &[i32],
    replication_factor: Option<usize>,
) -> Result<Vec<BrokerId>, ApiError> {
    if replicas.is_empty() {
        return Err(invalid_assignment(
            "The manual partition assignment includes an empty replica list.".into(),
        ));
    }
    let mut sorted = replicas.to_vec();
    sorted.sort();
    for (i, b) in sorted.iter().enumerate() {
        if !BrokerId::from_wire(*b).is_some_and(|id| image.brokers.contains_key(&id)) {
            return Err(invalid_assignment(format!("The manual partition assignment includes broker {b}, but no such broker is registered.")));
        }
        if i > 0 && sorted[i - 1] == *b {
            return Err(invalid_assignment(format!(
                "The manual partition assignment includes the broker {b} more than once."
            )));
        }
    }
    if let Some(rf) = replication_factor {
        if replicas.len() != rf {
            return Err(invalid_assignment(format!("The manual partition assignment includes a partition with {} replica(s), but this is not consistent with previous partitions, which have {rf} replica(s).", replicas.len())));
        }
    }
    Ok(replicas
        .iter()
        .map(|&r| BrokerId::from_wire(r).expect("checked above: a registered broker's id"))
        .collect())
}

/// Validates the manual assignments of partitions `first..`: ids consecutive
/// from `first` (in any order), each assignment valid, all of one replication
/// factor (`replication_factor` if given, else the first one's). Returns the
/// replica lists in partition order.
pub fn validate_assignments(
    image: &MetadataImage,
    assignments: &[(i32, Vec<i32>)],
    first: i32,
    replication_factor: Option<usize>,
) -> Result<Vec<Vec<BrokerId>>, ApiError> {
    let mut sorted: Vec<_> = assignments.to_vec();
    sorted.sort_by_key(|(p, _)| *p);
    let mut rf = replication_factor;
    let mut out = Vec::with_capacity(sorted.len());
    for (i, (p, replicas)) in sorted.into_iter().enumerate() {
        if p != first + i as i32 {
            return Err(invalid_assignment(
                "Partitions should be a consecutive 0-based integer sequence".into(),
            ));
        }
        let replicas = validate_manual_assignment(image, &replicas, rf)?;
        rf = Some(replicas.len());
        out.push(replicas);
    }
    Ok(out)
}

#[cfg(test)]
#[allow(clippy::type_complexity)]
mod tests {
    use super::*;
    use crate::manager::testutil::{apply_all, b, be, broker, ids, image_with_brokers};
    use std::collections::BTreeSet;
    use strand_metadata::records::MetadataRecord;

    /// (id, rack, fenced)
    fn brokers(spec: &[(i32, Option<&str>, bool)]) -> Vec<UsableBroker> {
        spec.iter()
            .map(|(id, rack, fenced)| UsableBroker {
                id: b(*id),
                rack: rack.map(String::from),
                fenced: *fenced,
            })
            .collect()
    }

    #[test]
    fn exact_assignments() {
        let plain = [(1, None, false), (2, None, false), (3, None, false)];
        let racked = [
            (1, Some("a"), false),
            (2, Some("a"), false),
            (3, Some("b"), false),
            (4, Some("b"), false),
        ];
        let fenced_first = [(1, None, true), (2, None, false), (3, None, false)];
        type Case<'a> = (
            &'a [(i32, Option<&'a str>, bool)],
            i32,
            i16,
            usize,
            Vec<Vec<i32>>,
        );
        let cases: Vec<Case> = vec![
            (&plain, 3, 1, 0, vec![vec![1], vec![2], vec![3]]),
            (
                &plain,
                4,
                2,
                0,
                vec![vec![1, 2], vec![2, 3], vec![3, 1], vec![1, 3]],
            ),
            (
                &plain,
                3,
                3,
                1,
                vec![vec![2, 3, 1], vec![3, 1, 2], vec![1, 2, 3]],
            ),
            // Racks alternate: every partition spans both racks.
            (
                &racked,
                4,
                2,
                0,
                vec![vec![1, 3], vec![3, 2], vec![2, 4], vec![4, 1]],
            ),
            // A fenced broker is never a leader, and a follower only when
            // the unfenced ones do not suffice.
            (&fenced_first, 2, 2, 0, vec![vec![2, 3], vec![3, 2]]),
            (&fenced_first, 2, 3, 0, vec![vec![2, 3, 1], vec![3, 2, 1]]),
        ];
        for (i, (spec, parts, rf, start, want)) in cases.into_iter().enumerate() {
            let want: Vec<Vec<BrokerId>> = want.iter().map(|r| ids(r)).collect();
            assert_eq!(
                place_on(&brokers(spec), parts, rf, start).unwrap(),
                want,
                "case {i}"
            );
        }
    }

    #[test]
    fn errors() {
        let one = [(1, None, false)];
        let all_fenced = [(1, None, true), (2, None, true)];
        let cases: &[(&[(i32, Option<&str>, bool)], i16)] =
            &[(&one, 0), (&one, -1), (&one, 2), (&all_fenced, 1), (&[], 1)];
        for (spec, rf) in cases {
            assert_eq!(
                place_on(&brokers(spec), 3, *rf, 0).unwrap_err().code,
                ErrorCode::InvalidReplicationFactor,
                "{spec:?} rf {rf}"
            );
        }
    }

    /// Properties over many shapes and starts: distinct replicas, unfenced
    /// leaders, maximal rack spread, balanced leaders.
    #[test]
    fn properties() {
        let racks = [None, Some("a"), Some("b"), Some("c")];
        for n in 1..=7 {
            for nracks in 0..=3usize {
                for fenced in 0..n.min(3) {
                    let spec: Vec<UsableBroker> = (0..n)
                        .map(|i| UsableBroker {
                            id: b(10 + i as i32),
                            rack: if nracks == 0 {
                                None
                            } else {
                                racks[1 + i % nracks].map(String::from)
                            },
                            fenced: i < fenced,
                        })
                        .collect();
                    let distinct_racks: BTreeSet<_> = spec.iter().map(|b| &b.rack).collect();
                    let unfenced = n - fenced;
                    for rf in 1..=n as i16 {
                        for start in 0..5 {
                            let parts = (unfenced * 3) as i32;
                            let got = place_on(&spec, parts, rf, start).unwrap();
                            assert_eq!(got.len(), parts as usize);
                            let mut leaders = BTreeMap::new();
                            for r in &got {
                                assert_eq!(r.len(), rf as usize);
                                let set: BTreeSet<_> = r.iter().collect();
                                assert_eq!(set.len(), r.len(), "duplicate in {r:?}");
                                let leader = spec.iter().find(|b| b.id == r[0]).unwrap();
                                assert!(!leader.fenced, "fenced leader in {r:?}");
                                *leaders.entry(r[0]).or_insert(0) += 1;
                                let used: BTreeSet<_> = r
                                    .iter()
                                    .map(|id| &spec.iter().find(|b| b.id == *id).unwrap().rack)
                                    .collect();
                                assert_eq!(
                                    used.len(),
                                    distinct_racks.len().min(rf as usize),
                                    "rack spread of {r:?}"
                                );
                            }
                            assert_eq!(leaders.len(), unfenced);
                            assert!(leaders.values().all(|&c| c == 3), "{leaders:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn usable_skips_controlled_shutdown() {
        let mut img = image_with_brokers(&[1, 2]);
        apply_all(
            &mut img,
            &[
                MetadataRecord::RegisterBroker(broker(3, Some("r"), true)),
                MetadataRecord::BrokerControlledShutdown {
                    broker_id: b(2),
                    broker_epoch: be(102),
                },
            ],
        );
        assert_eq!(
            usable_brokers(&img),
            vec![
                UsableBroker {
                    id: b(1),
                    rack: None,
                    fenced: false
                },
                UsableBroker {
                    id: b(3),
                    rack: Some("r".into()),
                    fenced: true
                },
            ]
        );
    }

    #[test]
    fn manual_assignment_table() {
        let img = image_with_brokers(&[1, 2, 3]);
        let cases: Vec<(
            Vec<(i32, Vec<i32>)>,
            i32,
            Option<usize>,
            Result<Vec<Vec<i32>>, ErrorCode>,
        )> = vec![
            (
                vec![(1, vec![2, 1]), (0, vec![1, 2])],
                0,
                None,
                Ok(vec![vec![1, 2], vec![2, 1]]),
            ),
            (vec![(3, vec![3])], 3, Some(1), Ok(vec![vec![3]])),
            (
                vec![(0, vec![])],
                0,
                None,
                Err(ErrorCode::InvalidReplicaAssignment),
            ),
            (
                vec![(0, vec![1, 9])],
                0,
                None,
                Err(ErrorCode::InvalidReplicaAssignment),
            ),
            (
                vec![(0, vec![1, 1])],
                0,
                None,
                Err(ErrorCode::InvalidReplicaAssignment),
            ),
            // The request's ids are any integers: a negative one is no
            // registered broker.
            (
                vec![(0, vec![1, -1])],
                0,
                None,
                Err(ErrorCode::InvalidReplicaAssignment),
            ),
            (
                vec![(0, vec![1]), (1, vec![1, 2])],
                0,
                None,
                Err(ErrorCode::InvalidReplicaAssignment),
            ),
            (
                vec![(0, vec![1]), (2, vec![2])],
                0,
                None,
                Err(ErrorCode::InvalidReplicaAssignment),
            ),
            (
                vec![(1, vec![1])],
                0,
                None,
                Err(ErrorCode::InvalidReplicaAssignment),
            ),
            (
                vec![(3, vec![1, 2])],
                3,
                Some(1),
                Err(ErrorCode::InvalidReplicaAssignment),
            ),
        ];
        for (i, (a, first, rf, want)) in cases.into_iter().enumerate() {
            let want = want.map(|sets| sets.iter().map(|r| ids(r)).collect::<Vec<_>>());
            assert_eq!(
                validate_assignments(&img, &a, first, rf).map_err(|e| e.code),
                want,
                "case {i}"
            );
        }
        assert_eq!(
            validate_manual_assignment(&img, &[2, -1], None)
                .unwrap_err()
                .message,
            "The manual partition assignment includes broker -1, but no such broker is registered."
        );
    }
}
