//! `idem-broker`: one broker process. Stops cleanly on SIGINT or SIGTERM.

use anyhow::Context;
use clap::Parser;
use idem_broker::config::BrokerConfig;
use idem_broker::server::BoundBroker;

#[derive(Debug, Parser)]
#[command(
    name = "idem-broker",
    version,
    about = "idem broker: partition logs, idempotent produce, fetch"
)]
struct Args {
    /// Check the configuration and exit: parse the flags and `IDEM_*` variables, refuse
    /// what a start would refuse, print the effective settings, exit 0; binds, opens and
    /// connects nothing. A flag only, with no variable, so that an environment never
    /// turns a server into a checker (deploy/k8s is checked this way).
    #[arg(long)]
    check_config: bool,

    #[command(flatten)]
    broker: BrokerConfig,
}

/// jemalloc, not glibc's malloc: see docs/benchmarks.md, "Memory churn".
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.check_config {
        idem_runtime::logging::init("info");
        // The same words as a refused start (BrokerError::InvalidConfig).
        args.broker
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
        println!("{:#?}", args.broker);
        return Ok(());
    }
    // Refused before anything starts, in the words of a refused start (the trace
    // export below needs a valid endpoint).
    args.broker
        .validate()
        .map_err(|e| anyhow::anyhow!("invalid configuration: {e}"))?;
    let traces = idem_runtime::logging::init_with_traces(
        "info",
        args.broker.otlp_endpoint.as_deref(),
        "idem-broker",
    )
    .context("starting the trace export")?;
    let broker = BoundBroker::bind(args.broker, idem_runtime::shutdown::on_signal())
        .await
        .context("starting broker")?;
    // Tests and scripts read this line to learn the port when they pass port 0, and take
    // it to mean the broker serves: printed once its RPCs are installed.
    let address = broker.local_addr();
    let kafka_address = broker.kafka_addr();
    broker
        .serve_announcing(|| {
            // Before the gRPC line, which tests take to mean the broker serves.
            if let Some(kafka) = kafka_address {
                println!("kafka listener on {kafka}");
            }
            println!("idem-broker listening on {address}");
        })
        .await
        .context("serving")?;
    traces.shutdown().await;
    Ok(())
}
