//! The idem transaction coordinator (docs/transactions.md): it owns transactional ids
//! through the partitions of `__transaction_state` it claims, persists every
//! transaction state change there before acting on it, opens transactions in
//! partitions with BEGIN markers, ends them with COMMIT/ABORT markers, times them out
//! and fences zombies.
//!
//! - [`txn`]: the pure rules (states, the decider).
//! - [`log`]: the transaction log's records, writer and loader.
//! - [`ownership`]: which log partitions this coordinator owns (etcd or solo).
//! - [`core`]: the shell that carries the decider's effects out.
//! - [`service`], [`server`], [`config`]: the gRPC service and the process.

pub mod clock;
pub mod config;
pub mod core;
pub mod error;
pub mod log;
pub mod ownership;
pub mod producer_ids;
pub mod server;
pub mod service;
pub mod txn;

pub use config::CoordinatorConfig;
pub use error::CoordinatorError;
pub use server::BoundCoordinator;

/// Resolves on SIGINT or SIGTERM.
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
