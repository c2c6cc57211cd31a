//! **idem-tests**, the harness that runs and breaks real processes, and the end-to-end
//! and chaos tests. Depends on every crate.
//! Every crate's place: docs/architecture.md, "Crates (workspace)".
//!
//! Test harness that runs the real thing: `idem-broker` and `idem-coordinator` processes on 127.0.0.1 ports
//! (or each on its own host of a lab network of namespaces) with their own data dirs, killed with SIGKILL, stopped with SIGTERM, restarted;
//! and a TCP proxy that loses responses or request bodies, or holds a request back
//! to deliver it late, on purpose. Every spawned process is reaped on drop, even when a
//! test panics.

pub mod binaries;
pub mod chaos;
pub mod cli;
pub mod cluster;
pub mod compose;
pub mod link;
pub mod log_tail;
pub mod netns;
pub mod otlp_collector;
pub mod postgres;
pub mod processor;
pub mod proxy;
pub mod raw;
pub mod replicas;
pub mod scrape;
pub mod sdk;
pub mod segments;
pub mod server_process;
pub mod serving;
pub mod signal;
pub mod tls;
pub mod txn;
pub mod txn_workload;
pub mod wait;

pub use cluster::Cluster;
pub use proxy::FaultyProxy;
pub use server_process::{BrokerProcess, CoordinatorProcess, ServerProcess};
pub mod etcd;
pub mod groups;
pub mod kafka_clients;
pub mod kafka_groups;
