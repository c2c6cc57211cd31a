//! What the Inbox does with a database it cannot use: one it cannot reach (a clear,
//! typed error; the ledger consumes nothing), one whose inbox schema a newer SDK wrote
//! (refused, untouched), one whose schema an older SDK wrote (migrated, its positions
//! kept), one not migrated yet (a clear error, not a missing table), and the schema an
//! operator applies by hand from `Inbox::schema_sql` (used as is).

use std::time::{Duration, Instant};

use idem_client::inbox::schema::{LATEST, MIGRATIONS, VERSION_TABLE};
use idem_client::inbox::{
    sqlx, Backend, Inbox, InboxConfig, InboxError, InboxTx, Outcome, TopicRetention,
};
use idem_client::ConsumerRecord;
use idem_tests::postgres::PostgresServer;

use super::*;

fn unreachable_url() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe a port");
    let port = probe.local_addr().expect("port").port();
    drop(probe);
    format!("postgres://ledger:hunter2@127.0.0.1:{port}/ledger")
}

#[tokio::test]
async fn given_a_database_nobody_serves_when_the_inbox_connects_then_a_connect_error_names_it() {
    let url = unreachable_url();
    let config = InboxConfig {
        connect_timeout: Duration::from_secs(3),
        ..InboxConfig::new(url.clone(), "ledger")
    };
    let started = Instant::now();
    let error = Inbox::connect_with(config)
        .await
        .expect_err("nothing listens");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "a refused connection fails at once, not after the timeout: took {:?}",
        started.elapsed()
    );
    assert!(matches!(error, InboxError::Connect { .. }), "{error:?}");
    let message = error.to_string();
    assert!(message.contains("cannot connect"), "{message}");
    assert!(
        message.to_lowercase().contains("refused"),
        "says why: {message}"
    );
    assert!(
        !message.contains("hunter2"),
        "the password is not printed: {message}"
    );
}

#[tokio::test]
async fn given_an_unreachable_database_when_the_ledger_starts_then_it_exits_with_the_error_and_reads_nothing(
) {
    let broker = broker().await;
    let bootstrap = broker.bootstrap();
    produce(&bootstrap, &transfers(0, 5)).await;
    let run = spawn_ledger(&bootstrap, &unreachable_url(), 5, None);
    let (status, stderr) = wait_exit(run, Duration::from_secs(30), "unreachable database").await;
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("cannot connect to the inbox database"),
        "{stderr}"
    );
}

#[tokio::test]
async fn given_a_schema_from_a_newer_sdk_when_the_inbox_connects_then_it_refuses() {
    let db = Database::sqlite();
    let inbox = Inbox::connect(db.url(), "ledger").await.expect("connects");
    inbox.migrate().await.expect("migrates");
    sqlx::query("INSERT INTO idem_inbox_schema (version, applied_at_ms) VALUES ($1, 0)")
        .bind(LATEST + 1)
        .execute(inbox.pool())
        .await
        .expect("a newer SDK's version");

    let refused = Inbox::connect(db.url(), "ledger")
        .await
        .expect_err("refused");
    assert!(
        matches!(refused, InboxError::SchemaTooNew { found, supported } if found == LATEST + 1 && supported == LATEST),
        "{refused:?}"
    );
    let migrate = inbox.migrate().await.expect_err("not migrated down");
    assert!(
        matches!(migrate, InboxError::SchemaTooNew { .. }),
        "{migrate:?}"
    );
    assert_eq!(
        inbox.schema_version().await.expect("version"),
        LATEST + 1,
        "untouched"
    );
}

/// What version `version` of the SDK left in `url`: its tables and indexes, its version
/// rows, a position, and the keys of offsets 0..10 of partition 0, the first 6
/// processed two hours ago.
async fn left_by_an_older_sdk(url: &str, version: i64) {
    let old = Inbox::connect(url, "ledger").await.expect("connects");
    sqlx::query(VERSION_TABLE)
        .execute(old.pool())
        .await
        .expect("version table");
    for m in &MIGRATIONS[..version as usize] {
        for statement in m.statements {
            sqlx::query(statement)
                .execute(old.pool())
                .await
                .expect("an old statement");
        }
        sqlx::query("INSERT INTO idem_inbox_schema (version, applied_at_ms) VALUES ($1, 0)")
            .bind(m.version)
            .execute(old.pool())
            .await
            .expect("a version row");
    }
    sqlx::query(
        "INSERT INTO idem_inbox_positions (inbox, topic, partition_id, next_offset, updated_at_ms) \
         VALUES ('ledger', 'transfers', 3, 42, 0)",
    )
    .execute(old.pool())
    .await
    .expect("an old position");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64;
    for offset in 0..10i64 {
        let age = if offset < 6 { 2 * 3_600_000 } else { 0 };
        sqlx::query(
            "INSERT INTO idem_inbox_processed (inbox, idempotency_key, topic, partition_id, \
             record_offset, processed_at_ms) VALUES ('ledger', $1, $2, 0, $3, $4)",
        )
        .bind(format!("key:t-{offset}"))
        .bind(TOPIC)
        .bind(offset)
        .bind(now - age)
        .execute(old.pool())
        .await
        .expect("an old key");
    }
    assert_eq!(old.schema_version().await.expect("version"), version);
}

