//! The SASL exchange through a whole connection (`connection.rs` driving
//! `sasl_session.rs`), requests pipelined in one write as a client may send them: each
//! is answered in order as the principal the ones before it left, and a refusal is the
//! last answer before the connection closes.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use idem_runtime::authn::principal::Principal;
use idem_runtime::authn::TokenFile;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, MetadataRequest, MetadataResponse, RequestHeader, ResponseHeader,
    SaslAuthenticateRequest, SaslAuthenticateResponse, SaslHandshakeRequest, SaslHandshakeResponse,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::ResponseError;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use idem_runtime::acl::{Acl, Operation, PatternType, Permission, ResourceType};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::TopicName;

use super::test_broker::{context, service};
use super::KafkaContext;

/// One request frame of `key` at `version`.
fn frame(key: ApiKey, version: i16, correlation_id: i32, body: &impl Encodable) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_i32(0);
    RequestHeader::default()
        .with_request_api_key(key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .encode(&mut out, key.request_header_version(version))
        .expect("header");
    body.encode(&mut out, version).expect("body");
    let size = i32::try_from(out.len() - 4).expect("small");
    out[..4].copy_from_slice(&size.to_be_bytes());
    out.to_vec()
}

fn handshake(correlation_id: i32) -> Vec<u8> {
    let body = SaslHandshakeRequest::default().with_mechanism(StrBytes::from_static_str("PLAIN"));
    frame(ApiKey::SaslHandshake, 1, correlation_id, &body)
}

fn authenticate(correlation_id: i32, message: &'static [u8]) -> Vec<u8> {
    let body = SaslAuthenticateRequest::default().with_auth_bytes(Bytes::from_static(message));
    frame(ApiKey::SaslAuthenticate, 2, correlation_id, &body)
}

/// ApiVersions, which is served even during the SASL exchange.
fn api_versions(correlation_id: i32) -> Vec<u8> {
    frame(
        ApiKey::ApiVersions,
        3,
        correlation_id,
        &ApiVersionsRequest::default(),
    )
}

fn metadata(correlation_id: i32) -> Vec<u8> {
    frame(
        ApiKey::Metadata,
        12,
        correlation_id,
        &MetadataRequest::default(),
    )
}

/// Metadata of the topic `orders`, which does not exist: who may describe it learns
/// that (UNKNOWN_TOPIC_OR_PARTITION), anyone else is refused (TOPIC_AUTHORIZATION_FAILED).
fn metadata_of_orders(correlation_id: i32) -> Vec<u8> {
    let topic = MetadataRequestTopic::default()
        .with_name(Some(TopicName(StrBytes::from_static_str("orders"))));
    let body = MetadataRequest::default().with_topics(Some(vec![topic]));
    frame(ApiKey::Metadata, 12, correlation_id, &body)
}

/// The error code of the one topic of a Metadata answer.
fn topic_error(answer: &Bytes) -> i16 {
    let (_, metadata): (_, MetadataResponse) = read(answer.clone(), ApiKey::Metadata, 12);
    assert_eq!(metadata.topics.len(), 1, "{metadata:?}");
    metadata.topics[0].error_code
}

/// A broker context whose token file names alice.
fn sasl_context(dir: &std::path::Path) -> KafkaContext {
    let path = dir.join("tokens");
    std::fs::write(&path, "alice t-alice\n").expect("write tokens");
    let mut context = context(service(dir, None, None));
    context.tokens = Some(TokenFile::load(&path).expect("tokens"));
    context
}

/// Sends `requests` in one write on a fresh connection, half-closes, and returns every
/// answer frame (past its size) until the broker closed.
async fn converse(context: KafkaContext, requests: &[Vec<u8>]) -> Vec<Bytes> {
    let (mut client, server) = tokio::io::duplex(1 << 16);
    let peer = "127.0.0.1:1".parse().expect("address");
    let serving = tokio::spawn(super::connection::serve(
        server,
        peer,
        Principal::anonymous(),
        Arc::new(context),
        CancellationToken::new(),
    ));
    client.write_all(&requests.concat()).await.expect("send");
    client.shutdown().await.expect("half-close");
    let mut all = Vec::new();
    client.read_to_end(&mut all).await.expect("read answers");
    serving.await.expect("connection served");
    let mut all = Bytes::from(all);
    let mut frames = Vec::new();
    while all.remaining() >= 4 {
        let size = usize::try_from(all.get_i32()).expect("a size");
        frames.push(all.split_to(size));
    }
    assert!(all.is_empty(), "a torn answer");
    frames
}

/// The correlation id and body of an answer to `key` at `version`.
fn read<T: Decodable>(mut answer: Bytes, key: ApiKey, version: i16) -> (i32, T) {
    let header =
        ResponseHeader::decode(&mut answer, key.response_header_version(version)).expect("header");
    let body = T::decode(&mut answer, version).expect("body");
    (header.correlation_id, body)
}

#[tokio::test]
async fn given_a_wrong_token_then_the_refusal_is_the_last_answer_and_nothing_after_it_is_served() {
    let dir = tempfile::tempdir().expect("dir");
    let answers = converse(
        sasl_context(dir.path()),
        &[
            handshake(1),
            authenticate(2, b"\0alice\0t-wrong"),
            // Served during an exchange, but not after a refusal.
            api_versions(3),
        ],
    )
    .await;
    assert_eq!(
        answers.len(),
        2,
        "the request after the refusal was answered"
    );
    let (id, handshake): (_, SaslHandshakeResponse) =
        read(answers[0].clone(), ApiKey::SaslHandshake, 1);
    assert_eq!((id, handshake.error_code), (1, 0));
    let (id, refused): (_, SaslAuthenticateResponse) =
        read(answers[1].clone(), ApiKey::SaslAuthenticate, 2);
    assert_eq!(id, 2);
    assert_eq!(
        refused.error_code,
        ResponseError::SaslAuthenticationFailed.code()
    );
    let message = refused.error_message.expect("a message");
    assert!(message.contains("invalid credentials"), "{message}");
    assert!(!message.contains("t-wrong"), "{message}");
}

