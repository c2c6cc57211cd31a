//! A broker's registration in etcd: `{prefix}/brokers/{id}` holds its id and address and
//! is bound to a lease the broker keeps alive, so the key disappears by itself when the
//! broker dies. A broker id is claimed by compare-and-swap (`create_revision == 0`), so
//! two live brokers can never share one. A broker restarted on the same data dir takes
//! over its own stale registration at once; any other claimant waits for the holder's
//! lease to lapse and gives up with a clear error if it never does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};

use idem_runtime::authn::NodeCredential;
use idem_runtime::etcd_call::{bounded, connect, EtcdCallError};
use idem_runtime::lease_keeper::LeaseKeeper;
use idem_runtime::shutdown::{CancellationToken, Duties};
use idem_runtime::until_deleted::until_deleted;
use tokio::sync::watch;

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
    /// `host:port` of its external listener (`--external-listen`), for clients outside
    /// the cluster's network; absent in registrations of brokers without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_address: Option<String>,
    /// `host:port` of its Kafka-protocol listener (`--kafka-listen`), which Kafka
    /// clients' Metadata names; absent for brokers without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka_address: Option<String>,
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
    lease: Arc<LeaseState>,
    /// Keeps the broker registered: the lease keep-alive and the registering again.
    duties: Duties,
    /// What this broker presents when it calls other brokers (replica fetches).
    credential: NodeCredential,
}

/// The broker's lease and registration as the keep-alive last saw them.
pub struct LeaseState {
    /// The lease the registration is bound to now.
    keeper: Mutex<Arc<LeaseKeeper>>,
    /// Counts registrations; a new one means the broker was out of the cluster.
    generation: AtomicU64,
    /// False from the moment etcd says the lease expired until registered again.
    registered: watch::Sender<bool>,
}

impl LeaseState {
    fn new(keeper: LeaseKeeper) -> Self {
        LeaseState {
            keeper: Mutex::new(Arc::new(keeper)),
            generation: AtomicU64::new(0),
            registered: watch::Sender::new(true),
        }
    }

    fn keeper(&self) -> Arc<LeaseKeeper> {
        self.keeper
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Membership {
    /// Presents `credential` on this broker's calls to other brokers.
    pub fn with_credential(mut self, credential: NodeCredential) -> Self {
        self.credential = credential;
        self
    }

    pub fn credential(&self) -> &NodeCredential {
        &self.credential
    }

    /// Registers `me` under a fresh lease, taking over a stale registration of the same
    /// data dir and waiting up to twice the lease TTL for any other holder to lapse.
    /// The registration is kept until [`Membership::leave`] or `shutdown`.
    pub async fn join(
        config: &MembershipConfig,
        me: Registration,
        shutdown: &CancellationToken,
    ) -> Result<Membership, MembershipError> {
        let client = connect(&config.endpoints).await?;
        let prefix = config.prefix.trim_end_matches('/').to_string();
        let key = broker_key(&prefix, me.broker_id);
        let value = serde_json::to_string(&me).map_err(|e| MembershipError::Corrupt {
            key: key.clone(),
            reason: e.to_string(),
        })?;
        let registration = Registered {
            key: key.clone(),
            value,
            me: me.clone(),
            ttl: config.lease_ttl,
        };
        let duties = Duties::under(shutdown);
        let keeper = register_under_new_lease(&client, &registration, duties.token()).await?;
        let lease_id = keeper.lease_id();
        let lease = Arc::new(LeaseState::new(keeper));
        duties.spawn(
            "stay registered",
            stay_registered(
                client.clone(),
                lease.clone(),
                registration,
                duties.token().clone(),
            ),
        );
        tracing::info!(broker_id = me.broker_id, key = %key, lease_id, "registered in etcd");
        Ok(Membership {
            credential: NodeCredential::default(),
            client,
            prefix,
            lease,
            duties,
        })
    }

    /// Whether this broker surely still holds its lease (its clock against the TTL etcd
    /// granted at the last keep-alive). A broker that does not must not accept writes.
    pub fn holds_lease(&self) -> bool {
        self.lease.keeper().holds()
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

    /// Deregisters at once (clean shutdown): stops keeping the registration, then
    /// revokes the lease.
    pub async fn leave(&self) {
        self.duties.stop().await;
        self.lease.keeper().revoke().await;
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        // Its duties return at their next wait; the lease then lapses by itself.
        self.duties.token().cancel();
    }
}

/// Grants a lease and binds the registration to it; a lease left unused is revoked.
async fn register_under_new_lease(
    client: &Client,
    registration: &Registered,
    parent: &CancellationToken,
) -> Result<LeaseKeeper, MembershipError> {
    let keeper = LeaseKeeper::grant(client, registration.ttl, parent).await?;
    // Kept alive while the registration waits for another holder to lapse.
    let registered = register(
        &mut client.clone(),
        &registration.key,
        &registration.value,
        keeper.lease_id(),
        &registration.me,
        registration.ttl * 2,
    )
    .await;
    match registered {
        Ok(()) => Ok(keeper),
        Err(e) => {
            keeper.revoke().await;
            Err(e)
        }
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
        until_deleted(client, key, mod_revision, deadline).await?;
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

/// Registers again under a new lease whenever etcd says the current one is gone (the
/// broker was paused or cut off longer than the TTL, or someone revoked it): the
/// registration went with it. Keeps trying, a third of a TTL apart, until etcd answers.
async fn stay_registered(
    client: Client,
    lease: Arc<LeaseState>,
    registration: Registered,
    stop: CancellationToken,
) {
    let broker_id = registration.me.broker_id;
    let pause = (registration.ttl / 3).max(Duration::from_millis(100));
    loop {
        let keeper = lease.keeper();
        keeper.lost().cancelled().await;
        tracing::error!(
            broker_id,
            lease_id = keeper.lease_id(),
            "broker lease expired: registering again"
        );
        drop(keeper);
        lease.registered.send_replace(false);
        loop {
            match register_under_new_lease(&client, &registration, &stop).await {
                Ok(keeper) => {
                    let lease_id = keeper.lease_id();
                    *lease.keeper.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(keeper);
                    lease.generation.fetch_add(1, Ordering::SeqCst);
                    lease.registered.send_replace(true);
                    tracing::info!(broker_id, lease_id, "registered again in etcd");
                    break;
                }
                Err(e) => {
                    tracing::warn!(broker_id, error = %e, "registering again failed; retrying");
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}
