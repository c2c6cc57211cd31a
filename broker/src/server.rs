//! Assembles a running broker: opens the topics, the producer-id store, the gRPC
//! service (with the standard health and reflection services), and the background
//! tasks (producer expiry, timed flushes); shuts all of it down cleanly on request.

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use idem_proto::transport::MAX_MESSAGE_BYTES;
use idem_runtime::acl::{AclStore, Authorizer, EtcdAclStore};
use idem_runtime::authn::{NodeCredential, TokenFile};
use idem_runtime::config_error::ConfigError;
use idem_runtime::deferred::Deferred;
use idem_runtime::grpc_server::{GrpcListener, GrpcServerError, GrpcSettings, RunningServer};
use idem_runtime::health::Health;
use idem_runtime::listeners::{Advertised, BoundListeners};
use idem_runtime::log_limit::LogLimit;
use idem_runtime::metrics_endpoint::{self, MetricsError};
use idem_runtime::shutdown::{CancellationToken, Duties};
use idem_runtime::stop::serve_then_stop;
use idem_runtime::tls::{PeerTls, ServerTls};
use idem_runtime::warn_limited;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use idem_pidstore::{EtcdPidStore, PidBlockStore, ProducerIdManager, SledPidStore};
use idem_proto::v1::broker_server::BrokerServer;
use tonic::server::NamedService;
use tonic::service::Routes;

use crate::cluster::catalog::EtcdCatalog;
use crate::cluster::cluster_id::{self, ClusterIdError};
use crate::cluster::data_dir_id;
use crate::cluster::membership::{Membership, MembershipConfig, MembershipError, Registration};
use crate::config::{BrokerConfig, PidStoreKind};
use crate::error::BrokerError;
use crate::kafka;
use crate::log::{FlushPolicy, LogConfig};
use crate::partition::{now_ms, PartitionSettings};
use crate::partition_health::partition_health;
use crate::quota::Quotas;
use crate::service::BrokerService;
use crate::topics::{ClusterCatalog, TopicRegistry};

