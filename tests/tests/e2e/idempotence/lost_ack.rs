//! The seed scenario: the broker persists a batch but its response is lost; the SDK
//! retries with the same producer id and sequence, the broker recognises the retry and
//! answers with the original offsets, and the log holds the batch exactly once.

use idem_client::Delivery;
use idem_tests::sdk::{self, bytes};

#[tokio::test]
async fn given_a_persisted_batch_whose_response_is_lost_when_the_sdk_retries_then_it_is_written_once(
) {
    let (broker, proxy) = sdk::broker_behind_proxy("orders", 1).await;
    let producer = sdk::one_record_per_batch(&proxy.bootstrap(), Delivery::ExactlyOnce).await;

    let first = sdk::send_one(&producer, "orders", 0, "order-1")
        .await
        .expect("acked");
    assert_eq!(first.offset, 0);
    proxy.lose_next_responses(1);
    let second = sdk::send_one(&producer, "orders", 0, "order-2")
        .await
        .expect("acked");
    assert_eq!(proxy.lost_responses(), 1, "the response really was lost");
    // Had the retry been appended again, it would sit at offset 2 behind a first copy.
    assert_eq!(
        second.offset, 1,
        "the retry is answered with the original offset"
    );
    let third = sdk::send_one(&producer, "orders", 0, "order-3")
        .await
        .expect("acked");
    assert_eq!(third.offset, 2);
    producer.close().await;

    let log = sdk::read_all(&broker.bootstrap(), "orders", &[0]).await;
    let values: Vec<String> = log.iter().map(sdk::value).collect();
    assert_eq!(values, vec!["order-1", "order-2", "order-3"]);
}

#[tokio::test]
async fn given_many_lost_responses_across_partitions_then_every_acked_record_is_in_the_log_once_at_its_offset(
) {
    let (broker, proxy) = sdk::broker_behind_proxy("orders", 3).await;
    let producer = sdk::one_record_per_batch(&proxy.bootstrap(), Delivery::ExactlyOnce).await;

    let mut acked = Vec::new();
    for round in 0..20 {
        proxy.lose_next_responses(1);
        let mut pending = Vec::new();
        for i in 0..6 {
            let value = format!("r{round}-{i}");
            let key = Some(bytes(&format!("key-{i}")));
            pending.push((
                value.clone(),
                producer
                    .send("orders", key, bytes(&value))
                    .await
                    .expect("send"),
            ));
        }
        for (value, delivery) in pending {
            acked.push((value, delivery.await.expect("every record is acknowledged")));
        }
    }
    producer.close().await;
    assert!(
        proxy.lost_responses() >= 20,
        "lost {} responses",
        proxy.lost_responses()
    );

    let log = sdk::read_all(&broker.bootstrap(), "orders", &[0, 1, 2]).await;
    assert_eq!(log.len(), acked.len(), "no record is duplicated");
    for (value, written) in &acked {
        let at = log
            .iter()
            .find(|r| r.partition == written.partition && r.offset == written.offset)
            .expect("acked offset exists");
        assert_eq!(
            &sdk::value(at),
            value,
            "partition {} offset {}",
            written.partition,
            written.offset
        );
    }
}
