//! kill -9 of the broker mid-stream: the producer keeps sending, retries what was in
//! flight against the restarted broker (whose producer state is rebuilt from the log),
//! and afterwards every acknowledged record is in the log exactly once, in send order
//! per partition.

use std::sync::Arc;
use std::time::Duration;

use idem_client::{Delivery, Producer, ProducerConfig, RecordMetadata};
use idem_proto::ErrorCode;
use idem_tests::sdk::{self, bytes};
use idem_tests::{raw, BrokerProcess};
use tokio::sync::Notify;

const RECORDS: usize = 3000;
const KILL_AFTER_ACKS: usize = 1000;

#[tokio::test]
async fn given_broker_killed_mid_stream_when_restarted_then_each_acked_record_is_written_once_in_order(
) {
    let mut broker = BrokerProcess::start_with(&["--segment-bytes", "16384"]);
    let bootstrap = broker.bootstrap();
    let mut admin = raw::connect(&bootstrap).await;
    assert_eq!(
        raw::create_topic(&mut admin, "orders", 2).await,
        ErrorCode::None
    );
    let config = ProducerConfig {
        linger: Duration::from_millis(2),
        batch_size: 1024,
        request_timeout: Duration::from_secs(5),
        retry_backoff: Duration::from_millis(50),
        ..ProducerConfig::new(bootstrap.clone()).with_delivery(Delivery::ExactlyOnce)
    };
    let producer = Producer::connect(config).await.expect("producer");
    let enough_acked = Arc::new(Notify::new());

    let sending = {
        let producer = producer.clone();
        let enough_acked = enough_acked.clone();
        tokio::spawn(async move {
            // A window of 50 unacknowledged records stays in flight across the kill.
            let mut window = std::collections::VecDeque::new();
            let mut acked: Vec<(String, RecordMetadata)> = Vec::new();
            let mut failed = 0;
            let mut settle =
                |value: String, result: Result<RecordMetadata, idem_client::ClientError>| {
                    match result {
                        Ok(written) => acked.push((value, written)),
                        Err(e) => {
                            eprintln!("record {value} failed: {e}");
                            failed += 1;
                        }
                    }
                };
            for i in 0..RECORDS {
                let value = format!("{i:05}");
                let partition = (i % 2) as i32;
                let delivery = producer
                    .send_to("orders", partition, None, bytes(&value))
                    .await
                    .expect("send accepted");
                window.push_back((value, delivery));
                if window.len() > 50 {
                    let (value, delivery) = window.pop_front().expect("non-empty window");
                    settle(value, delivery.await);
                }
                if i == KILL_AFTER_ACKS {
                    enough_acked.notify_one();
                }
            }
            for (value, delivery) in window {
                settle(value, delivery.await);
            }
            (acked, failed)
        })
    };

    enough_acked.notified().await;
    broker.kill();
    broker.restart();
    let (acked, failed) = sending.await.expect("sending task");
    producer.close().await;
    assert_eq!(
        failed, 0,
        "with a 120 s delivery timeout every record is eventually acknowledged"
    );
    assert_eq!(acked.len(), RECORDS);

    let log = sdk::read_all(&bootstrap, "orders", &[0, 1]).await;
    sdk::assert_exactly_once(&acked, &log);
}
