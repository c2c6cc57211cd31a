//! Partition reassignment (KIP-455): a partition moves to other brokers, its leader
//! included, while idempotent and transactional producers write acks=all, and every
//! acknowledged record is read back exactly once, no aborted one visible; a leader
//! that dies mid-move leaves the move to the next leader; removed replicas delete
//! their copy; bad requests are refused with their code and change nothing.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use idem_client::{Admin, Delivery, ErrorCode, RecordMetadata};
use idem_proto::v1::PartitionMetadata;
use idem_tests::cli::idem;
use idem_tests::txn_workload::TxnWorkload;
use idem_tests::wait::{seen_if, wait_until};
use idem_tests::{sdk, BrokerProcess, Cluster};
use tokio::task::JoinHandle;

/// Longest a move (or a directory's deletion) may take in these tests.
const PATIENCE: Duration = Duration::from_secs(30);

/// An idempotent (exactly-once, acks=all) producer writing `w-000000`, `w-000001`, …
/// to partition 0 of a topic, one record at a time, until stopped; every record must
/// be acknowledged (the SDK retries through leader moves).
struct Writer {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(String, RecordMetadata)>>>,
    task: JoinHandle<()>,
}

impl Writer {
    async fn start(bootstrap: &str, topic: &str) -> Writer {
        let producer = sdk::with_timeouts(
            bootstrap,
            Delivery::ExactlyOnce,
            Duration::from_secs(5),
            Duration::from_secs(120),
        )
        .await;
        let stop = Arc::new(AtomicBool::new(false));
        let acked: Arc<Mutex<Vec<(String, RecordMetadata)>>> = Arc::default();
        let task = tokio::spawn({
            let (stop, acked, topic) = (stop.clone(), acked.clone(), topic.to_string());
            async move {
                let mut seq = 0;
                while !stop.load(Ordering::SeqCst) {
                    let value = format!("w-{seq:06}");
                    let written = sdk::send_one(&producer, &topic, 0, &value)
                        .await
                        .unwrap_or_else(|e| panic!("{value} not acknowledged: {e}"));
                    acked.lock().expect("acked").push((value, written));
                    seq += 1;
                }
                producer.close().await;
            }
        });
        Writer { stop, acked, task }
    }

    fn count(&self) -> usize {
        self.acked.lock().expect("acked").len()
    }

    /// Waits until `more` records beyond those acknowledged now are acknowledged.
    async fn wait_for_more(&self, more: usize) {
        let target = self.count() + more;
        let what = format!("the writer has {target} records acknowledged");
        wait_until(PATIENCE, &what, || async {
            let count = self.count();
            seen_if(count, count >= target)
        })
        .await;
    }

    async fn stop(self) -> Vec<(String, RecordMetadata)> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.expect("writer task");
        let acked = self.acked.lock().expect("acked").clone();
        acked
    }
}

fn sorted(ids: &[i32]) -> Vec<i32> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids
}

fn settled_on(target: &[i32]) -> impl Fn(&PartitionMetadata) -> bool + '_ {
    move |p| p.adding_replicas.is_empty() && p.removing_replicas.is_empty() && p.replicas == target
}

fn partition_dir(cluster: &Cluster, broker: i32, topic: &str) -> PathBuf {
    cluster.broker(broker).data_dir().join(format!("{topic}-0"))
}

/// Waits until `dir` no longer exists.
async fn wait_until_gone(dir: &std::path::Path) {
    let what = format!("{} is deleted", dir.display());
    wait_until(PATIENCE, &what, || async { (!dir.exists()).then_some(()) }).await;
}

