//! End-to-end tests against real `idem-broker` processes over gRPC. Modules are named
//! by the guarantee they defend.

mod bad_config;
mod bad_input;
mod bench;
mod bootstrap_list;
mod chaos;
mod cli;
mod cluster_identity;
mod cluster_topics;
mod compaction;
mod consumer_groups;
mod delivery;
mod etcd_faults;
mod failover;
mod groups;
mod grpc_tooling;
mod health;
mod idempotence;
mod inbox;
mod internal_topics;
mod membership;
mod network_partitions;
mod pipeline;
mod producer_ids;
mod reassignment;
mod replication;
mod retention;
mod storage;
mod topic_config;
mod topic_deletion;
mod topic_growth;
mod transactions;
mod unclean_election;
mod wide_pipeline;
mod wide_retention;
mod wide_topics;
