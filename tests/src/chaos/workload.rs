//! The chaos workload: idempotent producers sending unique values one at a time,
//! transactional producers writing to both topics (some transactions aborted on
//! purpose), read_committed and read_uncommitted consumers polling throughout, and
//! consume-transform-produce members of a consumer group (`pipeline.rs`), and a Kafka
//! client's idempotent producer where the brokers speak Kafka (`kafka_producer.rs`). Every
//! operation goes to the history as an invoke and then `ok` / `fail` / `info`, as the
//! client saw it: the checker judges only from that.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_chaos::history::{Call, OpKind, Read, SendRecord, Txn};
use idem_client::{
    ClientError, Consumer, ConsumerConfig, Delivery, Isolation, OffsetSpec, Producer,
    ProducerConfig, ProducerRecord, TransactionalProducer,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::task::JoinHandle;

use super::recorder::{read_isolation, read_record, Recorder, PARTITIONS, TOPICS};

/// How many clients of each kind a run has.
#[derive(Debug, Clone, Copy)]
pub struct Clients {
    pub producers: usize,
    pub transactional: usize,
    pub read_committed: usize,
    pub read_uncommitted: usize,
    /// Members of the consume-transform-produce group.
    pub processors: usize,
    /// confluent-kafka idempotent producers (`kafka_producer.rs`), where the brokers
    /// have Kafka listeners the test reaches.
    pub kafka_producers: usize,
}

/// The clients of every run, on processes or on containers.
pub const CLIENTS: Clients = Clients {
    producers: 3,
    transactional: 2,
    read_committed: 2,
    read_uncommitted: 1,
    processors: 2,
    kafka_producers: 1,
};

pub struct Workload {
    stop: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Workload {
    /// Starts `clients` against `bootstrap` (gRPC) and, for the Kafka clients, `kafka`
    /// (the brokers' Kafka listeners; none: no Kafka client).
    pub fn start(
        bootstrap: &str,
        kafka: Option<&str>,
        clients: Clients,
        seed: u64,
        history: &Recorder,
    ) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for i in kafka.map_or(0..0, |_| 0..clients.kafka_producers) {
            tasks.push(tokio::spawn(super::kafka_producer::kafka_producer(
                kafka.unwrap_or_default().to_string(),
                i,
                history.clone(),
                stop.clone(),
            )));
        }
        for i in 0..clients.producers {
            tasks.push(tokio::spawn(producer(
                bootstrap.to_string(),
                i,
                history.clone(),
                stop.clone(),
            )));
        }
        for i in 0..clients.transactional {
            tasks.push(tokio::spawn(transactional(
                bootstrap.to_string(),
                i,
                seed.wrapping_add(i as u64),
                history.clone(),
                stop.clone(),
            )));
        }
        let consumers = (0..clients.read_committed)
            .map(|i| (i, Isolation::ReadCommitted))
            .chain((0..clients.read_uncommitted).map(|i| (i, Isolation::ReadUncommitted)));
        for (i, isolation) in consumers {
            tasks.push(tokio::spawn(consumer(
                bootstrap.to_string(),
                i,
                isolation,
                history.clone(),
                stop.clone(),
            )));
        }
        for i in 0..clients.processors {
            tasks.push(tokio::spawn(super::pipeline::member(
                bootstrap.to_string(),
                i,
                history.clone(),
                stop.clone(),
            )));
        }
        Workload { stop, tasks }
    }

    /// Stops every client after its current operation.
    pub async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for task in self.tasks {
            task.await.expect("workload client");
        }
    }
}

/// How a failed operation ended, as far as the client can tell.
fn outcome(error: &ClientError) -> OpKind {
    if error.possibly_written() {
        OpKind::Info
    } else {
        OpKind::Fail
    }
}

async fn producer(bootstrap: String, i: usize, history: Recorder, stop: Arc<AtomicBool>) {
    let process = format!("producer-{i}");
    let config = ProducerConfig {
        delivery: Delivery::ExactlyOnce,
        linger: Duration::ZERO,
        request_timeout: Duration::from_secs(3),
        delivery_timeout: Duration::from_secs(15),
        ..ProducerConfig::new(&bootstrap)
    };
    let Ok(producer) = Producer::connect(config).await else {
        return;
    };
    for n in 0.. {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let topic = TOPICS[n % TOPICS.len()];
        let partition = (n / TOPICS.len()) as i32 % PARTITIONS;
        let mut send = SendRecord {
            topic: topic.to_string(),
            partition,
            value: format!("{process}-{n}"),
            offset: None,
        };
        history.invoke(&process, Call::Send(send.clone()));
        let record = ProducerRecord::new(topic, send.value.clone()).partition(partition);
        let delivered = match producer.send_record(record).await {
            Ok(delivery) => delivery.await,
            Err(e) => Err(e),
        };
        let kind = match delivered {
            Ok(metadata) => {
                send.offset = Some(metadata.offset);
                OpKind::Ok
            }
            Err(e) => outcome(&e),
        };
        history.complete(&process, kind, Call::Send(send));
    }
    producer.close().await;
}