/// Moves partition 0 of each topic to `target` and waits until every broker in the
/// target (and `observer`) shows the move finished; returns the final state.
async fn move_and_wait(
    cluster: &Cluster,
    admin: &Admin,
    topics: &[&str],
    target: &[i32],
) -> Vec<PartitionMetadata> {
    for topic in topics {
        admin
            .alter_partition_reassignment(topic, 0, target)
            .await
            .unwrap_or_else(|e| panic!("{topic}: reassignment to {target:?} refused: {e}"));
    }
    let mut done = Vec::new();
    for topic in topics {
        let mut last = None;
        for broker in target {
            last = Some(
                cluster
                    .wait_for(*broker, topic, 0, settled_on(target))
                    .await,
            );
        }
        done.push(last.expect("a target replica"));
    }
    done
}

#[tokio::test]
async fn given_producers_writing_when_a_partition_moves_to_a_new_broker_and_off_its_leader_then_every_acknowledged_record_is_read_once(
) {
    let mut cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    let (plain, txns) = ("moving-idempotent", "moving-transactional");
    cluster.create_topic(plain, 1, 3).await;
    cluster.create_topic(txns, 1, 3).await;
    for topic in [plain, txns] {
        cluster.leader_of(topic, 0).await;
    }
    let added = cluster.add_broker().await;
    assert_eq!(added, 4);
    let bootstrap = cluster.bootstrap();
    let admin = Admin::connect(&bootstrap).await.expect("admin connects");

    let writer = Writer::start(&bootstrap, plain).await;
    let workload = TxnWorkload::start(&bootstrap, "mover", 2, txns, &[0]);
    writer.wait_for_more(20).await;
    workload
        .wait_for_commits_since(Instant::now(), 2, PATIENCE)
        .await;

    // {1,2,3} -> {2,3,4}: broker 4 copies the log and joins, broker 1 leaves.
    let first = [2, 3, 4];
    for topic in [plain, txns] {
        admin
            .alter_partition_reassignment(topic, 0, &first)
            .await
            .expect("reassignment accepted");
    }
    let moving = admin
        .list_partition_reassignments(&[plain, txns])
        .await
        .expect("list reassignments");
    for r in &moving {
        assert_eq!(
            (
                r.replicas[..3].to_vec(),
                r.adding_replicas.clone(),
                r.removing_replicas.clone()
            ),
            (first.to_vec(), vec![4], vec![1]),
            "replicas = target then original: {r:?}"
        );
    }
    let settled = move_and_wait(&cluster, &admin, &[plain, txns], &first).await;
    for p in &settled {
        assert!(first.contains(&p.leader_id), "{p:?}");
        assert!(p.isr.iter().all(|b| first.contains(b)), "{p:?}");
    }
    for topic in [plain, txns] {
        wait_until_gone(&partition_dir(&cluster, 1, topic)).await;
    }
    writer.wait_for_more(20).await;
    workload
        .wait_for_commits_since(Instant::now(), 2, PATIENCE)
        .await;

    // Then off the current leader: the other three brokers (1 comes back from nothing).
    for topic in [plain, txns] {
        let leader = cluster.leader_of(topic, 0).await;
        let target: Vec<i32> = (1..=4).filter(|b| *b != leader.leader_id).collect();
        let done = move_and_wait(&cluster, &admin, &[topic], &target).await;
        assert_ne!(done[0].leader_id, leader.leader_id);
        assert!(
            done[0].leader_epoch > leader.leader_epoch,
            "a leader that leaves hands over with a new epoch: {done:?}"
        );
        wait_until_gone(&partition_dir(&cluster, leader.leader_id, topic)).await;
    }
    writer.wait_for_more(20).await;
    workload
        .wait_for_commits_since(Instant::now(), 2, PATIENCE)
        .await;

    let acked = writer.stop().await;
    let committed = workload.stop_and_check().await;
    let log = sdk::read_all(&bootstrap, plain, &[0]).await;
    sdk::assert_exactly_once(&acked, &log);
    eprintln!(
        "{} idempotent records and {committed} transactions through two moves (listed while moving: {moving:?})",
        acked.len()
    );
    assert!(committed >= 6, "{committed} transactions committed");
    assert!(admin
        .list_partition_reassignments(&[])
        .await
        .expect("list")
        .is_empty());
}

