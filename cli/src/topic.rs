//! `idem topic create | list | describe`.

use anyhow::Context;
use idem_client::{Admin, NewTopic};

#[derive(Debug, clap::Subcommand)]
pub enum TopicCommand {
    /// Create a topic.
    Create {
        name: String,
        #[arg(long, default_value_t = 1)]
        partitions: i32,
        /// Replicas per partition (0 = the cluster default).
        #[arg(long, default_value_t = 0)]
        replication_factor: i32,
        /// Let a replica outside the ISR lead when the whole ISR is gone: the
        /// partition comes back sooner and loses what only the ISR had.
        #[arg(long)]
        unclean_leader_election: bool,
    },
    /// List topic names (internal ones, such as `__transaction_state`, with
    /// --internal).
    List {
        /// Also list idem's internal topics (names starting with `__`).
        #[arg(long)]
        internal: bool,
    },
    /// Partitions of a topic with leader, replicas, ISR and offsets.
    Describe { name: String },
}

pub async fn run(bootstrap: &str, command: TopicCommand) -> anyhow::Result<()> {
    let admin = Admin::connect(bootstrap)
        .await
        .with_context(|| format!("connecting to {bootstrap}"))?;
    match command {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            unclean_leader_election,
        } => {
            admin
                .create_topic_with(NewTopic {
                    name: name.clone(),
                    partitions,
                    replication_factor,
                    unclean_leader_election,
                })
                .await
                .with_context(|| format!("creating topic {name:?}"))?;
            println!("created topic {name} with {partitions} partition(s)");
        }
        TopicCommand::List { internal } => {
            for topic in admin.metadata(&[]).await?.topics {
                if internal || !topic.name.starts_with("__") {
                    println!("{}", topic.name);
                }
            }
        }
        TopicCommand::Describe { name } => {
            let metadata = admin.metadata(&[name.as_str()]).await?;
            let topic = metadata
                .topic(&name)
                .context("the broker did not describe the topic")?;
            if let Some(code) = topic.error {
                anyhow::bail!("topic {name:?}: {}", code.as_str_name());
            }
            println!("topic {name}: {} partition(s)", topic.partitions.len());
            println!(
                "{:>9} {:>6} {:>12} {:>10} {:>10} {:>10} {:>14} {:>10}",
                "partition",
                "leader",
                "leader_epoch",
                "replicas",
                "isr",
                "log_start",
                "high_watermark",
                "log_end"
            );
            for p in &topic.partitions {
                // Only a partition's leader knows its offsets; ask it when the broker
                // we asked does not lead the partition.
                let p = match p.log_end_offset {
                    end if end >= 0 => p.clone(),
                    _ => offsets_from_leader(&metadata, &name, p)
                        .await
                        .unwrap_or_else(|| p.clone()),
                };
                println!(
                    "{:>9} {:>6} {:>12} {:>10} {:>10} {:>10} {:>14} {:>10}",
                    p.partition,
                    p.leader_id,
                    p.leader_epoch,
                    join(&p.replicas),
                    join(&p.isr),
                    p.log_start_offset,
                    p.high_watermark,
                    p.log_end_offset
                );
            }
        }
    }
    Ok(())
}

/// The partition as its leader describes it, if the leader answers.
async fn offsets_from_leader(
    metadata: &idem_client::ClusterMetadata,
    topic: &str,
    partition: &idem_client::PartitionMetadata,
) -> Option<idem_client::PartitionMetadata> {
    let leader = metadata
        .brokers
        .iter()
        .find(|b| b.broker_id == partition.leader_id)?;
    let admin = Admin::connect(&leader.address).await.ok()?;
    let answer = admin.metadata(&[topic]).await.ok()?;
    answer
        .topic(topic)?
        .partitions
        .iter()
        .find(|p| p.partition == partition.partition)
        .cloned()
}

fn join(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}
