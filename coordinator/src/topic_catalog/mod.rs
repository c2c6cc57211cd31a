//! Whether a topic exists, asked of the one place that knows for sure: the etcd topic
//! catalog in a cluster ([`etcd::EtcdTopicCatalog`]), the single-node broker itself
//! under `idem dev` ([`solo::SoloTopicCatalog`]). A broker's UNKNOWN_TOPIC_OR_PARTITION
//! is no such answer: a broker that has not yet learned of a new topic through its
//! catalog watch says the same. Only this answer lets the markers of a deleted topic's
//! partitions be dropped (`core::marker_fate`).

pub mod etcd;
pub mod solo;

use idem_pidstore::BoxFuture;

use crate::error::CoordinatorError;

/// What the catalog holds under a topic's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicPresence {
    /// No incarnation of the name exists: it was deleted (or never created).
    Absent,
    /// An incarnation exists, with partitions `0..partitions`. It may be a later one
    /// than the transaction wrote to (deleted and created again under the same name):
    /// the catalog cannot tell, as the transaction log records names only.
    Present { topic_id: String, partitions: i32 },
}

pub trait TopicCatalog: Send + Sync {
    /// What the catalog holds under `topic` now (a read after every change already
    /// answered to a client).
    fn presence<'a>(
        &'a self,
        topic: &'a str,
    ) -> BoxFuture<'a, Result<TopicPresence, CoordinatorError>>;
}
