//! Network partitions between hosts (issue 23): with every process on its own host of a
//! lab network, a leader cut from its followers (but not from etcd or its clients)
//! shrinks its ISR and refuses acks=all rather than acknowledge what only it holds; a
//! leader on the minority side of a split loses its lease, a majority broker takes
//! over, and once healed the old leader truncates its unreplicated tail and rejoins.
//! Either way every acknowledged record reads back exactly once.

use std::time::Duration;

use idem_client::Delivery;
use idem_proto::v1::{PartitionProduceData, ProduceRequest, TopicProduceData};
use idem_proto::ErrorCode;
use idem_tests::cluster::ProcessId;
use idem_tests::netns::{ClientLink, Host, Lab};
use idem_tests::raw::{self, RawClient};
use idem_tests::wait::{seen_if, wait_until};
use idem_tests::{sdk, BrokerProcess, Cluster};

const TOPIC: &str = "orders";
/// Followers that stop fetching leave the ISR after this long.
const LAG_LIMIT_MS: &str = "1000";
/// Longest a test waits for a state the cluster must reach.
const PATIENCE: Duration = Duration::from_secs(30);

/// Whether a TCP connection to `addr` opens within a second from `from` (a lab host),
/// or from the test process in the root namespace.
async fn reaches(from: Option<&Host>, addr: std::net::SocketAddr) -> bool {
    match from {
        Some(host) => {
            let script = format!("exec 3<>/dev/tcp/{}/{}", addr.ip(), addr.port());
            let mut probe = host.command("timeout");
            probe.args(["1", "bash", "-c", &script]);
            tokio::task::spawn_blocking(move || probe.status().is_ok_and(|s| s.success()))
                .await
                .expect("probe thread")
        }
        None => matches!(
            tokio::time::timeout(Duration::from_secs(1), tokio::net::TcpStream::connect(addr))
                .await,
            Ok(Ok(_))
        ),
    }
}

#[tokio::test]
async fn given_a_lab_when_links_are_cut_then_exactly_those_connections_fail_until_healed() {
    let lab = Lab::new(3);
    // Single-node brokers as listeners on hosts 0 and 1; host 2 only dials.
    let servers = [
        BrokerProcess::start_on(lab.host(0), &[]),
        BrokerProcess::start_on(lab.host(1), &[]),
    ];
    let (h0, h1, h2) = (lab.host(0), lab.host(1), lab.host(2));
    let (a0, a1) = (servers[0].addr(), servers[1].addr());
    assert_eq!(a0.ip(), h0.addr(), "a process binds its host's address");
    for (from, to) in [(Some(h2), a0), (Some(h2), a1), (Some(h0), a1), (None, a0)] {
        assert!(reaches(from, to).await, "{from:?} -> {to} before any cut");
    }

    lab.cut_one_way(2, 0);
    assert!(
        !reaches(Some(h2), a0).await,
        "host 2's packets to 0 are dropped"
    );
    assert!(reaches(Some(h2), a1).await, "host 2 still reaches 1");
    assert!(reaches(Some(h1), a0).await, "host 1 still reaches 0");

    lab.split(&[0], &[1, 2]);
    assert!(!reaches(Some(h1), a0).await);
    assert!(!reaches(Some(h0), a1).await);
    assert!(
        reaches(Some(h2), a1).await,
        "hosts on one side reach each other"
    );
    assert!(reaches(None, a0).await, "the test process is on no side");

    lab.heal();
    lab.isolate(0, ClientLink::Cut);
    assert!(
        !reaches(None, a0).await,
        "the isolated host is cut from the client"
    );
    assert!(!reaches(Some(h1), a0).await);
    assert!(reaches(None, a1).await);

    lab.heal();
    assert!(lab.cuts().is_empty());
    for (from, to) in [(Some(h2), a0), (Some(h0), a1), (None, a0)] {
        assert!(reaches(from, to).await, "{from:?} -> {to} after healing");
    }
}

/// `value` as the idempotent batch of producer `producer_id` at `sequence`.
fn batch(producer_id: i64, sequence: i32, value: &str) -> bytes::Bytes {
    raw::idempotent_batch(producer_id, 0, sequence, &[value])
}

