//! The server-side assignors of KIP-848: `uniform` (the default) and
//! `range`, with Kafka 4.x's rules. Pure functions of the members'
//! subscriptions, the topics' partition counts and the previous target.
//!
//! Where Kafka iterates hash maps (member and topic order), these iterate
//! in sorted order (member id, topic id), so an assignment is a function of
//! its inputs; the balance and stickiness Kafka's give hold the same.

use std::collections::{BTreeMap, BTreeSet};

use super::types::{Assignment, TopicId};

/// The assignors `group.consumer.assignors` names.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub enum Assignor {
    Uniform,
    Range,
}

impl Assignor {
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    pub fn from_name(name: &str) -> Option<Assignor> {
        match name {
            "uniform" | "org.apache.kafka.coordinator.group.assignor.UniformAssignor" => {
                Some(Assignor::Uniform)
            }
            "range" | "org.apache.kafka.coordinator.group.assignor.RangeAssignor" => {
                Some(Assignor::Range)
            }
            _ => None,
        }
    }

    /// The target assignment of every member (members it gives nothing
    /// get an empty one).
    pub fn assign(
        self,
        members: &BTreeMap<String, MemberSpec>,
        partitions: &BTreeMap<TopicId, i32>,
    ) -> BTreeMap<String, Assignment> {
        match self {
            Assignor::Uniform => uniform(members, partitions),
            Assignor::Range => range(members, partitions),
        }
    }
}

/// What an assignor knows of one member.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemberSpec {
    pub instance_id: Option<String>,
    /// The topics it subscribes to that exist.
    pub subscribed: BTreeSet<TopicId>,
    /// Its previous target.
    pub target: Assignment,
}

/// Whether every member subscribes to the same topics.
fn homogeneous(members: &BTreeMap<String, MemberSpec>) -> bool {
    let mut subs = members.values().map(|m| &m.subscribed);
    match subs.next() {
        Some(first) => subs.all(|s| s == first),
        None => true,
    }
}

fn uniform(
    members: &BTreeMap<String, MemberSpec>,
    partitions: &BTreeMap<TopicId, i32>,
) -> BTreeMap<String, Assignment> {
    if homogeneous(members) {
        uniform_homogeneous(members, partitions)
    } else {
        uniform_heterogeneous(members, partitions)
    }
}

/// Every member subscribes to the same topics: each gets the total divided
/// evenly (`total % members` of them one more, those holding more than
/// that first), keeping what it had up to that quota; what is left goes to
/// those under it, in order.
fn uniform_homogeneous(
    members: &BTreeMap<String, MemberSpec>,
    partitions: &BTreeMap<TopicId, i32>,
) -> BTreeMap<String, Assignment> {
    let mut out: BTreeMap<String, Assignment> = members
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect();
    let Some(first) = members.values().next() else {
        return out;
    };
    let topics: Vec<TopicId> = first
        .subscribed
        .iter()
        .filter(|t| partitions.contains_key(t))
        .copied()
        .collect();
    let owned: BTreeSet<(TopicId, i32)> = members
        .values()
        .flat_map(|m| {
            m.target
                .iter()
                .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)))
        })
        .collect();
    let mut unassigned: Vec<(TopicId, i32)> = Vec::new();
    let mut total = 0usize;
    for t in &topics {
        let n = partitions[t].max(0);
        total += n as usize;
        unassigned.extend((0..n).map(|p| (*t, p)).filter(|tp| !owned.contains(tp)));
    }
    let count = members.len();
    let min_quota = total / count;
    // The `total % count` members that get one partition more: first those
    // that already hold more than the least share (they keep it, so
    // nothing moves that need not), then the others, in order.
    let held = |m: &MemberSpec| -> usize {
        m.target
            .iter()
            .filter(|(t, _)| topics.contains(t))
            .map(|(t, ps)| ps.iter().filter(|p| **p < partitions[t]).count())
            .sum()
    };
    let mut extra = total % count;
    let mut gets_extra: BTreeSet<&String> = BTreeSet::new();
    for pass_holders in [true, false] {
        for (id, m) in members {
            if extra > 0 && !gets_extra.contains(id) && (held(m) > min_quota) == pass_holders {
                gets_extra.insert(id);
                extra -= 1;
            }
        }
    }
    let mut unfilled: Vec<(String, usize)> = Vec::new();
    for (id, m) in members {
        let mut quota = min_quota + usize::from(gets_extra.contains(id));
        let mine = out.get_mut(id).expect("every member has an entry");
        for (t, ps) in &m.target {
            if !topics.contains(t) {
                continue;
            }
            let n = partitions[t];
            // A partition past the topic's count is gone.
            let ps: Vec<i32> = ps.iter().copied().filter(|p| *p < n).collect();
            let keep = ps.len().min(quota);
            if keep > 0 {
                mine.entry(*t).or_default().extend(&ps[..keep]);
            }
            unassigned.extend(ps[keep..].iter().map(|p| (*t, *p)));
            quota -= keep;
        }
        if quota > 0 {
            unfilled.push((id.clone(), quota));
        }
    }
    let mut next = unassigned.into_iter();
    for (id, quota) in unfilled {
        let mine = out.get_mut(&id).expect("every member has an entry");
        for (t, p) in next.by_ref().take(quota) {
            mine.entry(t).or_default().insert(p);
        }
    }
    out
}

