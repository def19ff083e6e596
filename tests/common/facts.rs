//! Labelled facts a client observes, compared between Strand and the
//! reference Kafka (the differential suites).

use std::collections::BTreeMap;
use strand_compat_tests::cluster::KafkaDist;

pub type Facts = BTreeMap<String, String>;

pub fn note(facts: &mut Facts, key: impl Into<String>, value: impl std::fmt::Debug) {
    facts.insert(key.into(), format!("{value:?}"));
}

/// Prints both sides as a table and fails on any fact that differs unless
/// `known` lists it (fact, why), and on a listed fact that no longer differs.
pub fn compare(strand_facts: &Facts, kafka_facts: &Facts, known: &[(&str, &str)]) {
    let mut unexpected = Vec::new();
    let mut vanished = Vec::new();
    println!("| fact | Kafka {} | Strand |", KafkaDist::version());
    println!("|---|---|---|");
    // A fact only one side has is a difference too (an answer with more
    // or fewer entries, noted one by one).
    let absent = "(absent)".to_string();
    let mut facts: Vec<&String> = kafka_facts.keys().chain(strand_facts.keys()).collect();
    facts.sort();
    facts.dedup();
    for fact in facts {
        let k = kafka_facts.get(fact).unwrap_or(&absent);
        let s = strand_facts.get(fact).unwrap_or(&absent);
        let listed = known.iter().find(|(f, _)| f == fact);
        let mark = if s == k { "" } else { " (differs)" };
        println!("| {fact} | {k} | {s}{mark} |");
        match (s == k, listed) {
            (false, None) => unexpected.push(format!("{fact}: Kafka {k}, Strand {s}")),
            (true, Some((f, why))) => vanished.push(format!("{f} ({why})")),
            _ => {}
        }
    }
    assert!(
        unexpected.is_empty() && vanished.is_empty(),
        "differences from Kafka:\n  {}\nlisted differences that no longer show:\n  {}",
        unexpected.join("\n  "),
        vanished.join("\n  ")
    );
}
