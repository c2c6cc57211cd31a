//! Producer state survives a broker's death: after kill -9 (rebuilt from snapshots plus
//! log replay) or a clean stop (snapshot at the log end), a resent batch is still
//! answered as a duplicate with its original offsets and the sequence rules still hold.

use idem_proto::ErrorCode;
use idem_tests::raw::{self, RawClient};
use idem_tests::BrokerProcess;

const PRODUCER: i64 = 77;

/// Twenty batches of two records each; small segments make the log roll (and snapshot)
/// several times along the way.
async fn produce_twenty(client: &mut RawClient) {
    for seq in 0..20 {
        let (a, b) = (format!("r{}", seq * 2), format!("r{}", seq * 2 + 1));
        let answer = raw::produce(
            client,
            "orders",
            0,
            raw::idempotent_batch(PRODUCER, 0, seq * 2, &[&a, &b]),
        )
        .await;
        assert_eq!(
            (answer.error_code(), answer.base_offset),
            (ErrorCode::None, i64::from(seq * 2))
        );
    }
}

async fn assert_rules_still_enforced(client: &mut RawClient) {
    // The last five batches are duplicates, answered with their original offsets.
    for seq in 15..20 {
        let (a, b) = (format!("r{}", seq * 2), format!("r{}", seq * 2 + 1));
        let dup = raw::produce(
            client,
            "orders",
            0,
            raw::idempotent_batch(PRODUCER, 0, seq * 2, &[&a, &b]),
        )
        .await;
        assert_eq!(
            (dup.error_code(), dup.base_offset),
            (ErrorCode::None, i64::from(seq * 2)),
            "seq {}",
            seq * 2
        );
    }
    // Older than the cache: out of order, not a second copy.
    let old = raw::produce(
        client,
        "orders",
        0,
        raw::idempotent_batch(PRODUCER, 0, 2, &["r2", "r3"]),
    )
    .await;
    assert_eq!(old.error_code(), ErrorCode::OutOfOrderSequenceNumber);
    // A gap is out of order too.
    let gap = raw::produce(
        client,
        "orders",
        0,
        raw::idempotent_batch(PRODUCER, 0, 41, &["gap"]),
    )
    .await;
    assert_eq!(gap.error_code(), ErrorCode::OutOfOrderSequenceNumber);
    // The next sequence still appends.
    let next = raw::produce(
        client,
        "orders",
        0,
        raw::idempotent_batch(PRODUCER, 0, 40, &["x"]),
    )
    .await;
    assert_eq!((next.error_code(), next.base_offset), (ErrorCode::None, 40));
    // A producer id the partition never saw must start at sequence 0.
    let stranger = raw::produce(
        client,
        "orders",
        0,
        raw::idempotent_batch(PRODUCER + 1, 0, 3, &["y"]),
    )
    .await;
    assert_eq!(stranger.error_code(), ErrorCode::UnknownProducerId);
    let records = raw::read_partition(client, "orders", 0).await;
    let mut expected: Vec<String> = (0..40).map(|i| format!("r{i}")).collect();
    expected.push("x".into());
    assert_eq!(
        raw::values(&records),
        expected,
        "every record exactly once, in order"
    );
}

#[tokio::test]
async fn given_broker_killed_when_restarted_then_duplicates_are_still_recognised() {
    let mut broker = BrokerProcess::start_with(&["--segment-bytes", "400"]);
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut client, "orders", 1).await,
        ErrorCode::None
    );
    produce_twenty(&mut client).await;
    let segments = std::fs::read_dir(broker.data_dir().join("orders-0"))
        .expect("partition dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension().is_some_and(|x| x == "log"))
        })
        .count();
    assert!(
        segments >= 3,
        "the log rolled ({segments} segments), so snapshots were taken"
    );
    broker.kill();
    broker.restart();
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_rules_still_enforced(&mut client).await;
}

#[tokio::test]
async fn given_broker_stopped_cleanly_when_restarted_then_duplicates_are_still_recognised() {
    let mut broker = BrokerProcess::start();
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut client, "orders", 1).await,
        ErrorCode::None
    );
    produce_twenty(&mut client).await;
    broker.stop();
    broker.restart();
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_rules_still_enforced(&mut client).await;
}

#[tokio::test]
async fn given_an_epoch_bump_then_the_old_epoch_is_fenced() {
    let broker = BrokerProcess::start();
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut client, "orders", 1).await,
        ErrorCode::None
    );
    let first = raw::produce(
        &mut client,
        "orders",
        0,
        raw::idempotent_batch(PRODUCER, 0, 0, &["a"]),
    )
    .await;
    assert_eq!(first.error_code(), ErrorCode::None);
    let bad_start = raw::produce(
        &mut client,
        "orders",
        0,
        raw::idempotent_batch(PRODUCER, 1, 5, &["b"]),
    )
    .await;
    assert_eq!(bad_start.error_code(), ErrorCode::OutOfOrderSequenceNumber);
    let bumped = raw::produce(
        &mut client,
        "orders",
        0,
        raw::idempotent_batch(PRODUCER, 1, 0, &["b"]),
    )
    .await;
    assert_eq!(
        (bumped.error_code(), bumped.base_offset),
        (ErrorCode::None, 1)
    );
    let zombie = raw::produce(
        &mut client,
        "orders",
        0,
        raw::idempotent_batch(PRODUCER, 0, 1, &["c"]),
    )
    .await;
    assert_eq!(zombie.error_code(), ErrorCode::InvalidProducerEpoch);
    assert_eq!(
        raw::values(&raw::read_partition(&mut client, "orders", 0).await),
        vec!["a", "b"]
    );
}
