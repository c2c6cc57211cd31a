//! The ordering core, case by case, then a randomized run against a model of an
//! idempotent broker: whatever the interleaving, the log equals the send order.

use std::collections::{BTreeMap, HashMap, VecDeque};

use proptest::prelude::*;

use super::*;

const PID: ProducerIdAndEpoch = ProducerIdAndEpoch {
    producer_id: 7,
    producer_epoch: 0,
};
/// What the broker answers to a bump of `PID`: the same id, the next epoch (KIP-360).
const BUMPED: ProducerIdAndEpoch = ProducerIdAndEpoch {
    producer_id: 7,
    producer_epoch: 1,
};

fn config(delivery: Delivery) -> InflightConfig {
    InflightConfig {
        delivery,
        max_in_flight: 5,
        delivery_timeout: Duration::from_secs(120),
        retry_backoff: Duration::from_millis(100),
        transactional: false,
    }
}

fn records(tag: u64, count: usize) -> Vec<Record> {
    (0..count)
        .map(|i| Record {
            key: None,
            value: Some(Bytes::from(format!("{tag}:{i}"))),
            headers: Vec::new(),
            timestamp_ms: 1_000,
        })
        .collect()
}

#[derive(Debug, Clone)]
struct Sent {
    batch: BatchId,
    attempt: u32,
    producer: ProducerInfo,
    records: Bytes,
}

struct Harness {
    m: PartitionInflight,
    now: Instant,
    sent: Vec<Sent>,
    completed: BTreeMap<BatchId, Result<i64, ClientError>>,
    /// Producer identities asked for: fresh ids and epoch bumps.
    init_requests: usize,
    /// The identity each epoch bump was asked for.
    bumped_from: Vec<ProducerIdAndEpoch>,
    metadata_refreshes: usize,
}

impl Harness {
    fn new(delivery: Delivery) -> Self {
        Self::with(config(delivery), Some(PID))
    }

    fn with(config: InflightConfig, producer: Option<ProducerIdAndEpoch>) -> Self {
        Harness {
            m: PartitionInflight::new(config, producer),
            now: Instant::now(),
            sent: Vec::new(),
            completed: BTreeMap::new(),
            init_requests: 0,
            bumped_from: Vec::new(),
            metadata_refreshes: 0,
        }
    }

    fn apply(&mut self, commands: Vec<Command>) {
        for command in commands {
            match command {
                Command::Send {
                    batch,
                    attempt,
                    producer,
                    records,
                } => self.sent.push(Sent {
                    batch,
                    attempt,
                    producer,
                    records,
                }),
                Command::Complete { batch, result } => {
                    assert!(
                        self.completed.insert(batch, result).is_none(),
                        "{batch:?} completed twice"
                    );
                }
                Command::InitProducerId => self.init_requests += 1,
                Command::BumpProducerEpoch { current } => {
                    self.init_requests += 1;
                    self.bumped_from.push(current);
                }
                Command::RefreshMetadata => self.metadata_refreshes += 1,
            }
        }
    }

    fn push(&mut self, tag: u64, count: usize) -> BatchId {
        let records = records(tag, count);
        let (id, commands) = self.m.push(records, 100, self.now, self.now);
        self.apply(commands);
        id
    }

    fn last_attempt(&self, batch: BatchId) -> Sent {
        self.sent
            .iter()
            .rev()
            .find(|s| s.batch == batch)
            .cloned()
            .expect("batch was sent")
    }

    fn respond(&mut self, batch: BatchId, outcome: Outcome) {
        let attempt = self.last_attempt(batch).attempt;
        let commands = self.m.on_outcome(batch, attempt, outcome, self.now);
        self.apply(commands);
    }

    fn ok(&mut self, batch: BatchId, base_offset: i64) {
        self.respond(batch, Outcome::Appended { base_offset });
    }

    fn reject(&mut self, batch: BatchId, code: ErrorCode) {
        self.respond(
            batch,
            Outcome::Rejected {
                code,
                message: String::new(),
            },
        );
    }

    fn lose(&mut self, batch: BatchId) {
        self.respond(
            batch,
            Outcome::Lost(ClientError::Transport(tonic::Status::unavailable(
                "connection reset",
            ))),
        );
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        let commands = self.m.tick(self.now);
        self.apply(commands);
    }

    fn new_producer_id(&mut self, producer: ProducerIdAndEpoch) {
        let commands = self.m.on_producer_id(producer, self.now);
        self.apply(commands);
    }

    /// Batches sent from index `from` of the send log on.
    fn sent_since(&self, from: usize) -> Vec<BatchId> {
        self.sent[from..].iter().map(|s| s.batch).collect()
    }

    fn offset(&self, batch: BatchId) -> Option<i64> {
        match self.completed.get(&batch) {
            Some(Ok(offset)) => Some(*offset),
            _ => None,
        }
    }

    fn error(&self, batch: BatchId) -> &ClientError {
        match self.completed.get(&batch) {
            Some(Err(e)) => e,
            other => panic!("{batch:?} did not fail: {other:?}"),
        }
    }
}

// ---- exactly-once: the happy path ----

#[test]
fn given_in_order_acks_then_each_batch_completes_with_its_offset_and_sequences_are_consecutive() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 3);
    let b = h.push(1, 2);
    let c = h.push(2, 1);
    assert_eq!(h.sent_since(0), vec![a, b, c]);
    let seqs: Vec<i32> = h.sent.iter().map(|s| s.producer.base_sequence).collect();
    assert_eq!(seqs, vec![0, 3, 5]);
    assert!(h.sent.iter().all(|s| s.producer.producer_id == 7));
    h.ok(a, 0);
    h.ok(b, 3);
    h.ok(c, 5);
    assert_eq!(
        (h.offset(a), h.offset(b), h.offset(c)),
        (Some(0), Some(3), Some(5))
    );
    assert!(h.m.is_idle());
    assert_eq!(h.m.buffered_bytes(), 0);
}

#[test]
fn given_encoded_batch_then_header_carries_producer_id_epoch_and_sequence() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    h.push(0, 4);
    let b = h.push(1, 1);
    let header = batch::decode_header(&h.last_attempt(b).records).expect("header");
    assert_eq!(
        (
            header.producer_id,
            header.producer_epoch,
            header.base_sequence
        ),
        (7, 0, 4)
    );
    assert_eq!(header.record_count, 1);
}

#[test]
fn given_five_in_flight_when_acks_arrive_out_of_order_then_each_completes_and_nothing_is_resent() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let batches: Vec<_> = (0..5).map(|i| h.push(i, 1)).collect();
    assert_eq!(h.m.in_flight(), 5);
    for (i, b) in batches.iter().enumerate().rev() {
        h.ok(*b, i as i64);
    }
    assert_eq!(h.sent.len(), 5);
    for (i, b) in batches.iter().enumerate() {
        assert_eq!(h.offset(*b), Some(i as i64));
    }
    assert_eq!(h.m.phase(), Phase::Sending);
}

