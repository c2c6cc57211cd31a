//! DeleteTopics through the gRPC path (`BrokerService::serve_delete_topics`: internal
//! topics refused, each topic deleted on its own), with Kafka's DELETE check on the
//! topic for the connection's principal. Topics are named (v1-5's `topic_names`, v6's `topics`
//! by name); a v6 entry naming only a topic id is answered UNKNOWN_TOPIC_ID: idem's
//! DeleteTopics takes names.

use idem_proto::v1::DeleteTopicsRequest as IdemRequest;
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::delete_topics_request::DeleteTopicsRequest;
use kafka_protocol::messages::delete_topics_response::{
    DeletableTopicResult, DeleteTopicsResponse,
};
use kafka_protocol::messages::TopicName;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use crate::service::BrokerService;

pub async fn serve(
    service: &BrokerService,
    principal: &str,
    request: DeleteTopicsRequest,
) -> DeleteTopicsResponse {
    // Every version's names, in request order: v1-5 list names, v6 names or ids.
    let asked: Vec<Result<TopicName, uuid::Uuid>> = request
        .topic_names
        .into_iter()
        .map(Ok)
        .chain(request.topics.into_iter().map(|t| t.name.ok_or(t.topic_id)))
        .collect();
    let mut results = Vec::with_capacity(asked.len());
    for topic in asked {
        let result = match topic {
            Err(topic_id) => DeletableTopicResult::default()
                .with_topic_id(topic_id)
                .with_error_code(ResponseError::UnknownTopicId.code())
                .with_error_message(Some(StrBytes::from_static_str(
                    "idem deletes topics by name",
                ))),
            Ok(name) => delete_one(service, principal, name).await,
        };
        results.push(result);
    }
    DeleteTopicsResponse::default().with_responses(results)
}

async fn delete_one(
    service: &BrokerService,
    principal: &str,
    name: TopicName,
) -> DeletableTopicResult {
    let topic = name.0.to_string();
    let answer = DeletableTopicResult::default().with_name(Some(name));
    if let Err(denied) = service.require(principal, [(Operation::Delete, Resource::topic(&topic))])
    {
        return answer
            .with_error_code(ResponseError::TopicAuthorizationFailed.code())
            .with_error_message(Some(StrBytes::from_string(denied.message().to_string())));
    }
    let idem = service
        .serve_delete_topics(IdemRequest {
            topics: vec![topic.clone()],
        })
        .await;
    let Some(result) = idem.topics.into_iter().next() else {
        return answer.with_error_code(ResponseError::UnknownServerError.code());
    };
    tracing::debug!(topic = %topic, error_code = result.error_code, "Kafka DeleteTopics");
    answer
        .with_topic_id(uuid::Uuid::parse_str(&result.topic_id).unwrap_or_default())
        .with_error_code(kafka_code(result.error_code))
        .with_error_message(
            (!result.error_message.is_empty()).then(|| StrBytes::from_string(result.error_message)),
        )
}
