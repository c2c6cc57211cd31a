//! The transaction log, `__transaction_state`: how its records look ([`record`]), the
//! one writer per owned partition that fences every earlier owner ([`writer`]), how a
//! partition is read back on takeover ([`loader`]) and how the topic comes to exist
//! ([`topic`]).

pub mod loader;
pub mod record;
pub mod topic;
pub mod writer;
