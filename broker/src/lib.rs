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
