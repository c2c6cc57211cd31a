//! What can go wrong in the Inbox, typed so a caller can tell "fix the URL or the
//! database" from "the schema belongs to a newer SDK" from "the broker said no".
//! Its own type and not a `ClientError` variant: these errors carry `sqlx` types, and
//! `ClientError` stays free of the optional database driver.

use std::time::Duration;

use crate::error::ClientError;

#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    /// The URL names no backend the Inbox speaks (postgres:// or sqlite://).
    #[error("unsupported database URL {url:?}: expected postgres://… or sqlite://…")]
    UnsupportedUrl { url: String },
    /// The database could not be reached or refused the login; nothing was consumed.
    #[error("cannot connect to the inbox database {url}: {source}")]
    Connect {
        /// The URL without its password.
        url: String,
        #[source]
        source: sqlx::Error,
    },
    /// The database holds an inbox schema this SDK does not know: a newer SDK migrated
    /// it. Running an older SDK against it could break the newer one's rules, so the
    /// Inbox refuses to touch it.
    #[error(
        "the inbox schema in the database is version {found}, newer than the {supported} \
         this SDK knows: upgrade the SDK"
    )]
    SchemaTooNew { found: i64, supported: i64 },
    /// The schema is older than this SDK's and `migrate()` was not run.
    #[error("the inbox schema is version {found}, this SDK needs {needed}: run Inbox::migrate()")]
    SchemaOutdated { found: i64, needed: i64 },
    /// A prune would delete keys younger than the topic's data they deduplicate.
    #[error(
        "processed keys must be kept at least as long as the topic's records \
         (retention {topic_retention:?}); asked to keep them {keep:?}"
    )]
    RetentionTooShort {
        keep: Duration,
        /// `None`: the topic keeps its records forever.
        topic_retention: Option<Duration>,
    },
    /// A statement failed (the transaction was rolled back: nothing of it is stored).
    #[error("inbox database: {0}")]
    Database(#[from] sqlx::Error),
    /// The caller's business write refused the record (the transaction was rolled
    /// back: the record is not marked processed and its position did not move).
    #[error("business write failed: {0}")]
    Business(Box<dyn std::error::Error + Send + Sync>),
    /// Seeking a consumer to the stored positions failed.
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl InboxError {
    /// Wraps a caller's own error (a malformed record, a rule of the business).
    pub fn business(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> InboxError {
        InboxError::Business(e.into())
    }
}
