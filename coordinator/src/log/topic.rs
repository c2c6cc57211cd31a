//! Makes sure `__transaction_state` (and `__consumer_offsets`, with as many partitions)
//! exist before anything claims their partitions, and learns the real partition count:
//! the hash of a transactional id or group must use the count the topic has (which the
//! brokers also see), not the one configured here.

use idem_client::Connection;
use idem_proto::v1::{ConfigEntry, CreatableTopic, CreateTopicsRequest};
use idem_proto::ErrorCode;

use crate::error::CoordinatorError;

/// Replicas of the transaction log: 3, or every broker when there are fewer.
pub fn replication_factor(live_brokers: usize) -> i32 {
    live_brokers.clamp(1, 3) as i32
}

/// The partition count of internal topic `topic` (`__transaction_state` or
/// `__consumer_offsets`), creating it with `partitions` partitions when missing
/// (another coordinator creating it first is fine). Brokers create an internal topic
/// only for a request naming its coordinator.
pub async fn ensure_topic(
    conn: &Connection,
    topic: &str,
    partitions: i32,
    coordinator_id: i32,
) -> Result<i32, CoordinatorError> {
    let metadata = conn.fetch_metadata(vec![topic.to_string()]).await?;
    if let Some(found) = metadata.topic(topic) {
        if found.error.is_none() && !found.partitions.is_empty() {
            let existing = found.partitions.len() as i32;
            if existing != partitions {
                tracing::warn!(
                    configured = partitions,
                    existing,
                    "{topic} exists with another partition count; using it"
                );
            }
            return Ok(existing);
        }
    }
    let request = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: topic.to_string(),
            num_partitions: partitions,
            replication_factor: replication_factor(metadata.brokers.len()),
            unclean_leader_election: false,
            coordinator_id: Some(coordinator_id),
            // The last record of each key (a transactional id, a group, a group's
            // partition) is its state, and a removed one's is its tombstone: compaction
            // bounds the log, and a takeover's load, by what is live, not by history.
            configs: vec![ConfigEntry {
                name: "cleanup.policy".into(),
                value: "compact".into(),
            }],
        }],
    };
    let response = conn
        .call_retrying(|mut client| {
            let request = request.clone();
            async move { client.create_topics(request).await }
        })
        .await?;
    for result in response.topics {
        match ErrorCode::try_from(result.error_code) {
            Ok(ErrorCode::None) => {
                tracing::info!(partitions, "created {topic}");
            }
            Ok(ErrorCode::TopicAlreadyExists) => {}
            Ok(code) => {
                return Err(CoordinatorError::Refused {
                    what: format!("creating {topic}"),
                    code,
                    message: result.error_message,
                })
            }
            Err(_) => {
                return Err(CoordinatorError::Refused {
                    what: format!("creating {topic}"),
                    code: ErrorCode::UnknownServerError,
                    message: result.error_message,
                })
            }
        }
    }
    // Created now or by someone else just before: read the count it really has.
    conn.invalidate(topic);
    let metadata = conn.fetch_metadata(vec![topic.to_string()]).await?;
    match metadata.topic(topic) {
        Some(found) if found.error.is_none() && !found.partitions.is_empty() => {
            Ok(found.partitions.len() as i32)
        }
        _ => Err(CoordinatorError::Refused {
            what: format!("reading back {topic}"),
            code: ErrorCode::UnknownTopicOrPartition,
            message: "created but not listed yet".into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_has_three_replicas_or_every_broker() {
        assert_eq!(replication_factor(0), 1);
        assert_eq!(replication_factor(1), 1);
        assert_eq!(replication_factor(2), 2);
        assert_eq!(replication_factor(3), 3);
        assert_eq!(replication_factor(7), 3);
    }
}
