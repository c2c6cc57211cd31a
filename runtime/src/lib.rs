//! What every idem server process (broker, coordinator) shares: etcd calls with a
//! deadline, and the lease keep-alive's way of telling an expired lease from an
//! unreachable etcd, and a limit on how often a repeating failure is logged.

pub mod etcd_call;
pub mod lease;
pub mod log_limit;
