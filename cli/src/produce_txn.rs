//! `idem produce TOPIC --transactional-id ID [--commit-every N]`: stdin lines written in
//! transactions of N records (one for all of stdin by default). A transaction's records
//! are printed as `partition@offset` only once it committed: what is printed is what a
//! read_committed consumer sees. The first transaction that cannot commit is aborted
//! and the command exits non-zero; the transactions before it stay committed.

use crate::access::Access;
use std::time::Duration;

use anyhow::Context;
use idem_client::{
    DeliveryFuture, ProducerRecord, TransactionalConfig, TransactionalProducer, TxnErrorClass,
    TxnState,
};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::record_line::split;

/// What `idem produce` was asked to do, transactionally.
pub struct TxnProduce<'a> {
    pub topic: &'a str,
    pub transactional_id: &'a str,
    pub commit_every: Option<u64>,
    pub key_separator: Option<&'a str>,
    pub delivery_timeout: Duration,
    pub transaction_timeout: Duration,
}

pub async fn run(bootstrap: &str, access: &Access, args: TxnProduce<'_>) -> anyhow::Result<()> {
    let config = TransactionalConfig {
        delivery_timeout: args.delivery_timeout,
        transaction_timeout: args.transaction_timeout,
        credentials: access.credentials.clone(),
        tls: access.tls.clone(),
        ..TransactionalConfig::new(bootstrap, args.transactional_id)
    };
    let producer = TransactionalProducer::connect(config)
        .await
        .with_context(|| format!("connecting to {bootstrap}"))?;
    producer.init_transactions().await.with_context(|| {
        format!(
            "initialising transactions of {:?} (is a transaction coordinator running?)",
            args.transactional_id
        )
    })?;
    let result = produce(&producer, &args).await;
    producer.close().await;
    result
}

async fn produce(producer: &TransactionalProducer, args: &TxnProduce<'_>) -> anyhow::Result<()> {
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let mut pending: Vec<DeliveryFuture> = Vec::new();
    let mut committed = 0u64;
    producer.begin().context("beginning a transaction")?;
    while let Some(line) = lines.next_line().await.context("reading stdin")? {
        let (key, value) = split(&line, args.key_separator);
        let record = ProducerRecord {
            key,
            ..ProducerRecord::new(args.topic, value)
        };
        match producer.send(record).await {
            Ok(delivery) => pending.push(delivery),
            Err(e) => {
                return Err(give_up(producer, pending.len() + 1, committed, e).await);
            }
        }
        if args.commit_every.is_some_and(|n| pending.len() as u64 >= n) {
            committed += commit(producer, std::mem::take(&mut pending), committed).await?;
            producer.begin().context("beginning a transaction")?;
        }
    }
    commit(producer, pending, committed).await?;
    Ok(())
}

/// Commits the open transaction and prints its records; returns how many there were.
async fn commit(
    producer: &TransactionalProducer,
    pending: Vec<DeliveryFuture>,
    committed: u64,
) -> anyhow::Result<u64> {
    let count = pending.len();
    if let Err(e) = producer.commit().await {
        return Err(give_up(producer, count, committed, e).await);
    }
    for delivery in pending {
        // Committed means every record of the transaction was acknowledged.
        let written = delivery
            .await
            .context("a committed record reports no offset")?;
        println!("{}@{}", written.partition, written.offset);
    }
    Ok(count as u64)
}

/// Aborts the transaction that failed (unless the producer is fenced) and says what
/// was and was not written.
async fn give_up(
    producer: &TransactionalProducer,
    uncommitted: usize,
    committed: u64,
    error: idem_client::ClientError,
) -> anyhow::Error {
    if producer.state() == TxnState::Committing {
        // EndTxn(commit) went out and no answer came back: it may have committed.
        return anyhow::anyhow!(
            "the commit of a transaction of {uncommitted} record(s) was not answered: its records may or may not be visible; {committed} record(s) were committed before it: {error}"
        );
    }
    let aborted = match error.txn_class() {
        TxnErrorClass::Fatal => {
            "not aborted: the producer was fenced or is unusable, the coordinator aborts it"
        }
        _ => match producer.abort().await {
            Ok(()) => "aborted",
            Err(e) => {
                eprintln!("idem: aborting failed too: {e}");
                "not aborted: its transaction timeout will abort it"
            }
        },
    };
    anyhow::anyhow!(
        "a transaction of {uncommitted} record(s) failed ({aborted}; none of its records is visible to read_committed consumers); {committed} record(s) were committed before it: {error}"
    )
}