#[test]
fn given_window_full_when_a_sixth_batch_is_sealed_then_it_waits_for_the_oldest_ack() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let batches: Vec<_> = (0..6).map(|i| h.push(i, 1)).collect();
    assert_eq!(h.sent_since(0), batches[..5].to_vec());
    // An ack behind the oldest pending batch does not slide the window: if batch 0 was
    // appended but its answer is lost, the broker must still hold it among the
    // producer's last 5 batches when the retry comes.
    h.ok(batches[2], 2);
    assert_eq!(h.sent.len(), 5);
    h.ok(batches[0], 0);
    assert_eq!(h.sent_since(5), vec![batches[5]]);
    assert_eq!(h.last_attempt(batches[5]).producer.base_sequence, 5);
}

#[test]
fn given_sequence_near_i32_max_then_it_wraps_to_zero() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    h.m = PartitionInflight::new(config(Delivery::ExactlyOnce), Some(PID))
        .with_next_sequence(i32::MAX - 1);
    let a = h.push(0, 3);
    let b = h.push(1, 1);
    assert_eq!(h.last_attempt(a).producer.base_sequence, i32::MAX - 1);
    assert_eq!(h.last_attempt(b).producer.base_sequence, 1);
}

// ---- exactly-once: retries keep the send order ----

#[test]
fn given_first_fails_and_rest_out_of_order_then_all_are_resent_one_by_one_in_sequence_order() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let batches: Vec<_> = (0..5).map(|i| h.push(i, 1)).collect();
    let originals: Vec<Bytes> = batches.iter().map(|b| h.last_attempt(*b).records).collect();
    h.reject(batches[0], ErrorCode::NotLeaderOrFollower);
    assert_eq!(h.metadata_refreshes, 1);
    assert_eq!(
        h.m.phase(),
        Phase::Draining {
            new_producer_id: false
        }
    );
    // A batch sealed meanwhile is not sent while the partition drains.
    let late = h.push(5, 1);
    for b in &batches[1..] {
        h.reject(*b, ErrorCode::OutOfOrderSequenceNumber);
    }
    assert_eq!(h.m.phase(), Phase::Retrying);
    assert_eq!(h.sent.len(), 5, "nothing resent before the backoff");
    h.advance(Duration::from_millis(99));
    assert_eq!(h.sent.len(), 5);
    h.advance(Duration::from_millis(1));
    for (i, b) in batches.iter().enumerate() {
        // Exactly one request in flight: the lowest unacknowledged sequence.
        assert_eq!(h.sent_since(5 + i), vec![*b], "retry {i}");
        assert_eq!(h.m.in_flight(), 1);
        let resent = h.last_attempt(*b);
        assert_eq!(resent.attempt, 2);
        assert_eq!(resent.records, originals[i], "retries reuse the bytes");
        h.ok(*b, i as i64);
    }
    // All retried batches acknowledged: pipelining resumes with the late batch.
    assert_eq!(h.m.phase(), Phase::Sending);
    assert_eq!(h.sent_since(10), vec![late]);
    assert_eq!(h.last_attempt(late).producer.base_sequence, 5);
    for (i, b) in batches.iter().enumerate() {
        assert_eq!(h.offset(*b), Some(i as i64));
    }
}

#[test]
fn given_retried_head_fails_again_then_it_is_retried_again_before_anything_behind_it() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 1);
    let b = h.push(1, 1);
    h.reject(a, ErrorCode::NotEnoughReplicas);
    h.reject(b, ErrorCode::OutOfOrderSequenceNumber);
    h.advance(Duration::from_millis(100));
    assert_eq!(h.sent_since(2), vec![a]);
    h.reject(a, ErrorCode::NotEnoughReplicas);
    h.advance(Duration::from_millis(100));
    assert_eq!(h.sent_since(3), vec![a]);
    h.ok(a, 0);
    assert_eq!(h.sent_since(4), vec![b]);
    h.ok(b, 1);
    assert!(h.m.is_idle());
}

#[test]
fn given_lost_response_when_retry_is_answered_as_duplicate_then_future_gets_original_offset() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 2);
    let b = h.push(1, 2);
    let c = h.push(2, 2);
    let original = h.last_attempt(b).records;
    h.ok(a, 10);
    h.lose(b);
    // c was appended after b (the broker had b), its answer completes it right away.
    h.ok(c, 14);
    assert_eq!(h.offset(c), Some(14));
    h.advance(Duration::from_millis(100));
    let retry = h.last_attempt(b);
    assert_eq!((retry.attempt, retry.records), (2, original));
    // The broker answers the duplicate with the offsets of the first append.
    h.ok(b, 12);
    assert_eq!(h.offset(b), Some(12));
    assert_eq!(h.m.producer(), Some(PID), "no new producer id needed");
    assert!(h.m.is_idle());
}

#[test]
fn given_out_of_order_answer_overtaken_by_predecessors_ack_then_it_is_retried_not_reset() {
    // b reached the broker before a: b was refused, a appended. a's ack arrives first,
    // so b is now the head, but b was sent behind an unacknowledged a.
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 1);
    let b = h.push(1, 1);
    h.ok(a, 0);
    h.reject(b, ErrorCode::OutOfOrderSequenceNumber);
    assert_eq!(h.m.phase(), Phase::Retrying);
    h.advance(Duration::from_millis(100));
    assert_eq!(h.last_attempt(b).attempt, 2);
    assert_eq!(h.last_attempt(b).producer.producer_id, 7);
    h.ok(b, 1);
    assert_eq!(h.init_requests, 0);
}

// ---- exactly-once: leadership moves ----

#[test]
fn given_lost_response_then_metadata_is_refreshed_before_the_retry_which_keeps_identity_and_bytes()
{
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 3);
    let first = h.last_attempt(a);
    h.lose(a);
    assert_eq!(h.metadata_refreshes, 1, "the leader may have died or moved");
    assert_eq!(h.sent.len(), 1, "no retry before the backoff");
    h.advance(Duration::from_millis(100));
    let retry = h.last_attempt(a);
    assert_eq!(retry.attempt, 2);
    assert_eq!(
        retry.producer, first.producer,
        "same producer id, epoch, sequence"
    );
    assert_eq!(retry.records, first.records, "identical bytes");
    h.ok(a, 40);
    assert_eq!(h.offset(a), Some(40));
    assert_eq!((h.init_requests, h.bumped_from.len()), (0, 0));
}