/// Why a broker could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error("producer id store: {0}")]
    PidStore(String),
    #[error(transparent)]
    Grpc(#[from] GrpcServerError),
    #[error("joining the cluster: {0}")]
    Membership(#[from] MembershipError),
    #[error("invalid configuration: {0}")]
    Config(#[from] ConfigError),
    #[error(transparent)]
    ClusterId(#[from] ClusterIdError),
    #[error(transparent)]
    Metrics(#[from] MetricsError),
    #[error("authentication: {0}")]
    Auth(String),
}

type BrokerGrpc = BrokerServer<BrokerService>;

/// A broker bound to its address with its logs loaded. Its gRPC server already
/// answers health (NOT_SERVING) and refuses broker RPCs as unavailable until
/// [`BoundBroker::serve`].
pub struct BoundBroker {
    config: BrokerConfig,
    bound: BoundListeners,
    /// What the broker publishes, registered in etcd and answered in Metadata.
    advertised: Advertised,
    topics: Arc<TopicRegistry>,
    producer_ids: Arc<ProducerIdManager>,
    /// `--quota-file`'s byte rates, followed.
    quotas: Option<Quotas>,
    membership: Option<Arc<Membership>>,
    service: Deferred<BrokerGrpc>,
    /// `--authorizer`, kept current from the ACLs in etcd (or `idem dev`'s store).
    authorizer: Authorizer,
    acl_store: Option<AclStore>,
    server: RunningServer,
    health: Health,
    duties: Duties,
    /// `--kafka-listen`, bound; served once the broker's RPCs are.
    kafka: Option<(tokio::net::TcpListener, SocketAddr)>,
    /// What the Kafka listener dials coordinators with: the node's credential and, when
    /// the cluster runs TLS, the peer TLS.
    credential: NodeCredential,
    peer_tls: Option<PeerTls>,
    /// What the Kafka listener accepts with: the gRPC listeners' TLS (one config, so a
    /// SIGHUP reload applies to both); `None` on a plaintext broker.
    server_tls: Option<ServerTls>,
    /// `--auth-token-file`, followed: what the Kafka listener's SASL checks.
    kafka_tokens: Option<TokenFile>,
}

impl BoundBroker {
    /// Binds the listen address (port 0 picks a free port), starts answering health,
    /// joins the cluster and loads the logs. The broker stops when `shutdown` is
    /// cancelled.
    pub async fn bind(
        config: BrokerConfig,
        shutdown: CancellationToken,
    ) -> Result<Self, ServerError> {
        config.validate()?;
        if let Some(addr) = config.metrics_listen {
            metrics_endpoint::serve(addr)?;
        }
        let settings = PartitionSettings {
            log: LogConfig {
                segment_bytes: config.segment_bytes,
                flush: config.flush,
                ..LogConfig::default()
            },
            max_batch_bytes: config.limits.max_batch_bytes,
            producer_id_expiration_ms: config.producer_id_expiration_ms,
            topic_defaults: config.topic_defaults(),
        };
        let store = open_pid_store(&config).await?;
        let producer_ids = Arc::new(
            ProducerIdManager::new(store, config.broker_id).with_prefetch(config.pid_prefetch),
        );
        let (authn, authorizer) = config
            .auth
            .start(&shutdown)
            .map_err(|e| ServerError::Auth(e.to_string()))?;
        let credential = config
            .auth
            .own_token()
            .map_err(|e| ServerError::Auth(e.to_string()))
            .and_then(|token| {
                NodeCredential::bearer(token.as_deref())
                    .map_err(|e| ServerError::Auth(e.to_string()))
            })?;
        if !authorizer.is_open() && config.etcd_endpoints.is_empty() && config.auth.dev.is_none() {
            return Err(ServerError::Auth(
                "--authorizer acl needs --etcd: ACLs are stored there (or idem dev, which keeps them in its data dir)".to_string(),
            ));
        }
        // Loaded again here (validate() checked it): the files a start uses are read once.
        let tls = config.tls()?;
        // What the listeners accept with and what followers dial leaders with: a SIGHUP
        // reloads both.
        let server_tls = tls
            .as_ref()
            .map(|tls| ServerTls::new(config.tls_files(), tls.server.clone()));
        let peer_tls = tls.as_ref().map(PeerTls::new);
        if let (Some(server_tls), Some(peer_tls)) = (&server_tls, &peer_tls) {
            let peer_tls = peer_tls.clone();
            server_tls.on_reload(move |loaded| peer_tls.replace(loaded));
        }
        // The Kafka listener's SASL checks the tokens the gRPC layer checks.
        let kafka_tokens = authn.tokens().cloned();
        let listener = GrpcListener::bind(config.listen)
            .await?
            .with_external(config.external_listen)
            .await?
            .with_authentication(authn)
            .with_tls(server_tls.clone());
        let bound = listener.bound();
        let advertised = Advertised::resolve(
            bound,
            config.advertise.as_deref(),
            config.external_advertise.as_deref(),
        );
        // Bound before joining the cluster: the registration names its address.
        let kafka = match config.kafka_listen {
            None => None,
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
                    ServerError::Config(ConfigError::new(
                        "--kafka-listen",
                        format!("cannot bind {addr}: {e}"),
                    ))
                })?;
                let bound = listener.local_addr().map_err(|e| {
                    ServerError::Config(ConfigError::new("--kafka-listen", e.to_string()))
                })?;
                Some((listener, bound))
            }
        };
        let kafka_advertised = kafka
            .as_ref()
            .map(|(_, bound)| kafka::advertised(*bound, config.kafka_advertise.as_deref()));
        let health = Health::new();
        let service = Deferred::new();
        // Stops the server already answering health if loading fails below.
        let stop_on_failure = shutdown.child_token();
        let server = listener.serve(
            Routes::new(service.clone()),
            BrokerGrpc::NAME,
            &health,
            GrpcSettings {
                connections: config.connections.limits(),
                max_in_flight_per_connection: config.connections.max_in_flight_per_connection,
                ..GrpcSettings::default()
            },
            stop_on_failure.clone(),
        )?;
        let failed = stop_on_failure.drop_guard();
        let membership = join_cluster(
            &config,
            &advertised,
            kafka_advertised.clone(),
            &shutdown,
            credential.clone(),
        )
        .await?;
        // Before the first RPC is served: the stored ACLs, then their changes.
        let acl_store = match &membership {
            None => match &config.auth.dev {
                None => None,
                Some(dev) => {
                    if !authorizer.is_open() {
                        dev.acls
                            .feed(&authorizer)
                            .map_err(|e| ServerError::Auth(e.to_string()))?;
                    }
                    Some(AclStore::Embedded(dev.acls.clone()))
                }
            },
            Some(_) => {
                let store = EtcdAclStore::connect(&config.etcd_endpoints, &config.etcd_prefix)
                    .await
                    .map_err(|e| ServerError::Auth(e.to_string()))?;
                if !authorizer.is_open() {
                    store
                        .load_and_watch(&authorizer, shutdown.child_token())
                        .await
                        .map_err(|e| ServerError::Auth(e.to_string()))?;
                }
                Some(AclStore::Etcd(Box::new(store)))
            }
        };
        let topics = match &membership {
            None => TopicRegistry::open(
                &config.data_dir,
                config.broker_id,
                settings,
                config.max_partitions_per_topic,
            )?,
            Some(membership) => {
                let catalog = EtcdCatalog::connect(&config.etcd_endpoints, &config.etcd_prefix)
                    .await
                    .map_err(|e| ServerError::Broker(BrokerError::Cluster(e.to_string())))?;
                let cluster = ClusterCatalog {
                    broker_id: config.broker_id,
                    catalog,
                    membership: membership.clone(),
                    peer_tls: peer_tls.clone(),
                };
                let registry = TopicRegistry::clustered(
                    &config.data_dir,
                    settings,
                    config.max_partitions_per_topic,
                    cluster,
                )?;
                registry.sync().await?;
                registry
            }
        };
        let quotas = config
            .quota_file
            .as_deref()
            .map(|path| Quotas::load(path, shutdown.child_token()))
            .transpose()
            .map_err(|e| ServerError::Config(ConfigError::new("--quota-file", e.to_string())))?;
        failed.disarm();
        Ok(BoundBroker {
            quotas,
            config,
            bound,
            advertised,
            topics: Arc::new(topics),
            producer_ids,
            membership,
            service,
            authorizer,
            acl_store,
            server,
            health,
            duties: Duties::under(&shutdown),
            kafka,
            credential,
            peer_tls,
            server_tls,
            kafka_tokens,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.bound.internal
    }

    /// The Kafka listener's bound address (`--kafka-listen`), if any.
    pub fn kafka_addr(&self) -> Option<SocketAddr> {
        self.kafka.as_ref().map(|(_, bound)| *bound)
    }

    /// What this broker publishes about its readiness (health reads the same).
    pub fn health(&self) -> &Health {
        &self.health
    }

    /// Names the single-node transaction coordinator (`--coordinator`) once its address
    /// is known, e.g. after `idem dev` bound both servers.
    pub fn with_coordinator(mut self, address: Option<String>) -> Self {
        self.config.coordinator = address;
        self
    }

    /// Serves until the shutdown token is cancelled, then stops in order (see
    /// [`serve_then_stop`]): flushes and snapshots every partition, leaves the cluster.
    pub async fn serve(self) -> Result<(), ServerError> {
        self.serve_announcing(|| {}).await
    }

    /// [`BoundBroker::serve`], calling `announce` once the broker's RPCs are served:
    /// from `bind` until then they answer UNAVAILABLE, so whoever is told the broker is
    /// up (a banner that scripts and tests wait for) must be told after this point.
    pub async fn serve_announcing(self, announce: impl FnOnce()) -> Result<(), ServerError> {
        let BoundBroker {
            config,
            bound,
            advertised,
            topics,
            producer_ids,
            quotas,
            membership,
            service,
            authorizer,
            acl_store,
            server,
            health,
            duties,
            kafka,
            credential,
            peer_tls,
            server_tls,
            kafka_tokens,
        } = self;
        let broker = BrokerService::new(
            config.broker_id,
            advertised.internal.clone(),
            topics.clone(),
            producer_ids,
            config.limits.max_fetch_bytes,
        )
        .with_listeners(bound, advertised.clone())
        .with_membership(membership.clone())
        .with_coordinator(config.coordinator.clone())
        .with_null_produce(config.null_produce)
        .with_producer_id_cap(config.max_new_producer_ids_per_minute)
        .with_quotas(quotas)
        .with_authorizer(authorizer)
        .with_acl_store(acl_store)
        .with_kafka_advertised(
            kafka
                .as_ref()
                .map(|(_, bound)| kafka::advertised(*bound, config.kafka_advertise.as_deref())),
        );
        let broker = Arc::new(broker);
        if config.coordinator.is_some() && membership.is_some() {
            tracing::warn!("--coordinator is ignored in a cluster: coordinators are found in etcd");
        }
        service.install(
            BrokerServer::from_arc(broker.clone())
                .max_decoding_message_size(config.limits.max_request_bytes)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        );
        // Caught up or not from the start: a restarted broker out of some ISR must never
        // report caught up for the moment before the duty below first looks.
        health.set_caught_up(
            partition_health(config.broker_id, &topics.partition_facts()).out_of_isr == 0,
        );
        health.set_loaded(true);
        if let Some((listener, bound)) = kafka {
            let context = Arc::new(kafka::KafkaContext {
                service: broker.clone(),
                max_request_bytes: config.limits.max_request_bytes,
                link: Arc::new(kafka::coordinator_link::CoordinatorLink::new(
                    credential,
                    peer_tls,
                    kafka::coordinator_link::LinkTimeouts::default(),
                )),
                tokens: kafka_tokens,
                failed_authentication_delay: Duration::from_millis(
                    config.kafka_failed_authentication_delay_ms,
                ),
            });
            tracing::info!(address = %bound, tls = server_tls.is_some(), "Kafka listener serving");
            duties.spawn(
                "accept Kafka connections",
                kafka::accept(listener, server_tls, context, duties.clone()),
            );
        }
        announce();

        {
            let (topics, config) = (topics.clone(), config.clone());
            duties.spawn_cooperative(move |stop| run_background(topics, config, stop));
        }
        if topics.catalog().is_some() {
            duties.spawn("follow the topic catalog", follow_catalog(topics.clone()));
            duties.spawn(
                "maintain the ISR",
                maintain_isr(topics.clone(), config.replica_lag_time_max_ms),
            );
        }
        duties.spawn(
            "report partition health",
            report_partition_health(topics.clone(), config.broker_id, health.clone()),
        );
        if let Some(membership) = &membership {
            duties.spawn(
                "report the lease",
                report_lease(membership.clone(), health.clone()),
            );
        }
        tracing::info!(broker_id = config.broker_id, address = %advertised.internal, external_address = ?advertised.external, data_dir = %config.data_dir.display(), "broker serving");
        let flush = async {
            topics.stop_following().await;
            for partition in topics.all_partitions() {
                if let Err(e) = partition.shutdown() {
                    tracing::error!(topic = partition.topic(), partition = partition.index(), error = %e, "clean shutdown failed");
                }
            }
        };
        let release = async {
            if let Some(membership) = &membership {
                membership.leave().await;
            }
        };
        let served = serve_then_stop(server, &duties, flush, release).await;
        tracing::info!(broker_id = config.broker_id, "broker stopped");
        Ok(served?)
    }
}

/// How often the partition gauges are recomputed.
const PARTITION_HEALTH_EVERY: Duration = Duration::from_secs(1);

/// Publishes the partition gauges (`partition_health.rs`), whether this broker has
/// caught up (health: `idem.CaughtUp`), the producer states it keeps (a flood of new
/// producer ids shows here first) and, per local partition, its log's size and how
/// far the last
/// stable offset is behind the high watermark (0 where this broker does not lead: only
/// the leader's is the consumers'). Recorded whether or not a metrics endpoint serves
/// them (the facade drops them without a recorder).
async fn report_partition_health(topics: Arc<TopicRegistry>, broker_id: i32, health: Health) {
    let mut tick = tokio::time::interval(PARTITION_HEALTH_EVERY);
    loop {
        tick.tick().await;
        let counts = partition_health(broker_id, &topics.partition_facts());
        health.set_caught_up(counts.out_of_isr == 0);
        metrics::gauge!("idem_partitions_led").set(counts.led as f64);
        metrics::gauge!("idem_under_replicated_partitions").set(counts.under_replicated as f64);
        metrics::gauge!("idem_under_min_isr_partitions").set(counts.under_min_isr as f64);
        metrics::gauge!("idem_offline_partitions").set(counts.offline as f64);
        metrics::gauge!("idem_partitions_out_of_isr").set(counts.out_of_isr as f64);
        let mut producer_states = 0;
        for partition in topics.all_partitions() {
            let (producers, log_bytes) = partition.footprint();
            producer_states += producers;
            metrics::gauge!(
                "idem_log_size_bytes",
                "topic" => partition.topic().to_string(),
                "partition" => partition.index().to_string()
            )
            .set(log_bytes as f64);
            let lag = if partition.is_leader() {
                let offsets = partition.offsets();
                offsets.high_watermark - offsets.last_stable_offset
            } else {
                0
            };
            metrics::gauge!(
                "idem_last_stable_offset_lag",
                "topic" => partition.topic().to_string(),
                "partition" => partition.index().to_string()
            )
            .set(lag as f64);
        }
        metrics::gauge!("idem_producer_states").set(producer_states as f64);
    }
}

/// Health follows the broker's etcd registration: NOT_SERVING from the moment its
/// lease is found lost until it is registered again.
async fn report_lease(membership: Arc<Membership>, health: Health) {
    let mut registered = membership.registered();
    loop {
        health.set_lease_held(*registered.borrow_and_update());
        if registered.changed().await.is_err() {
            return;
        }
    }
}

/// Registers the broker in etcd when it runs in a cluster (`--etcd` given).
async fn join_cluster(
    config: &BrokerConfig,
    advertised: &Advertised,
    kafka_address: Option<String>,
    shutdown: &CancellationToken,
    credential: NodeCredential,
) -> Result<Option<Arc<Membership>>, ServerError> {
    if config.etcd_endpoints.is_empty() {
        return Ok(None);
    }
    // Before anything that could act on the catalog: a catalog of another cluster (or of
    // none) would have this broker delete every partition that catalog does not list.
    let cluster_id = cluster_id::ensure(
        &config.data_dir,
        &config.etcd_endpoints,
        &config.etcd_prefix,
    )
    .await?;
    tracing::info!(%cluster_id, "data dir and etcd name the same cluster");
    let data_dir_id = data_dir_id::load_or_create(&config.data_dir).map_err(BrokerError::from)?;
    let me = Registration {
        broker_id: config.broker_id,
        address: advertised.internal.clone(),
        external_address: advertised.external.clone(),
        kafka_address,
        data_dir_id,
    };
    let membership_config = MembershipConfig {
        endpoints: config.etcd_endpoints.clone(),
        prefix: config.etcd_prefix.clone(),
        lease_ttl: Duration::from_millis(config.lease_ttl_ms),
    };
    let membership = Membership::join(&membership_config, me, shutdown)
        .await?
        .with_credential(credential);
    Ok(Some(Arc::new(membership)))
}

/// The producer-id block store the config names. A broker must never fall back from
/// etcd to its embedded store: two stores would hand out the same ids.
async fn open_pid_store(config: &BrokerConfig) -> Result<Arc<dyn PidBlockStore>, ServerError> {
    match config.pid_store()? {
        PidStoreKind::Embedded => {
            let store = SledPidStore::open(config.data_dir.join("pidstore"))
                .map_err(|e| ServerError::PidStore(e.to_string()))?;
            Ok(Arc::new(store))
        }
        PidStoreKind::Etcd => {
            let store = EtcdPidStore::connect(&config.etcd_endpoints, &config.etcd_prefix)
                .await
                .map_err(|e| ServerError::PidStore(e.to_string()))?;
            Ok(Arc::new(store))
        }
    }
}

/// Keeps the registry in step with the etcd catalog: reload, then watch everything under
/// the prefix from the revision read and reload on every change. A broken watch
/// starts over after a pause that grows while it keeps breaking ([`catalog_pauses`]).
async fn follow_catalog(topics: Arc<TopicRegistry>) {
    let mut failures = LogLimit::for_repeated_failures();
    let mut pauses = catalog_pauses();
    loop {
        let followed = async {
            let revision = topics.sync_at().await?;
            let Some(catalog) = topics.catalog() else {
                return Ok::<(), BrokerError>(());
            };
            let mut changes = catalog
                .watch_from(revision + 1)
                .await
                .map_err(|e| BrokerError::Cluster(e.to_string()))?;
            // Membership changes (this broker re-registered after losing its lease) have no
            // catalog event of their own: check for them on a timer.
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            loop {
                tokio::select! {
                    change = changes.next_change() => {
                        if change.map_err(|e| BrokerError::Cluster(e.to_string()))?.is_none() {
                            return Ok(());
                        }
                        topics.sync().await?;
                    }
                    _ = tick.tick() => {
                        if topics.needs_sync() {
                            topics.sync().await?;
                        }
                    }
                }
            }
        };
        match followed.await {
            // The watch ended cleanly (etcd closed it): start over after the shortest pause.
            Ok(()) => pauses = catalog_pauses(),
            Err(e) => {
                warn_limited!(failures, error = %e, "following the topic catalog failed; starting over");
            }
        }
        tokio::time::sleep(pauses.next().unwrap_or(CATALOG_PAUSE_MAX)).await;
    }
}

/// Longest pause before following the catalog again, before jitter.
const CATALOG_PAUSE_MAX: Duration = Duration::from_secs(1);

/// Pauses before following the catalog again: 250 ms doubling to 1 s with each failure
/// in a row, jittered (up to as much again) so that the brokers of a cluster that lost
/// etcd together do not all come back to it in lock step. The first is never longer
/// than the fixed 500 ms this used to be, so a broker that lost one watch catches up as
/// fast as before.
fn catalog_pauses() -> ExponentialBackoff {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(CATALOG_PAUSE_MAX)
        .without_max_times()
        .with_jitter()
        .build()
}

/// Checks the ISR of every led partition four times per lag limit.
async fn maintain_isr(topics: Arc<TopicRegistry>, lag_limit_ms: i64) {
    let every = Duration::from_millis((lag_limit_ms / 4).max(100) as u64);
    let mut tick = tokio::time::interval(every);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = topics.isr_duty_woken() => {}
        }
        topics.maintain_isr(lag_limit_ms).await;
    }
}

/// Periodic work: forget idle producers; apply retention and compaction; flush on a
/// timer for
/// `interval:<ms>`.
/// Returns between pieces of work once `stop` is cancelled: a timed flush is never cut
/// short.
async fn run_background(topics: Arc<TopicRegistry>, config: BrokerConfig, stop: CancellationToken) {
    let expiry_every =
        Duration::from_millis((config.producer_id_expiration_ms / 10).clamp(100, 60_000) as u64);
    let flush_every = match config.flush {
        FlushPolicy::IntervalMs(ms) => Some(Duration::from_millis(ms.max(1))),
        _ => None,
    };
    let retention_every =
        Duration::from_millis(config.retention.log_retention_check_interval_ms.max(1));
    let mut retention = tokio::time::interval(retention_every);
    let mut expiry = tokio::time::interval(expiry_every);
    let mut flush = tokio::time::interval(flush_every.unwrap_or(Duration::from_secs(3600)));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = expiry.tick() => {
                let now = now_ms();
                for partition in topics.all_partitions() {
                    partition.expire_producers(now);
                }
            }
            _ = retention.tick() => {
                let topics = topics.clone();
                // Deleting files and reading segment headers: off the async threads.
                let enforced = tokio::task::spawn_blocking(move || {
                    let now = now_ms();
                    for partition in topics.all_partitions() {
                        if let Err(e) = partition.enforce_retention(now) {
                            tracing::error!(topic = partition.topic(), partition = partition.index(), error = %e, "retention failed");
                        }
                        if let Err(e) = partition.compact(now) {
                            tracing::error!(topic = partition.topic(), partition = partition.index(), error = %e, "compaction failed");
                        }
                    }
                });
                if let Err(e) = enforced.await {
                    tracing::error!(error = %e, "retention task failed");
                }
            }
            _ = flush.tick(), if flush_every.is_some() => {
                let topics = topics.clone();
                let flushed = tokio::task::spawn_blocking(move || {
                    for partition in topics.all_partitions() {
                        if let Err(e) = partition.flush() {
                            tracing::error!(topic = partition.topic(), partition = partition.index(), error = %e, "timed flush failed");
                        }
                    }
                });
                if let Err(e) = flushed.await {
                    tracing::error!(error = %e, "timed flush task failed");
                }
            }
        }
    }
}
