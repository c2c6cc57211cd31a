//! The cluster backend: the latest block lives under one etcd key
//! (`{prefix}/latest_producer_id_block`, default `/idem/latest_producer_id_block`) holding
//! Kafka's JSON, and is advanced exactly as Kafka's `getNewProducerIdBlock` advances its
//! znode: read the key with its `mod_revision`, compute the next block, write it in a
//! transaction that succeeds only if the key is unchanged (`mod_revision` equal, or
//! `create_revision == 0` while the key does not exist yet), and on a lost race pause
//! briefly (jittered), read again and retry, for at most
//! [`EtcdPidStore::ALLOCATION_DEADLINE`] (plus the request in flight then).
//!
//! Every request is bounded by [`EtcdPidStore::REQUEST_TIMEOUT`], so a caller learns
//! [`PidStoreError::Unavailable`] within seconds when etcd is down or hung; the client
//! reconnects by itself when etcd comes back, and replaces a connection on which a request
//! timed out, so a member that went silent without closing it is not waited on forever.
//!
//! etcd commits a transaction to a quorum's disk before it answers, so a block handed out
//! is durable: neither a crash of this process nor of an etcd member can hand it out again.
//! A transaction whose answer is lost (etcd killed, request timed out) reports
//! [`PidStoreError::Unavailable`]; if it did commit, its block is simply never used.

use std::future::Future;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use backon::Retryable;
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, KvClient, Txn, TxnOp};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::block_key_access::BlockKeyAccess;
use crate::{BoxFuture, PidBlockStore, PidStoreError, ProducerIdBlock};

/// The last path segment of the block key, as Kafka's znode `/latest_producer_id_block`.
const BLOCK_KEY_NAME: &str = "latest_producer_id_block";

/// What [`EtcdPidStore::read_latest`] saw under the block key: the compare-and-swap of
/// [`EtcdPidStore::try_claim`] succeeds only if the key is still exactly this.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Observed {
    /// The key does not exist: no block was ever handed out.
    Absent,
    /// The key holds `block`, last written at etcd revision `mod_revision`.
    Present {
        block: ProducerIdBlock,
        mod_revision: i64,
    },
}

impl Observed {
    /// The latest block handed out, if any.
    pub fn latest(&self) -> Option<&ProducerIdBlock> {
        match self {
            Observed::Absent => None,
            Observed::Present { block, .. } => Some(block),
        }
    }

    /// The key's `mod_revision`; 0 when it does not exist.
    pub fn mod_revision(&self) -> i64 {
        match self {
            Observed::Absent => 0,
            Observed::Present { mod_revision, .. } => *mod_revision,
        }
    }
}

/// A [`PidBlockStore`] on etcd. Cheap to clone; clones share one connection. Any number
/// of stores, in any number of processes, may allocate from the same key at once.
#[derive(Clone)]
pub struct EtcdPidStore {
    connection: Arc<Mutex<Connection>>,
    key: String,
    endpoints: Arc<[String]>,
}

/// The current etcd client and how many times it was replaced.
struct Connection {
    kv: KvClient,
    generation: u64,
}

