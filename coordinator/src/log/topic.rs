//! Makes sure `__transaction_state` exists before anything claims its partitions, and
//! learns its real partition count: the hash of a transactional id must use the count
//! the topic has (which the brokers also see), not the one configured here.

use idem_client::Connection;
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::v1::{ConfigEntry, CreatableTopic, CreateTopicsRequest};
use idem_proto::ErrorCode;

use crate::error::CoordinatorError;

/// Replicas of the transaction log: 3, or every broker when there are fewer.
pub fn replication_factor(live_brokers: usize) -> i32 {
    live_brokers.clamp(1, 3) as i32
}

/// The partition count of `__transaction_state`, creating it with `partitions`
/// partitions when missing (another coordinator creating it first is fine). Brokers
/// create an internal topic only for a request naming its coordinator.
pub async fn ensure_topic(
    conn: &Connection,
    partitions: i32,
    coordinator_id: i32,
) -> Result<i32, CoordinatorError> {
    let metadata = conn.fetch_metadata(vec![TXN_LOG_TOPIC.to_string()]).await?;
    if let Some(topic) = metadata.topic(TXN_LOG_TOPIC) {
        if topic.error.is_none() && !topic.partitions.is_empty() {
            let existing = topic.partitions.len() as i32;
            if existing != partitions {
                tracing::warn!(
                    configured = partitions,
                    existing,
                    "{TXN_LOG_TOPIC} exists with another partition count; using it"
                );
            }
            return Ok(existing);
        }
    }
    let request = CreateTopicsRequest {
        topics: vec![CreatableTopic {
            name: TXN_LOG_TOPIC.to_string(),
            num_partitions: partitions,
            replication_factor: replication_factor(metadata.brokers.len()),
            unclean_leader_election: false,
            coordinator_id: Some(coordinator_id),
            // The last record of each transactional id is its state (and an expired
            // id's is its tombstone): compaction bounds the log, and a takeover's
            // load, by the ids that are live, not by their history.
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
                tracing::info!(partitions, "created {TXN_LOG_TOPIC}");
            }
            Ok(ErrorCode::TopicAlreadyExists) => {}
            Ok(code) => {
                return Err(CoordinatorError::Refused {
                    what: format!("creating {TXN_LOG_TOPIC}"),
                    code,
                    message: result.error_message,
                })
            }
            Err(_) => {
                return Err(CoordinatorError::Refused {
                    what: format!("creating {TXN_LOG_TOPIC}"),
                    code: ErrorCode::UnknownServerError,
                    message: result.error_message,
                })
            }
        }
    }
    // Created now or by someone else just before: read the count it really has.
    conn.invalidate(TXN_LOG_TOPIC);
    let metadata = conn.fetch_metadata(vec![TXN_LOG_TOPIC.to_string()]).await?;
    match metadata.topic(TXN_LOG_TOPIC) {
        Some(topic) if topic.error.is_none() && !topic.partitions.is_empty() => {
            Ok(topic.partitions.len() as i32)
        }
        _ => Err(CoordinatorError::Refused {
            what: format!("reading back {TXN_LOG_TOPIC}"),
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
