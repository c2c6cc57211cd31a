//! **idem-client**, the SDK. Depends on idem-proto only: it knows the wire, not the
//! servers.
//! Every crate's place: docs/architecture.md, "Crates (workspace)".
//!
//! idem's Rust SDK: a [`Producer`] with the three delivery modes (at-most-once,
//! at-least-once, exactly-once per partition), a [`TransactionalProducer`] whose
//! transactions span partitions, a [`Consumer`] with read-committed and
//! read-uncommitted isolation, and an [`Admin`] client. It knows only the wire
//! (`idem-proto`), never the servers.
//!
//! ```no_run
//! # async fn example() -> Result<(), idem_client::ClientError> {
//! use bytes::Bytes;
//! use idem_client::{Admin, Delivery, Producer, ProducerConfig};
//!
//! Admin::connect("127.0.0.1:9092").await?.create_topic("orders", 3, 1).await?;
//! let producer =
//!     Producer::connect(ProducerConfig::new("127.0.0.1:9092").with_delivery(Delivery::ExactlyOnce))
//!         .await?;
//! let delivery = producer.send("orders", Some(Bytes::from("k")), Bytes::from("v")).await?;
//! let written = delivery.await?; // partition and offset, written exactly once
//! println!("{}/{} @ {}", written.topic, written.partition, written.offset);
//! producer.close().await;
//! # Ok(()) }
//! ```
//!
//! With the cargo feature `inbox`, [`inbox::Inbox`] applies consumed records to
//! PostgreSQL or SQLite exactly once (docs/inbox.md); without it the SDK pulls no
//! database driver.
//!
//! Errors are [`ClientError`]: [`ClientError::retried`] says whether the SDK already
//! retried, [`ClientError::possibly_written`] whether a failed record may be in the log,
//! [`ClientError::txn_class`] what a transactional producer's caller does next.
//!
//! ```no_run
//! # async fn example() -> Result<(), idem_client::ClientError> {
//! use idem_client::{ProducerRecord, TransactionalConfig, TransactionalProducer, TxnErrorClass};
//!
//! let producer =
//!     TransactionalProducer::connect(TransactionalConfig::new("127.0.0.1:9092", "orders-app"))
//!         .await?;
//! producer.init_transactions().await?; // fences any older instance of "orders-app"
//! producer.begin()?;
//! producer.send(ProducerRecord::new("orders", "o-1")).await?;
//! producer.send(ProducerRecord::new("payments", "p-1")).await?;
//! match producer.commit().await {
//!     Ok(()) => {}
//!     Err(e) if e.txn_class() == TxnErrorClass::Abortable => producer.abort().await?,
//!     Err(e) => return Err(e), // fenced: this instance is done
//! }
//! # Ok(()) }
//! ```

pub mod admin;
mod bootstrap;
pub mod clock;
pub mod connection;
pub mod consumer;
mod coordinator;
pub mod credentials;
pub mod error;
pub mod group;
#[cfg(feature = "inbox")]
pub mod inbox;
pub mod metadata;
mod metadata_view;
pub mod partitioner;
pub mod producer;
pub mod refresh;
mod retry;
pub mod tls;
#[cfg(feature = "otel")]
pub mod trace_context;
pub mod transactional;
pub mod types;

pub use admin::configs::{AlterConfigOp, TopicConfigEntry};
pub use admin::groups::{GroupDescription, GroupListing, GroupMember, PartitionLag};
pub use admin::reassignments::PartitionReassignment;
pub use admin::transactions::{
    HangingReason, HangingTransaction, OpenTransaction, PendingEnd, TopicPartition,
    TransactionDescription, TransactionState,
};
pub use admin::txn_log_slices::{SliceStatus, TxnLogSlice};
pub use admin::{Admin, NewTopic};
pub use connection::Connection;
pub use consumer::{Consumer, ConsumerConfig, ConsumerRecord};
pub use error::ClientError;
pub use group::committer::CommitHandle;
pub use group::consumer::{GroupConfig, GroupConsumer, GroupMetadata, Polled};
pub use group::member::Event as GroupEvent;
pub use idem_proto::ErrorCode;
pub use metadata::{
    BrokerMetadata, ClusterMetadata, CoordinatorMetadata, PartitionMetadata, Route, TopicMetadata,
    TxnLogOwnerMetadata,
};
pub use producer::config::{Delivery, ProducerConfig};
pub use producer::{
    DeliveryFuture, Producer, ProducerRecord, RecordMetadata, IDEMPOTENCY_KEY_HEADER,
};
pub use tls::TlsConfig;
pub use transactional::config::TransactionalConfig;
pub use transactional::errors::TxnErrorClass;
pub use transactional::pipelined::PendingCommit;
pub use transactional::state::TxnState;
pub use transactional::TransactionalProducer;
pub use types::{Isolation, OffsetAndTimestamp, OffsetSpec, ProducerIdAndEpoch};
