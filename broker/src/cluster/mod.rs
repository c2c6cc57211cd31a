//! The broker's place in a cluster: its registration in etcd bound to a lease, and the
//! catalog of topics and partition states every broker reads from etcd.

pub mod assignment;
pub mod catalog;
pub mod data_dir_id;
pub mod isr_exit;
pub mod membership;
pub mod reassignment;
pub mod reassignment_request;
