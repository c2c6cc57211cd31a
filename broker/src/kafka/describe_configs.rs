//! DescribeConfigs (v1-4) for topics, through the gRPC path
//! (`BrokerService::serve_describe_configs`), with Kafka's DESCRIBE check on each
//! topic for the connection's principal: every key a topic may set with the value in
//! effect, set on the topic (DYNAMIC_TOPIC_CONFIG) or the broker's default
//! (DEFAULT_CONFIG), filtered by the requested keys. Other resource types (brokers,
//! broker loggers) are INVALID_REQUEST: idem's broker settings are its flags, not
//! configs a client reads or changes. No synonyms; documentation only when asked.

use idem_proto::v1::{ConfigSource, DescribeConfigsRequest as IdemRequest, DescribedConfig};
use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::describe_configs_request::{
    DescribeConfigsRequest, DescribeConfigsResource,
};
use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResponse, DescribeConfigsResult,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use crate::service::BrokerService;
use crate::topic_config::{value_kind, ValueKind};

/// Kafka's resource type of a topic (the only one idem has configs for).
pub const TOPIC_RESOURCE: i8 = 2;

/// Kafka's config sources, as DescribeConfigs v1+ answers them.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const DEFAULT_CONFIG: i8 = 5;

pub fn serve(
    service: &BrokerService,
    principal: &str,
    request: DescribeConfigsRequest,
) -> DescribeConfigsResponse {
    let documented = request.include_documentation;
    let results = request
        .resources
        .into_iter()
        .map(|resource| describe_one(service, principal, resource, documented))
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

fn describe_one(
    service: &BrokerService,
    principal: &str,
    resource: DescribeConfigsResource,
    documented: bool,
) -> DescribeConfigsResult {
    let answer = DescribeConfigsResult::default()
        .with_resource_type(resource.resource_type)
        .with_resource_name(resource.resource_name.clone());
    if resource.resource_type != TOPIC_RESOURCE {
        return answer
            .with_error_code(ResponseError::InvalidRequest.code())
            .with_error_message(Some(unconfigurable(resource.resource_type)));
    }
    let topic = resource.resource_name.to_string();
    if let Err(denied) =
        service.require(principal, [(Operation::Describe, Resource::topic(&topic))])
    {
        return answer
            .with_error_code(ResponseError::TopicAuthorizationFailed.code())
            .with_error_message(Some(StrBytes::from_string(denied.message().to_string())));
    }
    let described = service.serve_describe_configs(IdemRequest {
        topics: vec![topic],
    });
    let Some(result) = described.topics.into_iter().next() else {
        return answer.with_error_code(ResponseError::UnknownServerError.code());
    };
    if result.error_code != 0 {
        return answer
            .with_error_code(kafka_code(result.error_code))
            .with_error_message(Some(StrBytes::from_string(result.error_message)));
    }
    let wanted = resource.configuration_keys;
    let configs = result
        .configs
        .into_iter()
        .filter(|c| {
            wanted
                .as_ref()
                .is_none_or(|keys| keys.iter().any(|k| k.as_str() == c.name))
        })
        .map(|c| described_entry(c, documented))
        .collect();
    answer.with_configs(configs)
}

/// Why a resource that is not a topic is INVALID_REQUEST, so that an admin tool shows
/// the reason rather than an empty list.
pub fn unconfigurable(resource_type: i8) -> StrBytes {
    StrBytes::from_string(format!(
        "idem has topic configs only (resource type {TOPIC_RESOURCE}); resource type \
         {resource_type} is not configurable through Kafka's API"
    ))
}

fn described_entry(config: DescribedConfig, documented: bool) -> DescribeConfigsResourceResult {
    let from_topic = config.source() == ConfigSource::TopicConfig;
    let documentation = documented.then(|| {
        StrBytes::from_static_str(if from_topic {
            "set on the topic"
        } else {
            "the broker's default (its --log-* flags, or built in)"
        })
    });
    DescribeConfigsResourceResult::default()
        .with_config_type(config_type(&config.name))
        .with_name(StrBytes::from_string(config.name))
        .with_value(Some(StrBytes::from_string(config.value)))
        .with_read_only(false)
        .with_config_source(if from_topic {
            DYNAMIC_TOPIC_CONFIG
        } else {
            DEFAULT_CONFIG
        })
        .with_is_sensitive(false)
        .with_documentation(documentation)
}

/// Kafka's config type numbers (v3+): INT 3, LONG 5, LIST 7; UNKNOWN 0.
fn config_type(key: &str) -> i8 {
    match value_kind(key) {
        Some(ValueKind::Int) => 3,
        Some(ValueKind::Long) => 5,
        Some(ValueKind::List) => 7,
        None => 0,
    }
}
