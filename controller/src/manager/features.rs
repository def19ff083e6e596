//! UpdateFeatures (Kafka 4.4's FeatureControlManager): each named feature's
//! new finalized level, checked against what this controller supports
//! (`strand_metadata::features`) and the current level, with Kafka's
//! messages; one bad update fails the whole request, as in Kafka.

use super::common::ApiError;
use strand_metadata::features::{supported, UpgradeType, METADATA_VERSION};
use strand_metadata::image::MetadataImage;
use strand_metadata::records::MetadataRecord;
use strand_protocol::ErrorCode;
use strand_types::BrokerId;

/// One feature update: name, new level, how it may move.
pub type FeatureUpdate = (String, i16, UpgradeType);

/// Why one update is refused: Kafka's text for it.
fn refusal(image: &MetadataImage, me: BrokerId, u: &FeatureUpdate) -> Option<String> {
    let (name, level, kind) = (u.0.as_str(), u.1, u.2);
    let invalid = |why: String| {
        Some(format!(
            "Invalid update version {level} for feature {name}. {why}"
        ))
    };
    if level < 0 {
        return invalid("The version level cannot be negative.".into());
    }
    let current = image.feature_level(name);
    match supported(name) {
        Some((lo, hi)) if level < lo || level > hi => {
            return invalid(format!(
                "Local controller {me} only supports versions {lo}-{hi}"
            ));
        }
        Some(_) => {}
        None if level > 0 => {
            return invalid(format!(
                "Local controller {me} does not support this feature."
            ));
        }
        None if current == 0 => return invalid(format!("Feature {name} not found.")),
        None => {}
    }
    match kind {
        UpgradeType::Upgrade if level < current => {
            return invalid("Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade.".into());
        }
        UpgradeType::SafeDowngrade | UpgradeType::UnsafeDowngrade if level > current => {
            return invalid("Can't downgrade to a newer version.".into());
        }
        _ => {}
    }
    if name == METADATA_VERSION && level < current {
        let why = match kind {
            UpgradeType::UnsafeDowngrade => "Unsafe metadata downgrade is not supported in this version.",
            _ => "Refusing to perform the requested downgrade because it might delete metadata information.",
        };
        return Some(format!(
            "Unsupported metadata.version downgrade from {current} to {level}. {why}"
        ));
    }
    None
}

