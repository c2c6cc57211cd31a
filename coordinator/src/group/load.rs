//! Reading a `__consumer_offsets` partition this coordinator claimed: the load (append
//! the fence record with the slice's writer, then read from the log start up to the
//! fence, control batches included, and replay it into a [`SliceState`]) and the reads
//! of the tail that follows it. The broker stays the only reader of its files: this is
//! a read_uncommitted Fetch with `include_control_batches`.
//!
//! Invariant: everything an earlier owner persisted, and every marker written before
//! the fence, lies below the fence offset, so the state loaded is complete.

use std::time::Duration;

use idem_client::{ClientError, Connection, Isolation, OffsetSpec};
use idem_proto::txn::OFFSETS_TOPIC;
use idem_proto::v1::{FetchPartition, FetchRequest, FetchTopic, IsolationLevel};
use idem_proto::ErrorCode;

use super::records::GroupRecord;
use super::slice::{replay, Replay, SliceState};
use crate::error::CoordinatorError;
use crate::log::writer::TxnLogWriter;
use crate::ownership::token::OwnershipToken;
use crate::retry::{self, Failed};

const FETCH_MAX_BYTES: i32 = 8 * 1024 * 1024;
const BACKOFF_MAX: Duration = Duration::from_secs(1);
/// How long one read of the load waits for data.
const LOAD_WAIT_MS: i32 = 200;

/// A loaded partition: its state and where the tail reads on.
#[derive(Debug)]
pub struct Loaded {
    pub state: SliceState,
    pub fence_offset: i64,
}

/// Fences earlier owners and reads the partition's groups and offsets back.
pub async fn load(
    conn: &Connection,
    writer: &TxnLogWriter,
    partition: i32,
    coordinator_epoch: i32,
    token: &OwnershipToken,
) -> Result<Loaded, CoordinatorError> {
    let started = std::time::Instant::now();
    let fence_offset = writer
        .append_encoded(vec![GroupRecord::Fence { coordinator_epoch }.encode()])
        .await?;
    let log_start_offset = log_start(conn, partition, token).await?;
    let mut state = SliceState::default();
    let mut offset = log_start_offset;
    let mut records = 0u64;
    let mut markers = 0u64;
    while offset < fence_offset {
        let from = offset;
        let read = retry::while_owned(
            token,
            BACKOFF_MAX,
            || async {
                lost_check(token, partition)?;
                match read_once(conn, partition, from, LOAD_WAIT_MS).await {
                    Ok(read) if read.1 > from => Ok(read),
                    Ok(_) => Err(Failed::Again("nothing below the high watermark yet".into())),
                    Err(ReadFailure::OutOfRange) => {
                        let start = log_start(conn, partition, token)
                            .await
                            .map_err(Failed::Stop)?;
                        Ok((bytes::Bytes::new(), start.max(from)))
                    }
                    Err(ReadFailure::Retry(reason)) => {
                        conn.request_refresh();
                        Err(Failed::Again(reason))
                    }
                }
            },
            |reason| tracing::debug!(partition, offset = from, %reason, "{OFFSETS_TOPIC} read will retry"),
        )
        .await?;
        let (bytes, next_fetch_offset) = read;
        let done = replay(
            &mut state,
            partition,
            &bytes,
            from,
            Replay::Everything { fence_offset },
        )?;
        records += done.records;
        markers += done.markers;
        offset = done.next_offset.max(next_fetch_offset).max(from);
    }
    tracing::info!(
        partition,
        coordinator_epoch,
        groups = state.groups.len(),
        groups_with_offsets = state.offsets.len(),
        records,
        markers,
        log_start_offset,
        fence_offset,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "{OFFSETS_TOPIC} partition loaded"
    );
    Ok(Loaded {
        state,
        fence_offset,
    })
}

fn lost_check(token: &OwnershipToken, partition: i32) -> Result<(), Failed> {
    if token.is_lost() {
        return Err(Failed::Stop(CoordinatorError::ownership_lost(
            partition,
            "claim lost while reading __consumer_offsets",
        )));
    }
    Ok(())
}

/// The partition's log start offset.
pub async fn log_start(
    conn: &Connection,
    partition: i32,
    token: &OwnershipToken,
) -> Result<i64, CoordinatorError> {
    retry::while_owned(
        token,
        BACKOFF_MAX,
        || async {
            lost_check(token, partition)?;
            conn.list_offset(
                OFFSETS_TOPIC,
                partition,
                OffsetSpec::Earliest,
                Isolation::ReadUncommitted,
            )
            .await
            .map_err(|e| Failed::Again(e.to_string()))
        },
        |reason| tracing::debug!(partition, %reason, "{OFFSETS_TOPIC} log start will retry"),
    )
    .await
}

/// The partition's high watermark: everything a read_uncommitted read reaches now.
pub async fn high_watermark(conn: &Connection, partition: i32) -> Result<i64, ClientError> {
    conn.list_offset(
        OFFSETS_TOPIC,
        partition,
        OffsetSpec::Latest,
        Isolation::ReadUncommitted,
    )
    .await
}

/// Why a read failed.
pub enum ReadFailure {
    /// The offset is below the log start (the cleaner or retention moved it).
    OutOfRange,
    Retry(String),
}

/// One read_uncommitted Fetch of the partition from `offset`, control batches
/// included: the batches and the offset after the last one examined.
pub async fn read_once(
    conn: &Connection,
    partition: i32,
    offset: i64,
    max_wait_ms: i32,
) -> Result<(bytes::Bytes, i64), ReadFailure> {
    let request = FetchRequest {
        max_wait_ms,
        min_bytes: 1,
        max_bytes: FETCH_MAX_BYTES,
        isolation_level: IsolationLevel::ReadUncommitted as i32,
        topics: vec![FetchTopic {
            name: OFFSETS_TOPIC.to_string(),
            partitions: vec![FetchPartition {
                partition,
                fetch_offset: offset,
                partition_max_bytes: FETCH_MAX_BYTES,
                current_leader_epoch: None,
            }],
        }],
        replica_id: None,
        include_control_batches: true,
    };
    let answer = async {
        let (_, mut client) = conn.leader_client(OFFSETS_TOPIC, partition).await?;
        conn.call(client.fetch(request)).await
    }
    .await
    .map_err(|e| ReadFailure::Retry(e.to_string()))?;
    let Some(p) = answer
        .topics
        .into_iter()
        .flat_map(|t| t.partitions)
        .find(|p| p.partition == partition)
    else {
        return Err(ReadFailure::Retry("answer lacks the partition".into()));
    };
    match ErrorCode::try_from(p.error_code).unwrap_or(ErrorCode::UnknownServerError) {
        ErrorCode::None => Ok((p.records, p.next_fetch_offset.max(offset))),
        ErrorCode::OffsetOutOfRange => Err(ReadFailure::OutOfRange),
        code => Err(ReadFailure::Retry(format!("{code:?}: {}", p.error_message))),
    }
}
