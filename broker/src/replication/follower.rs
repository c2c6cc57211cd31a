//! The follower's fetch loop for one partition: pull from the leader at the local log
//! end (naming this broker as the replica and the leader epoch it follows), append the
//! leader's batches at the leader's offsets, make them durable, and follow the leader's
//! high watermark. A leader that does not have our tail makes us cut it. The registry
//! starts one loop per followed partition and aborts it when the leadership changes.

use std::sync::Arc;
use std::time::Duration;

use idem_proto::v1::broker_client::BrokerClient;
use idem_proto::v1::{
    FetchPartition, FetchRequest, FetchTopic, IsolationLevel, OffsetForLeaderEpochRequest,
};
use idem_proto::ErrorCode;
use tonic::transport::{Channel, Endpoint};

use crate::cluster::membership::Membership;
use crate::partition::Partition;
use crate::replication::epoch_history::truncation_point;

const RETRY_PAUSE: Duration = Duration::from_millis(200);
const MAX_WAIT_MS: i32 = 500;
const MAX_BYTES: i32 = 8 * 1024 * 1024;

/// What one follower loop follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Following {
    pub me: i32,
    pub leader: i32,
    pub leader_epoch: i32,
}

/// Runs until aborted.
pub async fn follow(partition: Arc<Partition>, following: Following, membership: Arc<Membership>) {
    loop {
        match leader_client(&membership, following.leader).await {
            Some(mut client) => {
                let result = match truncate_divergent_tail(&partition, following, &mut client).await
                {
                    Ok(()) => fetch_until_failure(&partition, following, client).await,
                    Err(reason) => Err(reason),
                };
                if let Err(reason) = result {
                    tracing::debug!(
                        topic = partition.topic(),
                        partition = partition.index(),
                        leader = following.leader,
                        reason,
                        "follower fetch interrupted"
                    );
                }
            }
            None => tracing::debug!(
                leader = following.leader,
                "leader is not registered; waiting"
            ),
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

async fn leader_client(membership: &Membership, leader: i32) -> Option<BrokerClient<Channel>> {
    let brokers = membership.live_brokers().await.ok()?;
    let address = brokers.into_iter().find(|b| b.broker_id == leader)?.address;
    let endpoint = Endpoint::from_shared(format!("http://{address}"))
        .ok()?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(2));
    let channel = endpoint.connect().await.ok()?;
    Some(BrokerClient::new(channel).max_decoding_message_size(MAX_BYTES as usize + 1024 * 1024))
}

/// KIP-101: asks the leader where our latest epoch ends in its log and cuts whatever we
/// hold past that point, before fetching anything.
async fn truncate_divergent_tail(
    partition: &Partition,
    following: Following,
    client: &mut BrokerClient<Channel>,
) -> Result<(), String> {
    let Some(latest) = partition.latest_epoch() else {
        return Ok(()); // an empty log has nothing to disagree on
    };
    let answer = client
        .offset_for_leader_epoch(OffsetForLeaderEpochRequest {
            topic: partition.topic().to_string(),
            partition: partition.index(),
            leader_epoch: latest,
            current_leader_epoch: following.leader_epoch,
        })
        .await
        .map_err(|s| s.to_string())?
        .into_inner();
    if answer.error_code() != ErrorCode::None {
        return Err(format!(
            "{}: {}",
            answer.error_code().as_str_name(),
            answer.error_message
        ));
    }
    let local_end = partition.offsets().log_end_offset;
    if let Some(cut) = truncation_point(local_end, (answer.leader_epoch, answer.end_offset)) {
        tracing::warn!(
            topic = partition.topic(),
            partition = partition.index(),
            local_end,
            cut,
            our_epoch = latest,
            leader_epoch = answer.leader_epoch,
            "cutting a tail the new leader does not have"
        );
        partition.truncate_to(cut).map_err(|e| e.to_string())?;
    }
    Ok(())
}

async fn fetch_until_failure(
    partition: &Partition,
    following: Following,
    mut client: BrokerClient<Channel>,
) -> Result<(), String> {
    loop {
        let offset = partition.offsets().log_end_offset;
        let request = FetchRequest {
            max_wait_ms: MAX_WAIT_MS,
            min_bytes: 1,
            max_bytes: MAX_BYTES,
            isolation_level: IsolationLevel::ReadUncommitted as i32,
            topics: vec![FetchTopic {
                name: partition.topic().to_string(),
                partitions: vec![FetchPartition {
                    partition: partition.index(),
                    fetch_offset: offset,
                    partition_max_bytes: MAX_BYTES,
                    current_leader_epoch: Some(following.leader_epoch),
                }],
            }],
            replica_id: Some(following.me),
        };
        let response = client
            .fetch(request)
            .await
            .map_err(|s| s.to_string())?
            .into_inner();
        let answer = response
            .topics
            .into_iter()
            .flat_map(|t| t.partitions)
            .next()
            .ok_or("the leader's answer has no partition")?;
        match answer.error_code() {
            ErrorCode::None => {
                if !answer.records.is_empty() {
                    partition
                        .append_replicated(&answer.records)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                partition.follow_high_watermark(answer.high_watermark);
            }
            ErrorCode::OffsetOutOfRange
                if answer.high_watermark >= 0 && answer.high_watermark < offset =>
            {
                // Our tail is not on the leader: keep only what the ISR agreed on.
                partition
                    .truncate_to(answer.high_watermark)
                    .map_err(|e| e.to_string())?;
            }
            code => return Err(format!("{}: {}", code.as_str_name(), answer.error_message)),
        }
    }
}