/// UpdateFeatures: a `FeatureLevel` record per named feature (a level that
/// does not change is written too, as Kafka does), or INVALID_UPDATE_VERSION
/// naming the first refused update. `me` is this controller's id, which
/// Kafka's messages name.
pub fn update_features(
    image: &MetadataImage,
    me: BrokerId,
    updates: &[FeatureUpdate],
) -> Result<Vec<MetadataRecord>, ApiError> {
    let mut seen = std::collections::BTreeSet::new();
    for u in updates {
        if !seen.insert(u.0.as_str()) {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!("Feature {} was specified more than once.", u.0),
            ));
        }
        if let Some(why) = refusal(image, me, u) {
            return Err(ApiError::new(
                ErrorCode::InvalidUpdateVersion,
                format!("The update failed for all features since the following feature had an error: {why}"),
            ));
        }
    }
    Ok(updates
        .iter()
        .map(|(name, level, _)| MetadataRecord::FeatureLevel {
            name: name.clone(),
            level: *level,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::manager::testutil::{apply_all, b, image_with_brokers};
    use strand_metadata::features::{defaults_for, TRANSACTION_VERSION};

    fn formatted(mv: i16) -> MetadataImage {
        let mut img = image_with_brokers(&[1]);
        for (name, level) in defaults_for(mv) {
            img.apply(&MetadataRecord::FeatureLevel {
                name: name.into(),
                level,
            });
        }
        img
    }

    /// (image's metadata.version, update) -> Ok or the refusal's text
    /// after Kafka's common prefix.
    #[test]
    fn updates_as_kafka_answers_them() {
        use UpgradeType::*;
        let up = |n: &str, l: i16, k| (n.to_string(), l, k);
        let cases: Vec<(i16, FeatureUpdate, Result<(), &str>)> = vec![
            (33, up(METADATA_VERSION, 33, Upgrade), Ok(())),
            (21, up(METADATA_VERSION, 33, Upgrade), Ok(())),
            (33, up(METADATA_VERSION, 21, Upgrade), Err("Invalid update version 21 for feature metadata.version. Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade.")),
            (33, up(METADATA_VERSION, 21, SafeDowngrade), Err("Unsupported metadata.version downgrade from 33 to 21. Refusing to perform the requested downgrade because it might delete metadata information.")),
            (33, up(METADATA_VERSION, 32, UnsafeDowngrade), Err("Unsupported metadata.version downgrade from 33 to 32. Unsafe metadata downgrade is not supported in this version.")),
            (33, up(METADATA_VERSION, 34, Upgrade), Err("Invalid update version 34 for feature metadata.version. Local controller 1 only supports versions 7-33")),
            (33, up(METADATA_VERSION, 0, SafeDowngrade), Err("Invalid update version 0 for feature metadata.version. Local controller 1 only supports versions 7-33")),
            (33, up(TRANSACTION_VERSION, 3, Upgrade), Err("Invalid update version 3 for feature transaction.version. Local controller 1 only supports versions 0-2")),
            (33, up(TRANSACTION_VERSION, 1, SafeDowngrade), Ok(())),
            (33, up(TRANSACTION_VERSION, 0, UnsafeDowngrade), Ok(())),
            (33, up(TRANSACTION_VERSION, 1, Upgrade), Err("Invalid update version 1 for feature transaction.version. Can't downgrade the version of this feature without setting the upgrade type to either safe or unsafe downgrade.")),
            (21, up(TRANSACTION_VERSION, 2, Upgrade), Ok(())),
            (21, up(TRANSACTION_VERSION, 2, SafeDowngrade), Err("Invalid update version 2 for feature transaction.version. Can't downgrade to a newer version.")),
            (33, up("foo.version", 1, Upgrade), Err("Invalid update version 1 for feature foo.version. Local controller 1 does not support this feature.")),
            (33, up("foo.version", 0, SafeDowngrade), Err("Invalid update version 0 for feature foo.version. Feature foo.version not found.")),
            (33, up("group.version", 1, Upgrade), Err("Invalid update version 1 for feature group.version. Local controller 1 does not support this feature.")),
        ];
        const PREFIX: &str =
            "The update failed for all features since the following feature had an error: ";
        for (i, (mv, u, want)) in cases.into_iter().enumerate() {
            let img = formatted(mv);
            let got = update_features(&img, b(1), std::slice::from_ref(&u));
            match (got, want) {
                (Ok(recs), Ok(())) => {
                    let mut img = img;
                    apply_all(&mut img, &recs);
                    assert_eq!(img.feature_level(&u.0), u.1, "case {i}");
                }
                (Err(e), Err(text)) => {
                    assert_eq!(e.code, ErrorCode::InvalidUpdateVersion, "case {i}");
                    assert_eq!(e.message.strip_prefix(PREFIX), Some(text), "case {i}");
                }
                (got, want) => panic!("case {i}: {got:?} vs {want:?}"),
            }
        }
    }

    /// One refused update fails the request; a disabled feature is no
    /// longer finalized; a log from before features reads as 4.4 with
    /// transaction.version 2.
    #[test]
    fn all_or_nothing_and_disabling() {
        let img = formatted(33);
        let updates = vec![
            (
                TRANSACTION_VERSION.to_string(),
                1,
                UpgradeType::SafeDowngrade,
            ),
            (METADATA_VERSION.to_string(), 21, UpgradeType::SafeDowngrade),
        ];
        assert!(update_features(&img, b(1), &updates).is_err());
        let mut img = img;
        let recs = update_features(
            &img,
            b(1),
            &[(TRANSACTION_VERSION.into(), 0, UpgradeType::SafeDowngrade)],
        )
        .unwrap();
        apply_all(&mut img, &recs);
        assert!(!img.finalized_features().contains_key(TRANSACTION_VERSION));
        let legacy = image_with_brokers(&[1]);
        assert_eq!(legacy.feature_level(METADATA_VERSION), 33);
        assert_eq!(legacy.feature_level(TRANSACTION_VERSION), 2);
    }
}
