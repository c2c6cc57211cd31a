//! The cap on new producer ids per principal per minute (KIP-936,
//! `--max-new-producer-ids-per-minute`): a principal past it is refused
//! THROTTLING_QUOTA_EXCEEDED, saying when the next id comes, while another principal
//! is still served and an epoch bump of an id already handed out is not counted.

use idem_proto::v1::{InitProducerIdRequest, InitProducerIdResponse};
use idem_proto::ErrorCode;
use idem_tests::raw::{self, RawClient};
use idem_tests::BrokerProcess;

async fn init_as(
    client: &mut RawClient,
    token: &str,
    bump: Option<(i64, i32)>,
) -> InitProducerIdResponse {
    let mut request = tonic::Request::new(InitProducerIdRequest {
        producer_id: bump.map(|(id, _)| id),
        producer_epoch: bump.map_or(-1, |(_, epoch)| epoch),
        ..InitProducerIdRequest::default()
    });
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("ASCII"),
    );
    client
        .init_producer_id(request)
        .await
        .expect("InitProducerId")
        .into_inner()
}

#[tokio::test]
async fn given_a_cap_of_two_new_ids_when_a_principal_asks_for_a_third_then_it_is_throttled_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "alice t-alice\nbob t-bob\n").expect("token file");
    let tokens = tokens.display().to_string();
    let broker = BrokerProcess::start_with(&[
        "--max-new-producer-ids-per-minute",
        "2",
        "--auth-token-file",
        &tokens,
    ]);
    let mut client = raw::connect(&broker.bootstrap()).await;

    let first = init_as(&mut client, "t-alice", None).await;
    let second = init_as(&mut client, "t-alice", None).await;
    for granted in [&first, &second] {
        assert_eq!(granted.error_code(), ErrorCode::None);
        assert!(granted.producer_id >= 0);
    }
    assert_ne!(first.producer_id, second.producer_id);

    let third = init_as(&mut client, "t-alice", None).await;
    assert_eq!(third.error_code(), ErrorCode::ThrottlingQuotaExceeded);
    assert_eq!((third.producer_id, third.producer_epoch), (-1, -1));
    assert!(
        third.error_message.contains("User:alice") && third.error_message.contains("next in"),
        "{}",
        third.error_message
    );

    // An epoch bump (KIP-360) of an id alice holds is no new id: granted.
    let bumped = init_as(&mut client, "t-alice", Some((first.producer_id, 0))).await;
    assert_eq!(bumped.error_code(), ErrorCode::None);
    assert_eq!(
        (bumped.producer_id, bumped.producer_epoch),
        (first.producer_id, 1)
    );
    // Bob has a cap of his own.
    let bob = init_as(&mut client, "t-bob", None).await;
    assert_eq!(bob.error_code(), ErrorCode::None);
    // The refusal handed out nothing: the next id anyone gets follows alice's second.
    assert_eq!(bob.producer_id, second.producer_id + 1);
}
