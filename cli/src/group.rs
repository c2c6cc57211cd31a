//! `idem group list | describe G | reset-offsets G ... | delete G`: consumer groups as
//! their coordinators hold them (docs/groups.md). `describe` prints the members and, per
//! partition, the committed offset, the log end, the lag and the owner, like
//! `kafka-consumer-groups.sh --describe`. Resetting offsets and deleting are refused
//! for a group with members (their progress would be overwritten); every command exits
//! non-zero on a refusal, naming it.

use crate::access::Access;
use anyhow::Context;
use idem_client::{Isolation, OffsetSpec};

#[derive(Debug, clap::Subcommand)]
pub enum GroupCommand {
    /// Every group the live coordinators hold, with its state.
    List,
    /// A group's members, assignment, committed offsets and lag.
    Describe { group: String },
    /// Set the committed offsets of an EMPTY group for every partition of a topic.
    ResetOffsets {
        group: String,
        #[arg(long)]
        topic: String,
        /// To each partition's log start.
        #[arg(long, group = "to")]
        to_earliest: bool,
        /// To each partition's end (the high watermark).
        #[arg(long, group = "to")]
        to_latest: bool,
        /// To this offset in every partition.
        #[arg(long, group = "to")]
        to_offset: Option<i64>,
    },
    /// Delete an EMPTY group and its committed offsets.
    Delete { group: String },
}

pub async fn run(bootstrap: &str, access: &Access, command: GroupCommand) -> anyhow::Result<()> {
    let admin = access.admin(bootstrap).await?;
    match command {
        GroupCommand::List => {
            let groups = admin.list_groups().await.context("listing groups")?;
            if groups.is_empty() {
                println!("no groups");
            }
            for g in groups {
                println!("{:<32} {}", g.group_id, g.state);
            }
        }
        GroupCommand::Describe { group } => {
            let description = admin
                .describe_group(&group)
                .await
                .with_context(|| format!("describing group {group:?}"))?;
            println!(
                "group {} state {} epoch {} (target {}) coordinator {}",
                description.group_id,
                description.state,
                description.group_epoch,
                description.target_epoch,
                description.coordinator_id
            );
            for m in &description.members {
                println!(
                    "member {} epoch {} {}{} topics {} owns {}",
                    m.member_id,
                    m.member_epoch,
                    m.state,
                    m.instance_id
                        .as_ref()
                        .map_or_else(String::new, |i| format!(" instance {i}")),
                    m.subscribed_topics.join(","),
                    m.assignment
                        .iter()
                        .map(|(t, p)| format!("{t}-{p}"))
                        .collect::<Vec<_>>()
                        .join(",")
                );
            }
            let lags = admin
                .group_lag(&group)
                .await
                .with_context(|| format!("reading the offsets of group {group:?}"))?;
            println!(
                "{:<24} {:>9} {:>12} {:>12} {:>8}  owner",
                "topic", "partition", "committed", "log_end", "lag"
            );
            let dash = || "-".to_string();
            for l in lags {
                println!(
                    "{:<24} {:>9} {:>12} {:>12} {:>8}  {}",
                    l.topic,
                    l.partition,
                    l.committed.map_or_else(dash, |c| c.to_string()),
                    l.log_end,
                    l.lag.map_or_else(dash, |c| c.to_string()),
                    l.owner.unwrap_or_else(dash)
                );
            }
        }
        GroupCommand::ResetOffsets {
            group,
            topic,
            to_earliest,
            to_latest,
            to_offset,
        } => {
            let metadata = admin.metadata(&[topic.as_str()]).await?;
            let described = metadata
                .topic(&topic)
                .context("the broker did not describe the topic")?;
            if let Some(code) = described.error {
                anyhow::bail!("topic {topic:?}: {}", code.as_str_name());
            }
            let mut offsets = Vec::new();
            for p in &described.partitions {
                let offset = match (to_earliest, to_latest, to_offset) {
                    (_, _, Some(offset)) => offset,
                    (true, _, _) => {
                        admin
                            .list_offsets(
                                &topic,
                                p.partition,
                                OffsetSpec::Earliest,
                                Isolation::ReadUncommitted,
                            )
                            .await?
                    }
                    (_, true, _) => {
                        admin
                            .list_offsets(
                                &topic,
                                p.partition,
                                OffsetSpec::Latest,
                                Isolation::ReadUncommitted,
                            )
                            .await?
                    }
                    _ => anyhow::bail!("say where to: --to-earliest, --to-latest or --to-offset N"),
                };
                offsets.push(((topic.clone(), p.partition), offset));
            }
            admin
                .reset_group_offsets(&group, &offsets)
                .await
                .with_context(|| format!("resetting the offsets of group {group:?}"))?;
            for ((t, p), offset) in offsets {
                println!("{t}-{p} {offset}");
            }
        }
        GroupCommand::Delete { group } => {
            admin
                .delete_group(&group)
                .await
                .with_context(|| format!("deleting group {group:?}"))?;
            println!("deleted group {group}");
        }
    }
    Ok(())
}
