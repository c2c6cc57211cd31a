//! Consumer groups (issue 26): members share a topic's partitions without two ever
//! owning one, committed offsets are kept and refused by the rules (and expire once a
//! group is empty), and both survive the coordinator that owns the group — each
//! proved against real brokers, coordinators and etcd.

mod assignors;
mod lost_answers;
mod membership;
mod offset_expiry;
mod offsets;
mod offsets_in_txn;
mod session_expiry;
mod static_and_growth;
mod takeover;
