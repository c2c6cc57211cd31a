//! `idem topic delete-records | add-partitions`: the log's lifecycle, one admin call
//! each, printing what is true afterwards.

use anyhow::Context;
use idem_client::Admin;

/// Deletes the records of `topic`-`partition` below `offset` (-1: as far as possible).
pub async fn delete_records(
    admin: &Admin,
    topic: &str,
    partition: i32,
    offset: i64,
) -> anyhow::Result<()> {
    let log_start = admin
        .delete_records(topic, partition, offset)
        .await
        .with_context(|| format!("deleting records of {topic}-{partition} below {offset}"))?;
    println!(
        "{topic}-{partition}: records below {log_start} deleted; the log starts at {log_start}"
    );
    Ok(())
}

/// Grows `topic` to `partitions` partitions (only checks, with `validate_only`).
pub async fn add_partitions(
    admin: &Admin,
    topic: &str,
    partitions: i32,
    validate_only: bool,
) -> anyhow::Result<()> {
    if validate_only {
        admin
            .validate_create_partitions(topic, partitions)
            .await
            .with_context(|| format!("checking growth of {topic:?} to {partitions} partitions"))?;
        println!("{topic} may grow to {partitions} partition(s) (nothing changed)");
        return Ok(());
    }
    admin
        .create_partitions(topic, partitions)
        .await
        .with_context(|| format!("growing {topic:?} to {partitions} partitions"))?;
    println!("{topic} now has {partitions} partition(s)");
    Ok(())
}
