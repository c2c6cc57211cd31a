//! CreatePartitions: each named topic grows to its new count
//! (`TopicRegistry::create_partitions`); any broker answers.

use idem_proto::v1::{CreatePartitionsRequest, CreatePartitionsResponse, CreatePartitionsResult};
use idem_proto::ErrorCode;

use super::BrokerService;

impl BrokerService {
    pub(super) async fn serve_create_partitions(
        &self,
        request: CreatePartitionsRequest,
    ) -> CreatePartitionsResponse {
        let mut topics = Vec::with_capacity(request.topics.len());
        for wanted in request.topics {
            let result = self
                .topics
                .create_partitions(&wanted.name, wanted.count, request.validate_only)
                .await;
            let (error_code, error_message) = match result {
                Ok(()) => (ErrorCode::None, String::new()),
                Err(e) => {
                    tracing::info!(topic = %wanted.name, count = wanted.count, error = %e, "refused to grow a topic");
                    (e.code(), e.to_string())
                }
            };
            topics.push(CreatePartitionsResult {
                name: wanted.name,
                error_code: error_code as i32,
                error_message,
            });
        }
        CreatePartitionsResponse { topics }
    }
}
