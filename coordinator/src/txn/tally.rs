//! What the coordinator's gauges say of the transactions it holds (pure): how many are
//! in each state, and how long the oldest open one has been open (what a stuck last
//! stable offset traces back to). Counted in place under each slice's lock, so the
//! metrics duty copies nothing.

use std::collections::BTreeMap;

use crate::txn::decide::TxnMetadata;
use crate::txn::state::TxnState;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnTally {
    /// By state name; every state present, 0 when none is in it (a gauge must fall
    /// back to 0, not keep its last value).
    pub by_state: BTreeMap<&'static str, u64>,
    /// Age of the oldest Ongoing transaction (0: none open).
    pub oldest_open_ms: i64,
}

impl Default for TxnTally {
    fn default() -> Self {
        TxnTally {
            by_state: TxnState::ALL.iter().map(|s| (s.name(), 0)).collect(),
            oldest_open_ms: 0,
        }
    }
}

impl TxnTally {
    /// Counts `txn`, as of `now_ms`.
    pub fn add(&mut self, txn: &TxnMetadata, now_ms: i64) {
        *self.by_state.entry(txn.state.name()).or_default() += 1;
        if txn.state == TxnState::Ongoing {
            self.oldest_open_ms = self.oldest_open_ms.max(now_ms - txn.txn_start_ms);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn txn(state: TxnState, start: i64) -> TxnMetadata {
        TxnMetadata {
            txn_start_ms: start,
            ..TxnMetadata::for_tests("t", 1, 0, state)
        }
    }

    #[test]
    fn given_transactions_then_each_state_is_counted_and_the_oldest_open_one_aged() {
        let mut tally = TxnTally::default();
        for t in [
            txn(TxnState::Ongoing, 1_000),
            txn(TxnState::Ongoing, 4_000),
            txn(TxnState::CompleteCommit, 0),
            // Not open: its age does not count.
            txn(TxnState::PrepareAbort, 0),
        ] {
            tally.add(&t, 10_000);
        }
        assert_eq!(tally.by_state["Ongoing"], 2);
        assert_eq!(tally.by_state["CompleteCommit"], 1);
        assert_eq!(tally.by_state["PrepareAbort"], 1);
        assert_eq!(tally.by_state["Empty"], 0);
        assert_eq!(tally.by_state.len(), TxnState::ALL.len());
        assert_eq!(tally.oldest_open_ms, 9_000);
    }
}
