//! What every idem server process (broker, coordinator) shares: etcd calls with a
//! deadline, and the lease keep-alive's way of telling an expired lease from an
//! unreachable etcd.

pub mod etcd_call;
pub mod lease;