#[tokio::test]
async fn given_a_schema_from_an_older_sdk_when_migrated_then_it_is_current_keeps_its_rows_and_prunes_by_count(
) {
    let server = PostgresServer::start();
    for version in 1..LATEST {
        let url = server.create_database(&format!("ledger_v{version}"));
        left_by_an_older_sdk(&url, version).await;

        let inbox = Inbox::connect(&url, "ledger")
            .await
            .expect("an older schema is accepted");
        assert_eq!(inbox.migrate().await.expect("migrates"), LATEST);
        assert_eq!(inbox.schema_version().await.expect("version"), LATEST);
        assert_eq!(
            inbox.migrate().await.expect("a second migrate is a no-op"),
            LATEST
        );
        let positions = inbox.all_positions().await.expect("positions");
        assert_eq!(
            positions.get(&("transfers".to_string(), 3)),
            Some(&42),
            "v{version}"
        );
        let indexes: Vec<String> = sqlx::query_scalar(
            // `name` is a type the Any driver does not decode.
            "SELECT CAST(indexname AS TEXT) FROM pg_indexes \
             WHERE tablename = 'idem_inbox_processed' ORDER BY indexname",
        )
        .fetch_all(inbox.pool())
        .await
        .expect("indexes");
        assert!(
            indexes.contains(&"idem_inbox_processed_age".to_string())
                && indexes.contains(&"idem_inbox_processed_offset".to_string()),
            "v{version}: the pruning indexes: {indexes:?}"
        );

        // The old keys beyond the 3 newest go; the young ones stay however many.
        let deleted = inbox
            .prune_by_count(TOPIC, 3, TopicRetention::For(Duration::from_secs(3600)))
            .await
            .expect("prunes");
        assert_eq!(deleted, 6, "v{version}");
        let kept: Vec<i64> = sqlx::query_scalar(
            "SELECT record_offset FROM idem_inbox_processed ORDER BY record_offset",
        )
        .fetch_all(inbox.pool())
        .await
        .expect("keys");
        assert_eq!(kept, [6, 7, 8, 9], "v{version}");
    }
}

fn a_record() -> ConsumerRecord {
    ConsumerRecord {
        topic: TOPIC.into(),
        partition: 0,
        offset: 0,
        key: None,
        value: None,
        headers: Vec::new(),
        timestamp_ms: 0,
    }
}

#[tokio::test]
async fn given_a_database_not_migrated_when_a_record_is_processed_then_the_error_says_migrate() {
    let db = Database::sqlite();
    let inbox = Inbox::connect(db.url(), "ledger").await.expect("connects");
    let error = inbox
        .process(&a_record(), |_: &mut InboxTx, _: &ConsumerRecord| {
            Box::pin(async { Ok(()) })
        })
        .await
        .expect_err("no inbox tables");
    assert!(
        matches!(error, InboxError::SchemaOutdated { found: 0, needed } if needed == LATEST),
        "{error:?}"
    );
    assert!(error.to_string().contains("migrate"), "{error}");
}

#[tokio::test]
async fn given_the_printed_schema_applied_by_an_operator_when_the_inbox_connects_then_it_processes_without_migrating(
) {
    let db = Database::postgres();
    let operator = Inbox::connect(db.url(), "ops").await.expect("connects");
    sqlx::raw_sql(&Inbox::schema_sql(Backend::Postgres))
        .execute(operator.pool())
        .await
        .expect("the printed script runs");

    let inbox = Inbox::connect(db.url(), "ledger").await.expect("connects");
    assert_eq!(inbox.schema_version().await.expect("version"), LATEST);
    let first = inbox
        .process(&a_record(), |_: &mut InboxTx, _: &ConsumerRecord| {
            Box::pin(async { Ok(()) })
        })
        .await
        .expect("processed");
    let again = inbox
        .process(&a_record(), |_: &mut InboxTx, _: &ConsumerRecord| {
            Box::pin(async { Ok(()) })
        })
        .await
        .expect("processed");
    assert_eq!((first, again), (Outcome::Applied, Outcome::Behind));
}
