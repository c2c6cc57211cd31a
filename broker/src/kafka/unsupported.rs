//! UNSUPPORTED_VERSION in the request's own schema, for a well-formed request the
//! listener does not serve but can parse: a served API at a version outside the
//! advertised range (within what the codec crate handles: KIP-890's EndTxn v5 and
//! TxnOffsetCommit v4+, AddPartitionsToTxn's broker-to-broker v4+, ListTransactions
//! v2), or a group API of the next slice.
//! The client reads an error, not a dropped connection. What cannot be parsed (an API
//! key unknown to the codec, a version outside the codec's range) is still closed on.

use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, Message, VersionRange};
use kafka_protocol::ResponseError;

const UNSUPPORTED: i16 = ResponseError::UnsupportedVersion.code();

/// The APIs answered here, with the versions the codec crate parses.
pub fn answerable(key: ApiKey) -> Option<VersionRange> {
    Some(match key {
        ApiKey::Produce => ProduceRequest::VERSIONS,
        ApiKey::Fetch => FetchRequest::VERSIONS,
        ApiKey::ListOffsets => ListOffsetsRequest::VERSIONS,
        ApiKey::Metadata => MetadataRequest::VERSIONS,
        ApiKey::CreateTopics => CreateTopicsRequest::VERSIONS,
        ApiKey::InitProducerId => InitProducerIdRequest::VERSIONS,
        ApiKey::FindCoordinator => FindCoordinatorRequest::VERSIONS,
        ApiKey::JoinGroup => JoinGroupRequest::VERSIONS,
        ApiKey::Heartbeat => HeartbeatRequest::VERSIONS,
        ApiKey::LeaveGroup => LeaveGroupRequest::VERSIONS,
        ApiKey::SyncGroup => SyncGroupRequest::VERSIONS,
        ApiKey::ListTransactions => ListTransactionsRequest::VERSIONS,
        ApiKey::AddOffsetsToTxn => AddOffsetsToTxnRequest::VERSIONS,
        ApiKey::EndTxn => EndTxnRequest::VERSIONS,
        ApiKey::AddPartitionsToTxn => AddPartitionsToTxnRequest::VERSIONS,
        ApiKey::TxnOffsetCommit => TxnOffsetCommitRequest::VERSIONS,
        _ => return None,
    })
}

/// Why an unsupported request got no answer after all.
pub type Failure = String;

