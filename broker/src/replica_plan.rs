//! The replica manager's decision, as a pure function: from the metadata
//! image and what this broker hosts now, the changes that bring it in line
//! (Kafka's `TopicsDelta.localChanges`: partitions to delete, to open, to
//! lead and to follow). [`crate::replica_manager::ReplicaManager`] carries
//! the plan out (files, locks, fetchers, listeners); the simulation carries
//! out the same plan on its in-memory brokers.

use std::collections::BTreeMap;
use strand_metadata::image::MetadataImage;
use strand_metadata::records::ConfigMap;
use strand_partition::{PartitionSettings, ReplicaState};
use strand_types::{BrokerId, TopicPartition};
use uuid::Uuid;

/// A partition the image assigns to this broker.
#[derive(Debug, Clone)]
pub struct Assignment {
    pub topic_id: Uuid,
    /// The partition's registration as the image has it.
    pub replica: ReplicaState,
    pub settings: PartitionSettings,
}

impl Assignment {
    /// What this broker's replica does under the registration.
    pub fn role(&self, me: BrokerId) -> Role {
        match self.replica.leader {
            Some(l) if l == me => Role::Leader,
            Some(l) => Role::Follower(l),
            None => Role::Offline,
        }
    }
}

/// This broker's part in a partition it hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Leader,
    /// Fetches from this leader.
    Follower(BrokerId),
    /// No leader anywhere: serve nothing, fetch nothing.
    Offline,
}

/// Why a hosted partition goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteReason {
    /// The topic (or this partition) is gone from the image.
    Deleted,
    /// The partition is still there but no longer assigned to this broker.
    Reassigned,
    /// A topic of the same name with another id replaced it: the hosted
    /// log belongs to the old topic.
    Recreated,
}

/// The changes that bring this broker in line with the image, in the order
/// the executor applies them: deletes, forgotten failures, opens, then the
/// registration of every assigned partition it hosts (which leads or
/// follows as [`Assignment::role`] says).
#[derive(Debug, Clone, Default)]
pub struct LocalChanges {
    pub deletes: Vec<(TopicPartition, DeleteReason)>,
    /// Partitions whose log failed to open that need not be retried as
    /// failed any more (no longer assigned, or assigned under another topic
    /// id): a later plan opens them afresh if they are assigned.
    pub forget_failed: Vec<TopicPartition>,
    /// Partitions to open (creating their directory when missing).
    pub opens: Vec<TopicPartition>,
    /// Every partition the image assigns here, failed ones included (the
    /// executor registers only those it hosts).
    pub assigned: BTreeMap<TopicPartition, Assignment>,
}

impl LocalChanges {
    /// True when nothing is deleted, forgotten or opened (registrations
    /// and settings may still change).
    pub fn is_steady(&self) -> bool {
        self.deletes.is_empty() && self.forget_failed.is_empty() && self.opens.is_empty()
    }

    /// The leaders this broker follows, with the partitions it fetches from
    /// each, among those it hosts after the plan is carried out.
    pub fn follows(&self, me: BrokerId) -> BTreeMap<BrokerId, Vec<TopicPartition>> {
        let mut by_leader: BTreeMap<BrokerId, Vec<TopicPartition>> = BTreeMap::new();
        for (tp, a) in &self.assigned {
            if let Role::Follower(leader) = a.role(me) {
                by_leader.entry(leader).or_default().push(tp.clone());
            }
        }
        by_leader
    }
}

