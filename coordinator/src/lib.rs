//! **idem-coordinator**, the transaction coordinator. Depends on idem-proto,
//! idem-runtime, idem-pidstore and idem-client (to talk to brokers), never on the broker.
//! Every crate's place: docs/architecture.md, "Crates (workspace)".
//!
//! The idem transaction coordinator (docs/transactions.md): it owns transactional ids
//! through the partitions of `__transaction_state` it claims, persists every
//! transaction state change there before acting on it, opens transactions in
//! partitions with BEGIN markers, ends them with COMMIT/ABORT markers, times them out
//! and fences zombies.
//!
//! - [`txn`]: the pure rules (states, the decider).
//! - [`log`]: the transaction log's records, writer and loader.
//! - [`ownership`]: which log partitions this coordinator owns (etcd or solo).
//! - [`topic_catalog`]: whether a topic exists, asked of the catalog (etcd or solo).
//! - [`core`]: the shell that carries the decider's effects out.
//! - [`group`]: the group coordinator (consumer groups in `__consumer_offsets`, the
//!   same slices as the transaction log), and [`group_service`] its gRPC service.
//! - [`service`], [`server`], [`config`]: the gRPC service and the process.

mod claim_slots;
pub mod clock;
pub mod config;
pub mod core;
pub mod error;
pub mod group;
pub mod group_service;
pub mod log;
pub mod ownership;
pub mod producer_ids;
mod retry;
pub mod server;
pub mod service;
pub mod topic_catalog;
pub mod txn;

pub use config::CoordinatorConfig;
pub use error::CoordinatorError;
pub use server::BoundCoordinator;
