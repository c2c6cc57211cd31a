//! ACLs on a wide topic (issue 29): a consumer allowed a 60-partition topic by a
//! prefixed ACL reads every partition in one fetch, the broker deciding once for the
//! topic rather than once per partition (its `idem_authorization_checks_total`
//! counts); a topic outside the prefix is refused on every partition, each refusal
//! naming the topic, with no record returned.

use idem_client::{Isolation, OffsetSpec};
use idem_proto::v1::{
    CreatableTopic, CreateTopicsRequest, FetchPartition, FetchRequest, FetchTopic, IsolationLevel,
    PartitionProduceData, ProduceRequest, TopicProduceData,
};
use idem_proto::{batch, ErrorCode};
use idem_tests::raw;
use idem_tests::scrape::{scrape, value};
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::Cluster;

use crate::acls::{binding, broker_as, Secrets};

const PARTITIONS: i32 = 60;
/// bob may read every topic starting with this.
const PREFIX: &str = "wide-";
const ALLOWED: &str = "wide-events";
const OUTSIDE: &str = "narrow-events";

fn free_addr() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").to_string()
}

/// One fetch of every partition of `topic` from offset 0, without waiting.
fn fetch_all(topic: &str) -> FetchRequest {
    FetchRequest {
        max_wait_ms: 0,
        max_bytes: 8 * 1024 * 1024,
        isolation_level: IsolationLevel::ReadUncommitted as i32,
        topics: vec![FetchTopic {
            name: topic.into(),
            partitions: (0..PARTITIONS)
                .map(|partition| FetchPartition {
                    partition,
                    fetch_offset: 0,
                    partition_max_bytes: 64 * 1024,
                    ..FetchPartition::default()
                })
                .collect(),
        }],
        ..FetchRequest::default()
    }
}

/// The broker's authorization checks so far, by what decided them.
fn checks(metrics: &str) -> (f64, f64) {
    let text = scrape(metrics).expect("scrape");
    let by = |decided_by| {
        value(
            &text,
            "idem_authorization_checks_total",
            &[("decided_by", decided_by)],
        )
        .unwrap_or(0.0)
    };
    (by("cache"), by("acls"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_60_partition_topic_when_a_prefixed_reader_fetches_then_one_check_allows_all_and_outside_the_prefix_every_partition_is_refused(
) {
    let secrets = Secrets::new();
    let metrics = free_addr();
    let mut flags = secrets.flags(&secrets.broker_token);
    flags.extend(["--metrics-listen".to_string(), metrics.clone()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let cluster = Cluster::start(1, &flags);
    let bootstrap = cluster.bootstrap();
    let mut admin = broker_as(&bootstrap, "t-admin").await;
    let created = admin
        .create_topics(CreateTopicsRequest {
            topics: [ALLOWED, OUTSIDE]
                .map(|name| CreatableTopic {
                    name: name.into(),
                    num_partitions: PARTITIONS,
                    replication_factor: 1,
                    unclean_leader_election: false,
                    coordinator_id: None,
                    configs: Vec::new(),
                })
                .to_vec(),
        })
        .await
        .expect("CreateTopics")
        .into_inner();
    for topic in &created.topics {
        assert_eq!(topic.error_code(), ErrorCode::None, "{created:?}");
    }
    let operator = idem_client::Admin::connect_with(
        &bootstrap,
        idem_client::credentials::Credentials::bearer("t-admin").expect("token"),
        None,
    )
    .await
    .expect("admin connects");
    // Every partition served by its leader before the records go in.
    wait_until(PATIENCE, "every partition served", || async {
        for topic in [ALLOWED, OUTSIDE] {
            for partition in 0..PARTITIONS {
                let end = operator
                    .list_offsets(
                        topic,
                        partition,
                        OffsetSpec::Latest,
                        Isolation::ReadUncommitted,
                    )
                    .await;
                if end.is_err() {
                    return Seen::Not(format!("{topic}-{partition}: {end:?}"));
                }
            }
        }
        Seen::Reached(())
    })
    .await;
    // One record per partition of each topic, as the operator, in one request each.
    for topic in [ALLOWED, OUTSIDE] {
        let answer = admin
            .produce(ProduceRequest {
                acks: -1,
                timeout_ms: 5000,
                topics: vec![TopicProduceData {
                    name: topic.into(),
                    partitions: (0..PARTITIONS)
                        .map(|partition| PartitionProduceData {
                            partition,
                            records: batch::encode(
                                batch::ProducerInfo::NONE,
                                0,
                                &raw::records(&[&format!("{topic}-{partition}")]),
                            ),
                        })
                        .collect(),
                }],
                ..ProduceRequest::default()
            })
            .await
            .expect("Produce")
            .into_inner();
        let codes: Vec<ErrorCode> = answer.topics[0]
            .partitions
            .iter()
            .map(|p| p.error_code())
            .collect();
        assert_eq!(codes, vec![ErrorCode::None; PARTITIONS as usize]);
    }
    operator
        .create_acls(&[binding("User:bob", "topic", PREFIX, "prefixed", "read")])
        .await
        .expect("ACL stored");

    // bob reads all 60 partitions in one fetch.
    let mut bob = broker_as(&bootstrap, "t-bob").await;
    let before = checks(&metrics);
    let read = bob
        .fetch(fetch_all(ALLOWED))
        .await
        .expect("Fetch")
        .into_inner();
    let after = checks(&metrics);
    let partitions = &read.topics[0].partitions;
    assert_eq!(partitions.len(), PARTITIONS as usize);
    for p in partitions {
        assert_eq!(p.error_code(), ErrorCode::None, "{}", p.error_message);
        let values: Vec<String> = batch::Batches::new(&p.records)
            .flat_map(|item| {
                let (_, bytes) = item.expect("batch passes its CRC");
                raw::values(&batch::records(bytes).expect("records decode"))
            })
            .collect();
        assert_eq!(values, vec![format!("{ALLOWED}-{}", p.partition)]);
    }
    // One decision for the whole fetch (the ACLs scanned once: nothing was cached for
    // bob yet), not one per partition.
    assert_eq!(
        (after.0 - before.0, after.1 - before.1),
        (0.0, 1.0),
        "checks (cache, acls) for one 60-partition fetch: before {before:?}, after {after:?}"
    );

    // Outside the prefix: every partition refused, naming the topic, nothing returned.
    let refused = bob
        .fetch(fetch_all(OUTSIDE))
        .await
        .expect("Fetch")
        .into_inner();
    let partitions = &refused.topics[0].partitions;
    assert_eq!(partitions.len(), PARTITIONS as usize);
    for p in partitions {
        assert_eq!(p.error_code(), ErrorCode::TopicAuthorizationFailed);
        assert_eq!(
            p.error_message,
            format!("User:bob is not authorized to read topic \"{OUTSIDE}\"")
        );
        assert!(
            p.records.is_empty(),
            "partition {} returned records",
            p.partition
        );
    }
    assert_eq!(
        checks(&metrics).1 - after.1,
        1.0,
        "one decision refuses the whole topic"
    );
}
