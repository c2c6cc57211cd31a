//! Growing a topic (Kafka's `createPartitions`). One request to the bootstrap broker,
//! not retried: a growth whose answer was lost may have happened, and asking again
//! would be refused as "not more than the current count"; the caller reads the count
//! from the metadata instead. Producers and consumers find the new partitions at their
//! next metadata refresh (see `ProducerConfig::metadata_max_age`).

use idem_proto::v1::{CreatePartitionsRequest, CreatePartitionsTopic};

use super::Admin;
use crate::error::ClientError;

impl Admin {
    /// Grows `topic` to `total` partitions. Refusals (nothing changed):
    /// `INVALID_PARTITIONS` (not more than the current count, which the message names,
    /// or above the broker's limit), `INVALID_TOPIC_EXCEPTION` (an internal topic),
    /// `UNKNOWN_TOPIC_OR_PARTITION`, `INVALID_REPLICATION_FACTOR` (fewer live brokers
    /// than the topic has replicas); `REQUEST_TIMED_OUT` is retriable.
    pub async fn create_partitions(&self, topic: &str, total: i32) -> Result<(), ClientError> {
        self.send_create_partitions(topic, total, false).await
    }

    /// Whether `topic` could grow to `total` partitions, asking the broker to check
    /// without changing anything.
    pub async fn validate_create_partitions(
        &self,
        topic: &str,
        total: i32,
    ) -> Result<(), ClientError> {
        self.send_create_partitions(topic, total, true).await
    }

    async fn send_create_partitions(
        &self,
        topic: &str,
        total: i32,
        validate_only: bool,
    ) -> Result<(), ClientError> {
        let conn = self.connection();
        let mut client = conn.client();
        let response = conn
            .call(client.create_partitions(CreatePartitionsRequest {
                topics: vec![CreatePartitionsTopic {
                    name: topic.to_string(),
                    count: total,
                }],
                validate_only,
            }))
            .await?;
        let result = response
            .topics
            .into_iter()
            .find(|t| t.name == topic)
            .ok_or_else(|| {
                ClientError::Protocol(format!("create partitions answer lacks topic {topic:?}"))
            })?;
        if !validate_only {
            conn.invalidate(topic);
        }
        match result.error_code {
            0 => Ok(()),
            code => Err(ClientError::broker(code, result.error_message)),
        }
    }
}
