//! One Kafka client connection: length-prefixed frames (a 4-byte big-endian size, then
//! the request header and body), served in order and answered in order, as Kafka's own
//! brokers do, with one difference: a Produce's batches are appended in order, but its
//! answer waits (for fsync and replication) while the connection reads and serves the
//! next requests, up to [`MAX_IN_FLIGHT`] answers outstanding. An idempotent producer
//! keeps five requests in flight; served one at a time, each would wait for its own
//! fsync before the next was appended. Appends stay in arrival order, so a producer
//! without idempotence keeps its order too.
//!
//! A frame that cannot be served is closed on, never half-answered (the answers queued
//! before it are still written): a size under a header's or over
//! `--max-request-bytes`, a truncated frame, a header or body that does not decode, an
//! API or version neither served nor parsed by the codec (one it parses gets
//! UNSUPPORTED_VERSION: `versions.rs`, `unsupported.rs`). Other connections never
//! notice.
//!
//! A connection starts as its client certificate's principal under mutual TLS
//! (`mod.rs`), else `User:ANONYMOUS`, and becomes a token's after a successful SASL
//! exchange (`sasl_session.rs`). The reader serves requests one after another, so each
//! is authorized as the principal the requests before it left; a SASL refusal is
//! answered, then the connection closes.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use idem_runtime::authn::principal::Principal;
use idem_runtime::shutdown::CancellationToken;
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, ApiKey, ApiVersionsRequest,
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, CreateTopicsRequest,
    DeleteGroupsRequest, DeleteTopicsRequest, DescribeGroupsRequest, EndTxnRequest, FetchRequest,
    FindCoordinatorRequest, InitProducerIdRequest, ListOffsetsRequest, MetadataRequest,
    OffsetCommitRequest, OffsetFetchRequest, OffsetForLeaderEpochRequest, ProduceRequest,
    RequestHeader, ResponseHeader, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use kafka_protocol::ResponseError;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::mpsc;

use super::versions::{route, Route};
use super::{
    add_offsets_to_txn, add_partitions_to_txn, api_versions, create_topics, delete_topics, end_txn,
    fetch, find_coordinator, init_producer_id, list_offsets, metadata, txn_offset_commit,
};
use super::{consumer_group_describe, consumer_group_heartbeat, delete_groups, describe_groups};
use super::{offset_commit, offset_fetch, offset_for_leader_epoch};
use super::{produce, unsupported, KafkaContext};
// SASL (sasl_session.rs).
use super::sasl_session::{SaslError, Session};
use super::{sasl_authenticate, sasl_handshake};
use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
// The classic group protocol (classic members of KIP-848 groups).
use super::{heartbeat, join_group, leave_group, sync_group};
use kafka_protocol::messages::{
    HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest,
};
// Listing and describing (issue 30's admin slice).
use super::offset_delete;
use super::{describe_producers, describe_transactions, list_groups, list_transactions};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeTransactionsRequest, ListGroupsRequest,
    ListTransactionsRequest, OffsetDeleteRequest,
};
// Topic configs.
use super::{describe_configs, incremental_alter_configs};
use kafka_protocol::messages::{DescribeConfigsRequest, IncrementalAlterConfigsRequest};

/// The smallest request header: api key, api version, correlation id.
const MIN_FRAME: usize = 8;

