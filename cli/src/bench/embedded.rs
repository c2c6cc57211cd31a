//! An in-process `idem dev` for `--embedded` runs: one broker on the embedded store and
//! one solo transaction coordinator, both on free loopback ports, serving from tasks of
//! this runtime until [`Embedded::stop`].

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use idem_broker::config::BrokerConfig;
use idem_broker::log::FlushPolicy;
use idem_broker::server::BoundBroker;
use idem_coordinator::config::CoordinatorConfig;
use idem_coordinator::server::BoundCoordinator;
use idem_runtime::shutdown::CancellationToken;
use idem_runtime::tls::ClientAuth;

use super::run_certs::RunCerts;
use tokio::task::JoinHandle;

/// How long `stop` waits for the servers to wind down (the broker's own grace for
/// connected clients is 2 s).
const STOP_WAIT: Duration = Duration::from_secs(5);

/// A running broker and coordinator; stop them with [`Embedded::stop`].
pub struct Embedded {
    pub broker: SocketAddr,
    /// None beside a null-produce broker: its log takes no writes, so a coordinator
    /// could never load `__transaction_state`, and the null run has no transactions.
    pub coordinator: Option<SocketAddr>,
    stop: CancellationToken,
    tasks: Vec<JoinHandle<anyhow::Result<()>>>,
}

/// Starts a broker (with `--null-produce` when `null_produce`, the given flush policy,
/// and mutual TLS with `tls`'s files when given) and, unless `null_produce`, a coordinator, keeping their data in `data_dir`.
pub async fn start_embedded(
    data_dir: &Path,
    null_produce: bool,
    flush: FlushPolicy,
    tls: Option<&RunCerts>,
) -> anyhow::Result<Embedded> {
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let config = BrokerConfig {
        null_produce,
        flush,
        tls_cert: tls.map(|t| t.cert.clone()),
        tls_key: tls.map(|t| t.key.clone()),
        tls_ca: tls.map(|t| t.ca.clone()),
        tls_client_auth: if tls.is_some() {
            ClientAuth::Required
        } else {
            ClientAuth::None
        },
        ..BrokerConfig::single_node(data_dir.to_path_buf(), loopback)
    };
    let broker_config_tls = (
        config.tls_cert.clone(),
        config.tls_key.clone(),
        config.tls_ca.clone(),
        config.tls_client_auth,
    );
    let stop = CancellationToken::new();
    let broker = BoundBroker::bind(config, stop.child_token())
        .await
        .with_context(|| format!("starting the embedded broker in {}", data_dir.display()))?;
    let broker_addr = broker.local_addr();
    let mut tasks = Vec::new();
    let mut coordinator_addr = None;
    let broker = if null_produce {
        broker
    } else {
        let coordinator = BoundCoordinator::bind(
            CoordinatorConfig {
                tls_cert: broker_config_tls.0,
                tls_key: broker_config_tls.1,
                tls_ca: broker_config_tls.2,
                tls_client_auth: broker_config_tls.3,
                ..CoordinatorConfig::solo(
                    data_dir.join("coordinator"),
                    loopback,
                    broker_addr.to_string(),
                )
            },
            None,
            stop.child_token(),
        )
        .await
        .context("starting the embedded transaction coordinator")?;
        coordinator_addr = Some(coordinator.local_addr());
        tasks.push(tokio::spawn(async move {
            coordinator
                .serve()
                .await
                .context("serving the embedded coordinator")
        }));
        broker.with_coordinator(coordinator_addr.map(|a| a.to_string()))
    };
    // The bench connects as soon as this returns: wait until the broker serves its RPCs
    // (until then they answer UNAVAILABLE).
    let (serving, served) = tokio::sync::oneshot::channel();
    tasks.push(tokio::spawn(async move {
        broker
            .serve_announcing(move || {
                let _ = serving.send(());
            })
            .await
            .context("serving the embedded broker")
    }));
    served
        .await
        .context("the embedded broker stopped before it served")?;
    Ok(Embedded {
        broker: broker_addr,
        coordinator: coordinator_addr,
        stop,
        tasks,
    })
}

impl Embedded {
    /// Stops both servers and waits (a bounded time) for them to finish.
    pub async fn stop(self) {
        self.stop.cancel();
        for task in self.tasks {
            match tokio::time::timeout(STOP_WAIT, task).await {
                Ok(Ok(Ok(()))) => {}
                Ok(Ok(Err(e))) => {
                    tracing::warn!(error = %format!("{e:#}"), "embedded server stopped with an error")
                }
                Ok(Err(e)) => tracing::warn!(error = %e, "embedded server task failed"),
                Err(_) => tracing::warn!("embedded server did not stop in time; leaving it"),
            }
        }
    }
}
