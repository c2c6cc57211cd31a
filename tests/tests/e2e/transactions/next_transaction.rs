//! A producer's next transaction starts right after its commit, while the commit's
//! markers may still be on their way. Its registration is not sent away with
//! CONCURRENT_TRANSACTIONS: the coordinator persists the new transaction at once, with
//! the commit as its pending end, and sends its BEGINs at once. A partition the commit
//! did not touch is begun without waiting for the commit's markers; a partition of both
//! transactions is begun only behind the commit's marker there (its leader refuses a
//! BEGIN while the committed transaction is still open), so the registration is
//! answered only once that marker landed. Later registrations of the new transaction
//! join it the same way while the commit is still pending. A coordinator killed while
//! the commit is pending behind the new transaction leaves both to its successor, which
//! writes the commit's markers before serving.

use std::time::{Duration, Instant};

use idem_client::{Isolation, ProducerIdAndEpoch, ProducerRecord, TransactionalProducer};
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::v1::{AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, TxnTopicPartitions};
use idem_proto::ErrorCode;
use idem_proto::{batch, control};
use idem_tests::txn::{self, values, wait_until_stable};
use idem_tests::Cluster;
use idem_tests::{raw, replicas};
use tokio::task::JoinHandle;

const ORDERS: &str = "orders";
const AUDIT: &str = "audit";
/// Enough that two are led away from ORDERS-0's broker (leaders are spread evenly).
const AUDIT_PARTITIONS: i32 = 6;
/// How long the marker of the first transaction is held back (ORDERS-0's broker stays
/// paused): a fault length, not a wait. That the registration is not answered meanwhile
/// is an absence, and no event marks an absence; the registration itself is awaited.
const HELD: Duration = Duration::from_millis(1000);

/// A cluster where ORDERS-0 lives on one broker only, and a transaction of an id logged
/// away from that broker with "order-1" acknowledged there.
struct OrderSent {
    cluster: Cluster,
    orders_leader: i32,
    /// Two AUDIT partitions another broker leads, so a BEGIN reaches them while
    /// ORDERS-0's broker is stopped.
    audit: [i32; 2],
    bootstrap: String,
    id: String,
    log_partition: i32,
    producer: TransactionalProducer,
}

