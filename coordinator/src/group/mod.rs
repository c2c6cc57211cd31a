//! The group coordinator (issue 26, KIP-848 style): pure rules for which member gets
//! which partitions, and how a member moves to its share without two members ever
//! owning one partition; and the shell that keeps groups in `__consumer_offsets` and
//! answers their requests.
//!
//! - [`assignor`]: the group's target assignment (uniform, sticky): the default.
//! - [`range_assignor`]: the `range` assignor (contiguous ranges, co-partitioned).
//! - [`server_assignor`]: which assignor a group uses, from its members' requests.
//! - [`reconcile`]: one member's steps from its current assignment to its target.
//! - [`classic`]: Kafka's classic protocol (JoinGroup, SyncGroup, Heartbeat,
//!   LeaveGroup) for members of the same groups.
//! - [`membership`]: a heartbeat, a leave or a removal turns one group into the next.
//! - [`offsets`]: which commits a group accepts, and offsets pending in transactions.
//! - [`expiry`]: which offsets of an empty group have expired, and when a group goes.
//! - [`lag`]: how far each group's committed offsets are behind, per topic.
//! - [`records`]: the records of `__consumer_offsets`.
//! - [`slice`]: one `__consumer_offsets` partition's state, and its replay from the log.
//! - [`load`]: reading a claimed partition back (the load, and the tail's reads).
//! - [`sessions`]: members' session deadlines.
//! - [`txn_offsets`]: TxnOffsetCommit's transactional batch and its sequence rule.
//! - [`serve`]: the shell: slices per claim, requests, session and offset expiry.
//!
//! The design, and what is still to build: docs/groups.md.

pub mod assignor;
pub mod classic;
pub mod classic_member;
pub mod expiry;
pub mod lag;
pub mod load;
pub mod membership;
pub mod offset_delete;
pub mod offsets;
pub mod range_assignor;
pub mod reconcile;
pub mod records;
pub mod serve;
pub mod server_assignor;
pub mod sessions;
pub mod slice;
pub mod txn_offsets;
