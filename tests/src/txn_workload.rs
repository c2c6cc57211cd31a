//! A transactional workload that runs while a test breaks the cluster, and the checks
//! that follow it. Each of several producers (its own transactional id) writes one record
//! to every partition of a topic per transaction, commits most and aborts every fifth,
//! and records each outcome: committed, aborted, or unknown (an error left it unsure).
//! A producer that meets an error is replaced by a new instance, which fences the old
//! one and settles its transaction. [`TxnWorkload::check`] then reads every partition to
//! its end, read_committed: each committed transaction exactly once, no aborted one, an
//! unknown one all or nothing, and each producer's transactions in order per partition.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_client::{
    ClientError, Isolation, ProducerRecord, TransactionalConfig, TransactionalProducer,
};
use tokio::task::JoinHandle;

use crate::txn;
use crate::wait::{wait_until, Seen};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Committed,
    Aborted,
    /// An error on the way: all of the transaction or none of it may be visible.
    Unknown,
}

/// One ended transaction of one producer, with when it ended.
#[derive(Debug, Clone)]
struct Ended {
    transaction: usize,
    outcome: Outcome,
    at: Instant,
}

type History = Arc<Mutex<Vec<Ended>>>;

pub struct TxnWorkload {
    bootstrap: String,
    topic: String,
    partitions: Vec<i32>,
    stop: Arc<AtomicBool>,
    producers: Vec<(String, History, JoinHandle<()>)>,
}

/// The value a producer writes to `partition` in its `transaction`: sortable per
/// producer, so the order in a partition is the order of the transactions.
fn value(transactional_id: &str, transaction: usize, partition: i32) -> String {
    format!("{transactional_id}/t{transaction:05}/p{partition}")
}

impl TxnWorkload {
    /// Starts `producers` transactional producers (ids `{prefix}-0..`) on `topic`'s
    /// `partitions`.
    pub fn start(
        bootstrap: &str,
        prefix: &str,
        producers: usize,
        topic: &str,
        partitions: &[i32],
    ) -> TxnWorkload {
        let stop = Arc::new(AtomicBool::new(false));
        let producers = (0..producers)
            .map(|i| {
                let id = format!("{prefix}-{i}");
                let history = History::default();
                let task = tokio::spawn(run_producer(
                    bootstrap.to_string(),
                    id.clone(),
                    topic.to_string(),
                    partitions.to_vec(),
                    history.clone(),
                    stop.clone(),
                ));
                (id, history, task)
            })
            .collect();
        TxnWorkload {
            bootstrap: bootstrap.to_string(),
            topic: topic.to_string(),
            partitions: partitions.to_vec(),
            stop,
            producers,
        }
    }

    pub fn transactional_ids(&self) -> Vec<String> {
        self.producers.iter().map(|(id, _, _)| id.clone()).collect()
    }

    /// Waits until every producer has committed `count` transactions that ended after
    /// `since`; panics after `patience`, naming the producers that did not.
    pub async fn wait_for_commits_since(&self, since: Instant, count: usize, patience: Duration) {
        let what = format!(
            "every producer commits {count} transactions (the producers behind, with their \
             commits so far)"
        );
        wait_until(patience, &what, || async {
            let behind: Vec<(String, usize)> = self
                .producers
                .iter()
                .map(|(id, history, _)| {
                    let done = history
                        .lock()
                        .expect("history")
                        .iter()
                        .filter(|e| e.outcome == Outcome::Committed && e.at > since)
                        .count();
                    (id.clone(), done)
                })
                .filter(|(_, done)| *done < count)
                .collect();
            if behind.is_empty() {
                Seen::Reached(())
            } else {
                Seen::Not(format!("{behind:?}"))
            }
        })
        .await;
    }