#[tokio::test]
async fn given_a_good_token_then_the_pipelined_requests_after_it_are_served_and_a_second_handshake_ends_it(
) {
    let dir = tempfile::tempdir().expect("dir");
    let answers = converse(
        sasl_context(dir.path()),
        &[
            handshake(1),
            authenticate(2, b"\0alice\0t-alice"),
            metadata(3),
            handshake(4),
            metadata(5),
        ],
    )
    .await;
    assert_eq!(answers.len(), 4, "{answers:?}");
    let (id, authenticated): (_, SaslAuthenticateResponse) =
        read(answers[1].clone(), ApiKey::SaslAuthenticate, 2);
    assert_eq!((id, authenticated.error_code), (2, 0));
    let (id, _): (_, MetadataResponse) = read(answers[2].clone(), ApiKey::Metadata, 12);
    assert_eq!(id, 3);
    let (id, again): (_, SaslHandshakeResponse) =
        read(answers[3].clone(), ApiKey::SaslHandshake, 1);
    assert_eq!(
        (id, again.error_code),
        (4, ResponseError::IllegalSaslState.code())
    );
}

#[tokio::test]
async fn given_a_handshake_then_a_request_before_authentication_closes_the_connection_unanswered() {
    let dir = tempfile::tempdir().expect("dir");
    let answers = converse(sasl_context(dir.path()), &[handshake(1), metadata(2)]).await;
    assert_eq!(answers.len(), 1, "only the handshake is answered");
}

#[tokio::test]
async fn given_no_token_file_then_a_handshake_offers_no_mechanism_and_ends_the_connection() {
    let dir = tempfile::tempdir().expect("dir");
    let answers = converse(
        context(service(dir.path(), None, None)),
        &[handshake(1), metadata(2)],
    )
    .await;
    assert_eq!(answers.len(), 1);
    let (_, refused): (_, SaslHandshakeResponse) =
        read(answers[0].clone(), ApiKey::SaslHandshake, 1);
    assert_eq!(
        refused.error_code,
        ResponseError::UnsupportedSaslMechanism.code()
    );
    assert!(refused.mechanisms.is_empty());
}

#[tokio::test]
async fn given_pipelined_requests_then_each_runs_as_the_principal_the_ones_before_it_left() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("tokens");
    std::fs::write(&path, "alice t-alice\n").expect("write tokens");
    let alice_describes = Acl::new(
        "User:alice",
        ResourceType::Topic,
        "orders",
        PatternType::Literal,
        Operation::Describe,
        Permission::Allow,
    )
    .expect("an ACL");
    let mut context = context(service(dir.path(), None, Some(vec![alice_describes])));
    context.tokens = Some(TokenFile::load(&path).expect("tokens"));
    let answers = converse(
        context,
        &[
            metadata_of_orders(1),
            handshake(2),
            authenticate(3, b"\0alice\0t-alice"),
            metadata_of_orders(4),
        ],
    )
    .await;
    assert_eq!(answers.len(), 4);
    assert_eq!(
        topic_error(&answers[0]),
        ResponseError::TopicAuthorizationFailed.code(),
        "before SASL: User:ANONYMOUS"
    );
    assert_eq!(
        topic_error(&answers[3]),
        ResponseError::UnknownTopicOrPartition.code(),
        "after SASL: User:alice"
    );
}

/// How long [`converse`] took on the runtime's clock (paused in the tests below, so it is
/// exactly the time the broker slept: the conversation has nothing else to wait for).
async fn converse_timed(context: KafkaContext, requests: &[Vec<u8>]) -> (Vec<Bytes>, Duration) {
    let started = tokio::time::Instant::now();
    let answers = converse(context, requests).await;
    (answers, started.elapsed())
}

#[tokio::test(start_paused = true)]
async fn given_a_failed_authentication_then_its_refusal_comes_after_the_delay_and_a_success_does_not_wait(
) {
    let dir = tempfile::tempdir().expect("dir");
    let delay = Duration::from_millis(100);
    let mut refusing = sasl_context(dir.path());
    refusing.failed_authentication_delay = delay;
    let (answers, took) = converse_timed(
        refusing,
        &[handshake(1), authenticate(2, b"\0alice\0t-wrong")],
    )
    .await;
    let (_, refused): (_, SaslAuthenticateResponse) =
        read(answers[1].clone(), ApiKey::SaslAuthenticate, 2);
    assert_eq!(
        refused.error_code,
        ResponseError::SaslAuthenticationFailed.code()
    );
    assert!(took >= delay, "the refusal came after {took:?}");

    let mut accepting = sasl_context(dir.path());
    accepting.failed_authentication_delay = delay;
    let (answers, took) = converse_timed(
        accepting,
        &[
            handshake(1),
            authenticate(2, b"\0alice\0t-alice"),
            api_versions(3),
        ],
    )
    .await;
    assert_eq!(answers.len(), 3);
    let (_, accepted): (_, SaslAuthenticateResponse) =
        read(answers[1].clone(), ApiKey::SaslAuthenticate, 2);
    assert_eq!(accepted.error_code, 0);
    assert!(took < delay, "a good token waited {took:?}");
}