#[tokio::test]
async fn given_a_leader_killed_mid_reassignment_then_the_next_leader_finishes_it_and_nothing_acknowledged_is_lost(
) {
    let topic = "moving-through-failover";
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_topic(topic, 1, 3).await;
    let before = cluster.leader_of(topic, 0).await;
    let added = cluster.add_broker().await;
    // Clients bootstrap from a broker that stays up.
    let bootstrap = cluster
        .broker(cluster.observer(&[before.leader_id]))
        .bootstrap();
    let writer = Writer::start(&bootstrap, topic).await;
    writer.wait_for_more(20).await;

    // The newcomer is frozen (its registration lives out its 2 s lease), so the move
    // cannot finish before the leader dies.
    cluster.pause(added);
    let target: Vec<i32> = std::iter::once(added)
        .chain(
            before
                .replicas
                .iter()
                .copied()
                .filter(|b| *b != before.leader_id),
        )
        .collect();
    let admin = Admin::connect(&bootstrap).await.expect("admin connects");
    admin
        .alter_partition_reassignment(topic, 0, &target)
        .await
        .expect("reassignment accepted");
    cluster
        .wait_for(before.leader_id, topic, 0, |p| p.adding_replicas == [added])
        .await;
    cluster.kill(before.leader_id);
    let after = cluster.new_leader(topic, 0, &before).await;
    assert_eq!(
        (
            after.adding_replicas.clone(),
            after.removing_replicas.clone()
        ),
        (vec![added], vec![before.leader_id]),
        "the move outlives its leader: {after:?}"
    );
    writer.wait_for_more(20).await;

    cluster.resume(added);
    let done = cluster.wait_for(added, topic, 0, settled_on(&target)).await;
    assert!(target.contains(&done.leader_id));
    writer.wait_for_more(20).await;
    let acked = writer.stop().await;
    let log = sdk::read_all(&bootstrap, topic, &[0]).await;
    sdk::assert_exactly_once(&acked, &log);

    // The old leader died holding its copy; back, it deletes it.
    let stale = partition_dir(&cluster, before.leader_id, topic);
    assert!(stale.exists());
    cluster.restart(before.leader_id);
    wait_until_gone(&stale).await;
}

