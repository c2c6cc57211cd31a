//! The group coordinator's pure rules (issue 26, KIP-848 style): which member gets which
//! partitions, and how a member moves to its share without two members ever owning one
//! partition. The shell that persists groups in `__consumer_offsets` and answers
//! heartbeats builds on these.
//!
//! - [`assignor`]: the group's target assignment (uniform, sticky).
//! - [`reconcile`]: one member's steps from its current assignment to its target.
//! - [`membership`]: a heartbeat, a leave or a removal turns one group into the next.
//! - [`offsets`]: which commits a group accepts, and offsets pending in transactions.
//! - [`records`]: the records of `__consumer_offsets`.
//!
//! The design, and what is still to build: docs/groups.md.

pub mod assignor;
pub mod membership;
pub mod offsets;
pub mod reconcile;
pub mod records;
