//! Internal topics (`idem_proto::internal`: names starting with `__`) hold the
//! coordinators' own state; one batch a coordinator did not write makes a slice of it
//! unreadable. So a client may read them but never create or write them: a request must
//! declare the coordinator making it, and the declaration must agree with what this
//! broker knows of the partition's owner. Pure: the service passes what it knows.
//!
//! A guard against mistakes (a probe, a mirroring tool, a typo), not access control:
//! idem has no authentication, and the declaration is as forgeable as a WriteTxnMarkers.

use idem_proto::batch::BatchHeader;
use idem_proto::internal::is_internal_topic;
use idem_proto::txn::OFFSETS_TOPIC;

use crate::error::BrokerError;

/// What this broker knows of the coordinator that owns one partition of an internal
/// topic (from etcd in a cluster; nothing on a single node).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OwnerFacts {
    /// The latest coordinator epoch claimed for the partition.
    pub coordinator_epoch: Option<i32>,
    /// The producer id every owner of the partition writes it with.
    pub writer_producer_id: Option<i64>,
}

/// CreateTopics: an internal name needs the creating coordinator's id.
pub fn check_create(name: &str, coordinator_id: Option<i32>) -> Result<(), BrokerError> {
    if is_internal_topic(name) && coordinator_id.is_none() {
        return Err(refusal(
            name,
            "names starting with \"__\" are internal topics, created only by a transaction coordinator",
        ));
    }
    Ok(())
}

/// DeleteTopics: an internal topic is never deleted (Kafka refuses it too): the
/// coordinators would lose every transaction they keep there.
pub fn check_delete(name: &str) -> Result<(), BrokerError> {
    if is_internal_topic(name) {
        return Err(refusal(
            name,
            "names starting with \"__\" are internal topics, holding the transaction coordinators' state; they are never deleted",
        ));
    }
    Ok(())
}

/// Produce: a batch for an internal topic must come from the partition's owning
/// coordinator, declared by `coordinator_epoch` (see `ProduceRequest.coordinator_epoch`).
/// Other topics pass whatever is declared.
pub fn check_produce(
    topic: &str,
    coordinator_epoch: Option<i32>,
    header: Option<&BatchHeader>,
    owner: OwnerFacts,
) -> Result<(), BrokerError> {
    if !is_internal_topic(topic) {
        return Ok(());
    }
    let Some(declared) = coordinator_epoch else {
        return Err(refusal(
            topic,
            "it is internal: only the transaction coordinator that owns a partition writes to it",
        ));
    };
    // Undecodable bytes are refused as CORRUPT_MESSAGE by the append that follows.
    let Some(header) = header else {
        return Ok(());
    };
    if header.is_transactional() && topic == OFFSETS_TOPIC {
        // TxnOffsetCommit: the group coordinator writes the offsets inside the
        // producer's transaction, so the batch carries that producer's id and epoch,
        // and the partition's open transaction (its BEGIN) admits it or not. The
        // declaration still has to be the current owner's.
        return match owner.coordinator_epoch.filter(|c| *c > declared) {
            Some(current) => Err(BrokerError::CoordinatorFenced {
                producer_id: header.producer_id,
                current,
                got: declared,
            }),
            None => Ok(()),
        };
    }
    if !header.has_producer_id() || header.is_transactional() {
        return Err(refusal(
            topic,
            "a coordinator appends idempotent, non-transactional batches only (and transactional offsets to __consumer_offsets)",
        ));
    }
    // The writer's producer epoch is its coordinator epoch: the producer state's epoch
    // fencing is then the coordinator fencing, as for transaction markers.
    if i32::from(header.producer_epoch) != declared {
        return Err(refusal(
            topic,
            &format!(
                "producer epoch {} is not the declared coordinator epoch {declared}",
                header.producer_epoch
            ),
        ));
    }
    if let Some(current) = owner.coordinator_epoch.filter(|c| *c > declared) {
        return Err(BrokerError::CoordinatorFenced {
            producer_id: header.producer_id,
            current,
            got: declared,
        });
    }
    if let Some(writer) = owner
        .writer_producer_id
        .filter(|w| *w != header.producer_id)
    {
        return Err(refusal(
            topic,
            &format!(
                "producer id {} is not the partition's coordinator writer {writer}",
                header.producer_id
            ),
        ));
    }
    Ok(())
}

