//! Consume → transform → produce, exactly once (docs/groups.md).
//!
//! ```sh
//! cargo run -p idem-client --example transform -- 127.0.0.1:9092 input output uppercase [instance]
//! ```
//!
//! A member of consumer group `uppercase` reads `input` (read_committed), writes each
//! record's value in upper case to the same partition of `output`, and stores the
//! consumed offsets in the SAME transaction as the output (`send_offsets_to_transaction`).
//! A crash anywhere leaves either both the output and the offsets, or neither: a
//! restarted (or another) member goes on from the committed offsets and no input is
//! transformed twice into the output a read_committed reader sees. A member that was
//! fenced (its session expired while it was paused, say) finds its commit refused and
//! stops; its transaction is aborted.
//!
//! Each output record carries a `source` header naming its input (`topic/partition/
//! offset`), so a checker can count outputs per input.

use std::collections::BTreeMap;
use std::time::Duration;

use idem_client::{
    ClientError, GroupConfig, GroupConsumer, GroupEvent, ProducerRecord, TransactionalConfig,
    TransactionalProducer, TxnErrorClass,
};

#[tokio::main]
async fn main() -> Result<(), ClientError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [bootstrap, input, output, group, rest @ ..] = args.as_slice() else {
        eprintln!("usage: transform BOOTSTRAP INPUT OUTPUT GROUP [INSTANCE]");
        std::process::exit(2);
    };
    let instance = rest
        .first()
        .cloned()
        .unwrap_or_else(|| std::process::id().to_string());

    let mut config = GroupConfig::new(group.as_str());
    config.consumer.start = idem_client::OffsetSpec::Earliest;
    let mut consumer = GroupConsumer::subscribe(bootstrap, config, &[input.as_str()]).await?;
    // One transactional id per member instance: a restarted instance fences its zombie.
    let transactional_id = format!("{group}-{instance}");
    // A processor that dies mid-transaction holds its partitions' committed offsets
    // (their next owner waits for them) and its output's last stable offset until the
    // coordinator aborts the transaction at this timeout: 10 s, as Kafka Streams sets
    // it for exactly-once, rather than the producer's 60 s.
    let producer = TransactionalProducer::connect(TransactionalConfig {
        transaction_timeout: Duration::from_secs(10),
        ..TransactionalConfig::new(bootstrap.as_str(), transactional_id)
    })
    .await?;
    producer.init_transactions().await?;

    loop {
        let polled = consumer.poll(Duration::from_millis(100)).await?;
        for event in &polled.events {
            // Nothing is open between polls: each batch of records is committed (or
            // aborted) before the next poll, so a revocation needs no extra step.
            if let GroupEvent::Lost(lost) = event {
                eprintln!("lost {lost:?}: the group gave them to another member");
            }
        }
        if polled.records.is_empty() {
            continue;
        }
        producer.begin()?;
        // Everything between begin and commit: any failure but a fatal one aborts the
        // transaction below, rather than leaving it open until its timeout.
        let committed = async {
            let mut next: BTreeMap<(String, i32), i64> = BTreeMap::new();
            let mut sent = Vec::with_capacity(polled.records.len());
            for record in &polled.records {
                let upper = record
                    .value
                    .as_deref()
                    .map(|v| String::from_utf8_lossy(v).to_uppercase())
                    .unwrap_or_default();
                let source = format!("{}/{}/{}", record.topic, record.partition, record.offset);
                let mut out = ProducerRecord::new(output.as_str(), upper)
                    .partition(record.partition)
                    .header("source", source);
                if let Some(key) = &record.key {
                    out = out.key(key.clone());
                }
                sent.push(producer.send(out).await?);
                next.insert((record.topic.clone(), record.partition), record.offset + 1);
            }
            for delivery in sent {
                delivery.await?;
            }
            let offsets: Vec<((String, i32), i64)> = next.into_iter().collect();
            producer
                .send_offsets_to_transaction(&offsets, &consumer.group_metadata()?)
                .await?;
            let mut ended = producer.commit().await;
            // An unanswered commit may have happened: ask again, never abort it.
            while matches!(&ended, Err(e) if e.txn_class() == TxnErrorClass::Retriable) {
                ended = producer.commit().await;
            }
            ended
        }
        .await;
        if let Err(e) = committed {
            if e.txn_class() == TxnErrorClass::Fatal {
                return Err(e);
            }
            eprintln!("transaction aborted: {e}");
            producer.abort().await?;
            // Read again what the aborted transaction consumed.
            consumer.seek_to_committed().await?;
        }
    }
}
