//! The broker's place in a cluster: its registration in etcd, bound to a lease.

pub mod data_dir_id;
pub mod membership;
