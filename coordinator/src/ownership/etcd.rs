//! Ownership through etcd (docs/transactions.md). The coordinator registers
//! `members/{id}` under a lease it keeps alive; it claims an unowned partition `p` with
//! one etcd txn (`owners/{p}` absent and `epochs/{p}` unchanged → put `owners/{p}` with
//! the lease and `epochs/{p}` with epoch + 1), up to `ceil(N / live coordinators)`
//! partitions, and scans the keys a few times per lease TTL so that the partitions of a
//! coordinator whose lease expired are claimed by the others.
//!
//! Fencing: when this coordinator's lease may have lapsed (its own clock against the TTL
//! etcd granted at the last keep-alive, as the broker's membership does), every claim
//! is lost at once, before etcd can hand the partitions to anyone else; a claim whose
//! owner key is no longer ours is lost at the next scan.
//!
//! After an etcd fault: an owner key still bound to our live lease that we no longer
//! serve (etcd renews leases when it restarts or regains quorum) is claimed again under
//! a new epoch at the next scan; a lease etcd says expired is replaced by registering
//! again. Either way every partition is owned by someone who serves it, never only on
//! paper (keys::plan_scan).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use backon::{ConstantBuilder, Retryable};
use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use idem_pidstore::BoxFuture;
use idem_runtime::etcd_call::{bounded, connect, REQUEST_TIMEOUT};
use idem_runtime::lease_keeper::LeaseKeeper;
use idem_runtime::log_limit::LogLimit;
use idem_runtime::shutdown::{CancellationToken, Duties};
use idem_runtime::until_deleted::until_deleted;
use idem_runtime::warn_limited;
use tokio::sync::mpsc;

use crate::error::CoordinatorError;
use crate::ownership::keys::{self, EpochValue, MemberValue, OwnerValue, RawKv, Snapshot};
use crate::ownership::token::OwnershipToken;
use crate::ownership::{Claim, OwnerInfo, Ownership};
use crate::producer_ids::SharedProducerIds;

/// How often the lease clock is checked.
const LEASE_CHECK: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct EtcdOwnershipConfig {
    pub endpoints: Vec<String>,
    pub prefix: String,
    pub coordinator_id: i32,
    /// `host:port` clients dial.
    pub address: String,
    /// `host:port` clients outside the cluster's network dial, if it has an external
    /// listener.
    pub external_address: Option<String>,
    pub lease_ttl: Duration,
}

struct Mine {
    token: OwnershipToken,
    /// The owner key's mod_revision when we created it.
    mod_revision: i64,
    coordinator_epoch: i32,
}

#[derive(Default)]
struct State {
    owners: HashMap<i32, OwnerInfo>,
    mine: HashMap<i32, Mine>,
}

pub struct EtcdOwnership {
    config: EtcdOwnershipConfig,
    prefix: String,
    client: Client,
    pids: SharedProducerIds,
    /// The lease the member key and every owner key are bound to; none before the
    /// first registration and after leaving.
    lease: Mutex<Option<Arc<LeaseKeeper>>>,
    state: Mutex<State>,
    /// The lease keep-alive and the registering again after a lost lease.
    duties: Duties,
}

impl EtcdOwnership {
    /// Connects and registers this coordinator (waiting up to twice the TTL for a
    /// previous holder of the id, e.g. this coordinator's last run, to lapse). Keeps
    /// registered until [`Ownership::leave`] or `shutdown`.
    pub async fn join(
        config: EtcdOwnershipConfig,
        pids: SharedProducerIds,
        shutdown: &CancellationToken,
    ) -> Result<Arc<Self>, CoordinatorError> {
        let endpoints: Vec<String> = config
            .endpoints
            .iter()
            .flat_map(|e| e.split(','))
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(String::from)
            .collect();
        if endpoints.is_empty() {
            return Err(CoordinatorError::Config("no etcd endpoint given".into()));
        }
        let client = connect(&endpoints).await?;
        let prefix = config.prefix.trim_end_matches('/').to_string();
        let ownership = Arc::new(EtcdOwnership {
            prefix,
            client,
            pids,
            lease: Mutex::new(None),
            state: Mutex::new(State::default()),
            duties: Duties::under(shutdown),
            config,
        });
        ownership.register(ownership.config.lease_ttl * 2).await?;
        // Weak: dropping the ownership ends the duty rather than the duty keeping it.
        ownership.duties.spawn(
            "stay registered",
            stay_registered(Arc::downgrade(&ownership)),
        );
        Ok(ownership)
    }

