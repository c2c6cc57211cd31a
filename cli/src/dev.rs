//! `idem dev`: a whole idem in one process on the embedded store, for trying idem and
//! for examples. Ctrl-C stops it cleanly; a restart on the same data dir keeps the data.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use idem_broker::config::BrokerConfig;
use idem_broker::server::BoundBroker;

#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Where logs, producer state and the embedded store live.
    #[arg(long, env = "IDEM_DATA_DIR", default_value = "idem-data")]
    data_dir: PathBuf,
    /// Address to serve on.
    #[arg(long, env = "IDEM_LISTEN", default_value = "127.0.0.1:9092")]
    listen: SocketAddr,
}

pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    let config = BrokerConfig::single_node(args.data_dir.clone(), args.listen);
    let broker = BoundBroker::bind(config)
        .await
        .with_context(|| format!("starting the dev broker in {}", args.data_dir.display()))?;
    let addr = broker.local_addr();
    println!(
        "idem dev: broker listening on {addr} (data in {})",
        args.data_dir.display()
    );
    println!("  idem --bootstrap {addr} topic create demo --partitions 3");
    println!("  seq 1 5 | idem --bootstrap {addr} produce demo");
    println!("  idem --bootstrap {addr} consume demo --from-beginning --max-messages 5");
    println!("Ctrl-C stops it; the data stays for the next start.");
    broker
        .serve(idem_broker::shutdown_signal())
        .await
        .context("serving")?;
    println!("idem dev: stopped cleanly");
    Ok(())
}
