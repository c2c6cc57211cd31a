//! The rules every persisted change of an id's metadata keeps, whatever request made
//! it. The decider is written to keep them and its tests check that it does; the
//! coordinator checks them again before each append, so that a bug in a decision is
//! refused at the log instead of becoming the durable state of a transaction (say, a
//! commit completed that was never prepared, or a fenced epoch brought back).

use crate::txn::decide::TxnMetadata;
use crate::txn::state::TxnState;

/// A change the log must never hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IllegalChange {
    #[error("{from} -> {to} is not a transition the states allow")]
    Transition {
        from: &'static str,
        to: &'static str,
    },
    #[error("a new transactional id must start Empty, not {0}")]
    NewIdNotEmpty(&'static str),
    #[error("a previous outcome may only be pending on an Ongoing transaction, not {0}")]
    PendingOutsideOngoing(&'static str),
    #[error("producer {producer_id}'s epoch went back from {from} to {to}")]
    EpochWentBack {
        producer_id: i64,
        from: i16,
        to: i16,
    },
}

/// Checks that `next` may follow `before` (`None` for an id the coordinator does not
/// hold) in the transaction log.
pub fn check_change(before: Option<&TxnMetadata>, next: &TxnMetadata) -> Result<(), IllegalChange> {
    if next.pending_end.is_some() && next.state != TxnState::Ongoing {
        return Err(IllegalChange::PendingOutsideOngoing(next.state.name()));
    }
    let Some(before) = before else {
        return match next.state {
            TxnState::Empty => Ok(()),
            other => Err(IllegalChange::NewIdNotEmpty(other.name())),
        };
    };
    // A transaction begun behind its predecessor's outcome takes two steps at once
    // (Prepare* -> Complete* -> Ongoing), the Complete* being what is pending.
    let began_behind = before.pending_end.is_none()
        && next.pending_end.is_some()
        && before
            .state
            .completion()
            .is_some_and(|done| done.can_transition_to(next.state));
    if !before.state.can_transition_to(next.state) && !began_behind {
        return Err(IllegalChange::Transition {
            from: before.state.name(),
            to: next.state.name(),
        });
    }
    if next.producer_id == before.producer_id && next.producer_epoch < before.producer_epoch {
        return Err(IllegalChange::EpochWentBack {
            producer_id: next.producer_id,
            from: before.producer_epoch,
            to: next.producer_epoch,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::decide::{PendingEnd, TopicPartition};

    fn meta(state: TxnState, epoch: i16) -> TxnMetadata {
        TxnMetadata::for_tests("tx", 7, epoch, state)
    }

    fn pending(commit: bool) -> Option<PendingEnd> {
        Some(PendingEnd {
            commit,
            partitions: [TopicPartition {
                topic: "orders".into(),
                partition: 0,
            }]
            .into(),
        })
    }

    #[test]
    fn every_transition_of_the_table_is_allowed_and_no_other() {
        for from in TxnState::ALL {
            for to in TxnState::ALL {
                let result = check_change(Some(&meta(from, 1)), &meta(to, 1));
                assert_eq!(
                    result.is_ok(),
                    from.can_transition_to(to),
                    "{from:?} -> {to:?}"
                );
            }
        }
    }

    #[test]
    fn a_commit_that_was_never_prepared_is_refused() {
        assert_eq!(
            check_change(
                Some(&meta(TxnState::Ongoing, 1)),
                &meta(TxnState::CompleteCommit, 2)
            ),
            Err(IllegalChange::Transition {
                from: "Ongoing",
                to: "CompleteCommit"
            })
        );
    }

    #[test]
    fn a_transaction_may_begin_behind_a_prepared_outcome_only_with_it_pending() {
        let prepared = meta(TxnState::PrepareCommit, 2);
        let behind = TxnMetadata {
            pending_end: pending(true),
            ..meta(TxnState::Ongoing, 2)
        };
        assert_eq!(check_change(Some(&prepared), &behind), Ok(()));
        // Without the pending outcome, the commit's markers would be forgotten.
        assert!(check_change(Some(&prepared), &meta(TxnState::Ongoing, 2)).is_err());
        // Clearing the pending outcome keeps the transaction.
        assert_eq!(
            check_change(Some(&behind), &meta(TxnState::Ongoing, 2)),
            Ok(())
        );
        // An outcome pends only on a transaction that began behind it.
        let on_complete = TxnMetadata {
            pending_end: pending(false),
            ..meta(TxnState::CompleteAbort, 2)
        };
        assert_eq!(
            check_change(Some(&meta(TxnState::PrepareAbort, 2)), &on_complete),
            Err(IllegalChange::PendingOutsideOngoing("CompleteAbort"))
        );
    }

    #[test]
    fn an_epoch_never_goes_back_for_the_same_producer_id() {
        assert_eq!(
            check_change(
                Some(&meta(TxnState::Ongoing, 5)),
                &meta(TxnState::PrepareAbort, 4)
            ),
            Err(IllegalChange::EpochWentBack {
                producer_id: 7,
                from: 5,
                to: 4
            })
        );
        // A fresh producer id starts again at epoch 0.
        let renewed = TxnMetadata {
            producer_id: 8,
            ..meta(TxnState::Empty, 0)
        };
        assert_eq!(
            check_change(Some(&meta(TxnState::CompleteCommit, 32_766)), &renewed),
            Ok(())
        );
    }

    #[test]
    fn a_new_id_starts_empty() {
        assert_eq!(check_change(None, &meta(TxnState::Empty, 0)), Ok(()));
        assert_eq!(
            check_change(None, &meta(TxnState::Ongoing, 0)),
            Err(IllegalChange::NewIdNotEmpty("Ongoing"))
        );
    }
}