async fn transactional(
    bootstrap: String,
    i: usize,
    seed: u64,
    history: Recorder,
    stop: Arc<AtomicBool>,
) {
    let process = format!("txn-{i}");
    let id = format!("chaos-txn-{i}");
    let mut rng = StdRng::seed_from_u64(seed);
    let mut producer = None;
    for n in 0.. {
        if producer.is_none() {
            producer = crate::txn_workload::new_instance(&bootstrap, &id, &stop).await;
        }
        let Some(current) = producer.as_ref() else {
            return;
        };
        // One to four partitions of both topics; one transaction in five aborted.
        let mut sends: Vec<SendRecord> = Vec::new();
        for k in 0..rng.gen_range(1..=4) {
            let topic = TOPICS[rng.gen_range(0..TOPICS.len())];
            let partition = rng.gen_range(0..PARTITIONS);
            sends.push(SendRecord {
                topic: topic.to_string(),
                partition,
                value: format!("{process}-{n}-{k}"),
                offset: None,
            });
        }
        let mut txn = Txn {
            transactional_id: id.clone(),
            sends,
            commit: rng.gen_bool(0.8),
        };
        history.invoke(&process, Call::Txn(txn.clone()));
        let kind = match run_transaction(current, &mut txn).await {
            Ok(()) => OpKind::Ok,
            Err(e) => {
                // The instance may be fenced or unsure: a new one settles the open
                // transaction before writing the next.
                current.close().await;
                producer = None;
                note_failed_transaction(&process, &e);
                if txn.commit {
                    OpKind::Info
                } else {
                    // Only an EndTxn(commit) commits: an abort that did not complete
                    // is aborted by the next instance or the transaction timeout.
                    OpKind::Fail
                }
            }
        };
        history.complete(&process, kind, Call::Txn(txn));
        if stop.load(Ordering::SeqCst) {
            break;
        }
    }
    if let Some(p) = producer {
        p.close().await;
    }
}

/// Says on the test's output why a transaction's outcome is not known.
fn note_failed_transaction(process: &str, error: &ClientError) {
    eprintln!("{process}: transaction ended with an error ({error}); a new instance takes over");
}

/// Sends `txn`'s records and commits or aborts it; fills in the acknowledged offsets.
async fn run_transaction(
    producer: &TransactionalProducer,
    txn: &mut Txn,
) -> Result<(), ClientError> {
    producer.begin()?;
    let mut deliveries = Vec::with_capacity(txn.sends.len());
    for send in &txn.sends {
        let record = ProducerRecord::new(&send.topic, send.value.clone()).partition(send.partition);
        deliveries.push(producer.send(record).await?);
    }
    for (send, delivery) in txn.sends.iter_mut().zip(deliveries) {
        send.offset = Some(delivery.await?.offset);
    }
    if txn.commit {
        producer.commit().await
    } else {
        producer.abort().await
    }
}

async fn consumer(
    bootstrap: String,
    i: usize,
    isolation: Isolation,
    history: Recorder,
    stop: Arc<AtomicBool>,
) {
    let short = match isolation {
        Isolation::ReadCommitted => "rc",
        Isolation::ReadUncommitted => "ru",
    };
    let mut generation = 0;
    'instances: while !stop.load(Ordering::SeqCst) {
        let process = format!("consumer-{short}-{i}.{generation}");
        generation += 1;
        let config = ConsumerConfig {
            isolation,
            max_wait: Duration::from_millis(200),
            start: OffsetSpec::Earliest,
            request_timeout: Duration::from_secs(5),
            ..ConsumerConfig::default()
        };
        let Ok(mut consumer) = Consumer::connect(&bootstrap, config).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        consumer.assign(
            TOPICS
                .iter()
                .flat_map(|t| (0..PARTITIONS).map(move |p| (t.to_string(), p)))
                .collect(),
        );
        while !stop.load(Ordering::SeqCst) {
            let mut read = Read {
                isolation: read_isolation(isolation),
                records: Vec::new(),
            };
            history.invoke(&process, Call::Poll(read.clone()));
            match consumer.poll(Duration::from_millis(500)).await {
                Ok(records) => {
                    read.records = records.iter().map(read_record).collect();
                    history.complete(&process, OpKind::Ok, Call::Poll(read));
                }
                Err(_) => {
                    // Nothing was returned. A new instance (a new process in the
                    // history) reads again from the start.
                    history.complete(&process, OpKind::Fail, Call::Poll(read));
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'instances;
                }
            }
        }
    }
}
