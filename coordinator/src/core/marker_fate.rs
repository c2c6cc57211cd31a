//! What becomes of one partition after a round of markers: written, tried again,
//! dropped because its topic is gone, or a stop (fenced, refused). Pure: the shell
//! (`markers.rs`) gathers the answers and the catalog's word, this decides.
//!
//! The invariant: a COMMIT/ABORT marker is dropped only when the topic catalog (etcd,
//! or the single-node broker's own list) says the partition does not exist: the name
//! has no incarnation, or the one it has is too small to hold the partition. A broker's
//! UNKNOWN_TOPIC_OR_PARTITION alone never drops one, because a broker that has not yet
//! learned of a new topic answers the same, and dropping a marker of a partition that
//! exists would leave its transaction open (its last stable offset stuck) for good.
//! A BEGIN is never dropped: the producer is told instead.

use idem_proto::v1::ControlType;
use idem_proto::ErrorCode;

use crate::topic_catalog::TopicPresence;

/// What one partition's answer means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MarkerOutcome {
    Done,
    Retry,
    /// A COMMIT/ABORT for a partition the topic catalog no longer holds: given up
    /// (only ever decided by [`settle`], on the catalog's word).
    Dropped,
    Fenced,
    Refused,
}

/// Classifies one partition's answer code to a marker of type `control`, before the
/// catalog is heard ([`settle`] decides the rest).
pub fn classify_marker(control: ControlType, code: ErrorCode) -> MarkerOutcome {
    use ErrorCode as E;
    match code {
        E::None => MarkerOutcome::Done,
        E::TransactionCoordinatorFenced => MarkerOutcome::Fenced,
        // A COMMIT/ABORT below the producer's epoch there: a newer coordinator already
        // ended this transaction with a later marker.
        E::InvalidProducerEpoch | E::ProducerFenced if control != ControlType::Begin => {
            MarkerOutcome::Fenced
        }
        E::NotLeaderOrFollower
        | E::LeaderNotAvailable
        | E::FencedLeaderEpoch
        | E::UnknownTopicOrPartition
        | E::RequestTimedOut
        | E::NotEnoughReplicas
        | E::NotEnoughReplicasAfterAppend
        | E::CoordinatorLoadInProgress
        | E::UnknownServerError => MarkerOutcome::Retry,
        _ => MarkerOutcome::Refused,
    }
}

/// One partition's answer in a round of markers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionAnswer {
    /// Its leader answered with this code.
    Code(ErrorCode),
    /// The cluster's metadata lists no such partition: no leader to send it to.
    NotInMetadata,
    /// No leader known for now, or the request got no answer.
    NoAnswer,
}

/// Whether settling `answer` needs the catalog's word on the partition's topic: only an
/// answer a deleted topic gives, and only for a marker that may be dropped.
pub fn asks_catalog(control: ControlType, answer: PartitionAnswer) -> bool {
    control != ControlType::Begin
        && matches!(
            answer,
            PartitionAnswer::NotInMetadata
                | PartitionAnswer::Code(ErrorCode::UnknownTopicOrPartition)
        )
}

/// Settles one partition's `answer` to a marker of type `control`. `catalog` is what
/// the topic catalog holds under the partition's topic, when it was read this round
/// (`None`: not asked, or it could not be read).
pub fn settle(
    control: ControlType,
    answer: PartitionAnswer,
    partition: i32,
    catalog: Option<&TopicPresence>,
) -> MarkerOutcome {
    if asks_catalog(control, answer) && partition_is_gone(partition, catalog) {
        return MarkerOutcome::Dropped;
    }
    match answer {
        PartitionAnswer::Code(code) => classify_marker(control, code),
        PartitionAnswer::NotInMetadata if control == ControlType::Begin => MarkerOutcome::Refused,
        PartitionAnswer::NotInMetadata | PartitionAnswer::NoAnswer => MarkerOutcome::Retry,
    }
}

