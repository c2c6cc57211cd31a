//! Replicated partitions: followers copy the leader's batches at the leader's offsets;
//! acks=all answers only once every in-sync replica has the batch; a follower that
//! stops fetching leaves the ISR, and with fewer in-sync replicas than
//! min.insync.replicas an acks=all produce is refused before anything is written; a
//! follower that comes back catches up and rejoins. Afterwards every replica's log is
//! identical up to the high watermark.

use idem_proto::ErrorCode;
use idem_tests::raw::{self, RawClient};
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::Cluster;

async fn replicated_cluster() -> Cluster {
    let cluster = Cluster::start(3, &["--replica-lag-time-max-ms", "1000"]);
    cluster.create_topic("orders", 1, 3).await;
    cluster
}

async fn produce_range(leader: &mut RawClient, producer_id: i64, from: i32, to: i32) {
    for seq in from..to {
        let value = format!("r{seq}");
        let answer = raw::produce(
            leader,
            "orders",
            0,
            raw::idempotent_batch(producer_id, 0, seq, &[&value]),
        )
        .await;
        assert_eq!(
            (answer.error_code(), answer.error_message.as_str()),
            (ErrorCode::None, ""),
            "seq {seq}"
        );
        assert_eq!(answer.base_offset, i64::from(seq));
    }
}

#[tokio::test]
async fn given_three_replicas_when_acks_all_produce_then_every_replica_holds_the_same_log() {
    let mut cluster = replicated_cluster().await;
    let meta = cluster.leader_of("orders", 0).await;
    assert_eq!((meta.replicas.len(), meta.isr.len()), (3, 3));
    let mut leader = raw::connect(&cluster.broker(meta.leader_id).bootstrap()).await;
    produce_range(&mut leader, 5, 0, 100).await;
    let meta = cluster
        .partition(meta.leader_id, "orders", 0)
        .await
        .expect("partition");
    assert_eq!(
        meta.high_watermark, 100,
        "acks=all answered only after every ISR member had it"
    );
    assert_eq!(
        raw::read_partition(&mut leader, "orders", 0).await.len(),
        100
    );
    cluster.stop_all();
    assert_eq!(cluster.compare_replicas("orders", 0, 100), 100);
}

#[tokio::test]
async fn given_followers_down_then_the_isr_shrinks_acks_all_is_refused_below_min_isr_and_returning_followers_rejoin(
) {
    let mut cluster = replicated_cluster().await;
    let meta = cluster.leader_of("orders", 0).await;
    let leader_id = meta.leader_id;
    let followers: Vec<i32> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader_id)
        .collect();
    let mut leader = raw::connect(&cluster.broker(leader_id).bootstrap()).await;
    produce_range(&mut leader, 7, 0, 10).await;

    cluster.kill(followers[0]);
    let meta = cluster
        .wait_for(leader_id, "orders", 0, |p| p.isr.len() == 2)
        .await;
    assert!(!meta.isr.contains(&followers[0]));
    produce_range(&mut leader, 7, 10, 20).await; // 2 in sync = min.insync.replicas

    cluster.kill(followers[1]);
    let meta = cluster
        .wait_for(leader_id, "orders", 0, |p| p.isr.len() == 1)
        .await;
    let before = (meta.high_watermark, meta.log_end_offset);
    let refused = raw::produce(
        &mut leader,
        "orders",
        0,
        raw::idempotent_batch(7, 0, 20, &["r20"]),
    )
    .await;
    assert_eq!(
        refused.error_code(),
        ErrorCode::NotEnoughReplicas,
        "{}",
        refused.error_message
    );
    let meta = cluster
        .partition(leader_id, "orders", 0)
        .await
        .expect("partition");
    assert_eq!(
        (meta.high_watermark, meta.log_end_offset),
        before,
        "nothing was appended or made visible"
    );

    cluster.restart(followers[0]);
    cluster.restart(followers[1]);
    cluster
        .wait_for(leader_id, "orders", 0, |p| p.isr.len() == 3)
        .await;
    produce_range(&mut leader, 7, 20, 30).await; // the refused sequence 20 was never written
    let values = raw::values(&raw::read_partition(&mut leader, "orders", 0).await);
    assert_eq!(values, (0..30).map(|i| format!("r{i}")).collect::<Vec<_>>());
    cluster.stop_all();
    assert_eq!(cluster.compare_replicas("orders", 0, 30), 30);
}

