//! Opening an etcd lease keep-alive, telling apart the two failures that need opposite
//! answers: etcd is unreachable (keep trying: the lease may still live when it answers)
//! or etcd answers that the lease is gone (register again under a new lease: retrying
//! the old one would fail forever, leaving the process owner of nothing it can renew).

use etcd_client::{Client, LeaseKeepAliveStream, LeaseKeeper};

use crate::etcd_call::{bounded, EtcdCallError};

/// Why a keep-alive could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum KeepAliveOpenError {
    /// etcd answered that the lease does not exist (it expired, e.g. while this process
    /// or etcd was paused longer than the TTL).
    #[error("lease {0} expired")]
    Expired(i64),
    #[error(transparent)]
    Unreachable(#[from] EtcdCallError),
}

/// Opens a keep-alive stream for `lease_id` (the client's opener sends one keep-alive
/// and waits for its answer). When that fails, asks etcd for the lease's remaining TTL:
/// an answer of none (etcd says -1 for an unknown lease) means the lease expired.
pub async fn open_keep_alive(
    client: &mut Client,
    lease_id: i64,
) -> Result<(LeaseKeeper, LeaseKeepAliveStream), KeepAliveOpenError> {
    let opened = bounded("lease keep-alive", client.lease_keep_alive(lease_id)).await;
    let open_error = match opened {
        Ok(pair) => return Ok(pair),
        Err(e) => e,
    };
    match bounded(
        "lease time-to-live",
        client.lease_time_to_live(lease_id, None),
    )
    .await
    {
        Ok(answer) if answer.ttl() <= 0 => Err(KeepAliveOpenError::Expired(lease_id)),
        // Alive after all (the stream failed on the way), or etcd cannot say: the
        // opener's own failure is the one to report; the caller tries again later.
        Ok(_) | Err(_) => Err(KeepAliveOpenError::Unreachable(open_error)),
    }
}
