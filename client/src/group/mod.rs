//! Consumer groups from the member's side (issue 26, docs/groups.md). The coordinator
//! decides who owns what; a member heartbeats, follows the answers and reports what it
//! owns.
//!
//! - [`member`]: the member's state and the events its answers produce (pure).
//! - [`committer`]: the member's commits, sent one at a time in the order asked for.
//! - [`consumer`]: [`GroupConsumer`](consumer::GroupConsumer), a consumer the group
//!   assigns partitions to.

pub mod committer;
pub mod consumer;
pub mod member;
