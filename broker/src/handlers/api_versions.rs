//! ApiVersions: the versions of every API this broker serves, and the
//! finalized features clients read from it.

use kafka_protocol::messages::api_versions_response::{
    ApiVersion, FinalizedFeatureKey, SupportedFeatureKey,
};
use kafka_protocol::messages::ApiVersionsResponse;
use kafka_protocol::protocol::StrBytes;
use strand_protocol::api::SUPPORTED;

pub fn api_versions_response(error_code: i16) -> ApiVersionsResponse {
    let api_keys = SUPPORTED
        .iter()
        .map(|(k, lo, hi)| {
            ApiVersion::default()
                .with_api_key(*k as i16)
                .with_min_version(*lo)
                .with_max_version(*hi)
        })
        .collect();
    // KIP-890 part 2 is served: the cluster's finalized transaction.version
    // is 2, as on a new Kafka 4 cluster (clients read it from ApiVersions v3+).
    let feature = |name: &str| StrBytes::from_string(name.to_string());
    ApiVersionsResponse::default()
        .with_error_code(error_code)
        .with_api_keys(api_keys)
        .with_supported_features(vec![SupportedFeatureKey::default()
            .with_name(feature(TRANSACTION_VERSION_FEATURE))
            .with_min_version(0)
            .with_max_version(TRANSACTION_VERSION)])
        .with_finalized_features_epoch(1)
        .with_finalized_features(vec![FinalizedFeatureKey::default()
            .with_name(feature(TRANSACTION_VERSION_FEATURE))
            .with_min_version_level(TRANSACTION_VERSION)
            .with_max_version_level(TRANSACTION_VERSION)])
}

/// The feature that tells clients which transaction protocol to use.
const TRANSACTION_VERSION_FEATURE: &str = "transaction.version";
/// 2 = KIP-890 part 2 (epoch bump per transaction, partitions added by brokers).
const TRANSACTION_VERSION: i16 = 2;
