//! The message size limit every idem process (SDK, broker, coordinator) shares.

/// The largest gRPC message any idem process sends in an answer or accepts in one: the
/// SDK, brokers (answers and follower fetches) and coordinators all use it, so no answer
/// is ever larger than what its receiver decodes. A Fetch answer is kept far below it by
/// its byte budget; Metadata (about 60 bytes a partition) and ListTransactions (about 120
/// bytes a transactional id) fit around a million entries.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024 * 1024;