/// The encoded body answering `key` at `version` with UNSUPPORTED_VERSION; the request
/// body is in `buf`, past its header.
pub fn answer(key: ApiKey, version: i16, buf: &mut Bytes) -> Result<BytesMut, Failure> {
    let mut out = BytesMut::new();
    let encoded = match key {
        ApiKey::Produce => {
            let request = ProduceRequest::decode(buf, version).map_err(text)?;
            let responses = request
                .topic_data
                .into_iter()
                .map(|t| {
                    produce_response::TopicProduceResponse::default()
                        .with_name(t.name)
                        .with_topic_id(t.topic_id)
                        .with_partition_responses(
                            t.partition_data
                                .iter()
                                .map(|p| {
                                    produce_response::PartitionProduceResponse::default()
                                        .with_index(p.index)
                                        .with_error_code(UNSUPPORTED)
                                        .with_base_offset(-1)
                                })
                                .collect(),
                        )
                })
                .collect();
            ProduceResponse::default()
                .with_responses(responses)
                .encode(&mut out, version)
        }
        ApiKey::Fetch => {
            let request = FetchRequest::decode(buf, version).map_err(text)?;
            let responses = request
                .topics
                .into_iter()
                .map(|t| {
                    fetch_response::FetchableTopicResponse::default()
                        .with_topic(t.topic)
                        .with_topic_id(t.topic_id)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    fetch_response::PartitionData::default()
                                        .with_partition_index(p.partition)
                                        .with_error_code(UNSUPPORTED)
                                        .with_high_watermark(-1)
                                        .with_records(Some(Bytes::new()))
                                })
                                .collect(),
                        )
                })
                .collect();
            FetchResponse::default()
                .with_error_code(UNSUPPORTED)
                .with_responses(responses)
                .encode(&mut out, version)
        }
        ApiKey::ListOffsets => {
            let request = ListOffsetsRequest::decode(buf, version).map_err(text)?;
            let topics = request
                .topics
                .into_iter()
                .map(|t| {
                    list_offsets_response::ListOffsetsTopicResponse::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    list_offsets_response::ListOffsetsPartitionResponse::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(UNSUPPORTED)
                                        .with_offset(-1)
                                })
                                .collect(),
                        )
                })
                .collect();
            ListOffsetsResponse::default()
                .with_topics(topics)
                .encode(&mut out, version)
        }
        ApiKey::Metadata => {
            let request = MetadataRequest::decode(buf, version).map_err(text)?;
            let topics = request
                .topics
                .unwrap_or_default()
                .into_iter()
                .map(|t| {
                    metadata_response::MetadataResponseTopic::default()
                        .with_name(t.name)
                        .with_topic_id(t.topic_id)
                        .with_error_code(UNSUPPORTED)
                })
                .collect();
            MetadataResponse::default()
                .with_error_code(UNSUPPORTED)
                .with_topics(topics)
                .encode(&mut out, version)
        }
        ApiKey::CreateTopics => {
            let request = CreateTopicsRequest::decode(buf, version).map_err(text)?;
            let topics = request
                .topics
                .into_iter()
                .map(|t| {
                    create_topics_response::CreatableTopicResult::default()
                        .with_name(t.name)
                        .with_error_code(UNSUPPORTED)
                })
                .collect();
            CreateTopicsResponse::default()
                .with_topics(topics)
                .encode(&mut out, version)
        }
        ApiKey::InitProducerId => {
            InitProducerIdRequest::decode(buf, version).map_err(text)?;
            InitProducerIdResponse::default()
                .with_error_code(UNSUPPORTED)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .encode(&mut out, version)
        }
        ApiKey::FindCoordinator => {
            let request = FindCoordinatorRequest::decode(buf, version).map_err(text)?;
            let coordinators = request
                .coordinator_keys
                .into_iter()
                .map(|key| {
                    find_coordinator_response::Coordinator::default()
                        .with_key(key)
                        .with_node_id(BrokerId(-1))
                        .with_error_code(UNSUPPORTED)
                })
                .collect();
            // v4 (KIP-699) moved the answer into one entry per key.
            let response = if version >= 4 {
                FindCoordinatorResponse::default().with_coordinators(coordinators)
            } else {
                FindCoordinatorResponse::default()
                    .with_error_code(UNSUPPORTED)
                    .with_node_id(BrokerId(-1))
            };
            response.encode(&mut out, version)
        }
        ApiKey::JoinGroup => {
            JoinGroupRequest::decode(buf, version).map_err(text)?;
            JoinGroupResponse::default()
                .with_error_code(UNSUPPORTED)
                .with_generation_id(-1)
                .encode(&mut out, version)
        }
        ApiKey::Heartbeat => {
            HeartbeatRequest::decode(buf, version).map_err(text)?;
            HeartbeatResponse::default()
                .with_error_code(UNSUPPORTED)
                .encode(&mut out, version)
        }
        ApiKey::LeaveGroup => {
            LeaveGroupRequest::decode(buf, version).map_err(text)?;
            LeaveGroupResponse::default()
                .with_error_code(UNSUPPORTED)
                .encode(&mut out, version)
        }
        ApiKey::SyncGroup => {
            SyncGroupRequest::decode(buf, version).map_err(text)?;
            SyncGroupResponse::default()
                .with_error_code(UNSUPPORTED)
                .encode(&mut out, version)
        }
        ApiKey::ListTransactions => {
            ListTransactionsRequest::decode(buf, version).map_err(text)?;
            ListTransactionsResponse::default()
                .with_error_code(UNSUPPORTED)
                .encode(&mut out, version)
        }
        ApiKey::AddOffsetsToTxn => {
            AddOffsetsToTxnRequest::decode(buf, version).map_err(text)?;
            AddOffsetsToTxnResponse::default()
                .with_error_code(UNSUPPORTED)
                .encode(&mut out, version)
        }
        ApiKey::EndTxn => {
            EndTxnRequest::decode(buf, version).map_err(text)?;
            EndTxnResponse::default()
                .with_error_code(UNSUPPORTED)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1)
                .encode(&mut out, version)
        }
        ApiKey::AddPartitionsToTxn => {
            AddPartitionsToTxnRequest::decode(buf, version).map_err(text)?;
            // v4+ (the only versions not served) carry a top-level code.
            AddPartitionsToTxnResponse::default()
                .with_error_code(UNSUPPORTED)
                .encode(&mut out, version)
        }
        ApiKey::TxnOffsetCommit => {
            let request = TxnOffsetCommitRequest::decode(buf, version).map_err(text)?;
            let topics = request
                .topics
                .into_iter()
                .map(|t| {
                    txn_offset_commit_response::TxnOffsetCommitResponseTopic::default()
                        .with_name(t.name)
                        .with_partitions(
                            t.partitions
                                .iter()
                                .map(|p| {
                                    txn_offset_commit_response::TxnOffsetCommitResponsePartition::default()
                                        .with_partition_index(p.partition_index)
                                        .with_error_code(UNSUPPORTED)
                                })
                                .collect(),
                        )
                })
                .collect();
            TxnOffsetCommitResponse::default()
                .with_topics(topics)
                .encode(&mut out, version)
        }
        _ => return Err(format!("{key:?} has no UNSUPPORTED_VERSION answer")),
    };
    encoded.map_err(text)?;
    Ok(out)
}

