//! Replication: the pure rules of a partition's replica set (high watermark, ISR) and
//! the follower's fetch loop.

pub mod epoch_history;
pub mod follower;
pub mod replica_set;
