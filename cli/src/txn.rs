//! `idem txn list | describe ID | find-hanging | abort ID`: the operator's view of
//! transactions, from the coordinators (what they hold) and the brokers (what is open
//! in the partitions). Every command exits non-zero when a coordinator or broker could
//! not be asked. `slices` shows whether every partition of the transaction log is owned
//! and served (exiting non-zero when one is not); `list` warns about those that are not.

use crate::access::Access;
use std::time::Duration;

use anyhow::Context;
use idem_client::clock::now_ms;
use idem_client::{SliceStatus, TopicPartition};
use idem_proto::txn::TXN_LOG_TOPIC;

#[derive(Debug, clap::Subcommand)]
pub enum TxnCommand {
    /// Every transactional id the live coordinators hold.
    List,
    /// One transactional id as its coordinator holds it.
    Describe { transactional_id: String },
    /// Transactions open at the brokers that no coordinator is going to end, or that
    /// have been open longer than --max-age-ms.
    FindHanging {
        /// Report transactions a coordinator knows once open this long (ms).
        #[arg(long, default_value_t = 300_000)]
        max_age_ms: u64,
    },
    /// Abort the open transaction of a transactional id; its producer is fenced.
    Abort { transactional_id: String },
    /// Every partition of the transaction log with its owner and whether the owner
    /// serves it; exits non-zero when one is unowned or not served.
    Slices,
}

pub async fn run(bootstrap: &str, access: &Access, command: TxnCommand) -> anyhow::Result<()> {
    let admin = access.admin(bootstrap).await?;
    match command {
        TxnCommand::List => {
            let transactions = admin
                .list_transactions()
                .await
                .context("listing transactions")?;
            let slices = admin
                .txn_log_slices()
                .await
                .context("asking who serves the transaction log")?;
            for slice in slices.iter().filter(|s| s.status != SliceStatus::Served) {
                eprintln!(
                    "warning: {TXN_LOG_TOPIC} partition {}: {}; its transactional ids are \
                     unavailable and not listed",
                    slice.partition, slice.status
                );
            }
            if transactions.is_empty() {
                println!("no transactional ids");
                return Ok(());
            }
            println!(
                "{:<24} {:>12} {:>6} {:<15} {:>10} {:>10}  partitions",
                "transactional_id", "producer_id", "epoch", "state", "timeout_ms", "open_ms"
            );
            let now = now_ms();
            for t in &transactions {
                println!(
                    "{:<24} {:>12} {:>6} {:<15} {:>10} {:>10}  {}",
                    t.transactional_id,
                    t.producer_id,
                    t.producer_epoch,
                    t.state.to_string(),
                    t.timeout_ms,
                    t.txn_start_ms
                        .map_or_else(|| "-".to_string(), |s| (now - s).max(0).to_string()),
                    partition_list(&t.partitions)
                );
            }
        }
        TxnCommand::Describe { transactional_id } => {
            let t = admin
                .describe_transaction(&transactional_id)
                .await
                .with_context(|| format!("describing transactional id {transactional_id:?}"))?;
            println!("transactional_id:  {}", t.transactional_id);
            println!("producer_id:       {}", t.producer_id);
            println!("producer_epoch:    {}", t.producer_epoch);
            println!("state:             {}", t.state);
            println!("timeout_ms:        {}", t.timeout_ms);
            println!("partitions:        {}", partition_list(&t.partitions));
            println!(
                "txn_start_ms:      {}",
                t.txn_start_ms
                    .map_or_else(|| "-".to_string(), |s| s.to_string())
            );
            println!("last_update_ms:    {}", t.last_update_ms);
            println!("coordinator_id:    {}", t.coordinator_id);
            println!("txn_log_partition: {}", t.txn_log_partition);
            if let Some(end) = &t.pending_end {
                // The transaction before this one: decided, its markers under way.
                println!(
                    "pending_end:       {end} markers to {}",
                    partition_list(&end.partitions)
                );
            }
        }
        TxnCommand::FindHanging { max_age_ms } => {
            let hanging = admin
                .find_hanging(Duration::from_millis(max_age_ms))
                .await
                .context("looking for hanging transactions")?;
            if hanging.is_empty() {
                println!("no hanging transactions");
                return Ok(());
            }
            println!(
                "{:<24} {:>9} {:>12} {:>6} {:>12} {:>6} {:<24}  reason",
                "topic",
                "partition",
                "producer_id",
                "epoch",
                "first_offset",
                "broker",
                "transactional_id"
            );
            for h in &hanging {
                println!(
                    "{:<24} {:>9} {:>12} {:>6} {:>12} {:>6} {:<24}  {}",
                    h.open.topic,
                    h.open.partition,
                    h.open.producer_id,
                    h.open.producer_epoch,
                    h.open.first_offset,
                    h.open.broker_id,
                    h.transactional_id.as_deref().unwrap_or("-"),
                    h.reason
                );
            }
        }
        TxnCommand::Slices => {
            let slices = admin
                .txn_log_slices()
                .await
                .context("asking who serves the transaction log")?;
            println!(
                "{:>9} {:>11} {:<22} {:>17}  status",
                "partition", "coordinator", "address", "coordinator_epoch"
            );
            for slice in &slices {
                let (id, address, epoch) = slice.owner.as_ref().map_or_else(
                    || ("-".to_string(), "-".to_string(), "-".to_string()),
                    |o| {
                        (
                            o.coordinator_id.to_string(),
                            o.address.clone(),
                            o.coordinator_epoch.to_string(),
                        )
                    },
                );
                println!(
                    "{:>9} {:>11} {:<22} {:>17}  {}",
                    slice.partition, id, address, epoch, slice.status
                );
            }
            let unserved = slices
                .iter()
                .filter(|s| s.status != SliceStatus::Served)
                .count();
            if slices.is_empty() {
                anyhow::bail!("{TXN_LOG_TOPIC} does not exist yet: no coordinator has started");
            }
            if unserved > 0 {
                anyhow::bail!(
                    "{unserved} of {} {TXN_LOG_TOPIC} partitions are not served",
                    slices.len()
                );
            }
        }
        TxnCommand::Abort { transactional_id } => {
            admin
                .abort_transaction(&transactional_id)
                .await
                .with_context(|| format!("aborting the transaction of {transactional_id:?}"))?;
            println!("aborted the open transaction of {transactional_id}");
        }
    }
    Ok(())
}

fn partition_list(partitions: &[TopicPartition]) -> String {
    if partitions.is_empty() {
        return "-".into();
    }
    partitions
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
