//! `idem produce TOPIC`: one record per stdin line, optionally `key<SEP>value`. Prints
//! every acknowledged record as `partition@offset` on stdout and exits non-zero if any
//! record was not acknowledged. With `--transactional-id` the records are written in
//! transactions (see [`crate::produce_txn`]).

use crate::access::Access;
use std::time::Duration;

use anyhow::Context;
use idem_client::{Delivery, Producer, ProducerConfig};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::record_line::split;

#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    topic: String,
    /// exactly-once (idempotent, the default), at-least-once or at-most-once.
    #[arg(long, default_value = "exactly-once")]
    delivery: Delivery,
    /// Split each line at the first SEP into key and value (no key without it).
    #[arg(long)]
    key_separator: Option<String>,
    /// How long a record may be retried before it counts as failed (ms).
    #[arg(long, default_value_t = 120_000)]
    delivery_timeout_ms: u64,
    /// Write the records in transactions of this transactional id (exactly-once;
    /// --delivery does not apply). A running producer of the same id is fenced.
    #[arg(long)]
    transactional_id: Option<String>,
    /// With --transactional-id: commit after every N records (and at the end of stdin).
    /// Default: one transaction for all of stdin.
    #[arg(long, requires = "transactional_id", value_parser = clap::value_parser!(u64).range(1..))]
    commit_every: Option<u64>,
    /// With --transactional-id: how long a transaction may stay open before the
    /// coordinator aborts it (ms); the coordinator refuses values above its maximum.
    #[arg(long, requires = "transactional_id", default_value_t = 60_000)]
    transaction_timeout_ms: u64,
}

pub async fn run(bootstrap: &str, access: &Access, args: ProduceArgs) -> anyhow::Result<()> {
    if let Some(transactional_id) = &args.transactional_id {
        return crate::produce_txn::run(
            bootstrap,
            access,
            crate::produce_txn::TxnProduce {
                topic: &args.topic,
                transactional_id,
                commit_every: args.commit_every,
                key_separator: args.key_separator.as_deref(),
                delivery_timeout: Duration::from_millis(args.delivery_timeout_ms),
                transaction_timeout: Duration::from_millis(args.transaction_timeout_ms),
            },
        )
        .await;
    }
    let config = ProducerConfig {
        delivery_timeout: Duration::from_millis(args.delivery_timeout_ms),
        credentials: access.credentials.clone(),
        tls: access.tls.clone(),
        ..ProducerConfig::new(bootstrap).with_delivery(args.delivery)
    };
    let producer = Producer::connect(config)
        .await
        .with_context(|| format!("connecting to {bootstrap}"))?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut pending = Vec::new();
    while let Some(line) = lines.next_line().await.context("reading stdin")? {
        let (key, value) = split(&line, args.key_separator.as_deref());
        let delivery = producer.send(&args.topic, key, value).await;
        pending.push((line, delivery));
    }
    producer.flush().await;
    let mut failed = 0usize;
    for (line, delivery) in pending {
        let result = match delivery {
            Ok(future) => future.await,
            Err(e) => Err(e),
        };
        match result {
            Ok(written) => println!("{}@{}", written.partition, written.offset),
            Err(e) => {
                failed += 1;
                let written = if e.possibly_written() {
                    " (it may have been written)"
                } else {
                    ""
                };
                eprintln!("not acknowledged: {line:?}: {e}{written}");
            }
        }
    }
    producer.close().await;
    if failed > 0 {
        anyhow::bail!("{failed} record(s) were not acknowledged");
    }
    Ok(())
}
