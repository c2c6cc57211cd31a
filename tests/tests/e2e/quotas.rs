//! Byte-rate quotas (`--quota-file`, issue 29): a principal over its produce or fetch
//! rate has its responses held until it is back under it, and is told how long in
//! `throttle_time_ms`; over a long run it gets its rate, within 10%, and nobody else is
//! held. Real broker processes, the SDK as users run it, bearer-token principals.

use std::time::Duration;

use bytes::Bytes;
use idem_client::{
    credentials::Credentials, Consumer, ConsumerConfig, Delivery, DeliveryFuture, OffsetSpec,
    Producer, ProducerConfig,
};
use idem_proto::v1::{
    FetchPartition, FetchRequest, FetchResponse, FetchTopic, IsolationLevel, PartitionProduceData,
    ProduceRequest, ProduceResponse, TopicProduceData,
};
use idem_proto::ErrorCode;
use idem_tests::raw::{self, RawClient};
use idem_tests::scrape::{scrape, value};
use idem_tests::BrokerProcess;
use tokio::time::Instant;

const MIB: u64 = 1 << 20;
/// Alice's quota in the tests below.
const QUOTA: u64 = MIB;
const RECORD: usize = 16 * 1024;

fn free_addr() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe a free port");
    probe.local_addr().expect("probed address").to_string()
}

/// A broker following `quotas` as its quota file, with alice and bob as principals and
/// its metrics at the returned address.
fn broker_with_quotas(dir: &std::path::Path, quotas: &str) -> (BrokerProcess, String) {
    let tokens = dir.join("tokens");
    std::fs::write(&tokens, "alice t-alice\nbob t-bob\n").expect("token file");
    let quota_file = dir.join("quotas");
    std::fs::write(&quota_file, quotas).expect("quota file");
    let metrics = free_addr();
    let broker = BrokerProcess::start_with(&[
        "--auth-token-file",
        &tokens.display().to_string(),
        "--quota-file",
        &quota_file.display().to_string(),
        "--metrics-listen",
        &metrics,
    ]);
    (broker, metrics)
}

fn as_principal<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {token}").parse().expect("ASCII"),
    );
    request
}

/// One raw produce of `records` values of `RECORD` bytes to partition 0 of `topic`.
async fn produce_as(
    client: &mut RawClient,
    token: &str,
    topic: &str,
    records: usize,
) -> ProduceResponse {
    let value = "q".repeat(RECORD);
    let values: Vec<&str> = (0..records).map(|_| value.as_str()).collect();
    let request = ProduceRequest {
        acks: -1,
        timeout_ms: 30_000,
        topics: vec![TopicProduceData {
            name: topic.to_string(),
            partitions: vec![PartitionProduceData {
                partition: 0,
                records: raw::idempotent_batch(-1, -1, -1, &values),
            }],
        }],
        coordinator_epoch: None,
    };
    let answer = client
        .produce(as_principal(request, token))
        .await
        .expect("Produce")
        .into_inner();
    assert_eq!(answer.topics[0].partitions[0].error_code(), ErrorCode::None);
    answer
}

/// One raw fetch of partition 0 of `topic` from `offset`, up to 1 MiB.
async fn fetch_as(client: &mut RawClient, token: &str, topic: &str, offset: i64) -> FetchResponse {
    let request = FetchRequest {
        max_wait_ms: 0,
        min_bytes: 1,
        max_bytes: MIB as i32,
        isolation_level: IsolationLevel::ReadUncommitted as i32,
        topics: vec![FetchTopic {
            name: topic.to_string(),
            partitions: vec![FetchPartition {
                partition: 0,
                fetch_offset: offset,
                partition_max_bytes: MIB as i32,
                current_leader_epoch: None,
            }],
        }],
        replica_id: None,
        include_control_batches: false,
    };
    let answer = client
        .fetch(as_principal(request, token))
        .await
        .expect("Fetch")
        .into_inner();
    assert_eq!(answer.topics[0].partitions[0].error_code(), ErrorCode::None);
    answer
}

fn throttled_requests(metrics: &str, principal: &str, kind: &str) -> f64 {
    let text = scrape(metrics).expect("scrape");
    value(
        &text,
        "idem_quota_throttled_requests_total",
        &[("kind", kind), ("principal", principal)],
    )
    .unwrap_or(0.0)
}

async fn producer_as(bootstrap: &str, token: &str) -> Producer {
    let config = ProducerConfig {
        batch_size: 64 * 1024,
        // Little buffered ahead: what counts is what the broker acknowledges.
        buffer_memory: MIB as usize,
        credentials: Credentials::bearer(token).expect("token"),
        ..ProducerConfig::new(bootstrap).with_delivery(Delivery::ExactlyOnce)
    };
    Producer::connect(config).await.expect("producer connects")
}

/// Sends `RECORD`-byte records to `topic` until `until`, and returns the bytes the
/// broker acknowledged by then and when the first send went out.
async fn produce_flat_out(producer: Producer, topic: &'static str, until: Instant) -> u64 {
    let (acks, mut acked) = tokio::sync::mpsc::unbounded_channel::<DeliveryFuture>();
    let counter = tokio::spawn(async move {
        let mut bytes = 0u64;
        while let Some(ack) = acked.recv().await {
            let Ok(Ok(_)) = tokio::time::timeout_at(until, ack).await else {
                break;
            };
            bytes += RECORD as u64;
        }
        bytes
    });
    let value = Bytes::from(vec![b'a'; RECORD]);
    while Instant::now() < until {
        let sent = tokio::time::timeout_at(until, producer.send_to(topic, 0, None, value.clone()));
        match sent.await {
            Ok(Ok(ack)) => {
                if acks.send(ack).is_err() {
                    break;
                }
            }
            Ok(Err(e)) => panic!("send: {e}"),
            Err(_) => break,
        }
    }
    drop(acks);
    counter.await.expect("ack counter")
}

