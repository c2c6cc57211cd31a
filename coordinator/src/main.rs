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
    #[command(flatten)]
    coordinator: CoordinatorConfig,
}

/// jemalloc, not glibc's malloc: see docs/benchmarks.md, "Memory churn".
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    idem_runtime::logging::init("info");
    let args = Args::parse();
    let coordinator =
        BoundCoordinator::bind(args.coordinator, None, idem_runtime::shutdown::on_signal())
            .await
            .context("starting coordinator")?;
    // Tests and scripts read this line to learn the port when they pass port 0.
    println!("idem-coordinator listening on {}", coordinator.local_addr());
    coordinator.serve().await.context("serving")?;
    Ok(())
}
