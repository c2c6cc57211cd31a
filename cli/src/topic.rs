//! `idem topic create | list | describe | alter-config | reassign | reassignments |
//! delete-records | add-partitions | delete`.

use crate::access::Access;
use std::time::{Duration, Instant};

use anyhow::Context;
use idem_client::{Admin, AlterConfigOp, NewTopic};

use crate::topic_lifecycle;

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
        /// A setting of the topic, `key=value` (e.g. `retention.ms=86400000`),
        /// repeated for several; the rest follow the broker's defaults.
        #[arg(long = "config", value_name = "KEY=VALUE")]
        configs: Vec<String>,
    },
    /// List topic names (internal ones, such as `__transaction_state`, with
    /// --internal).
    List {
        /// Also list idem's internal topics (names starting with `__`).
        #[arg(long)]
        internal: bool,
    },
    /// Partitions of a topic with leader, replicas, ISR and offsets (and, for a
    /// partition being moved, the replicas joining and leaving), then its settings.
    Describe { name: String },
    /// Change a topic's settings: every --set and --delete is applied together, or
    /// none is (an unknown key or bad value is refused by name).
    AlterConfig {
        name: String,
        /// Set `key=value` on the topic (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Remove the topic's own value of `key`: the broker's default applies again
        /// (repeatable).
        #[arg(long = "delete", value_name = "KEY")]
        delete: Vec<String>,
        /// Only check the change; change nothing.
        #[arg(long)]
        validate_only: bool,
    },
    /// Move partitions to other brokers: `--partition P --replicas 2,3,4`, repeated
    /// for several partitions. New replicas copy the log, join the ISR, then the old
    /// ones are dropped and delete their copy; producers and consumers keep going.
    Reassign {
        name: String,
        /// A partition to move (one per --replicas, in the same order).
        #[arg(long = "partition", required = true)]
        partitions: Vec<i32>,
        /// Its target broker ids, comma separated, first = preferred leader.
        #[arg(long = "replicas", required = true)]
        replicas: Vec<String>,
        /// Wait until the moves have finished, for up to this many seconds.
        #[arg(long)]
        wait_secs: Option<u64>,
    },
    /// Partitions being moved, with the replicas joining and leaving.
    Reassignments {
        /// Only these topics (default: every topic).
        topics: Vec<String>,
    },
    /// Delete every record of a partition below an offset: its log start moves there,
    /// on every replica. Never past the high watermark, nor into a transaction still
    /// open.
    DeleteRecords {
        name: String,
        #[arg(long)]
        partition: i32,
        /// Records below this offset go; -1: all that may go now (the high watermark,
        /// or the start of the oldest open transaction).
        #[arg(long, allow_negative_numbers = true)]
        offset: i64,
    },
    /// Grow a topic to a new total partition count (never shrink). Producers and
    /// consumers find the new partitions through metadata; keyed records of the new
    /// count may map to other partitions than before.
    AddPartitions {
        name: String,
        /// The new total, more than the topic has.
        #[arg(long)]
        partitions: i32,
        /// Only check the change; change nothing.
        #[arg(long)]
        validate_only: bool,
    },
    /// Delete topics with their data on every broker. Producers and consumers of them
    /// get an unknown-topic error; a topic created again under the name starts empty.
    /// Internal topics (`__` prefix) are refused.
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
    },
}

