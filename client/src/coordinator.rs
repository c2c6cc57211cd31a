//! The client's link to coordinators: FindCoordinator through the bootstrap broker, one
//! lazily dialled channel per coordinator address (serving both `TxnCoordinator` and
//! `GroupCoordinator`), and the last coordinator found per transactional id or group. Calls retry what the protocol calls
//! retriable (a coordinator that moved, is loading or is busy; an answer lost in
//! transport) until a deadline, finding the coordinator again when it may have moved.
//! Invariant: an answer that is not retriable — fencing above all — ends the call at
//! once and is returned as is, so no retry can turn a refusal into a success.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use backon::Retryable;
use idem_proto::v1::group_coordinator_client::GroupCoordinatorClient;
use idem_proto::v1::txn_coordinator_client::TxnCoordinatorClient;
use idem_proto::v1::{
    AbortTransactionRequest, AbortTransactionResponse, AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    ConsumerGroupHeartbeatResponse, DescribeTransactionRequest, DescribeTransactionResponse,
    EndTxnRequest, EndTxnResponse, FindCoordinatorRequest, ListTransactionsRequest,
    ListTransactionsResponse, OffsetCommitPartition, OffsetCommitResponse, OffsetCommitTopic,
    OffsetCommitTopicResult, OffsetFetchResponse, TxnInitProducerIdRequest,
    TxnInitProducerIdResponse, TxnOffsetCommitRequest, TxnOffsetCommitResponse, TxnTopicPartitions,
};
use idem_proto::ErrorCode;
use tokio::time::Instant;

use crate::credentials::AuthChannel;

use crate::connection::{with_timeout, Connection, MAX_MESSAGE_BYTES};
use crate::error::{is_retriable_status, ClientError};
use crate::group::member::TopicPartition;
use crate::retry;
use crate::types::{GroupMetadata, ProducerIdAndEpoch};

pub(crate) type CoordinatorClient = TxnCoordinatorClient<AuthChannel>;
pub(crate) type GroupClient = GroupCoordinatorClient<AuthChannel>;

/// What a coordinator is found for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum CoordinatorKey {
    Transaction(String),
    Group(String),
}

impl CoordinatorKey {
    fn request(&self) -> FindCoordinatorRequest {
        match self {
            CoordinatorKey::Transaction(id) => FindCoordinatorRequest {
                transactional_id: id.clone(),
                group_id: String::new(),
            },
            CoordinatorKey::Group(id) => FindCoordinatorRequest {
                transactional_id: String::new(),
                group_id: id.clone(),
            },
        }
    }
}

impl std::fmt::Display for CoordinatorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CoordinatorKey::Transaction(id) => write!(f, "transactional id {id:?}"),
            CoordinatorKey::Group(id) => write!(f, "group {id:?}"),
        }
    }
}

/// A service client over a coordinator channel, with the SDK's message size limits.
pub(crate) trait OverChannel {
    fn over(channel: AuthChannel) -> Self;
}

impl OverChannel for CoordinatorClient {
    fn over(channel: AuthChannel) -> Self {
        TxnCoordinatorClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }
}

impl OverChannel for GroupClient {
    fn over(channel: AuthChannel) -> Self {
        GroupCoordinatorClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }
}

/// What to do after a coordinator call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryAction {
    /// The coordinator may have moved (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, no
    /// answer): find it again, then retry.
    Refind,
    /// The same coordinator is busy (loading its log, ending the previous transaction):
    /// retry after a backoff.
    Retry,
    /// Retrying cannot help: return the error.
    GiveUp,
}

/// How a coordinator call reacts to `error` (pure; see the module doc's invariant).
pub(crate) fn retry_action(error: &ClientError) -> RetryAction {
    match error {
        ClientError::Broker { code, .. } => match code {
            ErrorCode::NotCoordinator | ErrorCode::CoordinatorNotAvailable => RetryAction::Refind,
            ErrorCode::CoordinatorLoadInProgress | ErrorCode::ConcurrentTransactions => {
                RetryAction::Retry
            }
            _ => RetryAction::GiveUp,
        },
        ClientError::Transport(status) if is_retriable_status(status.code()) => RetryAction::Refind,
        // The coordinator's address could not be dialled at all.
        ClientError::Connect { .. } => RetryAction::Refind,
        _ => RetryAction::GiveUp,
    }
}

