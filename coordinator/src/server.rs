//! Assembles a running coordinator: the listener, the producer-id source, the
//! ownership backend, the core, and the gRPC service (with the standard health and
//! reflection services); background tasks create `__transaction_state`, follow
//! ownership and time transactions out. Shuts all of it down on request, giving its
//! partitions up at once.

use idem_proto::transport::MAX_MESSAGE_BYTES;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use idem_client::Connection;
use idem_pidstore::{EtcdPidStore, PidBlockStore, ProducerIdManager};
use idem_proto::transport::accept_without_nagle;
use idem_proto::v1::txn_coordinator_server::TxnCoordinatorServer;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::config::{CoordinatorConfig, Mode};
use crate::core::{Coordinator, CoreSettings};
use crate::error::CoordinatorError;
use crate::log::topic::ensure_topic;
use crate::ownership::etcd::{EtcdOwnership, EtcdOwnershipConfig};
use crate::ownership::solo::SoloOwnership;
use crate::ownership::Ownership;
use crate::producer_ids::{BrokerProducerIds, SharedProducerIds};
use crate::service::TxnCoordinatorService;

/// How long a stopping coordinator lets in-flight requests finish.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// Longest one broker RPC may take.
const BROKER_REQUEST_TIMEOUT: Duration = Duration::from_secs(15);

/// A coordinator bound to its address, ready to serve.
pub struct BoundCoordinator {
    config: CoordinatorConfig,
    listener: TcpListener,
    local_addr: SocketAddr,
    core: Arc<Coordinator>,
    ownership: Arc<dyn Ownership>,
}

impl BoundCoordinator {
    /// Binds the listen address and joins the cluster (etcd) or opens the solo state.
    /// `pid_store` is where producer ids come from when embedding (the broker's store
    /// in `idem dev`); without it, etcd mode uses the etcd store and solo mode asks the
    /// broker for ids. Brokers are dialled lazily: they need not be up yet.
    pub async fn bind(
        config: CoordinatorConfig,
        pid_store: Option<Arc<dyn PidBlockStore>>,
    ) -> Result<Self, CoordinatorError> {
        let mode = config.mode()?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| CoordinatorError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| CoordinatorError::Bind {
                addr: config.listen,
                source,
            })?;
        let address = config
            .advertise
            .clone()
            .unwrap_or_else(|| local_addr.to_string());
        let conn = Connection::connect_lazy(&config.bootstrap, BROKER_REQUEST_TIMEOUT)?;
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
                        lease_ttl: Duration::from_millis(config.lease_ttl_ms),
                    },
                    pids.clone(),
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
        let core = Coordinator::new(
            CoreSettings {
                coordinator_id: config.coordinator_id,
                max_transaction_timeout_ms: config.max_transaction_timeout_ms,
                transactional_id_expiration_ms: config.transactional_id_expiration_ms,
            },
            conn,
            pids,
            ownership.clone(),
        );
        Ok(BoundCoordinator {
            config,
            listener,
            local_addr,
            core,
            ownership,
        })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Serves until `shutdown` resolves, then gives every partition up.
    pub async fn serve(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), CoordinatorError> {
        let BoundCoordinator {
            config,
            listener,
            local_addr,
            core,
            ownership,
        } = self;
        let (health_reporter, health) = tonic_health::server::health_reporter();
        health_reporter
            .set_serving::<TxnCoordinatorServer<TxnCoordinatorService>>()
            .await;
        let reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(idem_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
            .build_v1()
            .map_err(|e| CoordinatorError::Reflection(e.to_string()))?;
        let service = TxnCoordinatorServer::new(TxnCoordinatorService::new(core.clone()))
            .max_encoding_message_size(MAX_MESSAGE_BYTES);

        let ownership_task = tokio::spawn(follow_ownership(
            core.clone(),
            ownership,
            config.txn_log_partitions,
        ));
        let timer = tokio::spawn(time_out_transactions(
            core.clone(),
            Duration::from_millis(config.txn_check_interval_ms),
        ));
        tracing::info!(coordinator_id = config.coordinator_id, address = %local_addr, bootstrap = %config.bootstrap, "coordinator serving");

        let (stopping, mut stopping_rx) = tokio::sync::watch::channel(false);
        let signalled = async move {
            shutdown.await;
            let _ = stopping.send(true);
        };
        let server = tonic::transport::Server::builder()
            .add_service(health)
            .add_service(reflection)
            .add_service(service)
            .serve_with_incoming_shutdown(accept_without_nagle(listener), signalled);
        // Graceful shutdown waits for clients to hang up; idle ones must not keep a
        // stopping coordinator alive past the grace period.
        let grace = async move {
            let _ = stopping_rx.wait_for(|stopping| *stopping).await;
            tokio::time::sleep(SHUTDOWN_GRACE).await;
        };
        let served = tokio::select! {
            served = server => served,
            () = grace => Ok(()),
        };
        ownership_task.abort();
        timer.abort();
        core.leave().await;
        tracing::info!(
            coordinator_id = config.coordinator_id,
            "coordinator stopped"
        );
        Ok(served?)
    }
}

/// Creates (or finds) the transaction log, then hands every claim to the core.
async fn follow_ownership(core: Arc<Coordinator>, ownership: Arc<dyn Ownership>, partitions: i32) {
    let mut backoff = Duration::from_millis(100);
    let partitions = loop {
        match ensure_topic(core.connection(), partitions, core.coordinator_id()).await {
            Ok(n) => break n,
            Err(e) => {
                tracing::warn!(error = %e, "cannot set up the transaction log yet; retrying");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    };
    core.set_partition_count(partitions);
    let (claims_tx, mut claims) = mpsc::unbounded_channel();
    let run = tokio::spawn(ownership.run(partitions, claims_tx));
    while let Some(claim) = claims.recv().await {
        core.on_claim(claim);
    }
    run.abort();
}

async fn time_out_transactions(core: Arc<Coordinator>, every: Duration) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        core.tick();
    }
}
