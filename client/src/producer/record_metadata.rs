//! What a producer answers for an acknowledged record: where it landed.

use std::sync::Arc;

/// Where an acknowledged record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    pub topic: Arc<str>,
    pub partition: i32,
    /// The record's offset; -1 if the broker answered a duplicate without offsets.
    pub offset: i64,
}
