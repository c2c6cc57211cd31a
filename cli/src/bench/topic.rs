//! Each run writes to a topic of its own, created fresh, so that reading it back shows
//! exactly what that run wrote.

use crate::access::Access;
use std::time::{Duration, Instant};

use anyhow::Context;
use idem_client::{Admin, Isolation, NewTopic, OffsetSpec};

use super::args::LoadArgs;

/// How long a new topic may take to have a leader for every partition.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// `<prefix>-<what>-<unix ms>`.
fn fresh_name(prefix: &str, what: &str) -> String {
    let unix_ms = idem_client::clock::now_ms();
    format!("{prefix}-{what}-{unix_ms}")
}

/// Creates a fresh topic for one run (`<prefix>-<what>-<unix ms>`) with the load's
/// partitions and replication factor, ready to serve; returns its name.
pub async fn create_for_run(
    bootstrap: &str,
    access: &Access,
    load: &LoadArgs,
    what: &str,
) -> anyhow::Result<String> {
    let name = fresh_name(&load.topic_prefix, what);
    create(
        bootstrap,
        access,
        &name,
        load.partitions,
        load.replication_factor,
    )
    .await?;
    Ok(name)
}

/// Creates `name` and waits until every partition's leader serves it.
async fn create(
    bootstrap: &str,
    access: &Access,
    name: &str,
    partitions: i32,
    replication_factor: i32,
) -> anyhow::Result<()> {
    let admin = access.admin(bootstrap).await?;
    admin
        .create_topic_with(NewTopic::new(name, partitions).replication_factor(replication_factor))
        .await
        .with_context(|| format!("creating topic {name:?}"))?;
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        let metadata = admin.metadata(&[name]).await?;
        let ready = metadata.topic(name).is_some_and(|t| {
            t.error.is_none()
                && t.partitions.len() == partitions as usize
                && t.partitions.iter().all(|p| p.leader_id >= 0)
        });
        // The metadata can name a leader before that broker has opened the partition;
        // the first batches would then be refused and retried inside the measurement.
        if ready && leaders_serve(&admin, name, partitions).await {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "topic {name:?} has no leader for every partition after {READY_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether every partition's leader answers ListOffsets for it.
async fn leaders_serve(admin: &Admin, name: &str, partitions: i32) -> bool {
    for partition in 0..partitions {
        let answered = admin
            .list_offsets(
                name,
                partition,
                OffsetSpec::Latest,
                Isolation::ReadUncommitted,
            )
            .await;
        if answered.is_err() {
            return false;
        }
    }
    true
}
