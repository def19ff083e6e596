//! Partition reassignment (KIP-455), as Kafka 4.4's KRaft controller does
//! it (ReplicationControlManager's alterPartitionReassignments and
//! PartitionReassignmentReplicas / PartitionReassignmentRevert).
//!
//! - A reassignment records its target in the partition: `replicas` becomes
//!   the target's replicas followed by the current replicas it drops
//!   (`removing_replicas`, ascending); the target's new ones are
//!   `adding_replicas`. Adding replicas fetch as followers outside the ISR;
//!   their leader adds them to the ISR once caught up (AlterPartition).
//! - Any partition change can complete the reassignment
//!   ([`super::replication::build_change`]): the removing replicas leave
//!   the replicas and the ISR, the leader moves off a removed replica, the
//!   leader epoch moves (fencing the removed ones), and their brokers
//!   delete their copies when they see the change.
//! - A new target while one is in flight is computed against the replicas
//!   in flight (the old target's and its removing ones), as Kafka does;
//!   when it adds or removes nothing new, the lists in flight stay.
//! - Cancelling (a null target) reverts: the adding replicas leave the
//!   replicas and the ISR; if that empties the ISR, the first remaining
//!   replica leads alone, which is an unclean election and refused unless
//!   the topic allows one.

use super::common::ApiError;
use super::placement::validate_manual_assignment;
use super::replication::{build_change, unclean_election_enabled, ChangeTarget, Election};
use strand_metadata::image::MetadataImage;
use strand_metadata::records::{MetadataRecord, PartitionRecord};
use strand_protocol::ErrorCode;
use strand_types::BrokerId;

/// A partition's reassignment as ListPartitionReassignments reports it.
pub use strand_metadata::controller_api::OngoingReassignment;

/// The replica sets for moving a partition whose replicas are `current` to
/// `target` (Kafka's PartitionReassignmentReplicas): the replicas (the
/// target's in its order, then the current ones it drops, ascending),
/// adding (ascending) and removing.
pub fn reassignment_replicas(
    current: &[BrokerId],
    target: &[BrokerId],
) -> (Vec<BrokerId>, Vec<BrokerId>, Vec<BrokerId>) {
    let mut removing: Vec<BrokerId> = current
        .iter()
        .copied()
        .filter(|r| !target.contains(r))
        .collect();
    removing.sort_unstable();
    removing.dedup();
    let mut adding: Vec<BrokerId> = target
        .iter()
        .copied()
        .filter(|r| !current.contains(r))
        .collect();
    adding.sort_unstable();
    adding.dedup();
    let replicas = target.iter().chain(&removing).copied().collect();
    (replicas, adding, removing)
}

fn invalid_assignment(message: String) -> ApiError {
    ApiError::new(ErrorCode::InvalidReplicaAssignment, message)
}