    /// The lease held now, if any.
    fn lease(&self) -> Option<Arc<LeaseKeeper>> {
        self.lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn lease_id(&self) -> i64 {
        self.lease().map_or(0, |lease| lease.lease_id())
    }

    /// Grants a lease and creates the member key bound to it. While an earlier
    /// incarnation's key still lives, waits for it to go, keeping the new lease alive
    /// meanwhile (the wait can outlast a TTL); a lease left unused is revoked.
    async fn register(&self, patience: Duration) -> Result<(), CoordinatorError> {
        let mut client = self.client.clone();
        let key = keys::member_key(&self.prefix, self.config.coordinator_id);
        let value = serde_json::to_string(&MemberValue {
            id: self.config.coordinator_id,
            address: self.config.address.clone(),
            external_address: self.config.external_address.clone(),
        })
        .unwrap_or_default();
        let deadline = tokio::time::Instant::now() + patience;
        let lease =
            LeaseKeeper::grant(&self.client, self.config.lease_ttl, self.duties.token()).await?;
        loop {
            let create = Txn::new()
                .when([Compare::create_revision(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.as_str(),
                    value.as_str(),
                    Some(PutOptions::new().with_lease(lease.lease_id())),
                )])
                .or_else([TxnOp::get(key.as_str(), None)]);
            let answer = match bounded("register", client.txn(create)).await {
                Ok(answer) => answer,
                Err(e) => {
                    lease.revoke().await;
                    return Err(e.into());
                }
            };
            if answer.succeeded() {
                let lease_id = lease.lease_id();
                *self.lease.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::new(lease));
                tracing::info!(coordinator_id = self.config.coordinator_id, lease_id, %key, "coordinator registered in etcd");
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                lease.revoke().await;
                return Err(CoordinatorError::Config(format!(
                    "coordinator id {} is registered by another live coordinator ({key}); \
                     it did not go away within {patience:?}",
                    self.config.coordinator_id
                )));
            }
            tracing::warn!(coordinator_id = self.config.coordinator_id, %key, "coordinator id is registered; waiting for its lease to lapse");
            let Some(seen_at) = holder_revision(&answer) else {
                continue; // it went between the compare and the read: try again
            };
            if let Err(e) = until_deleted(&mut client, &key, seen_at, deadline).await {
                tracing::debug!(error = %e, "cannot watch the member key; reading it again shortly");
                tokio::time::sleep_until(
                    deadline.min(tokio::time::Instant::now() + REQUEST_TIMEOUT),
                )
                .await;
            }
        }
    }

    /// etcd said the lease is gone: every claim went with it; register again under a
    /// new lease, retrying a third of a TTL apart until etcd answers.
    async fn register_after_expiry(&self, lease_id: i64) {
        tracing::error!(lease_id, "coordinator lease expired: registering again");
        self.lose_all("the coordinator's lease expired");
        let pause = (self.config.lease_ttl / 3).max(Duration::from_millis(100));
        let pauses = ConstantBuilder::new().with_delay(pause).without_max_times();
        let register = || self.register(self.config.lease_ttl * 2);
        // Not jittered: a third of a TTL apart, as the lease's patience was sized for.
        let registered = register
            .retry(pauses)
            .notify(|e, _| tracing::warn!(error = %e, "registering again failed; retrying"))
            .await;
        if let Err(e) = registered {
            // Only if the pauses ran out, which they do not.
            tracing::error!(error = %e, "gave up registering again");
        }
    }

    fn lose_all(&self, reason: &str) {
        if let Ok(mut state) = self.state.lock() {
            if !state.mine.is_empty() {
                tracing::error!(
                    partitions = state.mine.len(),
                    reason,
                    "giving up every transaction log partition"
                );
            }
            let mine: Vec<(i32, Mine)> = state.mine.drain().collect();
            for (partition, mine) in mine {
                mine.token.lose();
                state.owners.remove(&partition);
            }
        }
    }