/// Members subscribe to different topics: each topic's free partitions go,
/// one at a time, to its least loaded subscriber; then partitions move from
/// a topic's most to its least loaded subscribers while they differ by more
/// than one (at most 16 passes).
fn uniform_heterogeneous(
    members: &BTreeMap<String, MemberSpec>,
    partitions: &BTreeMap<TopicId, i32>,
) -> BTreeMap<String, Assignment> {
    let ids: Vec<&String> = members.keys().collect();
    let mut load = vec![0usize; ids.len()];
    let mut owner: BTreeMap<(TopicId, i32), usize> = BTreeMap::new();
    let mut subscribers: BTreeMap<TopicId, Vec<usize>> = BTreeMap::new();
    for (i, m) in members.values().enumerate() {
        for t in m.subscribed.iter().filter(|t| partitions.contains_key(t)) {
            subscribers.entry(*t).or_default().push(i);
        }
        for (t, ps) in &m.target {
            if !m.subscribed.contains(t) || !partitions.contains_key(t) {
                continue;
            }
            for p in ps.iter().filter(|p| **p < partitions[t]) {
                if owner.insert((*t, *p), i).is_none() {
                    load[i] += 1;
                }
            }
        }
    }
    // Most partitions per subscriber first, then fewest subscribers.
    let mut topics: Vec<TopicId> = subscribers.keys().copied().collect();
    topics.sort_by(|a, b| {
        let per = |t: &TopicId| partitions[t] as f64 / subscribers[t].len() as f64;
        per(b)
            .total_cmp(&per(a))
            .then(subscribers[a].len().cmp(&subscribers[b].len()))
            .then(a.cmp(b))
    });
    for t in &topics {
        for p in 0..partitions[t] {
            if owner.contains_key(&(*t, p)) {
                continue;
            }
            let i = *subscribers[t]
                .iter()
                .min_by_key(|i| (load[**i], **i))
                .expect("a subscribed topic has a subscriber");
            owner.insert((*t, p), i);
            load[i] += 1;
        }
    }
    for _ in 0..16 {
        let mut moved = false;
        for t in topics.iter().filter(|t| subscribers[t].len() >= 2) {
            loop {
                let subs = &subscribers[t];
                let most = *subs
                    .iter()
                    .max_by_key(|i| (load[**i], std::cmp::Reverse(**i)))
                    .expect("two subscribers");
                let least = *subs
                    .iter()
                    .min_by_key(|i| (load[**i], **i))
                    .expect("two subscribers");
                if load[most] <= load[least] + 1 {
                    break;
                }
                // The most loaded gives up its highest partition of t.
                let Some(p) = (0..partitions[t])
                    .rev()
                    .find(|p| owner.get(&(*t, *p)) == Some(&most))
                else {
                    break;
                };
                owner.insert((*t, p), least);
                load[most] -= 1;
                load[least] += 1;
                moved = true;
            }
        }
        if !moved {
            break;
        }
    }
    let mut out: BTreeMap<String, Assignment> = members
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect();
    for ((t, p), i) in owner {
        out.get_mut(ids[i])
            .expect("every member has an entry")
            .entry(t)
            .or_default()
            .insert(p);
    }
    out
}

