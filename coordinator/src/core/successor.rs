//! A registration (AddPartitionsToTxn) that arrives while its id's previous transaction
//! is still completing parks here. The task completing that transaction takes it and
//! decides it on the completed state, so the Complete record and the new transaction's
//! Ongoing record go to `__transaction_state` in one append: the next transaction
//! starts one replicated, fsynced write sooner than if the registration waited for the
//! completion to be persisted and then persisted its own record.
//!
//! A registration that finds another request of its id in progress parks too, and
//! that request's handler carries out what parked before it lets go of the id. And
//! registrations of the same producer that park while one is parked join it: the SDK
//! registers a transaction's partitions as its records reach them, so the calls of a
//! transaction's first milliseconds are decided as one (one append, one round of BEGIN
//! markers) instead of one after another.
//!
//! Invariant: every parked handler is answered exactly once, by whichever side removes
//! it from here: the completing task (which takes the whole registration and answers
//! every handler in it), or the handler itself (which takes itself back when the
//! completion went by without it, or its wait ran out). A handler that takes itself
//! back leaves its partitions in the registration: registering them is harmless, and
//! the handler decides again on whatever state it then finds.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::sync::oneshot;

use super::refusal::Refusal;
use crate::txn::decide::{Reply, Request};

/// The answer a parked registration's handler waits for.
pub type Answer = Result<Reply, Refusal>;

/// A registration waiting for the completion of its id's previous transaction, and
/// the handlers waiting for its answer (with their tickets).
#[derive(Debug)]
pub struct Parked {
    pub request: Request,
    waiters: Vec<(u64, oneshot::Sender<Answer>)>,
}

impl Parked {
    /// Gives every waiting handler the same answer; handlers that are gone (their
    /// clients hung up) are skipped: the decision stands regardless.
    pub fn answer(self, answer: Answer) {
        for (_, waiter) in self.waiters {
            let _ = waiter.send(answer.clone());
        }
    }
}

/// At most one parked registration per transactional id; later ones of the same
/// producer join it.
#[derive(Debug, Default)]
pub struct Successors {
    parked: Mutex<HashMap<String, Parked>>,
    next_ticket: AtomicU64,
}

impl Successors {
    /// Parks `request` for `transactional_id`, or joins it to the registration parked
    /// there when both come from the same producer id and epoch. `None` when it can do
    /// neither (not a registration, or another producer's is parked). The ticket lets
    /// the handler take back itself and no other.
    pub fn park(
        &self,
        transactional_id: &str,
        request: Request,
    ) -> Option<(u64, oneshot::Receiver<Answer>)> {
        let Request::AddPartitions {
            producer_id,
            producer_epoch,
            partitions,
        } = request
        else {
            return None;
        };
        let mut parked = self.parked.lock().ok()?;
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let (waiter, receiver) = oneshot::channel();
        match parked.get_mut(transactional_id) {
            Some(Parked {
                request:
                    Request::AddPartitions {
                        producer_id: id,
                        producer_epoch: epoch,
                        partitions: joined,
                    },
                waiters,
            }) if *id == producer_id && *epoch == producer_epoch => {
                for tp in partitions {
                    if !joined.contains(&tp) {
                        joined.push(tp);
                    }
                }
                waiters.push((ticket, waiter));
            }
            Some(_) => return None,
            None => {
                let request = Request::AddPartitions {
                    producer_id,
                    producer_epoch,
                    partitions,
                };
                parked.insert(
                    transactional_id.to_string(),
                    Parked {
                        request,
                        waiters: vec![(ticket, waiter)],
                    },
                );
            }
        }
        Some((ticket, receiver))
    }

    /// Takes back the handler parked under `ticket`; false when a completing task
    /// already took its registration (its answer is then on the way).
    pub fn unpark(&self, transactional_id: &str, ticket: u64) -> bool {
        let Ok(mut parked) = self.parked.lock() else {
            return false;
        };
        let Some(entry) = parked.get_mut(transactional_id) else {
            return false;
        };
        let before = entry.waiters.len();
        entry.waiters.retain(|(t, _)| *t != ticket);
        let removed = entry.waiters.len() < before;
        if entry.waiters.is_empty() {
            parked.remove(transactional_id);
        }
        removed
    }

    /// Whether a registration is parked for `transactional_id`.
    pub fn any(&self, transactional_id: &str) -> bool {
        self.parked
            .lock()
            .is_ok_and(|parked| parked.contains_key(transactional_id))
    }

    /// The registration parked for `transactional_id`, for the completion to decide.
    pub fn take(&self, transactional_id: &str) -> Option<Parked> {
        self.parked.lock().ok()?.remove(transactional_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::decide::TopicPartition;

    fn request(epoch: i16, partitions: &[i32]) -> Request {
        Request::AddPartitions {
            producer_id: 7,
            producer_epoch: epoch,
            partitions: partitions
                .iter()
                .map(|&partition| TopicPartition {
                    topic: "t".into(),
                    partition,
                })
                .collect(),
        }
    }

    #[test]
    fn registrations_of_one_producer_join_into_one_that_the_completion_takes() {
        let successors = Successors::default();
        let (_, _a) = successors.park("a", request(1, &[0])).expect("parked");
        let (_, _b) = successors.park("a", request(1, &[1, 0])).expect("joined");
        assert!(
            successors.park("b", request(1, &[5])).is_some(),
            "another id parks"
        );
        let taken = successors.take("a").expect("taken");
        assert_eq!(taken.request, request(1, &[0, 1]));
        assert_eq!(taken.waiters.len(), 2);
        assert!(successors.take("a").is_none(), "taken once");
        assert!(
            successors.park("a", request(2, &[3])).is_some(),
            "free again"
        );
    }

    #[test]
    fn another_epoch_or_request_does_not_join() {
        let successors = Successors::default();
        let (_, _a) = successors.park("a", request(1, &[0])).expect("parked");
        assert!(
            successors.park("a", request(2, &[1])).is_none(),
            "other epoch"
        );
        assert!(
            successors.park("a", Request::Tick).is_none(),
            "not a registration"
        );
        assert_eq!(
            successors.take("a").expect("taken").request,
            request(1, &[0])
        );
    }

    #[test]
    fn a_handler_takes_back_only_itself_and_not_after_the_completion_took_it() {
        let successors = Successors::default();
        let (first, _a) = successors.park("a", request(1, &[0])).expect("parked");
        let (second, _b) = successors.park("a", request(1, &[1])).expect("joined");
        assert!(successors.unpark("a", first));
        assert!(!successors.unpark("a", first), "already taken back");
        let taken = successors.take("a").expect("the other one still parked");
        assert_eq!(taken.request, request(1, &[0, 1]), "partitions stay");
        assert!(!successors.unpark("a", second), "the completion answers it");
        let (third, _c) = successors.park("a", request(1, &[2])).expect("parked");
        assert!(successors.unpark("a", third));
        assert!(
            successors.take("a").is_none(),
            "the last handler gone, nothing parked"
        );
    }

    #[test]
    fn the_completion_answers_every_handler_of_the_registration() {
        let successors = Successors::default();
        let (_, mut a) = successors.park("a", request(1, &[0])).expect("parked");
        let (_, mut b) = successors.park("a", request(1, &[1])).expect("joined");
        successors
            .take("a")
            .expect("taken")
            .answer(Ok(Reply::Ok { producer_epoch: 1 }));
        assert_eq!(a.try_recv(), Ok(Ok(Reply::Ok { producer_epoch: 1 })));
        assert_eq!(b.try_recv(), Ok(Ok(Reply::Ok { producer_epoch: 1 })));
    }
}
