//! Consumer groups from the member's side (issue 26, docs/groups.md). The coordinator
//! decides who owns what; a member heartbeats, follows the answers and reports what it
//! owns.
//!
//! - [`member`]: the member's state and the events its answers produce (pure).
//! - [`consumer`]: [`GroupConsumer`](consumer::GroupConsumer), a consumer the group
//!   assigns partitions to.

pub mod consumer;
pub mod member;