/// Per topic, its subscribers (static members by instance id, then the
/// others by member id) each take the next contiguous range; the first
/// `partitions % subscribers` one more. Not sticky (Kafka 4.x's): stable
/// instance ids keep ranges in place.
fn range(
    members: &BTreeMap<String, MemberSpec>,
    partitions: &BTreeMap<TopicId, i32>,
) -> BTreeMap<String, Assignment> {
    let mut order: Vec<(&String, &MemberSpec)> = members.iter().collect();
    order.sort_by(
        |(a_id, a), (b_id, b)| match (&a.instance_id, &b.instance_id) {
            (Some(x), Some(y)) => x.cmp(y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a_id.cmp(b_id),
        },
    );
    let mut out: BTreeMap<String, Assignment> = members
        .keys()
        .map(|m| (m.clone(), Assignment::new()))
        .collect();
    for (t, n) in partitions {
        let subs: Vec<&String> = order
            .iter()
            .filter(|(_, m)| m.subscribed.contains(t))
            .map(|(id, _)| *id)
            .collect();
        if subs.is_empty() {
            continue;
        }
        let n = (*n).max(0) as usize;
        let min_quota = n / subs.len();
        let mut extra = n % subs.len();
        let mut start = 0usize;
        for id in subs {
            let mut take = min_quota;
            if extra > 0 {
                take += 1;
                extra -= 1;
            }
            if take > 0 {
                out.get_mut(id)
                    .expect("every member has an entry")
                    .entry(*t)
                    .or_default()
                    .extend((start..start + take).map(|p| p as i32));
            }
            start += take;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic(n: u8) -> TopicId {
        TopicId::from_bytes([n; 16])
    }

    fn spec(subscribed: &[u8], target: &[(u8, &[i32])]) -> MemberSpec {
        MemberSpec {
            instance_id: None,
            subscribed: subscribed.iter().map(|t| topic(*t)).collect(),
            target: target
                .iter()
                .map(|(t, ps)| (topic(*t), ps.iter().copied().collect()))
                .collect(),
        }
    }

    fn sizes(out: &BTreeMap<String, Assignment>) -> Vec<usize> {
        out.values()
            .map(crate::consumer::types::partition_count)
            .collect()
    }

    #[test]
    fn uniform_balances_and_keeps_what_fits_the_quota() {
        let partitions = BTreeMap::from([(topic(1), 6)]);
        let members = BTreeMap::from([
            ("a".to_string(), spec(&[1], &[(1, &[0, 1, 2, 3, 4, 5])])),
            ("b".to_string(), spec(&[1], &[])),
        ]);
        let out = Assignor::Uniform.assign(&members, &partitions);
        assert_eq!(sizes(&out), [3, 3]);
        // a keeps three of its own; b gets the rest.
        assert_eq!(out["a"][&topic(1)], BTreeSet::from([0, 1, 2]));
        assert_eq!(out["b"][&topic(1)], BTreeSet::from([3, 4, 5]));
        // Nothing changes when nothing changed.
        let again = BTreeMap::from([
            ("a".to_string(), spec(&[1], &[(1, &[0, 1, 2])])),
            ("b".to_string(), spec(&[1], &[(1, &[3, 4, 5])])),
        ]);
        assert_eq!(Assignor::Uniform.assign(&again, &partitions), out);
    }

    /// The partitions that do not divide evenly stay with those holding
    /// them: a member that sorts first takes none of them (librdkafka's
    /// 0089 saw its one partition moved to a newcomer, its holder made to
    /// revoke it).
    #[test]
    fn uniform_leaves_the_odd_partitions_with_their_holders() {
        let partitions = BTreeMap::from([(topic(1), 1)]);
        let members = BTreeMap::from([
            ("a-newcomer".to_string(), spec(&[1], &[])),
            ("b-holder".to_string(), spec(&[1], &[(1, &[0])])),
        ]);
        let out = Assignor::Uniform.assign(&members, &partitions);
        assert_eq!(out["b-holder"][&topic(1)], BTreeSet::from([0]));
        assert!(out["a-newcomer"].is_empty());
        // 5 over 3 members: the holders of two keep them, the newcomer gets one.
        let partitions = BTreeMap::from([(topic(1), 5)]);
        let members = BTreeMap::from([
            ("a".to_string(), spec(&[1], &[])),
            ("b".to_string(), spec(&[1], &[(1, &[0, 1, 2])])),
            ("c".to_string(), spec(&[1], &[(1, &[3, 4])])),
        ]);
        let out = Assignor::Uniform.assign(&members, &partitions);
        assert_eq!(sizes(&out), [1, 2, 2]);
        assert_eq!(out["c"][&topic(1)], BTreeSet::from([3, 4]));
        assert_eq!(out["a"][&topic(1)], BTreeSet::from([2]));
    }

    #[test]
    fn uniform_heterogeneous_gives_each_topic_to_its_subscribers_only() {
        let partitions = BTreeMap::from([(topic(1), 4), (topic(2), 2)]);
        let members = BTreeMap::from([
            ("a".to_string(), spec(&[1, 2], &[])),
            ("b".to_string(), spec(&[1], &[])),
        ]);
        let out = Assignor::Uniform.assign(&members, &partitions);
        assert!(!out["b"].contains_key(&topic(2)));
        assert_eq!(out["a"][&topic(2)].len(), 2);
        assert_eq!(sizes(&out), [3, 3]);
    }

    #[test]
    fn range_gives_contiguous_ranges_in_member_order() {
        let partitions = BTreeMap::from([(topic(1), 5), (topic(2), 5)]);
        let members = BTreeMap::from([
            ("m2".to_string(), spec(&[1, 2], &[])),
            ("m1".to_string(), spec(&[1, 2], &[])),
        ]);
        let out = Assignor::Range.assign(&members, &partitions);
        // Co-partitioned topics: the same partition numbers for each member.
        assert_eq!(out["m1"][&topic(1)], BTreeSet::from([0, 1, 2]));
        assert_eq!(out["m1"][&topic(2)], BTreeSet::from([0, 1, 2]));
        assert_eq!(out["m2"][&topic(1)], BTreeSet::from([3, 4]));
    }
}
