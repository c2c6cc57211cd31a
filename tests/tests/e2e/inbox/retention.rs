//! Pruning processed keys: refused while the topic may still hold the records they
//! deduplicate; old keys go, and a record whose key was pruned but that lies behind its
//! partition's stored position is still not applied again.

use std::time::Duration;

use bytes::Bytes;
use idem_client::inbox::{sqlx, Inbox, InboxError, InboxTx, Outcome, TopicRetention};
use idem_client::{ConsumerRecord, IDEMPOTENCY_KEY_HEADER};

use super::*;

fn record(partition: i32, offset: i64, key: &str) -> ConsumerRecord {
    ConsumerRecord {
        topic: TOPIC.into(),
        partition,
        offset,
        key: None,
        value: Some(Bytes::from_static(b"v")),
        headers: vec![(
            IDEMPOTENCY_KEY_HEADER.to_string(),
            Bytes::from(key.to_string()),
        )],
        timestamp_ms: 0,
    }
}

async fn apply_all(inbox: &Inbox, records: &[ConsumerRecord]) -> Vec<Outcome> {
    inbox
        .process_batch(records, |tx: &mut InboxTx, r: &ConsumerRecord| {
            Box::pin(async move {
                sqlx::query("INSERT INTO effects (record_offset) VALUES ($1)")
                    .bind(r.offset)
                    .execute(&mut **tx)
                    .await?;
                Ok(())
            })
        })
        .await
        .expect("processed")
        .outcomes
}

#[tokio::test]
async fn given_keys_older_than_the_topic_retention_when_pruned_then_only_they_go_and_replays_stay_skipped(
) {
    let db = Database::sqlite();
    let inbox = Inbox::connect(db.url(), "ledger").await.expect("connects");
    inbox.migrate().await.expect("migrates");
    sqlx::query("CREATE TABLE effects (record_offset BIGINT NOT NULL)")
        .execute(inbox.pool())
        .await
        .expect("business table");
    let records: Vec<ConsumerRecord> = (0..4).map(|o| record(0, o, &format!("k{o}"))).collect();
    assert_eq!(apply_all(&inbox, &records).await, vec![Outcome::Applied; 4]);
    // Two keys processed two hours ago.
    sqlx::query("UPDATE idem_inbox_processed SET processed_at_ms = processed_at_ms - 7200000 WHERE idempotency_key IN ('key:k0', 'key:k1')")
        .execute(inbox.pool())
        .await
        .expect("age two keys");

    let hour = Duration::from_secs(3600);
    let too_short = inbox
        .prune(TOPIC, Duration::from_secs(60), TopicRetention::For(hour))
        .await;
    assert!(
        matches!(too_short, Err(InboxError::RetentionTooShort { .. })),
        "{too_short:?}"
    );
    let forever = inbox
        .prune(TOPIC, hour, TopicRetention::from_retention_ms(-1))
        .await;
    assert!(
        matches!(forever, Err(InboxError::RetentionTooShort { .. })),
        "{forever:?}"
    );
    assert_eq!(
        inbox
            .prune(TOPIC, hour, TopicRetention::For(hour))
            .await
            .expect("pruned"),
        2
    );

    // The pruned records read again (a consumer that rewound): behind the position.
    assert_eq!(
        apply_all(&inbox, &records[..2]).await,
        vec![Outcome::Behind; 2]
    );
    let effects: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM effects")
        .fetch_one(inbox.pool())
        .await
        .expect("count");
    assert_eq!(effects, 4, "nothing applied twice");
}
