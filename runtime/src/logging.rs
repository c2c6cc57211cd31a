//! Where a server process's logs go: `tracing` events to stderr (stdout carries only
//! the banner scripts and tests read), filtered by `IDEM_LOG` (an `EnvFilter`, e.g.
//! `info,idem_broker::replication=debug`) and by `default_filter` without it.

/// Installs the process's subscriber; call once, first thing in `main`.
pub fn init(default_filter: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("IDEM_LOG")
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
}
