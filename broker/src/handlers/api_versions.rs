//! ApiVersions: the versions of every API this broker serves, and the
//! features: those Strand supports with their ranges, and the cluster's
//! finalized levels from the metadata image (`strand_metadata::features`).

use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::protocol::StrBytes;
use strand_metadata::features::SUPPORTED_FEATURES;
use strand_metadata::image::MetadataImage;
use strand_protocol::api::advertised_apis;

/// The answer at `version` under `image`. v3 lists only supported features
/// whose lowest level is above 0 (older clients cannot read a 0), as Kafka
/// does; the finalized ones are those above 0, with the image's position
/// as their epoch (Kafka's broker answers its metadata offset).
pub fn api_versions_response(
    error_code: i16,
    image: &MetadataImage,
    version: i16,
    consumer_protocol: bool,
) -> ApiVersionsResponse {
    let api_keys = advertised_apis(consumer_protocol)
        .iter()
        .map(|(k, lo, hi)| {
            ApiVersion::default()
                .with_api_key(*k as i16)
                .with_min_version(*lo)
                .with_max_version(*hi)
        })
        .collect();
    let name = |n: &str| StrBytes::from_string(n.to_string());
    let supported = SUPPORTED_FEATURES
        .iter()
        .filter(|(_, lo, _)| version >= 4 || *lo > 0)
        .map(|(n, lo, hi)| {
            SupportedFeatureKey::default()
                .with_name(name(n))
                .with_min_version(*lo)
                .with_max_version(*hi)
        })
        .collect();
    let finalized = image
        .finalized_features()
        .into_iter()
        .map(|(n, level)| {
            FinalizedFeatureKey::default()
                .with_name(name(&n))
                .with_min_version_level(level)
                .with_max_version_level(level)
        })
        .collect();
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
        .with_supported_features(supported)
        .with_finalized_features_epoch(image.applied as i64)
        .with_finalized_features(finalized)
}
