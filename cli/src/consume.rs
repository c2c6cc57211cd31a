//! `idem consume TOPIC`: prints one record value per line until `--max-messages` are
//! printed or nothing new arrived for `--timeout-ms`. With `--group G` the consumer is a
//! member of group G: the group assigns the partitions, reading starts at the group's
//! committed offsets, and the positions are committed after each batch printed (and
//! the member leaves the group when it stops).

use crate::access::Access;
use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use idem_client::{Consumer, ConsumerConfig, GroupConfig, GroupConsumer, Isolation, OffsetSpec};

/// A partition as the group consumer names it: (topic, partition).
type TopicPartition = (String, i32);

#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    topic: String,
    /// Start at the log start instead of the end.
    #[arg(long)]
    from_beginning: bool,
    /// read-committed (default) or read-uncommitted.
    #[arg(long, default_value = "read-committed")]
    isolation: Isolation,
    /// Stop after this many records.
    #[arg(long)]
    max_messages: Option<usize>,
    /// Stop when nothing arrived for this long (ms).
    #[arg(long, default_value_t = 10_000)]
    timeout_ms: u64,
    /// Read only this partition (default: all).
    #[arg(long, conflicts_with = "group")]
    partition: Option<i32>,
    /// Read as a member of this consumer group, committing as it goes.
    #[arg(long)]
    group: Option<String>,
    /// With --group: the server-side assignor this member asks the group for
    /// (uniform or range; default: the group's, uniform unless most members ask for
    /// another).
    #[arg(long, requires = "group")]
    assignor: Option<String>,
}

pub async fn run(bootstrap: &str, access: &Access, args: ConsumeArgs) -> anyhow::Result<()> {
    if let Some(group) = args.group.clone() {
        return run_in_group(bootstrap, access, &group, args).await;
    }
    let admin = access.admin(bootstrap).await?;
    let metadata = admin.metadata(&[args.topic.as_str()]).await?;
    let topic = metadata
        .topic(&args.topic)
        .context("the broker did not describe the topic")?;
    if let Some(code) = topic.error {
        anyhow::bail!("topic {:?}: {}", args.topic, code.as_str_name());
    }
    let partitions: Vec<i32> = match args.partition {
        Some(p) if topic.partitions.iter().any(|m| m.partition == p) => vec![p],
        Some(p) => anyhow::bail!("topic {:?} has no partition {p}", args.topic),
        None => topic.partitions.iter().map(|p| p.partition).collect(),
    };
    let config = ConsumerConfig {
        isolation: args.isolation,
        credentials: access.credentials.clone(),
        tls: access.tls.clone(),
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::connect(bootstrap, config).await?;
    consumer.assign(
        partitions
            .iter()
            .map(|p| (args.topic.clone(), *p))
            .collect(),
    );
    for p in &partitions {
        if args.from_beginning {
            consumer.seek_to_beginning(&args.topic, *p)?;
        } else {
            consumer.seek_to_end(&args.topic, *p)?;
        }
    }
    let idle = Duration::from_millis(args.timeout_ms);
    let mut printed = 0usize;
    let mut stdout = std::io::stdout().lock();
    while args.max_messages.is_none_or(|max| printed < max) {
        let records = consumer.poll(idle).await?;
        if records.is_empty() {
            break;
        }
        for record in records {
            if args.max_messages.is_some_and(|max| printed >= max) {
                break;
            }
            stdout.write_all(record.value.as_deref().unwrap_or_default())?;
            stdout.write_all(b"\n")?;
            printed += 1;
        }
        stdout.flush()?;
    }
    Ok(())
}

/// `--group`: the group assigns, the positions are committed after each batch.
async fn run_in_group(
    bootstrap: &str,
    access: &Access,
    group: &str,
    args: ConsumeArgs,
) -> anyhow::Result<()> {
    let mut config = GroupConfig::new(group);
    config.assignor = args.assignor.clone();
    config.consumer.isolation = args.isolation;
    config.consumer.credentials = access.credentials.clone();
    config.consumer.tls = access.tls.clone();
    config.consumer.start = if args.from_beginning {
        OffsetSpec::Earliest
    } else {
        OffsetSpec::Latest
    };
    let mut consumer = GroupConsumer::subscribe(bootstrap, config, &[args.topic.as_str()])
        .await
        .with_context(|| format!("joining group {group:?}"))?;
    let idle = Duration::from_millis(args.timeout_ms);
    let mut printed = 0usize;
    let mut quiet_since = tokio::time::Instant::now();
    let mut stdout = std::io::stdout().lock();
    while args.max_messages.is_none_or(|max| printed < max) && quiet_since.elapsed() < idle {
        let polled = consumer
            .poll(idle.saturating_sub(quiet_since.elapsed()))
            .await?;
        if !polled.records.is_empty() {
            quiet_since = tokio::time::Instant::now();
        }
        let mut last: std::collections::BTreeMap<TopicPartition, i64> = Default::default();
        let mut cut_off = false;
        for record in polled.records {
            if args.max_messages.is_some_and(|max| printed >= max) {
                cut_off = true;
                break;
            }
            stdout.write_all(record.value.as_deref().unwrap_or_default())?;
            stdout.write_all(b"\n")?;
            last.insert((record.topic, record.partition), record.offset + 1);
            printed += 1;
        }
        stdout.flush()?;
        // What was printed, not what was fetched: records past --max-messages stay
        // for the group's next reader. Otherwise the positions, which are past the
        // transaction markers too: committing the last record's offset + 1 would leave
        // a group that read everything of a transactional topic lagging by its markers
        // forever, and a marker fetched alone would never be committed.
        let committed = if cut_off {
            let offsets: Vec<(TopicPartition, i64)> = last.into_iter().collect();
            consumer.commit_offsets(&offsets).await
        } else {
            consumer.commit().await
        };
        committed.with_context(|| format!("committing the offsets of group {group:?}"))?;
    }
    consumer.close().await.context("leaving the group")?;
    Ok(())
}