    /// Reads the coordinators dir, drops claims that are no longer ours, and claims
    /// unowned partitions up to the fair share.
    async fn scan(
        &self,
        partitions: i32,
        claims: &mpsc::UnboundedSender<Claim>,
    ) -> Result<(), CoordinatorError> {
        let mut client = self.client.clone();
        let dir = keys::dir(&self.prefix);
        let answer = bounded(
            "scan coordinators",
            client.get(dir.as_str(), Some(GetOptions::new().with_prefix())),
        )
        .await?;
        let (snapshot, bad) = Snapshot::parse(
            &self.prefix,
            answer.kvs().iter().map(|kv| RawKv {
                key: kv.key(),
                value: kv.value(),
                lease: kv.lease(),
                mod_revision: kv.mod_revision(),
            }),
        );
        for key in bad {
            tracing::warn!(%key, "unreadable coordinator key");
        }
        let my_lease = self.lease_id();
        let plan = {
            let Ok(mut state) = self.state.lock() else {
                return Ok(());
            };
            state.owners = snapshot
                .owners
                .iter()
                .filter(|(p, o)| **p < partitions && o.value.coordinator_id >= 0)
                .map(|(p, o)| {
                    (
                        *p,
                        OwnerInfo {
                            coordinator_id: o.value.coordinator_id,
                            address: o.value.address.clone(),
                            external_address: o.value.external_address.clone(),
                            coordinator_epoch: o.value.coordinator_epoch,
                        },
                    )
                })
                .collect();
            let held: BTreeMap<i32, i64> = state
                .mine
                .iter()
                .map(|(p, mine)| (*p, mine.mod_revision))
                .collect();
            let plan = keys::plan_scan(
                &snapshot,
                partitions,
                self.config.coordinator_id,
                my_lease,
                &held,
            );
            for partition in &plan.lost {
                if let Some(mine) = state.mine.remove(partition) {
                    tracing::warn!(
                        partition,
                        "owner key of a claimed partition is gone; giving it up"
                    );
                    mine.token.lose();
                }
            }
            plan
        };
        let reclaims = plan.reclaim.iter().map(|p| (*p, snapshot.owners.get(p)));
        let claims_wanted = plan.claim.iter().map(|p| (*p, None));
        for (partition, ours) in reclaims.chain(claims_wanted) {
            if !self.holds_lease() {
                break;
            }
            let expected_owner = ours.map(|o| o.mod_revision);
            if expected_owner.is_some() {
                tracing::warn!(
                    partition,
                    "this coordinator's owner key outlived a claim it gave up; claiming it again"
                );
            }
            match self
                .try_claim(partition, &snapshot, my_lease, expected_owner)
                .await
            {
                Ok(Some(claim)) => {
                    if claims.send(claim).is_err() {
                        return Ok(());
                    }
                }
                Ok(None) => {
                    tracing::debug!(partition, "another coordinator claimed it first");
                }
                Err(e) => {
                    tracing::warn!(partition, error = %e, "claiming a transaction log partition failed");
                }
            }
        }
        Ok(())
    }

    /// Claims `partition` under the next coordinator epoch, by compare-and-swap: the
    /// owner key must be absent (`expected_owner` `None`) or still at the given
    /// `mod_revision` (our own key, claimed again), and the epoch key unchanged.
    async fn try_claim(
        &self,
        partition: i32,
        snapshot: &Snapshot,
        lease: i64,
        expected_owner: Option<i64>,
    ) -> Result<Option<Claim>, CoordinatorError> {
        let (previous_epoch, writer_producer_id, epoch_revision) =
            match snapshot.epochs.get(&partition) {
                Some((value, revision)) => {
                    (value.coordinator_epoch, value.writer_producer_id, *revision)
                }
                // The first claim ever: the writer's producer id comes from the store.
                None => (0, self.pids.next_producer_id().await?, 0),
            };
        let coordinator_epoch = previous_epoch.saturating_add(1);
        if coordinator_epoch > i32::from(i16::MAX) {
            return Err(CoordinatorError::EpochExhausted(coordinator_epoch));
        }
        let owner_key = keys::owner_key(&self.prefix, partition);
        let epoch_key = keys::epoch_key(&self.prefix, partition);
        let owner = serde_json::to_string(&OwnerValue {
            coordinator_id: self.config.coordinator_id,
            address: self.config.address.clone(),
            external_address: self.config.external_address.clone(),
            coordinator_epoch,
        })
        .unwrap_or_default();
        let epoch = serde_json::to_string(&EpochValue {
            coordinator_epoch,
            writer_producer_id,
        })
        .unwrap_or_default();
        let owner_unchanged = match expected_owner {
            None => Compare::create_revision(owner_key.as_str(), CompareOp::Equal, 0),
            Some(revision) => Compare::mod_revision(owner_key.as_str(), CompareOp::Equal, revision),
        };
        let claim = Txn::new()
            .when([
                owner_unchanged,
                Compare::mod_revision(epoch_key.as_str(), CompareOp::Equal, epoch_revision),
            ])
            .and_then([
                TxnOp::put(
                    owner_key.as_str(),
                    owner,
                    Some(PutOptions::new().with_lease(lease)),
                ),
                TxnOp::put(epoch_key.as_str(), epoch, None),
            ]);
        let mut client = self.client.clone();
        let answer = bounded("claim", client.txn(claim)).await?;
        if !answer.succeeded() {
            return Ok(None);
        }
        let mod_revision = answer.header().map_or(0, |h| h.revision());
        let token = OwnershipToken::new();
        if let Ok(mut state) = self.state.lock() {
            state.mine.insert(
                partition,
                Mine {
                    token: token.clone(),
                    mod_revision,
                    coordinator_epoch,
                },
            );
            state.owners.insert(
                partition,
                OwnerInfo {
                    coordinator_id: self.config.coordinator_id,
                    address: self.config.address.clone(),
                    external_address: self.config.external_address.clone(),
                    coordinator_epoch,
                },
            );
        }
        tracing::info!(
            partition,
            coordinator_epoch,
            writer_producer_id,
            "claimed a transaction log partition"
        );
        Ok(Some(Claim {
            partition,
            coordinator_epoch,
            writer_producer_id,
            token,
        }))
    }
}

