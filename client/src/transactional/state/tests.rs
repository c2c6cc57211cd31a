//! Every state against every call, then the flows: commit, abort, failures, fencing,
//! unanswered EndTxn, generations.

use idem_proto::ErrorCode;

use super::*;

const PID: ProducerIdAndEpoch = ProducerIdAndEpoch {
    producer_id: 11,
    producer_epoch: 4,
};

/// The test producer at `producer_epoch`, as EndTxn moves it on.
fn epoch(producer_epoch: i16) -> ProducerIdAndEpoch {
    ProducerIdAndEpoch {
        producer_epoch,
        ..PID
    }
}

fn broker(code: ErrorCode) -> ClientError {
    ClientError::broker(code as i32, "")
}

fn unanswered() -> ClientError {
    ClientError::Transport(tonic::Status::unavailable("no answer"))
}

/// A machine brought to `state` by legal calls only.
fn machine_in(state: TxnState) -> TxnMachine {
    let mut m = TxnMachine::default();
    let ready = |m: &mut TxnMachine| {
        m.start_init().expect("init");
        m.init_done(Ok(PID)).expect("init done");
    };
    match state {
        TxnState::Uninitialized => {}
        TxnState::Initializing => m.start_init().expect("init"),
        TxnState::Ready => ready(&mut m),
        TxnState::InTransaction => {
            ready(&mut m);
            m.begin().expect("begin");
        }
        TxnState::Committing => {
            ready(&mut m);
            let g = m.begin().expect("begin");
            m.will_register(g).expect("register");
            m.start_commit().expect("commit");
        }
        TxnState::Aborting => {
            ready(&mut m);
            let g = m.begin().expect("begin");
            m.will_register(g).expect("register");
            m.start_abort().expect("abort");
        }
        TxnState::AbortableError => {
            ready(&mut m);
            m.begin().expect("begin");
            m.fail(broker(ErrorCode::NotEnoughReplicas));
        }
        TxnState::FatalError => {
            ready(&mut m);
            m.begin().expect("begin");
            m.fail(broker(ErrorCode::ProducerFenced));
        }
        TxnState::Closed => {
            ready(&mut m);
            m.close();
        }
    }
    assert_eq!(m.state(), state);
    m
}

const ALL: [TxnState; 9] = [
    TxnState::Uninitialized,
    TxnState::Initializing,
    TxnState::Ready,
    TxnState::InTransaction,
    TxnState::Committing,
    TxnState::Aborting,
    TxnState::AbortableError,
    TxnState::FatalError,
    TxnState::Closed,
];

/// How a refused call failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    Illegal,
    /// The stored abortable error.
    Abortable,
    /// The stored fatal error.
    Fenced,
    Closed,
}

fn refusal(e: &ClientError) -> Refusal {
    match e {
        ClientError::IllegalState(_) => Refusal::Illegal,
        ClientError::Closed => Refusal::Closed,
        e if e.code() == Some(ErrorCode::ProducerFenced) => Refusal::Fenced,
        e if e.code() == Some(ErrorCode::NotEnoughReplicas) => Refusal::Abortable,
        other => panic!("unexpected refusal {other:?}"),
    }
}

fn check(
    state: TxnState,
    call: &str,
    result: Result<(), ClientError>,
    after: TxnState,
    expected: Result<TxnState, Refusal>,
) {
    match (result, expected) {
        (Ok(()), Ok(next)) => assert_eq!(after, next, "{state:?}.{call}"),
        (Err(e), Err(r)) => {
            assert_eq!(refusal(&e), r, "{state:?}.{call}: {e}");
            assert_eq!(after, state, "{state:?}.{call} refused must change nothing");
        }
        (got, want) => panic!("{state:?}.{call}: got {got:?}, want {want:?}"),
    }
}

/// What one call does in a state: the next state, or how it is refused.
type Expect = Result<TxnState, Refusal>;
/// A state and what init, begin, send, commit and abort do in it.
type Row = (TxnState, Expect, Expect, Expect, Expect, Expect);

