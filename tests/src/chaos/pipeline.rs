//! Consume-transform-produce in the chaos workload: members of one consumer group read
//! [`INPUT`] read_committed and, per poll, write one output per input record to the
//! same partition of [`OUTPUT`] and send the consumed offsets in the SAME transaction
//! (as `client/examples/transform.rs` does). Each transaction goes to the history as a
//! `transform`; after the run, a `final_pipeline` holds the group's stable committed
//! offsets and the whole read_committed output, from which the checker finds any input
//! transformed twice, never, or without its offsets.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_chaos::history::{
    output_value, Call, GroupOffset, OpKind, PipelineRead, ReadRecord, SendRecord, Transform,
};
use idem_client::{
    ClientError, ConsumerConfig, GroupConfig, GroupConsumer, Isolation, OffsetSpec, ProducerRecord,
    TransactionalProducer, TxnErrorClass,
};
use idem_proto::v1::ErrorCode;

use super::recorder::{read_record, Recorder, PARTITIONS, TOPICS};
use crate::groups::GroupClient;
use crate::wait::{wait_until, Seen};

/// What the members consume: the topic idempotent and transactional producers write.
pub const INPUT: &str = TOPICS[0];
/// What they produce, with as many partitions as [`INPUT`].
pub const OUTPUT: &str = "chaos-out";
pub const GROUP: &str = "chaos-pipeline";
/// The coordinators' session timeout on chaos runs: a member lost in a fault (its
/// leave unanswered) holds its partitions this long, a small part of a run.
pub const SESSION_TIMEOUT_MS: &str = "6000";

/// How a transform ended, as far as the member can tell.
enum Ended {
    Committed,
    /// Definitely not committed: it failed before its commit was asked for, or was
    /// aborted. `abort_done`: the member aborted it and may go on.
    NotCommitted {
        error: ClientError,
        abort_done: bool,
    },
    /// The commit was asked for and not confirmed.
    Unknown(ClientError),
}

/// One member, restarted as a new instance (a new process in the history, and a new
/// producer instance that fences the old one) after any failure it cannot recover from.
pub async fn member(bootstrap: String, i: usize, history: Recorder, stop: Arc<AtomicBool>) {
    let transactional_id = format!("{GROUP}-{i}");
    let mut generation = 0;
    while !stop.load(Ordering::SeqCst) {
        let process = format!("processor-{i}.{generation}");
        generation += 1;
        let Some(producer) =
            crate::txn_workload::new_instance(&bootstrap, &transactional_id, &stop).await
        else {
            return;
        };
        let mut config = GroupConfig::new(GROUP);
        config.rebalance_timeout = Duration::from_secs(10);
        config.consumer = ConsumerConfig {
            isolation: Isolation::ReadCommitted,
            max_wait: Duration::from_millis(200),
            start: OffsetSpec::Earliest,
            request_timeout: Duration::from_secs(5),
            ..ConsumerConfig::default()
        };
        match GroupConsumer::subscribe(&bootstrap, config, &[INPUT]).await {
            Ok(mut consumer) => {
                let instance = Instance {
                    process: &process,
                    transactional_id: &transactional_id,
                    producer: &producer,
                };
                instance.run(&mut consumer, &history, &stop).await;
                // Leaves the group, so its partitions move without waiting for the
                // session timeout (when the coordinator answers).
                let _ = consumer.close().await;
            }
            Err(e) => eprintln!("{process}: cannot join {GROUP} ({e}); a new instance tries"),
        }
        producer.close().await;
    }
}

/// One instance of a member: its name in the history and its producer.
struct Instance<'a> {
    process: &'a str,
    transactional_id: &'a str,
    producer: &'a TransactionalProducer,
}

impl Instance<'_> {
    /// Transforms poll after poll until `stop` or a failure the instance cannot go on from.
    async fn run(&self, consumer: &mut GroupConsumer, history: &Recorder, stop: &AtomicBool) {
        let (process, producer) = (self.process, self.producer);
        while !stop.load(Ordering::SeqCst) {
            let polled = match consumer.poll(Duration::from_millis(200)).await {
                Ok(polled) => polled,
                Err(e) => {
                    eprintln!("{process}: poll failed ({e}); a new instance takes over");
                    return;
                }
            };
            // Each poll's records are committed or aborted before the next poll, so a
            // revocation has nothing open to settle.
            if polled.records.is_empty() {
                continue;
            }
            let inputs: Vec<ReadRecord> = polled.records.iter().map(read_record).collect();
            let mut transform = transform_of(self.transactional_id, inputs);
            history.invoke(process, Call::Transform(transform.clone()));
            let ended = run_transform(producer, consumer, &mut transform, stop).await;
            let kind = match &ended {
                Ended::Committed => OpKind::Ok,
                Ended::NotCommitted { .. } => OpKind::Fail,
                Ended::Unknown(_) => OpKind::Info,
            };
            history.complete(process, kind, Call::Transform(transform));
            match ended {
                Ended::Committed => {}
                Ended::NotCommitted {
                    abort_done: true, ..
                } => {
                    // Read again what the aborted transaction consumed.
                    if let Err(e) = consumer.seek_to_committed().await {
                        eprintln!("{process}: cannot seek to the committed offsets ({e})");
                        return;
                    }
                }
                Ended::NotCommitted { error, .. } | Ended::Unknown(error) => {
                    eprintln!("{process}: transform ended with {error}; a new instance takes over");
                    return;
                }
            }
        }
    }
}

