//! The chaos workload's Kafka client (issue 30): a confluent-kafka idempotent producer
//! (`tests/kafka_clients/chaos_produce.py`, a process of its own) writing unique values
//! to the workload's topics through the brokers' Kafka listeners, one at a time. Each
//! of its events becomes a history operation exactly as an SDK producer's: an invoke,
//! then `ok` with the offset the delivery report gave, or `info` for a failed delivery
//! (librdkafka cannot tell whether the broker wrote it). The checker then judges
//! librdkafka's retries through the faults as it judges the SDK's: every acknowledged
//! value read once, at its offset, in send order. A fatal producer error (for an
//! idempotent producer: the broker broke its sequence rules) fails the run.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_chaos::history::{Call, OpKind, SendRecord};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::recorder::{Recorder, PARTITIONS, TOPICS};
use crate::kafka_clients::spawn_script;

/// How long the producer may take to finish its operation once asked to stop: one
/// delivery timeout of the script and a margin.
const STOP_PATIENCE: Duration = Duration::from_secs(25);

/// Runs `kafka-producer-{i}` against `kafka` (a bootstrap list of Kafka listeners)
/// until `stop`, recording its operations.
pub async fn kafka_producer(kafka: String, i: usize, history: Recorder, stop: Arc<AtomicBool>) {
    let process = format!("kafka-producer-{i}");
    let partitions = PARTITIONS.to_string();
    let mut args = vec![kafka.as_str(), process.as_str(), partitions.as_str()];
    args.extend(TOPICS);
    let (mut child, stderr) = spawn_script("chaos_produce.py", &args);
    let mut stdin = child.stdin.take();
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = BufReader::new(stdout).lines();
    let mut stopping = false;
    let mut fatal = None;
    loop {
        if !stopping && stop.load(Ordering::SeqCst) {
            stopping = true;
            if let Some(mut input) = stdin.take() {
                // A closed pipe means the script has ended; its output says how.
                let _ = input.write_all(b"stop\n").await;
            }
        }
        let next = tokio::time::timeout(Duration::from_millis(200), lines.next_line()).await;
        let line = match next {
            Err(_) => continue, // nothing yet: look at `stop` again
            Ok(Ok(Some(line))) => line,
            Ok(_) => break, // the script ended
        };
        let event: Value =
            serde_json::from_str(&line).unwrap_or_else(|_| panic!("{process} printed {line:?}"));
        if let Some(sent) = event.get("invoke") {
            history.invoke(&process, Call::Send(send_of(sent, None)));
        } else if let Some(done) = event.get("ok") {
            history.complete(
                &process,
                OpKind::Ok,
                Call::Send(send_of(done, done[3].as_i64())),
            );
        } else if let Some(unsure) = event.get("info") {
            history.complete(&process, OpKind::Info, Call::Send(send_of(unsure, None)));
        } else if let Some(error) = event.get("fatal") {
            fatal = Some(error.to_string());
        }
    }
    let ended = tokio::time::timeout(STOP_PATIENCE, child.wait()).await;
    let stderr = stderr.lock().map(|s| s.clone()).unwrap_or_default();
    assert!(
        fatal.is_none(),
        "{process}: librdkafka's idempotent producer failed fatally: {}; stderr: {stderr}",
        fatal.unwrap_or_default()
    );
    assert!(
        matches!(ended, Ok(Ok(status)) if status.success()),
        "{process} did not stop cleanly ({ended:?}): {stderr}"
    );
}

/// A `[topic, partition, value, ...]` event as the history's send.
fn send_of(event: &Value, offset: Option<i64>) -> SendRecord {
    SendRecord {
        topic: event[0].as_str().unwrap_or_default().to_string(),
        partition: event[1]
            .as_i64()
            .and_then(|p| i32::try_from(p).ok())
            .unwrap_or(-1),
        value: event[2].as_str().unwrap_or_default().to_string(),
        offset,
    }
}