    /// Stops the producers (each finishes its current transaction) and checks what a
    /// read_committed consumer reads back (see the module doc). Returns how many
    /// transactions committed.
    pub async fn stop_and_check(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        let mut outcomes: BTreeMap<String, Vec<Ended>> = BTreeMap::new();
        for (id, history, task) in self.producers {
            task.await.expect("producer task");
            let ended = history.lock().expect("history").clone();
            outcomes.insert(id, ended);
        }
        txn::wait_until_stable(&self.bootstrap, &self.topic, &self.partitions).await;
        let mut seen: HashMap<(String, usize), Vec<i32>> = HashMap::new();
        for partition in &self.partitions {
            let values = txn::values(
                &self.bootstrap,
                &self.topic,
                &[*partition],
                Isolation::ReadCommitted,
            )
            .await;
            let mut last: HashMap<String, usize> = HashMap::new();
            for v in &values {
                let (id, transaction) = parse(v, *partition);
                if let Some(previous) = last.insert(id.clone(), transaction) {
                    assert!(
                        previous < transaction,
                        "{}-{partition}: {v} after t{previous:05} of {id} (a duplicate, or out of order)",
                        self.topic
                    );
                }
                seen.entry((id, transaction)).or_default().push(*partition);
            }
        }
        let mut committed = 0;
        for (id, ended) in &outcomes {
            for e in ended {
                let visible = seen
                    .remove(&(id.clone(), e.transaction))
                    .unwrap_or_default();
                match e.outcome {
                    Outcome::Committed => {
                        committed += 1;
                        assert_eq!(
                            visible, self.partitions,
                            "{id} t{:05} committed: visible in every partition once",
                            e.transaction
                        );
                    }
                    Outcome::Aborted => assert!(
                        visible.is_empty(),
                        "{id} t{:05} aborted but visible in {visible:?}",
                        e.transaction
                    ),
                    Outcome::Unknown => assert!(
                        visible.is_empty() || visible == self.partitions,
                        "{id} t{:05} is partly visible: {visible:?}",
                        e.transaction
                    ),
                }
            }
        }
        assert!(
            seen.is_empty(),
            "records of transactions that never ended, or never began: {seen:?}"
        );
        committed
    }
}

fn parse(value: &str, partition: i32) -> (String, usize) {
    let mut parts = value.rsplitn(3, '/');
    let (Some(p), Some(t), Some(id)) = (parts.next(), parts.next(), parts.next()) else {
        panic!("not a workload value: {value}");
    };
    assert_eq!(
        p,
        format!("p{partition}"),
        "{value} in partition {partition}"
    );
    let transaction = t
        .strip_prefix('t')
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("not a workload value: {value}"));
    (id.to_string(), transaction)
}

/// A new producer instance for `id`: connects and initialises, retrying while the
/// cluster cannot serve it (an outage is what a workload runs through), until `stop`.
pub async fn new_instance(
    bootstrap: &str,
    id: &str,
    stop: &AtomicBool,
) -> Option<TransactionalProducer> {
    loop {
        if stop.load(Ordering::SeqCst) {
            return None;
        }
        let config = TransactionalConfig {
            transaction_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(3),
            delivery_timeout: Duration::from_secs(20),
            linger: Duration::ZERO,
            ..TransactionalConfig::new(bootstrap, id)
        };
        let initialised = async {
            let producer = TransactionalProducer::connect(config).await?;
            producer.init_transactions().await?;
            Ok::<_, ClientError>(producer)
        };
        match initialised.await {
            Ok(producer) => return Some(producer),
            Err(e) => {
                eprintln!("{id}: init_transactions failed ({e}); a new instance tries again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn run_producer(
    bootstrap: String,
    id: String,
    topic: String,
    partitions: Vec<i32>,
    history: History,
    stop: Arc<AtomicBool>,
) {
    let mut producer = None;
    for transaction in 0.. {
        if producer.is_none() {
            producer = new_instance(&bootstrap, &id, &stop).await;
        }
        let Some(current) = producer.as_ref() else {
            return;
        };
        let commit = transaction % 5 != 4;
        let outcome =
            match one_transaction(current, &id, &topic, &partitions, transaction, commit).await {
                Ok(()) if commit => Outcome::Committed,
                Ok(()) => Outcome::Aborted,
                Err(e) => {
                    eprintln!(
                        "{id} t{transaction:05}: outcome unknown ({e}); a new instance takes over"
                    );
                    current.close().await;
                    producer = None;
                    Outcome::Unknown
                }
            };
        history.lock().expect("history").push(Ended {
            transaction,
            outcome,
            at: Instant::now(),
        });
        if stop.load(Ordering::SeqCst) {
            if let Some(p) = producer {
                p.close().await;
            }
            return;
        }
    }
}

async fn one_transaction(
    producer: &TransactionalProducer,
    id: &str,
    topic: &str,
    partitions: &[i32],
    transaction: usize,
    commit: bool,
) -> Result<(), ClientError> {
    producer.begin()?;
    let mut deliveries = Vec::with_capacity(partitions.len());
    for partition in partitions {
        let record =
            ProducerRecord::new(topic, value(id, transaction, *partition)).partition(*partition);
        deliveries.push(producer.send(record).await?);
    }
    for delivery in deliveries {
        delivery.await?;
    }
    if commit {
        producer.commit().await
    } else {
        producer.abort().await
    }
}
