//! A group member with an Inbox resumes newly assigned partitions from the positions the
//! database holds, not from where the group would start them: it reads nothing the
//! database already has, and applies the rest once.

use std::collections::BTreeMap;
use std::time::Duration;

use idem_client::inbox::{sqlx, Inbox, InboxTx, Outcome};
use idem_client::{ConsumerRecord, GroupConfig, GroupConsumer, OffsetSpec};
use idem_tests::wait::PATIENCE;
use idem_tests::{sdk, Cluster};
use tokio::time::Instant;

use super::*;

async fn apply_all(inbox: &Inbox, records: &[ConsumerRecord]) -> Vec<Outcome> {
    inbox
        .process_batch(records, |tx: &mut InboxTx, r: &ConsumerRecord| {
            Box::pin(async move {
                sqlx::query("INSERT INTO effects (partition_id, record_offset) VALUES ($1, $2)")
                    .bind(i64::from(r.partition))
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_positions_in_the_database_when_a_group_assigns_the_partitions_then_the_member_resumes_there(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, PARTITIONS, 1).await;
    let bootstrap = cluster.bootstrap();
    produce(&bootstrap, &transfers(0, 120)).await;
    let ends = log_ends(&bootstrap).await;
    let total: i64 = ends.values().sum();

    let db = Database::sqlite();
    let inbox = Inbox::connect(db.url(), "ledger").await.expect("connects");
    inbox.migrate().await.expect("migrates");
    sqlx::query(
        "CREATE TABLE effects (partition_id BIGINT NOT NULL, record_offset BIGINT NOT NULL)",
    )
    .execute(inbox.pool())
    .await
    .expect("business table");
    // An earlier run applied the first half of every partition.
    let log = sdk::read_all(&bootstrap, TOPIC, &(0..PARTITIONS).collect::<Vec<_>>()).await;
    let first_half: Vec<ConsumerRecord> = log
        .into_iter()
        .filter(|r| r.offset < ends[&(TOPIC.to_string(), r.partition)] / 2)
        .collect();
    let earlier = apply_all(&inbox, &first_half).await.len() as i64;
    assert!(earlier > 0);

    let mut config = GroupConfig::new("ledger");
    config.consumer.start = OffsetSpec::Earliest;
    config.consumer.max_wait = Duration::from_millis(50);
    let mut member = GroupConsumer::subscribe(&bootstrap, config, &[TOPIC])
        .await
        .expect("subscribes");
    let mut outcomes = Vec::new();
    let mut resumed = BTreeMap::new();
    let deadline = Instant::now() + PATIENCE;
    loop {
        let positions = inbox.all_positions().await.expect("positions");
        if positions == ends {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "positions {positions:?}, log ends {ends:?}"
        );
        let polled = member.poll(Duration::from_millis(100)).await.expect("poll");
        resumed.extend(
            inbox
                .seek_assigned(&mut member, &polled.events)
                .await
                .expect("seek"),
        );
        outcomes.extend(apply_all(&inbox, &polled.records).await);
        // Broker offsets afterwards, for lag monitoring only.
        member.commit().await.expect("commit");
    }

    assert_eq!(
        resumed.len(),
        PARTITIONS as usize,
        "every partition resumed from the database"
    );
    let applied = outcomes.iter().filter(|o| **o == Outcome::Applied).count() as i64;
    assert_eq!(
        (applied, outcomes.len() as i64),
        (total - earlier, total - earlier),
        "the member read only what the database did not have, and applied it"
    );
    let effects: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM effects")
        .fetch_one(inbox.pool())
        .await
        .expect("count");
    assert_eq!(effects, total, "every record applied once");
}