/// Whether the catalog says `partition` of the topic does not exist.
fn partition_is_gone(partition: i32, catalog: Option<&TopicPresence>) -> bool {
    match catalog {
        None => false,
        Some(TopicPresence::Absent) => true,
        // Partitions only grow, so one past the count is of an older, larger
        // incarnation of the name.
        Some(TopicPresence::Present { partitions, .. }) => partition >= *partitions,
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn present(partitions: i32) -> TopicPresence {
        TopicPresence::Present {
            topic_id: "00".repeat(16),
            partitions,
        }
    }

    const UNKNOWN: PartitionAnswer = PartitionAnswer::Code(ErrorCode::UnknownTopicOrPartition);

    #[test]
    fn a_fenced_coordinator_stops_for_every_marker_type() {
        for control in [ControlType::Begin, ControlType::Commit, ControlType::Abort] {
            assert_eq!(
                classify_marker(control, ErrorCode::TransactionCoordinatorFenced),
                MarkerOutcome::Fenced
            );
            assert_eq!(
                classify_marker(control, ErrorCode::None),
                MarkerOutcome::Done
            );
            for code in [
                ErrorCode::NotLeaderOrFollower,
                ErrorCode::LeaderNotAvailable,
                ErrorCode::NotEnoughReplicas,
                ErrorCode::RequestTimedOut,
                ErrorCode::UnknownTopicOrPartition,
            ] {
                assert_eq!(classify_marker(control, code), MarkerOutcome::Retry);
            }
        }
    }

    #[test]
    fn an_epoch_refusal_fences_an_end_marker_but_is_told_to_the_producer_for_begin() {
        assert_eq!(
            classify_marker(ControlType::Commit, ErrorCode::InvalidProducerEpoch),
            MarkerOutcome::Fenced
        );
        assert_eq!(
            classify_marker(ControlType::Abort, ErrorCode::InvalidProducerEpoch),
            MarkerOutcome::Fenced
        );
        assert_eq!(
            classify_marker(ControlType::Begin, ErrorCode::InvalidProducerEpoch),
            MarkerOutcome::Refused
        );
        assert_eq!(
            classify_marker(ControlType::Begin, ErrorCode::InvalidTxnState),
            MarkerOutcome::Refused
        );
    }

    #[test]
    fn a_deleted_topics_partition_is_dropped_for_an_end_marker() {
        for control in [ControlType::Commit, ControlType::Abort] {
            for answer in [UNKNOWN, PartitionAnswer::NotInMetadata] {
                assert_eq!(
                    settle(control, answer, 0, Some(&TopicPresence::Absent)),
                    MarkerOutcome::Dropped
                );
            }
        }
    }

    #[test]
    fn a_topic_the_catalog_lists_is_retried_however_unknown_a_broker_says_it_is() {
        // The broker has not learned of the topic yet: the marker must wait for it.
        assert_eq!(
            settle(ControlType::Commit, UNKNOWN, 2, Some(&present(3))),
            MarkerOutcome::Retry
        );
        assert_eq!(
            settle(
                ControlType::Abort,
                PartitionAnswer::NotInMetadata,
                0,
                Some(&present(1))
            ),
            MarkerOutcome::Retry
        );
    }

    #[test]
    fn without_the_catalogs_word_nothing_is_dropped() {
        assert_eq!(
            settle(ControlType::Commit, UNKNOWN, 0, None),
            MarkerOutcome::Retry
        );
        assert_eq!(
            settle(ControlType::Commit, PartitionAnswer::NotInMetadata, 0, None),
            MarkerOutcome::Retry
        );
    }

    #[test]
    fn a_partition_past_a_recreated_topics_count_is_dropped() {
        // Deleted and created again with fewer partitions: partition 5 is gone for good.
        assert_eq!(
            settle(ControlType::Commit, UNKNOWN, 5, Some(&present(2))),
            MarkerOutcome::Dropped
        );
    }

    #[test]
    fn a_begin_is_never_dropped_an_unlisted_partition_refuses_it() {
        assert_eq!(
            settle(ControlType::Begin, UNKNOWN, 0, Some(&TopicPresence::Absent)),
            MarkerOutcome::Retry
        );
        assert_eq!(
            settle(
                ControlType::Begin,
                PartitionAnswer::NotInMetadata,
                0,
                Some(&TopicPresence::Absent)
            ),
            MarkerOutcome::Refused
        );
        assert!(!asks_catalog(ControlType::Begin, UNKNOWN));
    }

    #[test]
    fn only_an_unknown_topic_answer_asks_the_catalog() {
        assert!(asks_catalog(ControlType::Commit, UNKNOWN));
        assert!(asks_catalog(
            ControlType::Abort,
            PartitionAnswer::NotInMetadata
        ));
        assert!(!asks_catalog(
            ControlType::Commit,
            PartitionAnswer::NoAnswer
        ));
        assert!(!asks_catalog(
            ControlType::Commit,
            PartitionAnswer::Code(ErrorCode::NotLeaderOrFollower)
        ));
        assert!(!asks_catalog(
            ControlType::Commit,
            PartitionAnswer::Code(ErrorCode::None)
        ));
    }

    fn any_control() -> impl Strategy<Value = ControlType> {
        prop_oneof![
            Just(ControlType::Begin),
            Just(ControlType::Commit),
            Just(ControlType::Abort)
        ]
    }

    fn any_answer() -> impl Strategy<Value = PartitionAnswer> {
        prop_oneof![
            Just(PartitionAnswer::NotInMetadata),
            Just(PartitionAnswer::NoAnswer),
            (-1i32..120).prop_map(|c| PartitionAnswer::Code(
                ErrorCode::try_from(c).unwrap_or(ErrorCode::UnknownServerError)
            )),
        ]
    }

    fn any_catalog() -> impl Strategy<Value = Option<TopicPresence>> {
        prop_oneof![
            Just(None),
            Just(Some(TopicPresence::Absent)),
            (0i32..8).prop_map(|n| Some(present(n))),
        ]
    }

    proptest! {
        #[test]
        fn dropped_only_for_an_end_marker_of_a_partition_the_catalog_does_not_hold(
            control in any_control(),
            answer in any_answer(),
            partition in 0i32..8,
            catalog in any_catalog(),
        ) {
            if settle(control, answer, partition, catalog.as_ref()) == MarkerOutcome::Dropped {
                prop_assert!(control != ControlType::Begin);
                prop_assert!(asks_catalog(control, answer));
                match &catalog {
                    Some(TopicPresence::Absent) => {}
                    Some(TopicPresence::Present { partitions, .. }) => {
                        prop_assert!(partition >= *partitions)
                    }
                    None => prop_assert!(false, "dropped without the catalog's word"),
                }
            }
        }

        #[test]
        fn a_partition_the_catalog_holds_is_never_dropped(
            control in any_control(),
            answer in any_answer(),
            partitions in 1i32..8,
            partition in 0i32..8,
        ) {
            let partition = partition % partitions;
            prop_assert_ne!(
                settle(control, answer, partition, Some(&present(partitions))),
                MarkerOutcome::Dropped
            );
        }

        #[test]
        fn an_answer_that_does_not_ask_the_catalog_settles_as_its_code_says(
            control in any_control(),
            answer in any_answer(),
            catalog in any_catalog(),
        ) {
            if let PartitionAnswer::Code(code) = answer {
                if !asks_catalog(control, answer) {
                    prop_assert_eq!(
                        settle(control, answer, 0, catalog.as_ref()),
                        classify_marker(control, code)
                    );
                }
            }
        }
    }
}
