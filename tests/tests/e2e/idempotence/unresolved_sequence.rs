//! A batch whose retries run out while its outcome is unknown (every response lost
//! until the delivery timeout) is reported as possibly written, and the SDK never
//! reuses its sequence: the next record goes out under the next epoch of the same
//! producer id (KIP-360) from sequence 0, so nothing is duplicated, nothing later is
//! taken for a duplicate, and any late copy of the old epoch would be fenced.

use std::time::Duration;

use idem_client::Delivery;
use idem_tests::{raw, sdk};

#[tokio::test]
async fn given_a_batch_with_an_unknown_outcome_after_its_delivery_timeout_then_the_next_batch_uses_the_next_epoch_of_the_producer_id(
) {
    let (broker, proxy) = sdk::broker_behind_proxy("orders", 1).await;
    let mut client = raw::connect(&broker.bootstrap()).await;
    // Short enough that b gives up within the test, long enough that a and c, with every
    // answer delivered, never time out on a loaded CI machine (500 ms / 1.5 s did once,
    // in the full suite on 2 cores: c's metadata request went unanswered 3 times).
    let producer = sdk::with_timeouts(
        &proxy.bootstrap(),
        Delivery::ExactlyOnce,
        Duration::from_millis(1500),
        Duration::from_millis(4500),
    )
    .await;
    let a = sdk::send_one(&producer, "orders", 0, "a").await;
    assert_eq!(a.expect("acked").offset, 0);

    proxy.lose_next_responses(usize::MAX);
    let b = sdk::send_one(&producer, "orders", 0, "b").await;
    let error = b.expect_err("every answer was lost until the delivery timeout");
    assert!(error.possibly_written(), "the outcome is unknown: {error}");
    assert!(error.retried(), "the SDK retried before giving up: {error}");
    assert!(
        proxy.lost_responses() >= 2,
        "lost {} responses",
        proxy.lost_responses()
    );
    proxy.lose_next_responses(0);

    let c = sdk::send_one(&producer, "orders", 0, "c").await;
    assert_eq!(c.expect("acked").offset, 2, "after the one copy of b");
    producer.close().await;

    let batches = raw::read_batches(&mut client, "orders", 0).await;
    let values: Vec<String> = batches.iter().flat_map(|(_, r)| raw::values(r)).collect();
    assert_eq!(
        values,
        vec!["a", "b", "c"],
        "b was written by its first attempt, once"
    );
    let (first, last) = (&batches[0].0, &batches[2].0);
    assert_eq!(
        (batches[1].0.producer_id, batches[1].0.producer_epoch),
        (first.producer_id, first.producer_epoch)
    );
    assert_eq!(
        (last.producer_id, last.producer_epoch),
        (first.producer_id, first.producer_epoch + 1),
        "c went out under the same producer id with the next epoch"
    );
    assert_eq!(last.base_sequence, 0, "and its sequences restarted at 0");
}
