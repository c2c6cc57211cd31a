//! How a registration's handler waits its turn: parked (see `successor.rs`) until the
//! completion of its id's previous transaction answers it, or behind the holder of its
//! id's lock, which carries out what parked before letting go. Either way the handler
//! is answered exactly once, or takes itself back and decides again.

use std::sync::Arc;

use idem_proto::ErrorCode;
use tokio::sync::{oneshot, OwnedMutexGuard};
use tokio::time::Instant;

use super::partition::LogPartition;
use super::refusal::Refusal;
use super::successor::Answer;
use crate::txn::decide::Request;

/// Parks a registration that found its id's previous transaction completing, and
/// waits for the completion to answer it. `None` means the handler took it back and
/// should decide again: the completion went by without it (it parked too late, or an
/// older epoch's registration was parked there), or the wait reached `deadline`.
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
        .is_some_and(|meta| meta.is_completing());
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

/// How a registration that found its id's lock held got its turn.
pub enum Turn {
    /// The holder carried it out (with the others parked beside it).
    Answered(Answer),
    /// The lock came free without the holder taking it: decide it alone.
    Mine(OwnedMutexGuard<()>),
}

/// Parks a registration behind the holder of its id's lock, which carries out what
/// parked before letting go.
pub async fn park_behind_holder(
    part: &LogPartition,
    transactional_id: &str,
    request: &Request,
    lock: &Arc<tokio::sync::Mutex<()>>,
) -> Turn {
    let Some((ticket, mut answer)) = part.successors.park(transactional_id, request.clone()) else {
        return Turn::Mine(lock.clone().lock_owned().await);
    };
    tokio::select! {
        result = &mut answer => Turn::Answered(received(result)),
        guard = lock.clone().lock_owned() => {
            if part.successors.unpark(transactional_id, ticket) {
                Turn::Mine(guard)
            } else {
                // Taken by the holder, which answered before letting go.
                drop(guard);
                Turn::Answered(received(answer.await))
            }
        }
    }
}

fn received(result: Result<Answer, oneshot::error::RecvError>) -> Answer {
    result.unwrap_or_else(|_| {
        Err(Refusal::new(
            ErrorCode::CoordinatorNotAvailable,
            "the coordinator stopped completing the previous transaction",
        ))
    })
}
