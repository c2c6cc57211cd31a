//! Deleting the oldest records of a partition (Kafka's `deleteRecords`): the partition's
//! leader moves its log start, and the answer is the new start. The request goes to the
//! leader the metadata names and is retried, after a metadata refresh, when the answer
//! was lost or came from a broker that no longer leads: deleting up to the same offset
//! again changes nothing, so a retry is safe.

use idem_proto::v1::{DeleteRecordsPartition, DeleteRecordsRequest, DeleteRecordsTopic};

use super::Admin;
use crate::connection::partition_answer;
use crate::error::ClientError;

/// DeleteRecords offset meaning "everything that may go now": the high watermark, or
/// the start of the oldest transaction still open.
pub const DELETE_TO_HIGH_WATERMARK: i64 = -1;

impl Admin {
    /// Deletes every record of `topic`/`partition` below `offset`
    /// ([`DELETE_TO_HIGH_WATERMARK`]: as far as possible) and returns the partition's
    /// log start after it. Refusals (nothing deleted): `OFFSET_OUT_OF_RANGE` (above the
    /// high watermark, or inside a transaction still open: the message names the
    /// bound), `INVALID_TOPIC_EXCEPTION` (an internal topic),
    /// [`ClientError::UnknownTopic`].
    pub async fn delete_records(
        &self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<i64, ClientError> {
        let request = DeleteRecordsRequest {
            topics: vec![DeleteRecordsTopic {
                name: topic.to_string(),
                partitions: vec![DeleteRecordsPartition { partition, offset }],
            }],
        };
        self.connection()
            .at_leader(topic, partition, "delete records", || {
                self.delete_records_once(topic, partition, &request)
            })
            .await
    }

    async fn delete_records_once(
        &self,
        topic: &str,
        partition: i32,
        request: &DeleteRecordsRequest,
    ) -> Result<i64, ClientError> {
        let conn = self.connection();
        let (_, mut client) = conn.leader(topic, partition).await?;
        let response = conn.call(client.delete_records(request.clone())).await?;
        let answer = response
            .topics
            .into_iter()
            .filter(|t| t.name == topic)
            .flat_map(|t| t.partitions)
            .find(|p| p.partition == partition)
            .ok_or_else(|| {
                ClientError::Protocol(format!("delete records answer lacks {topic}/{partition}"))
            })?;
        partition_answer(topic, partition, answer.error_code, answer.error_message)?;
        Ok(answer.low_watermark)
    }
}
