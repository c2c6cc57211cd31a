//! Five batches in flight; the first never reaches the broker, so the other four come
//! back OUT_OF_ORDER_SEQUENCE_NUMBER. The SDK resends all of them in sequence order:
//! the log order equals the send order and nothing is duplicated.

use idem_client::Delivery;
use idem_tests::sdk::{self, bytes};

#[tokio::test]
async fn given_five_in_flight_when_the_first_is_lost_and_the_rest_are_out_of_order_then_log_order_is_send_order(
) {
    let (broker, proxy) = sdk::broker_behind_proxy("orders", 1).await;
    let producer = sdk::one_record_per_batch(&proxy.bootstrap(), Delivery::ExactlyOnce).await;
    let warmup = sdk::send_one(&producer, "orders", 0, "v0")
        .await
        .expect("acked");
    assert_eq!(warmup.offset, 0);

    // The proxy drops the body of the next request and closes the connection once the
    // four requests behind it have been answered.
    proxy.swallow_next_request(4);
    let mut pending = Vec::new();
    for i in 1..=5 {
        pending.push(
            producer
                .send_to("orders", 0, None, bytes(&format!("v{i}")))
                .await
                .expect("send"),
        );
    }
    let mut offsets = Vec::new();
    for delivery in pending {
        offsets.push(delivery.await.expect("acked after retries").offset);
    }
    assert_eq!(
        proxy.swallowed_requests(),
        1,
        "the first request never reached the broker"
    );
    assert_eq!(
        proxy.closed_connections(),
        1,
        "four later requests were in flight and answered (OUT_OF_ORDER) before the first failed"
    );
    assert_eq!(offsets, vec![1, 2, 3, 4, 5]);
    producer.close().await;

    let log = sdk::read_all(&broker.bootstrap(), "orders", &[0]).await;
    let values: Vec<String> = log.iter().map(sdk::value).collect();
    assert_eq!(values, vec!["v0", "v1", "v2", "v3", "v4", "v5"]);
}