/// The error code and message every coordinator answer carries.
pub(crate) trait CoordinatorAnswer {
    fn error(&self) -> Option<ClientError>;
}

macro_rules! coordinator_answer {
    ($($t:ty),*) => {$(
        impl CoordinatorAnswer for $t {
            fn error(&self) -> Option<ClientError> {
                (self.error_code != ErrorCode::None as i32)
                    .then(|| ClientError::broker(self.error_code, self.error_message.clone()))
            }
        }
    )*};
}

coordinator_answer!(
    AddOffsetsToTxnResponse,
    TxnOffsetCommitResponse,
    ConsumerGroupHeartbeatResponse,
    OffsetCommitResponse,
    OffsetFetchResponse,
    TxnInitProducerIdResponse,
    AddPartitionsToTxnResponse,
    EndTxnResponse,
    ListTransactionsResponse,
    DescribeTransactionResponse,
    AbortTransactionResponse
);

/// Answers whose errors are per group: the call itself succeeded.
macro_rules! per_group_answer {
    ($($t:ty),*) => {$(
        impl CoordinatorAnswer for $t {
            fn error(&self) -> Option<ClientError> {
                None
            }
        }
    )*};
}

per_group_answer!(
    idem_proto::v1::DescribeGroupsResponse,
    idem_proto::v1::DeleteGroupsResponse
);

/// How a retried call ended: its result, and how many earlier attempts got no answer
/// (any of them may have been acted on).
#[derive(Debug)]
pub(crate) struct Answer<T> {
    pub result: Result<T, ClientError>,
    pub lost_attempts: u32,
}

/// Channels to the coordinators and where each transactional id or group was last
/// found.
#[derive(Debug)]
pub(crate) struct CoordinatorLink {
    conn: Connection,
    pool: Mutex<HashMap<String, AuthChannel>>,
    found: Mutex<HashMap<CoordinatorKey, String>>,
}

impl CoordinatorLink {
    pub(crate) fn new(conn: Connection) -> Self {
        CoordinatorLink {
            conn,
            pool: Mutex::new(HashMap::new()),
            found: Mutex::new(HashMap::new()),
        }
    }

    pub(crate) fn request_timeout(&self) -> Duration {
        self.conn.request_timeout()
    }

    /// The address of the coordinator of `key`: cached, or asked of the bootstrap broker
    /// (lost answers retried there).
    pub(crate) async fn find(&self, key: &CoordinatorKey) -> Result<String, ClientError> {
        if let Some(address) = self.found.lock().ok().and_then(|f| f.get(key).cloned()) {
            return Ok(address);
        }
        let request = key.request();
        let answer = self
            .conn
            .call_retrying(|mut client| {
                let request = request.clone();
                async move { client.find_coordinator(request).await }
            })
            .await?;
        if answer.error_code != ErrorCode::None as i32 {
            return Err(ClientError::broker(answer.error_code, answer.error_message));
        }
        if answer.address.trim().is_empty() {
            return Err(ClientError::Protocol(format!(
                "FindCoordinator for {key} named no address"
            )));
        }
        tracing::debug!(
            %key,
            coordinator_id = answer.coordinator_id,
            address = %answer.address,
            txn_log_partition = answer.txn_log_partition,
            "found the coordinator"
        );
        if let Ok(mut found) = self.found.lock() {
            found.insert(key.clone(), answer.address.clone());
        }
        Ok(answer.address)
    }

    /// Forgets where `key`'s coordinator is (it moved or did not answer).
    pub(crate) fn forget(&self, key: &CoordinatorKey) {
        if let Ok(mut found) = self.found.lock() {
            found.remove(key);
        }
    }