fn refusal(topic: &str, reason: &str) -> BrokerError {
    BrokerError::InternalTopic {
        topic: topic.to_string(),
        reason: reason.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use idem_proto::batch::{self, ProducerInfo, Record, ATTR_TRANSACTIONAL};
    use idem_proto::txn::TXN_LOG_TOPIC;
    use idem_proto::ErrorCode;

    use super::*;

    fn header(producer_id: i64, producer_epoch: i16, attributes: u16) -> BatchHeader {
        let bytes = batch::encode(
            ProducerInfo {
                producer_id,
                producer_epoch,
                base_sequence: if producer_id < 0 { -1 } else { 0 },
            },
            attributes,
            &[Record::default()],
        );
        batch::decode_header(&bytes).expect("header")
    }

    fn code(result: Result<(), BrokerError>) -> ErrorCode {
        result.map_or_else(|e| e.code(), |()| ErrorCode::None)
    }

    const KNOWN: OwnerFacts = OwnerFacts {
        coordinator_epoch: Some(4),
        writer_producer_id: Some(77),
    };

    #[test]
    fn given_no_declared_coordinator_when_writing_an_internal_topic_then_invalid_topic() {
        for topic in [TXN_LOG_TOPIC, "__consumer_offsets"] {
            let result =
                check_produce(topic, None, Some(&header(-1, -1, 0)), OwnerFacts::default());
            let error = result.expect_err("refused");
            assert_eq!(error.code(), ErrorCode::InvalidTopicException);
            assert!(error.to_string().contains(topic), "{error}");
        }
    }

    #[test]
    fn given_an_ordinary_topic_then_anything_declared_passes() {
        assert_eq!(
            code(check_produce("orders", None, None, KNOWN)),
            ErrorCode::None
        );
        assert_eq!(
            code(check_produce(
                "orders",
                Some(1),
                Some(&header(-1, -1, 0)),
                KNOWN
            )),
            ErrorCode::None
        );
    }

    #[test]
    fn given_the_owning_writer_then_its_append_passes_with_or_without_known_facts() {
        let ours = header(77, 4, 0);
        assert_eq!(
            code(check_produce(TXN_LOG_TOPIC, Some(4), Some(&ours), KNOWN)),
            ErrorCode::None
        );
        assert_eq!(
            code(check_produce(
                TXN_LOG_TOPIC,
                Some(4),
                Some(&ours),
                OwnerFacts::default()
            )),
            ErrorCode::None,
            "a single node, or a catalog that has not seen the claim yet"
        );
        // A newer claim than the catalog has seen is the new owner, not a stale one.
        let newer = header(77, 5, 0);
        assert_eq!(
            code(check_produce(TXN_LOG_TOPIC, Some(5), Some(&newer), KNOWN)),
            ErrorCode::None
        );
    }

    #[test]
    fn given_a_declaration_that_disagrees_with_the_batch_or_the_owner_then_refused() {
        let cases = [
            (
                "no producer id",
                Some(4),
                header(-1, -1, 0),
                ErrorCode::InvalidTopicException,
            ),
            (
                "transactional",
                Some(4),
                header(77, 4, ATTR_TRANSACTIONAL),
                ErrorCode::InvalidTopicException,
            ),
            (
                "epoch is not the declared one",
                Some(4),
                header(77, 3, 0),
                ErrorCode::InvalidTopicException,
            ),
            (
                "an older coordinator",
                Some(3),
                header(77, 3, 0),
                ErrorCode::TransactionCoordinatorFenced,
            ),
            (
                "another producer id",
                Some(4),
                header(78, 4, 0),
                ErrorCode::InvalidTopicException,
            ),
        ];
        for (case, declared, header, expected) in cases {
            assert_eq!(
                code(check_produce(TXN_LOG_TOPIC, declared, Some(&header), KNOWN)),
                expected,
                "{case}"
            );
        }
    }

    #[test]
    fn given_transactional_offsets_then_only_the_current_owner_may_write_them_and_only_to_consumer_offsets(
    ) {
        // A producer's batch (its own id and epoch), stored by the group coordinator.
        let offsets = header(900, 12, ATTR_TRANSACTIONAL);
        assert_eq!(
            code(check_produce(OFFSETS_TOPIC, Some(4), Some(&offsets), KNOWN)),
            ErrorCode::None
        );
        assert_eq!(
            code(check_produce(OFFSETS_TOPIC, Some(3), Some(&offsets), KNOWN)),
            ErrorCode::TransactionCoordinatorFenced,
            "an older owner"
        );
        assert_eq!(
            code(check_produce(OFFSETS_TOPIC, None, Some(&offsets), KNOWN)),
            ErrorCode::InvalidTopicException,
            "a client"
        );
        assert_eq!(
            code(check_produce(TXN_LOG_TOPIC, Some(4), Some(&offsets), KNOWN)),
            ErrorCode::InvalidTopicException,
            "the transaction log takes no transactional batch"
        );
    }

    #[test]
    fn given_an_internal_name_when_created_without_a_coordinator_then_invalid_topic() {
        let error = check_create("__consumer_offsets", None).expect_err("refused");
        assert_eq!(error.code(), ErrorCode::InvalidTopicException);
        assert!(error.to_string().contains("__consumer_offsets"), "{error}");
        assert!(check_create(TXN_LOG_TOPIC, Some(1)).is_ok());
        assert!(check_create("orders", None).is_ok());
        assert!(check_create("_orders", None).is_ok());
    }
}
