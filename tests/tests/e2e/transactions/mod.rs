//! Transactions (issue 5): writes to several partitions become visible all together or
//! not at all, zombies are fenced, abandoned transactions are rolled back, and no
//! transaction can hang — each proved against real brokers, coordinators and etcd.

mod bad_requests;
mod begin_failover;
mod chaos;
mod coordinator_crash;
mod deleted_topic;
mod hanging;
mod id_expiration;
mod late_marker;
mod marker_failover;
mod next_transaction;
mod offsets_in_txn;
mod operator_cli;
mod paused_coordinator;
mod pipelined_commit;
mod producer_renewal;
mod producer_timeout;
mod seed_example;
mod slices_cli;
mod zombie_fencing;
