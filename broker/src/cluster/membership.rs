//! A broker's registration in etcd: `{prefix}/brokers/{id}` holds its id and address and
//! is bound to a lease the broker keeps alive, so the key disappears by itself when the
//! broker dies. A broker id is claimed by compare-and-swap (`create_revision == 0`), so
//! two live brokers can never share one. A broker restarted on the same data dir takes
//! over its own stale registration at once; any other claimant waits for the holder's
//! lease to lapse and gives up with a clear error if it never does.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, EventType, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};
use serde::{Deserialize, Serialize};

use idem_runtime::etcd_call::{bounded, connect, EtcdCallError, REQUEST_TIMEOUT};
use idem_runtime::lease::{open_keep_alive, KeepAliveOpenError};
use idem_runtime::log_limit::LogLimit;
use idem_runtime::warn_limited;
use tokio::sync::watch;
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
    /// The lease the registration is bound to and how long it surely lives.
    lease: Arc<LeaseState>,
    keep_alive: JoinHandle<()>,
}

/// The broker's lease as the keep-alive last saw it.
pub struct LeaseState {
    lease_id: AtomicI64,
    /// Unix ms before which the lease surely lives: the last successful keep-alive was
    /// sent then minus nothing, plus the TTL etcd granted. Past it, the broker must
    /// assume another broker may have taken its partitions.
    valid_until_ms: AtomicI64,
    /// Counts registrations; a new one means the broker was out of the cluster.
    generation: AtomicU64,
    /// False from the moment etcd says the lease expired until registered again.
    registered: watch::Sender<bool>,
}

impl LeaseState {
    fn new(lease_id: i64, valid_until_ms: i64) -> Self {
        LeaseState {
            lease_id: AtomicI64::new(lease_id),
            valid_until_ms: AtomicI64::new(valid_until_ms),
            generation: AtomicU64::new(0),
            registered: watch::Sender::new(true),
        }
    }
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
        register(&mut client, &key, &value, lease_id, &me, patience).await?;
        let lease = Arc::new(LeaseState::new(
            lease_id,
            unix_ms() + config.lease_ttl.as_millis() as i64,
        ));
        let registration = Registered {
            key: key.clone(),
            value,
            me: me.clone(),
            ttl: config.lease_ttl,
        };
        let keep_alive = tokio::spawn(keep_lease_alive(
            client.clone(),
            lease.clone(),
            registration,
        ));
        tracing::info!(broker_id = me.broker_id, key = %key, lease_id, "registered in etcd");
        Ok(Membership {
            client,
            prefix,
            lease,
            keep_alive,
        })
    }

    /// Whether this broker surely still holds its lease (its clock against the TTL etcd
    /// granted at the last keep-alive). A broker that does not must not accept writes.
    pub fn holds_lease(&self) -> bool {
        unix_ms() < self.lease.valid_until_ms.load(Ordering::SeqCst)
    }

    /// Changes each time the broker had to register again after losing its lease.
    pub fn generation(&self) -> u64 {
        self.lease.generation.load(Ordering::SeqCst)
    }

    /// Whether the broker is registered: false from the moment etcd says its lease
    /// expired until it registered again under a new one.
    pub fn registered(&self) -> watch::Receiver<bool> {
        self.lease.registered.subscribe()
    }

    /// Every broker registered now, by id.
    pub async fn live_brokers(&self) -> Result<Vec<Registration>, MembershipError> {
        live_brokers(&mut self.client.clone(), &self.prefix).await
    }

    /// Deregisters at once (clean shutdown) by revoking the lease.
    pub async fn leave(&self) {
        self.keep_alive.abort();
        let mut client = self.client.clone();
        let lease_id = self.lease.lease_id.load(Ordering::SeqCst);
        if let Err(e) = bounded("lease revoke", client.lease_revoke(lease_id)).await {
            tracing::warn!(error = %e, "could not revoke the broker lease; it lapses by itself");
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.keep_alive.abort();
    }
}