/// Plans what `me` must do to host exactly the partitions `image` assigns
/// to it. `hosted`: the partitions open here, with the topic id each was
/// opened for; `failed`: the partitions whose log could not be opened, with
/// the topic id tried (not retried until the topic id changes or a restart:
/// a failing disk is not hammered); `settings`: a topic's partition
/// settings from its config overrides.
pub fn local_changes(
    image: &MetadataImage,
    me: BrokerId,
    hosted: &BTreeMap<TopicPartition, Uuid>,
    failed: &BTreeMap<TopicPartition, Uuid>,
    settings: &dyn Fn(&ConfigMap) -> PartitionSettings,
) -> LocalChanges {
    let mut assigned = BTreeMap::new();
    for (name, topic) in &image.topics {
        let mut topic_settings = None;
        for p in &topic.partitions {
            if !p.replicas.contains(&me) {
                continue;
            }
            let settings = topic_settings
                .get_or_insert_with(|| settings(&topic.configs))
                .clone();
            let replica = ReplicaState {
                leader_epoch: p.leader_epoch,
                partition_epoch: p.partition_epoch,
                replicas: p.replicas.clone(),
                isr: p.isr.clone(),
                leader: p.leader,
                metadata_offset: image.applied,
            };
            assigned.insert(
                TopicPartition::new(name.as_str(), p.partition),
                Assignment {
                    topic_id: topic.topic_id,
                    replica,
                    settings,
                },
            );
        }
    }
    let mut changes = LocalChanges::default();
    for (tp, &id) in hosted {
        let reason = match assigned.get(tp) {
            Some(a) if a.topic_id == id => continue,
            Some(_) => DeleteReason::Recreated,
            None => match image.topics.get(&*tp.topic) {
                Some(t)
                    if t.topic_id == id
                        && t.partitions.iter().any(|p| p.partition == tp.partition) =>
                {
                    DeleteReason::Reassigned
                }
                Some(t) if t.topic_id != id => DeleteReason::Recreated,
                _ => DeleteReason::Deleted,
            },
        };
        changes.deletes.push((tp.clone(), reason));
    }
    for (tp, &id) in failed {
        if assigned.get(tp).is_none_or(|a| a.topic_id != id) {
            changes.forget_failed.push(tp.clone());
        }
    }
    for (tp, a) in &assigned {
        let kept = hosted.get(tp) == Some(&a.topic_id);
        let failed_here = failed.get(tp) == Some(&a.topic_id);
        if !kept && !failed_here {
            changes.opens.push(tp.clone());
        }
    }
    changes.assigned = assigned;
    changes
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use strand_log::LogConfig;
    use strand_metadata::image::TopicImage;
    use strand_metadata::records::PartitionRecord;
    use strand_types::{LeaderEpoch, PartitionEpoch};

    const ME: BrokerId = BrokerId::new(1);

    fn settings(configs: &ConfigMap) -> PartitionSettings {
        PartitionSettings {
            log: LogConfig::default(),
            max_message_bytes: 1 << 20,
            log_append_time: false,
            min_insync_replicas: configs
                .get("min.insync.replicas")
                .and_then(|v| v.parse().ok())
                .unwrap_or(1),
            compacted: false,
            cleaner: Default::default(),
            timestamp_before_max_ms: i64::MAX,
            timestamp_after_max_ms: i64::MAX,
            acks: Default::default(),
            compression: None,
        }
    }

    fn id(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn tp(topic: &str, partition: i32) -> TopicPartition {
        TopicPartition::new(topic, partition)
    }

    /// A topic whose partition `i` has `replicas[i]`, led by its first
    /// replica (or by none when `leader` says -1).
    fn add_topic(image: &mut MetadataImage, name: &str, topic_id: Uuid, parts: &[(&[i32], i32)]) {
        let partitions = parts
            .iter()
            .enumerate()
            .map(|(i, (replicas, leader))| PartitionRecord {
                topic_id,
                partition: i as i32,
                replicas: replicas.iter().map(|&r| BrokerId::new(r)).collect(),
                isr: replicas.iter().map(|&r| BrokerId::new(r)).collect(),
                leader: BrokerId::from_wire(*leader),
                leader_epoch: LeaderEpoch::new(3),
                partition_epoch: PartitionEpoch::new(7),
                adding_replicas: vec![],
                removing_replicas: vec![],
                directories: vec![],
            })
            .collect();
        image.topics.insert(
            name.to_string(),
            TopicImage {
                name: name.to_string(),
                topic_id,
                partitions,
                configs: ConfigMap::new(),
            },
        );
        image.topic_names.insert(topic_id, name.to_string());
    }

    fn plan(
        image: &MetadataImage,
        hosted: &[(TopicPartition, Uuid)],
        failed: &[(TopicPartition, Uuid)],
    ) -> LocalChanges {
        local_changes(
            image,
            ME,
            &hosted.iter().cloned().collect(),
            &failed.iter().cloned().collect(),
            &settings,
        )
    }

    #[test]
    fn a_table_of_local_changes() {
        let mut image = MetadataImage::default();
        // "a": partition 0 led here, 1 followed from 2, 2 not assigned here.
        add_topic(
            &mut image,
            "a",
            id(1),
            &[(&[1, 2], 1), (&[2, 1], 2), (&[2, 3], 2)],
        );
        // "b": assigned here but leaderless.
        add_topic(&mut image, "b", id(2), &[(&[3, 1], -1)]);

        // Nothing hosted: open exactly what is assigned here.
        let c = plan(&image, &[], &[]);
        assert_eq!(c.opens, vec![tp("a", 0), tp("a", 1), tp("b", 0)]);
        assert!(c.deletes.is_empty() && c.forget_failed.is_empty());
        assert_eq!(c.assigned[&tp("a", 0)].role(ME), Role::Leader);
        assert_eq!(
            c.assigned[&tp("a", 1)].role(ME),
            Role::Follower(BrokerId::new(2))
        );
        assert_eq!(c.assigned[&tp("b", 0)].role(ME), Role::Offline);
        assert_eq!(
            c.follows(ME),
            BTreeMap::from([(BrokerId::new(2), vec![tp("a", 1)])])
        );
        assert_eq!(c.assigned[&tp("a", 0)].replica.leader_epoch.get(), 3);
        assert_eq!(c.assigned[&tp("a", 0)].replica.partition_epoch.get(), 7);

        // Everything hosted with the right ids: steady.
        let hosted = [
            (tp("a", 0), id(1)),
            (tp("a", 1), id(1)),
            (tp("b", 0), id(2)),
        ];
        assert!(plan(&image, &hosted, &[]).is_steady());

        // A hosted partition moved to other brokers, one of a deleted topic,
        // one of a topic re-created under the same name, one of a partition
        // index the topic no longer has.
        let hosted = [
            (tp("a", 0), id(1)),
            (tp("a", 1), id(1)),
            (tp("a", 2), id(1)),
            (tp("b", 0), id(9)),
            (tp("gone", 0), id(5)),
            (tp("a", 7), id(1)),
        ];
        let c = plan(&image, &hosted, &[]);
        assert_eq!(
            c.deletes,
            vec![
                (tp("a", 2), DeleteReason::Reassigned),
                (tp("a", 7), DeleteReason::Deleted),
                (tp("b", 0), DeleteReason::Recreated),
                (tp("gone", 0), DeleteReason::Deleted),
            ]
        );
        // The re-created topic's partition is opened afresh.
        assert_eq!(c.opens, vec![tp("b", 0)]);

        // A failed open is not retried under the same topic id, is forgotten
        // (and opened) under a new one, and is forgotten once unassigned.
        let c = plan(&image, &[(tp("a", 1), id(1))], &[(tp("a", 0), id(1))]);
        assert_eq!(c.opens, vec![tp("b", 0)]);
        assert!(c.forget_failed.is_empty());
        let c = plan(&image, &[], &[(tp("a", 0), id(8)), (tp("a", 2), id(1))]);
        assert_eq!(c.forget_failed, vec![tp("a", 0), tp("a", 2)]);
        assert_eq!(c.opens, vec![tp("a", 0), tp("a", 1), tp("b", 0)]);
    }

    #[test]
    fn settings_come_from_each_topics_configs() {
        let mut image = MetadataImage::default();
        add_topic(&mut image, "a", id(1), &[(&[1], 1)]);
        add_topic(&mut image, "b", id(2), &[(&[1], 1)]);
        image
            .topics
            .get_mut("b")
            .expect("added above")
            .configs
            .insert("min.insync.replicas".into(), "2".into());
        let c = plan(&image, &[], &[]);
        assert_eq!(c.assigned[&tp("a", 0)].settings.min_insync_replicas, 1);
        assert_eq!(c.assigned[&tp("b", 0)].settings.min_insync_replicas, 2);
    }

    /// A random image over topics t0..t3 (ids drawn from a small set, so
    /// re-created topics occur) with partitions on brokers 1..4.
    fn arb_image() -> impl Strategy<Value = MetadataImage> {
        let partition = (proptest::collection::btree_set(1i32..=4, 1..=3), -1i32..=4);
        let topic = (0u128..3, proptest::collection::vec(partition, 1..4));
        proptest::collection::btree_map(0usize..4, topic, 0..4).prop_map(|topics| {
            let mut image = MetadataImage::default();
            for (t, (n, parts)) in topics {
                let parts: Vec<(Vec<i32>, i32)> = parts
                    .into_iter()
                    .map(|(r, l)| (r.into_iter().collect(), l))
                    .collect();
                let refs: Vec<(&[i32], i32)> =
                    parts.iter().map(|(r, l)| (r.as_slice(), *l)).collect();
                add_topic(&mut image, &format!("t{t}"), id(10 * t as u128 + n), &refs);
            }
            image
        })
    }

    fn arb_state() -> impl Strategy<Value = BTreeMap<TopicPartition, Uuid>> {
        proptest::collection::btree_map((0usize..5, 0i32..4), 0u128..40, 0..8).prop_map(|m| {
            m.into_iter()
                .map(|((t, p), n)| (tp(&format!("t{t}"), p), id(n)))
                .collect()
        })
    }

    proptest! {
        /// Carrying the plan out hosts exactly what the image assigns here
        /// (less the failures kept), never deletes a partition it keeps,
        /// and planning again then changes nothing.
        #[test]
        fn the_plan_converges_in_one_step(
            image in arb_image(),
            hosted in arb_state(),
            failed in arb_state(),
            fail_opens in proptest::collection::vec(any::<bool>(), 16),
        ) {
            // A partition is hosted or failed, never both.
            let failed: BTreeMap<_, _> =
                failed.into_iter().filter(|(k, _)| !hosted.contains_key(k)).collect();
            let c = local_changes(&image, ME, &hosted, &failed, &settings);
            for (tp, a) in &c.assigned {
                prop_assert!(a.replica.replicas.contains(&ME));
                prop_assert_eq!(image.topics[&*tp.topic].topic_id, a.topic_id);
            }
            let mut hosted_after = hosted.clone();
            let mut failed_after = failed.clone();
            for (tp, _) in &c.deletes {
                prop_assert!(hosted_after.remove(tp).is_some());
                let a = c.assigned.get(tp);
                prop_assert!(a.is_none_or(|a| Some(&a.topic_id) != hosted.get(tp)));
            }
            for tp in &c.forget_failed {
                prop_assert!(failed_after.remove(tp).is_some());
            }
            for (i, tp) in c.opens.iter().enumerate() {
                let a = &c.assigned[tp];
                prop_assert!(!hosted_after.contains_key(tp));
                if fail_opens[i % fail_opens.len()] {
                    failed_after.insert(tp.clone(), a.topic_id);
                } else {
                    hosted_after.insert(tp.clone(), a.topic_id);
                }
            }
            for (tp, a) in &c.assigned {
                let here = hosted_after.get(tp) == Some(&a.topic_id)
                    || failed_after.get(tp) == Some(&a.topic_id);
                prop_assert!(here, "{} assigned but neither hosted nor failed", tp);
            }
            for tp in hosted_after.keys() {
                prop_assert!(c.assigned.contains_key(tp), "{} hosted but not assigned", tp);
            }
            let again = local_changes(&image, ME, &hosted_after, &failed_after, &settings);
            prop_assert!(again.is_steady(), "not steady after one step: {:?}", again);
        }
    }
}
