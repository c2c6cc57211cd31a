//! The database Inbox: exactly-once from a topic into PostgreSQL or SQLite. Behind the
//! cargo feature `inbox` (which brings `sqlx`), so the core SDK pulls no database driver.
//!
//! The broker cannot make "write to the database" and "commit the offset" one atomic
//! step; the database can. [`Inbox::process_batch`] runs, in ONE database transaction:
//! for each record, insert its idempotency key ([`key`]) into the processed-keys table
//! (a key already there: skip the record), run the caller's business writes on the same
//! transaction, then store the next position of each partition; commit. A crash before
//! the commit leaves nothing; after it, everything. The consumer resumes from the
//! positions the database holds ([`Inbox::seek_consumer`], [`Inbox::seek_assigned`]),
//! not from broker offsets (commit those afterwards for lag monitoring only).
//!
//! A record without a value (a tombstone) is processed like any other: the business
//! closure gets the record and decides (its `value` is `None`). Design, schema and
//! guarantees: docs/inbox.md.
//!
//! ```no_run
//! # async fn example(mut consumer: idem_client::Consumer) -> Result<(), idem_client::inbox::InboxError> {
//! use idem_client::inbox::{Inbox, InboxTx};
//! use idem_client::ConsumerRecord;
//!
//! let inbox = Inbox::connect("sqlite:///var/lib/app/ledger.db", "ledger").await?;
//! inbox.migrate().await?;
//! inbox.seek_consumer(&mut consumer).await?;
//! let records = consumer.poll(std::time::Duration::from_secs(1)).await?;
//! inbox
//!     .process_batch(&records, |tx: &mut InboxTx, record: &ConsumerRecord| {
//!         Box::pin(async move {
//!             sqlx::query("INSERT INTO seen (offset_seen) VALUES ($1)")
//!                 .bind(record.offset)
//!                 .execute(&mut **tx)
//!                 .await?;
//!             Ok(())
//!         })
//!     })
//!     .await?;
//! # Ok(()) }
//! ```

pub mod error;
pub mod key;
pub mod plan;
pub mod retention;
pub mod schema;
pub mod url;

/// The `sqlx` the Inbox is built with: business writes use it, in the same version.
pub use sqlx;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sqlx::any::{AnyConnectOptions, AnyPoolOptions};
use sqlx::{Any, AnyConnection, AnyPool, Connection, Row};

pub use self::error::InboxError;
pub use self::key::{idempotency_key, IDEMPOTENCY_KEY_HEADER};
pub use self::plan::Outcome;
pub use self::retention::TopicRetention;
pub use self::schema::Backend;
use self::schema::SchemaPlan;
use crate::clock::now_ms;
use crate::consumer::{Consumer, ConsumerRecord};
use crate::group::consumer::GroupConsumer;
use crate::group::member::{Event, TopicPartition};

/// The transaction the caller's business writes run on (`&mut **tx` is an executor).
pub type InboxTx = sqlx::Transaction<'static, Any>;

/// What the business closure returns: `Box::pin(async move { … })`, a future that may
/// borrow the transaction and the record. A boxed future rather than an async closure
/// so that `process_batch` stays `Send` (an `AsyncFnMut` bound makes the compiler
/// unable to prove it, and a consumer loop could not run in `tokio::spawn`); state the
/// closure would update is in the returned [`BatchOutcome`] instead.
pub type Apply<'a> = futures::future::BoxFuture<'a, Result<(), InboxError>>;

/// Inbox settings, each with a documented default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboxConfig {
    /// `postgres://user:password@host:port/db` or `sqlite://path` (the file is created
    /// when missing).
    pub url: String,
    /// This consumer's name (an application, or a consumer group): positions and
    /// processed keys are kept per name, so two applications reading the same topic
    /// into one database each apply every record.
    pub name: String,
    /// How long connecting (and later, taking a pooled connection) may take. Default 10 s.
    pub connect_timeout: Duration,
    /// Pooled connections. Default 4 for PostgreSQL; SQLite always uses 1 (it has one
    /// writer at a time; more connections would only wait on each other).
    pub max_connections: u32,
}

