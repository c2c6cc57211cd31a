//! The topic catalog of a single-node broker (`idem dev`, a solo coordinator): the
//! broker's own topic list (`topics.json` in its data dir, the embedded store), asked
//! through Metadata. That broker is the list's only writer and changes it before it
//! answers a CreateTopics or DeleteTopics, and no other broker can lag behind it, so its
//! "unknown topic" is authoritative, as the etcd catalog is in a cluster.

use idem_client::Connection;
use idem_pidstore::BoxFuture;
use idem_proto::ErrorCode;

use super::{TopicCatalog, TopicPresence};
use crate::error::CoordinatorError;

pub struct SoloTopicCatalog {
    conn: Connection,
}

impl SoloTopicCatalog {
    pub fn new(conn: Connection) -> Self {
        SoloTopicCatalog { conn }
    }

    async fn read(&self, topic: &str) -> Result<TopicPresence, CoordinatorError> {
        let metadata = self.conn.fetch_metadata(vec![topic.to_string()]).await?;
        let Some(found) = metadata.topic(topic) else {
            return Ok(TopicPresence::Absent);
        };
        match found.error {
            None => Ok(TopicPresence::Present {
                topic_id: found.topic_id.clone(),
                partitions: found.partitions.len() as i32,
            }),
            Some(ErrorCode::UnknownTopicOrPartition) => Ok(TopicPresence::Absent),
            Some(code) => Err(CoordinatorError::Refused {
                what: format!("metadata of {topic}"),
                code,
                message: "the broker cannot say whether the topic exists".into(),
            }),
        }
    }
}

impl TopicCatalog for SoloTopicCatalog {
    fn presence<'a>(
        &'a self,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<TopicPresence, CoordinatorError>> {
        Box::pin(self.read(topic))
    }
}