impl std::fmt::Debug for EtcdPidStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdPidStore")
            .field("endpoints", &self.endpoints)
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl EtcdPidStore {
    /// The prefix of the block key unless configured otherwise.
    pub const DEFAULT_PREFIX: &'static str = "/idem";
    /// Longest wait to open a TCP connection to an etcd member.
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
    /// Longest wait for one etcd request (read or transaction), connecting included.
    pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
    /// Longest time [`next_block`](PidBlockStore::next_block) keeps retrying lost races
    /// before it reports [`PidStoreError::Unavailable`].
    pub const ALLOCATION_DEADLINE: Duration = Duration::from_secs(10);
    /// Shortest and longest pause after a lost race (jittered, growing with each loss).
    const BACKOFF_MIN: Duration = Duration::from_millis(5);
    const BACKOFF_MAX: Duration = Duration::from_millis(50);

    /// A store on the etcd cluster at `endpoints` (e.g. `["http://127.0.0.1:2379"]`; an
    /// entry may also hold several comma-separated endpoints, and `host:port` means
    /// `http://host:port`) whose block key is `{prefix}/latest_producer_id_block` (a
    /// trailing `/` of `prefix` is ignored).
    ///
    /// Connects lazily: this succeeds while etcd is down, later calls then report
    /// [`PidStoreError::Unavailable`] until it is back, and the store reconnects by itself
    /// whenever etcd restarts. No endpoint at all, or a malformed one, is
    /// [`PidStoreError::Storage`] (a configuration error, not retriable).
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<Self, PidStoreError> {
        let endpoints: Arc<[String]> = endpoints
            .iter()
            .flat_map(|entry| entry.split(','))
            .map(str::trim)
            .filter(|endpoint| !endpoint.is_empty())
            .map(String::from)
            .collect();
        if endpoints.is_empty() {
            return Err(PidStoreError::Storage("no etcd endpoint given".into()));
        }
        let kv = Self::new_client(&endpoints).await?;
        let prefix = prefix.trim_end_matches('/');
        Ok(EtcdPidStore {
            connection: Arc::new(Mutex::new(Connection { kv, generation: 0 })),
            key: format!("{prefix}/{BLOCK_KEY_NAME}"),
            endpoints,
        })
    }

    /// A lazily connecting client: no request is made until the first call.
    async fn new_client(endpoints: &[String]) -> Result<KvClient, PidStoreError> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Self::CONNECT_TIMEOUT)
            .with_timeout(Self::REQUEST_TIMEOUT);
        let client = with_timeout(
            Self::REQUEST_TIMEOUT,
            "connect",
            Client::connect(endpoints, Some(options)),
        )
        .await
        .map_err(|e| match e {
            CallError::Etcd(
                e @ (etcd_client::Error::InvalidArgs(_) | etcd_client::Error::InvalidUri(_)),
            ) => PidStoreError::Storage(format!("etcd endpoints {endpoints:?}: {e}")),
            CallError::Etcd(e) => unavailable("connect", e),
            CallError::Timeout(e) => e,
        })?;
        Ok(client.kv_client())
    }

    fn current(&self) -> (KvClient, u64) {
        let connection = self
            .connection
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (connection.kv.clone(), connection.generation)
    }

    /// Runs one etcd request; on a timeout, replaces the client (for every clone of this
    /// store) so the next request opens a new connection: a connection whose peer stopped
    /// answering without closing it (a hung member, a network partition) would otherwise
    /// be reused until TCP gives up on it, many minutes later.
    async fn call<T, F, Fut>(&self, what: &str, request: F) -> Result<T, PidStoreError>
    where
        F: FnOnce(KvClient) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let (kv, generation) = self.current();
        let result = with_timeout(Self::REQUEST_TIMEOUT, what, request(kv)).await;
        let timed_out = match &result {
            Err(CallError::Timeout(_)) => true,
            Err(CallError::Etcd(etcd_client::Error::GRpcStatus(status))) => {
                status.code() == tonic::Code::Cancelled
                    || status.code() == tonic::Code::DeadlineExceeded
            }
            _ => false,
        };
        if timed_out {
            self.reconnect(generation).await;
        }
        result.map_err(|e| e.into_unavailable(what))
    }

    async fn reconnect(&self, failed_generation: u64) {
        if self.current().1 != failed_generation {
            return; // another call already replaced that client
        }
        match Self::new_client(&self.endpoints).await {
            Ok(kv) => {
                let mut connection = self
                    .connection
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if connection.generation == failed_generation {
                    connection.kv = kv;
                    connection.generation += 1;
                    tracing::info!(endpoints = ?self.endpoints, "etcd request timed out; reconnecting");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot replace the etcd client"),
        }
    }

    /// The full etcd key of the latest block.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// Step one of an allocation, public for tests and tooling (e.g. to inject a stale
    /// compare-and-swap deterministically): the block key as it is now, with its
    /// `mod_revision`. A value that is not a block is [`PidStoreError::Corrupt`].
    pub async fn read_latest(&self) -> Result<Observed, PidStoreError> {
        let response = self
            .call("get", |mut kv| async move {
                kv.get(self.key.as_str(), None).await
            })
            .await?;
        observed_from(response.kvs().first())
    }

    /// Step two of an allocation, public for tests and tooling: writes the block after
    /// `observed` for `owner`, only if the key is still exactly as observed. `Ok(None)`
    /// means the race was lost (the key changed since) and nothing was written; past
    /// `i64::MAX` it is [`PidStoreError::Exhausted`] and nothing is written.
    /// [`next_block`](PidBlockStore::next_block) loops over these two steps.
    pub async fn try_claim(
        &self,
        owner: i32,
        observed: &Observed,
    ) -> Result<Option<ProducerIdBlock>, PidStoreError> {
        let next = ProducerIdBlock::next_after(observed.latest(), owner)?;
        let key = self.key.as_str();
        let unchanged = match observed {
            Observed::Absent => Compare::create_revision(key, CompareOp::Equal, 0),
            Observed::Present { mod_revision, .. } => {
                Compare::mod_revision(key, CompareOp::Equal, *mod_revision)
            }
        };
        let txn = Txn::new()
            .when([unchanged])
            .and_then([TxnOp::put(key, next.to_json(), None)]);
        let response = self
            .call("txn", |mut kv| async move { kv.txn(txn).await })
            .await?;
        Ok(response.succeeded().then_some(next))
    }

    /// Kafka's loop: read, claim the next block if the key is unchanged; on a lost race
    /// pause (jittered, growing), read afresh and try again, until the deadline. The read
    /// comes after the pause so that every attempt races with an observation one round
    /// trip old: a waiter that reused an observation from before its pause would lose to
    /// a busy allocator forever.
    async fn allocate(&self, owner: i32) -> Result<ProducerIdBlock, PidStoreError> {
        let deadline = Instant::now() + Self::ALLOCATION_DEADLINE;
        let lost = AtomicU32::new(0);
        let claim = || async {
            let observed = self.read_latest().await.map_err(Attempt::Failed)?;
            match self.try_claim(owner, &observed).await {
                Ok(Some(block)) => Ok(block),
                Ok(None) => {
                    lost.fetch_add(1, Ordering::Relaxed);
                    Err(Attempt::LostRace)
                }
                Err(e) => Err(Attempt::Failed(e)),
            }
        };
        let won = claim
            .retry(Jitter::new(Self::BACKOFF_MIN, Self::BACKOFF_MAX))
            .when(|attempt| matches!(attempt, Attempt::LostRace))
            .adjust(|_, pause| pause.filter(|pause| Instant::now() + *pause < deadline))
            .await;
        let lost = lost.into_inner();
        match won {
            Ok(block) => {
                if lost > 0 {
                    tracing::debug!(owner, lost, key = %self.key, "won a producer id block after lost races");
                }
                Ok(block)
            }
            Err(Attempt::LostRace) => Err(PidStoreError::Unavailable(format!(
                "lost {lost} races for the producer id block key {} within {:?}",
                self.key,
                Self::ALLOCATION_DEADLINE
            ))),
            Err(Attempt::Failed(e)) => Err(e),
        }
    }
}

/// How one read-and-claim of [`EtcdPidStore::allocate`] failed: only a lost race is
/// retried; an etcd failure is the caller's to see at once.
enum Attempt {
    LostRace,
    Failed(PidStoreError),
}

impl PidBlockStore for EtcdPidStore {
    fn next_block(&self, owner: i32) -> BoxFuture<'_, Result<ProducerIdBlock, PidStoreError>> {
        Box::pin(async move {
            let block = self.allocate(owner).await?;
            tracing::info!(
                owner,
                block_start = block.block_start,
                block_end = block.block_end,
                key = %self.key,
                "leased producer id block from etcd"
            );
            Ok(block)
        })
    }
}

