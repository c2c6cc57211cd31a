//! Which Kafka APIs and versions this listener serves, and the decision for each
//! request header: serve it; answer ApiVersions' UNSUPPORTED_VERSION (KIP-511: the
//! client learns the ranges and retries); answer UNSUPPORTED_VERSION in the request's
//! own schema where the codec parses it (`unsupported.rs`); or close the connection,
//! where nothing can be parsed (an API key or version the codec does not know), as
//! Apache Kafka does. ApiVersions advertises exactly this table, so a client that
//! negotiates meets neither of the last two.

use kafka_protocol::messages::ApiKey;

use super::unsupported::answerable;

/// One served API: its key and the versions handled, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Served {
    pub key: ApiKey,
    pub min: i16,
    pub max: i16,
}

/// Every API served, with the versions handled. Produce starts at 3 and Fetch at 4
/// (record batch v2, isolation level); Fetch stops at 12 and Metadata at 12 because
/// later versions name topics by id only; ApiVersions stops at 3 (v4 adds nothing we
/// use). The transaction APIs stop before KIP-890 (transaction version 2): EndTxn v5
/// answers the producer's next epoch, TxnOffsetCommit v5 and Produce v12 add
/// partitions implicitly, AddPartitionsToTxn v4+ is broker-to-broker; their v4s (and
/// AddOffsetsToTxn's) only add TRANSACTION_ABORTABLE, which librdkafka does not ask
/// for. EndTxn stops at 4 for that reason (docs/kafka.md, "Transactions and epochs").
pub const SERVED: &[Served] = &[
    Served {
        key: ApiKey::Produce,
        min: 3,
        max: 9,
    },
    Served {
        key: ApiKey::Fetch,
        min: 4,
        max: 12,
    },
    Served {
        key: ApiKey::ListOffsets,
        min: 1,
        max: 7,
    },
    Served {
        key: ApiKey::Metadata,
        min: 1,
        max: 12,
    },
    Served {
        key: ApiKey::ApiVersions,
        min: 0,
        max: 3,
    },
    Served {
        key: ApiKey::CreateTopics,
        min: 2,
        max: 7,
    },
    Served {
        key: ApiKey::InitProducerId,
        min: 0,
        max: 4,
    },
    Served {
        key: ApiKey::DeleteTopics,
        min: 1,
        max: 6,
    },
    Served {
        key: ApiKey::FindCoordinator,
        min: 0,
        max: 6,
    },
    Served {
        key: ApiKey::AddPartitionsToTxn,
        min: 0,
        max: 3,
    },
    Served {
        key: ApiKey::AddOffsetsToTxn,
        min: 0,
        max: 3,
    },
    Served {
        key: ApiKey::EndTxn,
        min: 0,
        max: 4,
    },
    Served {
        key: ApiKey::TxnOffsetCommit,
        min: 0,
        max: 3,
    },
    // Consumer groups (kafka_groups in docs/kafka.md): KIP-848 members only.
    Served {
        key: ApiKey::ConsumerGroupHeartbeat,
        min: 0,
        max: 1,
    },
    Served {
        key: ApiKey::OffsetCommit,
        min: 2,
        max: 9,
    },
    Served {
        key: ApiKey::OffsetFetch,
        min: 1,
        max: 9,
    },
    Served {
        key: ApiKey::ConsumerGroupDescribe,
        min: 0,
        max: 1,
    },
    Served {
        key: ApiKey::DescribeGroups,
        min: 0,
        max: 6,
    },
    Served {
        key: ApiKey::OffsetForLeaderEpoch,
        min: 2,
        max: 4,
    },
    Served {
        key: ApiKey::DeleteGroups,
        min: 0,
        max: 2,
    },
    // Classic members of KIP-848 groups (docs/kafka.md, "Classic members").
    Served {
        key: ApiKey::JoinGroup,
        min: 0,
        max: 9,
    },
    Served {
        key: ApiKey::SyncGroup,
        min: 0,
        max: 5,
    },
    Served {
        key: ApiKey::Heartbeat,
        min: 0,
        max: 4,
    },
    Served {
        key: ApiKey::LeaveGroup,
        min: 0,
        max: 5,
    },
    // Listing and describing (kafka_admin in docs/kafka.md).
    Served {
        key: ApiKey::ListGroups,
        min: 0,
        max: 5,
    },
    Served {
        key: ApiKey::ListTransactions,
        min: 0,
        max: 1,
    },
    Served {
        key: ApiKey::DescribeTransactions,
        min: 0,
        max: 0,
    },
    Served {
        key: ApiKey::DescribeProducers,
        min: 0,
        max: 0,
    },
    Served {
        key: ApiKey::OffsetDelete,
        min: 0,
        max: 0,
    },
    // Topic configs (docs/kafka.md, "Topic configs"); the codec starts DescribeConfigs
    // at 1.
    Served {
        key: ApiKey::DescribeConfigs,
        min: 1,
        max: 4,
    },
    Served {
        key: ApiKey::IncrementalAlterConfigs,
        min: 0,
        max: 1,
    },
    // SASL (docs/kafka.md, "SASL"): advertised only with a token file
    // (`api_versions.rs`). Handshake v0 is advertised because librdkafka sees SASL
    // support in it, but answered UNSUPPORTED_VERSION (`sasl_handshake.rs`).
    Served {
        key: ApiKey::SaslHandshake,
        min: 0,
        max: 1,
    },
    Served {
        key: ApiKey::SaslAuthenticate,
        min: 0,
        max: 2,
    },
];