impl InboxConfig {
    pub fn new(url: impl Into<String>, name: impl Into<String>) -> InboxConfig {
        InboxConfig {
            url: url.into(),
            name: name.into(),
            connect_timeout: Duration::from_secs(10),
            max_connections: 4,
        }
    }
}

/// What became of a batch (one transaction).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    /// One per record, in order.
    pub outcomes: Vec<Outcome>,
    /// The positions stored by the transaction (partitions whose position moved).
    pub positions: BTreeMap<TopicPartition, i64>,
}

impl BatchOutcome {
    pub fn applied(&self) -> usize {
        self.count(Outcome::Applied)
    }
    pub fn skipped(&self) -> usize {
        self.outcomes.len() - self.applied()
    }
    fn count(&self, outcome: Outcome) -> usize {
        self.outcomes.iter().filter(|o| **o == outcome).count()
    }
}

/// Applies consumed records to a database exactly once; see the module doc.
#[derive(Debug, Clone)]
pub struct Inbox {
    pool: AnyPool,
    name: String,
    backend: Backend,
    /// The schema was seen at this SDK's version (checked again, not assumed, until
    /// then: an operator may migrate by hand while the inbox runs).
    schema_current: Arc<AtomicBool>,
}

impl Inbox {
    /// Connects to the database at `url` as inbox `name`, with default settings.
    pub async fn connect(url: &str, name: &str) -> Result<Inbox, InboxError> {
        Inbox::connect_with(InboxConfig::new(url, name)).await
    }

