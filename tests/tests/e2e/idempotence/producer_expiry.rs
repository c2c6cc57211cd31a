//! A broker forgets producer ids idle longer than `--producer-id-expiration-ms` (server
//! clock). A producer that comes back gets UNKNOWN_PRODUCER_ID; the SDK bumps the epoch
//! of its producer id, restarts its sequences at 0 and writes every record exactly once.

use std::time::Duration;

use idem_client::Delivery;
use idem_proto::ErrorCode;
use idem_tests::raw::{self, RawClient};
use idem_tests::sdk;
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::BrokerProcess;

/// Probes with a sequence gap (refused either way, so it changes nothing) until the
/// broker answers that it no longer knows the producer. Expiry is driven by the
/// broker's clock, so polling it is the only way to observe it.
async fn wait_until_forgotten(client: &RawClient, producer_id: i64) -> Duration {
    let what = format!("the broker forgets producer {producer_id}");
    let ((), idle) = wait_until(PATIENCE, &what, || {
        let mut client = client.clone();
        async move {
            let probe = raw::produce(
                &mut client,
                "orders",
                0,
                raw::idempotent_batch(producer_id, 0, 1_000, &["probe"]),
            )
            .await;
            match probe.error_code() {
                ErrorCode::UnknownProducerId => Seen::Reached(()),
                ErrorCode::OutOfOrderSequenceNumber => Seen::Not("still known".into()),
                other => panic!("unexpected probe answer {other:?}"),
            }
        }
    })
    .await;
    idle
}

#[tokio::test]
async fn given_an_idle_producer_when_it_expires_and_sends_again_then_the_sdk_recovers_with_the_next_epoch(
) {
    let broker = BrokerProcess::start_with(&["--producer-id-expiration-ms", "400"]);
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut client, "orders", 1).await,
        ErrorCode::None
    );
    let producer = sdk::one_record_per_batch(&broker.bootstrap(), Delivery::ExactlyOnce).await;
    for i in 0..5 {
        let written = sdk::send_one(&producer, "orders", 0, &format!("v{i}")).await;
        assert_eq!(written.expect("acked").offset, i);
    }
    let first_id = producer
        .producer_id()
        .expect("idempotent producer has an id")
        .producer_id;
    let idle = wait_until_forgotten(&client, first_id).await;
    assert!(
        idle >= Duration::from_millis(200),
        "expired after {idle:?}, before the configured idle time"
    );

    for i in 5..10 {
        let written = sdk::send_one(&producer, "orders", 0, &format!("v{i}")).await;
        assert_eq!(
            written
                .expect("acked after bumping the producer epoch")
                .offset,
            i
        );
    }
    producer.close().await;
    let log = sdk::read_all(&broker.bootstrap(), "orders", &[0]).await;
    let values: Vec<String> = log.iter().map(sdk::value).collect();
    let expected: Vec<String> = (0..10).map(|i| format!("v{i}")).collect();
    assert_eq!(values, expected);
    let batches = raw::read_batches(&mut client, "orders", 0).await;
    let resumed = &batches[5].0;
    assert_eq!(
        (
            resumed.producer_id,
            resumed.producer_epoch,
            resumed.base_sequence
        ),
        (first_id, 1, 0),
        "v5 went out under the next epoch of the same producer id"
    );
}