async fn order_sent() -> OrderSent {
    // A stopped follower leaves the ISR after a second, so the transaction log (RF 3)
    // keeps taking writes while the fault lasts.
    let brokers = ["--replica-lag-time-max-ms", "1000"];
    let cluster = Cluster::start_with_coordinators(3, 1, &brokers, &[]).await;
    // Replication factor 1: while its only broker is stopped, no marker lands there.
    cluster.create_topic(ORDERS, 1, 1).await;
    cluster.create_topic(AUDIT, AUDIT_PARTITIONS, 3).await;
    let orders_leader = cluster.leader_of(ORDERS, 0).await.leader_id;
    let mut led_elsewhere = Vec::new();
    for partition in 0..AUDIT_PARTITIONS {
        if cluster.leader_of(AUDIT, partition).await.leader_id != orders_leader {
            led_elsewhere.push(partition);
        }
    }
    let audit = match led_elsewhere[..] {
        [a, b, ..] => [a, b],
        _ => panic!("broker {orders_leader} leads all but {led_elsewhere:?} of {AUDIT}"),
    };
    // Clients bootstrap from a broker that stays up.
    let bootstrap = cluster
        .broker(cluster.observer(&[orders_leader]))
        .bootstrap();
    // An id whose transaction-log partition another broker leads, so persisting the
    // commit does not wait for the stopped broker.
    let (id, log_partition) = txn::id_logged_away_from(&cluster, "ledger", orders_leader).await;
    let producer = txn::producer(&bootstrap, &id).await;
    producer.begin().expect("begin");
    producer
        .send(ProducerRecord::new(ORDERS, "order-1").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    OrderSent {
        cluster,
        orders_leader,
        audit,
        bootstrap,
        id,
        log_partition,
        producer,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_commit_whose_markers_are_delayed_when_the_next_transaction_registers_elsewhere_then_each_registration_begins_at_once(
) {
    let OrderSent {
        mut cluster,
        orders_leader,
        audit,
        bootstrap,
        id,
        log_partition,
        producer,
    } = order_sent().await;
    cluster.pause(orders_leader);
    // Answered once PrepareCommit is persisted; the ORDERS marker cannot land yet.
    producer.commit().await.expect("commit decided");
    let next = producer.producer_id().expect("initialised");
    // Two registrations, one after the other, name AUDIT partitions, which the commit
    // did not touch: each is persisted behind the commit and begun while ORDERS-0's
    // marker cannot land.
    let owner = txn::find_coordinator(&bootstrap, &id).await;
    for partition in audit {
        let answer = register(&owner.address, &id, next, &[(AUDIT, partition)])
            .await
            .expect("registration task");
        assert_eq!(
            answer.error_code(),
            ErrorCode::None,
            "{}",
            answer.error_message
        );
    }
    let described = txn::describe(&bootstrap, &id).await.expect("describe");
    assert_eq!(
        (described.state.as_str(), described.pending_end.as_str()),
        ("Ongoing", "COMMIT"),
        "the commit is still pending: its marker cannot have landed"
    );
    assert_eq!(described.producer_epoch, i32::from(next.producer_epoch));
    assert_eq!(
        described.pending_end_topics,
        vec![TxnTopicPartitions {
            topic: ORDERS.into(),
            partitions: vec![0],
        }]
    );
    assert_eq!(
        described.topics,
        vec![TxnTopicPartitions {
            topic: AUDIT.into(),
            partitions: audit.to_vec(),
        }]
    );
    // The marker lands and the commit completes.
    cluster.resume(orders_leader);
    txn::wait_for_description(&bootstrap, &id, "completed the commit", |t| {
        t.state == "Ongoing" && t.pending_end.is_empty()
    })
    .await;
    // The transaction log: each registration went in as one append on its own, after
    // PrepareCommit and while the marker was held, both with the commit pending; the
    // completion cleared it (no CompleteCommit record), keeping both partitions.
    let log_leader = cluster
        .leader_of(TXN_LOG_TOPIC, log_partition)
        .await
        .leader_id;
    let mut client = raw::connect(&cluster.broker(log_leader).bootstrap()).await;
    let appends: Vec<Vec<(String, String)>> =
        raw::read_batches(&mut client, TXN_LOG_TOPIC, log_partition)
            .await
            .into_iter()
            .map(|(_, records)| states_of(&id, &records))
            .filter(|states| !states.is_empty())
            .collect();
    let states: Vec<Vec<&str>> = appends
        .iter()
        .map(|batch| batch.iter().map(|(state, _)| state.as_str()).collect())
        .collect();
    assert_eq!(
        states,
        [
            vec!["Empty"],
            vec!["Ongoing"],
            vec!["PrepareCommit"],
            vec!["Ongoing"],
            vec!["Ongoing"],
            vec!["Ongoing"]
        ],
        "the transaction log's batches of {id}, by state"
    );
    let pending = format!(
        r#""pending_end":{{"commit":true,"partitions":[{{"topic":"{ORDERS}","partition":0}}]}}"#
    );
    for joined in [&appends[3][0].1, &appends[4][0].1] {
        assert!(joined.contains(&pending), "{joined}");
    }
    let opened = &appends[5][0].1;
    assert!(!opened.contains("pending_end"), "{opened}");
    for partition in audit {
        let entry = format!(r#"{{"topic":"{AUDIT}","partition":{partition}}}"#);
        assert!(opened.contains(&entry), "{entry} missing from {opened}");
    }

    // The coordinator dies now; restarted, it must load the second transaction open
    // with both partitions, or the second (BEGIN written, no data) would hang with nobody
    // to end it.
    cluster.kill_coordinator(owner.coordinator_id);
    cluster.restart_coordinator(owner.coordinator_id);
    cluster.wait_for_coordinators().await;

    // The producer carries on: its second transaction commits through the same
    // registration, and both transactions are visible once.
    producer.begin().expect("begin");
    producer
        .send(ProducerRecord::new(AUDIT, "audit-2").partition(audit[0]))
        .await
        .expect("send")
        .await
        .expect("acked");
    producer.commit().await.expect("second commit");
    wait_until_stable(&bootstrap, ORDERS, &[0]).await;
    wait_until_stable(&bootstrap, AUDIT, &audit).await;
    assert_eq!(
        values(&bootstrap, ORDERS, &[0], Isolation::ReadCommitted).await,
        vec!["order-1"]
    );
    assert_eq!(
        values(&bootstrap, AUDIT, &[audit[0]], Isolation::ReadCommitted).await,
        vec!["audit-2"]
    );
}

/// The state and the whole value of each of `transactional_id`'s records among
/// `records`, in order.
fn states_of(
    transactional_id: &str,
    records: &[idem_proto::batch::StoredRecord],
) -> Vec<(String, String)> {
    records
        .iter()
        .filter(|r| r.key.as_deref() == Some(transactional_id.as_bytes()))
        .filter_map(|r| {
            let value = String::from_utf8_lossy(r.value.as_deref()?).into_owned();
            let (_, after) = value.split_once("\"state\":\"")?;
            let state = after.split('"').next()?.to_string();
            Some((state, value))
        })
        .collect()
}

/// Sends an AddPartitionsToTxn of `partitions` for `producer` straight to the
/// coordinator at `address`, in a task of its own.
fn register(
    address: &str,
    transactional_id: &str,
    producer: ProducerIdAndEpoch,
    partitions: &[(&str, i32)],
) -> JoinHandle<AddPartitionsToTxnResponse> {
    let address = address.to_string();
    let mut topics: Vec<TxnTopicPartitions> = Vec::new();
    for &(topic, partition) in partitions {
        match topics.iter_mut().find(|t| t.topic == topic) {
            Some(t) => t.partitions.push(partition),
            None => topics.push(TxnTopicPartitions {
                topic: topic.into(),
                partitions: vec![partition],
            }),
        }
    }
    let request = AddPartitionsToTxnRequest {
        transactional_id: transactional_id.into(),
        producer_id: producer.producer_id,
        producer_epoch: i32::from(producer.producer_epoch),
        topics,
    };
    tokio::spawn(async move {
        let mut coordinator = txn::coordinator_client(&address)
            .await
            .expect("coordinator");
        coordinator
            .add_partitions_to_txn(request)
            .await
            .expect("AddPartitionsToTxn")
            .into_inner()
    })
}

/// With every broker stopped: each batch in ORDERS-0's log on its only broker, as what
/// it is (data, or the marker) and the producer epoch it carries. Read from disk, since
/// consumers are never given control batches.
fn orders_log(cluster: &mut Cluster, orders_leader: i32) -> Vec<(String, i16)> {
    cluster.stop_all();
    let dir = cluster
        .broker(orders_leader)
        .data_dir()
        .join(format!("{ORDERS}-0"));
    replicas::batches_on_disk(&dir)
        .into_iter()
        .map(|(_, bytes)| {
            let header = batch::decode_header(&bytes).expect("batch header");
            let kind = if header.is_control() {
                let marker = control::decode_control(&bytes).expect("control batch");
                format!("{:?}", marker.control_type).to_uppercase()
            } else {
                "DATA".to_string()
            };
            (kind, header.producer_epoch)
        })
        .collect()
}

/// What ORDERS-0 must hold after "order-1" committed in the transaction at `epoch` and
/// "order-2" in the next one: the first commit's marker before the next BEGIN.
fn two_commits_in_order(epoch: i16) -> Vec<(String, i16)> {
    [
        ("BEGIN", epoch),
        ("DATA", epoch),
        ("COMMIT", epoch + 1),
        ("BEGIN", epoch + 1),
        ("DATA", epoch + 1),
        ("COMMIT", epoch + 2),
    ]
    .into_iter()
    .map(|(kind, epoch)| (kind.to_string(), epoch))
    .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_commit_whose_marker_is_delayed_when_the_next_transaction_registers_a_partition_of_both_then_it_begins_there_behind_the_marker(
) {
    let OrderSent {
        mut cluster,
        orders_leader,
        audit: [audit, _],
        bootstrap,
        id,
        producer,
        ..
    } = order_sent().await;
    let first = producer.producer_id().expect("initialised");
    cluster.pause(orders_leader);
    producer.commit().await.expect("commit decided");
    let next = producer.producer_id().expect("initialised");

    // One registration of a partition the commit touched and one it did not: ORDERS-0
    // cannot be begun before the commit's marker is there, so neither is answered.
    let owner = txn::find_coordinator(&bootstrap, &id).await;
    let started = Instant::now();
    let registration = register(&owner.address, &id, next, &[(ORDERS, 0), (AUDIT, audit)]);
    txn::wait_for_description(
        &bootstrap,
        &id,
        "persisted the next transaction behind its commit",
        |t| {
            t.pending_end == "COMMIT"
                && t.topics.iter().map(|t| t.partitions.len()).sum::<usize>() == 2
        },
    )
    .await;
    // Time passes on purpose: that the registration is held back is an absence, which
    // only a wait of some length can show (it waits for the marker, not for a timer).
    tokio::time::sleep(HELD).await;
    assert!(
        !registration.is_finished(),
        "ORDERS-0 was begun before the commit's marker could reach it"
    );
    cluster.resume(orders_leader);
    let answer = registration.await.expect("registration task");
    assert_eq!(
        answer.error_code(),
        ErrorCode::None,
        "{}",
        answer.error_message
    );
    assert!(started.elapsed() >= HELD);

    // The producer writes its next transaction there and commits it.
    producer.begin().expect("begin the next");
    producer
        .send(ProducerRecord::new(ORDERS, "order-2").partition(0))
        .await
        .expect("send")
        .await
        .expect("acked");
    producer.commit().await.expect("second commit");
    wait_until_stable(&bootstrap, ORDERS, &[0]).await;
    assert_eq!(
        values(&bootstrap, ORDERS, &[0], Isolation::ReadCommitted).await,
        vec!["order-1", "order-2"]
    );
    assert_eq!(
        orders_log(&mut cluster, orders_leader),
        two_commits_in_order(first.producer_epoch)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_transaction_begun_behind_a_commit_when_the_coordinator_dies_before_the_markers_then_its_successor_writes_them_and_both_commit(
) {
    let OrderSent {
        mut cluster,
        orders_leader,
        audit: [audit, _],
        bootstrap,
        id,
        producer,
        ..
    } = order_sent().await;
    let first = producer.producer_id().expect("initialised");
    // ORDERS-0's only broker dies: its COMMIT marker cannot land, and no marker request
    // of this coordinator is left waiting in a socket to land later on its behalf.
    cluster.kill(orders_leader);
    producer.commit().await.expect("commit decided");
    producer.begin().expect("begin the next");
    // The AUDIT partition is begun behind the commit at once: the commit did not touch it.
    producer
        .send(ProducerRecord::new(AUDIT, "audit-2").partition(audit))
        .await
        .expect("send")
        .await
        .expect("audit-2 acked while the commit's marker cannot land");
    // ORDERS-0 cannot be begun before the commit's marker is there.
    let order = producer
        .send(ProducerRecord::new(ORDERS, "order-2").partition(0))
        .await
        .expect("send");
    let coordinator = txn::find_coordinator(&bootstrap, &id).await;
    txn::wait_for_description(
        &bootstrap,
        &id,
        "persisted the next transaction behind its commit",
        |t| t.pending_end == "COMMIT" && t.state == "Ongoing",
    )
    .await;

    // Only the transaction log knows the commit is not written everywhere yet.
    cluster.kill_coordinator(coordinator.coordinator_id);
    cluster.restart(orders_leader);
    cluster.restart_coordinator(coordinator.coordinator_id);
    cluster.wait_for_coordinators().await;

    order
        .await
        .expect("order-2 acked through the restarted coordinator");
    producer.commit().await.expect("second commit");
    wait_until_stable(&bootstrap, ORDERS, &[0]).await;
    wait_until_stable(&bootstrap, AUDIT, &[audit]).await;
    assert_eq!(
        values(&bootstrap, ORDERS, &[0], Isolation::ReadCommitted).await,
        vec!["order-1", "order-2"]
    );
    assert_eq!(
        values(&bootstrap, AUDIT, &[audit], Isolation::ReadCommitted).await,
        vec!["audit-2"]
    );
    let described =
        txn::wait_for_description(&bootstrap, &id, "completed the second commit", |t| {
            t.state == "CompleteCommit"
        })
        .await;
    assert_eq!(described.pending_end, "");
    assert_eq!(
        orders_log(&mut cluster, orders_leader),
        two_commits_in_order(first.producer_epoch)
    );
}