/// Creates the registration key bound to `lease_id`: at once if it is free, after
/// deleting it if it is this data dir's own stale registration, after its holder's lease
/// lapsed otherwise; gives up after `patience`.
async fn register(
    client: &mut Client,
    key: &str,
    value: &str,
    lease_id: i64,
    me: &Registration,
    patience: Duration,
) -> Result<(), MembershipError> {
    let deadline = tokio::time::Instant::now() + patience;
    loop {
        let created = Txn::new()
            .when([Compare::create_revision(key, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(
                key,
                value,
                Some(PutOptions::new().with_lease(lease_id)),
            )])
            .or_else([TxnOp::get(key, None)]);
        let answer = bounded("register", client.txn(created)).await?;
        if answer.succeeded() {
            return Ok(());
        }
        let Some((holder, mod_revision)) = holder_of(key, &answer)? else {
            continue; // it vanished between the compare and the read: try again
        };
        if holder.data_dir_id == me.data_dir_id {
            // This data dir's previous run (or lease) left it behind; it is ours.
            tracing::info!(
                broker_id = me.broker_id,
                "taking over this data dir's stale registration"
            );
            let takeover = Txn::new()
                .when([Compare::mod_revision(key, CompareOp::Equal, mod_revision)])
                .and_then([TxnOp::delete(key, None)]);
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
        wait_for_delete(client, key, mod_revision, deadline).await?;
    }
}

/// What the keep-alive needs to register again after losing its lease.
struct Registered {
    key: String,
    value: String,
    me: Registration,
    ttl: Duration,
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

/// Refreshes the lease three times per TTL. A lost lease (the broker was paused or cut
/// off longer than the TTL) means the registration is gone: the broker registers again
/// under a new lease as soon as etcd answers, and keeps trying until it does.
async fn keep_lease_alive(mut client: Client, lease: Arc<LeaseState>, registration: Registered) {
    let broker_id = registration.me.broker_id;
    let every = (registration.ttl / 3).max(Duration::from_millis(100));
    let mut tick = tokio::time::interval(every);
    let mut failures = LogLimit::for_repeated_failures();
    loop {
        let lease_id = lease.lease_id.load(Ordering::SeqCst);
        if keep_alive_until_lost(&mut client, &lease, &mut tick, broker_id, &mut failures).await {
            tracing::error!(
                broker_id,
                lease_id,
                "broker lease expired: registering again"
            );
            lease.registered.send_replace(false);
            loop {
                match register_again(&mut client, &registration).await {
                    Ok(new_lease) => {
                        lease.lease_id.store(new_lease, Ordering::SeqCst);
                        lease.valid_until_ms.store(
                            unix_ms() + registration.ttl.as_millis() as i64,
                            Ordering::SeqCst,
                        );
                        lease.generation.fetch_add(1, Ordering::SeqCst);
                        lease.registered.send_replace(true);
                        tracing::info!(broker_id, lease_id = new_lease, "registered again in etcd");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(broker_id, error = %e, "registering again failed; retrying");
                        tick.tick().await;
                    }
                }
            }
        }
    }
}

async fn register_again(
    client: &mut Client,
    registration: &Registered,
) -> Result<i64, MembershipError> {
    let ttl_secs = registration.ttl.as_secs().max(1) as i64;
    let lease_id = bounded("lease grant", client.lease_grant(ttl_secs, None))
        .await?
        .id();
    let patience = registration.ttl * 2;
    register(
        client,
        &registration.key,
        &registration.value,
        lease_id,
        &registration.me,
        patience,
    )
    .await?;
    Ok(lease_id)
}

/// Keeps `lease_id` alive; returns `true` once etcd says it expired. Transport trouble
/// is retried (the lease may still be alive when etcd answers again).
async fn keep_alive_until_lost(
    client: &mut Client,
    lease: &LeaseState,
    tick: &mut tokio::time::Interval,
    broker_id: i32,
    failures: &mut LogLimit,
) -> bool {
    let lease_id = lease.lease_id.load(Ordering::SeqCst);
    let mut stream = None;
    loop {
        tick.tick().await;
        if stream.is_none() {
            match open_keep_alive(client, lease_id).await {
                Ok(pair) => stream = Some(pair),
                Err(KeepAliveOpenError::Expired(_)) => return true,
                Err(e) => {
                    warn_limited!(failures, broker_id, error = %e, "cannot open the lease keep-alive; retrying");
                    continue;
                }
            }
        }
        let Some((keeper, responses)) = stream.as_mut() else {
            continue;
        };
        let sent_at_ms = unix_ms();
        if let Err(e) = keeper.keep_alive().await {
            warn_limited!(failures, broker_id, error = %e, "lease keep-alive failed; retrying");
            stream = None;
            continue;
        }
        match tokio::time::timeout(REQUEST_TIMEOUT, responses.message()).await {
            Ok(Ok(Some(answer))) if answer.ttl() > 0 => {
                // etcd restarted the TTL no earlier than we sent the request.
                lease
                    .valid_until_ms
                    .store(sent_at_ms + answer.ttl() * 1000, Ordering::SeqCst);
            }
            Ok(Ok(Some(_))) => return true,
            Ok(Ok(None)) | Ok(Err(_)) | Err(_) => {
                warn_limited!(
                    failures,
                    broker_id,
                    "no keep-alive answer from etcd; retrying"
                );
                stream = None;
            }
        }
    }
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