impl Ownership for EtcdOwnership {
    fn run(
        self: Arc<Self>,
        partitions: i32,
        claims: mpsc::UnboundedSender<Claim>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let scan_every = (self.config.lease_ttl / 4)
                .clamp(Duration::from_millis(100), Duration::from_secs(1));
            let mut tick = tokio::time::interval(LEASE_CHECK);
            let mut next_scan = tokio::time::Instant::now();
            let mut scan_failures = LogLimit::for_repeated_failures();
            loop {
                tick.tick().await;
                if !self.holds_lease() {
                    self.lose_all("the coordinator's lease may have lapsed");
                    continue;
                }
                if tokio::time::Instant::now() < next_scan {
                    continue;
                }
                next_scan = tokio::time::Instant::now() + scan_every;
                if let Err(e) = self.scan(partitions, &claims).await {
                    warn_limited!(scan_failures, error = %e, "scanning coordinator ownership failed");
                }
                if claims.is_closed() {
                    return;
                }
            }
        })
    }

    fn owner_of(&self, partition: i32) -> Option<OwnerInfo> {
        self.state.lock().ok()?.owners.get(&partition).cloned()
    }

    fn holds_lease(&self) -> bool {
        self.lease().is_some_and(|lease| lease.holds())
    }

    fn release(&self, partition: i32, coordinator_epoch: i32) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let mine =
                self.state
                    .lock()
                    .ok()
                    .and_then(|mut state| match state.mine.get(&partition) {
                        Some(mine) if mine.coordinator_epoch == coordinator_epoch => {
                            state.mine.remove(&partition)
                        }
                        _ => None,
                    });
            let Some(mine) = mine else {
                return;
            };
            mine.token.lose();
            let key = keys::owner_key(&self.prefix, partition);
            let delete = Txn::new()
                .when([
                    Compare::mod_revision(key.as_str(), CompareOp::Equal, mine.mod_revision),
                    Compare::lease(key.as_str(), CompareOp::Equal, self.lease_id()),
                ])
                .and_then([TxnOp::delete(key.as_str(), None)]);
            let mut client = self.client.clone();
            match bounded("release", client.txn(delete)).await {
                Ok(_) => tracing::warn!(partition, "released a transaction log partition"),
                Err(e) => {
                    tracing::warn!(partition, error = %e, "could not release a partition; it goes with the lease")
                }
            }
        })
    }

    fn leave(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // Nothing registers again from here on.
            self.duties.stop().await;
            if let Ok(mut state) = self.state.lock() {
                for (_, mine) in state.mine.drain() {
                    mine.token.lose();
                }
            }
            let lease = self
                .lease
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
            if let Some(lease) = lease {
                lease.revoke().await;
            }
        })
    }
}

impl Drop for EtcdOwnership {
    fn drop(&mut self) {
        // The duties return at their next wait; the lease then lapses by itself.
        self.duties.token().cancel();
    }
}

/// The member key's mod_revision from a failed create's read.
fn holder_revision(answer: &etcd_client::TxnResponse) -> Option<i64> {
    answer
        .op_responses()
        .iter()
        .find_map(|response| match response {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.mod_revision()),
            _ => None,
        })
}

/// Registers again whenever the lease keeper reports the lease gone (the claims went
/// with it and are lost by the lease clock).
async fn stay_registered(ownership: Weak<EtcdOwnership>) {
    loop {
        let Some(lease) = ownership.upgrade().and_then(|o| o.lease()) else {
            return;
        };
        lease.lost().cancelled().await;
        let lease_id = lease.lease_id();
        drop(lease);
        let Some(this) = ownership.upgrade() else {
            return;
        };
        this.register_after_expiry(lease_id).await;
    }
}