    /// The channel to the coordinator at `address` (dialled lazily, redialled when it
    /// breaks).
    fn channel(&self, address: &str) -> Result<AuthChannel, ClientError> {
        let mut pool = self
            .pool
            .lock()
            .map_err(|_| ClientError::Fatal("coordinator pool poisoned".into()))?;
        if let Some(channel) = pool.get(address) {
            return Ok(channel.clone());
        }
        let endpoint = crate::connection::endpoint(address, self.conn.tls()).map_err(|e| {
            ClientError::Protocol(format!("a coordinator has a bad address {address:?}: {e}"))
        })?;
        let channel = AuthChannel::new(endpoint.connect_lazy(), self.conn.credentials().clone());
        pool.insert(address.to_string(), channel.clone());
        Ok(channel)
    }

    /// A `TxnCoordinator` client for the coordinator at `address`.
    pub(crate) fn client(&self, address: &str) -> Result<CoordinatorClient, ClientError> {
        self.channel(address).map(CoordinatorClient::over)
    }

    /// A `GroupCoordinator` client for the coordinator at `address`.
    pub(crate) fn group_client(&self, address: &str) -> Result<GroupClient, ClientError> {
        self.channel(address).map(GroupClient::over)
    }

    /// Runs `rpc` against the transaction coordinator of `transactional_id`; see
    /// [`CoordinatorLink::call_on`].
    pub(crate) async fn call<T, F, Fut>(
        &self,
        transactional_id: &str,
        deadline: Instant,
        rpc: F,
    ) -> Answer<T>
    where
        T: CoordinatorAnswer,
        F: FnMut(CoordinatorClient) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let key = CoordinatorKey::Transaction(transactional_id.to_string());
        self.call_on(&key, deadline, rpc).await
    }

    /// Runs `rpc` against the coordinator of `key` until it succeeds, fails for good, or
    /// `deadline` passes (then the last error is returned).
    pub(crate) async fn call_on<C, T, F, Fut>(
        &self,
        key: &CoordinatorKey,
        deadline: Instant,
        rpc: F,
    ) -> Answer<T>
    where
        C: OverChannel,
        T: CoordinatorAnswer,
        F: FnMut(C) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        // Shared with every attempt, and `Sync` so that the call stays `Send`.
        let rpc = Mutex::new(rpc);
        let lost_attempts = AtomicU32::new(0);
        let attempt = || async {
            let attempt_timeout = self
                .request_timeout()
                .min(deadline.saturating_duration_since(Instant::now()))
                .max(Duration::from_millis(1));
            let address = self.find(key).await?;
            let client = C::over(self.channel(&address)?);
            // The lock ends with the call: the future `rpc` returns owns its request.
            let sent = (rpc
                .lock()
                .map_err(|_| ClientError::Fatal("coordinator call poisoned".into()))?)(
                client
            );
            let answer = with_timeout(attempt_timeout, sent).await.inspect_err(|_| {
                lost_attempts.fetch_add(1, Ordering::Relaxed);
            })?;
            match answer.error() {
                None => Ok(answer),
                Some(e) => Err(e),
            }
        };
        let result = attempt
            .retry(retry::coordinator_backoff())
            .when(|error| {
                let action = retry_action(error);
                if action == RetryAction::Refind {
                    self.forget(key);
                }
                action != RetryAction::GiveUp
            })
            // A pause that would end past the deadline is not taken: the call gives up
            // with the error it has.
            .adjust(|_, pause| pause.filter(|pause| Instant::now() + *pause < deadline))
            .notify(|error, pause| {
                tracing::debug!(%key, %error, action = ?retry_action(error), ?pause, "coordinator call will retry");
            })
            .await;
        Answer {
            result,
            lost_attempts: lost_attempts.into_inner(),
        }
    }

    /// InitProducerId for `transactional_id`: the id at its next epoch (or a fresh
    /// producer id). `renewing`: the caller's own current identity, when a running
    /// instance renews itself; the coordinator refuses (PRODUCER_FENCED) if another
    /// instance took over since.
    pub(crate) async fn init_producer_id(
        &self,
        transactional_id: &str,
        transaction_timeout_ms: i32,
        renewing: Option<ProducerIdAndEpoch>,
        deadline: Instant,
    ) -> Result<ProducerIdAndEpoch, ClientError> {
        let request = TxnInitProducerIdRequest {
            transactional_id: transactional_id.to_string(),
            transaction_timeout_ms,
            producer_id: renewing.map(|p| p.producer_id),
            producer_epoch: renewing.map_or(0, |p| i32::from(p.producer_epoch)),
        };
        let answer = self
            .call(transactional_id, deadline, |mut c| {
                let request = request.clone();
                async move { c.init_producer_id(request).await }
            })
            .await
            .result?;
        let producer_epoch = i16::try_from(answer.producer_epoch)
            .ok()
            .filter(|e| *e >= 0);
        match producer_epoch {
            Some(producer_epoch) if answer.producer_id >= 0 => Ok(ProducerIdAndEpoch {
                producer_id: answer.producer_id,
                producer_epoch,
            }),
            _ => Err(ClientError::Protocol(format!(
                "the coordinator handed out producer {} epoch {}",
                answer.producer_id, answer.producer_epoch
            ))),
        }
    }

    /// Registers the partitions of each topic in the open transaction (all or nothing).
    pub(crate) async fn add_partitions(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        topics: impl IntoIterator<Item = (String, Vec<i32>)>,
        deadline: Instant,
    ) -> Result<(), ClientError> {
        let request = AddPartitionsToTxnRequest {
            transactional_id: transactional_id.to_string(),
            producer_id: producer.producer_id,
            producer_epoch: i32::from(producer.producer_epoch),
            topics: topics
                .into_iter()
                .map(|(topic, partitions)| TxnTopicPartitions { topic, partitions })
                .collect(),
        };
        self.call(transactional_id, deadline, |mut c| {
            let request = request.clone();
            async move { c.add_partitions_to_txn(request).await }
        })
        .await
        .result
        .map(|_| ())
    }

    /// Adds `group_id`'s offsets partition to the open transaction (KIP-447).
    pub(crate) async fn add_offsets(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        group_id: &str,
        deadline: Instant,
    ) -> Result<(), ClientError> {
        let request = AddOffsetsToTxnRequest {
            transactional_id: transactional_id.to_string(),
            producer_id: producer.producer_id,
            producer_epoch: i32::from(producer.producer_epoch),
            group_id: group_id.to_string(),
        };
        self.call(transactional_id, deadline, |mut c| {
            let request = request.clone();
            async move { c.add_offsets_to_txn(request).await }
        })
        .await
        .result
        .map(|_| ())
    }

    /// Stores `offsets` (next offset to read, per partition) for the group member
    /// `group` inside the open transaction, at the group's coordinator. A refused
    /// partition (a stale member epoch above all) fails the whole call.
    pub(crate) async fn txn_offset_commit(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        group: &GroupMetadata,
        offsets: &[(TopicPartition, i64)],
        deadline: Instant,
    ) -> Result<(), ClientError> {
        let topics = commit_topics(offsets);
        let request = TxnOffsetCommitRequest {
            transactional_id: transactional_id.to_string(),
            producer_id: producer.producer_id,
            producer_epoch: i32::from(producer.producer_epoch),
            group_id: group.group_id.clone(),
            member_id: group.member_id.clone(),
            member_epoch: group.member_epoch,
            topics,
        };
        let key = CoordinatorKey::Group(group.group_id.clone());
        let answer = self
            .call_on(&key, deadline, |mut c: GroupClient| {
                let request = request.clone();
                async move { c.txn_offset_commit(request).await }
            })
            .await
            .result?;
        first_refusal(&answer.topics).map_or(Ok(()), Err)
    }

    /// Commits or aborts the open transaction; returns the epoch the producer uses from
    /// now on. A retry whose first attempt was acted on is answered like the first (the
    /// coordinator reports the same outcome), so retrying lost answers is safe.
    pub(crate) async fn end_txn(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        commit: bool,
        deadline: Instant,
    ) -> Result<i16, ClientError> {
        let request = EndTxnRequest {
            transactional_id: transactional_id.to_string(),
            producer_id: producer.producer_id,
            producer_epoch: i32::from(producer.producer_epoch),
            commit,
            // The SDK moves to the epoch the answer names (KIP-890's way).
            keep_epoch: false,
        };
        let answer = self
            .call(transactional_id, deadline, |mut c| {
                let request = request.clone();
                async move { c.end_txn(request).await }
            })
            .await
            .result?;
        next_epoch(producer, answer.producer_epoch)
    }

    pub(crate) async fn describe(
        &self,
        transactional_id: &str,
        deadline: Instant,
    ) -> Result<DescribeTransactionResponse, ClientError> {
        let request = DescribeTransactionRequest {
            transactional_id: transactional_id.to_string(),
        };
        self.call(transactional_id, deadline, |mut c| {
            let request = request.clone();
            async move { c.describe_transaction(request).await }
        })
        .await
        .result
    }

    pub(crate) async fn abort(
        &self,
        transactional_id: &str,
        deadline: Instant,
    ) -> Answer<AbortTransactionResponse> {
        let request = AbortTransactionRequest {
            transactional_id: transactional_id.to_string(),
        };
        self.call(transactional_id, deadline, |mut c| {
            let request = request.clone();
            async move { c.abort_transaction(request).await }
        })
        .await
    }

    /// Every transaction the coordinator at `address` owns (one attempt).
    pub(crate) async fn list(
        &self,
        address: &str,
    ) -> Result<ListTransactionsResponse, ClientError> {
        let mut client = self.client(address)?;
        let answer = with_timeout(
            self.request_timeout(),
            client.list_transactions(ListTransactionsRequest { states: Vec::new() }),
        )
        .await?;
        match answer.error() {
            None => Ok(answer),
            Some(e) => Err(e),
        }
    }
}