pub async fn run(bootstrap: &str, access: &Access, command: TopicCommand) -> anyhow::Result<()> {
    let admin = access.admin(bootstrap).await?;
    match command {
        TopicCommand::Create {
            name,
            partitions,
            replication_factor,
            unclean_leader_election,
            configs,
        } => {
            admin
                .create_topic_with(NewTopic {
                    name: name.clone(),
                    partitions,
                    replication_factor,
                    unclean_leader_election,
                    configs: configs
                        .iter()
                        .map(|pair| key_value("--config", pair))
                        .collect::<anyhow::Result<_>>()?,
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
            // One header line: scripts read the partition table from the second on.
            match topic.topic_id.as_str() {
                "" => println!("topic {name}: {} partition(s)", topic.partitions.len()),
                id => println!(
                    "topic {name}: {} partition(s), topic id {id}",
                    topic.partitions.len()
                ),
            }
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
                    _ => offsets_from_leader(&metadata, &name, p, access)
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
                if !p.adding_replicas.is_empty() || !p.removing_replicas.is_empty() {
                    println!(
                        "{:>9} reassigning: adding {} removing {}",
                        "",
                        or_none(&p.adding_replicas),
                        or_none(&p.removing_replicas)
                    );
                }
            }
            let configs = admin
                .describe_configs(&name)
                .await
                .with_context(|| format!("describing the configs of {name:?}"))?;
            println!("configs:");
            for c in configs {
                let default = if c.is_default { " (default)" } else { "" };
                println!("  {}={}{default}", c.name, c.value);
            }
        }
        TopicCommand::AlterConfig {
            name,
            set,
            delete,
            validate_only,
        } => {
            let ops = config_ops(&set, &delete)?;
            admin
                .alter_configs(&name, &ops, validate_only)
                .await
                .with_context(|| format!("altering the configs of {name:?}"))?;
            if validate_only {
                println!("the config change of {name} is valid (nothing changed)");
            } else {
                println!("altered the configs of {name}");
            }
        }
        TopicCommand::Reassign {
            name,
            partitions,
            replicas,
            wait_secs,
        } => {
            let targets = reassignment_plan(&partitions, &replicas)?;
            let outcomes = admin
                .alter_partition_reassignments(&name, &targets)
                .await
                .with_context(|| format!("reassigning partitions of {name:?}"))?;
            let mut refused = 0;
            for ((partition, outcome), (_, target)) in outcomes.iter().zip(&targets) {
                match outcome {
                    Ok(()) => println!("{name}-{partition}: moving to {}", join(target)),
                    Err(e) => {
                        refused += 1;
                        eprintln!("{name}-{partition}: refused: {e}");
                    }
                }
            }
            if refused > 0 {
                anyhow::bail!("{refused} of {} reassignment(s) refused", targets.len());
            }
            if let Some(secs) = wait_secs {
                let moving: Vec<i32> = targets.iter().map(|(p, _)| *p).collect();
                wait_for_moves(&admin, &name, &moving, Duration::from_secs(secs)).await?;
                println!("reassignment of {name} complete");
            }
        }
        TopicCommand::Delete { names } => {
            let asked: Vec<&str> = names.iter().map(String::as_str).collect();
            let outcomes = admin
                .delete_topics(&asked)
                .await
                .context("deleting topics")?;
            let mut refused = 0;
            for (name, outcome) in &outcomes {
                match outcome {
                    Ok(()) => println!("deleted topic {name}"),
                    Err(e) => {
                        refused += 1;
                        eprintln!("{name}: refused: {e}");
                    }
                }
            }
            if refused > 0 {
                anyhow::bail!("{refused} of {} deletion(s) refused", outcomes.len());
            }
        }
        TopicCommand::Reassignments { topics } => {
            let topics: Vec<&str> = topics.iter().map(String::as_str).collect();
            let moving = admin.list_partition_reassignments(&topics).await?;
            if moving.is_empty() {
                println!("no partition is being reassigned");
                return Ok(());
            }
            println!(
                "{:<24} {:>9} {:>14} {:>10} {:>10}",
                "topic", "partition", "replicas", "adding", "removing"
            );
            for r in moving {
                println!(
                    "{:<24} {:>9} {:>14} {:>10} {:>10}",
                    r.topic,
                    r.partition,
                    join(&r.replicas),
                    or_none(&r.adding_replicas),
                    or_none(&r.removing_replicas)
                );
            }
        }
        TopicCommand::DeleteRecords {
            name,
            partition,
            offset,
        } => topic_lifecycle::delete_records(&admin, &name, partition, offset).await?,
        TopicCommand::AddPartitions {
            name,
            partitions,
            validate_only,
        } => topic_lifecycle::add_partitions(&admin, &name, partitions, validate_only).await?,
    }
    Ok(())
}

/// Pairs each `--partition` with its `--replicas` list.
fn reassignment_plan(
    partitions: &[i32],
    replicas: &[String],
) -> anyhow::Result<Vec<(i32, Vec<i32>)>> {
    if partitions.len() != replicas.len() {
        anyhow::bail!(
            "{} --partition but {} --replicas: give one replica list per partition",
            partitions.len(),
            replicas.len()
        );
    }
    partitions
        .iter()
        .zip(replicas)
        .map(|(partition, list)| {
            let ids = list
                .split(',')
                .map(|id| {
                    id.trim()
                        .parse::<i32>()
                        .with_context(|| format!("--replicas {list:?}: {id:?} is not a broker id"))
                })
                .collect::<anyhow::Result<Vec<i32>>>()?;
            Ok((*partition, ids))
        })
        .collect()
}

/// `key=value` of a flag, split at the first `=`.
fn key_value(flag: &str, pair: &str) -> anyhow::Result<(String, String)> {
    match pair.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => anyhow::bail!("{flag} {pair:?}: expected KEY=VALUE"),
    }
}

