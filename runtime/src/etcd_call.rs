//! One etcd request with a deadline on top of the client's own: a request queued while
//! no connection can be made would otherwise wait for one indefinitely.

use std::time::Duration;

pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
pub enum EtcdCallError {
    #[error("etcd {what} failed: {source}")]
    Failed {
        what: &'static str,
        source: etcd_client::Error,
    },
    #[error("etcd {0} did not answer within 3 s")]
    Timeout(&'static str),
}

pub async fn bounded<T>(
    what: &'static str,
    call: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
) -> Result<T, EtcdCallError> {
    let started = std::time::Instant::now();
    let answered = tokio::time::timeout(REQUEST_TIMEOUT, call).await;
    // `what` names the call ("register", "update partition"): a small fixed set.
    metrics::histogram!("idem_etcd_call_duration_seconds", "call" => what)
        .record(started.elapsed().as_secs_f64());
    let failure = match &answered {
        Ok(Ok(_)) => None,
        Ok(Err(_)) => Some("error"),
        Err(_) => Some("timeout"),
    };
    if let Some(failure) = failure {
        metrics::counter!("idem_etcd_call_failures_total", "call" => what, "failure" => failure)
            .increment(1);
    }
    match answered {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(source)) => Err(EtcdCallError::Failed { what, source }),
        Err(_) => Err(EtcdCallError::Timeout(what)),
    }
}

/// A client with connect and request timeouts (connects lazily).
pub async fn connect(endpoints: &[String]) -> Result<etcd_client::Client, EtcdCallError> {
    let options = etcd_client::ConnectOptions::new()
        .with_connect_timeout(REQUEST_TIMEOUT)
        .with_timeout(REQUEST_TIMEOUT);
    bounded(
        "connect",
        etcd_client::Client::connect(endpoints.to_vec(), Some(options)),
    )
    .await
}
