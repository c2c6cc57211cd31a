//! Metadata: idem's topics, partitions, leaders, replicas and ISR, with every live
//! broker's Kafka listener address. Unknown topics are UNKNOWN_TOPIC_OR_PARTITION (no
//! auto-creation: idem creates topics only when asked). A broker without a Kafka
//! listener is left out of the broker list; a partition it leads then reads as
//! LEADER_NOT_AVAILABLE to Kafka clients.

use idem_proto::v1::MetadataRequest as IdemMetadataRequest;
use idem_runtime::listeners::Listener;
use kafka_protocol::messages::metadata_request::MetadataRequest;
use kafka_protocol::messages::metadata_response::{
    MetadataResponse, MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use super::topic_ids::TopicIds;
use crate::service::BrokerService;

/// What Kafka clients see as the cluster id.
const CLUSTER_ID: &str = "idem";

pub async fn serve(
    service: &BrokerService,
    principal: &str,
    request: MetadataRequest,
) -> MetadataResponse {
    // Kafka: a null list asks for every topic, an empty one for none. v10+ may name a
    // topic by id only (a KIP-848 consumer resolving its assignment): the id's name, or
    // a name no topic has, which answers UNKNOWN_TOPIC_OR_PARTITION.
    let ids = request
        .topics
        .as_ref()
        .is_some_and(|topics| topics.iter().any(|t| t.name.is_none()))
        .then(|| TopicIds::of(service));
    let names: Option<Vec<String>> = request.topics.map(|topics| {
        topics
            .into_iter()
            .filter_map(|t| match (t.name, &ids) {
                (Some(name), _) => Some(name.0.to_string()),
                (None, Some(ids)) if !t.topic_id.is_nil() => {
                    Some(ids.name(&t.topic_id).map_or_else(
                        || format!("<unknown topic id {}>", t.topic_id),
                        str::to_string,
                    ))
                }
                (None, _) => None,
            })
            .collect()
    });
    let brokers = match service.kafka_brokers().await {
        Ok(brokers) => brokers
            .into_iter()
            .filter_map(|(id, address)| {
                let (host, port) = split_host_port(address.as_deref()?)?;
                Some(
                    MetadataResponseBroker::default()
                        .with_node_id(BrokerId(id))
                        .with_host(StrBytes::from_string(host))
                        .with_port(port),
                )
            })
            .collect(),
        Err(status) => {
            tracing::warn!(error = %status.message(), "Kafka Metadata without the cluster's brokers");
            Vec::new()
        }
    };
    let topics = match names {
        Some(names) if names.is_empty() => Vec::new(),
        names => topics(service, principal, names.unwrap_or_default()).await,
    };
    MetadataResponse::default()
        .with_brokers(brokers)
        .with_cluster_id(Some(StrBytes::from_static_str(CLUSTER_ID)))
        .with_controller_id(BrokerId(service.broker_id()))
        .with_topics(topics)
}

/// The named topics (all when `names` is empty) as the gRPC Metadata describes them,
/// with its authorization filter.
async fn topics(
    service: &BrokerService,
    principal: &str,
    names: Vec<String>,
) -> Vec<MetadataResponseTopic> {
    let named = !names.is_empty();
    let idem = match service
        .serve_metadata(
            IdemMetadataRequest {
                topics: names.clone(),
            },
            Listener::Internal,
        )
        .await
    {
        Ok(response) => service.filter_metadata(principal, named, response),
        Err(status) => {
            tracing::warn!(error = %status.message(), "Kafka Metadata cannot describe topics");
            return names
                .into_iter()
                .map(|name| {
                    MetadataResponseTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_string(name))))
                        .with_error_code(ResponseError::LeaderNotAvailable.code())
                })
                .collect();
        }
    };
    idem.topics
        .into_iter()
        .map(|topic| {
            let topic_id = uuid::Uuid::parse_str(&topic.topic_id).unwrap_or_default();
            MetadataResponseTopic::default()
                .with_error_code(kafka_code(topic.error_code))
                .with_is_internal(topic.name.starts_with("__"))
                .with_name(Some(TopicName(StrBytes::from_string(topic.name))))
                .with_topic_id(topic_id)
                .with_partitions(
                    topic
                        .partitions
                        .into_iter()
                        .map(|p| {
                            let error_code = match (p.error_code, p.leader_id) {
                                (0, leader) if leader < 0 => {
                                    ResponseError::LeaderNotAvailable.code()
                                }
                                (code, _) => kafka_code(code),
                            };
                            MetadataResponsePartition::default()
                                .with_error_code(error_code)
                                .with_partition_index(p.partition)
                                .with_leader_id(BrokerId(p.leader_id))
                                .with_leader_epoch(p.leader_epoch)
                                .with_replica_nodes(p.replicas.into_iter().map(BrokerId).collect())
                                .with_isr_nodes(p.isr.into_iter().map(BrokerId).collect())
                        })
                        .collect(),
                )
        })
        .collect()
}

/// `host:port` (a bracketed IPv6 host too) split for Kafka's broker entries.
pub fn split_host_port(address: &str) -> Option<(String, i32)> {
    let (host, port) = address.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Some((host.to_string(), port.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::split_host_port;

    #[test]
    fn given_an_address_then_host_and_port_split() {
        assert_eq!(
            split_host_port("127.0.0.1:9094"),
            Some(("127.0.0.1".into(), 9094))
        );
        assert_eq!(split_host_port("[::1]:9094"), Some(("::1".into(), 9094)));
        assert_eq!(
            split_host_port("broker-1.idem:19094"),
            Some(("broker-1.idem".into(), 19094))
        );
        assert_eq!(split_host_port("no-port"), None);
        assert_eq!(split_host_port("h:x"), None);
    }
}