/// The operations of `alter-config`: every --set, then every --delete.
fn config_ops(set: &[String], delete: &[String]) -> anyhow::Result<Vec<AlterConfigOp>> {
    if set.is_empty() && delete.is_empty() {
        anyhow::bail!("nothing to change: give --set KEY=VALUE or --delete KEY");
    }
    let mut ops = set
        .iter()
        .map(|pair| key_value("--set", pair).map(|(k, v)| AlterConfigOp::set(&k, &v)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    ops.extend(delete.iter().map(|key| AlterConfigOp::delete(key.trim())));
    Ok(ops)
}

/// Polls until none of `partitions` of `topic` is being moved.
async fn wait_for_moves(
    admin: &Admin,
    topic: &str,
    partitions: &[i32],
    patience: Duration,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let moving = admin.list_partition_reassignments(&[topic]).await?;
        let left: Vec<i32> = moving
            .iter()
            .filter(|r| partitions.contains(&r.partition))
            .map(|r| r.partition)
            .collect();
        if left.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= patience {
            anyhow::bail!(
                "partitions {left:?} of {topic} are still being moved after {patience:?} (the move goes on)"
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The partition as its leader describes it, if the leader answers.
async fn offsets_from_leader(
    metadata: &idem_client::ClusterMetadata,
    topic: &str,
    partition: &idem_client::PartitionMetadata,
    access: &Access,
) -> Option<idem_client::PartitionMetadata> {
    let leader = metadata
        .brokers
        .iter()
        .find(|b| b.broker_id == partition.leader_id)?;
    let admin = access.admin(&leader.address).await.ok()?;
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

fn or_none(ids: &[i32]) -> String {
    if ids.is_empty() {
        "-".into()
    } else {
        join(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_partitions_and_replica_lists_then_they_pair_up_in_order() {
        let plan = reassignment_plan(&[0, 2], &["2,3,4".into(), " 4, 1".into()]).expect("plan");
        assert_eq!(plan, vec![(0, vec![2, 3, 4]), (2, vec![4, 1])]);
        assert!(reassignment_plan(&[0], &[]).is_err());
        assert!(reassignment_plan(&[0], &["2,x".into()]).is_err());
    }

    #[test]
    fn given_set_and_delete_flags_then_they_become_ops_and_a_pair_without_equals_is_refused() {
        let ops = config_ops(
            &["retention.ms=1000".into(), "x=a=b".into()],
            &["segment.ms".into()],
        )
        .expect("ops");
        assert_eq!(
            ops,
            vec![
                AlterConfigOp::set("retention.ms", "1000"),
                AlterConfigOp::set("x", "a=b"),
                AlterConfigOp::delete("segment.ms"),
            ]
        );
        assert!(config_ops(&["retention.ms".into()], &[]).is_err());
        assert!(config_ops(&["=5".into()], &[]).is_err());
        assert!(config_ops(&[], &[]).is_err());
    }
}