#[test]
fn every_state_against_every_call() {
    use Refusal::*;
    use TxnState as S;
    // (state, init, begin, send, commit, abort)
    let table: [Row; 9] = [
        (
            S::Uninitialized,
            Ok(S::Initializing),
            Err(Illegal),
            Err(Illegal),
            Err(Illegal),
            Err(Illegal),
        ),
        (
            S::Initializing,
            Err(Illegal),
            Err(Illegal),
            Err(Illegal),
            Err(Illegal),
            Err(Illegal),
        ),
        (
            S::Ready,
            Err(Illegal),
            Ok(S::InTransaction),
            Err(Illegal),
            Err(Illegal),
            Err(Illegal),
        ),
        (
            S::InTransaction,
            Err(Illegal),
            Err(Illegal),
            Ok(S::InTransaction),
            Ok(S::Committing),
            Ok(S::Aborting),
        ),
        (
            S::Committing,
            Err(Illegal),
            Err(Illegal),
            Err(Illegal),
            Ok(S::Committing),
            Err(Illegal),
        ),
        (
            S::Aborting,
            Err(Illegal),
            Err(Illegal),
            Err(Illegal),
            Err(Illegal),
            Ok(S::Aborting),
        ),
        (
            S::AbortableError,
            Err(Abortable),
            Err(Abortable),
            Err(Abortable),
            Err(Abortable),
            Ok(S::Aborting),
        ),
        (
            S::FatalError,
            Err(Fenced),
            Err(Fenced),
            Err(Fenced),
            Err(Fenced),
            Err(Fenced),
        ),
        (
            S::Closed,
            Err(Closed),
            Err(Closed),
            Err(Closed),
            Err(Closed),
            Err(Closed),
        ),
    ];
    assert_eq!(table.map(|row| row.0), ALL);
    for (state, init, begin, send, commit, abort) in table {
        let mut m = machine_in(state);
        let r = m.start_init();
        check(state, "init", r, m.state(), init);
        let mut m = machine_in(state);
        let r = m.begin().map(|_| ());
        check(state, "begin", r, m.state(), begin);
        let m = machine_in(state);
        let r = m.check_send(None).map(|_| ());
        check(state, "send", r, m.state(), send);
        let mut m = machine_in(state);
        let r = m.start_commit().map(|_| ());
        check(state, "commit", r, m.state(), commit);
        let mut m = machine_in(state);
        let r = m.start_abort().map(|_| ());
        check(state, "abort", r, m.state(), abort);
    }
}

#[test]
fn a_failed_init_can_be_retried_unless_fatal() {
    let mut m = machine_in(TxnState::Initializing);
    let e = m.init_done(Err(broker(ErrorCode::CoordinatorNotAvailable)));
    assert!(e.is_err());
    assert_eq!(m.state(), TxnState::Uninitialized);
    assert!(m.producer().is_none());
    m.start_init().expect("init again");
    let e = m
        .init_done(Err(broker(ErrorCode::InvalidTransactionTimeout)))
        .expect_err("fatal");
    assert_eq!(e.code(), Some(ErrorCode::InvalidTransactionTimeout));
    assert_eq!(m.state(), TxnState::FatalError);
}

#[test]
fn commit_adopts_the_answered_epoch_and_the_next_transaction_uses_it() {
    let mut m = machine_in(TxnState::InTransaction);
    let (g, p) = m.check_send(None).expect("send");
    assert_eq!(p, PID);
    m.will_register(g).expect("register");
    let plan = m.start_commit().expect("commit");
    assert_eq!(
        plan,
        EndPlan {
            producer: PID,
            needs_end_txn: true
        }
    );
    m.end_done(true, Ok(Some(epoch(5)))).expect("committed");
    assert_eq!(m.state(), TxnState::Ready);
    assert_eq!(m.producer().map(|p| p.producer_epoch), Some(5));
    assert_eq!(m.producer().map(|p| p.producer_id), Some(PID.producer_id));
    let g2 = m.begin().expect("begin");
    assert!(g2 > g);
    let plan = m.start_commit().expect("commit");
    assert!(
        !plan.needs_end_txn,
        "nothing was registered in the second transaction"
    );
    m.end_done(true, Ok(None)).expect("local commit");
    assert_eq!(m.producer().map(|p| p.producer_epoch), Some(5));
}

#[test]
fn a_send_of_an_ended_transaction_never_joins_the_next() {
    let mut m = machine_in(TxnState::InTransaction);
    let (g, _) = m.check_send(None).expect("send");
    m.start_commit().expect("commit");
    m.end_done(true, Ok(None)).expect("committed");
    m.begin().expect("next transaction");
    assert!(matches!(
        m.check_send(Some(g)),
        Err(ClientError::IllegalState(_))
    ));
    assert!(matches!(
        m.will_register(g),
        Err(ClientError::IllegalState(_))
    ));
}