/// AlterPartitionReassignments for one partition: `target` Some(replicas,
/// as the wire carries them) starts or replaces a reassignment, None
/// cancels the one in flight. The records to write (none when nothing
/// changes). Errors as Kafka words them; NO_REASSIGNMENT_IN_PROGRESS
/// carries no message (Kafka's default text is sent as null).
pub fn alter_partition_reassignment(
    image: &MetadataImage,
    topic: &str,
    partition: i32,
    target: Option<&[i32]>,
) -> Result<Vec<MetadataRecord>, ApiError> {
    if !image.topics.contains_key(topic) {
        return Err(ApiError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("Unable to find a topic named {topic}."),
        ));
    }
    let Some(p) = image.partition(topic, partition) else {
        return Err(ApiError::new(
            ErrorCode::UnknownTopicOrPartition,
            format!("Unable to find partition {topic}:{partition}."),
        ));
    };
    let unclean_allowed = unclean_election_enabled(image, topic);
    let acceptable = |r: BrokerId| image.is_eligible_replica(p, r);
    let change = match target {
        None => {
            if !p.is_reassigning() {
                return Err(ApiError::new(ErrorCode::NoReassignmentInProgress, ""));
            }
            let (target, unclean) = revert(p)?;
            if unclean && !unclean_allowed {
                return Err(invalid_assignment(format!(
                    "Unable to revert partition assignment for {topic}:{partition} because it would require an unclean leader election."
                )));
            }
            let election = if unclean_allowed {
                Election::Unclean
            } else {
                Election::Online
            };
            build_change(p, target, election, acceptable)
        }
        Some(wire) => {
            let target = validate_manual_assignment(image, wire, None)?;
            let (replicas, adding, removing) = reassignment_replicas(&p.replicas, &target);
            let change_target = ChangeTarget {
                replicas,
                isr: p.isr.clone(),
                // Kafka sets the lists only when they are not empty: a new
                // target that adds (or removes) nothing new keeps the
                // lists in flight.
                adding: if adding.is_empty() {
                    p.adding_replicas.clone()
                } else {
                    adding
                },
                removing: if removing.is_empty() {
                    p.removing_replicas.clone()
                } else {
                    removing
                },
                assign_dir: None,
            };
            build_change(p, change_target, Election::Online, acceptable)
        }
    };
    Ok(change
        .map(MetadataRecord::PartitionChange)
        .into_iter()
        .collect())
}

/// The state a cancelled reassignment reverts to (Kafka's
/// PartitionReassignmentRevert): the replicas and ISR less the adding
/// replicas, in their order; an ISR left empty becomes the first replica
/// alone, an unclean election (the bool).
fn revert(p: &PartitionRecord) -> Result<(ChangeTarget, bool), ApiError> {
    let keep = |r: &BrokerId| !p.adding_replicas.contains(r);
    let replicas: Vec<BrokerId> = p.replicas.iter().copied().filter(keep).collect();
    let Some(&first) = replicas.first() else {
        return Err(invalid_assignment(
            "Invalid replica assignment: addingReplicas contains all replicas.".into(),
        ));
    };
    let isr: Vec<BrokerId> = p.isr.iter().copied().filter(keep).collect();
    let unclean = isr.is_empty();
    let target = ChangeTarget {
        isr: if unclean { vec![first] } else { isr },
        replicas,
        adding: vec![],
        removing: vec![],
        assign_dir: None,
    };
    Ok((target, unclean))
}

