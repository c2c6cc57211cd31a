//! Registers the open transaction's partitions with the coordinator without holding up
//! `send`: a partition's first record only queues a registration, and the partition's
//! task sends nothing until the registration is answered. Registrations queued at the
//! same moment go out together in one AddPartitionsToTxn, and a call does not wait for
//! the one before it: at a transaction's start the coordinator is often still
//! completing the previous one, and it decides the calls that arrive meanwhile as one
//! (one append, one round of BEGIN markers) instead of one after another.
//!
//! Invariant: no batch of a partition leaves before the coordinator accepted the
//! partition into the transaction (the broker would refuse it: no BEGIN yet). One
//! registrar belongs to one transaction; it ends when the transaction's partition
//! tasks are drained (its queue's sender is dropped with the transaction). A
//! transaction begun while the one before it still commits (`commit_and_begin`) gets
//! its identity only from that commit's answer: until then registrations queue, and if
//! that commit failed every one of them fails unsent.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;

use super::timing::micros;
use crate::coordinator::CoordinatorLink;
use crate::error::ClientError;
use crate::types::ProducerIdAndEpoch;

/// The answer a partition's task waits for: the identity to send under, or why the
/// partition cannot join the transaction.
pub(crate) type Registered = oneshot::Receiver<Result<ProducerIdAndEpoch, ClientError>>;

/// The identity a transaction's registrations go out under: known when the
/// transaction begins, or (the transaction `commit_and_begin` opened) once the commit
/// before it is answered, with the epoch that answer carries; an error when that
/// commit failed.
pub(crate) type IdentityGate = watch::Receiver<Option<Result<ProducerIdAndEpoch, ClientError>>>;

/// A gate that is open from the start.
pub(crate) fn known_identity(producer: ProducerIdAndEpoch) -> IdentityGate {
    watch::channel(Some(Ok(producer))).1
}

/// The identity once the gate has one; `Closed` when its sender went away without.
async fn identity(mut gate: IdentityGate) -> Result<ProducerIdAndEpoch, ClientError> {
    loop {
        if let Some(identity) = gate.borrow_and_update().clone() {
            return identity;
        }
        if gate.changed().await.is_err() {
            return Err(ClientError::Closed);
        }
    }
}

struct Registration {
    topic: String,
    partition: i32,
    done: oneshot::Sender<Result<ProducerIdAndEpoch, ClientError>>,
}

/// The sending side, held by the open transaction.
#[derive(Debug)]
pub(crate) struct Registrar {
    queue: mpsc::UnboundedSender<Registration>,
}

impl std::fmt::Debug for Registration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

impl Registrar {
    /// Starts the registrar of a transaction whose identity comes through `producer`;
    /// nothing is sent before it is known. Each AddPartitionsToTxn, retries included,
    /// may take `patience` from when it is sent (a transaction may outlast it, so no
    /// deadline is fixed at the start).
    pub(crate) fn spawn(
        coordinator: Arc<CoordinatorLink>,
        transactional_id: Arc<str>,
        producer: IdentityGate,
        patience: Duration,
    ) -> Self {
        let (queue, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(coordinator, transactional_id, producer, patience, rx));
        Registrar { queue }
    }

    /// Queues `topic`/`partition`; the receiver resolves once the coordinator answered.
    pub(crate) fn register(&self, topic: &str, partition: i32) -> Registered {
        let (done, registered) = oneshot::channel();
        let registration = Registration {
            topic: topic.to_string(),
            partition,
            done,
        };
        if let Err(mpsc::error::SendError(r)) = self.queue.send(registration) {
            let _ = r.done.send(Err(ClientError::Closed));
        }
        registered
    }
}

async fn run(
    coordinator: Arc<CoordinatorLink>,
    transactional_id: Arc<str>,
    producer: IdentityGate,
    patience: Duration,
    mut rx: mpsc::UnboundedReceiver<Registration>,
) {
    let producer = match identity(producer).await {
        Ok(producer) => producer,
        Err(e) => {
            // The commit before this transaction failed: none of it may be sent.
            while let Some(registration) = rx.recv().await {
                let _ = registration.done.send(Err(e.clone()));
            }
            return;
        }
    };
    while let Some(first) = rx.recv().await {
        let mut batch = vec![first];
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        tokio::spawn(register(
            coordinator.clone(),
            transactional_id.clone(),
            producer,
            patience,
            batch,
        ));
    }
}

/// One AddPartitionsToTxn for `batch`; answers every registration in it.
async fn register(
    coordinator: Arc<CoordinatorLink>,
    transactional_id: Arc<str>,
    producer: ProducerIdAndEpoch,
    patience: Duration,
    batch: Vec<Registration>,
) {
    let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for r in &batch {
        topics.entry(r.topic.clone()).or_default().push(r.partition);
    }
    let sent = Instant::now();
    let result = coordinator
        .add_partitions(&transactional_id, producer, topics, sent + patience)
        .await;
    match &result {
        // How long the coordinator took is most of what a transaction's start costs
        // (docs/benchmarks.md reads it from this event).
        Ok(()) => tracing::debug!(
            producer_id = producer.producer_id,
            producer_epoch = producer.producer_epoch,
            partitions = ?batch,
            call_us = micros(sent.elapsed()),
            "partitions joined the transaction"
        ),
        Err(e) => {
            tracing::warn!(partitions = ?batch, error = %e, "cannot add the partitions to the transaction")
        }
    }
    for r in batch {
        let _ = r.done.send(result.clone().map(|()| producer));
    }
}