fn text(e: anyhow::Error) -> Failure {
    format!("{e:#}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every answerable API at every codec version: a default request decodes and its
    /// answer encodes (a field the schema cannot carry at that version would fail).
    #[test]
    fn every_answerable_api_answers_at_every_codec_version() {
        let keys = [
            ApiKey::Produce,
            ApiKey::Fetch,
            ApiKey::ListOffsets,
            ApiKey::Metadata,
            ApiKey::CreateTopics,
            ApiKey::InitProducerId,
            ApiKey::FindCoordinator,
            ApiKey::JoinGroup,
            ApiKey::Heartbeat,
            ApiKey::LeaveGroup,
            ApiKey::SyncGroup,
            ApiKey::ListTransactions,
            ApiKey::AddOffsetsToTxn,
            ApiKey::EndTxn,
            ApiKey::AddPartitionsToTxn,
            ApiKey::TxnOffsetCommit,
        ];
        let mut answered_versions = 0;
        for key in keys {
            let range = answerable(key).expect("answerable");
            for version in range.min..=range.max {
                let mut request = BytesMut::new();
                let encoded = match key {
                    ApiKey::Produce => ProduceRequest::default().encode(&mut request, version),
                    ApiKey::Fetch => FetchRequest::default().encode(&mut request, version),
                    ApiKey::ListOffsets => {
                        ListOffsetsRequest::default().encode(&mut request, version)
                    }
                    ApiKey::Metadata => MetadataRequest::default().encode(&mut request, version),
                    ApiKey::CreateTopics => {
                        CreateTopicsRequest::default().encode(&mut request, version)
                    }
                    ApiKey::InitProducerId => {
                        InitProducerIdRequest::default().encode(&mut request, version)
                    }
                    ApiKey::FindCoordinator => {
                        FindCoordinatorRequest::default().encode(&mut request, version)
                    }
                    ApiKey::JoinGroup => JoinGroupRequest::default().encode(&mut request, version),
                    ApiKey::Heartbeat => HeartbeatRequest::default().encode(&mut request, version),
                    ApiKey::LeaveGroup => {
                        LeaveGroupRequest::default().encode(&mut request, version)
                    }
                    ApiKey::SyncGroup => SyncGroupRequest::default().encode(&mut request, version),
                    ApiKey::ListTransactions => {
                        ListTransactionsRequest::default().encode(&mut request, version)
                    }
                    ApiKey::AddOffsetsToTxn => {
                        AddOffsetsToTxnRequest::default().encode(&mut request, version)
                    }
                    ApiKey::EndTxn => EndTxnRequest::default().encode(&mut request, version),
                    ApiKey::AddPartitionsToTxn => {
                        AddPartitionsToTxnRequest::default().encode(&mut request, version)
                    }
                    ApiKey::TxnOffsetCommit => {
                        TxnOffsetCommitRequest::default().encode(&mut request, version)
                    }
                    _ => unreachable!("listed above"),
                };
                if encoded.is_err() {
                    // A default request the schema cannot carry at this version (a
                    // field only some versions have): nothing a client could send.
                    continue;
                }
                let answered = answer(key, version, &mut request.freeze());
                assert!(answered.is_ok(), "{key:?} v{version}: {answered:?}");
                answered_versions += 1;
            }
        }
        // Most versions of every API: the skip above is the exception.
        assert!(
            answered_versions >= 80,
            "{answered_versions} versions answered"
        );
    }
}
