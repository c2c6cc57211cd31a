//! Assembles a running coordinator: the listener, the producer-id source, the
//! ownership backend, the core, and the gRPC service (with the standard health and
//! reflection services); background tasks create `__transaction_state`, follow
//! ownership and time transactions out. Shuts all of it down on request, giving its
//! partitions up at once.

use idem_proto::transport::MAX_MESSAGE_BYTES;
use idem_proto::txn::{OFFSETS_TOPIC, TXN_LOG_TOPIC};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use backon::Retryable;
use futures::StreamExt;
use idem_client::credentials::Credentials;
use idem_client::{Connection, Isolation, OffsetSpec, TlsConfig};
use idem_pidstore::{EtcdPidStore, PidBlockStore, ProducerIdManager};
use idem_proto::v1::group_coordinator_server::GroupCoordinatorServer;
use idem_proto::v1::txn_coordinator_server::TxnCoordinatorServer;
use idem_runtime::acl::{Authorizer, EtcdAclStore};
use idem_runtime::grpc_server::{GrpcListener, GrpcSettings};
use idem_runtime::health::Health;
use idem_runtime::listeners::Advertised;
use idem_runtime::metrics_endpoint;
use idem_runtime::shutdown::{CancellationToken, Duties};
use idem_runtime::stop::serve_then_stop;
use idem_runtime::tls::{LoadedTls, ServerTls};
use tokio::sync::mpsc;
use tonic::server::NamedService;
use tonic::service::Routes;

use crate::config::{CoordinatorConfig, Mode};
use crate::core::{Coordinator, CoreSettings};
use crate::error::CoordinatorError;
use crate::group::lag;
use crate::group::serve::{GroupSettings, Groups};
use crate::group_service::GroupCoordinatorService;
use crate::log::topic::ensure_topic;
use crate::ownership::etcd::{EtcdOwnership, EtcdOwnershipConfig};
use crate::ownership::solo::SoloOwnership;
use crate::ownership::{Claim, Ownership};
use crate::producer_ids::{BrokerProducerIds, SharedProducerIds};
use crate::retry;
use crate::service::TxnCoordinatorService;
use crate::topic_catalog::etcd::EtcdTopicCatalog;
use crate::topic_catalog::solo::SoloTopicCatalog;
use crate::topic_catalog::TopicCatalog;
use crate::txn::decide::TopicPartition;

/// How often health looks at the slices and the lease: the lease is a clock compared
/// against the TTL, which no event announces.
const HEALTH_CHECK: Duration = Duration::from_millis(50);
/// Longest one broker RPC may take.
const BROKER_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How old the coordinator's view of a topic may grow before a refresh: a subscribed
/// topic that gains partitions reaches its groups' target assignments within this plus
/// a heartbeat (the SDK's default, 5 minutes, would leave new partitions unread that
/// long). One metadata request per this period is the cost.
const METADATA_MAX_AGE: Duration = Duration::from_secs(5);

/// A coordinator bound to its address, ready to serve.
pub struct BoundCoordinator {
    config: CoordinatorConfig,
    listener: GrpcListener,
    core: Arc<Coordinator>,
    groups: Arc<Groups>,
    ownership: Arc<dyn Ownership>,
    health: Health,
    /// `--authorizer`, kept current from the ACLs in etcd (or `idem dev`'s store).
    authorizer: Authorizer,
    shutdown: CancellationToken,
}

