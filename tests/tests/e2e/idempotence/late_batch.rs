//! A request the SDK gave up on can still reach the broker later. When the partition
//! abandons a sequence it cannot resolve, it bumps the epoch of its producer id
//! (KIP-360) rather than taking a fresh id, so once the partition has seen the new epoch
//! such a late request of the old epoch is refused (`INVALID_PRODUCER_EPOCH`) instead of
//! being appended behind newer batches: the log keeps the send order. With a fresh
//! producer id the late batch would be a valid next sequence of the old id and land
//! after `c`.

use std::time::Duration;

use idem_client::Delivery;
use idem_proto::v1::ProduceResponse;
use idem_proto::ErrorCode;
use idem_tests::raw;
use idem_tests::sdk;
use prost::Message;

/// gRPC frames each message as a compression flag and a 4-byte length.
const GRPC_MESSAGE_PREFIX: usize = 5;

#[tokio::test]
async fn given_a_request_of_the_old_epoch_delivered_after_the_epoch_bump_then_it_is_fenced_and_the_log_keeps_the_send_order(
) {
    let (broker, proxy) = sdk::broker_behind_proxy("orders", 1).await;
    let mut client = raw::connect(&broker.bootstrap()).await;
    // Delivery timeout = request timeout: b gets exactly one attempt, the held one.
    let producer = sdk::with_timeouts(
        &proxy.bootstrap(),
        Delivery::ExactlyOnce,
        Duration::from_millis(1000),
        Duration::from_millis(1000),
    )
    .await;
    let a = sdk::send_one(&producer, "orders", 0, "a").await;
    assert_eq!(a.expect("a acked").offset, 0);

    // b's request is held in the proxy: the broker has its headers, not its body.
    proxy.hold_next_request();
    let b = sdk::send_one(&producer, "orders", 0, "b").await;
    let error = b.expect_err("b's only attempt got no answer before its delivery timeout");
    assert!(error.possibly_written(), "b's outcome is unknown: {error}");
    assert_eq!(proxy.held_requests(), 1, "b's request is held, not lost");

    // The partition abandoned b's sequence and bumped its epoch: c starts at sequence 0.
    let c = sdk::send_one(&producer, "orders", 0, "c").await;
    assert_eq!(c.expect("c acked").offset, 1);

    // Now b's request of the old epoch reaches the broker, after c.
    proxy.release_held();
    tokio::time::timeout(Duration::from_secs(10), proxy.wait_released_responses(1))
        .await
        .expect("the broker answers the late request");
    assert_eq!(proxy.released_requests(), 1);
    producer.close().await;

    let batches = raw::read_batches(&mut client, "orders", 0).await;
    let values: Vec<String> = batches.iter().flat_map(|(_, r)| raw::values(r)).collect();
    assert_eq!(
        values,
        vec!["a", "c"],
        "the late b must not land behind c (log order = send order)"
    );
    let (first, last) = (&batches[0].0, &batches[1].0);
    assert_eq!(
        (last.producer_id, last.producer_epoch, last.base_sequence),
        (first.producer_id, first.producer_epoch + 1, 0),
        "c went out under the next epoch of the same producer id"
    );

    let bodies = proxy.released_response_bodies();
    assert_eq!(bodies.len(), 1, "one answer to the released request");
    let body = &bodies[0];
    assert!(
        body.len() >= GRPC_MESSAGE_PREFIX,
        "the late request got a gRPC answer, not a reset: {body:?}"
    );
    let answer = ProduceResponse::decode(&body[GRPC_MESSAGE_PREFIX..]).expect("a produce answer");
    let partition = &answer.topics[0].partitions[0];
    assert_eq!(
        partition.error_code(),
        ErrorCode::InvalidProducerEpoch,
        "the late b of the old epoch is fenced: {}",
        partition.error_message
    );
}