#[test]
fn given_leader_dies_with_batches_in_flight_when_new_leader_has_the_first_then_retries_are_deduplicated_in_order(
) {
    // a was appended and replicated, then the leader died before answering (lost); b and
    // c reached a broker that no longer leads. The new leader holds a.
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 2);
    let b = h.push(1, 2);
    let c = h.push(2, 2);
    let sequences: Vec<i32> = [a, b, c]
        .iter()
        .map(|x| h.last_attempt(*x).producer.base_sequence)
        .collect();
    assert_eq!(sequences, vec![0, 2, 4]);
    h.lose(a);
    h.reject(c, ErrorCode::NotLeaderOrFollower);
    h.reject(b, ErrorCode::LeaderNotAvailable);
    assert!(h.metadata_refreshes >= 1);
    assert_eq!(h.m.phase(), Phase::Retrying);
    let before = h.sent.len();
    h.advance(Duration::from_millis(100));
    assert_eq!(
        h.sent_since(before),
        vec![a],
        "one at a time, lowest sequence first"
    );
    // The new leader recognises a's sequence and answers with a's original offset.
    h.ok(a, 100);
    assert_eq!(h.sent_since(before), vec![a, b]);
    h.ok(b, 102);
    assert_eq!(h.sent_since(before), vec![a, b, c]);
    h.ok(c, 104);
    for (batch, sequence) in [(a, 0), (b, 2), (c, 4)] {
        let sent = h.last_attempt(batch);
        assert_eq!(sent.producer.producer_id, PID.producer_id);
        assert_eq!(sent.producer.producer_epoch, PID.producer_epoch);
        assert_eq!(sent.producer.base_sequence, sequence);
    }
    assert_eq!(
        (h.offset(a), h.offset(b), h.offset(c)),
        (Some(100), Some(102), Some(104))
    );
    assert_eq!(
        (h.init_requests, h.bumped_from.len()),
        (0, 0),
        "no epoch bump"
    );
    assert_eq!(h.m.phase(), Phase::Sending);
}

#[test]
fn given_no_leader_known_for_a_while_then_the_batch_is_retried_until_the_delivery_timeout_not_written(
) {
    let mut h = Harness::with(
        InflightConfig {
            delivery_timeout: Duration::from_millis(450),
            ..config(Delivery::ExactlyOnce)
        },
        Some(PID),
    );
    let a = h.push(0, 1);
    for _ in 0..3 {
        h.reject(a, ErrorCode::LeaderNotAvailable);
        h.advance(Duration::from_millis(100));
    }
    h.reject(a, ErrorCode::LeaderNotAvailable);
    assert_eq!(h.metadata_refreshes, 4);
    h.advance(Duration::from_millis(200));
    match h.error(a) {
        ClientError::DeliveryTimeout {
            possibly_written, ..
        } => assert!(!possibly_written, "every attempt was refused"),
        other => panic!("expected a delivery timeout, got {other:?}"),
    }
}

// ---- exactly-once: a sequence that cannot continue ----

#[test]
fn given_unknown_producer_id_then_partition_bumps_its_epoch_and_resends_from_sequence_zero() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 2);
    h.ok(a, 0);
    let batches: Vec<_> = (1..4).map(|i| h.push(i, 2)).collect();
    assert_eq!(h.last_attempt(batches[0]).producer.base_sequence, 2);
    h.reject(batches[0], ErrorCode::UnknownProducerId);
    // Nothing more is sent, nor an id requested, while requests are in flight.
    assert_eq!(h.init_requests, 0);
    h.lose(batches[1]);
    h.reject(batches[2], ErrorCode::UnknownProducerId);
    assert_eq!(h.init_requests, 1);
    assert_eq!(
        h.bumped_from,
        vec![PID],
        "the epoch of the id in use is bumped"
    );
    assert_eq!(h.m.phase(), Phase::AwaitingProducerId);
    assert_eq!(h.m.producer(), None);
    assert!(h.completed.len() == 1, "no batch failed: none was written");
    let late = h.push(9, 1);
    h.advance(Duration::from_secs(1));
    assert_eq!(h.sent.len(), 4, "nothing sent without a producer id");
    h.new_producer_id(BUMPED);
    let resent: Vec<_> = h.sent[4..].to_vec();
    assert_eq!(
        resent.iter().map(|s| s.batch).collect::<Vec<_>>(),
        vec![batches[0], batches[1], batches[2], late]
    );
    let seqs: Vec<i32> = resent.iter().map(|s| s.producer.base_sequence).collect();
    assert_eq!(seqs, vec![0, 2, 4, 6]);
    assert_eq!(h.m.producer(), Some(BUMPED));
    for s in &resent {
        assert_eq!((s.producer.producer_id, s.producer.producer_epoch), (7, 1));
        let header = batch::decode_header(&s.records).expect("header");
        assert_eq!(
            (
                header.producer_id,
                header.producer_epoch,
                header.base_sequence
            ),
            (7, 1, s.producer.base_sequence)
        );
        batch::validate_produced(&s.records).expect("re-encoded batch is valid");
    }
    // Re-encoding keeps the records.
    let values: Vec<_> = batch::records(&resent[1].records)
        .expect("records")
        .into_iter()
        .map(|r| r.value)
        .collect();
    assert_eq!(
        values,
        vec![Some(Bytes::from("2:0")), Some(Bytes::from("2:1"))]
    );
}

#[test]
fn given_out_of_order_for_head_sent_after_predecessor_acked_then_epoch_bump_and_unwritten_head_is_resent(
) {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 1);
    h.ok(a, 0);
    let b = h.push(1, 1);
    let c = h.push(2, 1);
    h.reject(b, ErrorCode::OutOfOrderSequenceNumber);
    h.reject(c, ErrorCode::OutOfOrderSequenceNumber);
    assert_eq!(h.init_requests, 1);
    h.new_producer_id(BUMPED);
    let resent: Vec<_> = h.sent[3..].to_vec();
    assert_eq!(
        resent
            .iter()
            .map(|s| (s.batch, s.producer.base_sequence))
            .collect::<Vec<_>>(),
        vec![(b, 0), (c, 1)]
    );
    h.ok(b, 1);
    h.ok(c, 2);
    assert_eq!((h.offset(b), h.offset(c)), (Some(1), Some(2)));
}

#[test]
fn given_possibly_written_head_answered_out_of_order_then_it_fails_outcome_unknown_and_is_never_resent(
) {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 1);
    let b = h.push(1, 1);
    h.lose(a);
    h.reject(b, ErrorCode::OutOfOrderSequenceNumber);
    h.advance(Duration::from_millis(100));
    assert_eq!(h.sent_since(2), vec![a]);
    // The broker lost the producer's state: it cannot say whether a's first attempt
    // was appended.
    h.reject(a, ErrorCode::OutOfOrderSequenceNumber);
    assert!(matches!(
        h.error(a),
        ClientError::OutcomeUnknown { attempts: 2, .. }
    ));
    assert!(h.error(a).possibly_written());
    assert_eq!(h.init_requests, 1);
    h.new_producer_id(BUMPED);
    // b was refused on every attempt: resent under the new epoch. a never is.
    let resent: Vec<_> = h.sent[3..].iter().map(|s| (s.batch, s.producer)).collect();
    assert_eq!(resent.len(), 1);
    assert_eq!(resent[0].0, b);
    assert_eq!(
        (
            resent[0].1.producer_id,
            resent[0].1.producer_epoch,
            resent[0].1.base_sequence
        ),
        (7, 1, 0)
    );
}