/// The reassignments in flight among `partitions` (every partition when
/// None), in topic and partition order. Unknown topics and partitions are
/// left out, as Kafka's controller does.
pub fn list_partition_reassignments(
    image: &MetadataImage,
    partitions: Option<&[(String, Vec<i32>)]>,
) -> Vec<OngoingReassignment> {
    let ongoing = |topic: &str, p: &PartitionRecord| OngoingReassignment {
        topic: topic.to_string(),
        partition: p.partition,
        replicas: p.replicas.clone(),
        adding: p.adding_replicas.clone(),
        removing: p.removing_replicas.clone(),
    };
    match partitions {
        None => image
            .topics
            .iter()
            .flat_map(|(name, t)| {
                t.partitions
                    .iter()
                    .filter(|p| p.is_reassigning())
                    .map(move |p| ongoing(name, p))
            })
            .collect(),
        Some(wanted) => wanted
            .iter()
            .flat_map(|(topic, parts)| {
                parts
                    .iter()
                    .filter_map(move |&i| image.partition(topic, i).map(|p| (topic, p)))
            })
            .filter(|(_, p)| p.is_reassigning())
            .map(|(topic, p)| ongoing(topic, p))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::replication::{alter_partition, handle_broker_fenced};
    use crate::manager::testutil::{add_topic, apply_all, b, ids, image_with_brokers};
    use std::collections::BTreeMap;
    use strand_metadata::controller_api::AlterPartitionRequest;
    use strand_types::LeaderEpoch;

    fn part(img: &MetadataImage, i: i32) -> &PartitionRecord {
        img.partition("t", i).expect("partition exists")
    }

    /// Applies a reassignment and returns the partition after it.
    fn reassign(img: &mut MetadataImage, i: i32, target: Option<&[i32]>) -> PartitionRecord {
        let recs = alter_partition_reassignment(img, "t", i, target).expect("accepted");
        apply_all(img, &recs);
        part(img, i).clone()
    }

    /// The leader of `i` adds `who` to the ISR, as a caught-up follower
    /// would be added. Returns the error code when refused.
    fn expand_isr(img: &mut MetadataImage, i: i32, who: &[i32]) -> Result<(), ErrorCode> {
        let p = part(img, i).clone();
        let leader = p.leader.expect("a leader");
        let mut new_isr = p.isr.clone();
        new_isr.extend(ids(who));
        let epochs: BTreeMap<BrokerId, _> = new_isr
            .iter()
            .map(|r| (*r, img.brokers[r].broker_epoch))
            .collect();
        let req = AlterPartitionRequest {
            broker_id: leader,
            broker_epoch: img.brokers[&leader].broker_epoch,
            topic_id: p.topic_id,
            partition: i,
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            new_isr,
            broker_epochs: epochs,
        };
        let (recs, _) = alter_partition(img, &req).map_err(|e| e.code)?;
        apply_all(img, &recs);
        Ok(())
    }

    #[test]
    fn replica_sets_as_kafka_orders_them() {
        // (current, target) -> (replicas, adding, removing)
        type Case = (&'static [i32], &'static [i32], [&'static [i32]; 3]);
        let cases: &[Case] = &[
            (&[1, 2, 3], &[2, 3, 4], [&[2, 3, 4, 1], &[4], &[1]]),
            (
                &[1, 2, 3],
                &[4, 5, 6],
                [&[4, 5, 6, 1, 2, 3], &[4, 5, 6], &[1, 2, 3]],
            ),
            (&[3, 1, 2], &[5, 4], [&[5, 4, 1, 2, 3], &[4, 5], &[1, 2, 3]]),
            (&[1, 2, 3], &[3, 2, 1], [&[3, 2, 1], &[], &[]]),
            (&[1, 2, 3], &[1], [&[1, 2, 3], &[], &[2, 3]]),
            (&[1], &[1, 3, 2], [&[1, 3, 2], &[2, 3], &[]]),
        ];
        for (i, (current, target, [replicas, adding, removing])) in cases.iter().enumerate() {
            let got = reassignment_replicas(&ids(current), &ids(target));
            assert_eq!(got, (ids(replicas), ids(adding), ids(removing)), "case {i}");
        }
    }

    /// {1,2,3} -> {2,3,4}: 4 is added outside the ISR; once the leader
    /// adds it to the ISR the reassignment completes, 1 is dropped, and
    /// the leader (1) moves to the first target replica in the ISR.
    #[test]
    fn a_move_completes_when_the_added_replica_joins_the_isr() {
        let mut img = image_with_brokers(&[1, 2, 3, 4]);
        add_topic(&mut img, "t", &[(&[1, 2, 3], &[1, 2, 3], 1)]);
        let p = reassign(&mut img, 0, Some(&[2, 3, 4]));
        assert_eq!(p.replicas, ids(&[2, 3, 4, 1]));
        assert_eq!(
            (p.adding_replicas.clone(), p.removing_replicas.clone()),
            (ids(&[4]), ids(&[1]))
        );
        assert_eq!((p.isr.clone(), p.leader), (ids(&[1, 2, 3]), Some(b(1))));
        // Nothing removed yet: the leader epoch stays.
        assert_eq!(p.leader_epoch, LeaderEpoch::ZERO);
        assert_eq!(
            list_partition_reassignments(&img, None),
            vec![OngoingReassignment {
                topic: "t".into(),
                partition: 0,
                replicas: ids(&[2, 3, 4, 1]),
                adding: ids(&[4]),
                removing: ids(&[1]),
            }]
        );
        // The same target again changes nothing.
        assert!(alter_partition_reassignment(&img, "t", 0, Some(&[2, 3, 4]))
            .unwrap()
            .is_empty());
        // The leader adds 4: complete, 1 gone, leadership to 2.
        expand_isr(&mut img, 0, &[4]).unwrap();
        let p = part(&img, 0);
        assert_eq!(p.replicas, ids(&[2, 3, 4]));
        assert_eq!(p.isr, ids(&[2, 3, 4]));
        assert!(!p.is_reassigning());
        assert_eq!(p.leader, Some(b(2)));
        assert_eq!(p.leader_epoch, LeaderEpoch::new(1));
        assert!(list_partition_reassignments(&img, None).is_empty());
    }

    /// A target that only drops replicas completes at once when the rest
    /// are in sync; the leader stays when it stays a replica, and the
    /// epoch still moves. A reorder changes the order alone.
    #[test]
    fn removals_and_reorders_complete_at_once() {
        let mut img = image_with_brokers(&[1, 2, 3]);
        add_topic(
            &mut img,
            "t",
            &[
                (&[1, 2, 3], &[1, 2, 3], 1),
                (&[1, 2, 3], &[1, 2, 3], 3),
                (&[1, 2, 3], &[1, 2, 3], 2),
                (&[1, 2, 3], &[1, 3], 1),
            ],
        );
        let p = reassign(&mut img, 0, Some(&[1, 2]));
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (ids(&[1, 2]), ids(&[1, 2]), Some(b(1)))
        );
        assert!(!p.is_reassigning());
        assert_eq!(p.leader_epoch, LeaderEpoch::new(1));
        let p = reassign(&mut img, 1, Some(&[2, 1]));
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (ids(&[2, 1]), ids(&[1, 2]), Some(b(2)))
        );
        let p = reassign(&mut img, 2, Some(&[3, 2, 1]));
        assert_eq!(
            (p.replicas.clone(), p.leader, p.leader_epoch),
            (ids(&[3, 2, 1]), Some(b(2)), LeaderEpoch::ZERO)
        );
        // Shrinking while a remaining replica (2) is out of sync waits
        // (Kafka 4.4's rule for moves that shrink the replica count).
        let p = reassign(&mut img, 3, Some(&[1, 2]));
        assert_eq!(
            (p.replicas.clone(), p.removing_replicas.clone()),
            (ids(&[1, 2, 3]), ids(&[3]))
        );
        assert!(p.is_reassigning());
    }

    /// A new target while one is in flight is computed against the
    /// replicas in flight; cancelling takes out the adding replicas.
    #[test]
    fn replace_and_cancel() {
        let mut img = image_with_brokers(&[1, 2, 3, 4, 5]);
        add_topic(&mut img, "t", &[(&[1, 2, 3], &[1, 2, 3], 1)]);
        reassign(&mut img, 0, Some(&[2, 3, 4]));
        let p = reassign(&mut img, 0, Some(&[2, 3, 5]));
        assert_eq!(p.replicas, ids(&[2, 3, 5, 1, 4]));
        assert_eq!(
            (p.adding_replicas.clone(), p.removing_replicas.clone()),
            (ids(&[5]), ids(&[1, 4]))
        );
        // The cancel drops the adding replica (5) only: 4, added for the
        // first target, stays a replica outside the ISR, as in Kafka.
        let p = reassign(&mut img, 0, None);
        assert_eq!(p.replicas, ids(&[2, 3, 1, 4]));
        assert!(!p.is_reassigning());
        assert_eq!((p.isr.clone(), p.leader), (ids(&[1, 2, 3]), Some(b(1))));
        assert_eq!(p.leader_epoch, LeaderEpoch::new(1), "a replica was removed");
        // Nothing in flight: cancelling again is refused, with no message.
        let e = alter_partition_reassignment(&img, "t", 0, None).unwrap_err();
        assert_eq!(
            (e.code, e.message.as_str()),
            (ErrorCode::NoReassignmentInProgress, "")
        );
    }

    /// A cancel that would leave no ISR member elects the first remaining
    /// replica alone: refused unless the topic allows unclean elections.
    #[test]
    fn a_cancel_that_needs_an_unclean_election() {
        let mut img = image_with_brokers(&[1, 2, 3]);
        add_topic(&mut img, "t", &[(&[1], &[1], 1)]);
        reassign(&mut img, 0, Some(&[1, 2, 3]));
        // 2 joins: the ISR is [1, 2]; 3 is still missing, so in flight.
        expand_isr(&mut img, 0, &[2]).unwrap();
        let recs = handle_broker_fenced(&img, b(1));
        apply_all(&mut img, &recs);
        let p = part(&img, 0).clone();
        assert_eq!((p.isr.clone(), p.leader), (ids(&[2]), Some(b(2))));
        let recs = crate::manager::replication::handle_broker_unfenced(&img, b(1));
        apply_all(&mut img, &recs);
        let e = alter_partition_reassignment(&img, "t", 0, None).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidReplicaAssignment);
        assert!(
            e.message
                .contains("would require an unclean leader election"),
            "{e:?}"
        );
        img.apply(&MetadataRecord::Config {
            resource: strand_metadata::records::ConfigResource::Topic,
            resource_name: "t".into(),
            name: "unclean.leader.election.enable".into(),
            value: Some("true".into()),
        });
        let p = reassign(&mut img, 0, None);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (ids(&[1]), ids(&[1]), Some(b(1)))
        );
    }

    #[test]
    fn refusals() {
        let mut img = image_with_brokers(&[1, 2, 3]);
        add_topic(&mut img, "t", &[(&[1, 2], &[1, 2], 1)]);
        let code = |topic: &str, i: i32, target: Option<&[i32]>| {
            alter_partition_reassignment(&img, topic, i, target)
                .map(|r| r.len())
                .map_err(|e| e.code)
        };
        use ErrorCode::*;
        assert_eq!(code("nope", 0, Some(&[1])), Err(UnknownTopicOrPartition));
        assert_eq!(code("t", 1, Some(&[1])), Err(UnknownTopicOrPartition));
        assert_eq!(code("t", -1, Some(&[1])), Err(UnknownTopicOrPartition));
        assert_eq!(code("t", 0, Some(&[])), Err(InvalidReplicaAssignment));
        assert_eq!(code("t", 0, Some(&[1, 1])), Err(InvalidReplicaAssignment));
        assert_eq!(code("t", 0, Some(&[1, 9])), Err(InvalidReplicaAssignment));
        assert_eq!(code("t", 0, Some(&[1, -1])), Err(InvalidReplicaAssignment));
        assert_eq!(code("t", 0, None), Err(NoReassignmentInProgress));
        // The same replicas in the same order: nothing to write.
        assert_eq!(code("t", 0, Some(&[1, 2])), Ok(0));
        // A fenced broker may be a target (it catches up when it returns).
        let recs = handle_broker_fenced(&img, b(3));
        apply_all(&mut img, &recs);
        let code = |target: &[i32]| {
            alter_partition_reassignment(&img, "t", 0, Some(target))
                .map(|r| r.len())
                .map_err(|e| e.code)
        };
        assert_eq!(code(&[1, 2, 3]), Ok(1));
    }

    /// The leader removed by a completed move hands over to the first
    /// target replica that is in the ISR and active; with none, the
    /// reassignment waits.
    #[test]
    fn completion_needs_an_isr_member_of_the_target() {
        let mut img = image_with_brokers(&[1, 2, 3, 4]);
        add_topic(&mut img, "t", &[(&[1], &[1], 1)]);
        let p = reassign(&mut img, 0, Some(&[2]));
        assert_eq!((p.replicas.clone(), p.leader), (ids(&[2, 1]), Some(b(1))));
        assert!(p.is_reassigning());
        expand_isr(&mut img, 0, &[2]).unwrap();
        let p = part(&img, 0);
        assert_eq!(
            (p.replicas.clone(), p.isr.clone(), p.leader),
            (ids(&[2]), ids(&[2]), Some(b(2)))
        );
    }
}
