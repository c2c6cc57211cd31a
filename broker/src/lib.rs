//! idem broker: partition logs, producer state, and the gRPC services over them.

pub mod cluster;
pub mod config;
pub mod coordinators;
pub mod error;
pub mod fsutil;
pub mod internal_topics;
pub mod log;
pub mod partition;
pub mod producer_state;
pub mod replication;
pub mod server;
pub mod service;
pub mod topic_spec;
pub mod topics;
pub mod txn_index;

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
