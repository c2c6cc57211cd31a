//! Topic settings (Kafka's topic configs): read every key of a topic with the value in
//! effect, and set or remove the topic's own values. Both ask the bootstrap broker and
//! retry answers lost in transport: a description changes nothing, and applying the
//! same alteration again leaves the same config. A refused alteration is
//! `Broker { code: INVALID_CONFIG, .. }` naming the key and value, and changed nothing.

use idem_proto::v1::{
    AlterConfigsTopic, AlterableConfig, ConfigOpType, ConfigSource, DescribeConfigsRequest,
    IncrementalAlterConfigsRequest,
};

use super::Admin;
use crate::error::ClientError;

/// One setting of a topic as a broker describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicConfigEntry {
    pub name: String,
    /// The value in effect (`-1`: unlimited, for retention).
    pub value: String,
    /// Not set on the topic: the broker's default applies.
    pub is_default: bool,
}

/// One change of a topic's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterConfigOp {
    /// Sets the topic's own value of a key.
    Set { name: String, value: String },
    /// Removes the topic's own value: the broker's default applies again.
    Delete { name: String },
}

impl AlterConfigOp {
    pub fn set(name: &str, value: &str) -> AlterConfigOp {
        AlterConfigOp::Set {
            name: name.to_string(),
            value: value.to_string(),
        }
    }

    pub fn delete(name: &str) -> AlterConfigOp {
        AlterConfigOp::Delete {
            name: name.to_string(),
        }
    }

    fn to_wire(&self) -> AlterableConfig {
        match self {
            AlterConfigOp::Set { name, value } => AlterableConfig {
                name: name.clone(),
                op: ConfigOpType::Set as i32,
                value: value.clone(),
            },
            AlterConfigOp::Delete { name } => AlterableConfig {
                name: name.clone(),
                op: ConfigOpType::Delete as i32,
                value: String::new(),
            },
        }
    }
}

impl Admin {
    /// Every setting of `topic`, in name order, as the answering broker last read the
    /// catalog. An unknown topic is `UNKNOWN_TOPIC_OR_PARTITION`.
    pub async fn describe_configs(
        &self,
        topic: &str,
    ) -> Result<Vec<TopicConfigEntry>, ClientError> {
        let request = DescribeConfigsRequest {
            topics: vec![topic.to_string()],
        };
        let answer = self
            .connection()
            .call_retrying(|mut client| {
                let request = request.clone();
                async move { client.describe_configs(request).await }
            })
            .await?;
        let result = answer
            .topics
            .into_iter()
            .find(|t| t.topic == topic)
            .ok_or_else(|| {
                ClientError::Protocol(format!("describe configs answer lacks topic {topic:?}"))
            })?;
        if result.error_code != 0 {
            return Err(ClientError::broker(result.error_code, result.error_message));
        }
        Ok(result
            .configs
            .into_iter()
            .map(|c| TopicConfigEntry {
                is_default: c.source() != ConfigSource::TopicConfig,
                name: c.name,
                value: c.value,
            })
            .collect())
    }

    /// Applies `ops` to `topic`'s settings, all or none. `validate_only`: the broker
    /// checks them and changes nothing. Refusals: `INVALID_CONFIG` (an unknown key, a
    /// bad value, a key named twice, `min.insync.replicas` above the replication
    /// factor, compaction, an internal topic's cleanup policy),
    /// `UNKNOWN_TOPIC_OR_PARTITION`; `REQUEST_TIMED_OUT` is retriable.
    pub async fn alter_configs(
        &self,
        topic: &str,
        ops: &[AlterConfigOp],
        validate_only: bool,
    ) -> Result<(), ClientError> {
        let request = IncrementalAlterConfigsRequest {
            topics: vec![AlterConfigsTopic {
                topic: topic.to_string(),
                configs: ops.iter().map(AlterConfigOp::to_wire).collect(),
            }],
            validate_only,
        };
        let answer = self
            .connection()
            .call_retrying(|mut client| {
                let request = request.clone();
                async move { client.incremental_alter_configs(request).await }
            })
            .await?;
        let result = answer
            .topics
            .into_iter()
            .find(|t| t.topic == topic)
            .ok_or_else(|| {
                ClientError::Protocol(format!("alter configs answer lacks topic {topic:?}"))
            })?;
        match result.error_code {
            0 => Ok(()),
            code => Err(ClientError::broker(code, result.error_message)),
        }
    }
}
