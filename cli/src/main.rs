//! **idem-cli**, the `idem` binary. Depends on idem-client, and on idem-broker and
//! idem-coordinator only to run both in one process (`idem dev`, `idem bench --embedded`).
//! Every crate's place: docs/architecture.md, "Crates (workspace)".
//!
//! `idem`: the command line for idem. `dev` runs a whole single-node idem in this
//! process; the other commands are clients of a running cluster (`--bootstrap`).

mod access;
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

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use idem_client::TlsConfig;

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
    /// it, requests are `User:ANONYMOUS`. Used by the topic, produce, consume, txn,
    /// group, acl and bench commands.
    #[arg(long, global = true, env = "IDEM_AUTH_TOKEN")]
    auth_token: Option<std::path::PathBuf>,
    /// PEM CA the servers' certificates must be signed by: with it every connection
    /// (brokers, coordinators, `idem health`) uses TLS. Unset: plaintext.
    #[arg(long, global = true, env = "IDEM_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// PEM client certificate, for servers that require mutual TLS (needs --tls-key).
    #[arg(long, global = true, env = "IDEM_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// PEM private key of --tls-cert.
    #[arg(long, global = true, env = "IDEM_TLS_KEY")]
    tls_key: Option<PathBuf>,
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
#[cfg(feature = "jemalloc")]
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
    let Cli {
        bootstrap,
        auth_token,
        tls_ca,
        tls_cert,
        tls_key,
        command,
    } = Cli::parse();
    let result = match command {
        // The global TLS flags are the servers' own files here.
        Command::Dev(args) => {
            let tls = dev::DevTls {
                cert: tls_cert,
                key: tls_key,
                ca: tls_ca,
            };
            dev::run(args, tls).await
        }
        command => {
            match TlsConfig::from_files(tls_ca.as_deref(), tls_cert.as_deref(), tls_key.as_deref())
            {
                Err(e) => Err(e.into()),
                Ok(tls) => {
                    run_client(&bootstrap, auth_token.as_deref(), tls.as_ref(), command).await
                }
            }
        }
    };
    exit_code(result)
}

/// A command that is a client of a running cluster: the topic, record, transaction,
/// group, ACL and bench commands present `--auth-token` and the TLS settings; `health`
/// only the TLS settings (health checks are open to every principal).
async fn run_client(
    bootstrap: &str,
    auth_token: Option<&std::path::Path>,
    tls: Option<&TlsConfig>,
    command: Command,
) -> anyhow::Result<()> {
    let access = || -> anyhow::Result<access::Access> {
        Ok(access::Access {
            credentials: idem_client::credentials::Credentials::from_token_path(auth_token)?,
            tls: tls.cloned(),
        })
    };
    match command {
        Command::Dev(_) => anyhow::bail!("idem dev runs servers, it is no client"),
        Command::Topic(command) => topic::run(bootstrap, &access()?, command).await,
        Command::Produce(args) => produce::run(bootstrap, &access()?, args).await,
        Command::Consume(args) => consume::run(bootstrap, &access()?, args).await,
        Command::Txn(command) => txn::run(bootstrap, &access()?, command).await,
        Command::Group(command) => group::run(bootstrap, &access()?, command).await,
        Command::Bench(command) => bench::run(bootstrap, &access()?, command).await,
        Command::Health(args) => health::run(tls, args).await,
        Command::Acl(command) => acl::run(bootstrap, &access()?, command).await,
    }
}

fn exit_code(result: anyhow::Result<()>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("idem: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
