//! KIP-447: offsets committed inside a transaction (AddOffsetsToTxn, TxnOffsetCommit)
//! are pending while it is open (OffsetFetch with require_stable answers
//! UNSTABLE_OFFSET_COMMIT), become the group's committed offsets with its COMMIT and
//! vanish with its ABORT — also when the group's coordinator is killed mid-transaction
//! and its successor rebuilds the pending offsets from the log; a zombie member's
//! TxnOffsetCommit is refused.

use std::collections::BTreeMap;
use std::time::Duration;

use idem_client::{
    GroupConfig, GroupConsumer, OffsetSpec, Producer, ProducerConfig, ProducerRecord,
    TransactionalProducer,
};
use idem_proto::ErrorCode;
use idem_tests::groups::{add_offsets_to_txn, balanced, drive_until, GroupClient, Member};
use idem_tests::txn;
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::Cluster;
use tokio::time::Instant;

const IN: &str = "in";
const OUT: &str = "out";
const GROUP: &str = "processors";

/// The partitions whose OffsetFetch(require_stable) answers UNSTABLE_OFFSET_COMMIT.
async fn unstable(client: &GroupClient) -> Vec<i32> {
    let answer = client.fetch(IN, 2, true).await;
    answer
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .filter(|p| p.error_code() == ErrorCode::UnstableOffsetCommit)
        .map(|p| p.partition)
        .collect()
}

async fn settles_at(client: &GroupClient, expected: [i64; 2]) {
    wait_until(
        PATIENCE,
        "the transaction's outcome reaches the group",
        || async {
            let pending = unstable(client).await;
            let committed = client.committed(IN, 2).await;
            let done = pending.is_empty() && committed == expected;
            seen_if((pending, committed), done)
        },
    )
    .await;
}

/// A cluster of 3 brokers and `coordinators` coordinators with IN (2 partitions) and
/// OUT, and member `a` of GROUP owning both of IN's partitions.
async fn group_of_one(coordinators: i32) -> (Cluster, String, GroupClient, Member) {
    let cluster = Cluster::start_with_coordinators(3, coordinators, &[], &[]).await;
    cluster.create_topic(IN, 2, 3).await;
    cluster.create_topic(OUT, 1, 3).await;
    let bootstrap = cluster.bootstrap();
    let client = GroupClient::new(&bootstrap, GROUP);
    let mut members = vec![Member::new("a", &[IN])];
    drive_until(&client, &mut members, 10, |m| balanced(m, 2, 2)).await;
    let a = members.remove(0);
    (cluster, bootstrap, client, a)
}

