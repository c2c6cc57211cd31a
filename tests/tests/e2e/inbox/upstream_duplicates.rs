//! An upstream that sends the same business events again under a new producer id (it
//! restarted without its idempotence state: the broker sees new records at new offsets)
//! has them applied once, because the Inbox deduplicates by the producer-supplied
//! idempotency key.

use std::time::Duration;

use idem_client::inbox::{sqlx, Inbox, InboxTx, Outcome};
use idem_client::{Consumer, ConsumerConfig, ConsumerRecord, OffsetSpec};

use super::*;

#[tokio::test]
async fn given_the_same_events_from_two_producer_ids_when_processed_then_each_is_applied_once() {
    let db = Database::postgres();
    let broker = broker().await;
    let bootstrap = broker.bootstrap();
    let events = transfers(0, 40);
    // Two producers, two producer ids: the broker's idempotence cannot tell the second
    // sending from new events.
    produce(&bootstrap, &events).await;
    produce(&bootstrap, &events).await;
    let ends = log_ends(&bootstrap).await;
    assert_eq!(
        ends.values().sum::<i64>(),
        80,
        "both sendings are in the log"
    );

    let inbox = Inbox::connect(db.url(), "payments")
        .await
        .expect("connects");
    inbox.migrate().await.expect("migrates");
    sqlx::query("CREATE TABLE payments (id TEXT NOT NULL, record_offset BIGINT NOT NULL)")
        .execute(inbox.pool())
        .await
        .expect("business table");
    let config = ConsumerConfig {
        start: OffsetSpec::Earliest,
        max_wait: Duration::from_millis(100),
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::connect(&bootstrap, config)
        .await
        .expect("consumer");
    consumer.assign((0..PARTITIONS).map(|p| (TOPIC.to_string(), p)).collect());
    inbox.seek_consumer(&mut consumer).await.expect("seek");

    let mut outcomes = Vec::new();
    let deadline = std::time::Instant::now() + idem_tests::wait::PATIENCE;
    loop {
        let positions = inbox.all_positions().await.expect("positions");
        if positions == ends {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not every record processed: positions {positions:?}, log ends {ends:?}"
        );
        let records = consumer
            .poll(Duration::from_millis(200))
            .await
            .expect("poll");
        let batch = inbox
            .process_batch(&records, |tx: &mut InboxTx, r: &ConsumerRecord| {
                Box::pin(async move {
                    let id = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default());
                    sqlx::query("INSERT INTO payments (id, record_offset) VALUES ($1, $2)")
                        .bind(id.into_owned())
                        .bind(r.offset)
                        .execute(&mut **tx)
                        .await?;
                    Ok(())
                })
            })
            .await
            .expect("processed");
        outcomes.extend(batch.outcomes);
    }

    let applied = outcomes.iter().filter(|o| **o == Outcome::Applied).count();
    let duplicates = outcomes
        .iter()
        .filter(|o| **o == Outcome::Duplicate)
        .count();
    assert_eq!(
        (applied, duplicates),
        (40, 40),
        "each event applied once, its copy skipped"
    );
    let count = |sql: &'static str| {
        let pool = inbox.pool().clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .expect(sql)
        }
    };
    assert_eq!(
        count("SELECT COUNT(*) FROM payments").await,
        40,
        "one row per event"
    );
    assert_eq!(count("SELECT COUNT(DISTINCT id) FROM payments").await, 40);
}
