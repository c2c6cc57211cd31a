//! The idem transaction coordinator (issue 5, in progress): it owns transactional ids,
//! persists every transaction state change to `__transaction_state` before acting on
//! it, writes commit/abort markers and fences zombies. So far: the transaction state
//! machine's legal transitions, as a pure module.

pub mod txn;
