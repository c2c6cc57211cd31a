//! The broker's place in a cluster: its registration in etcd bound to a lease, and the
//! catalog of topics and partition states every broker reads from etcd, and the duties
//! each broker performs on it (failover, ISR upkeep, reassignment).

pub mod assignment;
pub mod catalog;
pub mod cluster_catalog;
pub mod cluster_id;
pub mod data_dir_id;
pub mod election;
pub mod isr_exit;
pub mod isr_upkeep;
pub mod membership;
pub mod partition_view;
pub mod reassignment;
pub mod reassignment_request;