#[test]
fn a_failed_send_refuses_commit_and_allows_abort() {
    let mut m = machine_in(TxnState::InTransaction);
    let (g, _) = m.check_send(None).expect("send");
    m.will_register(g).expect("register");
    let reported = m.fail(ClientError::DeliveryTimeout {
        attempts: 2,
        last_error: None,
        possibly_written: true,
    });
    assert!(matches!(reported, ClientError::TxnAbortable(_)));
    assert_eq!(reported.txn_class(), TxnErrorClass::Abortable);
    assert_eq!(m.state(), TxnState::AbortableError);
    assert!(matches!(
        m.start_commit(),
        Err(ClientError::TxnAbortable(_))
    ));
    assert!(matches!(
        m.check_send(None),
        Err(ClientError::TxnAbortable(_))
    ));
    let plan = m.start_abort().expect("abort allowed");
    assert!(plan.needs_end_txn);
    m.end_done(false, Ok(Some(epoch(5)))).expect("aborted");
    assert_eq!(m.state(), TxnState::Ready);
}

#[test]
fn sends_failing_while_committing_turn_the_commit_into_an_abortable_error() {
    let mut m = machine_in(TxnState::Committing);
    let e = m.fail(broker(ErrorCode::MessageTooLarge));
    assert_eq!(e.txn_class(), TxnErrorClass::Abortable);
    assert_eq!(m.state(), TxnState::AbortableError);
}

#[test]
fn fencing_is_fatal_from_anywhere_and_sticks() {
    for state in [
        TxnState::InTransaction,
        TxnState::Committing,
        TxnState::Aborting,
        TxnState::AbortableError,
    ] {
        let mut m = machine_in(state);
        let e = m.fail(broker(ErrorCode::InvalidProducerEpoch));
        assert_eq!(e.code(), Some(ErrorCode::InvalidProducerEpoch), "{state:?}");
        assert_eq!(m.state(), TxnState::FatalError);
        // A later, different fatal error does not replace the first.
        let later = m.fail(broker(ErrorCode::ProducerFenced));
        assert_eq!(later.code(), Some(ErrorCode::InvalidProducerEpoch));
        assert_eq!(
            m.begin().err().and_then(|e| e.code()),
            Some(ErrorCode::InvalidProducerEpoch)
        );
        m.close();
        assert_eq!(
            m.state(),
            TxnState::FatalError,
            "close keeps the fatal answer"
        );
    }
}

#[test]
fn end_txn_fenced_is_fatal_for_commit_and_abort() {
    for commit in [true, false] {
        let mut m = machine_in(if commit {
            TxnState::Committing
        } else {
            TxnState::Aborting
        });
        let e = m
            .end_done(commit, Err(broker(ErrorCode::ProducerFenced)))
            .expect_err("fenced");
        assert_eq!(e.txn_class(), TxnErrorClass::Fatal);
        assert_eq!(m.state(), TxnState::FatalError);
    }
}

#[test]
fn an_unanswered_commit_stays_committing_and_only_commit_may_follow() {
    let mut m = machine_in(TxnState::Committing);
    let e = m.end_done(true, Err(unanswered())).expect_err("unanswered");
    assert_eq!(e.txn_class(), TxnErrorClass::Retriable);
    assert_eq!(m.state(), TxnState::Committing);
    assert!(matches!(m.start_abort(), Err(ClientError::IllegalState(_))));
    assert!(matches!(m.begin(), Err(ClientError::IllegalState(_))));
    let plan = m.start_commit().expect("commit again");
    assert!(plan.needs_end_txn);
    assert_eq!(plan.producer, PID, "the retry names the same epoch");
    m.end_done(true, Ok(Some(epoch(5))))
        .expect("the coordinator answers the same outcome");
    assert_eq!(m.state(), TxnState::Ready);
}

#[test]
fn a_commit_refused_with_invalid_txn_state_must_be_aborted() {
    let mut m = machine_in(TxnState::Committing);
    let e = m
        .end_done(true, Err(broker(ErrorCode::InvalidTxnState)))
        .expect_err("refused");
    assert_eq!(e.txn_class(), TxnErrorClass::Abortable);
    assert_eq!(m.state(), TxnState::AbortableError);
    m.start_abort().expect("abort allowed");
}