impl BoundCoordinator {
    /// Binds the listen address and joins the cluster (etcd) or opens the solo state.
    /// `pid_store` is where producer ids come from when embedding (the broker's store
    /// in `idem dev`); without it, etcd mode uses the etcd store and solo mode asks the
    /// broker for ids. Brokers are dialled lazily: they need not be up yet. The
    /// coordinator stops when `shutdown` is cancelled.
    pub async fn bind(
        config: CoordinatorConfig,
        pid_store: Option<Arc<dyn PidBlockStore>>,
        shutdown: CancellationToken,
    ) -> Result<Self, CoordinatorError> {
        let mode = config.mode()?;
        // Loaded again here (mode() checked it): the files a start uses are read once.
        let tls = config.tls()?;
        if let Some(addr) = config.metrics_listen {
            metrics_endpoint::serve(addr).map_err(|e| CoordinatorError::Metrics(e.to_string()))?;
        }
        let auth_error = |e: &dyn std::fmt::Display| CoordinatorError::Auth(e.to_string());
        let (authn, authorizer) = config.auth.start(&shutdown).map_err(|e| auth_error(&e))?;
        let credentials = config
            .auth
            .own_token()
            .map_err(|e| auth_error(&e))?
            .map_or(Ok(Credentials::none()), |token| Credentials::bearer(&token))
            .map_err(|e| auth_error(&e))?;
        if !authorizer.is_open() {
            // Before the first RPC is served: the stored ACLs, then their changes.
            match (&mode, &config.auth.dev) {
                (Mode::Etcd, _) => {
                    EtcdAclStore::connect(&config.etcd_endpoints, &config.etcd_prefix)
                        .await
                        .map_err(|e| auth_error(&e))?
                        .load_and_watch(&authorizer, shutdown.child_token())
                        .await
                        .map_err(|e| auth_error(&e))?;
                }
                (Mode::Solo(_), Some(dev)) => {
                    dev.acls.feed(&authorizer).map_err(|e| auth_error(&e))?;
                }
                (Mode::Solo(_), None) => {
                    return Err(CoordinatorError::Auth(
                        "--authorizer acl needs --etcd: ACLs are stored there (or idem dev, which keeps them in its data dir)".to_string(),
                    ));
                }
            }
        }
        let server_tls = tls
            .as_ref()
            .map(|tls| ServerTls::new(config.tls_files(), tls.server.clone()));
        let listener = GrpcListener::bind(config.listen)
            .await?
            .with_external(config.external_listen)
            .await?
            .with_authentication(authn)
            .with_tls(server_tls.clone());
        let Advertised {
            internal: address,
            external: external_address,
        } = Advertised::resolve(
            listener.bound(),
            config.advertise.as_deref(),
            config.external_advertise.as_deref(),
        );
        // The brokers are dialled with this coordinator's own certificate and CA.
        let broker_tls = tls.as_ref().map(peer_tls);
        // A SIGHUP that rotates the listeners' certificate rotates this one too.
        if let (Some(server_tls), Some(broker_tls)) = (&server_tls, &broker_tls) {
            let broker_tls = broker_tls.clone();
            server_tls.on_reload(move |loaded| broker_tls.replace(&peer_tls(loaded)));
        }
        let conn = Connection::connect_lazy_with(
            &config.bootstrap,
            BROKER_REQUEST_TIMEOUT,
            credentials,
            broker_tls,
        )?
        .with_metadata_max_age(METADATA_MAX_AGE);
        let pids: SharedProducerIds = match (pid_store, &mode) {
            (Some(store), _) => Arc::new(
                ProducerIdManager::new(store, config.coordinator_id)
                    .with_prefetch(config.pid_prefetch),
            ),
            (None, Mode::Etcd) => {
                let store = EtcdPidStore::connect(&config.etcd_endpoints, &config.etcd_prefix)
                    .await
                    .map_err(|e| CoordinatorError::ProducerIds(e.to_string()))?;
                Arc::new(
                    ProducerIdManager::new(Arc::new(store), config.coordinator_id)
                        .with_prefetch(config.pid_prefetch),
                )
            }
            (None, Mode::Solo(_)) => Arc::new(BrokerProducerIds(conn.clone())),
        };
        let ownership: Arc<dyn Ownership> = match &mode {
            Mode::Etcd => {
                EtcdOwnership::join(
                    EtcdOwnershipConfig {
                        endpoints: config.etcd_endpoints.clone(),
                        prefix: config.etcd_prefix.clone(),
                        coordinator_id: config.coordinator_id,
                        address: address.clone(),
                        external_address,
                        lease_ttl: Duration::from_millis(config.lease_ttl_ms),
                    },
                    pids.clone(),
                    &shutdown,
                )
                .await?
            }
            Mode::Solo(dir) => Arc::new(SoloOwnership::open(
                config.coordinator_id,
                address.clone(),
                dir,
                pids.clone(),
            )?),
        };
        let catalog: Arc<dyn TopicCatalog> = match &mode {
            Mode::Etcd => Arc::new(
                EtcdTopicCatalog::connect(&config.etcd_endpoints, &config.etcd_prefix).await?,
            ),
            Mode::Solo(_) => Arc::new(SoloTopicCatalog::new(conn.clone())),
        };
        let core = Coordinator::new(
            CoreSettings {
                coordinator_id: config.coordinator_id,
                max_transaction_timeout_ms: config.max_transaction_timeout_ms,
                transactional_id_expiration_ms: config.transactional_id_expiration_ms,
            },
            conn.clone(),
            catalog,
            pids,
            ownership.clone(),
        );
        let groups = Groups::new(
            GroupSettings {
                coordinator_id: config.coordinator_id,
                session_timeout: Duration::from_millis(config.group_session_timeout_ms),
                offsets_retention: Duration::from_millis(config.group_offsets_retention_ms),
            },
            conn,
            ownership.clone(),
        );
        Ok(BoundCoordinator {
            config,
            listener,
            core,
            groups,
            ownership,
            health: Health::new(),
            authorizer,
            shutdown,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.listener.local_addr()
    }

    /// What this coordinator publishes about its readiness (health reads the same).
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Serves until the shutdown token is cancelled, then stops in order (see
    /// [`serve_then_stop`]), giving every partition up at once.
    pub async fn serve(self) -> Result<(), CoordinatorError> {
        let BoundCoordinator {
            config,
            listener,
            core,
            groups,
            ownership,
            health,
            authorizer,
            shutdown,
        } = self;
        let local_addr = listener.local_addr();
        let service = TxnCoordinatorService::new(core.clone())
            .with_listeners(listener.bound())
            .with_authorizer(authorizer.clone());
        let service =
            TxnCoordinatorServer::new(service).max_encoding_message_size(MAX_MESSAGE_BYTES);
        let group_service = GroupCoordinatorServer::new(
            GroupCoordinatorService::new(groups.clone()).with_authorizer(authorizer),
        )
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let server = listener.serve(
            Routes::new(service).add_service(group_service),
            TxnCoordinatorServer::<TxnCoordinatorService>::NAME,
            &health,
            GrpcSettings {
                connections: config.connections.limits(),
                max_in_flight_per_connection: config.connections.max_in_flight_per_connection,
                ..GrpcSettings::default()
            },
            shutdown.clone(),
        )?;
        let duties = Duties::under(&shutdown);
        duties.spawn(
            "follow ownership",
            follow_ownership(
                core.clone(),
                groups.clone(),
                ownership.clone(),
                config.txn_log_partitions,
            ),
        );
        duties.spawn(
            "expire group sessions",
            expire_group_sessions(
                groups.clone(),
                Duration::from_millis(config.group_session_timeout_ms),
            ),
        );
        duties.spawn(
            "expire group offsets",
            expire_group_offsets(
                groups.clone(),
                Duration::from_millis(config.group_offsets_retention_check_interval_ms),
            ),
        );
        duties.spawn(
            "time transactions out",
            time_out_transactions(
                core.clone(),
                Duration::from_millis(config.txn_check_interval_ms),
            ),
        );
        duties.spawn(
            "report metrics",
            report_metrics(core.clone(), groups.clone()),
        );
        if config.metrics_listen.is_some() {
            duties.spawn(
                "report consumer lag",
                report_group_lag(
                    groups.clone(),
                    core.connection().clone(),
                    Duration::from_millis(config.group_lag_interval_ms),
                ),
            );
        }
        duties.spawn(
            "report health",
            report_health(core.clone(), groups.clone(), ownership, health),
        );
        tracing::info!(coordinator_id = config.coordinator_id, address = %local_addr, bootstrap = %config.bootstrap, "coordinator serving");
        let leave = async {
            groups.leave();
            core.leave().await;
        };
        let served = serve_then_stop(server, &duties, async {}, leave).await;
        tracing::info!(
            coordinator_id = config.coordinator_id,
            "coordinator stopped"
        );
        Ok(served?)
    }
}

/// SERVING while every slice this coordinator claimed is loaded (and it claimed one),
/// its groups included, and it holds its lease.
async fn report_health(
    core: Arc<Coordinator>,
    groups: Arc<Groups>,
    ownership: Arc<dyn Ownership>,
    health: Health,
) {
    let mut tick = tokio::time::interval(HEALTH_CHECK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        health.set_loaded(core.serves_every_claimed_slice() && groups.serves_every_claimed_slice());
        health.set_lease_held(ownership.holds_lease());
    }
}

/// How often the coordinator's gauges are recomputed.
const METRICS_EVERY: Duration = Duration::from_secs(1);

/// The coordinator's gauges (docs/operations.md): transactions by state and the age of
/// the oldest open one (what a stuck last stable offset traces back to), and groups.
async fn report_metrics(core: Arc<Coordinator>, groups: Arc<Groups>) {
    let mut tick = tokio::time::interval(METRICS_EVERY);
    loop {
        tick.tick().await;
        record_gauges(&core, &groups);
    }
}

fn record_gauges(core: &Coordinator, groups: &Groups) {
    let (tally, owned) = core.tally(idem_runtime::clock::now_ms());
    for (state, count) in tally.by_state {
        metrics::gauge!("idem_transactions", "state" => state).set(count as f64);
    }
    metrics::gauge!("idem_transaction_oldest_open_seconds")
        .set(tally.oldest_open_ms as f64 / 1000.0);
    metrics::gauge!("idem_txn_log_partitions_owned").set(owned as f64);
    metrics::gauge!("idem_groups").set(groups.count() as f64);
}

/// Most high watermarks asked for at once by the lag duty.
const LAG_QUERIES_IN_FLIGHT: usize = 16;

/// `idem_consumer_group_lag{group, topic}` for the groups this coordinator owns, every
/// `every`: their committed offsets beside the partitions' high watermarks, asked of the
/// leaders ([`lag`] decides what is reported). Runs only when metrics are served: it
/// costs one ListOffsets per committed partition a round.
async fn report_group_lag(groups: Arc<Groups>, conn: Connection, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let committed = groups.committed_offsets();
        let ends: HashMap<TopicPartition, i64> =
            futures::stream::iter(lag::partitions(&committed))
                .map(|tp| {
                    let conn = &conn;
                    async move {
                        let end = conn
                            .list_offset(
                                &tp.topic,
                                tp.partition,
                                OffsetSpec::Latest,
                                Isolation::ReadUncommitted,
                            )
                            .await;
                        match end {
                            Ok(end) => Some((tp, end)),
                            Err(error) => {
                                tracing::debug!(%error, topic = %tp.topic, partition = tp.partition, "no high watermark for the lag gauge this round");
                                None
                            }
                        }
                    }
                })
                .buffer_unordered(LAG_QUERIES_IN_FLIGHT)
                .filter_map(std::future::ready)
                .collect()
                .await;
        for ((group, topic), behind) in lag::by_group_and_topic(&committed, &ends) {
            metrics::gauge!("idem_consumer_group_lag", "group" => group, "topic" => topic)
                .set(behind as f64);
        }
    }
}

/// Creates (or finds) the transaction log and `__consumer_offsets`, then hands every
/// claim to the core and, when both topics have one partition count, to the groups.
async fn follow_ownership(
    core: Arc<Coordinator>,
    groups: Arc<Groups>,
    ownership: Arc<dyn Ownership>,
    partitions: i32,
) {
    let set_up = (|| {
        ensure_topic(
            core.connection(),
            TXN_LOG_TOPIC,
            partitions,
            core.coordinator_id(),
        )
    })
    .retry(retry::until_done())
    .notify(|e, _| {
        tracing::warn!(error = %e, "cannot set up the transaction log yet; retrying");
    })
    .await;
    // Retried without a limit: an error here is one backon gave up on, which it never
    // does; say so rather than run without a log.
    let partitions = match set_up {
        Ok(n) => n,
        Err(e) => {
            tracing::error!(error = %e, "gave up setting up the transaction log");
            return;
        }
    };
    core.set_partition_count(partitions);
    // Groups live in the same slices: their topic gets the transaction log's count, and
    // exists before any slice is claimed, so a claim covers both partitions.
    let offsets = (|| {
        ensure_topic(
            core.connection(),
            OFFSETS_TOPIC,
            partitions,
            core.coordinator_id(),
        )
    })
    .retry(retry::until_done())
    .notify(|e, _| {
        tracing::warn!(error = %e, "cannot set up {OFFSETS_TOPIC} yet; retrying");
    })
    .await;
    let serve_groups = matches!(offsets, Ok(n) if n == partitions);
    match offsets {
        Ok(n) if n == partitions => groups.set_partition_count(partitions),
        Ok(n) => tracing::error!(
            partitions,
            offsets_partitions = n,
            "{OFFSETS_TOPIC} has another partition count than {TXN_LOG_TOPIC}: consumer groups cannot be served"
        ),
        Err(e) => tracing::error!(error = %e, "gave up setting up {OFFSETS_TOPIC}"),
    }
    let (claims_tx, mut claims) = mpsc::unbounded_channel::<Claim>();
    let take_claims = async {
        while let Some(claim) = claims.recv().await {
            if serve_groups {
                groups.on_claim(claim.clone());
            }
            core.on_claim(claim);
        }
    };
    // Claims stop with the ownership run; both stop with this duty.
    tokio::join!(ownership.run(partitions, claims_tx), take_claims);
}

async fn time_out_transactions(core: Arc<Coordinator>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        core.tick();
    }
}

/// Removes group members whose session ended; checked four times per session timeout
/// (at most every second), so a member goes at most a quarter late.
async fn expire_group_sessions(groups: Arc<Groups>, session_timeout: Duration) {
    let every = (session_timeout / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        groups.expire_sessions().await;
    }
}

/// Tombstones the expired offsets of empty groups, and groups left with nothing, every
/// `every` (`--group-offsets-retention-check-interval-ms`): an offset goes at most one
/// interval after its retention.
async fn expire_group_offsets(groups: Arc<Groups>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        groups.expire_offsets().await;
    }
}

/// The SDK TLS this coordinator dials brokers with: its own certificate and CA.
fn peer_tls(loaded: &LoadedTls) -> TlsConfig {
    TlsConfig::new(loaded.ca_pem.clone())
        .with_client_identity(loaded.cert_pem.clone(), loaded.key_pem.clone())
}
