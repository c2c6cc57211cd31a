//! Chaos runs against real processes (issue 23): a randomized, seeded workload of every
//! client kind writes its history while a nemesis breaks the cluster; the checker of
//! `idem-chaos` then judges the history alone. The workload and nemesis live here, beside
//! the harness that starts and breaks the processes; the history format and the checker
//! live in `chaos/`, which knows nothing of processes. The same workload and checker
//! also run against the compose cluster's containers, with a nemesis of Docker faults
//! (`container_run.rs`).

pub mod container_nemesis;
pub mod container_run;
pub mod kafka_producer;
pub mod lifecycle;
pub mod membership;
pub mod nemesis;
pub mod pipeline;
pub mod recorder;
pub mod run;
pub mod soak;
pub mod verify;
pub mod workload;