/// Produces one batch with acks=all, waiting at most `timeout` for the ISR.
async fn produce_within(
    client: &mut RawClient,
    records: bytes::Bytes,
    timeout: Duration,
) -> (ErrorCode, i64) {
    let answer = client
        .produce(ProduceRequest {
            coordinator_epoch: None,
            acks: -1,
            timeout_ms: timeout.as_millis() as i32,
            topics: vec![TopicProduceData {
                name: TOPIC.into(),
                partitions: vec![PartitionProduceData {
                    partition: 0,
                    records,
                }],
            }],
        })
        .await
        .expect("Produce")
        .into_inner();
    let answer = &answer.topics[0].partitions[0];
    (answer.error_code(), answer.base_offset)
}

/// Sends `v{i}` for every `i` of `range` to partition 0, one at a time, each of which
/// must be acknowledged.
async fn send(
    producer: &idem_client::Producer,
    acked: &mut Vec<(String, idem_client::RecordMetadata)>,
    range: std::ops::Range<usize>,
) {
    for i in range {
        let value = format!("v{i:05}");
        let written = sdk::send_one(producer, TOPIC, 0, &value)
            .await
            .unwrap_or_else(|e| panic!("{value} is acknowledged: {e}"));
        acked.push((value, written));
    }
}

/// A cluster on the lab (3 brokers, a coordinator, one etcd member) with `TOPIC` at
/// RF 3 (min.insync.replicas 2), one partition, every replica in sync.
async fn lab_cluster() -> Cluster {
    let cluster =
        Cluster::start_on_lab(3, 1, 1, &["--replica-lag-time-max-ms", LAG_LIMIT_MS], &[]).await;
    cluster.create_topic(TOPIC, 1, 3).await;
    cluster
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_leader_cut_from_both_followers_then_it_refuses_acks_all_and_after_healing_every_ack_reads_back_once(
) {
    let mut cluster = lab_cluster().await;
    let before = cluster.leader_of(TOPIC, 0).await;
    let leader = before.leader_id;
    let followers: Vec<i32> = cluster.ids().into_iter().filter(|b| *b != leader).collect();
    let mut client = raw::connect(&cluster.broker(leader).bootstrap()).await;
    const PRODUCER: i64 = 21;
    for seq in 0..10 {
        let answer = produce_within(
            &mut client,
            batch(PRODUCER, seq, &format!("r{seq}")),
            PATIENCE,
        )
        .await;
        assert_eq!(answer, (ErrorCode::None, i64::from(seq)));
    }

    // The leader still reaches etcd, the coordinator and this test; not its followers.
    let follower_hosts: Vec<usize> = followers
        .iter()
        .map(|f| cluster.host_of(ProcessId::Broker(*f)))
        .collect();
    cluster.lab().split(
        &[cluster.host_of(ProcessId::Broker(leader))],
        &follower_hosts,
    );
    // A batch sent at the cut is appended by the leader alone: it is not acknowledged
    // but reported once the ISR shrinks below min.insync.replicas.
    let in_flight = batch(PRODUCER, 10, "r10");
    let answer = produce_within(&mut client, in_flight.clone(), PATIENCE).await;
    assert_eq!(
        answer.0,
        ErrorCode::NotEnoughReplicasAfterAppend,
        "a batch only the leader holds is not acknowledged"
    );
    let shrunk = cluster
        .wait_for(leader, TOPIC, 0, |p| p.isr == vec![leader])
        .await;
    assert_eq!(
        (shrunk.leader_id, shrunk.leader_epoch),
        (leader, before.leader_epoch),
        "holding its lease, the leader stays leader in its epoch"
    );
    let refused = produce_within(&mut client, batch(PRODUCER, 11, "r11"), PATIENCE).await;
    assert_eq!(refused.0, ErrorCode::NotEnoughReplicas);
    let during = cluster.partition(leader, TOPIC, 0).await.expect("metadata");
    assert_eq!(
        during.log_end_offset, 11,
        "a refused batch is not written (only the in-flight one was)"
    );
    for follower in &followers {
        let seen = cluster
            .partition(*follower, TOPIC, 0)
            .await
            .expect("metadata");
        assert_eq!(
            (seen.leader_id, seen.leader_epoch),
            (leader, before.leader_epoch),
            "broker {follower} elects no one while the leader holds its lease"
        );
    }

    cluster.lab().heal();
    let healed = cluster
        .wait_for(leader, TOPIC, 0, |p| p.isr.len() == 3)
        .await;
    assert_eq!(healed.leader_epoch, before.leader_epoch);
    // The retry of the in-flight batch is the duplicate it is, at its original offset;
    // the refused one is written now, and so is the next.
    assert_eq!(
        produce_within(&mut client, in_flight, PATIENCE).await,
        (ErrorCode::None, 10)
    );
    assert_eq!(
        produce_within(&mut client, batch(PRODUCER, 11, "r11"), PATIENCE).await,
        (ErrorCode::None, 11)
    );
    assert_eq!(
        produce_within(&mut client, batch(PRODUCER, 12, "r12"), PATIENCE).await,
        (ErrorCode::None, 12)
    );
    let values = raw::values(&raw::read_partition(&mut client, TOPIC, 0).await);
    let expected: Vec<String> = (0..13).map(|i| format!("r{i}")).collect();
    assert_eq!(values, expected, "every acknowledged record once, in order");
    cluster.stop_all();
    assert_eq!(cluster.compare_replicas(TOPIC, 0, 13), 13);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_leader_on_the_minority_side_then_the_majority_elects_and_commits_and_the_old_leader_truncates_on_healing(
) {
    let mut cluster = lab_cluster().await;
    let old = cluster.leader_of(TOPIC, 0).await;
    let majority_broker = cluster.observer(&[old.leader_id]);
    let producer = sdk::one_record_per_batch(
        &cluster.broker(majority_broker).bootstrap(),
        Delivery::ExactlyOnce,
    )
    .await;
    let mut acked = Vec::new();
    send(&producer, &mut acked, 0..10).await;

    // The old leader alone on one side; etcd, the other brokers and the coordinator on
    // the other. The test process (the clients) reaches both.
    let minority = cluster.host_of(ProcessId::Broker(old.leader_id));
    let majority: Vec<usize> = cluster
        .processes()
        .into_iter()
        .map(|p| cluster.host_of(p))
        .filter(|h| *h != minority)
        .collect();
    cluster.lab().split(&[minority], &majority);
    // Before its lease runs out the old leader still appends, but no follower can copy
    // the batch: it is never acknowledged.
    let mut old_leader = raw::connect(&cluster.broker(old.leader_id).bootstrap()).await;
    let (code, _) = produce_within(
        &mut old_leader,
        batch(77, 0, "minority-only"),
        Duration::from_secs(3),
    )
    .await;
    assert!(
        matches!(
            code,
            ErrorCode::RequestTimedOut | ErrorCode::NotLeaderOrFollower
        ),
        "the minority leader acknowledges nothing: {code:?}"
    );
    // Its lease lapses: it stops leading by its own clock.
    wait_until(PATIENCE, "the minority broker stops leading", || {
        let mut old_leader = old_leader.clone();
        async move {
            let (code, _) = produce_within(
                &mut old_leader,
                batch(78, 0, "late"),
                Duration::from_secs(1),
            )
            .await;
            seen_if(code, code == ErrorCode::NotLeaderOrFollower)
        }
    })
    .await;
    let new = cluster.new_leader(TOPIC, 0, &old).await;
    assert_ne!(new.leader_id, old.leader_id);
    // Producers through the majority keep committing.
    send(&producer, &mut acked, 10..30).await;

    cluster.lab().heal();
    cluster
        .wait_for(new.leader_id, TOPIC, 0, |p| {
            p.isr.len() == 3 && p.leader_id == new.leader_id
        })
        .await;
    send(&producer, &mut acked, 30..40).await;
    let log = sdk::read_all(&cluster.broker(new.leader_id).bootstrap(), TOPIC, &[0]).await;
    sdk::assert_exactly_once(&acked, &log);
    assert!(
        !log.iter().any(|r| sdk::value(r) == "minority-only"),
        "the unacknowledged batch of the minority leader is gone"
    );
    drop(producer);
    // The old leader cut the tail the new leader never had: every replica agrees.
    let end = cluster
        .partition(new.leader_id, TOPIC, 0)
        .await
        .expect("metadata")
        .high_watermark;
    assert_eq!(end, 40);
    cluster.stop_all();
    assert_eq!(cluster.compare_replicas(TOPIC, 0, end), 40);
}
