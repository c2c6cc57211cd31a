//! What both coordinator cores (transactions in `core`, groups in `group::serve`) keep
//! per claimed slice: a slot per partition, loading then ready, named by the claim's
//! coordinator epoch. A slot is removed only by its own claim, so a newer claim of the
//! same partition (a reclaim under a higher epoch) is never dropped by an older one's
//! failure.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, RwLock};

use backon::Retryable;
use idem_client::Connection;

use crate::error::CoordinatorError;
use crate::log::writer::{TxnLogWriter, WriterIdentity};
use crate::ownership::token::OwnershipToken;
use crate::ownership::{Claim, Ownership};
use crate::retry::{self, UntilLost};

/// A slot knows the claim it serves.
pub(crate) trait ClaimSlot {
    fn coordinator_epoch(&self) -> i32;
}

/// Removes `partition`'s slot if it still serves the claim of `coordinator_epoch`;
/// whether it did.
pub(crate) fn remove_claim<S: ClaimSlot>(
    slots: &RwLock<HashMap<i32, S>>,
    partition: i32,
    coordinator_epoch: i32,
) -> bool {
    let Ok(mut slots) = slots.write() else {
        return false;
    };
    let ours = slots
        .get(&partition)
        .is_some_and(|s| s.coordinator_epoch() == coordinator_epoch);
    if ours {
        slots.remove(&partition);
    }
    ours
}

/// Gives a claim up: its token is lost at once (nothing more is served or written
/// under it), and the ownership is released so the partition is claimed again under a
/// new epoch, here or elsewhere.
pub(crate) fn give_back(
    ownership: &Arc<dyn Ownership>,
    partition: i32,
    coordinator_epoch: i32,
    token: &OwnershipToken,
) {
    token.lose();
    let ownership = ownership.clone();
    tokio::spawn(async move { ownership.release(partition, coordinator_epoch).await });
}

/// The one writer of `topic`-`claim.partition` under `claim`: producer id the claim's
/// writer id, producer epoch its coordinator epoch; `None` (logged) when that epoch no
/// longer fits a producer epoch.
pub(crate) fn claim_writer(
    conn: &Connection,
    topic: &'static str,
    claim: &Claim,
) -> Option<TxnLogWriter> {
    let Ok(producer_epoch) = i16::try_from(claim.coordinator_epoch) else {
        tracing::error!(
            partition = claim.partition,
            coordinator_epoch = claim.coordinator_epoch,
            "coordinator epoch does not fit a producer epoch"
        );
        return None;
    };
    Some(TxnLogWriter::start_for(
        topic,
        conn.clone(),
        WriterIdentity {
            partition: claim.partition,
            producer_id: claim.writer_producer_id,
            producer_epoch,
        },
        claim.token.clone(),
    ))
}

/// Runs `load` until it succeeds, the claim is lost, or the log cannot be read
/// (`CorruptLog`): pausing as `retry::reload` says, and only while the claim holds.
pub(crate) async fn load_while_owned<T, F, Fut>(
    claim: &Claim,
    what: &str,
    load: F,
) -> Result<T, CoordinatorError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, CoordinatorError>>,
{
    let (partition, coordinator_epoch) = (claim.partition, claim.coordinator_epoch);
    load.retry(retry::reload())
        .sleep(UntilLost(claim.token.clone()))
        .when(|e| {
            !matches!(
                e,
                CoordinatorError::OwnershipLost { .. } | CoordinatorError::CorruptLog { .. }
            )
        })
        .notify(|e, _| {
            tracing::warn!(partition, coordinator_epoch, error = %e, "loading {what} failed; retrying");
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Epoch(i32);

    impl ClaimSlot for Epoch {
        fn coordinator_epoch(&self) -> i32 {
            self.0
        }
    }

    #[test]
    fn given_a_newer_claim_then_an_older_ones_removal_keeps_it() {
        let slots = RwLock::new(HashMap::from([(3, Epoch(7))]));
        assert!(!remove_claim(&slots, 3, 6), "an older claim");
        assert!(!remove_claim(&slots, 4, 7), "another partition");
        assert!(remove_claim(&slots, 3, 7));
        assert!(slots.read().expect("lock").is_empty());
    }
}
