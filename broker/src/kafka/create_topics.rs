//! CreateTopics through the gRPC path (`BrokerService::serve_create_topics`), with
//! Kafka's CREATE check for the connection's principal (on the cluster, or on the topic). Kafka's
//! -1 ("the broker's default") is 1 partition and replication factor 1; explicit
//! replica assignments are not served (INVALID_REQUEST); `validate_only` creates
//! nothing and answers as a creation would have been tried (INVALID_REQUEST: not served).

use idem_proto::v1::{
    ConfigEntry, CreatableTopic as IdemTopic, CreateTopicsRequest as IdemRequest,
};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreateTopicsRequest};
use kafka_protocol::messages::create_topics_response::{
    CreatableTopicResult, CreateTopicsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use crate::service::BrokerService;

pub async fn serve(
    service: &BrokerService,
    principal: &str,
    request: CreateTopicsRequest,
) -> CreateTopicsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let refusal = if request.validate_only {
            Some((ResponseError::InvalidRequest, "validate_only is not served"))
        } else if !topic.assignments.is_empty() {
            Some((
                ResponseError::InvalidRequest,
                "replica assignments are not served",
            ))
        } else if !may_create(service, principal, &name) {
            Some((
                ResponseError::TopicAuthorizationFailed,
                "the principal may not create it",
            ))
        } else {
            None
        };
        let result = match refusal {
            Some((error, message)) => CreatableTopicResult::default()
                .with_name(topic.name.clone())
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_static_str(message))),
            None => {
                let idem = service
                    .serve_create_topics(IdemRequest {
                        topics: vec![to_idem(&topic)],
                    })
                    .await;
                let (code, message) = idem
                    .topics
                    .into_iter()
                    .next()
                    .map_or((-1, String::new()), |r| (r.error_code, r.error_message));
                CreatableTopicResult::default()
                    .with_name(topic.name.clone())
                    .with_error_code(kafka_code(code))
                    .with_error_message((!message.is_empty()).then(|| StrBytes::from_string(message)))
                    .with_num_partitions(default_one(topic.num_partitions))
                    .with_replication_factor(default_one(i32::from(topic.replication_factor)) as i16)
            }
        };
        tracing::debug!(topic = %name, error_code = result.error_code, "Kafka CreateTopics");
        results.push(result);
    }
    CreateTopicsResponse::default().with_topics(results)
}

fn may_create(service: &BrokerService, principal: &str, topic: &str) -> bool {
    service
        .require(principal, [(Operation::Create, Resource::cluster())])
        .is_ok()
        || service
            .require(principal, [(Operation::Create, Resource::topic(topic))])
            .is_ok()
}

/// Kafka's -1: the broker's default, which idem takes as 1.
fn default_one(value: i32) -> i32 {
    if value == -1 {
        1
    } else {
        value
    }
}

fn to_idem(topic: &CreatableTopic) -> IdemTopic {
    IdemTopic {
        name: topic.name.0.to_string(),
        num_partitions: default_one(topic.num_partitions),
        replication_factor: default_one(i32::from(topic.replication_factor)),
        unclean_leader_election: false,
        coordinator_id: None,
        configs: topic
            .configs
            .iter()
            .filter_map(|c| {
                Some(ConfigEntry {
                    name: c.name.to_string(),
                    value: c.value.as_ref()?.to_string(),
                })
            })
            .collect(),
    }
}
