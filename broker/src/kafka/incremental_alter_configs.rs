//! IncrementalAlterConfigs (v0-1) for topics, through the gRPC path
//! (`BrokerService::serve_incremental_alter_configs`: validated as a whole, applied by
//! compare-and-swap on the catalog, `validate_only` honoured), with Kafka's ALTER check
//! on each topic for the connection's principal. SET and DELETE are idem's operations;
//! APPEND and SUBTRACT (Kafka's list edits) are INVALID_REQUEST and change nothing, as
//! is any resource that is not a topic.

use idem_proto::v1::{
    AlterConfigsTopic, AlterableConfig, ConfigOpType, IncrementalAlterConfigsRequest as IdemRequest,
};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, IncrementalAlterConfigsRequest,
};
use kafka_protocol::messages::incremental_alter_configs_response::{
    AlterConfigsResourceResponse, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::describe_configs::{unconfigurable, TOPIC_RESOURCE};
use super::errors::kafka_code;
use crate::service::BrokerService;

pub async fn serve(
    service: &BrokerService,
    principal: &str,
    request: IncrementalAlterConfigsRequest,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        responses.push(alter_one(service, principal, resource, request.validate_only).await);
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

async fn alter_one(
    service: &BrokerService,
    principal: &str,
    resource: AlterConfigsResource,
    validate_only: bool,
) -> AlterConfigsResourceResponse {
    let answer = AlterConfigsResourceResponse::default()
        .with_resource_type(resource.resource_type)
        .with_resource_name(resource.resource_name.clone());
    let refuse = |code: ResponseError, message: StrBytes| {
        answer
            .clone()
            .with_error_code(code.code())
            .with_error_message(Some(message))
    };
    if resource.resource_type != TOPIC_RESOURCE {
        return refuse(
            ResponseError::InvalidRequest,
            unconfigurable(resource.resource_type),
        );
    }
    let topic = resource.resource_name.to_string();
    if let Err(denied) = service.require(principal, [(Operation::Alter, Resource::topic(&topic))]) {
        return refuse(
            ResponseError::TopicAuthorizationFailed,
            StrBytes::from_string(denied.message().to_string()),
        );
    }
    let configs: Result<Vec<AlterableConfig>, StrBytes> =
        resource.configs.iter().map(idem_op).collect();
    let configs = match configs {
        Ok(configs) => configs,
        Err(message) => return refuse(ResponseError::InvalidRequest, message),
    };
    let altered = service
        .serve_incremental_alter_configs(IdemRequest {
            topics: vec![AlterConfigsTopic { topic, configs }],
            validate_only,
        })
        .await;
    let Some(result) = altered.topics.into_iter().next() else {
        return answer.with_error_code(ResponseError::UnknownServerError.code());
    };
    answer
        .with_error_code(kafka_code(result.error_code))
        .with_error_message(
            (!result.error_message.is_empty()).then(|| StrBytes::from_string(result.error_message)),
        )
}

/// Kafka's operation on one key as idem's: SET (0) and DELETE (1) are the same numbers;
/// APPEND (2) and SUBTRACT (3) are refused naming the key.
fn idem_op(
    config: &kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig,
) -> Result<AlterableConfig, StrBytes> {
    let op = match config.config_operation {
        0 => ConfigOpType::Set,
        1 => ConfigOpType::Delete,
        other => {
            return Err(StrBytes::from_string(format!(
                "config {:?}: operation {other} is not supported (0 = SET, 1 = DELETE; \
                 idem has no list-valued setting to APPEND to or SUBTRACT from)",
                config.name.as_str()
            )))
        }
    };
    Ok(AlterableConfig {
        name: config.name.to_string(),
        op: op as i32,
        value: config
            .value
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::incremental_alter_configs_request::AlterableConfig as KafkaConfig;

    fn kafka(name: &'static str, op: i8, value: Option<&'static str>) -> KafkaConfig {
        KafkaConfig::default()
            .with_name(StrBytes::from_static_str(name))
            .with_config_operation(op)
            .with_value(value.map(StrBytes::from_static_str))
    }

    #[test]
    fn given_set_and_delete_then_they_become_idems_operations() {
        let set = idem_op(&kafka("retention.ms", 0, Some("1000"))).expect("SET");
        assert_eq!(set.op(), ConfigOpType::Set);
        assert_eq!(
            (set.name.as_str(), set.value.as_str()),
            ("retention.ms", "1000")
        );
        let delete = idem_op(&kafka("retention.ms", 1, None)).expect("DELETE");
        assert_eq!(delete.op(), ConfigOpType::Delete);
    }

    #[test]
    fn given_append_or_subtract_then_the_key_is_named_in_the_refusal() {
        for op in [2, 3, -1] {
            let refused = idem_op(&kafka("cleanup.policy", op, Some("compact")))
                .expect_err("not an idem operation");
            assert!(refused.contains("\"cleanup.policy\""), "{refused}");
            assert!(refused.contains(&format!("operation {op}")), "{refused}");
        }
    }
}
