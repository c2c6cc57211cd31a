//! A torn or corrupt tail of the active segment (a crash mid-write) is cut on restart:
//! the broker recovers to the last valid batch, never serves the broken bytes, and
//! appends continue right after the last valid batch.

use std::path::PathBuf;

use idem_proto::ErrorCode;
use idem_tests::BrokerProcess;
use idem_tests::{raw, segments};

async fn broker_with_ten_batches() -> (BrokerProcess, PathBuf) {
    let broker = BrokerProcess::start();
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut client, "events", 1).await,
        ErrorCode::None
    );
    for i in 0..10 {
        let value = format!("event-{i}");
        let answer = raw::produce(
            &mut client,
            "events",
            0,
            raw::idempotent_batch(42, 0, i, &[&value]),
        )
        .await;
        assert_eq!(
            (answer.error_code(), answer.base_offset),
            (ErrorCode::None, i64::from(i))
        );
    }
    let dir = broker.data_dir().join("events-0");
    (broker, dir)
}

async fn assert_recovered_to_nine_batches(broker: &BrokerProcess) {
    let mut client = raw::connect(&broker.bootstrap()).await;
    let records = raw::read_partition(&mut client, "events", 0).await;
    let expected: Vec<String> = (0..9).map(|i| format!("event-{i}")).collect();
    assert_eq!(raw::values(&records), expected);
    // The lost batch's sequence is the next one expected; appends continue at offset 9.
    let answer = raw::produce(
        &mut client,
        "events",
        0,
        raw::idempotent_batch(42, 0, 9, &["event-9-again"]),
    )
    .await;
    assert_eq!(
        (answer.error_code(), answer.base_offset),
        (ErrorCode::None, 9)
    );
    // A batch from before the tear is still recognised as a duplicate.
    let dup = raw::produce(
        &mut client,
        "events",
        0,
        raw::idempotent_batch(42, 0, 8, &["event-8"]),
    )
    .await;
    assert_eq!((dup.error_code(), dup.base_offset), (ErrorCode::None, 8));
    assert_eq!(
        raw::read_partition(&mut client, "events", 0).await.len(),
        10
    );
}

#[tokio::test]
async fn given_the_last_batch_torn_while_down_when_restarted_then_log_ends_at_the_last_valid_batch()
{
    let (mut broker, dir) = broker_with_ten_batches().await;
    broker.kill();
    let segment = segments::active_segment(&dir).expect("a segment");
    let len = std::fs::metadata(&segment).expect("segment").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("open segment");
    file.set_len(len - 5).expect("tear the tail");
    broker.restart();
    assert_recovered_to_nine_batches(&broker).await;
}

#[tokio::test]
async fn given_the_last_batch_garbled_while_down_when_restarted_then_it_is_cut_and_never_served() {
    let (mut broker, dir) = broker_with_ten_batches().await;
    broker.kill();
    let segment = segments::active_segment(&dir).expect("a segment");
    let mut bytes = std::fs::read(&segment).expect("segment");
    let at = bytes.len() - 3;
    bytes[at] ^= 0xff;
    std::fs::write(&segment, &bytes).expect("garble the tail");
    broker.restart();
    assert_recovered_to_nine_batches(&broker).await;
}

#[tokio::test]
async fn given_garbage_appended_while_down_when_restarted_then_it_is_cut() {
    let (mut broker, dir) = broker_with_ten_batches().await;
    broker.kill();
    let segment = segments::active_segment(&dir).expect("a segment");
    let mut bytes = std::fs::read(&segment).expect("segment");
    // Cut the last batch in half and leave junk behind it, as a crash mid-write can.
    let whole = bytes.len();
    bytes.truncate(whole - 20);
    bytes.extend_from_slice(&[0xab; 37]);
    std::fs::write(&segment, &bytes).expect("write junk");
    broker.restart();
    assert_recovered_to_nine_batches(&broker).await;
}
