//! The API versions Strand serves: the intersection of what Kafka 3.7 serves and
//! what kafka-protocol 0.18 can decode. Only implemented APIs are listed, since
//! clients (librdkafka 2.12+) send whatever is advertised.

use kafka_protocol::messages::ApiKey;

/// (api, min version, max version) as advertised in ApiVersions.
///
/// Produce advertises min 0 although only v3+ is decoded: librdkafka treats a
/// Produce range without v0-v2 as a broker too old for compression (KAFKA-18659);
/// Kafka 4 advertises the same way and refuses the old versions.
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    // v11: KIP-951 leader hints (optional fields); v12: KIP-890 part 2 clients.
    (ApiKey::Produce, 0, 12),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 8),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::DescribeTopicPartitions, 0, 0),
    // v4 (KIP-1022): supported features whose lowest level is 0 too.
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::AlterReplicaLogDirs, 1, 2),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    // v2: KIP-1073's fenced brokers.
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::ElectLeaders, 0, 2),
    // v1: KIP-860's allow_replication_factor_change.
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::UnregisterBroker, 0, 0),
    (ApiKey::UpdateFeatures, 0, 2),
    (ApiKey::FindCoordinator, 0, 4),
    // kafka-protocol decodes OffsetCommit from v2 and OffsetFetch from v1
    // (Kafka 4 dropped the older ones too).
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    // Transactions as Kafka 4 serves them: EndTxn v5, TxnOffsetCommit v5 and
    // Produce v12 are the KIP-890 part 2 protocol (transaction.version 2);
    // clients on the older versions keep the classic protocol.
    (ApiKey::AddPartitionsToTxn, 0, 5),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    (ApiKey::EndTxn, 0, 5),
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    // Kafka 3.7 serves v0-1; kafka-protocol decodes only v1 (Kafka 4 dropped
    // v0), which is what coordinators send.
    (ApiKey::WriteTxnMarkers, 1, 2),
    (ApiKey::DescribeProducers, 0, 0),
    // v0: the SASL tokens follow as bare frames (Kafka 4.4 still serves it;
    // librdkafka up to 2.x needs v0 in the range to use SASL at all).
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
];

/// What the consumer group protocol (KIP-848) adds when the broker serves
/// it (`group.coordinator.rebalance.protocols` names `consumer`):
/// ConsumerGroupHeartbeat, and OffsetCommit/OffsetFetch v9 (member epochs).
pub const CONSUMER_PROTOCOL: &[(ApiKey, i16, i16)] = &[
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
];

/// The APIs advertised, with the consumer protocol's when it is served.
pub fn advertised_apis(consumer_protocol: bool) -> Vec<(ApiKey, i16, i16)> {
    let mut out: Vec<(ApiKey, i16, i16)> = SUPPORTED
        .iter()
        .map(
            |(k, lo, hi)| match CONSUMER_PROTOCOL.iter().find(|(c, _, _)| c == k) {
                Some(wider) if consumer_protocol => *wider,
                _ => (*k, *lo, *hi),
            },
        )
        .collect();
    if consumer_protocol {
        out.extend(
            CONSUMER_PROTOCOL
                .iter()
                .filter(|(k, _, _)| !SUPPORTED.iter().any(|(s, _, _)| s == k)),
        );
    }
    out
}

/// The widest range for `key` the broker may serve (the handler refuses
/// what its configuration does not serve).
pub fn advertised(key: ApiKey) -> Option<(i16, i16)> {
    CONSUMER_PROTOCOL
        .iter()
        .chain(SUPPORTED)
        .find(|(k, _, _)| *k == key)
        .map(|(_, lo, hi)| (*lo, *hi))
}

/// Whether a request of this key and version can be decoded and served.
/// Stricter than `advertised` where the advertised minimum is below what the
/// codec decodes (Produce v0-v2).
pub fn is_served(key: ApiKey, version: i16) -> bool {
    match advertised(key) {
        Some((lo, hi)) => {
            let decodable = key.valid_versions();
            version >= lo.max(decodable.min) && version <= hi.min(decodable.max)
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advertised_ranges_are_decodable() {
        for (key, lo, hi) in SUPPORTED.iter().chain(CONSUMER_PROTOCOL) {
            let v = key.valid_versions();
            assert!(*hi <= v.max, "{key:?} max {hi} beyond codec {}", v.max);
            assert!(lo <= hi);
            if *key != ApiKey::Produce {
                assert!(*lo >= v.min, "{key:?} min {lo} below codec {}", v.min);
            }
        }
    }

    #[test]
    fn produce_old_versions_advertised_but_not_served() {
        assert_eq!(advertised(ApiKey::Produce), Some((0, 12)));
        assert!(!is_served(ApiKey::Produce, 2));
        assert!(is_served(ApiKey::Produce, 3));
        assert!(is_served(ApiKey::Produce, 12));
        assert!(!is_served(ApiKey::Produce, 13));
        assert!(is_served(ApiKey::AddPartitionsToTxn, 5));
        assert!(!is_served(ApiKey::OffsetCommit, 1));
        assert!(is_served(ApiKey::WriteTxnMarkers, 1));
        assert!(is_served(ApiKey::WriteTxnMarkers, 2));
        assert!(!is_served(ApiKey::WriteTxnMarkers, 0));
        assert!(is_served(ApiKey::DescribeProducers, 0));
    }
}