/// A transaction of `transactional_id` (timing out after `timeout`) that wrote one
/// record to OUT and staged `offsets` of IN for `member`: its producer, still open.
async fn stage_offsets(
    bootstrap: &str,
    client: &GroupClient,
    member: &Member,
    (transactional_id, timeout): (&str, Duration),
    offsets: &[(&str, i32, i64)],
) -> TransactionalProducer {
    let producer = txn::producer_with_timeout(bootstrap, transactional_id, timeout).await;
    producer.begin().expect("begin");
    producer
        .send(ProducerRecord::new(OUT, "x").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    let id = producer.producer_id().expect("initialized");
    let added = add_offsets_to_txn(
        bootstrap,
        transactional_id,
        id.producer_id,
        id.producer_epoch,
        GROUP,
    )
    .await;
    assert_eq!(
        added.error_code(),
        ErrorCode::None,
        "{}",
        added.error_message
    );
    let staged = client
        .txn_commit(
            transactional_id,
            (id.producer_id, id.producer_epoch),
            (&member.member_id, member.epoch),
            offsets,
        )
        .await;
    assert_eq!(
        staged.error_code(),
        ErrorCode::None,
        "{}",
        staged.error_message
    );
    producer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_offsets_in_a_transaction_then_they_count_once_it_commits_and_vanish_if_it_aborts() {
    let (_cluster, bootstrap, client, a) = group_of_one(1).await;
    let producer = txn::producer(&bootstrap, "pipe").await;

    let mut expected = [-1, -1];
    for (round, commit) in [(1i64, true), (2, false), (3, true)] {
        producer.begin().expect("begin");
        producer
            .send(ProducerRecord::new(OUT, "x").partition(0))
            .await
            .expect("send")
            .await
            .expect("acked");
        let id = producer.producer_id().expect("initialized");
        let added =
            add_offsets_to_txn(&bootstrap, "pipe", id.producer_id, id.producer_epoch, GROUP).await;
        assert_eq!(
            added.error_code(),
            ErrorCode::None,
            "{}",
            added.error_message
        );
        // Two TxnOffsetCommits in one transaction: consecutive sequences.
        for p in 0..2 {
            let staged = client
                .txn_commit(
                    "pipe",
                    (id.producer_id, id.producer_epoch),
                    (&a.member_id, a.epoch),
                    &[(IN, p, round * 10 + i64::from(p))],
                )
                .await;
            assert_eq!(
                staged.error_code(),
                ErrorCode::None,
                "{}",
                staged.error_message
            );
            let codes: Vec<ErrorCode> = staged
                .topics
                .iter()
                .flat_map(|t| &t.partitions)
                .map(|p| p.error_code())
                .collect();
            assert_eq!(codes, [ErrorCode::None]);
        }
        assert_eq!(
            unstable(&client).await,
            [0, 1],
            "pending while the transaction is open"
        );
        assert_eq!(client.committed(IN, 2).await, expected, "not committed yet");
        if commit {
            producer.commit().await.expect("commit");
            expected = [round * 10, round * 10 + 1];
        } else {
            producer.abort().await.expect("abort");
        }
        settles_at(&client, expected).await;
    }

    // A zombie member epoch is refused, and nothing is staged.
    producer.begin().expect("begin");
    producer
        .send(ProducerRecord::new(OUT, "y").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    let id = producer.producer_id().expect("initialized");
    let added =
        add_offsets_to_txn(&bootstrap, "pipe", id.producer_id, id.producer_epoch, GROUP).await;
    assert_eq!(
        added.error_code(),
        ErrorCode::None,
        "{}",
        added.error_message
    );
    let zombie = client
        .txn_commit(
            "pipe",
            (id.producer_id, id.producer_epoch),
            (&a.member_id, a.epoch - 1),
            &[(IN, 0, 999)],
        )
        .await;
    let codes: Vec<ErrorCode> = zombie
        .topics
        .iter()
        .flat_map(|t| &t.partitions)
        .map(|p| p.error_code())
        .collect();
    assert_eq!(codes, [ErrorCode::StaleMemberEpoch], "{zombie:?}");
    assert_eq!(unstable(&client).await, Vec::<i32>::new());
    producer.commit().await.expect("commit");
    settles_at(&client, expected).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_groups_coordinator_killed_mid_transaction_then_the_successor_rebuilds_the_pending_offsets_and_applies_the_commit(
) {
    let (mut cluster, bootstrap, client, a) = group_of_one(2).await;
    let producer = stage_offsets(
        &bootstrap,
        &client,
        &a,
        ("pipe", Duration::from_secs(60)),
        &[(IN, 0, 5), (IN, 1, 6)],
    )
    .await;
    assert_eq!(unstable(&client).await, [0, 1]);

    let (owner, _) = client.find().await.expect("an owner");
    cluster.kill_coordinator(owner);
    let _moved = wait_until(PATIENCE, "another coordinator owns the group", || async {
        let found = client.find().await;
        let moved = matches!(&found, Ok((id, _)) if *id != owner);
        seen_if(found, moved)
    })
    .await;
    assert_eq!(
        unstable(&client).await,
        [0, 1],
        "the successor rebuilt the pending offsets"
    );
    assert_eq!(client.committed(IN, 2).await, [-1, -1]);

    producer.commit().await.expect("commit");
    settles_at(&client, [5, 6]).await;
}

/// A processor dies mid-transaction with offsets staged (its partitions' next owner sees
/// UNSTABLE_OFFSET_COMMIT), then the group's coordinator dies too, with the transaction's
/// own coordinator, whichever that is: the timeout's ABORT still reaches the successor,
/// which drops the pending offsets, and the partitions' committed offsets are readable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_producer_gone_with_offsets_staged_and_the_groups_coordinator_killed_then_its_timeout_releases_them(
) {
    let (mut cluster, bootstrap, client, a) = group_of_one(2).await;
    let committed = client
        .commit(&a.member_id, a.epoch, &[(IN, 0, 3), (IN, 1, 4)])
        .await;
    assert_eq!(committed.error_code(), ErrorCode::None, "{committed:?}");

    let producer = stage_offsets(
        &bootstrap,
        &client,
        &a,
        ("gone", Duration::from_secs(4)),
        &[(IN, 0, 5), (IN, 1, 6)],
    )
    .await;
    drop(producer);
    assert_eq!(unstable(&client).await, [0, 1]);

    let (owner, _) = client.find().await.expect("an owner");
    cluster.kill_coordinator(owner);
    // The transaction aborts on its timeout, on whichever coordinator owns it by then.
    settles_at(&client, [3, 4]).await;
}

/// KIP-447 from the consumer's side, as Kafka's consumer behaves: a member given a
/// partition whose offset a dead processor's open transaction holds reads its other
/// partitions meanwhile (every `poll` answers, heartbeats go on) and the held one once
/// the transaction's timeout aborts it, from the offset committed before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_offset_an_open_transaction_holds_then_a_new_member_reads_its_other_partitions_meanwhile_and_that_one_after_the_abort(
) {
    let (_cluster, bootstrap, client, mut a) = group_of_one(1).await;
    let input = Producer::connect(ProducerConfig::new(&bootstrap))
        .await
        .expect("producer connects");
    for n in 0..10 {
        for p in 0..2 {
            let record = ProducerRecord::new(IN, format!("p{p}-{n}")).partition(p);
            let delivery = input.send_record(record).await.expect("send");
            delivery.await.expect("acknowledged");
        }
    }
    let committed = client
        .commit(&a.member_id, a.epoch, &[(IN, 0, 3), (IN, 1, 4)])
        .await;
    assert_eq!(committed.error_code(), ErrorCode::None, "{committed:?}");

    // Processor `a` stages offset 5 of partition 0 in a transaction and dies.
    let timeout = Duration::from_secs(10);
    let producer = stage_offsets(&bootstrap, &client, &a, ("dead", timeout), &[(IN, 0, 5)]).await;
    drop(producer);
    a.leave(&client).await;
    assert_eq!(unstable(&client).await, [0]);

    let mut config = GroupConfig::new(GROUP);
    config.consumer.start = OffsetSpec::Earliest;
    config.consumer.max_wait = Duration::from_millis(50);
    let mut b = GroupConsumer::subscribe(&bootstrap, config, &[IN])
        .await
        .expect("subscribes");
    let mut first: BTreeMap<i32, i64> = BTreeMap::new();
    let read_from = |first: &BTreeMap<i32, i64>, p: i32| first.get(&p).copied();
    let started = Instant::now();
    while read_from(&first, 1).is_none() && started.elapsed() < PATIENCE {
        let polled = b.poll(Duration::from_millis(100)).await.expect("poll");
        for r in polled.records {
            first.entry(r.partition).or_insert(r.offset);
        }
    }
    assert_eq!(
        (read_from(&first, 0), read_from(&first, 1)),
        (None, Some(4)),
        "partition 1 is read from its committed offset while partition 0 waits"
    );
    assert_eq!(
        unstable(&client).await,
        [0],
        "the transaction still held partition 0 when partition 1 was read"
    );
    // The timeout aborts it: partition 0 is read from the offset committed before.
    while read_from(&first, 0).is_none() && started.elapsed() < timeout + PATIENCE {
        let polled = b.poll(Duration::from_millis(100)).await.expect("poll");
        for r in polled.records {
            first.entry(r.partition).or_insert(r.offset);
        }
    }
    assert_eq!(read_from(&first, 0), Some(3), "{first:?}");
}