#[test]
fn a_transaction_begun_after_a_commit_takes_the_commits_epoch_or_its_failure() {
    // Committed: the next transaction goes on under the answered epoch.
    let mut m = machine_in(TxnState::Committing);
    let g = m.begin_after_commit().expect("next");
    assert_eq!(m.state(), TxnState::InTransaction);
    assert_eq!(m.check_send(None).map(|(gen, _)| gen).ok(), Some(g));
    m.previous_done(Some(epoch(5)), None).expect("committed");
    assert_eq!(m.state(), TxnState::InTransaction);
    assert_eq!(m.producer().map(|p| p.producer_epoch), Some(5));

    // Not committed (aborted, epoch moved): the next transaction must be aborted.
    let mut m = machine_in(TxnState::Committing);
    m.begin_after_commit().expect("next");
    let e = m
        .previous_done(Some(epoch(5)), Some(broker(ErrorCode::NotEnoughReplicas)))
        .expect_err("the commit failed");
    assert_eq!(e.txn_class(), TxnErrorClass::Abortable);
    assert_eq!(m.state(), TxnState::AbortableError);
    assert_eq!(m.producer().map(|p| p.producer_epoch), Some(5));
    assert!(m.check_send(None).is_err(), "no send joins it");
    assert!(m.start_commit().is_err(), "it cannot commit");
    m.start_abort().expect("abort allowed");

    // Fenced: fatal for good.
    let mut m = machine_in(TxnState::Committing);
    m.begin_after_commit().expect("next");
    let e = m
        .previous_done(None, Some(broker(ErrorCode::ProducerFenced)))
        .expect_err("fenced");
    assert_eq!(e.txn_class(), TxnErrorClass::Fatal);
    assert_eq!(m.state(), TxnState::FatalError);

    // Only a commit under way can go on in the background.
    for state in [TxnState::Ready, TxnState::InTransaction, TxnState::Aborting] {
        assert!(machine_in(state).begin_after_commit().is_err(), "{state:?}");
    }
}

#[test]
fn an_unanswered_abort_stays_aborting_and_may_be_repeated() {
    let mut m = machine_in(TxnState::Aborting);
    m.end_done(false, Err(unanswered()))
        .expect_err("unanswered");
    assert_eq!(m.state(), TxnState::Aborting);
    m.start_abort().expect("abort again");
    m.end_done(false, Ok(Some(epoch(5)))).expect("aborted");
    assert_eq!(m.producer().map(|p| p.producer_epoch), Some(5));
}

#[test]
fn an_abort_the_coordinator_holds_no_transaction_for_ends_locally_at_the_same_epoch() {
    let mut m = machine_in(TxnState::Aborting);
    m.end_done(false, Err(broker(ErrorCode::InvalidTxnState)))
        .expect("nothing was open");
    assert_eq!(m.state(), TxnState::Ready);
    assert_eq!(m.producer(), Some(PID));
}

#[test]
fn ending_in_the_wrong_state_is_refused() {
    let mut m = machine_in(TxnState::Ready);
    assert!(m.end_done(true, Ok(Some(epoch(9)))).is_err());
    assert_eq!(m.producer(), Some(PID));
    let mut m = machine_in(TxnState::Committing);
    assert!(m.end_done(false, Ok(Some(epoch(9)))).is_err());
    assert_eq!(m.state(), TxnState::Committing);
}

#[test]
fn failures_outside_a_transaction_change_nothing_unless_fatal() {
    for state in [TxnState::Ready, TxnState::Aborting] {
        let mut m = machine_in(state);
        let e = m.fail(broker(ErrorCode::NotEnoughReplicas));
        assert_eq!(e.txn_class(), TxnErrorClass::Abortable);
        assert_eq!(m.state(), state);
    }
}

#[test]
fn given_a_commit_that_renewed_the_producer_then_the_next_transaction_carries_the_fresh_id() {
    let mut m = machine_in(TxnState::Committing);
    let fresh = ProducerIdAndEpoch {
        producer_id: 99,
        producer_epoch: 0,
    };
    m.end_done(true, Ok(Some(fresh))).expect("committed");
    assert_eq!(m.producer(), Some(fresh));
    m.begin().expect("begin");
    assert_eq!(m.check_send(None).map(|(_, p)| p).ok(), Some(fresh));
}
