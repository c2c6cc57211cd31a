//! One etcd lease held by a server: granted, refreshed three times per TTL, and
//! revoked on a clean stop. The keeper keeps a lease clock (the instant before which the
//! lease surely lives: when the last answered keep-alive was sent, plus the TTL etcd
//! gave) and reports the lease lost once etcd says it is gone. Transport trouble is
//! retried: the lease may still live when etcd answers again. A lost lease is never
//! renewed: its holder grants a new one and binds its keys again.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::Client;

use crate::clock::now_ms;
use crate::etcd_call::{bounded, EtcdCallError, REQUEST_TIMEOUT};
use crate::lease::{open_keep_alive, KeepAliveOpenError};
use crate::log_limit::LogLimit;
use crate::shutdown::{CancellationToken, Duties};
use crate::warn_limited;

/// Fastest refresh, whatever the TTL: a sub-second TTL still gets a few refreshes.
const MIN_REFRESH: Duration = Duration::from_millis(100);

/// A granted lease and the duty keeping it alive. Dropping the keeper stops the duty at
/// its next wait (the lease then lapses by itself); [`LeaseKeeper::revoke`] ends it at
/// once.
pub struct LeaseKeeper {
    client: Client,
    lease_id: i64,
    ttl: Duration,
    clock: Arc<LeaseClock>,
    duties: Duties,
}

impl std::fmt::Debug for LeaseKeeper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseKeeper")
            .field("lease_id", &self.lease_id)
            .field("ttl", &self.ttl)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// What the keep-alive duty and the keeper's readers share.
#[derive(Debug)]
struct LeaseClock {
    /// Unix ms before which the lease surely lives; 0 once it is known lost.
    valid_until_ms: AtomicI64,
    /// Cancelled once etcd says the lease is gone.
    lost: CancellationToken,
}

impl LeaseClock {
    fn lose(&self) {
        self.valid_until_ms.store(0, Ordering::SeqCst);
        self.lost.cancel();
    }
}

impl LeaseKeeper {
    /// Grants a lease of `ttl` (whole seconds, at least one: etcd's unit) and starts
    /// keeping it alive until the keeper is revoked or dropped, or `parent` is
    /// cancelled.
    pub async fn grant(
        client: &Client,
        ttl: Duration,
        parent: &CancellationToken,
    ) -> Result<LeaseKeeper, EtcdCallError> {
        let mut client = client.clone();
        let ttl_secs = i64::try_from(ttl.as_secs()).unwrap_or(i64::MAX).max(1);
        let granted_at = now_ms();
        let lease = bounded("lease grant", client.lease_grant(ttl_secs, None)).await?;
        let clock = Arc::new(LeaseClock {
            valid_until_ms: AtomicI64::new(granted_at.saturating_add(lease.ttl() * 1000)),
            lost: CancellationToken::new(),
        });
        let duties = Duties::under(parent);
        let every = (ttl / 3).max(MIN_REFRESH);
        duties.spawn(
            "lease keep-alive",
            keep_alive(client.clone(), lease.id(), every, clock.clone()),
        );
        Ok(LeaseKeeper {
            client,
            lease_id: lease.id(),
            ttl,
            clock,
            duties,
        })
    }

    pub fn lease_id(&self) -> i64 {
        self.lease_id
    }

    /// The TTL asked for.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Whether the lease surely still lives, by this process's clock against the TTL
    /// etcd granted at the last answered keep-alive. Past it another process may own
    /// what was bound to the lease.
    pub fn holds(&self) -> bool {
        now_ms() < self.clock.valid_until_ms.load(Ordering::SeqCst)
    }

    /// Cancelled once etcd says the lease is gone (expired or revoked by someone).
    pub fn lost(&self) -> &CancellationToken {
        &self.clock.lost
    }

    /// Stops the keep-alive (waiting until it returned) and revokes the lease, so what
    /// was bound to it goes at once. A revoke etcd does not answer is logged: the lease
    /// then lapses by itself.
    pub async fn revoke(&self) {
        self.duties.stop().await;
        self.clock.valid_until_ms.store(0, Ordering::SeqCst);
        let mut client = self.client.clone();
        if let Err(e) = bounded("lease revoke", client.lease_revoke(self.lease_id)).await {
            tracing::warn!(lease_id = self.lease_id, error = %e, "could not revoke the lease; it lapses by itself");
        }
    }
}

impl Drop for LeaseKeeper {
    fn drop(&mut self) {
        // The duty returns at its next wait; nothing is cut mid-request it would mind.
        self.duties.token().cancel();
    }
}

/// Refreshes `lease_id` every `every` until etcd says it is gone; moves the lease clock
/// forward on every answer.
async fn keep_alive(mut client: Client, lease_id: i64, every: Duration, clock: Arc<LeaseClock>) {
    let mut tick = tokio::time::interval(every);
    let mut stream = None;
    let mut failures = LogLimit::for_repeated_failures();
    loop {
        tick.tick().await;
        if stream.is_none() {
            match open_keep_alive(&mut client, lease_id).await {
                Ok(pair) => stream = Some(pair),
                Err(KeepAliveOpenError::Expired(_)) => break,
                Err(e) => {
                    warn_limited!(failures, lease_id, error = %e, "cannot open the lease keep-alive; retrying");
                    continue;
                }
            }
        }
        let Some((keeper, responses)) = stream.as_mut() else {
            continue;
        };
        let sent_at_ms = now_ms();
        if let Err(e) = keeper.keep_alive().await {
            warn_limited!(failures, lease_id, error = %e, "lease keep-alive failed; retrying");
            stream = None;
            continue;
        }
        match tokio::time::timeout(REQUEST_TIMEOUT, responses.message()).await {
            Ok(Ok(Some(answer))) if answer.ttl() > 0 => {
                // etcd restarted the TTL no earlier than the request was sent.
                clock.valid_until_ms.store(
                    sent_at_ms.saturating_add(answer.ttl() * 1000),
                    Ordering::SeqCst,
                );
            }
            Ok(Ok(Some(_))) => break,
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                warn_limited!(
                    failures,
                    lease_id,
                    "no keep-alive answer from etcd; retrying"
                );
                stream = None;
            }
        }
    }
    tracing::error!(lease_id, "etcd says the lease is gone");
    clock.lose();
}