impl BlockKeyAccess for EtcdPidStore {
    fn write_raw(&self, value: Vec<u8>) -> BoxFuture<'_, Result<(), PidStoreError>> {
        Box::pin(async move {
            self.call("put", |mut kv| async move {
                kv.put(self.key.as_str(), value, None).await
            })
            .await?;
            Ok(())
        })
    }

    fn read_raw(&self) -> BoxFuture<'_, Result<Option<Vec<u8>>, PidStoreError>> {
        Box::pin(async move {
            let response = self
                .call("get", |mut kv| async move {
                    kv.get(self.key.as_str(), None).await
                })
                .await?;
            Ok(response.kvs().first().map(|kv| kv.value().to_vec()))
        })
    }
}

fn observed_from(kv: Option<&etcd_client::KeyValue>) -> Result<Observed, PidStoreError> {
    match kv {
        None => Ok(Observed::Absent),
        Some(kv) => Ok(Observed::Present {
            block: ProducerIdBlock::from_json(kv.value())?,
            mod_revision: kv.mod_revision(),
        }),
    }
}

/// Why an etcd call failed: etcd said so, or it did not answer in time.
enum CallError {
    Etcd(etcd_client::Error),
    Timeout(PidStoreError),
}

impl CallError {
    fn into_unavailable(self, what: &str) -> PidStoreError {
        match self {
            CallError::Etcd(e) => unavailable(what, e),
            CallError::Timeout(e) => e,
        }
    }
}

/// Bounds an etcd call by `limit` on top of the client's own timeouts: a request queued
/// while no connection can be made would otherwise wait for one indefinitely.
async fn with_timeout<T>(
    limit: Duration,
    what: &str,
    call: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(CallError::Etcd(e)),
        Err(_) => Err(CallError::Timeout(PidStoreError::Unavailable(format!(
            "etcd {what} did not answer within {limit:?}"
        )))),
    }
}

fn unavailable(what: &str, e: etcd_client::Error) -> PidStoreError {
    PidStoreError::Unavailable(format!("etcd {what} failed: {e}"))
}