/// `offsets` (next offset to read, per partition) as an offset commit carries them.
pub(crate) fn commit_topics(offsets: &[(TopicPartition, i64)]) -> Vec<OffsetCommitTopic> {
    let mut topics: Vec<OffsetCommitTopic> = Vec::new();
    for ((topic, partition), offset) in offsets {
        let entry = OffsetCommitPartition {
            partition: *partition,
            offset: *offset,
            leader_epoch: None,
            metadata: String::new(),
        };
        match topics.iter_mut().find(|t| t.name == *topic) {
            Some(t) => t.partitions.push(entry),
            None => topics.push(OffsetCommitTopic {
                name: topic.clone(),
                partitions: vec![entry],
            }),
        }
    }
    topics
}

/// The first partition an offset commit refused, as an error naming it.
pub(crate) fn first_refusal(topics: &[OffsetCommitTopicResult]) -> Option<ClientError> {
    topics.iter().find_map(|topic| {
        topic.partitions.iter().find_map(|p| {
            (p.error_code != ErrorCode::None as i32).then(|| {
                ClientError::broker(
                    p.error_code,
                    format!("{}-{}: {}", topic.name, p.partition, p.error_message),
                )
            })
        })
    })
}

/// The epoch an EndTxn answer hands over: it must be newer than the ended
/// transaction's, or the producer would reuse an epoch its markers fenced.
pub(crate) fn next_epoch(current: ProducerIdAndEpoch, answered: i32) -> Result<i16, ClientError> {
    match i16::try_from(answered) {
        Ok(epoch) if epoch > current.producer_epoch => Ok(epoch),
        _ => Err(ClientError::Fatal(format!(
            "the coordinator ended the transaction of producer {} epoch {} and answered epoch {answered}, which is not newer",
            current.producer_id, current.producer_epoch
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(code: ErrorCode) -> ClientError {
        ClientError::broker(code as i32, "")
    }

    #[test]
    fn a_moved_or_missing_coordinator_is_found_again() {
        for code in [
            ErrorCode::NotCoordinator,
            ErrorCode::CoordinatorNotAvailable,
        ] {
            assert_eq!(retry_action(&broker(code)), RetryAction::Refind, "{code:?}");
        }
        assert_eq!(
            retry_action(&ClientError::Transport(tonic::Status::unavailable("reset"))),
            RetryAction::Refind
        );
        assert_eq!(
            retry_action(&ClientError::Transport(tonic::Status::deadline_exceeded(
                "slow"
            ))),
            RetryAction::Refind
        );
    }

    #[test]
    fn a_busy_coordinator_is_asked_again() {
        for code in [
            ErrorCode::CoordinatorLoadInProgress,
            ErrorCode::ConcurrentTransactions,
        ] {
            assert_eq!(retry_action(&broker(code)), RetryAction::Retry, "{code:?}");
        }
    }

    #[test]
    fn fencing_and_state_errors_are_never_retried() {
        for code in [
            ErrorCode::ProducerFenced,
            ErrorCode::InvalidProducerEpoch,
            ErrorCode::InvalidProducerIdMapping,
            ErrorCode::TransactionCoordinatorFenced,
            ErrorCode::InvalidTxnState,
            ErrorCode::InvalidTransactionTimeout,
            ErrorCode::TransactionalIdNotFound,
            ErrorCode::UnknownServerError,
        ] {
            assert_eq!(retry_action(&broker(code)), RetryAction::GiveUp, "{code:?}");
        }
        assert_eq!(
            retry_action(&ClientError::Transport(tonic::Status::unimplemented("no"))),
            RetryAction::GiveUp
        );
    }

    #[test]
    fn answers_report_their_error_code() {
        let ok = EndTxnResponse {
            producer_epoch: 3,
            ..Default::default()
        };
        assert!(ok.error().is_none());
        let fenced = EndTxnResponse {
            error_code: ErrorCode::ProducerFenced as i32,
            error_message: "newer instance".into(),
            producer_epoch: 0,
        };
        assert_eq!(
            fenced.error().and_then(|e| e.code()),
            Some(ErrorCode::ProducerFenced)
        );
    }

    #[test]
    fn the_epoch_after_end_txn_must_be_newer() {
        let current = ProducerIdAndEpoch {
            producer_id: 4,
            producer_epoch: 2,
        };
        assert_eq!(next_epoch(current, 3).ok(), Some(3));
        assert!(matches!(next_epoch(current, 2), Err(ClientError::Fatal(_))));
        assert!(matches!(
            next_epoch(current, 70_000),
            Err(ClientError::Fatal(_))
        ));
    }

    #[tokio::test]
    async fn a_call_that_gives_up_does_not_retry() {
        // No broker behind the link is needed: dialling is lazy and the cached address
        // is used directly.
        let conn = connect_nowhere().await.expect("a local listener");
        let link = CoordinatorLink::new(conn);
        if let Ok(mut found) = link.found.lock() {
            found.insert(
                CoordinatorKey::Transaction("tid".into()),
                "127.0.0.1:1".into(),
            );
        }
        let mut attempts = 0;
        let answer = link
            .call("tid", Instant::now() + Duration::from_secs(5), |_c| {
                attempts += 1;
                async {
                    Ok(tonic::Response::new(EndTxnResponse {
                        error_code: ErrorCode::ProducerFenced as i32,
                        error_message: String::new(),
                        producer_epoch: 0,
                    }))
                }
            })
            .await;
        assert_eq!(attempts, 1);
        assert_eq!(
            answer.result.err().and_then(|e| e.code()),
            Some(ErrorCode::ProducerFenced)
        );
    }

    #[tokio::test]
    async fn a_busy_coordinator_is_retried_until_it_answers() {
        let conn = connect_nowhere().await.expect("a local listener");
        let link = CoordinatorLink::new(conn);
        if let Ok(mut found) = link.found.lock() {
            found.insert(
                CoordinatorKey::Transaction("tid".into()),
                "127.0.0.1:1".into(),
            );
        }
        let mut attempts = 0;
        let answer = link
            .call("tid", Instant::now() + Duration::from_secs(5), |_c| {
                attempts += 1;
                let code = if attempts < 3 {
                    ErrorCode::ConcurrentTransactions
                } else {
                    ErrorCode::None
                };
                async move {
                    Ok(tonic::Response::new(EndTxnResponse {
                        error_code: code as i32,
                        error_message: String::new(),
                        producer_epoch: 5,
                    }))
                }
            })
            .await;
        assert_eq!(attempts, 3);
        assert_eq!(answer.result.ok().map(|a| a.producer_epoch), Some(5));
    }

    /// A connection to a listener that accepts and never answers: enough for calls that
    /// find their coordinator in the cache and never touch the bootstrap broker.
    async fn connect_nowhere() -> Result<Connection, ClientError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| ClientError::Fatal(e.to_string()))?;
        let address = listener
            .local_addr()
            .map_err(|e| ClientError::Fatal(e.to_string()))?;
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        Connection::connect(&address.to_string(), Duration::from_secs(1)).await
    }
}