#[tokio::test]
async fn given_the_isr_shrinks_below_min_while_an_acks_all_batch_waits_then_it_is_reported_and_a_retry_is_a_duplicate(
) {
    let cluster = Cluster::start(3, &["--replica-lag-time-max-ms", "500"]);
    cluster.create_topic("orders", 1, 3).await;
    let meta = cluster.leader_of("orders", 0).await;
    let leader_id = meta.leader_id;
    let followers: Vec<i32> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader_id)
        .collect();
    let mut leader = raw::connect(&cluster.broker(leader_id).bootstrap()).await;
    produce_range(&mut leader, 9, 0, 3).await;
    // Both followers freeze (well within their lease): the ISR is still full when the
    // batch is appended, then shrinks to the leader alone while it waits.
    for f in &followers {
        cluster.pause(*f);
    }
    let batch = raw::idempotent_batch(9, 0, 3, &["r3"]);
    let answer = raw::produce(&mut leader, "orders", 0, batch.clone()).await;
    for f in &followers {
        cluster.resume(*f);
    }
    assert_eq!(
        answer.error_code(),
        ErrorCode::NotEnoughReplicasAfterAppend,
        "{}",
        answer.error_message
    );
    cluster
        .wait_for(leader_id, "orders", 0, |p| p.isr.len() == 3)
        .await;
    let retry = raw::produce(&mut leader, "orders", 0, batch).await;
    assert_eq!(
        (retry.error_code(), retry.base_offset),
        (ErrorCode::None, 3),
        "the written batch is a duplicate"
    );
    let values = raw::values(&raw::read_partition(&mut leader, "orders", 0).await);
    assert_eq!(values, vec!["r0", "r1", "r2", "r3"]);
}

/// `line` without its terminal colour codes (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Occurrences of the follower's WARN line about a failing fetch loop in `log`, with
/// the count each says it held back.
fn fetch_failure_warnings(log: &str) -> Vec<u64> {
    log.lines()
        .map(strip_ansi)
        .filter(|l| l.contains("follower fetch interrupted; reconnecting"))
        .map(|l| {
            let after = l.split("held_back=").nth(1).unwrap_or_default();
            let digits: String = after
                .chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().expect("held_back is a number")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_follower_that_cannot_reach_its_leader_then_it_warns_with_the_reason_once_per_interval(
) {
    use std::time::{Duration, Instant};

    use idem_tests::etcd::EtcdServer;
    use idem_tests::link::CuttableLink;
    use idem_tests::BrokerProcess;

    let etcd = EtcdServer::start();
    // Broker 1 is reached by the other broker through a link that will refuse every
    // connection, while broker 1 itself stays alive and keeps its lease and leadership.
    // Kept bound until the link takes it, so no other socket gets the port meanwhile.
    let reserved = std::net::TcpListener::bind("127.0.0.1:0").expect("reserve a port");
    let advertised = reserved.local_addr().expect("port").to_string();
    let endpoint = etcd.endpoint();
    let one =
        BrokerProcess::start_with(&["--id", "1", "--etcd", &endpoint, "--advertise", &advertised]);
    let link = CuttableLink::start_reserved(reserved, one.addr());
    let two = BrokerProcess::start_with(&["--id", "2", "--etcd", &endpoint]);
    let mut client = raw::connect(&one.bootstrap()).await;
    assert_eq!(
        raw::create_topic_rf(&mut client, "watched", 2, 2).await,
        ErrorCode::None
    );
    let metadata = client
        .metadata(idem_proto::v1::MetadataRequest {
            topics: vec!["watched".into()],
        })
        .await
        .expect("Metadata")
        .into_inner();
    assert!(
        metadata.topics[0]
            .partitions
            .iter()
            .any(|p| p.leader_id == 1),
        "broker 1 leads a partition that broker 2 follows"
    );

    link.refuse();
    let refused = Instant::now();
    let (warnings, _) = wait_until(
        PATIENCE,
        "broker 2 warns twice about its failing fetches",
        || async {
            let warnings = fetch_failure_warnings(&two.log());
            let reached = warnings.len() >= 2;
            seen_if(warnings, reached)
        },
    )
    .await;
    // The first failure is logged at once; the next line comes an interval (10 s) later
    // and counts the failures held back meanwhile (one every ~200 ms).
    assert!(
        refused.elapsed() >= Duration::from_secs(10),
        "{:?}",
        refused.elapsed()
    );
    assert!(warnings[1] >= 10, "held back {} failures", warnings[1]);
    let log: Vec<String> = two.log().lines().map(strip_ansi).collect();
    assert!(
        log.iter()
            .any(|l| l.contains("follower fetch interrupted") && l.contains("reason=\"")),
        "the warning says why: {log:?}"
    );
    link.heal();
}