/// Whether `key` is a SASL API, advertised only where SASL is enabled.
pub fn is_sasl(key: ApiKey) -> bool {
    matches!(key, ApiKey::SaslHandshake | ApiKey::SaslAuthenticate)
}

/// What to do with a request, from its header's API key and version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Decode and serve it.
    Serve(ApiKey),
    /// ApiVersions at a version not served: answer UNSUPPORTED_VERSION in v0's schema
    /// with the served ranges.
    ApiVersionsUnsupported,
    /// An API or version not served that the codec parses: answer UNSUPPORTED_VERSION
    /// in its schema.
    Unsupported(ApiKey),
    /// Neither served nor parsed: close the connection.
    Close,
}

/// The route of a request with `api_key` at `version`.
pub fn route(api_key: i16, version: i16) -> Route {
    let served = SERVED.iter().find(|s| s.key as i16 == api_key);
    match served {
        Some(s) if (s.min..=s.max).contains(&version) => Route::Serve(s.key),
        Some(s) if s.key == ApiKey::ApiVersions => Route::ApiVersionsUnsupported,
        _ => match ApiKey::try_from(api_key) {
            Ok(key) if answerable(key).is_some_and(|r| (r.min..=r.max).contains(&version)) => {
                Route::Unsupported(key)
            }
            _ => Route::Close,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Message, VersionRange};

    /// Every advertised version must be one the codec crate encodes and decodes.
    #[test]
    fn every_served_version_is_within_the_codecs_range() {
        let codec: &[(ApiKey, VersionRange)] = &[
            (ApiKey::Produce, ProduceRequest::VERSIONS),
            (ApiKey::Fetch, FetchRequest::VERSIONS),
            (ApiKey::ListOffsets, ListOffsetsRequest::VERSIONS),
            (ApiKey::Metadata, MetadataRequest::VERSIONS),
            (ApiKey::ApiVersions, ApiVersionsRequest::VERSIONS),
            (ApiKey::CreateTopics, CreateTopicsRequest::VERSIONS),
            (ApiKey::InitProducerId, InitProducerIdRequest::VERSIONS),
            (ApiKey::DeleteTopics, DeleteTopicsRequest::VERSIONS),
            (ApiKey::FindCoordinator, FindCoordinatorRequest::VERSIONS),
            (
                ApiKey::AddPartitionsToTxn,
                AddPartitionsToTxnRequest::VERSIONS,
            ),
            (ApiKey::AddOffsetsToTxn, AddOffsetsToTxnRequest::VERSIONS),
            (ApiKey::EndTxn, EndTxnRequest::VERSIONS),
            (ApiKey::TxnOffsetCommit, TxnOffsetCommitRequest::VERSIONS),
            (
                ApiKey::ConsumerGroupHeartbeat,
                ConsumerGroupHeartbeatRequest::VERSIONS,
            ),
            (ApiKey::OffsetCommit, OffsetCommitRequest::VERSIONS),
            (ApiKey::OffsetFetch, OffsetFetchRequest::VERSIONS),
            (
                ApiKey::ConsumerGroupDescribe,
                ConsumerGroupDescribeRequest::VERSIONS,
            ),
            (ApiKey::DescribeGroups, DescribeGroupsRequest::VERSIONS),
            (
                ApiKey::OffsetForLeaderEpoch,
                OffsetForLeaderEpochRequest::VERSIONS,
            ),
            (ApiKey::DeleteGroups, DeleteGroupsRequest::VERSIONS),
            (ApiKey::JoinGroup, JoinGroupRequest::VERSIONS),
            (ApiKey::SyncGroup, SyncGroupRequest::VERSIONS),
            (ApiKey::Heartbeat, HeartbeatRequest::VERSIONS),
            (ApiKey::LeaveGroup, LeaveGroupRequest::VERSIONS),
            (ApiKey::ListGroups, ListGroupsRequest::VERSIONS),
            (ApiKey::ListTransactions, ListTransactionsRequest::VERSIONS),
            (
                ApiKey::DescribeTransactions,
                DescribeTransactionsRequest::VERSIONS,
            ),
            (
                ApiKey::DescribeProducers,
                DescribeProducersRequest::VERSIONS,
            ),
            (ApiKey::OffsetDelete, OffsetDeleteRequest::VERSIONS),
            (ApiKey::DescribeConfigs, DescribeConfigsRequest::VERSIONS),
            (
                ApiKey::IncrementalAlterConfigs,
                IncrementalAlterConfigsRequest::VERSIONS,
            ),
            (ApiKey::SaslHandshake, SaslHandshakeRequest::VERSIONS),
            (ApiKey::SaslAuthenticate, SaslAuthenticateRequest::VERSIONS),
        ];
        for served in SERVED {
            let (_, range) = codec
                .iter()
                .find(|(k, _)| *k == served.key)
                .expect("every served API has a codec");
            assert!(
                range.min <= served.min && served.max <= range.max,
                "{served:?}"
            );
        }
    }

    #[test]
    fn given_a_header_then_the_route_follows_the_table() {
        assert_eq!(route(0, 3), Route::Serve(ApiKey::Produce));
        assert_eq!(route(0, 9), Route::Serve(ApiKey::Produce));
        // Produce v2 is older than the codec's record batch v2 support.
        assert_eq!(route(0, 2), Route::Close);
        assert_eq!(route(0, 10), Route::Unsupported(ApiKey::Produce));
        assert_eq!(route(1, 12), Route::Serve(ApiKey::Fetch));
        assert_eq!(route(1, 13), Route::Unsupported(ApiKey::Fetch));
        assert_eq!(route(3, 99), Route::Close);
        assert_eq!(route(18, 0), Route::Serve(ApiKey::ApiVersions));
        assert_eq!(route(18, 4), Route::ApiVersionsUnsupported);
        assert_eq!(route(18, -1), Route::ApiVersionsUnsupported);
        // JoinGroup: served (classic members); DescribeAcls: not answered;
        // 999: no Kafka API at all.
        assert_eq!(route(11, 5), Route::Serve(ApiKey::JoinGroup));
        assert_eq!(route(29, 1), Route::Close);
        // EndTxn v5 is KIP-890's: answered UNSUPPORTED_VERSION, so librdkafka and the
        // Java client stay at v4, where the producer keeps its epoch.
        assert_eq!(route(26, 4), Route::Serve(ApiKey::EndTxn));
        assert_eq!(route(26, 5), Route::Unsupported(ApiKey::EndTxn));
        assert_eq!(route(24, 3), Route::Serve(ApiKey::AddPartitionsToTxn));
        assert_eq!(route(24, 4), Route::Unsupported(ApiKey::AddPartitionsToTxn));
        assert_eq!(route(28, 5), Route::Unsupported(ApiKey::TxnOffsetCommit));
        // ListTransactions v2 (KIP-1152's id pattern) is not served; the codec parses it.
        assert_eq!(route(16, 5), Route::Serve(ApiKey::ListGroups));
        assert_eq!(route(66, 1), Route::Serve(ApiKey::ListTransactions));
        assert_eq!(route(66, 2), Route::Unsupported(ApiKey::ListTransactions));
        // SaslHandshake v0-v1 and SaslAuthenticate v0-v2.
        assert_eq!(route(17, 1), Route::Serve(ApiKey::SaslHandshake));
        assert_eq!(route(17, 2), Route::Close);
        assert_eq!(route(36, 2), Route::Serve(ApiKey::SaslAuthenticate));
        assert_eq!(route(999, 0), Route::Close);
        assert_eq!(route(-1, 0), Route::Close);
    }
}
