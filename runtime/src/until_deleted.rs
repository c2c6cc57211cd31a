//! Waiting for an etcd key to go: a process whose id or claim is held by another waits
//! for the holder's key to be deleted (its lease lapsed or was revoked) rather than
//! polling. The watch starts just after the revision at which the caller saw the key,
//! so a delete between that read and the watch is not missed.

use etcd_client::{Client, EventType, WatchOptions};
use tokio::time::Instant;

use crate::etcd_call::{bounded, EtcdCallError};

/// How a wait for a delete ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    /// The key was deleted.
    Deleted,
    /// The deadline passed, or etcd ended the watch (e.g. the revision was compacted):
    /// the caller reads the key again.
    GaveUp,
}

/// Waits until `key`, seen at `mod_revision`, is deleted, or `deadline` passes.
pub async fn until_deleted(
    client: &mut Client,
    key: &str,
    mod_revision: i64,
    deadline: Instant,
) -> Result<Waited, EtcdCallError> {
    let options = WatchOptions::new().with_start_revision(mod_revision.saturating_add(1));
    let mut stream = bounded("watch", client.watch(key, Some(options))).await?;
    let deleted = async {
        while let Ok(Some(message)) = stream.message().await {
            if message
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                return Waited::Deleted;
            }
        }
        Waited::GaveUp
    };
    Ok(tokio::time::timeout_at(deadline, deleted)
        .await
        .unwrap_or(Waited::GaveUp))
}