#[test]
fn given_unknown_outcome_when_delivery_timeout_expires_then_possibly_written_and_epoch_bump() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 1);
    let b = h.push(1, 1);
    h.lose(a);
    h.lose(b);
    // The broker stays unreachable.
    for _ in 0..10 {
        h.advance(Duration::from_secs(10));
        let head = h.last_attempt(a);
        let _ = h.m.on_outcome(
            a,
            head.attempt,
            Outcome::Lost(ClientError::Transport(tonic::Status::unavailable("down"))),
            h.now,
        );
    }
    assert!(h.completed.is_empty());
    h.advance(Duration::from_secs(21));
    match h.error(a) {
        ClientError::DeliveryTimeout {
            possibly_written,
            attempts,
            last_error,
        } => {
            assert!(*possibly_written);
            assert!(*attempts > 1);
            assert!(last_error.is_some());
        }
        e => panic!("unexpected {e:?}"),
    }
    // b may have been written too: it is failed, not resent under the new epoch.
    assert!(h.error(b).possibly_written());
    assert_eq!(h.init_requests, 1);
    assert_eq!(h.bumped_from, vec![PID]);
    let before = h.sent.len();
    h.new_producer_id(BUMPED);
    let c = h.push(2, 1);
    assert_eq!(h.sent_since(before), vec![c]);
    assert_eq!(h.last_attempt(c).producer.base_sequence, 0);
    assert_eq!(
        (
            h.last_attempt(c).producer.producer_id,
            h.last_attempt(c).producer.producer_epoch
        ),
        (7, 1)
    );
}

#[test]
fn given_batch_refused_on_every_attempt_when_delivery_timeout_expires_then_not_possibly_written() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 1);
    h.reject(a, ErrorCode::NotEnoughReplicas);
    loop {
        h.advance(Duration::from_secs(5));
        if h.completed.contains_key(&a) {
            break;
        }
        h.reject(a, ErrorCode::NotEnoughReplicas);
    }
    assert!(matches!(
        h.error(a),
        ClientError::DeliveryTimeout {
            possibly_written: false,
            ..
        }
    ));
    // Its sequence is a hole: the partition bumps its epoch before sending anything else.
    assert_eq!(h.init_requests, 1);
}

#[test]
fn given_fatal_error_then_batch_fails_and_later_batches_continue_under_a_new_epoch() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 1);
    let b = h.push(1, 1);
    let c = h.push(2, 1);
    h.ok(a, 0);
    h.reject(b, ErrorCode::MessageTooLarge);
    assert!(matches!(
        h.error(b),
        ClientError::Broker {
            code: ErrorCode::MessageTooLarge,
            retriable: false,
            ..
        }
    ));
    assert!(!h.error(b).possibly_written());
    // c was in flight behind the hole; it cannot have been appended even if its
    // answer is lost.
    h.lose(c);
    assert_eq!(h.init_requests, 1);
    h.new_producer_id(BUMPED);
    assert_eq!(h.sent_since(3), vec![c]);
    assert_eq!(h.last_attempt(c).producer.base_sequence, 0);
}

#[test]
fn given_reset_when_old_epoch_batch_is_refused_invalid_epoch_late_then_it_is_ignored_and_new_batches_continue(
) {
    // a's answers are all lost until its delivery timeout: it fails as possibly written
    // and the partition bumps its epoch. a's request of the old epoch is still in
    // transit; it reaches the partition after c of the new epoch and is fenced. Nothing
    // about that refusal may fail c, fail a a second time, or start another reset.
    let config = InflightConfig {
        delivery_timeout: Duration::from_secs(1),
        ..config(Delivery::ExactlyOnce)
    };
    let mut h = Harness::with(config, Some(PID));
    let a = h.push(0, 1);
    let old = h.last_attempt(a);
    h.lose(a);
    h.advance(Duration::from_secs(2));
    assert!(matches!(
        h.error(a),
        ClientError::DeliveryTimeout {
            possibly_written: true,
            ..
        }
    ));
    assert_eq!(h.bumped_from, vec![PID]);
    h.new_producer_id(BUMPED);
    let c = h.push(1, 1);
    let sent = h.last_attempt(c);
    assert_eq!(
        sent.producer,
        ProducerInfo {
            producer_id: 7,
            producer_epoch: 1,
            base_sequence: 0
        }
    );
    // The late refusal of a's old attempt, and any other stale report of it.
    for outcome in [
        Outcome::Rejected {
            code: ErrorCode::InvalidProducerEpoch,
            message: "producer epoch 0 is older than 1".into(),
        },
        Outcome::Appended { base_offset: 1 },
        Outcome::Lost(ClientError::Transport(tonic::Status::unavailable("reset"))),
    ] {
        let commands = h.m.on_outcome(a, old.attempt, outcome, h.now);
        assert!(commands.is_empty(), "{commands:?}");
    }
    assert_eq!(h.m.phase(), Phase::Sending);
    assert_eq!(h.m.producer(), Some(BUMPED));
    assert_eq!(h.m.in_flight(), 1, "c is still in flight");
    assert_eq!(h.init_requests, 1, "no second reset");
    assert!(h.error(a).possibly_written(), "a keeps its first result");
    h.ok(c, 1);
    assert_eq!(h.offset(c), Some(1));
    let d = h.push(2, 1);
    assert_eq!(h.last_attempt(d).producer.base_sequence, 1);
    assert_eq!(h.last_attempt(d).producer.producer_epoch, 1);
}

#[test]
fn given_batch_resent_under_new_epoch_when_stale_invalid_epoch_answer_of_its_old_attempt_arrives_then_it_is_ignored(
) {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 1);
    let b = h.push(1, 1);
    let old_b = h.last_attempt(b);
    h.reject(a, ErrorCode::UnknownProducerId);
    h.reject(b, ErrorCode::OutOfOrderSequenceNumber);
    assert_eq!(h.bumped_from, vec![PID]);
    h.new_producer_id(BUMPED);
    assert_eq!(h.sent_since(2), vec![a, b]);
    assert_eq!(h.last_attempt(b).producer.producer_epoch, 1);
    let commands = h.m.on_outcome(
        b,
        old_b.attempt,
        Outcome::Rejected {
            code: ErrorCode::InvalidProducerEpoch,
            message: String::new(),
        },
        h.now,
    );
    assert!(commands.is_empty(), "{commands:?}");
    assert_eq!(h.m.in_flight(), 2);
    h.ok(a, 0);
    h.ok(b, 1);
    assert_eq!((h.offset(a), h.offset(b)), (Some(0), Some(1)));
    assert_eq!(h.init_requests, 1);
}

#[test]
fn given_invalid_producer_epoch_for_a_batch_of_the_current_epoch_then_it_fails_fatally() {
    // Something fenced the epoch this partition is using: resending cannot help.
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 1);
    h.reject(a, ErrorCode::UnknownProducerId);
    h.new_producer_id(BUMPED);
    assert_eq!(h.last_attempt(a).producer.producer_epoch, 1);
    h.reject(a, ErrorCode::InvalidProducerEpoch);
    assert!(matches!(
        h.error(a),
        ClientError::Broker {
            code: ErrorCode::InvalidProducerEpoch,
            retriable: false,
            ..
        }
    ));
    assert!(!h.error(a).possibly_written());
    assert_eq!(h.sent.len(), 2, "never resent");
}