#[tokio::test]
async fn given_a_produce_quota_when_alice_produces_flat_out_for_30_s_then_she_gets_it_within_10_percent_and_bob_is_not_held(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, metrics) = broker_with_quotas(dir.path(), "alice produce=1MiB\n");
    let mut client = raw::connect(&broker.bootstrap()).await;
    for topic in ["metered", "free"] {
        assert_eq!(
            raw::create_topic(&mut client, topic, 1).await,
            ErrorCode::None
        );
    }

    let run = Duration::from_secs(30);
    let start = Instant::now();
    let alice = producer_as(&broker.bootstrap(), "t-alice").await;
    let alice = tokio::spawn(produce_flat_out(alice, "metered", start + run));

    // Ten seconds in, alice is being held on every request; bob produces 8 MiB.
    tokio::time::sleep_until(start + Duration::from_secs(10)).await;
    assert!(
        throttled_requests(&metrics, "User:alice", "produce") > 0.0,
        "alice is held by now"
    );
    let bob = producer_as(&broker.bootstrap(), "t-bob").await;
    let bob_start = Instant::now();
    let bob_bytes = produce_flat_out(bob, "free", bob_start + Duration::from_secs(4)).await;
    // Bob, unlimited, moves far more than alice's quota in the same seconds...
    assert!(
        bob_bytes >= 8 * QUOTA,
        "bob acknowledged {bob_bytes} bytes in 4 s beside a held alice"
    );
    // ...and no response of his was held, while a raw request of alice's still is.
    assert_eq!(throttled_requests(&metrics, "User:bob", "produce"), 0.0);
    let held = produce_as(&mut client, "t-alice", "metered", 16).await;
    assert!(held.throttle_time_ms > 0, "{held:?}");
    let not_held = produce_as(&mut client, "t-bob", "free", 16).await;
    assert_eq!(not_held.throttle_time_ms, 0);

    let alice_bytes = alice.await.expect("alice");
    let rate = alice_bytes as f64 / run.as_secs_f64();
    let ratio = rate / QUOTA as f64;
    eprintln!("alice: {alice_bytes} bytes acknowledged in {run:?}, {ratio:.3} of her quota; bob: {bob_bytes} bytes in 4 s");
    assert!(
        (0.9..=1.1).contains(&ratio),
        "alice got {rate:.0} bytes/s over {run:?}, {ratio:.3} of her quota"
    );
}

#[tokio::test]
async fn given_a_fetch_quota_when_alice_reads_6_mib_then_it_takes_her_quota_and_a_file_edit_lifts_it(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (broker, metrics) = broker_with_quotas(dir.path(), "alice fetch=1MiB\n");
    let bootstrap = broker.bootstrap();
    let mut client = raw::connect(&bootstrap).await;
    assert_eq!(
        raw::create_topic(&mut client, "read", 1).await,
        ErrorCode::None
    );
    // 6 MiB, written by bob (no produce quota for anyone) in batches of 512 KiB.
    for _ in 0..12 {
        let written = produce_as(&mut client, "t-bob", "read", 32).await;
        assert_eq!(written.throttle_time_ms, 0);
    }
    let total = 6 * MIB;
    let end = 12 * 32;

    let read_all = |token: &'static str| {
        let bootstrap = bootstrap.clone();
        async move {
            let config = ConsumerConfig {
                credentials: Credentials::bearer(token).expect("token"),
                max_wait: Duration::from_millis(50),
                start: OffsetSpec::Earliest,
                ..ConsumerConfig::default()
            };
            let mut consumer = Consumer::connect(&bootstrap, config)
                .await
                .expect("consumer");
            consumer.assign(vec![("read".to_string(), 0)]);
            let started = Instant::now();
            let mut bytes = 0u64;
            while consumer.position("read", 0).await.expect("position") < end {
                for record in consumer.poll(Duration::from_secs(5)).await.expect("poll") {
                    bytes += record.value.map_or(0, |v| v.len() as u64);
                }
            }
            (bytes, started.elapsed())
        }
    };

    let (bytes, alice_took) = read_all("t-alice").await;
    assert_eq!(bytes, total);
    eprintln!("alice read {total} bytes at a 1 MiB/s quota in {alice_took:?}");
    // The first second of quota comes at once (the burst); the rest at the rate, the
    // last response held for its own bytes too: 5 s at least, whatever the machine.
    let least = Duration::from_secs_f64((total - QUOTA) as f64 / QUOTA as f64);
    assert!(
        alice_took >= least.mul_f64(0.95),
        "alice read {total} bytes in {alice_took:?}, faster than her quota allows"
    );
    assert!(
        alice_took <= least.mul_f64(1.1) + Duration::from_secs(1),
        "alice read {total} bytes in {alice_took:?}: held past her quota"
    );
    assert!(throttled_requests(&metrics, "User:alice", "fetch") > 0.0);

    let (bytes, _) = read_all("t-bob").await;
    assert_eq!(bytes, total);
    assert_eq!(throttled_requests(&metrics, "User:bob", "fetch"), 0.0);
    let held = fetch_as(&mut client, "t-alice", "read", 0).await;
    assert!(held.throttle_time_ms > 0, "alice is still over her quota");

    // The quota lifted in the file: within the reload interval alice is held no more.
    std::fs::write(dir.path().join("quotas"), "# nobody is limited\n").expect("rewrite");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = fetch_as(&mut client, "t-alice", "read", 0).await;
        if answer.throttle_time_ms == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the edited quota file was not applied"
        );
    }
}
