//! **idem-broker**, the broker: logs, producer state, partitions, replication, cluster
//! membership, gRPC services. Depends on idem-proto, idem-runtime and idem-pidstore, never
//! on the coordinator (they meet only through the wire).
//! Every crate's place: docs/architecture.md, "Crates (workspace)".

pub mod cluster;
pub mod config;
pub mod coordinators;
pub mod error;
pub mod fsutil;
pub mod internal_topics;
pub mod kafka;
pub mod log;
pub mod partition;
pub mod partition_health;
pub mod producer_id_cap;
pub mod producer_state;
pub mod quota;
pub mod replication;
pub mod retention_flags;
pub mod server;
pub mod service;
pub mod topic_config;
pub mod topic_id;
pub mod topic_spec;
pub mod topics;
pub mod txn_index;
