//! A broker's registration in etcd: `{prefix}/brokers/{id}` holds its id and address and
//! is bound to a lease the broker keeps alive, so the key disappears by itself when the
//! broker dies. A broker id is claimed by compare-and-swap (`create_revision == 0`), so
//! two live brokers can never share one. A broker restarted on the same data dir takes
//! over its own stale registration at once; any other claimant waits for the holder's
//! lease to lapse and gives up with a clear error if it never does.

use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use serde::{Deserialize, Serialize};

use crate::cluster::etcd_call::{bounded, connect, EtcdCallError, REQUEST_TIMEOUT};
use tokio::task::JoinHandle;

/// Why a broker could not join or read the cluster.
#[derive(Debug, thiserror::Error)]
pub enum MembershipError {
    #[error(transparent)]
    Etcd(#[from] EtcdCallError),
    #[error(
        "broker id {broker_id} is registered by another live broker at {holder} (data dir {holder_data_dir_id}); \
         it did not go away within {waited:?}"
    )]
    IdTaken {
        broker_id: i32,
        holder: String,
        holder_data_dir_id: String,
        waited: Duration,
    },
    #[error("registration under {key} is not valid JSON: {reason}")]
    Corrupt { key: String, reason: String },
}

/// What a broker publishes about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registration {
    pub broker_id: i32,
    /// `host:port` clients dial.
    pub address: String,
    /// Identifies the data dir, so a restart can recognise its own stale registration.
    pub data_dir_id: String,
}

/// How to reach etcd and how long a registration outlives a silent broker.
#[derive(Debug, Clone)]
pub struct MembershipConfig {
    pub endpoints: Vec<String>,
    pub prefix: String,
    pub lease_ttl: Duration,
}

/// A live registration; dropping it stops the keep-alive (the lease then lapses),
/// [`Membership::leave`] revokes it at once.
pub struct Membership {
    client: Client,
    prefix: String,
    key: String,
    lease_id: i64,
    keep_alive: JoinHandle<()>,
}