/// The transform of `inputs`: one output each, to the same partition of [`OUTPUT`],
/// and the next offset of every input partition.
fn transform_of(transactional_id: &str, inputs: Vec<ReadRecord>) -> Transform {
    let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for input in &inputs {
        next.insert((input.topic.clone(), input.partition), input.offset + 1);
    }
    Transform {
        group: GROUP.into(),
        transactional_id: transactional_id.into(),
        outputs: inputs
            .iter()
            .map(|input| SendRecord {
                topic: OUTPUT.into(),
                partition: input.partition,
                value: output_value(input),
                offset: None,
            })
            .collect(),
        inputs,
        offsets: next
            .into_iter()
            .map(|((topic, partition), offset)| GroupOffset {
                topic,
                partition,
                offset,
            })
            .collect(),
    }
}

async fn run_transform(
    producer: &TransactionalProducer,
    consumer: &GroupConsumer,
    transform: &mut Transform,
    stop: &AtomicBool,
) -> Ended {
    let before_commit = async {
        producer.begin()?;
        let mut deliveries = Vec::with_capacity(transform.outputs.len());
        for output in &transform.outputs {
            let record =
                ProducerRecord::new(OUTPUT, output.value.clone()).partition(output.partition);
            deliveries.push(producer.send(record).await?);
        }
        let mut offsets = Vec::with_capacity(deliveries.len());
        for delivery in deliveries {
            offsets.push(delivery.await?.offset);
        }
        let consumed: Vec<((String, i32), i64)> = transform
            .offsets
            .iter()
            .map(|o| ((o.topic.clone(), o.partition), o.offset))
            .collect();
        producer
            .send_offsets_to_transaction(&consumed, &consumer.group_metadata()?)
            .await?;
        Ok::<_, ClientError>(offsets)
    };
    let offsets = match before_commit.await {
        Ok(offsets) => offsets,
        Err(error) => {
            // Nothing asked to commit: aborted now, or by the next instance's init.
            let abort_done =
                error.txn_class() == TxnErrorClass::Abortable && producer.abort().await.is_ok();
            return Ended::NotCommitted { error, abort_done };
        }
    };
    let mut ended = producer.commit().await;
    // An unanswered commit may have happened: ask again, never abort it.
    while matches!(&ended, Err(e) if e.txn_class() == TxnErrorClass::Retriable)
        && !stop.load(Ordering::SeqCst)
    {
        ended = producer.commit().await;
    }
    match ended {
        Ok(()) => {
            for (output, offset) in transform.outputs.iter_mut().zip(offsets) {
                output.offset = Some(offset);
            }
            Ended::Committed
        }
        Err(e) => Ended::Unknown(e),
    }
}

/// The end of the pipeline, once the members stopped and every transaction settled:
/// the group's committed offsets of [`INPUT`] (asked with `require_stable` until no
/// transaction holds any) and the read_committed [`OUTPUT`].
pub async fn final_pipeline(bootstrap: &str, history: &Recorder) {
    let process = "final-pipeline";
    let mut end = PipelineRead {
        group: GROUP.into(),
        committed: Vec::new(),
        output: Vec::new(),
    };
    history.invoke(process, Call::FinalPipeline(end.clone()));
    let client = GroupClient::new(bootstrap, GROUP);
    let (committed, _) = wait_until(
        Duration::from_secs(30),
        "the pipeline's committed offsets are stable",
        || async {
            let answer = client.fetch(INPUT, PARTITIONS, true).await;
            if answer.error_code() != ErrorCode::None {
                return Seen::Not(format!("{answer:?}"));
            }
            let mut committed = Vec::new();
            for p in answer.topics.iter().flat_map(|t| &t.partitions) {
                match p.error_code() {
                    ErrorCode::None if p.offset >= 0 => committed.push(GroupOffset {
                        topic: INPUT.into(),
                        partition: p.partition,
                        offset: p.offset,
                    }),
                    ErrorCode::None => {}
                    code => return Seen::Not(format!("partition {}: {code:?}", p.partition)),
                }
            }
            Seen::Reached(committed)
        },
    )
    .await;
    end.committed = committed;
    let partitions: Vec<i32> = (0..PARTITIONS).collect();
    end.output = crate::txn::read(bootstrap, OUTPUT, &partitions, Isolation::ReadCommitted)
        .await
        .iter()
        .map(read_record)
        .collect();
    history.complete(process, OpKind::Ok, Call::FinalPipeline(end));
}