    /// Connects, and refuses a database whose inbox schema is newer than this SDK's. An
    /// unreachable database is [`InboxError::Connect`]: at once when the connection is
    /// refused, after `connect_timeout` when nothing answers.
    pub async fn connect_with(config: InboxConfig) -> Result<Inbox, InboxError> {
        let backend = url::backend(&config.url)?;
        sqlx::any::install_default_drivers();
        let max_connections = match backend {
            Backend::Postgres => config.max_connections.max(1),
            Backend::Sqlite => 1,
        };
        let connect_error = |source| InboxError::Connect {
            url: url::redact(&config.url),
            source,
        };
        let options = AnyConnectOptions::from_str(&url::connect_url(&config.url, backend))
            .map_err(connect_error)?;
        // One connection first, alone: the pool would retry a refused connection until
        // its timeout and then report only that it timed out; this says why.
        let probe = tokio::time::timeout(
            config.connect_timeout,
            AnyConnection::connect_with(&options),
        )
        .await
        .map_err(|_| {
            connect_error(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer within {:?}", config.connect_timeout),
            )))
        })?
        .map_err(connect_error)?;
        // Closing is a courtesy to the server; the pool opens its own connections.
        let _ = probe.close().await;
        let pool = AnyPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(config.connect_timeout)
            .connect_with(options)
            .await
            .map_err(connect_error)?;
        let inbox = Inbox {
            pool,
            name: config.name,
            backend,
            schema_current: Arc::new(AtomicBool::new(false)),
        };
        let found = inbox.schema_version().await?;
        match schema::plan(found) {
            SchemaPlan::TooNew => Err(InboxError::SchemaTooNew {
                found,
                supported: schema::LATEST,
            }),
            SchemaPlan::Current => {
                inbox.schema_current.store(true, Ordering::Relaxed);
                Ok(inbox)
            }
            // Accepted: `migrate()` brings it up to date.
            SchemaPlan::Migrate(_) => Ok(inbox),
        }
    }

    /// The script `migrate()` would run on an empty database, for operators who manage
    /// schemas themselves.
    pub fn schema_sql(backend: Backend) -> String {
        schema::schema_sql(backend)
    }

    /// Brings the inbox tables to this SDK's version (creating them on an empty
    /// database) in one transaction; returns the version. A newer schema is refused.
    pub async fn migrate(&self) -> Result<i64, InboxError> {
        let mut tx = self.pool.begin().await?;
        if self.backend == Backend::Postgres {
            // Two processes migrating at once would race on CREATE TABLE; this lock,
            // released at commit, makes the second one wait and then find the work done.
            sqlx::query("SELECT CAST(pg_advisory_xact_lock($1) AS TEXT)")
                .bind(MIGRATION_LOCK)
                .execute(&mut *tx)
                .await?;
        }
        sqlx::query(schema::VERSION_TABLE).execute(&mut *tx).await?;
        let found: i64 =
            sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM idem_inbox_schema")
                .fetch_one(&mut *tx)
                .await?;
        match schema::plan(found) {
            SchemaPlan::TooNew => Err(InboxError::SchemaTooNew {
                found,
                supported: schema::LATEST,
            }),
            SchemaPlan::Current => {
                self.schema_current.store(true, Ordering::Relaxed);
                Ok(found)
            }
            SchemaPlan::Migrate(pending) => {
                for m in &pending {
                    for statement in m.statements {
                        sqlx::query(statement).execute(&mut *tx).await?;
                    }
                    sqlx::query(
                        "INSERT INTO idem_inbox_schema (version, applied_at_ms) VALUES ($1, $2)",
                    )
                    .bind(m.version)
                    .bind(now_ms())
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                self.schema_current.store(true, Ordering::Relaxed);
                Ok(schema::LATEST)
            }
        }
    }

    /// The inbox schema version in the database (0: no inbox tables).
    pub async fn schema_version(&self) -> Result<i64, InboxError> {
        let exists = match self.backend {
            Backend::Postgres => {
                "SELECT COUNT(*) FROM information_schema.tables \
                 WHERE table_name = 'idem_inbox_schema' AND table_schema = current_schema()"
            }
            Backend::Sqlite => {
                "SELECT COUNT(*) FROM sqlite_master \
                 WHERE type = 'table' AND name = 'idem_inbox_schema'"
            }
        };
        let tables: i64 = sqlx::query_scalar(exists).fetch_one(&self.pool).await?;
        if tables == 0 {
            return Ok(0);
        }
        Ok(
            sqlx::query_scalar("SELECT COALESCE(MAX(version), 0) FROM idem_inbox_schema")
                .fetch_one(&self.pool)
                .await?,
        )
    }

    /// [`Inbox::process_batch`] of one record.
    pub async fn process<F>(&self, record: &ConsumerRecord, apply: F) -> Result<Outcome, InboxError>
    where
        F: for<'a> FnMut(&'a mut InboxTx, &'a ConsumerRecord) -> Apply<'a>,
    {
        let outcome = self
            .process_batch(std::slice::from_ref(record), apply)
            .await?;
        Ok(outcome.outcomes.first().copied().unwrap_or(Outcome::Behind))
    }

    /// Processes `records` in one database transaction: each record whose key this inbox
    /// has not processed (and that is not behind its partition's stored position) gets
    /// `apply` run on the transaction; then the keys and the next positions are stored
    /// and the transaction commits. An error anywhere (the closure's included) rolls it
    /// all back: no key, no business write, no position of this batch is stored.
    pub async fn process_batch<F>(
        &self,
        records: &[ConsumerRecord],
        mut apply: F,
    ) -> Result<BatchOutcome, InboxError>
    where
        F: for<'a> FnMut(&'a mut InboxTx, &'a ConsumerRecord) -> Apply<'a>,
    {
        self.require_current_schema().await?;
        let mut tx = self.pool.begin().await?;
        let partitions: BTreeSet<TopicPartition> = records
            .iter()
            .map(|r| (r.topic.clone(), r.partition))
            .collect();
        let stored = self.read_positions(&mut tx, &partitions).await?;
        let places = || {
            records
                .iter()
                .map(|r| (r.topic.as_str(), r.partition, r.offset))
        };
        let standings = plan::standings(places(), &stored);
        let keys: Vec<String> = records.iter().map(idempotency_key).collect();
        let now = now_ms();
        // The keys go in a few multi-row statements rather than one per record: a round
        // trip per record would double a batch's statements (docs/benchmarks.md).
        let to_insert = plan::keys_to_insert(&standings, &keys);
        let mut inserted = HashSet::with_capacity(to_insert.len());
        for chunk in to_insert.chunks(self.rows_per_statement()) {
            let sql = format!(
                "INSERT INTO idem_inbox_processed \
                 (inbox, idempotency_key, topic, partition_id, record_offset, processed_at_ms) \
                 VALUES {} ON CONFLICT (inbox, idempotency_key) DO NOTHING \
                 RETURNING idempotency_key",
                placeholders(chunk.len(), 6)
            );
            let mut query = sqlx::query(&sql);
            for &i in chunk {
                let record = &records[i];
                query = query
                    .bind(self.name.as_str())
                    .bind(keys[i].as_str())
                    .bind(record.topic.as_str())
                    .bind(i64::from(record.partition))
                    .bind(record.offset)
                    .bind(now);
            }
            for row in query.fetch_all(&mut *tx).await? {
                inserted.insert(row.try_get::<String, _>(0)?);
            }
        }
        let outcomes = plan::outcomes(&standings, &keys, &inserted);
        for (record, outcome) in records.iter().zip(&outcomes) {
            if *outcome == Outcome::Applied {
                apply(&mut tx, record).await?;
            }
        }
        let positions = plan::positions_to_store(places(), &stored);
        let moved: Vec<(&TopicPartition, &i64)> = positions.iter().collect();
        for chunk in moved.chunks(self.rows_per_statement()) {
            // The WHERE keeps a position from moving back even if another owner of the
            // partition committed further meanwhile.
            let sql = format!(
                "INSERT INTO idem_inbox_positions \
                 (inbox, topic, partition_id, next_offset, updated_at_ms) \
                 VALUES {} \
                 ON CONFLICT (inbox, topic, partition_id) DO UPDATE \
                 SET next_offset = excluded.next_offset, updated_at_ms = excluded.updated_at_ms \
                 WHERE idem_inbox_positions.next_offset < excluded.next_offset",
                placeholders(chunk.len(), 5)
            );
            let mut query = sqlx::query(&sql);
            for ((topic, partition), next_offset) in chunk {
                query = query
                    .bind(self.name.as_str())
                    .bind(topic.as_str())
                    .bind(i64::from(*partition))
                    .bind(**next_offset)
                    .bind(now);
            }
            query.execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(BatchOutcome {
            outcomes,
            positions,
        })
    }

    /// The stored next offsets of `partitions` (partitions this inbox never processed
    /// are absent).
    pub async fn positions(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, i64>, InboxError> {
        let mut conn = self.pool.acquire().await?;
        let wanted: BTreeSet<TopicPartition> = partitions.iter().cloned().collect();
        self.read_positions(&mut conn, &wanted).await
    }

    /// Every stored position of this inbox.
    pub async fn all_positions(&self) -> Result<BTreeMap<TopicPartition, i64>, InboxError> {
        let rows = sqlx::query(
            "SELECT topic, partition_id, next_offset FROM idem_inbox_positions WHERE inbox = $1",
        )
        .bind(self.name.as_str())
        .fetch_all(&self.pool)
        .await?;
        let mut positions = BTreeMap::new();
        for row in rows {
            let topic: String = row.try_get(0)?;
            let partition: i64 = row.try_get(1)?;
            positions.insert((topic, partition_id(partition)?), row.try_get(2)?);
        }
        Ok(positions)
    }

    /// Seeks every partition assigned to `consumer` to its stored position; returns
    /// those positions. A partition without one keeps the consumer's own start
    /// (`ConsumerConfig::start`: use `OffsetSpec::Earliest` so a new inbox reads all).
    pub async fn seek_consumer(
        &self,
        consumer: &mut Consumer,
    ) -> Result<BTreeMap<TopicPartition, i64>, InboxError> {
        let positions = self.positions(&consumer.assignment()).await?;
        for ((topic, partition), offset) in &positions {
            consumer.seek(topic, *partition, *offset)?;
        }
        Ok(positions)
    }

    /// For a group member: seeks the partitions the `events` of a `poll` newly assigned
    /// to their stored positions (instead of the group's committed offsets). Call it
    /// with every poll's events before processing further records.
    pub async fn seek_assigned(
        &self,
        group: &mut GroupConsumer,
        events: &[Event],
    ) -> Result<BTreeMap<TopicPartition, i64>, InboxError> {
        let assigned: Vec<TopicPartition> = events
            .iter()
            .filter_map(|e| match e {
                Event::Assigned(partitions) => Some(partitions.iter().cloned()),
                _ => None,
            })
            .flatten()
            .collect();
        let positions = self.positions(&assigned).await?;
        for ((topic, partition), offset) in &positions {
            group.seek(topic, *partition, *offset)?;
        }
        Ok(positions)
    }

    /// Deletes the processed keys of `topic` older than `keep`; refused when `keep` is
    /// shorter than the topic's retention (the rule in [`retention`]). Returns how many
    /// keys went.
    pub async fn prune(
        &self,
        topic: &str,
        keep: Duration,
        topic_retention: TopicRetention,
    ) -> Result<u64, InboxError> {
        let cutoff = retention::prune_cutoff_ms(now_ms(), keep, topic_retention)?;
        let deleted = sqlx::query(
            "DELETE FROM idem_inbox_processed \
             WHERE inbox = $1 AND topic = $2 AND processed_at_ms < $3",
        )
        .bind(self.name.as_str())
        .bind(topic)
        .bind(cutoff)
        .execute(&self.pool)
        .await?
        .rows_affected();
        Ok(deleted)
    }

    /// Deletes, in each partition of `topic`, the processed keys beyond its
    /// `keep_newest` newest (by record offset), except keys younger than the topic's
    /// retention, which stay however many there are (the rule in [`retention`]); a topic
    /// kept forever is refused. Returns how many keys went.
    pub async fn prune_by_count(
        &self,
        topic: &str,
        keep_newest: u64,
        topic_retention: TopicRetention,
    ) -> Result<u64, InboxError> {
        // Checked before any read: a topic kept forever is refused whatever it holds.
        retention::count_prune(now_ms(), keep_newest, None, topic_retention)?;
        let partitions: Vec<i64> = sqlx::query_scalar(COUNT_PRUNE_PARTITIONS)
            .bind(self.name.as_str())
            .bind(topic)
            .fetch_all(&self.pool)
            .await?;
        let skip = i64::try_from(keep_newest.saturating_sub(1)).unwrap_or(i64::MAX);
        let mut deleted = 0;
        for partition in partitions {
            let kept_oldest: Option<i64> = if keep_newest == 0 {
                None
            } else {
                sqlx::query_scalar(COUNT_PRUNE_KEPT_OLDEST)
                    .bind(self.name.as_str())
                    .bind(topic)
                    .bind(partition)
                    .bind(skip)
                    .fetch_optional(&self.pool)
                    .await?
            };
            let Some(rule) =
                retention::count_prune(now_ms(), keep_newest, kept_oldest, topic_retention)?
            else {
                continue;
            };
            deleted += sqlx::query(COUNT_PRUNE_DELETE)
                .bind(self.name.as_str())
                .bind(topic)
                .bind(partition)
                .bind(rule.offset)
                .bind(rule.processed_before_ms)
                .execute(&self.pool)
                .await?
                .rows_affected();
        }
        Ok(deleted)
    }

    /// The pool, for the caller's own reads and writes outside the inbox.
    pub fn pool(&self) -> &AnyPool {
        &self.pool
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// A clear error, rather than a missing table or column, when the schema is not
    /// this SDK's.
    async fn require_current_schema(&self) -> Result<(), InboxError> {
        if self.schema_current.load(Ordering::Relaxed) {
            return Ok(());
        }
        let found = self.schema_version().await?;
        match schema::plan(found) {
            SchemaPlan::Current => {
                self.schema_current.store(true, Ordering::Relaxed);
                Ok(())
            }
            SchemaPlan::TooNew => Err(InboxError::SchemaTooNew {
                found,
                supported: schema::LATEST,
            }),
            SchemaPlan::Migrate(_) => Err(InboxError::SchemaOutdated {
                found,
                needed: schema::LATEST,
            }),
        }
    }

    /// Rows per multi-row INSERT. PostgreSQL: 500 (6 parameters each stays far below
    /// its 65,535 per statement). SQLite: 50, since sqlx binds a statement's
    /// parameters in time that grows faster than their count (500-row statements made
    /// the SQLite inbox 3x slower than one statement per row; docs/benchmarks.md).
    fn rows_per_statement(&self) -> usize {
        match self.backend {
            Backend::Postgres => 500,
            Backend::Sqlite => 50,
        }
    }

    async fn read_positions(
        &self,
        conn: &mut sqlx::AnyConnection,
        partitions: &BTreeSet<TopicPartition>,
    ) -> Result<BTreeMap<TopicPartition, i64>, InboxError> {
        let topics: BTreeSet<&str> = partitions.iter().map(|(t, _)| t.as_str()).collect();
        let mut positions = BTreeMap::new();
        // One statement per topic (a batch usually has one), not one per partition.
        for topic in topics {
            let rows = sqlx::query(
                "SELECT partition_id, next_offset FROM idem_inbox_positions \
                 WHERE inbox = $1 AND topic = $2",
            )
            .bind(self.name.as_str())
            .bind(topic)
            .fetch_all(&mut *conn)
            .await?;
            for row in rows {
                let tp = (topic.to_string(), partition_id(row.try_get(0)?)?);
                if partitions.contains(&tp) {
                    positions.insert(tp, row.try_get(1)?);
                }
            }
        }
        Ok(positions)
    }
}

/// `($1, $2, …), ($n+1, …), …`: `rows` groups of `columns` numbered parameters.
fn placeholders(rows: usize, columns: usize) -> String {
    (0..rows)
        .map(|r| {
            let group: Vec<String> = (1..=columns)
                .map(|c| format!("${}", r * columns + c))
                .collect();
            format!("({})", group.join(", "))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

// The statements of `prune_by_count`, each served by the index of schema version 3
// on (inbox, topic, partition_id, record_offset) (a unit test reads SQLite's plans).
/// The partitions of a topic holding keys (`$1` inbox, `$2` topic).
const COUNT_PRUNE_PARTITIONS: &str = "SELECT DISTINCT partition_id FROM idem_inbox_processed \
     WHERE inbox = $1 AND topic = $2";
/// The offset of a partition's `$4 + 1`th newest key.
const COUNT_PRUNE_KEPT_OLDEST: &str = "SELECT record_offset FROM idem_inbox_processed \
     WHERE inbox = $1 AND topic = $2 AND partition_id = $3 \
     ORDER BY record_offset DESC LIMIT 1 OFFSET $4";
/// A partition's keys below offset `$4` processed before `$5`.
const COUNT_PRUNE_DELETE: &str = "DELETE FROM idem_inbox_processed \
     WHERE inbox = $1 AND topic = $2 AND partition_id = $3 \
     AND record_offset < $4 AND processed_at_ms < $5";

/// The key of the advisory lock PostgreSQL migrations hold (any fixed number; this
/// one spells "idem").
const MIGRATION_LOCK: i64 = 0x6964_656d;

fn partition_id(stored: i64) -> Result<i32, InboxError> {
    i32::try_from(stored).map_err(|_| {
        InboxError::Database(sqlx::Error::Decode(
            format!("partition id {stored} out of range").into(),
        ))
    })
}

/// Compiles only while `process_batch` with a typical business closure is `Send`, so
/// a consumer loop may run in `tokio::spawn`.
#[allow(dead_code)]
fn process_batch_is_send(inbox: Inbox, records: Vec<ConsumerRecord>) {
    fn spawnable<T: Send>(_: T) {}
    let table = String::from("seen");
    spawnable(async move {
        inbox
            .process_batch(&records, |tx: &mut InboxTx, record: &ConsumerRecord| {
                let sql = format!("INSERT INTO {table} (offset_seen) VALUES ($1)");
                Box::pin(async move {
                    sqlx::query(&sql)
                        .bind(record.offset)
                        .execute(&mut **tx)
                        .await?;
                    Ok(())
                })
            })
            .await
    });
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    const HOUR: Duration = Duration::from_secs(3600);

    fn record(partition: i32, offset: i64) -> ConsumerRecord {
        ConsumerRecord {
            topic: "t".into(),
            partition,
            offset,
            key: None,
            value: Some(Bytes::from_static(b"v")),
            headers: vec![(
                IDEMPOTENCY_KEY_HEADER.to_string(),
                Bytes::from(format!("event-{partition}-{offset}")),
            )],
            timestamp_ms: 0,
        }
    }

    fn sqlite_url(dir: &tempfile::TempDir) -> String {
        format!("sqlite://{}", dir.path().join("inbox.db").display())
    }

    async fn sqlite_inbox(dir: &tempfile::TempDir) -> Inbox {
        let inbox = Inbox::connect(&sqlite_url(dir), "test")
            .await
            .expect("connect");
        inbox.migrate().await.expect("migrate");
        inbox
    }

    async fn process(inbox: &Inbox, records: &[ConsumerRecord]) -> BatchOutcome {
        inbox
            .process_batch(records, |_: &mut InboxTx, _: &ConsumerRecord| {
                Box::pin(async { Ok(()) })
            })
            .await
            .expect("batch")
    }

    /// The offsets of partition `partition` whose keys are stored.
    async fn stored_offsets(inbox: &Inbox, partition: i64) -> Vec<i64> {
        sqlx::query_scalar(
            "SELECT record_offset FROM idem_inbox_processed \
             WHERE partition_id = $1 ORDER BY record_offset",
        )
        .bind(partition)
        .fetch_all(inbox.pool())
        .await
        .expect("read keys")
    }

    #[tokio::test]
    async fn given_a_batch_with_a_key_twice_then_it_is_applied_once() {
        let dir = tempfile::tempdir().expect("temp dir");
        let inbox = sqlite_inbox(&dir).await;
        let mut again = record(0, 7);
        again.offset = 8;
        let got = process(&inbox, &[record(0, 7), again, record(1, 0)]).await;
        assert_eq!(
            got.outcomes,
            [Outcome::Applied, Outcome::Duplicate, Outcome::Applied]
        );
        let replay = process(&inbox, &[record(0, 9), record(0, 7)]).await;
        assert_eq!(replay.outcomes, [Outcome::Applied, Outcome::Behind]);
    }

    #[tokio::test]
    async fn given_old_keys_beyond_the_count_then_prune_by_count_deletes_only_those() {
        let dir = tempfile::tempdir().expect("temp dir");
        let inbox = sqlite_inbox(&dir).await;
        let partition0: Vec<ConsumerRecord> = (0..10).map(|o| record(0, o)).collect();
        let partition1: Vec<ConsumerRecord> = (0..2).map(|o| record(1, o)).collect();
        process(&inbox, &partition0).await;
        process(&inbox, &partition1).await;
        // Offsets 0..6 of partition 0 and all of partition 1 were processed 2 hours ago;
        // offsets 6..10 of partition 0 just now.
        sqlx::query("UPDATE idem_inbox_processed SET processed_at_ms = processed_at_ms - $1 WHERE partition_id = 1 OR record_offset < 6")
            .bind(2 * 3_600_000i64)
            .execute(inbox.pool())
            .await
            .expect("age keys");

        let refused = inbox.prune_by_count("t", 3, TopicRetention::Forever).await;
        assert!(matches!(refused, Err(InboxError::RetentionTooShort { .. })));

        // Keep 3 per partition: the young keys 6..10 stay (more than 3), the old 0..6 go;
        // partition 1 holds fewer than 3.
        let deleted = inbox
            .prune_by_count("t", 3, TopicRetention::For(HOUR))
            .await
            .expect("prune");
        assert_eq!(deleted, 6);
        assert_eq!(stored_offsets(&inbox, 0).await, [6, 7, 8, 9]);
        assert_eq!(stored_offsets(&inbox, 1).await, [0, 1]);

        // Keep 1: partition 1's older key goes, its newest stays.
        let deleted = inbox
            .prune_by_count("t", 1, TopicRetention::For(HOUR))
            .await
            .expect("prune");
        assert_eq!(deleted, 1);
        assert_eq!(stored_offsets(&inbox, 1).await, [1]);
    }

    /// SQLite's plan of `sql` (its `detail` lines) with `params` bound.
    async fn query_plan(inbox: &Inbox, sql: &str, params: &[i64]) -> String {
        let explain = format!("EXPLAIN QUERY PLAN {sql}");
        let mut query = sqlx::query_as::<_, (i64, i64, i64, String)>(&explain)
            .bind("test")
            .bind("t");
        for p in params {
            query = query.bind(*p);
        }
        let rows = query.fetch_all(inbox.pool()).await.expect("explain");
        rows.into_iter()
            .map(|(_, _, _, detail)| detail)
            .collect::<Vec<_>>()
            .join("; ")
    }

    #[tokio::test]
    async fn given_a_version_2_database_with_keys_when_migrated_then_prune_by_count_uses_the_offset_index_and_deletes_only_the_old_keys(
    ) {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = sqlite_url(&dir);
        // What version 2 of the SDK left: its tables and index, its version rows, and
        // the keys of offsets 0..10 of partition 0, the first 6 processed 2 hours ago.
        let old = Inbox::connect(&url, "test").await.expect("connect");
        sqlx::query(schema::VERSION_TABLE)
            .execute(old.pool())
            .await
            .expect("version table");
        for m in &schema::MIGRATIONS[..2] {
            for statement in m.statements {
                sqlx::query(statement)
                    .execute(old.pool())
                    .await
                    .expect("a v2 statement");
            }
            sqlx::query("INSERT INTO idem_inbox_schema (version, applied_at_ms) VALUES ($1, 0)")
                .bind(m.version)
                .execute(old.pool())
                .await
                .expect("a version row");
        }
        let now = now_ms();
        for offset in 0..10i64 {
            let age = if offset < 6 { 2 * 3_600_000 } else { 0 };
            sqlx::query(
                "INSERT INTO idem_inbox_processed (inbox, idempotency_key, topic, partition_id, \
                 record_offset, processed_at_ms) VALUES ('test', $1, 't', 0, $2, $3)",
            )
            .bind(format!("key:event-{offset}"))
            .bind(offset)
            .bind(now - age)
            .execute(old.pool())
            .await
            .expect("a v2 key");
        }
        assert_eq!(old.schema_version().await.expect("version"), 2);
        drop(old);

        let inbox = Inbox::connect(&url, "test").await.expect("connect");
        assert_eq!(inbox.migrate().await.expect("migrate"), schema::LATEST);
        assert_eq!(
            inbox.schema_version().await.expect("version"),
            schema::LATEST
        );
        for (sql, params) in [
            (COUNT_PRUNE_PARTITIONS, &[][..]),
            (COUNT_PRUNE_KEPT_OLDEST, &[0, 2][..]),
            (COUNT_PRUNE_DELETE, &[0, 7, now][..]),
        ] {
            let plan = query_plan(&inbox, sql, params).await;
            assert!(
                plan.contains("idem_inbox_processed_offset"),
                "{sql}: {plan}"
            );
        }

        // Keep 3: the old keys 0..6 go; 6..10 are younger than the topic's retention.
        let deleted = inbox
            .prune_by_count("t", 3, TopicRetention::For(HOUR))
            .await
            .expect("prune");
        assert_eq!(deleted, 6);
        assert_eq!(stored_offsets(&inbox, 0).await, [6, 7, 8, 9]);
    }
}
