//! DeleteRecords: each partition's leader moves its log start
//! (`Partition::delete_records`); the answer is the new start per partition. Internal
//! topics are refused as Kafka refuses `__consumer_offsets`: their records are a
//! coordinator's state, and deleting them would lose transactions.

use idem_proto::internal::is_internal_topic;
use idem_proto::v1::{
    DeleteRecordsPartition, DeleteRecordsPartitionResult, DeleteRecordsRequest,
    DeleteRecordsResponse, DeleteRecordsTopicResult,
};
use idem_proto::ErrorCode;

use super::refusal::log_refusal;
use super::BrokerService;
use crate::error::BrokerError;

impl BrokerService {
    pub(super) fn serve_delete_records(
        &self,
        request: DeleteRecordsRequest,
    ) -> DeleteRecordsResponse {
        let topics = request
            .topics
            .into_iter()
            .map(|topic| DeleteRecordsTopicResult {
                partitions: topic
                    .partitions
                    .iter()
                    .map(|wanted| match self.delete_records(&topic.name, wanted) {
                        Ok(low_watermark) => DeleteRecordsPartitionResult {
                            partition: wanted.partition,
                            error_code: ErrorCode::None as i32,
                            error_message: String::new(),
                            low_watermark,
                        },
                        Err(e) => {
                            log_refusal(&topic.name, wanted.partition, &e);
                            DeleteRecordsPartitionResult {
                                partition: wanted.partition,
                                error_code: e.code() as i32,
                                error_message: e.to_string(),
                                low_watermark: -1,
                            }
                        }
                    })
                    .collect(),
                name: topic.name,
            })
            .collect();
        DeleteRecordsResponse { topics }
    }

    fn delete_records(
        &self,
        topic: &str,
        wanted: &DeleteRecordsPartition,
    ) -> Result<i64, BrokerError> {
        if is_internal_topic(topic) {
            return Err(BrokerError::InternalTopic {
                topic: topic.to_string(),
                reason: "it is internal: its records are a transaction coordinator's state and are never deleted by request".into(),
            });
        }
        self.topics
            .partition(topic, wanted.partition)?
            .delete_records(wanted.offset)
    }
}
