//! The states of a transactional id and the transitions between them: exactly the
//! ones Kafka's `TransactionState` allows, and no other. The coordinator checks every
//! change against this table before persisting it (`txn::change`), so a bug elsewhere
//! cannot, say, complete a commit that was never prepared.

/// Where a transactional id stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TxnState {
    /// No transaction open (new id, or after its producer initialised).
    Empty,
    /// A transaction is open: partitions were added and data may be written.
    Ongoing,
    /// The producer asked to commit; markers are being written.
    PrepareCommit,
    /// The producer (or a timeout, or a fencing) asked to abort; markers are being written.
    PrepareAbort,
    /// Every commit marker is written.
    CompleteCommit,
    /// Every abort marker is written.
    CompleteAbort,
    /// The id expired and is being removed.
    Dead,
    /// A newer producer instance (or a timeout) must fence an open transaction: its
    /// epoch is bumped and the transaction is aborted next.
    PrepareEpochFence,
}

impl TxnState {
    pub const ALL: [TxnState; 8] = [
        TxnState::Empty,
        TxnState::Ongoing,
        TxnState::PrepareCommit,
        TxnState::PrepareAbort,
        TxnState::CompleteCommit,
        TxnState::CompleteAbort,
        TxnState::Dead,
        TxnState::PrepareEpochFence,
    ];

    /// The states a transactional id may be in right before entering `self`.
    pub fn valid_previous(self) -> &'static [TxnState] {
        use TxnState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[Ongoing, PrepareEpochFence],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteCommit, CompleteAbort],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// The state's name as the transaction log and the admin API spell it (Kafka's).
    pub fn name(self) -> &'static str {
        match self {
            TxnState::Empty => "Empty",
            TxnState::Ongoing => "Ongoing",
            TxnState::PrepareCommit => "PrepareCommit",
            TxnState::PrepareAbort => "PrepareAbort",
            TxnState::CompleteCommit => "CompleteCommit",
            TxnState::CompleteAbort => "CompleteAbort",
            TxnState::Dead => "Dead",
            TxnState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    /// The state named `name` (exactly as [`TxnState::name`] spells it).
    pub fn from_name(name: &str) -> Option<TxnState> {
        TxnState::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether moving from `self` to `next` is legal.
    pub fn can_transition_to(self, next: TxnState) -> bool {
        next.valid_previous().contains(&self)
    }

    /// What writing this prepared outcome's markers completes it into; `None` for a
    /// state that is not a prepared outcome.
    pub fn completion(self) -> Option<TxnState> {
        match self {
            TxnState::PrepareCommit => Some(TxnState::CompleteCommit),
            TxnState::PrepareAbort => Some(TxnState::CompleteAbort),
            _ => None,
        }
    }

    /// Markers are being written: the id answers `CONCURRENT_TRANSACTIONS` to the
    /// producer until they are.
    pub fn is_completing(self) -> bool {
        matches!(
            self,
            TxnState::PrepareCommit | TxnState::PrepareAbort | TxnState::PrepareEpochFence
        )
    }

    /// No transaction is open or finishing: a new one may begin.
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            TxnState::Empty | TxnState::CompleteCommit | TxnState::CompleteAbort
        )
    }
}

#[cfg(test)]
mod tests {
    use super::TxnState::{self, *};

    /// Every legal (from, to) pair, spelled out independently of `valid_previous`.
    const LEGAL: &[(TxnState, TxnState)] = &[
        (Empty, Empty),
        (CompleteCommit, Empty),
        (CompleteAbort, Empty),
        (Ongoing, Ongoing),
        (Empty, Ongoing),
        (CompleteCommit, Ongoing),
        (CompleteAbort, Ongoing),
        (Ongoing, PrepareCommit),
        (Ongoing, PrepareAbort),
        (PrepareEpochFence, PrepareAbort),
        (PrepareCommit, CompleteCommit),
        (PrepareAbort, CompleteAbort),
        (Empty, Dead),
        (CompleteCommit, Dead),
        (CompleteAbort, Dead),
        (Ongoing, PrepareEpochFence),
    ];

    #[test]
    fn exactly_the_listed_transitions_are_legal_out_of_all_64() {
        let mut legal = 0;
        for from in TxnState::ALL {
            for to in TxnState::ALL {
                let expected = LEGAL.contains(&(from, to));
                assert_eq!(from.can_transition_to(to), expected, "{from:?} -> {to:?}");
                legal += usize::from(expected);
            }
        }
        assert_eq!(legal, LEGAL.len());
    }

    #[test]
    fn a_commit_cannot_complete_unprepared_nor_turn_into_an_abort() {
        assert!(!Ongoing.can_transition_to(CompleteCommit));
        assert!(!PrepareCommit.can_transition_to(PrepareAbort));
        assert!(!PrepareCommit.can_transition_to(CompleteAbort));
        assert!(!PrepareAbort.can_transition_to(CompleteCommit));
    }

    #[test]
    fn a_fenced_transaction_can_only_be_aborted() {
        let after_fence: Vec<TxnState> = TxnState::ALL
            .into_iter()
            .filter(|s| PrepareEpochFence.can_transition_to(*s))
            .collect();
        assert_eq!(after_fence, vec![PrepareAbort]);
    }

    #[test]
    fn every_state_name_reads_back_as_that_state_and_nothing_else_does() {
        for s in TxnState::ALL {
            assert_eq!(TxnState::from_name(s.name()), Some(s));
        }
        assert_eq!(TxnState::from_name("ongoing"), None);
        assert_eq!(TxnState::from_name(""), None);
    }

    #[test]
    fn only_prepared_outcomes_complete_and_each_into_a_legal_next_state() {
        for s in TxnState::ALL {
            match s.completion() {
                Some(done) => assert!(s.can_transition_to(done) && done.is_settled(), "{s:?}"),
                None => assert!(!matches!(s, PrepareCommit | PrepareAbort), "{s:?}"),
            }
        }
        assert_eq!(PrepareCommit.completion(), Some(CompleteCommit));
        assert_eq!(PrepareEpochFence.completion(), None, "it aborts first");
    }

    #[test]
    fn dead_is_final() {
        assert!(TxnState::ALL
            .into_iter()
            .all(|s| !Dead.can_transition_to(s)));
    }

    #[test]
    fn settled_states_are_exactly_those_a_new_transaction_may_start_from() {
        for s in TxnState::ALL {
            assert_eq!(
                s.is_settled(),
                s != Ongoing && s.can_transition_to(Ongoing),
                "{s:?}"
            );
        }
        assert_eq!(
            TxnState::ALL
                .into_iter()
                .filter(|s| s.is_completing())
                .collect::<Vec<_>>(),
            vec![PrepareCommit, PrepareAbort, PrepareEpochFence]
        );
    }
}
