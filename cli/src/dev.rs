//! `idem dev`: a whole idem in one process on the embedded store, for trying idem and
//! for examples: one broker and one transaction coordinator (solo mode: it owns every
//! partition of `__transaction_state`). Ctrl-C stops both cleanly; a restart on the
//! same data dir keeps the data and the transaction state.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use idem_broker::config::BrokerConfig;
use idem_broker::server::BoundBroker;
use idem_coordinator::config::CoordinatorConfig;
use idem_coordinator::server::BoundCoordinator;
use tokio::sync::watch;

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Where logs, producer state and the embedded store live.
    #[arg(long, env = "IDEM_DATA_DIR", default_value = "idem-data")]
    data_dir: PathBuf,
    /// Address the broker serves on.
    #[arg(long, env = "IDEM_LISTEN", default_value = "127.0.0.1:9092")]
    listen: SocketAddr,
    /// Address the transaction coordinator serves on.
    #[arg(
        long,
        env = "IDEM_COORDINATOR_LISTEN",
        default_value = "127.0.0.1:9093"
    )]
    coordinator_listen: SocketAddr,
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let config = BrokerConfig::single_node(args.data_dir.clone(), args.listen);
    let broker = BoundBroker::bind(config)
        .await
        .with_context(|| format!("starting the dev broker in {}", args.data_dir.display()))?;
    let addr = broker.local_addr();
    let coordinator_config = CoordinatorConfig::solo(
        args.data_dir.join("coordinator"),
        args.coordinator_listen,
        addr.to_string(),
    );
    let coordinator = BoundCoordinator::bind(coordinator_config, None)
        .await
        .context("starting the dev transaction coordinator")?;
    let coordinator_addr = coordinator.local_addr();
    let broker = broker.with_coordinator(Some(coordinator_addr.to_string()));
    println!(
        "idem dev: broker listening on {addr}, transaction coordinator on {coordinator_addr} (data in {})",
        args.data_dir.display()
    );
    println!("  idem --bootstrap {addr} topic create demo --partitions 3");
    println!("  seq 1 5 | idem --bootstrap {addr} produce demo");
    println!("  seq 1 5 | idem --bootstrap {addr} produce demo --transactional-id demo-txn");
    println!("  idem --bootstrap {addr} consume demo --from-beginning --max-messages 10");
    println!("Ctrl-C stops it; the data stays for the next start.");
    // One Ctrl-C stops both servers.
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(async move {
        idem_broker::shutdown_signal().await;
        let _ = stop.send(true);
    });
    let until_stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let coordinator_task = tokio::spawn(coordinator.serve(until_stopped(stopped.clone())));
    broker
        .serve(until_stopped(stopped))
        .await
        .context("serving the broker")?;
    coordinator_task
        .await
        .context("coordinator task")?
        .context("serving the coordinator")?;
    println!("idem dev: stopped cleanly");
    Ok(())
}