#[test]
fn given_exhausted_epoch_when_the_bump_answers_a_fresh_producer_id_then_sequences_restart_under_it()
{
    let exhausted = ProducerIdAndEpoch {
        producer_id: 7,
        producer_epoch: i16::MAX,
    };
    let mut h = Harness::with(config(Delivery::ExactlyOnce), Some(exhausted));
    let a = h.push(0, 1);
    h.reject(a, ErrorCode::UnknownProducerId);
    assert_eq!(h.bumped_from, vec![exhausted]);
    h.new_producer_id(ProducerIdAndEpoch {
        producer_id: 9,
        producer_epoch: 0,
    });
    assert_eq!(
        h.last_attempt(a).producer,
        ProducerInfo {
            producer_id: 9,
            producer_epoch: 0,
            base_sequence: 0
        }
    );
}

#[test]
fn given_no_producer_id_yet_then_batches_wait_and_start_at_sequence_zero() {
    let mut h = Harness::with(config(Delivery::ExactlyOnce), None);
    let commands = h.m.tick(h.now);
    h.apply(commands);
    assert_eq!(h.init_requests, 1);
    assert!(h.bumped_from.is_empty(), "a fresh id, not a bump");
    let a = h.push(0, 2);
    assert!(h.sent.is_empty());
    h.new_producer_id(PID);
    assert_eq!(h.sent_since(0), vec![a]);
    assert_eq!(h.last_attempt(a).producer.base_sequence, 0);
}

#[test]
fn given_batch_waiting_for_producer_id_when_timeout_expires_then_it_fails_not_written() {
    let mut h = Harness::with(config(Delivery::ExactlyOnce), None);
    let a = h.push(0, 1);
    h.advance(Duration::from_secs(121));
    assert!(matches!(
        h.error(a),
        ClientError::DeliveryTimeout {
            possibly_written: false,
            attempts: 0,
            ..
        }
    ));
}

#[test]
fn given_stale_or_unknown_outcome_then_it_is_ignored() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 1);
    let commands =
        h.m.on_outcome(a, 9, Outcome::Appended { base_offset: 0 }, h.now);
    assert!(commands.is_empty());
    let commands =
        h.m.on_outcome(BatchId(99), 1, Outcome::Appended { base_offset: 0 }, h.now);
    assert!(commands.is_empty());
    assert_eq!(h.m.in_flight(), 1);
    h.ok(a, 0);
    let commands =
        h.m.on_outcome(a, 1, Outcome::Appended { base_offset: 5 }, h.now);
    h.apply(commands);
    assert_eq!(h.offset(a), Some(0));
}

#[test]
fn given_request_timed_out_then_batch_counts_as_possibly_written() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let a = h.push(0, 1);
    h.reject(a, ErrorCode::RequestTimedOut);
    h.advance(Duration::from_millis(100));
    h.reject(a, ErrorCode::OutOfOrderSequenceNumber);
    assert!(matches!(h.error(a), ClientError::OutcomeUnknown { .. }));
}

#[test]
fn next_wakeup_is_the_retry_time_or_the_head_deadline() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    let t0 = h.now;
    let a = h.push(0, 1);
    assert_eq!(h.m.next_wakeup(), None, "in flight: nothing to wake for");
    h.lose(a);
    assert_eq!(h.m.next_wakeup(), Some(t0 + Duration::from_millis(100)));
}

// ---- the other delivery modes ----

#[test]
fn given_at_most_once_when_a_request_fails_then_the_error_is_handed_over_without_retry() {
    let mut h = Harness::new(Delivery::AtMostOnce);
    let a = h.push(0, 1);
    let b = h.push(1, 1);
    let c = h.push(2, 1);
    assert_eq!(h.last_attempt(a).producer, ProducerInfo::NONE);
    h.lose(a);
    h.reject(b, ErrorCode::NotLeaderOrFollower);
    h.ok(c, 0);
    h.advance(Duration::from_secs(1));
    assert_eq!(h.sent.len(), 3, "at-most-once never resends");
    assert!(matches!(h.error(a), ClientError::Transport(_)));
    assert!(matches!(
        h.error(b),
        ClientError::Broker {
            retriable: true,
            ..
        }
    ));
    assert!(!h.error(b).retried());
    assert_eq!(h.offset(c), Some(0));
    assert_eq!(h.init_requests, 0);
}

#[test]
fn given_at_least_once_when_response_is_lost_then_same_batch_is_resent_without_producer_id() {
    let mut h = Harness::new(Delivery::AtLeastOnce);
    let a = h.push(0, 1);
    let header = batch::decode_header(&h.last_attempt(a).records).expect("header");
    assert_eq!(
        (header.producer_id, header.base_sequence),
        (-1, -1),
        "no idempotence: the broker cannot detect the duplicate"
    );
    h.lose(a);
    h.advance(Duration::from_millis(100));
    assert_eq!(h.sent_since(1), vec![a]);
    h.ok(a, 1);
    assert_eq!(h.offset(a), Some(1));
    assert_eq!(h.init_requests, 0);
}

#[test]
fn given_at_least_once_when_sequence_errors_arrive_then_they_are_fatal() {
    let mut h = Harness::new(Delivery::AtLeastOnce);
    let a = h.push(0, 1);
    h.reject(a, ErrorCode::UnknownProducerId);
    assert!(matches!(h.error(a), ClientError::Broker { .. }));
    assert_eq!(h.init_requests, 0);
}

// ---- randomized: a model broker, any interleaving ----

/// Deterministic xorshift so failures reproduce.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Where a simulation draws its choices: first a given prefix (proptest's, which
/// shrinks), then a seeded xorshift stream that never runs dry, so every run can
/// finish whatever the prefix chose.
struct Choices {
    prefix: std::vec::IntoIter<u64>,
    rng: Rng,
}