/// Why a connection was closed.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame size {size} is outside 8..={max} bytes")]
    Size { size: i64, max: usize },
    #[error("connection closed mid-frame: {0}")]
    Io(#[from] std::io::Error),
    #[error("API key {api_key} version {version} is not served")]
    NotServed { api_key: i16, version: i16 },
    #[error("API key {api_key} version {version} does not decode: {reason}")]
    Decode {
        api_key: i16,
        version: i16,
        reason: String,
    },
    #[error("response does not encode: {0}")]
    Encode(String),
    #[error("SASL: {0}")]
    Sasl(#[from] SaslError),
}

/// How many answers one connection may have outstanding before it stops reading: a
/// Kafka producer keeps at most five requests in flight (idempotence's limit).
const MAX_IN_FLIGHT: usize = 8;

/// A request's answer, as the connection's writer takes it, in request order.
enum Answer {
    /// The frame to write (none for a Produce with acks=0).
    Ready(Option<BytesMut>),
    /// A Produce whose batches are appended; its frame is due once they are durable.
    Settling {
        appended: produce::Appended,
        correlation_id: i32,
        header_version: i16,
        version: i16,
    },
}

/// Serves `stream` (TCP, or a TLS session over it) as `principal` until the client
/// closes it, a frame cannot be served, or `stop`.
pub async fn serve<S>(
    stream: S,
    peer: SocketAddr,
    principal: Principal,
    context: Arc<KafkaContext>,
    stop: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send,
{
    // Not `into_split`, which only a TcpStream has: a TLS session's halves share one
    // state, which `split` locks for each read or write (they never wait on each other
    // for longer than one poll).
    let (reader, writer) = tokio::io::split(stream);
    let (answers, queued) = mpsc::channel(MAX_IN_FLIGHT);
    let reading = read_requests(reader, &context, Session::new(principal), answers, &stop);
    let writing = write_answers(writer, queued);
    tokio::pin!(reading, writing);
    let outcome = tokio::select! {
        // The reader ended (the client closed, `stop`, or a frame that cannot be
        // served): the answers it queued are still written, then the connection closes.
        read = &mut reading => {
            let written = writing.await;
            read.and(written)
        }
        // The writer ends first only on an error: nothing more is read.
        written = &mut writing => written,
    };
    if let Err(e) = outcome {
        tracing::info!(%peer, error = %e, "closing Kafka connection");
        metrics::counter!("idem_kafka_connections_closed_on_error_total").increment(1);
    }
}

/// Reads and serves requests in order, queueing their answers for the writer.
async fn read_requests<S: AsyncRead>(
    mut reader: ReadHalf<S>,
    context: &KafkaContext,
    mut session: Session,
    answers: mpsc::Sender<Answer>,
    stop: &CancellationToken,
) -> Result<(), FrameError> {
    loop {
        // A stop ends the connection between requests, never during one.
        let frame = tokio::select! {
            () = stop.cancelled() => return Ok(()),
            frame = read_frame(&mut reader, context.max_request_bytes) => frame?,
        };
        let Some(frame) = frame else {
            return Ok(());
        };
        let answer = answer(context, &mut session, frame).await?;
        // A SASL refusal is answered late (nothing more is read meanwhile), so a client
        // retrying bad credentials reconnects at that pace; a stop does not wait.
        let refusal = session.ended().cloned();
        if refusal.is_some() {
            tokio::select! {
                () = stop.cancelled() => {}
                () = tokio::time::sleep(context.failed_authentication_delay) => {}
            }
        }
        if answers.send(answer).await.is_err() {
            // The writer failed; it reports why.
            return Ok(());
        }
        // The refusal's answer is queued (the writer writes it), then the connection
        // closes.
        if let Some(refusal) = refusal {
            return Err(refusal.into());
        }
    }
}

/// Writes the answers in request order, each once it is due.
async fn write_answers<S: AsyncWrite>(
    mut writer: WriteHalf<S>,
    mut queued: mpsc::Receiver<Answer>,
) -> Result<(), FrameError> {
    while let Some(answer) = queued.recv().await {
        let frame = match answer {
            Answer::Ready(frame) => frame,
            Answer::Settling {
                appended,
                correlation_id,
                header_version,
                version,
            } => match appended.settle().await {
                Some(body) => Some(respond(correlation_id, header_version, &body, version)?),
                None => None,
            },
        };
        if let Some(frame) = frame {
            writer.write_all(&frame).await?;
            // A TLS session buffers what it encrypts until flushed (TCP writes at once).
            writer.flush().await?;
        }
    }
    Ok(())
}

/// The next frame's bytes after its size; `None` when the client closed between frames.
async fn read_frame<S: AsyncRead>(
    stream: &mut ReadHalf<S>,
    max: usize,
) -> Result<Option<Bytes>, FrameError> {
    let mut size = [0u8; 4];
    match stream.read_exact(&mut size).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    let size = i32::from_be_bytes(size);
    let len = usize::try_from(size)
        .ok()
        .filter(|len| (MIN_FRAME..=max).contains(len))
        .ok_or(FrameError::Size {
            size: i64::from(size),
            max,
        })?;
    let mut frame = vec![0u8; len];
    stream.read_exact(&mut frame).await?;
    Ok(Some(Bytes::from(frame)))
}

/// The answer to `frame`: served in full, or (a Produce) appended.
async fn answer(
    context: &KafkaContext,
    session: &mut Session,
    frame: Bytes,
) -> Result<Answer, FrameError> {
    let api_key = i16::from_be_bytes([frame[0], frame[1]]);
    let version = i16::from_be_bytes([frame[2], frame[3]]);
    let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
    let key = match route(api_key, version) {
        Route::Close => return Err(FrameError::NotServed { api_key, version }),
        Route::ApiVersionsUnsupported => {
            // KIP-511: v0's schema and header, which every client reads.
            let sasl = context.tokens.is_some();
            let body = api_versions::response(ResponseError::UnsupportedVersion.code(), sasl);
            return respond(correlation_id, 0, &body, 0).map(|frame| Answer::Ready(Some(frame)));
        }
        Route::Unsupported(key) => {
            let mut buf = frame;
            RequestHeader::decode(&mut buf, key.request_header_version(version)).map_err(|e| {
                FrameError::Decode {
                    api_key,
                    version,
                    reason: format!("{e:#}"),
                }
            })?;
            let body = unsupported::answer(key, version, &mut buf).map_err(|reason| {
                FrameError::Decode {
                    api_key,
                    version,
                    reason,
                }
            })?;
            tracing::debug!(?key, version, "answered UNSUPPORTED_VERSION");
            return respond(
                correlation_id,
                key.response_header_version(version),
                &Encoded(body),
                version,
            )
            .map(|frame| Answer::Ready(Some(frame)));
        }
        Route::Serve(key) => key,
    };
    let decode_error = |e: anyhow::Error| FrameError::Decode {
        api_key,
        version,
        reason: format!("{e:#}"),
    };
    let mut buf = frame;
    let header = RequestHeader::decode(&mut buf, key.request_header_version(version))
        .map_err(decode_error)?;
    let header_version = key.response_header_version(version);
    // During a SASL exchange anything but ApiVersions and SaslAuthenticate is closed on.
    session.admit(key)?;
    tracing::trace!(?key, version, correlation_id, client_id = ?header.client_id, "Kafka request");
    // The SASL exchange changes the session; every other request only reads who it is.
    let sasl = match key {
        ApiKey::SaslHandshake => {
            let request = SaslHandshakeRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = sasl_handshake::serve(session, &request, version, context.tokens.is_some());
            Some(respond(correlation_id, header_version, &body, version))
        }
        ApiKey::SaslAuthenticate => {
            let request =
                SaslAuthenticateRequest::decode(&mut buf, version).map_err(decode_error)?;
            let tokens = context.tokens.as_ref().map(|file| file.current());
            let body = sasl_authenticate::serve(session, &request, tokens.as_deref());
            Some(respond(correlation_id, header_version, &body, version))
        }
        _ => None,
    };
    if let Some(response) = sasl {
        return response.map(|frame| Answer::Ready(Some(frame)));
    }
    let principal = session.principal().as_str();
    let service = &context.service;
    let response = match key {
        ApiKey::ApiVersions => {
            ApiVersionsRequest::decode(&mut buf, version).map_err(decode_error)?;
            respond(
                correlation_id,
                header_version,
                &api_versions::response(0, context.tokens.is_some()),
                version,
            )
        }
        ApiKey::Metadata => {
            let request = MetadataRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = metadata::serve(service, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::Produce => {
            let request = ProduceRequest::decode(&mut buf, version).map_err(decode_error)?;
            return Ok(Answer::Settling {
                appended: produce::begin(service, principal, request).await,
                correlation_id,
                header_version,
                version,
            });
        }
        ApiKey::Fetch => {
            let request = FetchRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = fetch::serve(service, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::ListOffsets => {
            let request = ListOffsetsRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = list_offsets::serve(service, principal, request);
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::InitProducerId => {
            let request = InitProducerIdRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = init_producer_id::serve(context, principal, request, version).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::CreateTopics => {
            let request = CreateTopicsRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = create_topics::serve(service, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::DeleteTopics => {
            let request = DeleteTopicsRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = delete_topics::serve(service, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::FindCoordinator => {
            let request =
                FindCoordinatorRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = find_coordinator::serve(service, principal, request, version);
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::AddPartitionsToTxn => {
            let request =
                AddPartitionsToTxnRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = add_partitions_to_txn::serve(context, principal, request, version).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::AddOffsetsToTxn => {
            let request =
                AddOffsetsToTxnRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = add_offsets_to_txn::serve(context, principal, request, version).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::EndTxn => {
            let request = EndTxnRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = end_txn::serve(context, principal, request, version).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::TxnOffsetCommit => {
            let request =
                TxnOffsetCommitRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = txn_offset_commit::serve(context, principal, request, version).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::ConsumerGroupHeartbeat => {
            let request =
                ConsumerGroupHeartbeatRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = consumer_group_heartbeat::serve(context, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::OffsetCommit => {
            let request = OffsetCommitRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = offset_commit::serve(context, principal, request, version).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::OffsetFetch => {
            let request = OffsetFetchRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = offset_fetch::serve(context, principal, request, version).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::ConsumerGroupDescribe => {
            let request =
                ConsumerGroupDescribeRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = consumer_group_describe::serve(context, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::DescribeGroups => {
            let request = DescribeGroupsRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = describe_groups::serve(context, principal, request, version).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::OffsetForLeaderEpoch => {
            let request =
                OffsetForLeaderEpochRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = offset_for_leader_epoch::serve(service, principal, request);
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::DeleteGroups => {
            let request = DeleteGroupsRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = delete_groups::serve(context, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::JoinGroup => {
            let request = JoinGroupRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = join_group::serve(context, principal, request, version).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::SyncGroup => {
            let request = SyncGroupRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = sync_group::serve(context, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::Heartbeat => {
            let request = HeartbeatRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = heartbeat::serve(context, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::LeaveGroup => {
            let request = LeaveGroupRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = leave_group::serve(context, principal, request, version).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::ListGroups => {
            let request = ListGroupsRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = list_groups::serve(context, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::ListTransactions => {
            let request =
                ListTransactionsRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = list_transactions::serve(context, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::DescribeTransactions => {
            let request =
                DescribeTransactionsRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = describe_transactions::serve(context, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::DescribeConfigs => {
            let request =
                DescribeConfigsRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = describe_configs::serve(service, principal, request);
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::IncrementalAlterConfigs => {
            let request =
                IncrementalAlterConfigsRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = incremental_alter_configs::serve(service, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::DescribeProducers => {
            let request =
                DescribeProducersRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = describe_producers::serve(service, principal, request);
            respond(correlation_id, header_version, &body, version)
        }
        ApiKey::OffsetDelete => {
            let request = OffsetDeleteRequest::decode(&mut buf, version).map_err(decode_error)?;
            let body = offset_delete::serve(context, principal, request).await;
            respond(correlation_id, header_version, &body, version)
        }
        _ => return Err(FrameError::NotServed { api_key, version }),
    };
    response.map(|frame| Answer::Ready(Some(frame)))
}

/// A body already encoded (`unsupported.rs`).
struct Encoded(BytesMut);

impl Encodable for Encoded {
    fn encode<B: kafka_protocol::protocol::buf::ByteBufMut>(
        &self,
        buf: &mut B,
        _version: i16,
    ) -> anyhow::Result<()> {
        buf.put_slice(&self.0);
        Ok(())
    }

    fn compute_size(&self, _version: i16) -> anyhow::Result<usize> {
        Ok(self.0.len())
    }
}

/// A response frame: size, header (of `header_version`), `body` at `version`.
fn respond(
    correlation_id: i32,
    header_version: i16,
    body: &impl Encodable,
    version: i16,
) -> Result<BytesMut, FrameError> {
    let mut out = BytesMut::new();
    out.put_i32(0); // the size, set below
    ResponseHeader::default()
        .with_correlation_id(correlation_id)
        .encode(&mut out, header_version)
        .map_err(|e| FrameError::Encode(format!("{e:#}")))?;
    body.encode(&mut out, version)
        .map_err(|e| FrameError::Encode(format!("{e:#}")))?;
    let size = i32::try_from(out.len() - 4)
        .map_err(|_| FrameError::Encode("response over 2 GiB".into()))?;
    out[..4].copy_from_slice(&size.to_be_bytes());
    Ok(out)
}
