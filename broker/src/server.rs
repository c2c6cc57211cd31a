//! Assembles a running broker: opens the topics, the producer-id store, the gRPC
//! service (with the standard health and reflection services), and the background
//! tasks (producer expiry, timed flushes); shuts all of it down cleanly on request.

use idem_proto::transport::MAX_MESSAGE_BYTES;
use idem_runtime::log_limit::LogLimit;
use idem_runtime::warn_limited;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use idem_pidstore::{EtcdPidStore, PidBlockStore, ProducerIdManager, SledPidStore};
use idem_proto::transport::accept_without_nagle;
use idem_proto::v1::broker_server::BrokerServer;
use tokio::net::TcpListener;

use crate::cluster::catalog::EtcdCatalog;
use crate::cluster::data_dir_id;
use crate::cluster::membership::{Membership, MembershipConfig, MembershipError, Registration};
use crate::config::{BrokerConfig, PidStoreKind};
use crate::error::BrokerError;
use crate::log::{FlushPolicy, LogConfig};
use crate::partition::{now_ms, PartitionSettings};
use crate::service::BrokerService;
use crate::topics::{ClusterCatalog, TopicRegistry};

/// How long a stopping broker lets in-flight requests finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// Why a broker could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Broker(#[from] BrokerError),
    #[error("producer id store: {0}")]
    PidStore(String),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("joining the cluster: {0}")]
    Membership(#[from] MembershipError),
    #[error("reflection service: {0}")]
    Reflection(String),
    #[error("invalid configuration: {0}")]
    Config(String),
}

/// A broker bound to its address, ready to serve.
pub struct BoundBroker {
    config: BrokerConfig,
    listener: TcpListener,
    local_addr: SocketAddr,
    topics: Arc<TopicRegistry>,
    producer_ids: Arc<ProducerIdManager>,
    membership: Option<Arc<Membership>>,
}