impl Choices {
    fn seeded(seed: u64) -> Self {
        Choices::after(Vec::new(), seed)
    }
    fn after(prefix: Vec<u64>, seed: u64) -> Self {
        Choices {
            prefix: prefix.into_iter(),
            rng: Rng(seed.max(1)),
        }
    }
    fn next(&mut self) -> u64 {
        self.prefix.next().unwrap_or_else(|| self.rng.next())
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// The broker rules of issue 2 and KIP-360: per producer id the epoch and the last 5
/// batches, duplicates answered with their original offsets, gaps refused, an older
/// epoch fenced, a newer epoch accepted only at sequence 0.
#[derive(Default)]
struct ModelBroker {
    log: Vec<Bytes>,
    producers: HashMap<i64, ModelProducer>,
    /// Batches refused with `INVALID_PRODUCER_EPOCH`.
    fenced: usize,
}

struct ModelProducer {
    epoch: i16,
    batches: VecDeque<(i32, i32, i64)>,
}

impl ModelBroker {
    fn produce(&mut self, bytes: &Bytes) -> Outcome {
        let header = batch::validate_produced(bytes).expect("valid batch");
        let values: Vec<Bytes> = batch::records(bytes)
            .expect("records")
            .into_iter()
            .filter_map(|r| r.value)
            .collect();
        let rejected = |code| Outcome::Rejected {
            code,
            message: String::new(),
        };
        if header.producer_id >= 0 {
            let first = header.base_sequence;
            let last = header.last_sequence();
            let epoch = header.producer_epoch;
            match self.producers.get(&header.producer_id) {
                None if first != 0 => return rejected(ErrorCode::UnknownProducerId),
                None => {}
                Some(p) if epoch < p.epoch => {
                    self.fenced += 1;
                    return rejected(ErrorCode::InvalidProducerEpoch);
                }
                // A newer epoch starts at sequence 0.
                Some(p) if epoch > p.epoch && first != 0 => {
                    return rejected(ErrorCode::OutOfOrderSequenceNumber);
                }
                Some(p) if epoch > p.epoch => {}
                Some(ModelProducer {
                    batches: cached, ..
                }) => {
                    if let Some(&(_, _, offset)) =
                        cached.iter().find(|(f, l, _)| *f == first && *l == last)
                    {
                        return Outcome::Appended {
                            base_offset: offset,
                        };
                    }
                    let expected = cached
                        .back()
                        .map_or(0, |(_, l, _)| batch::sequence_add(*l, 1));
                    if first != expected {
                        return rejected(ErrorCode::OutOfOrderSequenceNumber);
                    }
                }
            }
            let base_offset = self.log.len() as i64;
            let producer = self
                .producers
                .entry(header.producer_id)
                .or_insert(ModelProducer {
                    epoch,
                    batches: VecDeque::new(),
                });
            if producer.epoch != epoch {
                producer.epoch = epoch;
                producer.batches.clear();
            }
            let cached = &mut producer.batches;
            cached.push_back((first, last, base_offset));
            if cached.len() > 5 {
                cached.pop_front();
            }
            self.log.extend(values);
            return Outcome::Appended { base_offset };
        }
        let base_offset = self.log.len() as i64;
        self.log.extend(values);
        Outcome::Appended { base_offset }
    }
}

struct Run {
    log: Vec<Bytes>,
    acked: BTreeMap<BatchId, i64>,
    failed: BTreeMap<BatchId, ClientError>,
    pushed: Vec<(BatchId, Vec<Bytes>)>,
    producer_ids_taken: usize,
    /// Late requests of an old epoch the broker refused.
    fenced: usize,
}

/// Runs `batches` batches through the core and a model broker, with the network
/// reordering requests and responses, refusing some (`NOT_LEADER_OR_FOLLOWER`) and
/// losing some before or after the broker acted. With `expire_idle`, the broker also
/// forgets producer state whenever the partition is idle (idle producer expiry).
fn simulate(delivery: Delivery, seed: u64, batches: u64, expire_idle: bool) -> Run {
    simulate_with(
        config(delivery),
        Choices::seeded(seed),
        batches,
        expire_idle,
    )
}

fn simulate_with(config: InflightConfig, mut rng: Choices, batches: u64, expire_idle: bool) -> Run {
    let mut broker = ModelBroker::default();
    let mut h = Harness::with(config, Some(PID));
    let mut requests: Vec<Sent> = Vec::new(); // on the way to the broker
                                              // Requests the client gave up on (timeout) that still reach the broker later.
    let mut ghosts: Vec<Sent> = Vec::new();
    let mut responses: Vec<(BatchId, u32, Outcome)> = Vec::new(); // on the way back
    let mut pushed = Vec::new();
    let mut delivered_sends = 0;
    for _step in 0..100_000 {
        // Move newly sent requests onto the wire.
        requests.extend(h.sent[delivered_sends..].iter().cloned());
        delivered_sends = h.sent.len();
        if h.m.phase() == Phase::AwaitingProducerId && rng.chance(50) {
            // The broker's answer to the bump (KIP-360): the same id, the next epoch.
            let current = *h
                .bumped_from
                .last()
                .expect("a reset asks for an epoch bump");
            h.new_producer_id(ProducerIdAndEpoch {
                producer_id: current.producer_id,
                producer_epoch: current.producer_epoch + 1,
            });
            continue;
        }
        if pushed.len() as u64 == batches && h.m.is_idle() {
            break;
        }
        // Expiry is for idle producers: long after any request of theirs is gone.
        if expire_idle && h.m.is_idle() && ghosts.is_empty() && rng.chance(30) {
            broker.producers.clear();
        }
        match rng.below(10) {
            0 | 1 if (pushed.len() as u64) < batches => {
                let tag = pushed.len() as u64;
                let count = 1 + rng.below(3);
                let id = h.push(tag, count);
                let values = records(tag, count)
                    .into_iter()
                    .filter_map(|r| r.value)
                    .collect();
                pushed.push((id, values));
            }
            8 if !ghosts.is_empty() && rng.chance(50) => {
                let ghost = ghosts.remove(rng.below(ghosts.len()));
                let _ = broker.produce(&ghost.records);
            }
            2..=4 if !requests.is_empty() => {
                // The broker handles requests in any order (concurrent streams).
                let request = requests.remove(rng.below(requests.len()));
                if rng.chance(4) {
                    // The client's request timeout fires; the request arrives later.
                    responses.push((
                        request.batch,
                        request.attempt,
                        Outcome::Lost(ClientError::Transport(tonic::Status::deadline_exceeded(
                            "request timeout",
                        ))),
                    ));
                    ghosts.push(request);
                    continue;
                }
                if std::env::var("SIM_TRACE").is_ok() {
                    eprintln!(
                        "broker gets {:?} #{} seq {}",
                        request.batch, request.attempt, request.producer.base_sequence
                    );
                }
                let outcome = if rng.chance(10) {
                    Outcome::Rejected {
                        code: ErrorCode::NotLeaderOrFollower,
                        message: String::new(),
                    }
                } else if rng.chance(5) {
                    // The request never arrived.
                    Outcome::Lost(ClientError::Transport(tonic::Status::unavailable("reset")))
                } else {
                    broker.produce(&request.records)
                };
                responses.push((request.batch, request.attempt, outcome));
            }
            5..=7 if !responses.is_empty() => {
                let (batch, attempt, outcome) = responses.remove(rng.below(responses.len()));
                // Responses get lost after the broker acted.
                let outcome = if rng.chance(15) {
                    Outcome::Lost(ClientError::Transport(tonic::Status::unavailable("reset")))
                } else {
                    outcome
                };
                if std::env::var("SIM_TRACE").is_ok() {
                    eprintln!(
                        "outcome {batch:?} #{attempt} {outcome:?} phase {:?}",
                        h.m.phase()
                    );
                }
                let commands = h.m.on_outcome(batch, attempt, outcome, h.now);
                h.apply(commands);
            }
            _ => h.advance(Duration::from_millis(50)),
        }
    }
    assert!(h.m.is_idle(), "run did not finish");
    let mut acked = BTreeMap::new();
    let mut failed = BTreeMap::new();
    for (batch, result) in std::mem::take(&mut h.completed) {
        match result {
            Ok(offset) => {
                acked.insert(batch, offset);
            }
            Err(e) => {
                failed.insert(batch, e);
            }
        }
    }
    Run {
        log: broker.log,
        acked,
        failed,
        pushed,
        producer_ids_taken: h.init_requests,
        fenced: broker.fenced,
    }
}

/// Exactly-once as a reader sees it: every acknowledged batch once, at its offset; a
/// batch failed as not written absent; a possibly written one at most once; and
/// everything in the log in send order, including a batch given up as possibly written
/// whose request outlived the client's patience: once the partition bumped its epoch, a
/// late copy of such a batch is fenced rather than appended behind its successors.
fn assert_exactly_once(run: &Run, run_name: &str) {
    let mut position: HashMap<&Bytes, usize> = HashMap::new();
    for (i, v) in run.log.iter().enumerate() {
        assert!(
            position.insert(v, i).is_none(),
            "{run_name}: {v:?} duplicated"
        );
    }
    let sent: Vec<&Bytes> = run.pushed.iter().flat_map(|(_, v)| v.iter()).collect();
    let order: Vec<usize> = sent
        .iter()
        .filter_map(|v| position.get(v).copied())
        .collect();
    assert!(
        order.windows(2).all(|w| w[0] < w[1]),
        "{run_name}: log order differs from send order"
    );
    for (batch, values) in &run.pushed {
        if let Some(offset) = run.acked.get(batch) {
            let at = *offset as usize;
            assert_eq!(&run.log[at..at + values.len()], &values[..], "{run_name}");
        } else {
            let error = &run.failed[batch];
            if !error.possibly_written() {
                assert!(
                    values.iter().all(|v| !position.contains_key(v)),
                    "{run_name}: {batch:?} failed as not written but is in the log"
                );
            }
        }
    }
}

/// Exactly-once while the broker keeps its producer state: nothing fails, no new
/// producer id is needed, and the log is the send order.
fn check_exactly_once_kept_state(run: &Run, run_name: &str) {
    assert!(
        run.failed.is_empty(),
        "{run_name}: nothing fails while the broker keeps its state: {:?}",
        run.failed
    );
    assert_eq!(run.producer_ids_taken, 0, "{run_name}");
    let expected: Vec<Bytes> = run.pushed.iter().flat_map(|(_, v)| v.clone()).collect();
    assert_eq!(run.log, expected, "{run_name}: log differs from send order");
    assert_exactly_once(run, run_name);
}

/// At-least-once: every batch acknowledged and none of its records missing.
fn check_at_least_once(run: &Run, run_name: &str) {
    assert!(run.failed.is_empty(), "{run_name}: {:?}", run.failed);
    for (batch, values) in &run.pushed {
        assert!(run.acked.contains_key(batch));
        for v in values {
            assert!(run.log.contains(v), "{run_name}: acked record lost");
        }
    }
}

fn short_delivery_timeout() -> InflightConfig {
    InflightConfig {
        delivery_timeout: Duration::from_millis(400),
        ..config(Delivery::ExactlyOnce)
    }
}

/// The prefix's choices stay below this: every draw is a percentage or an index into a
/// short queue, and small numbers shrink toward the first option.
const CHOICE_RANGE: u64 = 100;

proptest! {
    // Each case is a whole simulated run of 30 to 40 batches: fewer cases than the
    // default keep the four properties within a few seconds.
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any interleaving of reordering, rejections and lost responses: exactly-once
    /// writes the log in send order. The run's choices start with `prefix`, which
    /// shrinks to the few choices that matter.
    #[test]
    fn given_any_interleaving_of_reordering_rejections_and_lost_responses_then_exactly_once_log_equals_send_order(
        prefix in proptest::collection::vec(0..CHOICE_RANGE, 0..3_000),
        seed in any::<u64>(),
    ) {
        let run = simulate_with(config(Delivery::ExactlyOnce), Choices::after(prefix, seed), 40, false);
        check_exactly_once_kept_state(&run, "proptest");
    }

    #[test]
    fn given_broker_expires_idle_producers_then_partition_bumps_epochs_without_duplicates(
        prefix in proptest::collection::vec(0..CHOICE_RANGE, 0..3_000),
        seed in any::<u64>(),
    ) {
        let run = simulate_with(config(Delivery::ExactlyOnce), Choices::after(prefix, seed), 40, true);
        assert_exactly_once(&run, "proptest");
    }

    #[test]
    fn given_short_delivery_timeout_and_late_requests_then_nothing_failed_as_unwritten_is_in_the_log(
        prefix in proptest::collection::vec(0..CHOICE_RANGE, 0..3_000),
        seed in any::<u64>(),
    ) {
        let run = simulate_with(short_delivery_timeout(), Choices::after(prefix, seed), 40, true);
        assert_exactly_once(&run, "proptest");
    }

    #[test]
    fn given_any_interleaving_then_at_least_once_loses_nothing_acknowledged(
        prefix in proptest::collection::vec(0..CHOICE_RANGE, 0..3_000),
        seed in any::<u64>(),
    ) {
        let run = simulate_with(config(Delivery::AtLeastOnce), Choices::after(prefix, seed), 30, false);
        check_at_least_once(&run, "proptest");
    }
}

// The seeded runs the hand-rolled model tests played, kept as regression cases: the
// core was developed against them, and together they show each property's interesting
// cases (epoch bumps, timeouts, fenced late requests) really come up.

#[test]
fn given_the_original_seeded_interleavings_then_exactly_once_log_equals_send_order() {
    for seed in 1..=300u64 {
        let run = simulate(
            Delivery::ExactlyOnce,
            seed.wrapping_mul(0x9e37_79b9_7f4a_7c15),
            40,
            false,
        );
        check_exactly_once_kept_state(&run, &format!("seed {seed}"));
    }
}

#[test]
fn given_the_original_seeded_expiring_runs_then_partition_bumps_epochs_without_duplicates() {
    let mut switched = 0;
    for seed in 1..=300u64 {
        let run = simulate(
            Delivery::ExactlyOnce,
            seed.wrapping_mul(0xd1b5_4a32_d192_ed03),
            40,
            true,
        );
        assert_exactly_once(&run, &format!("seed {seed}"));
        switched += run.producer_ids_taken;
    }
    assert!(switched > 0, "the runs exercised epoch bumps");
}

#[test]
fn given_the_original_seeded_short_timeouts_then_nothing_failed_as_unwritten_is_in_the_log_and_late_old_epoch_requests_are_fenced(
) {
    let mut timeouts = 0;
    let mut unknown = 0;
    let mut fenced = 0;
    for seed in 1..=300u64 {
        let choices = Choices::seeded(seed.wrapping_mul(0xa076_1d64_78bd_642f));
        let run = simulate_with(short_delivery_timeout(), choices, 40, true);
        assert_exactly_once(&run, &format!("seed {seed}"));
        fenced += run.fenced;
        for e in run.failed.values() {
            match e {
                ClientError::DeliveryTimeout { .. } => timeouts += 1,
                ClientError::OutcomeUnknown { .. } => unknown += 1,
                _ => {}
            }
        }
    }
    assert!(
        timeouts > 0 && unknown > 0 && fenced > 0,
        "{timeouts} timeouts, {unknown} unknown, {fenced} late requests fenced"
    );
}

#[test]
fn given_the_original_seeded_interleavings_then_at_least_once_loses_nothing_acknowledged() {
    for seed in 1..=100u64 {
        let run = simulate(
            Delivery::AtLeastOnce,
            seed.wrapping_mul(0x2545_f491_4f6c_dd1d),
            30,
            false,
        );
        check_at_least_once(&run, &format!("seed {seed}"));
    }
}

// ---- transactional mode: same ordering, no epoch bumps, a broken sequence fails all ----

fn transactional() -> Harness {
    Harness::with(
        InflightConfig {
            transactional: true,
            ..config(Delivery::ExactlyOnce)
        },
        Some(PID),
    )
}

fn attributes(sent: &Sent) -> u16 {
    batch::decode_header(&sent.records)
        .expect("a valid batch")
        .attributes
}

#[test]
fn given_transactional_mode_then_batches_carry_the_transactional_attribute_and_sequences_from_zero()
{
    let mut h = transactional();
    let a = h.push(0, 2);
    let b = h.push(1, 3);
    assert_eq!(h.sent_since(0), vec![a, b]);
    for s in &h.sent {
        assert_eq!(
            attributes(s) & batch::ATTR_TRANSACTIONAL,
            batch::ATTR_TRANSACTIONAL
        );
        assert_eq!(s.producer.producer_id, PID.producer_id);
        assert_eq!(s.producer.producer_epoch, PID.producer_epoch);
    }
    let seqs: Vec<i32> = h.sent.iter().map(|s| s.producer.base_sequence).collect();
    assert_eq!(seqs, vec![0, 2]);
    h.ok(a, 10);
    h.ok(b, 12);
    assert_eq!((h.offset(a), h.offset(b)), (Some(10), Some(12)));
    assert!(h.m.is_idle());
}

#[test]
fn given_idempotent_mode_then_batches_are_not_transactional() {
    let mut h = Harness::new(Delivery::ExactlyOnce);
    h.push(0, 1);
    assert_eq!(attributes(&h.sent[0]) & batch::ATTR_TRANSACTIONAL, 0);
}

#[test]
fn given_transactional_mode_when_an_answer_is_lost_then_the_same_bytes_are_resent_in_order() {
    let mut h = transactional();
    let a = h.push(0, 1);
    let b = h.push(1, 1);
    let first_a = h.last_attempt(a);
    h.lose(a);
    h.ok(b, 1);
    h.advance(Duration::from_millis(100));
    let retry = h.last_attempt(a);
    assert_eq!(retry.attempt, 2);
    assert_eq!(retry.records, first_a.records);
    h.ok(a, 0);
    assert_eq!(h.offset(a), Some(0));
    assert_eq!(
        h.init_requests, 0,
        "a transactional partition never asks for an identity"
    );
}

#[test]
fn given_transactional_mode_when_the_head_is_out_of_order_then_no_epoch_bump_and_every_batch_fails_with_the_cause(
) {
    let mut h = transactional();
    let a = h.push(0, 1);
    h.ok(a, 0);
    let b = h.push(1, 1);
    let c = h.push(2, 1);
    h.reject(b, ErrorCode::OutOfOrderSequenceNumber);
    // c is still in flight: nothing fails before it resolves.
    assert!(!h.completed.contains_key(&c));
    h.reject(c, ErrorCode::OutOfOrderSequenceNumber);
    assert_eq!(h.init_requests, 0);
    assert!(h.bumped_from.is_empty());
    assert_eq!(h.m.phase(), Phase::Broken);
    assert_eq!(h.error(b).code(), Some(ErrorCode::OutOfOrderSequenceNumber));
    assert_eq!(h.error(c).code(), Some(ErrorCode::OutOfOrderSequenceNumber));
    // A later batch is refused at once, never sent.
    let sent = h.sent.len();
    let d = h.push(3, 1);
    assert_eq!(h.sent.len(), sent);
    assert_eq!(h.error(d).code(), Some(ErrorCode::OutOfOrderSequenceNumber));
    assert!(h.m.is_idle());
}

#[test]
fn given_transactional_mode_when_fenced_then_the_fencing_code_reaches_every_batch() {
    let mut h = transactional();
    let a = h.push(0, 1);
    let b = h.push(1, 1);
    h.reject(a, ErrorCode::InvalidProducerEpoch);
    h.ok(b, 1); // already in flight; its answer still counts
    assert_eq!(h.error(a).code(), Some(ErrorCode::InvalidProducerEpoch));
    assert_eq!(h.offset(b), Some(1));
    let c = h.push(2, 1);
    assert_eq!(h.error(c).code(), Some(ErrorCode::InvalidProducerEpoch));
    assert!(h.bumped_from.is_empty());
}

#[test]
fn given_transactional_mode_when_a_retry_is_still_failing_at_the_break_then_it_fails_with_the_cause(
) {
    let mut h = transactional();
    let a = h.push(0, 1);
    let b = h.push(1, 1);
    h.reject(a, ErrorCode::InvalidTxnState);
    h.lose(b);
    assert_eq!(h.error(a).code(), Some(ErrorCode::InvalidTxnState));
    assert_eq!(h.error(b).code(), Some(ErrorCode::InvalidTxnState));
    assert_eq!(h.m.phase(), Phase::Broken);
}

#[test]
fn given_transactional_mode_when_the_delivery_timeout_passes_then_the_partition_breaks() {
    let mut h = Harness::with(
        InflightConfig {
            transactional: true,
            delivery_timeout: Duration::from_millis(300),
            ..config(Delivery::ExactlyOnce)
        },
        Some(PID),
    );
    let a = h.push(0, 1);
    h.lose(a);
    h.advance(Duration::from_millis(100));
    h.lose(a);
    h.advance(Duration::from_millis(250));
    assert!(matches!(
        h.error(a),
        ClientError::DeliveryTimeout {
            possibly_written: true,
            ..
        }
    ));
    assert_eq!(h.m.phase(), Phase::Broken);
    let b = h.push(1, 1);
    assert!(matches!(h.error(b), ClientError::DeliveryTimeout { .. }));
    assert!(h.bumped_from.is_empty());
}

#[test]
fn given_any_producer_then_its_batches_set_only_defined_attribute_bits_and_never_control() {
    for delivery in [
        Delivery::AtMostOnce,
        Delivery::AtLeastOnce,
        Delivery::ExactlyOnce,
    ] {
        for transactional in [false, true] {
            let config = InflightConfig {
                transactional,
                ..config(delivery)
            };
            let attributes = config.attributes();
            assert_eq!(attributes & !batch::ATTR_DEFINED, 0, "reserved bits set");
            assert_eq!(
                attributes & batch::ATTR_CONTROL,
                0,
                "control is the broker's"
            );
            assert_eq!(
                attributes & batch::ATTR_TRANSACTIONAL != 0,
                transactional,
                "{delivery:?}"
            );
        }
    }
}
