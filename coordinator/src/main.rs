//! `idem-coordinator`: one transaction coordinator process. Stops cleanly (giving its
//! partitions up at once) on SIGINT or SIGTERM.

use anyhow::Context;
use clap::Parser;
use idem_coordinator::{BoundCoordinator, CoordinatorConfig};

#[derive(Debug, Parser)]
#[command(
    name = "idem-coordinator",
    version,
    about = "idem transaction coordinator: transactional ids, the transaction log, markers"
)]
struct Args {
    /// Check the configuration and exit: parse the flags and `IDEM_*` variables, refuse
    /// what a start would refuse, print the effective settings and the ownership mode,
    /// exit 0; binds, opens and connects nothing. A flag only, with no variable, so that
    /// an environment never turns a server into a checker (deploy/k8s is checked this
    /// way).
    #[arg(long)]
    check_config: bool,

    #[command(flatten)]
    coordinator: CoordinatorConfig,
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
        // mode() validates, as a start does, and says which ownership backend runs.
        // Its Display is the whole message ("invalid configuration: --flag ..."), as a
        // refused start prints it.
        let mode = args
            .coordinator
            .mode()
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        println!("{:#?}\nmode: {mode:?}", args.coordinator);
        return Ok(());
    }
    // Refused before anything starts, in the words of a refused start (the trace
    // export below needs a valid endpoint).
    args.coordinator
        .mode()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let traces = idem_runtime::logging::init_with_traces(
        "info",
        args.coordinator.otlp_endpoint.as_deref(),
        "idem-coordinator",
    )
    .context("starting the trace export")?;
    let coordinator =
        BoundCoordinator::bind(args.coordinator, None, idem_runtime::shutdown::on_signal())
            .await
            .context("starting coordinator")?;
    // Tests and scripts read this line to learn the port when they pass port 0.
    println!("idem-coordinator listening on {}", coordinator.local_addr());
    coordinator.serve().await.context("serving")?;
    traces.shutdown().await;
    Ok(())
}
