//! Kafka's consumer protocol as a group's requests carry it: the protocol type every
//! idem group has (`consumer`), the member ids the broker gives members that join
//! without one (KIP-848 v0 and classic JoinGroup alike), and the embedded
//! ConsumerProtocolSubscription (read from JoinGroup) and ConsumerProtocolAssignment
//! (written into SyncGroup), with the `kafka-protocol` crate's codecs.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use idem_proto::v1::GroupTopicPartitions;
use kafka_protocol::messages::consumer_protocol_assignment::TopicPartition;
use kafka_protocol::messages::{
    ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes};

/// The protocol type of every idem group (KIP-848 or classic members alike).
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

/// The ConsumerProtocolAssignment version written: v0's fields are every version's.
const ASSIGNMENT_VERSION: i16 = 0;

/// A member id for a member that joins without one: a random UUID, as Kafka's.
pub fn new_member_id() -> String {
    uuid::Uuid::from_bytes(rand::random()).to_string()
}

/// A ConsumerProtocolSubscription (version prefix, then the body); a version newer
/// than the codec's is read as its newest (later versions only add fields).
pub fn subscription(metadata: &Bytes) -> Option<ConsumerProtocolSubscription> {
    let mut buf = metadata.clone();
    if buf.remaining() < 2 {
        return None;
    }
    let version = buf.get_i16();
    if version < 0 {
        return None;
    }
    let version = version.min(ConsumerProtocolSubscription::VERSIONS.max);
    ConsumerProtocolSubscription::decode(&mut buf, version).ok()
}

/// Kafka's ConsumerProtocolAssignment bytes (version prefix, then the body).
pub fn encode_assignment(topics: &[GroupTopicPartitions]) -> anyhow::Result<Bytes> {
    let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(
        topics
            .iter()
            .map(|t| {
                TopicPartition::default()
                    .with_topic(TopicName(StrBytes::from_string(t.topic.clone())))
                    .with_partitions(t.partitions.clone())
            })
            .collect(),
    );
    let mut out = BytesMut::new();
    out.put_i16(ASSIGNMENT_VERSION);
    assignment.encode(&mut out, ASSIGNMENT_VERSION)?;
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::consumer_protocol_subscription::TopicPartition as OwnedPartition;

    #[test]
    fn a_subscription_reads_back_at_every_version_and_junk_does_not() {
        for version in 0..=3 {
            let sub = ConsumerProtocolSubscription::default()
                .with_topics(vec![StrBytes::from_static_str("orders")])
                .with_owned_partitions(if version >= 1 {
                    vec![OwnedPartition::default()
                        .with_topic(TopicName(StrBytes::from_static_str("orders")))
                        .with_partitions(vec![1, 4])]
                } else {
                    Vec::new()
                });
            let mut out = BytesMut::new();
            out.put_i16(version);
            sub.encode(&mut out, version).expect("encodes");
            let read = subscription(&out.freeze()).expect("decodes");
            assert_eq!(read.topics, sub.topics, "v{version}");
            assert_eq!(read.owned_partitions, sub.owned_partitions, "v{version}");
        }
        assert!(subscription(&Bytes::from_static(&[0])).is_none());
        assert!(subscription(&Bytes::from_static(&[0xff, 0xff, 1])).is_none());
        assert!(subscription(&Bytes::from_static(&[0, 0, 0, 9, b'x'])).is_none());
    }

    #[test]
    fn an_assignment_reads_back_as_kafka_clients_read_it() {
        let topics = vec![GroupTopicPartitions {
            topic: "orders".into(),
            partitions: vec![0, 3],
        }];
        let mut bytes = encode_assignment(&topics).expect("encodes");
        let version = bytes.get_i16();
        let read = ConsumerProtocolAssignment::decode(&mut bytes, version).expect("decodes");
        assert_eq!(read.assigned_partitions.len(), 1);
        assert_eq!(read.assigned_partitions[0].topic.0.as_str(), "orders");
        assert_eq!(read.assigned_partitions[0].partitions, vec![0, 3]);
    }
}
