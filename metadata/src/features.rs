//! Feature versioning (KIP-584, KIP-778): the features Strand supports with
//! their level ranges, `metadata.version`'s level names and Kafka releases,
//! as Kafka 4.4 names them. The finalized levels live in the metadata log
//! (`MetadataRecord::FeatureLevel`); ApiVersions reports them, UpdateFeatures
//! changes them (`controller::manager::features`), `strand format` writes the
//! first ones.
//!
//! Strand supports `metadata.version` (Kafka 4.4's levels: what the cluster
//! tells tools it speaks) and `transaction.version` (0-2: KIP-890 part 2 at
//! 2, which clients read from ApiVersions to pick their transaction
//! protocol). It leaves out what it does not have: `kraft.version` 1
//! (KIP-853 voter changes), `group.version` (KIP-848), `share.version`,
//! `streams.version` and `eligible.leader.replicas.version`; a client that
//! sees no level for those uses the protocols Strand serves.

pub const METADATA_VERSION: &str = "metadata.version";

/// The lowest `metadata.version` with several log directories per broker
/// (KIP-858: directory assignment), 3.7-IV2.
pub const MV_DIRECTORY_ASSIGNMENT: i16 = 17;
pub const TRANSACTION_VERSION: &str = "transaction.version";

/// `metadata.version` levels by name, Kafka 3.3-IV3 (the lowest KRaft
/// level) to 4.4-IV2 (Kafka 4.4's latest production level).
pub const METADATA_VERSIONS: &[(i16, &str)] = &[
    (7, "3.3-IV3"),
    (8, "3.4-IV0"),
    (9, "3.5-IV0"),
    (10, "3.5-IV1"),
    (11, "3.5-IV2"),
    (12, "3.6-IV0"),
    (13, "3.6-IV1"),
    (14, "3.6-IV2"),
    (15, "3.7-IV0"),
    (16, "3.7-IV1"),
    (17, "3.7-IV2"),
    (18, "3.7-IV3"),
    (19, "3.7-IV4"),
    (20, "3.8-IV0"),
    (21, "3.9-IV0"),
    (22, "4.0-IV0"),
    (23, "4.0-IV1"),
    (24, "4.0-IV2"),
    (25, "4.0-IV3"),
    (26, "4.1-IV0"),
    (27, "4.1-IV1"),
    (28, "4.2-IV0"),
    (29, "4.2-IV1"),
    (30, "4.3-IV0"),
    (31, "4.4-IV0"),
    (32, "4.4-IV1"),
    (33, "4.4-IV2"),
];

/// The level a new cluster gets: Kafka 4.4's default.
pub const LATEST_METADATA_VERSION: i16 = 33;

/// The features Strand supports: (name, lowest level, highest level).
pub const SUPPORTED_FEATURES: &[(&str, i16, i16)] = &[
    (METADATA_VERSION, 7, LATEST_METADATA_VERSION),
    (TRANSACTION_VERSION, 0, 2),
];

/// The supported range of `name`, if Strand supports it.
pub fn supported(name: &str) -> Option<(i16, i16)> {
    SUPPORTED_FEATURES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, lo, hi)| (*lo, *hi))
}

/// A `metadata.version` level from its name (`4.4-IV2`) or a release
/// (`4.4`: the release's last level), as `--release-version` takes it.
pub fn metadata_version_of(release: &str) -> Option<i16> {
    if let Some((level, _)) = METADATA_VERSIONS.iter().find(|(_, n)| *n == release) {
        return Some(*level);
    }
    METADATA_VERSIONS
        .iter()
        .rev()
        .find(|(_, n)| n.split('-').next() == Some(release))
        .map(|(level, _)| *level)
}

/// A `metadata.version` level's name.
pub fn metadata_version_name(level: i16) -> Option<&'static str> {
    METADATA_VERSIONS
        .iter()
        .find(|(l, _)| *l == level)
        .map(|(_, n)| *n)
}

/// The levels a cluster formatted at `metadata_version` starts with, among
/// the features Strand supports (Kafka's release mapping:
/// `transaction.version` 2 from 4.0-IV2, level 24).
pub fn defaults_for(metadata_version: i16) -> Vec<(&'static str, i16)> {
    let mut out = vec![(METADATA_VERSION, metadata_version)];
    if metadata_version >= 24 {
        out.push((TRANSACTION_VERSION, 2));
    }
    out
}

/// Kafka's UpdateFeatures upgrade types (wire values).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum UpgradeType {
    Upgrade = 1,
    SafeDowngrade = 2,
    UnsafeDowngrade = 3,
}

impl UpgradeType {
    /// From the wire (UpdateFeatures v1+); an unknown value is none.
    pub fn from_wire(v: i8) -> Option<UpgradeType> {
        match v {
            1 => Some(UpgradeType::Upgrade),
            2 => Some(UpgradeType::SafeDowngrade),
            3 => Some(UpgradeType::UnsafeDowngrade),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_names() {
        assert_eq!(metadata_version_of("4.4-IV2"), Some(33));
        assert_eq!(metadata_version_of("4.4"), Some(33));
        assert_eq!(metadata_version_of("3.9"), Some(21));
        assert_eq!(metadata_version_of("4.0"), Some(25));
        assert_eq!(metadata_version_of("3.3"), Some(7));
        assert_eq!(metadata_version_of("4.5-IV0"), None);
        assert_eq!(metadata_version_of("2.8"), None);
        assert_eq!(metadata_version_name(21), Some("3.9-IV0"));
        for w in METADATA_VERSIONS.windows(2) {
            assert_eq!(w[0].0 + 1, w[1].0);
        }
        assert_eq!(
            defaults_for(33),
            vec![(METADATA_VERSION, 33), (TRANSACTION_VERSION, 2)]
        );
        assert_eq!(defaults_for(21), vec![(METADATA_VERSION, 21)]);
    }
}
