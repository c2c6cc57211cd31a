//! `idem health ADDR [--service NAME]`: asks a broker or coordinator the standard gRPC
//! health service (`grpc.health.v1.Health/Check`) and exits 0 only if it answers
//! SERVING. Container images use it as their health check (no `grpc_health_probe` can
//! be fetched here): a server reports NOT_SERVING while it loads its state or has lost
//! its etcd lease (runtime/src/health.rs), so "healthy" means "can do its job".
//! Every other outcome (NOT_SERVING, an unknown service, no answer within the timeout)
//! exits 1, which is what Docker's HEALTHCHECK and Kubernetes' exec probes read as
//! unhealthy, with the reason on stderr.

use idem_client::TlsConfig;
use std::time::Duration;

use anyhow::Context;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

#[derive(Debug, clap::Args)]
pub struct HealthArgs {
    /// The server's gRPC address (host:port).
    pub address: String,
    /// The service to ask about: empty for the server as a whole, or `idem.v1.Broker`,
    /// `idem.v1.TxnCoordinator`.
    #[arg(long, default_value = "")]
    pub service: String,
    /// How long to wait for a connection and an answer.
    #[arg(long, default_value_t = 2000)]
    pub timeout_ms: u64,
}

pub async fn run(tls: Option<&TlsConfig>, args: HealthArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.timeout_ms > 0, "--timeout-ms must be positive");
    let timeout = Duration::from_millis(args.timeout_ms);
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = tonic::transport::Endpoint::from_shared(format!("{scheme}://{}", args.address))
        .with_context(|| format!("not an address: {}", args.address))?
        .connect_timeout(timeout)
        .timeout(timeout);
    let endpoint = match tls {
        Some(tls) => endpoint
            .tls_config(tls.client_config())
            .context("TLS settings (--tls-ca, --tls-cert, --tls-key)")?,
        None => endpoint,
    };
    let channel = endpoint
        .connect()
        .await
        .with_context(|| format!("cannot reach {}", args.address))?;
    let request = HealthCheckRequest {
        service: args.service.clone(),
    };
    let answer = HealthClient::new(channel)
        .check(request)
        .await
        .with_context(|| format!("{} did not answer a health check", args.address))?
        .into_inner();
    let status = answer.status();
    let what = if args.service.is_empty() {
        "the server".to_string()
    } else {
        format!("service {}", args.service)
    };
    println!("{}", status.as_str_name());
    anyhow::ensure!(
        status == ServingStatus::Serving,
        "{} reports {} for {what}",
        args.address,
        status.as_str_name()
    );
    Ok(())
}
