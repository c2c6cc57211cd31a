//! Test harness that runs the real thing: `idem-broker` processes on 127.0.0.1 ports
//! with their own data dirs, killed with SIGKILL, stopped with SIGTERM, restarted;
//! and a TCP proxy that loses responses or request bodies, or holds a request back
//! to deliver it late, on purpose. Every spawned process is reaped on drop, even when a
//! test panics.

pub mod binaries;
pub mod broker_process;
pub mod cluster;
pub mod proxy;
pub mod raw;
pub mod replicas;
pub mod sdk;
pub mod signal;

pub use broker_process::BrokerProcess;
pub use cluster::Cluster;
pub use proxy::FaultyProxy;
pub mod etcd;
