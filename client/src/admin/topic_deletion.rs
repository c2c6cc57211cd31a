//! Deleting topics (DeleteTopics): one RPC to the bootstrap broker, not retried, like
//! creation: a deletion whose answer was lost may have happened, and asking again would
//! answer UNKNOWN_TOPIC_OR_PARTITION; `metadata` tells. Each topic is answered on its
//! own: `INVALID_TOPIC_EXCEPTION` for an internal topic (never deleted),
//! `UNKNOWN_TOPIC_OR_PARTITION` for one that does not exist, `REQUEST_TIMED_OUT`
//! (retriable) when etcd could not be reached; a refused topic is left as it was.

use idem_proto::v1::DeleteTopicsRequest;

use super::Admin;
use crate::error::ClientError;

impl Admin {
    /// Deletes `topics`, their data on every replica and their producer state; returns
    /// each topic's outcome in the order asked. A topic created again under a deleted
    /// name is a new incarnation (another `topic_id` in the metadata) and starts empty.
    pub async fn delete_topics(
        &self,
        topics: &[&str],
    ) -> Result<Vec<(String, Result<(), ClientError>)>, ClientError> {
        let mut client = self.connection().client();
        let answer = self
            .connection()
            .call(client.delete_topics(DeleteTopicsRequest {
                topics: topics.iter().map(|t| t.to_string()).collect(),
            }))
            .await?;
        for topic in topics {
            self.connection().invalidate(topic);
        }
        topics
            .iter()
            .map(|topic| {
                let result = answer
                    .topics
                    .iter()
                    .find(|t| t.name == *topic)
                    .ok_or_else(|| {
                        ClientError::Protocol(format!("delete topics answer lacks topic {topic:?}"))
                    })?;
                let outcome = match result.error_code {
                    0 => Ok(()),
                    code => Err(ClientError::broker(code, result.error_message.clone())),
                };
                Ok((topic.to_string(), outcome))
            })
            .collect()
    }

    /// Deletes one topic (see [`Admin::delete_topics`]).
    pub async fn delete_topic(&self, topic: &str) -> Result<(), ClientError> {
        let mut outcomes = self.delete_topics(&[topic]).await?;
        match outcomes.pop() {
            Some((_, outcome)) => outcome,
            None => Err(ClientError::Protocol(format!(
                "delete topics answer lacks topic {topic:?}"
            ))),
        }
    }
}