#[tokio::test]
async fn given_bad_reassignments_then_each_gets_its_code_and_nothing_changes() {
    let topic = "not-moving";
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_topic(topic, 1, 3).await;
    let before = cluster.leader_of(topic, 0).await;
    let admin = Admin::connect(&cluster.bootstrap())
        .await
        .expect("admin connects");
    let unknown = |e: idem_client::ClientError| e.code();
    assert_eq!(
        admin
            .alter_partition_reassignment("no-such-topic", 0, &[1, 2, 3])
            .await
            .map_err(unknown),
        Err(Some(ErrorCode::UnknownTopicOrPartition))
    );
    assert_eq!(
        admin
            .alter_partition_reassignment(topic, 7, &[1, 2, 3])
            .await
            .map_err(unknown),
        Err(Some(ErrorCode::UnknownTopicOrPartition))
    );
    for (bad, why) in [
        (vec![], "empty"),
        (vec![1, 2, 2], "named twice"),
        (vec![1, 2, 9], "not registered"),
        (vec![2], "fewer than min.insync.replicas"),
    ] {
        let refused = admin
            .alter_partition_reassignment(topic, 0, &bad)
            .await
            .expect_err(why);
        assert_eq!(
            refused.code(),
            Some(ErrorCode::InvalidReplicaAssignment),
            "{why}: {refused}"
        );
        assert!(refused.to_string().contains(why), "{why}: {refused}");
    }
    let placement = |p: &PartitionMetadata| {
        (
            p.replicas.clone(),
            p.leader_id,
            p.leader_epoch,
            p.adding_replicas.clone(),
            p.removing_replicas.clone(),
        )
    };
    // Each broker learns of the topic through its own catalog watch: wait until it
    // describes the partition at all, then compare.
    for broker in cluster.ids() {
        let unchanged = cluster.wait_for(broker, topic, 0, |_| true).await;
        assert_eq!(placement(&unchanged), placement(&before), "nothing changed");
    }

    // A move that cannot finish (its new replica is frozen) is in progress: another
    // target is refused, the same one is accepted again.
    let added = cluster.add_broker().await;
    cluster.pause(added);
    let target = [before.replicas[1], before.replicas[2], added];
    admin
        .alter_partition_reassignment(topic, 0, &target)
        .await
        .expect("a valid move");
    let other = [before.replicas[0], before.replicas[1], added];
    let refused = admin
        .alter_partition_reassignment(topic, 0, &other)
        .await
        .expect_err("another move in progress");
    assert_eq!(
        refused.code(),
        Some(ErrorCode::ReassignmentInProgress),
        "{refused}"
    );
    admin
        .alter_partition_reassignment(topic, 0, &target)
        .await
        .expect("the same target again is no change");
    let moving = cluster
        .wait_for(cluster.observer(&[added]), topic, 0, |p| {
            p.replicas.starts_with(&target)
        })
        .await;
    assert_eq!(
        (
            moving.adding_replicas.clone(),
            moving.removing_replicas.clone()
        ),
        (vec![added], vec![before.replicas[0]])
    );
    cluster.resume(added);

    // A broker on its own has nowhere to move a partition to.
    let alone = BrokerProcess::start();
    let admin = Admin::connect(&alone.bootstrap()).await.expect("connects");
    admin.create_topic("solo", 1, 1).await.expect("create");
    let refused = admin
        .alter_partition_reassignment("solo", 0, &[1])
        .await
        .expect_err("single node");
    assert_eq!(refused.code(), Some(ErrorCode::InvalidRequest), "{refused}");
    assert!(refused.to_string().contains("needs a cluster"), "{refused}");
}

#[tokio::test]
async fn given_the_cli_when_a_partition_is_reassigned_then_reassignments_and_describe_show_the_move(
) {
    let topic = "moved-by-cli";
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_topic(topic, 2, 3).await;
    let added = cluster.add_broker().await;
    let bootstrap = cluster.bootstrap();
    let before = cluster.leader_of(topic, 1).await;
    let target: Vec<i32> = std::iter::once(added)
        .chain(before.replicas[1..].iter().copied())
        .collect();
    let target_arg = target
        .iter()
        .map(i32::to_string)
        .collect::<Vec<_>>()
        .join(",");

    let refused = idem(
        &bootstrap,
        &[
            "topic",
            "reassign",
            topic,
            "--partition",
            "1",
            "--replicas",
            "1,1",
        ],
    );
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("InvalidReplicaAssignment"), "{stderr}");

    let moved = idem(
        &bootstrap,
        &[
            "topic",
            "reassign",
            topic,
            "--partition",
            "1",
            "--replicas",
            &target_arg,
            "--wait-secs",
            "30",
        ],
    );
    let stdout = String::from_utf8_lossy(&moved.stdout);
    assert!(
        moved.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&moved.stderr)
    );
    assert!(stdout.contains("complete"), "{stdout}");

    let listed = idem(&bootstrap, &["topic", "reassignments"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("no partition is being reassigned"),
        "{listed}"
    );
    // Describe reads the broker that answered the move, which saw it end.
    cluster
        .wait_for(cluster.observer(&[]), topic, 1, |p| {
            sorted(&p.replicas) == sorted(&target)
        })
        .await;
    let described = idem(&bootstrap, &["topic", "describe", topic]);
    let described = String::from_utf8_lossy(&described.stdout);
    let row = described
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|r| r.len() == 8 && r[0] == "1")
        .unwrap_or_else(|| panic!("no row for partition 1: {described}"));
    assert_eq!(row[3], target_arg, "{described}");
    assert!(!described.contains("reassigning"), "{described}");
}
