//! **idem-cli**, the `idem` binary. Depends on idem-client, and on idem-broker and
//! idem-coordinator only to run both in one process (`idem dev`, `idem bench --embedded`).
//! Every crate's place: docs/architecture.md, "Crates (workspace)".
//!
//! `idem`: the command line for idem. `dev` runs a whole single-node idem in this
//! process; the other commands are clients of a running cluster (`--bootstrap`).

mod acl;
mod bench;
mod consume;
mod dev;
mod group;
mod health;
mod produce;
mod produce_txn;
mod record_line;
mod topic;
mod topic_lifecycle;
mod txn;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "idem",
    version,
    about = "idem: a Kafka-style broker built for exactly-once delivery"
)]
struct Cli {
    /// Broker address to connect to (host:port), or a comma-separated list of them
    /// tried in turn until one answers (Kafka's `bootstrap.servers`).
    #[arg(
        long,
        global = true,
        env = "IDEM_BOOTSTRAP",
        default_value = "127.0.0.1:9092"
    )]
    bootstrap: String,
    /// A file holding the bearer token to present (`authorization: Bearer`); without
    /// it, requests are `User:ANONYMOUS`. Used by `idem acl`.
    #[arg(long, global = true, env = "IDEM_AUTH_TOKEN")]
    auth_token: Option<std::path::PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one broker with the embedded store in this process (Ctrl-C stops it).
    Dev(dev::DevArgs),
    /// Create, list, describe, configure and reassign topics.
    #[command(subcommand)]
    Topic(topic::TopicCommand),
    /// Produce one record per stdin line.
    Produce(produce::ProduceArgs),
    /// Print one record value per line.
    Consume(consume::ConsumeArgs),
    /// List, describe and abort transactions; find hanging ones.
    #[command(subcommand)]
    Txn(txn::TxnCommand),
    /// List and describe consumer groups; reset or delete empty ones.
    #[command(subcommand)]
    Group(group::GroupCommand),
    /// Add, list and remove ACLs (with `--authorizer acl` on the servers).
    #[command(subcommand)]
    Acl(acl::AclCommand),
    /// Ask a broker or coordinator whether it serves (exit 0 only if SERVING).
    Health(health::HealthArgs),
    /// Measure throughput and latency of each delivery mode (verified by reading back).
    #[command(subcommand)]
    Bench(bench::BenchCommand),
}

/// jemalloc, not glibc's malloc: see docs/benchmarks.md, "Memory churn".
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("IDEM_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Dev(args) => dev::run(args).await,
        Command::Topic(command) => topic::run(&cli.bootstrap, command).await,
        Command::Produce(args) => produce::run(&cli.bootstrap, args).await,
        Command::Consume(args) => consume::run(&cli.bootstrap, args).await,
        Command::Txn(command) => txn::run(&cli.bootstrap, command).await,
        Command::Group(command) => group::run(&cli.bootstrap, command).await,
        Command::Bench(command) => bench::run(&cli.bootstrap, command).await,
        Command::Health(args) => health::run(args).await,
        Command::Acl(command) => {
            match idem_client::credentials::Credentials::from_token_path(cli.auth_token.as_deref())
            {
                Ok(credentials) => acl::run(&cli.bootstrap, credentials, command).await,
                Err(e) => Err(e.into()),
            }
        }
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idem: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