impl Membership {
    /// Registers `me` under a fresh lease, taking over a stale registration of the same
    /// data dir and waiting up to twice the lease TTL for any other holder to lapse.
    pub async fn join(
        config: &MembershipConfig,
        me: Registration,
    ) -> Result<Membership, MembershipError> {
        let mut client = connect(&config.endpoints).await?;
        let prefix = config.prefix.trim_end_matches('/').to_string();
        let key = broker_key(&prefix, me.broker_id);
        let ttl_secs = config.lease_ttl.as_secs().max(1) as i64;
        let lease_id = bounded("lease grant", client.lease_grant(ttl_secs, None))
            .await?
            .id();
        let value = serde_json::to_string(&me).map_err(|e| MembershipError::Corrupt {
            key: key.clone(),
            reason: e.to_string(),
        })?;
        let patience = config.lease_ttl * 2;
        let deadline = tokio::time::Instant::now() + patience;
        loop {
            let created = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.as_str(),
                    value.as_str(),
                    Some(PutOptions::new().with_lease(lease_id)),
                )])
                .or_else([TxnOp::get(key.as_str(), None)]);
            let answer = bounded("register", client.txn(created)).await?;
            if answer.succeeded() {
                break;
            }
            let Some((holder, mod_revision)) = holder_of(&key, &answer)? else {
                continue; // it vanished between the compare and the read: try again
            };
            if holder.data_dir_id == me.data_dir_id {
                // Our own previous incarnation crashed; its lease has not lapsed yet.
                tracing::info!(
                    broker_id = me.broker_id,
                    "taking over the registration of this data dir's previous run"
                );
                let takeover = Txn::new()
                    .when([Compare::mod_revision(
                        key.as_str(),
                        CompareOp::Equal,
                        mod_revision,
                    )])
                    .and_then([TxnOp::delete(key.as_str(), None)]);
                bounded("take over registration", client.txn(takeover)).await?;
                continue;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(MembershipError::IdTaken {
                    broker_id: me.broker_id,
                    holder: holder.address,
                    holder_data_dir_id: holder.data_dir_id,
                    waited: patience,
                });
            }
            tracing::warn!(broker_id = me.broker_id, holder = %holder.address, "broker id is registered; waiting for its lease to lapse");
            wait_for_delete(&mut client, &key, mod_revision, deadline).await?;
        }
        let keep_alive = tokio::spawn(keep_lease_alive(
            client.clone(),
            lease_id,
            config.lease_ttl,
            me.broker_id,
        ));
        tracing::info!(broker_id = me.broker_id, key = %key, lease_id, "registered in etcd");
        Ok(Membership {
            client,
            prefix,
            key,
            lease_id,
            keep_alive,
        })
    }

    /// Every broker registered now, by id.
    pub async fn live_brokers(&self) -> Result<Vec<Registration>, MembershipError> {
        live_brokers(&mut self.client.clone(), &self.prefix).await
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    /// Deregisters at once (clean shutdown) by revoking the lease.
    pub async fn leave(&self) {
        self.keep_alive.abort();
        let mut client = self.client.clone();
        if let Err(e) = bounded("lease revoke", client.lease_revoke(self.lease_id)).await {
            tracing::warn!(error = %e, "could not revoke the broker lease; it lapses by itself");
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.keep_alive.abort();
    }
}

pub fn broker_key(prefix: &str, broker_id: i32) -> String {
    format!("{prefix}/brokers/{broker_id}")
}

async fn live_brokers(
    client: &mut Client,
    prefix: &str,
) -> Result<Vec<Registration>, MembershipError> {
    let dir = format!("{prefix}/brokers/");
    let answer = bounded(
        "list brokers",
        client.get(dir.as_str(), Some(GetOptions::new().with_prefix())),
    )
    .await?;
    let mut brokers = Vec::with_capacity(answer.kvs().len());
    for kv in answer.kvs() {
        let key = String::from_utf8_lossy(kv.key()).into_owned();
        let registration: Registration =
            serde_json::from_slice(kv.value()).map_err(|e| MembershipError::Corrupt {
                key,
                reason: e.to_string(),
            })?;
        brokers.push(registration);
    }
    brokers.sort_by_key(|b| b.broker_id);
    Ok(brokers)
}

fn holder_of(
    key: &str,
    answer: &etcd_client::TxnResponse,
) -> Result<Option<(Registration, i64)>, MembershipError> {
    for response in answer.op_responses() {
        if let etcd_client::TxnOpResponse::Get(get) = response {
            if let Some(kv) = get.kvs().first() {
                let holder: Registration =
                    serde_json::from_slice(kv.value()).map_err(|e| MembershipError::Corrupt {
                        key: key.to_string(),
                        reason: e.to_string(),
                    })?;
                return Ok(Some((holder, kv.mod_revision())));
            }
        }
    }
    Ok(None)
}

/// Waits until `key` (seen at `mod_revision`) is deleted or the deadline passes.
async fn wait_for_delete(
    client: &mut Client,
    key: &str,
    mod_revision: i64,
    deadline: tokio::time::Instant,
) -> Result<(), MembershipError> {
    let options = WatchOptions::new().with_start_revision(mod_revision + 1);
    let mut stream = bounded("watch", client.watch(key, Some(options))).await?;
    let deleted = async {
        while let Ok(Some(message)) = stream.message().await {
            if message
                .events()
                .iter()
                .any(|e| e.event_type() == EventType::Delete)
            {
                return;
            }
        }
    };
    let _ = tokio::time::timeout_at(deadline, deleted).await;
    Ok(())
}

/// Refreshes the lease three times per TTL. If the lease is lost (the broker was paused
/// or cut off longer than the TTL) the registration is gone; that is logged loudly and
/// the keep-alive stops: leadership fencing (a later issue) keys off the same lease.
async fn keep_lease_alive(mut client: Client, lease_id: i64, ttl: Duration, broker_id: i32) {
    let every = (ttl / 3).max(Duration::from_millis(100));
    let (mut keeper, mut responses) = match client.lease_keep_alive(lease_id).await {
        Ok(pair) => pair,
        Err(e) => {
            tracing::error!(broker_id, error = %e, "cannot keep the broker lease alive");
            return;
        }
    };
    let mut tick = tokio::time::interval(every);
    loop {
        tick.tick().await;
        if let Err(e) = keeper.keep_alive().await {
            tracing::warn!(broker_id, error = %e, "lease keep-alive failed; retrying");
            continue;
        }
        match tokio::time::timeout(REQUEST_TIMEOUT, responses.message()).await {
            Ok(Ok(Some(answer))) if answer.ttl() > 0 => {}
            Ok(Ok(Some(_))) => {
                tracing::error!(
                    broker_id,
                    lease_id,
                    "broker lease expired: this broker is no longer registered"
                );
                return;
            }
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                tracing::warn!(broker_id, "no keep-alive answer from etcd; retrying");
                match client.lease_keep_alive(lease_id).await {
                    Ok(pair) => (keeper, responses) = pair,
                    Err(e) => {
                        tracing::warn!(broker_id, error = %e, "reopening the keep-alive stream failed")
                    }
                }
            }
        }
    }
}
