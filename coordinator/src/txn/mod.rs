//! Transactions as pure rules: the states a transactional id can be in and which
//! changes between them are legal.

pub mod change;
pub mod decide;
pub mod state;
pub mod tally;