impl BoundBroker {
    /// Opens storage and binds the listen address (port 0 picks a free port).
    pub async fn bind(config: BrokerConfig) -> Result<Self, ServerError> {
        config.limits.check().map_err(ServerError::Config)?;
        let settings = PartitionSettings {
            log: LogConfig {
                segment_bytes: config.segment_bytes,
                flush: config.flush,
                ..LogConfig::default()
            },
            max_batch_bytes: config.limits.max_batch_bytes,
            producer_id_expiration_ms: config.producer_id_expiration_ms,
        };
        let store = open_pid_store(&config).await?;
        let producer_ids = Arc::new(
            ProducerIdManager::new(store, config.broker_id).with_prefetch(config.pid_prefetch),
        );
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let local_addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: config.listen,
            source,
        })?;
        let membership = join_cluster(&config, local_addr).await?;
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
        let topics = Arc::new(topics);
        Ok(BoundBroker {
            config,
            listener,
            local_addr,
            topics,
            producer_ids,
            membership,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Names the single-node transaction coordinator (`--coordinator`) once its address
    /// is known, e.g. after `idem dev` bound both servers.
    pub fn with_coordinator(mut self, address: Option<String>) -> Self {
        self.config.coordinator = address;
        self
    }

    /// Serves until `shutdown` resolves, then flushes and snapshots every partition.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), ServerError> {
        let BoundBroker {
            config,
            listener,
            local_addr,
            topics,
            producer_ids,
            membership,
        } = self;
        let advertised = advertised_address(&config, local_addr);
        let service = BrokerService::new(
            config.broker_id,
            advertised.clone(),
            topics.clone(),
            producer_ids,
            config.limits.max_fetch_bytes,
        )
        .with_membership(membership.clone())
        .with_coordinator(config.coordinator.clone())
        .with_null_produce(config.null_produce);
        if config.coordinator.is_some() && membership.is_some() {
            tracing::warn!("--coordinator is ignored in a cluster: coordinators are found in etcd");
        }
        let broker = BrokerServer::new(service)
            .max_decoding_message_size(config.limits.max_request_bytes)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);

        let (health_reporter, health) = tonic_health::server::health_reporter();
        health_reporter
            .set_serving::<BrokerServer<BrokerService>>()
            .await;
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(idem_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(|e| ServerError::Reflection(e.to_string()))?;

        let background = tokio::spawn(run_background(topics.clone(), config.clone()));
        let catalog_watch = topics
            .catalog()
            .is_some()
            .then(|| tokio::spawn(follow_catalog(topics.clone())));
        let isr_duty = topics
            .catalog()
            .is_some()
            .then(|| tokio::spawn(maintain_isr(topics.clone(), config.replica_lag_time_max_ms)));
        tracing::info!(broker_id = config.broker_id, address = %advertised, data_dir = %config.data_dir.display(), "broker serving");
        let incoming = accept_without_nagle(listener);
        let (stopping, mut stopping_rx) = tokio::sync::watch::channel(false);
        let signalled = async move {
            shutdown.await;
            let _ = stopping.send(true);
        };
        let server = tonic::transport::Server::builder()
            .add_service(health)
            .add_service(reflection)
            .add_service(broker)
            .serve_with_incoming_shutdown(incoming, signalled);
        // Graceful shutdown waits for clients to hang up; idle clients and long-polling
        // fetches must not keep a stopping broker alive past the grace period.
        let grace = async move {
            let _ = stopping_rx.wait_for(|stopping| *stopping).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        let served = tokio::select! {
            served = server => served,
            () = grace => {
                tracing::warn!(grace_ms = SHUTDOWN_GRACE.as_millis() as u64, "clients still connected after the grace period; stopping anyway");
                Ok(())
            }
        };
        background.abort();
        for task in [catalog_watch, isr_duty].into_iter().flatten() {
            task.abort();
        }
        for partition in topics.all_partitions() {
            if let Err(e) = partition.shutdown() {
                tracing::error!(topic = partition.topic(), partition = partition.index(), error = %e, "clean shutdown failed");
            }
        }
        if let Some(membership) = membership {
            membership.leave().await;
        }
        tracing::info!(broker_id = config.broker_id, "broker stopped");
        Ok(served?)
    }
}

fn advertised_address(config: &BrokerConfig, local_addr: SocketAddr) -> String {
    config
        .advertise
        .clone()
        .unwrap_or_else(|| local_addr.to_string())
}

/// Registers the broker in etcd when it runs in a cluster (`--etcd` given).
async fn join_cluster(
    config: &BrokerConfig,
    local_addr: SocketAddr,
) -> Result<Option<Arc<Membership>>, ServerError> {
    if config.etcd_endpoints.is_empty() {
        return Ok(None);
    }
    let data_dir_id = data_dir_id::load_or_create(&config.data_dir).map_err(BrokerError::from)?;
    let me = Registration {
        broker_id: config.broker_id,
        address: advertised_address(config, local_addr),
        data_dir_id,
    };
    let membership_config = MembershipConfig {
        endpoints: config.etcd_endpoints.clone(),
        prefix: config.etcd_prefix.clone(),
        lease_ttl: Duration::from_millis(config.lease_ttl_ms),
    };
    let membership = Membership::join(&membership_config, me).await?;
    Ok(Some(Arc::new(membership)))
}

/// The producer-id block store the config names. A broker must never fall back from
/// etcd to its embedded store: two stores would hand out the same ids.
async fn open_pid_store(config: &BrokerConfig) -> Result<Arc<dyn PidBlockStore>, ServerError> {
    match config.pid_store().map_err(ServerError::Config)? {
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
/// starts over after a pause.
async fn follow_catalog(topics: Arc<TopicRegistry>) {
    let mut failures = LogLimit::for_repeated_failures();
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
        if let Err(e) = followed.await {
            warn_limited!(failures, error = %e, "following the topic catalog failed; starting over");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
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

/// Periodic work: forget idle producers; flush on a timer for `interval:<ms>`.
async fn run_background(topics: Arc<TopicRegistry>, config: BrokerConfig) {
    let expiry_every =
        Duration::from_millis((config.producer_id_expiration_ms / 10).clamp(100, 60_000) as u64);
    let flush_every = match config.flush {
        FlushPolicy::IntervalMs(ms) => Some(Duration::from_millis(ms.max(1))),
        _ => None,
    };
    let mut expiry = tokio::time::interval(expiry_every);
    let mut flush = tokio::time::interval(flush_every.unwrap_or(Duration::from_secs(3600)));
    loop {
        tokio::select! {
            _ = expiry.tick() => {
                let now = now_ms();
                for partition in topics.all_partitions() {
                    partition.expire_producers(now);
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
