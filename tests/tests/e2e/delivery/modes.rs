//! The delivery-semantics table of the README, checked by losing things on purpose:
//! at-most-once may lose a record (never retries), at-least-once may duplicate it
//! (retries without idempotence), exactly-once does neither.

use idem_client::Delivery;
use idem_tests::sdk;
use idem_tests::{BrokerProcess, FaultyProxy};

async fn setup(delivery: Delivery) -> (BrokerProcess, FaultyProxy, idem_client::Producer) {
    let (broker, proxy) = sdk::broker_behind_proxy("t", 1).await;
    let producer = sdk::one_record_per_batch(&proxy.bootstrap(), delivery).await;
    let first = sdk::send_one(&producer, "t", 0, "a").await.expect("acked");
    assert_eq!(first.offset, 0);
    (broker, proxy, producer)
}

async fn log_values(broker: &BrokerProcess) -> Vec<String> {
    sdk::read_all(&broker.bootstrap(), "t", &[0])
        .await
        .iter()
        .map(sdk::value)
        .collect()
}

#[tokio::test]
async fn given_at_most_once_when_a_request_is_lost_then_the_record_is_lost_and_reported() {
    let (broker, proxy, producer) = setup(Delivery::AtMostOnce).await;
    proxy.swallow_next_request(0);
    let lost = sdk::send_one(&producer, "t", 0, "b").await;
    let error = lost.expect_err("at-most-once does not retry a lost request");
    assert!(!error.retried(), "at-most-once never retries: {error}");
    let next = sdk::send_one(&producer, "t", 0, "c").await.expect("acked");
    producer.close().await;
    assert_eq!(proxy.swallowed_requests(), 1);
    assert_eq!(next.offset, 1);
    assert_eq!(log_values(&broker).await, vec!["a", "c"], "b was lost");
}

#[tokio::test]
async fn given_at_most_once_when_a_response_is_lost_then_it_is_not_retried_and_written_at_most_once(
) {
    let (broker, proxy, producer) = setup(Delivery::AtMostOnce).await;
    proxy.lose_next_responses(1);
    let unknown = sdk::send_one(&producer, "t", 0, "b").await;
    let error = unknown.expect_err("the answer was lost");
    assert!(
        error.possibly_written(),
        "a lost response may mean written: {error}"
    );
    producer.close().await;
    assert_eq!(proxy.lost_responses(), 1);
    assert_eq!(
        log_values(&broker).await,
        vec!["a", "b"],
        "written by the one attempt, never twice"
    );
}

#[tokio::test]
async fn given_at_least_once_when_a_response_is_lost_then_the_retry_duplicates_the_record() {
    let (broker, proxy, producer) = setup(Delivery::AtLeastOnce).await;
    proxy.lose_next_responses(1);
    let written = sdk::send_one(&producer, "t", 0, "b").await.expect("acked");
    producer.close().await;
    assert_eq!(proxy.lost_responses(), 1);
    assert_eq!(written.offset, 2, "the retry was appended as a second copy");
    assert_eq!(log_values(&broker).await, vec!["a", "b", "b"]);
}

#[tokio::test]
async fn given_exactly_once_when_a_response_and_a_request_are_lost_then_each_record_is_written_once(
) {
    let (broker, proxy, producer) = setup(Delivery::ExactlyOnce).await;
    proxy.lose_next_responses(1);
    let b = sdk::send_one(&producer, "t", 0, "b").await.expect("acked");
    proxy.swallow_next_request(0);
    let c = sdk::send_one(&producer, "t", 0, "c").await.expect("acked");
    producer.close().await;
    assert_eq!((proxy.lost_responses(), proxy.swallowed_requests()), (1, 1));
    assert_eq!((b.offset, c.offset), (1, 2));
    assert_eq!(log_values(&broker).await, vec!["a", "b", "c"]);
}
