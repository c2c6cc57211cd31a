//! The Inbox's tables, as numbered migrations: processed keys, positions, and the
//! schema-version table recording which migrations ran. `Inbox::migrate()` applies the
//! missing ones in one transaction; `Inbox::schema_sql` prints them for operators who
//! manage schemas themselves. A database at a version this SDK does not know (a newer
//! SDK migrated it) is refused, never touched.
//!
//! Every integer is BIGINT so both backends hand back the same type (i64).

/// The database the Inbox talks to, chosen by the URL's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// One step of the schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    pub version: i64,
    pub what: &'static str,
    pub statements: &'static [&'static str],
}

/// The table that records the applied versions; created (if missing) before anything else.
pub const VERSION_TABLE: &str = "CREATE TABLE IF NOT EXISTS idem_inbox_schema (\
    version BIGINT PRIMARY KEY, \
    applied_at_ms BIGINT NOT NULL)";

/// Every migration, in order; the last one's version is [`LATEST`].
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        what: "processed keys and positions",
        statements: &[
            // One row per record an inbox applied (or skipped as a duplicate of one it
            // applied): the key is unique per inbox, so a second insert of it fails.
            "CREATE TABLE idem_inbox_processed (\
                inbox TEXT NOT NULL, \
                idempotency_key TEXT NOT NULL, \
                topic TEXT NOT NULL, \
                partition_id BIGINT NOT NULL, \
                record_offset BIGINT NOT NULL, \
                processed_at_ms BIGINT NOT NULL, \
                PRIMARY KEY (inbox, idempotency_key))",
            // The next offset to read per partition, written in the same transaction as
            // the business writes: the consumer resumes here, not at broker offsets.
            "CREATE TABLE idem_inbox_positions (\
                inbox TEXT NOT NULL, \
                topic TEXT NOT NULL, \
                partition_id BIGINT NOT NULL, \
                next_offset BIGINT NOT NULL, \
                updated_at_ms BIGINT NOT NULL, \
                PRIMARY KEY (inbox, topic, partition_id))",
        ],
    },
    Migration {
        version: 2,
        what: "index for pruning processed keys by age",
        statements: &["CREATE INDEX idem_inbox_processed_age \
            ON idem_inbox_processed (inbox, processed_at_ms)"],
    },
    Migration {
        version: 3,
        what: "index for pruning processed keys by count",
        // `prune_by_count` lists a topic's partitions, then reads each partition's
        // keys newest offset first and deletes below a cut: without this index each of
        // those is a scan of every key of every inbox (the primary key starts with the
        // idempotency key, the age index with the time).
        statements: &["CREATE INDEX idem_inbox_processed_offset \
            ON idem_inbox_processed (inbox, topic, partition_id, record_offset)"],
    },
];

/// The schema version this SDK writes and reads.
pub const LATEST: i64 = 3;

/// What to do with a database whose schema is at `found` (0: no inbox tables yet).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaPlan {
    Current,
    /// Apply these, in order.
    Migrate(Vec<Migration>),
    /// A newer SDK's schema: refuse.
    TooNew,
}

/// The migrations that take a schema at `found` to [`LATEST`].
pub fn plan(found: i64) -> SchemaPlan {
    if found > LATEST {
        return SchemaPlan::TooNew;
    }
    let pending: Vec<Migration> = MIGRATIONS
        .iter()
        .filter(|m| m.version > found)
        .copied()
        .collect();
    if pending.is_empty() {
        SchemaPlan::Current
    } else {
        SchemaPlan::Migrate(pending)
    }
}

/// The whole schema as a script an operator runs by hand (same tables as `migrate()`).
pub fn schema_sql(backend: Backend) -> String {
    let mut script =
        format!("-- idem inbox schema, version {LATEST} ({backend:?})\n{VERSION_TABLE};\n");
    for m in MIGRATIONS {
        script.push_str(&format!("-- version {}: {}\n", m.version, m.what));
        for statement in m.statements {
            script.push_str(statement);
            script.push_str(";\n");
        }
        script.push_str(&format!(
            "INSERT INTO idem_inbox_schema (version, applied_at_ms) VALUES ({}, 0);\n",
            m.version
        ));
    }
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrations_are_numbered_one_by_one_up_to_latest() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1);
        }
        assert_eq!(MIGRATIONS.last().map(|m| m.version), Some(LATEST));
    }

    #[test]
    fn given_an_empty_database_then_every_migration_runs() {
        assert_eq!(plan(0), SchemaPlan::Migrate(MIGRATIONS.to_vec()));
    }

    #[test]
    fn given_an_older_schema_then_only_the_missing_migrations_run() {
        assert_eq!(plan(1), SchemaPlan::Migrate(MIGRATIONS[1..].to_vec()));
        assert_eq!(plan(2), SchemaPlan::Migrate(MIGRATIONS[2..].to_vec()));
        assert_eq!(plan(LATEST), SchemaPlan::Current);
    }

    #[test]
    fn given_a_newer_schema_then_it_is_refused() {
        assert_eq!(plan(LATEST + 1), SchemaPlan::TooNew);
    }

    #[test]
    fn the_printed_schema_records_every_version() {
        let sql = schema_sql(Backend::Postgres);
        for m in MIGRATIONS {
            assert!(sql.contains(&format!("VALUES ({}, 0)", m.version)));
        }
    }
}
