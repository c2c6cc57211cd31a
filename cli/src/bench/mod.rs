//! `idem bench`: measured throughput and latency of every delivery mode, each result
//! verified by reading back what was written, so that a fast wrong answer cannot look
//! good. `produce` compares the modes' producer throughput and ack latency; `e2e`
//! measures send-to-consume latency through a read_committed consumer.

mod args;
mod combine;
mod e2e;
mod embedded;
mod latency;
mod load;
mod memory;
mod modes;
mod payload;
mod pipeline;
mod produce;
mod progress;
mod report;
mod run_certs;
mod seqset;
mod target;
mod targets;
mod topic;
mod verify;

#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Producer throughput and latency per delivery mode, verified by reading back.
    Produce(produce::ProduceArgs),
    /// End-to-end latency from send to a read_committed consumer, at a fixed rate.
    E2e(e2e::E2eArgs),
    /// One table from several `produce --json` outputs, taken as rounds of one run.
    Report(combine::ReportArgs),
    /// A consume-transform-produce stage (exactly once) beside transactional produce:
    /// throughput, ratio and end-to-end latency, verified by reading the output back.
    Pipeline(pipeline::PipelineArgs),
}

pub async fn run(
    bootstrap: &str,
    access: &crate::access::Access,
    command: BenchCommand,
) -> anyhow::Result<()> {
    // `e2e` and `pipeline` are not wired for TLS nor tokens yet: better a refusal than
    // a run that claims to be over TLS, or as a principal, and is not.
    let plaintext_only = |what: &str| {
        anyhow::ensure!(
            access.tls.is_none(),
            "idem bench {what} does not run over TLS yet (--tls-ca, --tls-cert, --tls-key); \
             idem bench produce does"
        );
        anyhow::ensure!(
            access.credentials == idem_client::credentials::Credentials::none(),
            "idem bench {what} does not present --auth-token yet; idem bench produce does"
        );
        Ok(())
    };
    match command {
        BenchCommand::Produce(args) => produce::run(bootstrap, access, args).await,
        BenchCommand::E2e(args) => {
            plaintext_only("e2e")?;
            e2e::run(bootstrap, args).await
        }
        BenchCommand::Report(args) => combine::run(args),
        BenchCommand::Pipeline(args) => {
            plaintext_only("pipeline")?;
            pipeline::run(bootstrap, args).await
        }
    }
}
