//! Replication: the pure rules of a partition's replica set (high watermark, ISR) and
//! the followers' fetchers, one per leader.

pub mod epoch_history;
pub mod fetcher;
pub mod fetchers;
pub mod following;
pub mod replica_set;
