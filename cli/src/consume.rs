//! `idem consume TOPIC`: prints one record value per line until `--max-messages` are
//! printed or nothing new arrived for `--timeout-ms`.

use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use idem_client::{Admin, Consumer, ConsumerConfig, Isolation};

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
    #[arg(long)]
    partition: Option<i32>,
}

pub async fn run(bootstrap: &str, args: ConsumeArgs) -> anyhow::Result<()> {
    let admin = Admin::connect(bootstrap)
        .await
        .with_context(|| format!("connecting to {bootstrap}"))?;
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