/// Jittered, growing pauses between retries of a lost race, so racing allocators spread
/// out instead of colliding again in lock step. Seeded from the OS, so concurrent
/// processes do not share a sequence (`StdRng`, not `ThreadRng`: it is held across an
/// await and must be `Send`).
struct Jitter {
    rng: StdRng,
    min: Duration,
    max: Duration,
    /// Pauses handed out so far: races lost.
    lost: u32,
}

impl Jitter {
    fn new(min: Duration, max: Duration) -> Self {
        Jitter {
            rng: StdRng::from_entropy(),
            min,
            max,
            lost: 0,
        }
    }

    /// Uniform in `[min, cap]`, where `cap` doubles from `min` with each lost race up to `max`.
    fn backoff(&mut self, lost: u32, min: Duration, max: Duration) -> Duration {
        let min_us = u64::try_from(min.as_micros()).unwrap_or(u64::MAX);
        let max_us = u64::try_from(max.as_micros()).unwrap_or(u64::MAX);
        let cap = min_us.saturating_mul(1u64 << lost.min(16)).min(max_us);
        let spread = cap.saturating_sub(min_us) + 1;
        Duration::from_micros(min_us + self.rng.gen_range(0..spread))
    }
}

/// The pauses backon takes between attempts: one per lost race, without end (the
/// allocation's deadline ends them).
impl Iterator for Jitter {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        let pause = self.backoff(self.lost, self.min, self.max);
        self.lost = self.lost.saturating_add(1);
        Some(pause)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_within_bounds_and_grows() {
        let (min, max) = (Duration::from_millis(5), Duration::from_millis(50));
        let mut jitter = Jitter::new(min, max);
        for lost in 0..40 {
            let pause = jitter.backoff(lost, min, max);
            assert!(
                pause >= min && pause <= max,
                "{pause:?} after {lost} losses"
            );
        }
        let first: Vec<_> = (0..50).map(|_| jitter.backoff(0, min, max)).collect();
        assert!(first.iter().all(|p| *p <= Duration::from_millis(5)));
        let late: Vec<_> = (0..50).map(|_| jitter.backoff(10, min, max)).collect();
        assert!(late.iter().any(|p| *p > Duration::from_millis(10)));
    }

    #[test]
    fn observed_reports_the_latest_block_and_revision() {
        assert_eq!(Observed::Absent.latest(), None);
        assert_eq!(Observed::Absent.mod_revision(), 0);
        let block = ProducerIdBlock::first(1);
        let present = Observed::Present {
            block,
            mod_revision: 7,
        };
        assert_eq!(present.latest(), Some(&block));
        assert_eq!(present.mod_revision(), 7);
    }

    #[tokio::test]
    async fn no_endpoint_is_a_configuration_error() {
        let error = EtcdPidStore::connect(&[], EtcdPidStore::DEFAULT_PREFIX)
            .await
            .expect_err("no endpoints");
        assert!(matches!(error, PidStoreError::Storage(_)), "{error:?}");
    }

    #[tokio::test]
    async fn a_malformed_endpoint_is_a_configuration_error() {
        let endpoints = ["http://bad host:2379".to_string()];
        let error = EtcdPidStore::connect(&endpoints, EtcdPidStore::DEFAULT_PREFIX)
            .await
            .expect_err("malformed endpoint");
        assert!(matches!(error, PidStoreError::Storage(_)), "{error:?}");
    }

    #[tokio::test]
    async fn comma_separated_endpoints_are_split() {
        let endpoints = [
            "http://127.0.0.1:1, 127.0.0.1:2".to_string(),
            "http://127.0.0.1:3".to_string(),
            " , ".to_string(),
        ];
        let store = EtcdPidStore::connect(&endpoints, EtcdPidStore::DEFAULT_PREFIX)
            .await
            .expect("connects lazily");
        assert_eq!(
            &store.endpoints[..],
            ["http://127.0.0.1:1", "127.0.0.1:2", "http://127.0.0.1:3"]
        );
        let none = [" , ".to_string()];
        assert!(matches!(
            EtcdPidStore::connect(&none, "/idem").await,
            Err(PidStoreError::Storage(_))
        ));
    }

    #[tokio::test]
    async fn the_key_is_prefix_slash_latest_producer_id_block() {
        let endpoints = ["http://127.0.0.1:1".to_string()];
        for (prefix, key) in [
            ("/idem", "/idem/latest_producer_id_block"),
            ("/idem/", "/idem/latest_producer_id_block"),
            ("", "/latest_producer_id_block"),
        ] {
            let store = EtcdPidStore::connect(&endpoints, prefix)
                .await
                .expect("connects lazily");
            assert_eq!(store.key(), key);
        }
    }
}
