//! A registration (AddPartitionsToTxn) that arrives while its id's previous transaction
//! is still completing parks here. The task completing that transaction takes it and
//! decides it on the completed state, so the Complete record and the new transaction's
//! Ongoing record go to `__transaction_state` in one append: the next transaction
//! starts one replicated, fsynced write sooner than if the registration waited for the
//! completion to be persisted and then persisted its own record.
//!
//! Invariant: a parked registration is answered exactly once, by whichever side removes
//! it from here: the completing task (which takes it), or its own handler (which takes
//! it back when the completion went by without it, or its wait ran out).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use idem_proto::ErrorCode;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::partition::LogPartition;
use super::Refusal;
use crate::txn::decide::{Reply, Request};

/// The answer a parked registration's handler waits for.
pub type Answer = Result<Reply, Refusal>;

/// A registration waiting for the completion of its id's previous transaction.
#[derive(Debug)]
pub struct Parked {
    pub request: Request,
    pub answer: oneshot::Sender<Answer>,
}

/// At most one parked registration per transactional id (a producer registers one
/// call at a time; a second, e.g. a retry, waits the ordinary way).
#[derive(Debug, Default)]
pub struct Successors {
    parked: Mutex<HashMap<String, (u64, Parked)>>,
    next_ticket: AtomicU64,
}

impl Successors {
    /// Parks `request` for `transactional_id`; `None` when one is parked already. The
    /// ticket lets the handler take back its own registration and no other.
    pub fn park(
        &self,
        transactional_id: &str,
        request: Request,
    ) -> Option<(u64, oneshot::Receiver<Answer>)> {
        let mut parked = self.parked.lock().ok()?;
        if parked.contains_key(transactional_id) {
            return None;
        }
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let (answer, receiver) = oneshot::channel();
        parked.insert(
            transactional_id.to_string(),
            (ticket, Parked { request, answer }),
        );
        Some((ticket, receiver))
    }

    /// Takes back the registration parked under `ticket`; false when a completing
    /// task already took it (its answer is then on the way).
    pub fn unpark(&self, transactional_id: &str, ticket: u64) -> bool {
        let Ok(mut parked) = self.parked.lock() else {
            return false;
        };
        match parked.get(transactional_id) {
            Some((t, _)) if *t == ticket => parked.remove(transactional_id).is_some(),
            _ => false,
        }
    }

    /// The registration parked for `transactional_id`, for the completion to decide.
    pub fn take(&self, transactional_id: &str) -> Option<Parked> {
        self.parked
            .lock()
            .ok()?
            .remove(transactional_id)
            .map(|(_, parked)| parked)
    }
}

/// Parks a registration that found its id's previous transaction completing, and
/// waits for the completion to answer it. `None` means the handler took it back and
/// should decide again: the completion went by without it (it parked too late, or
/// another registration of the id was parked first), or the wait reached `deadline`.
pub async fn park_until_completed(
    part: &LogPartition,
    transactional_id: &str,
    request: &Request,
    deadline: Instant,
) -> Option<Answer> {
    let completed = part.completed.notified();
    tokio::pin!(completed);
    completed.as_mut().enable();
    let Some((ticket, mut answer)) = part.successors.park(transactional_id, request.clone()) else {
        let _ = tokio::time::timeout_at(deadline, completed).await;
        return None;
    };
    let still_completing = part
        .get(transactional_id)
        .is_some_and(|meta| meta.state.is_completing());
    if still_completing {
        tokio::select! {
            result = &mut answer => return Some(received(result)),
            () = &mut completed => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
    if part.successors.unpark(transactional_id, ticket) {
        return None;
    }
    // The completion took it: its answer comes once the records are written.
    Some(received(answer.await))
}

fn received(result: Result<Answer, oneshot::error::RecvError>) -> Answer {
    result.unwrap_or_else(|_| {
        Err(Refusal::new(
            ErrorCode::CoordinatorNotAvailable,
            "the coordinator stopped completing the previous transaction",
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(epoch: i16) -> Request {
        Request::AddPartitions {
            producer_id: 7,
            producer_epoch: epoch,
            partitions: Vec::new(),
        }
    }

    #[test]
    fn one_registration_parks_per_id_and_the_completion_takes_it() {
        let successors = Successors::default();
        let (_, _rx) = successors.park("a", request(1)).expect("parked");
        assert!(
            successors.park("a", request(1)).is_none(),
            "second for the same id"
        );
        assert!(
            successors.park("b", request(1)).is_some(),
            "another id parks"
        );
        let taken = successors.take("a").expect("taken");
        assert_eq!(taken.request, request(1));
        assert!(successors.take("a").is_none(), "taken once");
        assert!(successors.park("a", request(2)).is_some(), "free again");
    }

    #[test]
    fn a_handler_takes_back_only_its_own_registration_and_not_after_the_completion_took_it() {
        let successors = Successors::default();
        let (first, _rx) = successors.park("a", request(1)).expect("parked");
        assert!(successors.unpark("a", first));
        assert!(!successors.unpark("a", first), "already taken back");
        let (second, _rx) = successors.park("a", request(2)).expect("parked again");
        assert!(
            !successors.unpark("a", first),
            "a stale ticket takes nothing"
        );
        let taken = successors.take("a").expect("the completion takes it");
        assert_eq!(taken.request, request(2));
        assert!(!successors.unpark("a", second), "the completion answers it");
    }

    #[test]
    fn the_completion_answers_the_parked_handler() {
        let successors = Successors::default();
        let (_, mut rx) = successors.park("a", request(1)).expect("parked");
        let parked = successors.take("a").expect("taken");
        parked
            .answer
            .send(Ok(Reply::Ok { producer_epoch: 1 }))
            .expect("handler waiting");
        assert_eq!(rx.try_recv(), Ok(Ok(Reply::Ok { producer_epoch: 1 })));
    }
}
