//! DeleteTopics: each named topic deleted on its own through the registry (see
//! `topics/deletion.rs`), answered with its code and message in request order.

use idem_proto::v1::{DeletableTopicResult, DeleteTopicsRequest, DeleteTopicsResponse};
use idem_proto::ErrorCode;

use super::BrokerService;

impl BrokerService {
    pub(crate) async fn serve_delete_topics(
        &self,
        request: DeleteTopicsRequest,
    ) -> DeleteTopicsResponse {
        let mut topics = Vec::with_capacity(request.topics.len());
        for name in request.topics {
            let result = match self.topics.delete_topic(&name).await {
                Ok(topic_id) => DeletableTopicResult {
                    name,
                    error_code: ErrorCode::None as i32,
                    error_message: String::new(),
                    topic_id: topic_id.to_string(),
                },
                Err(e) => {
                    tracing::info!(topic = %name, error = %e, "refused a topic deletion");
                    DeletableTopicResult {
                        name,
                        error_code: e.code() as i32,
                        error_message: e.to_string(),
                        topic_id: String::new(),
                    }
                }
            };
            topics.push(result);
        }
        DeleteTopicsResponse { topics }
    }
}
