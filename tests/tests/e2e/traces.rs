//! Traces (issue 29): brokers and a coordinator started with `--otlp-endpoint` export
//! their spans to an OTLP collector. A Produce sent with a W3C `traceparent` continues
//! the caller's trace on the leader: the RPC's span is the caller's child, and the
//! append under it names the producer id, partition and offset, with its fsync and its
//! wait for the in-sync replicas below; the follower's copy and the coordinator's
//! marker rounds of a committed transaction (its BEGIN and its COMMIT) are exported
//! with their ids, and each round's WriteTxnMarkers continues the round's trace on the
//! broker that writes the marker.

use std::collections::{BTreeMap, BTreeSet};

use idem_client::{Producer, ProducerConfig, ProducerRecord};
use idem_proto::v1::{
    InitProducerIdRequest, PartitionProduceData, ProduceRequest, TopicProduceData,
};
use idem_proto::ErrorCode;
use idem_tests::cluster::Cluster;
use idem_tests::otlp_collector::{OtlpCollector, ReceivedSpan};
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::{raw, txn};

const TOPIC: &str = "traced";

/// Waits until the collector holds a span `matching`; returns it.
async fn wait_for_span(
    collector: &OtlpCollector,
    what: &str,
    matching: impl Fn(&ReceivedSpan) -> bool,
) -> ReceivedSpan {
    let (found, _) = wait_until(PATIENCE, what, || async {
        let spans = collector.spans();
        match spans.iter().find(|s| matching(s)) {
            Some(span) => Seen::Reached(span.clone()),
            None => {
                let names: BTreeSet<&str> = spans.iter().map(|s| s.name.as_str()).collect();
                Seen::Not(format!("{} spans named {names:?}", spans.len()))
            }
        }
    })
    .await;
    found
}

fn attribute<'a>(span: &'a ReceivedSpan, key: &str) -> &'a str {
    span.attributes.get(key).map_or("", String::as_str)
}

#[tokio::test]
async fn given_an_otlp_endpoint_when_a_traced_produce_and_a_transaction_run_then_their_steps_are_exported(
) {
    let collector = OtlpCollector::start();
    let endpoint = collector.endpoint();
    let mut cluster = Cluster::start(2, &["--otlp-endpoint", &endpoint]);
    cluster
        .add_coordinators(1, &["--otlp-endpoint", &endpoint])
        .await;
    cluster.create_topic(TOPIC, 1, 2).await;
    let leader = cluster.leader_of(TOPIC, 0).await;
    let mut client = raw::connect(&cluster.broker(leader.leader_id).bootstrap()).await;
    let producer = client
        .init_producer_id(InitProducerIdRequest::default())
        .await
        .expect("InitProducerId")
        .into_inner();
    assert_eq!(producer.error_code(), ErrorCode::None);

    // The caller's trace: a random trace id and the id of the caller's span.
    let trace_id = format!("{:032x}", rand::random::<u128>());
    let caller_span = format!("{:016x}", rand::random::<u64>() | 1);
    let mut request = tonic::Request::new(ProduceRequest {
        coordinator_epoch: None,
        acks: -1,
        timeout_ms: 30_000,
        topics: vec![TopicProduceData {
            name: TOPIC.into(),
            partitions: vec![PartitionProduceData {
                partition: 0,
                records: raw::idempotent_batch(producer.producer_id, 0, 0, &["a", "b"]),
            }],
        }],
    });
    let traceparent = format!("00-{trace_id}-{caller_span}-01");
    request.metadata_mut().insert(
        "traceparent",
        traceparent.parse().expect("a traceparent is ASCII"),
    );
    let answer = client.produce(request).await.expect("Produce").into_inner();
    let partition = &answer.topics[0].partitions[0];
    assert_eq!(
        (partition.error_code(), partition.base_offset),
        (ErrorCode::None, 0)
    );

    // The leader's RPC span continues the caller's trace.
    let rpc = wait_for_span(&collector, "the Produce span in the caller's trace", |s| {
        s.trace_id == trace_id && s.name == "/idem.v1.Broker/Produce"
    })
    .await;
    assert_eq!(rpc.service, "idem-broker");
    assert_eq!(
        rpc.parent_span_id, caller_span,
        "the caller's span is its parent"
    );
    // Under it, the append with the producer id, partition and offset.
    let append = wait_for_span(&collector, "the append under the Produce span", |s| {
        s.trace_id == trace_id && s.name == "append"
    })
    .await;
    assert_eq!(append.parent_span_id, rpc.span_id);
    assert_eq!(attribute(&append, "topic"), TOPIC);
    assert_eq!(attribute(&append, "partition"), "0");
    assert_eq!(
        attribute(&append, "producer_id"),
        producer.producer_id.to_string()
    );
    assert_eq!(attribute(&append, "base_offset"), "0");
    assert_eq!(attribute(&append, "duplicate"), "false");
    // Its steps: the local fsync and the wait for the in-sync replicas (acks=all).
    for step in ["fsync", "await_isr"] {
        let found = wait_for_span(&collector, &format!("the {step} under the append"), |s| {
            s.trace_id == trace_id && s.name == step
        })
        .await;
        assert_eq!(found.parent_span_id, append.span_id, "{step}");
        assert_eq!(attribute(&found, "end"), "2", "{step}");
    }
    // The follower's copy of those records (its own fetch's trace).
    let follower = *leader
        .replicas
        .iter()
        .find(|r| **r != leader.leader_id)
        .expect("a follower");
    let replicate = wait_for_span(&collector, "the follower's replicate span", |s| {
        s.name == "replicate"
            && s.attributes.get("topic").map(String::as_str) == Some(TOPIC)
            && s.attributes.get("log_end").map(String::as_str) == Some("2")
    })
    .await;
    assert_eq!(
        attribute(&replicate, "leader"),
        leader.leader_id.to_string()
    );
    assert_ne!(follower, leader.leader_id);

    // A committed transaction's marker round on the coordinator names its ids.
    let transactional = txn::producer(&cluster.bootstrap(), "traced-txn").await;
    txn::commit_one(&transactional, TOPIC, "in-txn")
        .await
        .expect("a transaction commits");
    // (idem writes a BEGIN marker when a partition joins, then the COMMIT.)
    for control in ["Begin", "Commit"] {
        let round = wait_for_span(&collector, &format!("the {control} marker round"), |s| {
            s.name == "marker_round"
                && attribute(s, "transactional_id") == "traced-txn"
                && attribute(s, "control") == control
        })
        .await;
        assert_eq!(round.service, "idem-coordinator");
        assert_eq!(attribute(&round, "partitions"), "1", "{control}");
        assert_eq!(
            attribute(&round, "producer_id"),
            transactional
                .producer_id()
                .map(|p| p.producer_id.to_string())
                .unwrap_or_default()
        );
        // The round's WriteTxnMarkers continues its trace on the leader: one trace
        // from the coordinator's decision to the broker's write of the marker.
        let written = wait_for_span(
            &collector,
            &format!("the broker's WriteTxnMarkers under the {control} round"),
            |s| s.trace_id == round.trace_id && s.name == "/idem.v1.Broker/WriteTxnMarkers",
        )
        .await;
        assert_eq!(written.service, "idem-broker", "{control}");
        assert_eq!(written.parent_span_id, round.span_id, "{control}");
    }

    // Every exported span has ids; the RPCs name their path.
    let spans = collector.spans();
    let by_name: BTreeMap<&str, usize> = spans.iter().fold(BTreeMap::new(), |mut m, s| {
        *m.entry(s.name.as_str()).or_default() += 1;
        m
    });
    assert!(
        spans
            .iter()
            .all(|s| s.trace_id.len() == 32 && s.span_id.len() == 16),
        "{by_name:?}"
    );
    assert!(by_name.contains_key("/idem.v1.Broker/Fetch"), "{by_name:?}");
    cluster.stop_all();
}

/// A record sent from within a traced span carries that span's context in its
/// `traceparent` header through the broker, and the consumer reads it back as the
/// parent for its processing; a record sent outside any span carries none.
#[tokio::test]
async fn given_a_record_sent_in_a_traced_span_then_the_consumer_reads_that_span_as_its_parent() {
    use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
    use tracing::instrument::WithSubscriber;
    use tracing::Instrument;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    use tracing_subscriber::layer::SubscriberExt;

    let broker = idem_tests::BrokerProcess::start();
    let bootstrap = broker.bootstrap();
    let mut client = raw::connect(&bootstrap).await;
    assert_eq!(
        raw::create_topic(&mut client, TOPIC, 1).await,
        ErrorCode::None
    );
    let producer = Producer::connect(ProducerConfig::new(&bootstrap))
        .await
        .expect("producer connects");
    // The application's tracing: the OpenTelemetry layer, for this test's task only.
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("app")));
    let app: tracing::Dispatch = subscriber.into();
    let send = tracing::dispatcher::with_default(&app, || tracing::info_span!("app_send"));
    let sent_in = send.context().span().span_context().clone();
    async {
        for value in ["t1", "t2"] {
            producer
                .send_record(ProducerRecord::new(TOPIC, value).partition(0))
                .await
                .expect("send")
                .await
                .expect("acknowledged");
        }
    }
    .instrument(send)
    .with_subscriber(app)
    .await;
    producer
        .send_record(ProducerRecord::new(TOPIC, "untraced").partition(0))
        .await
        .expect("send")
        .await
        .expect("acknowledged");
    assert!(sent_in.is_valid());

    let records = idem_tests::sdk::read_all(&bootstrap, TOPIC, &[0]).await;
    let read: Vec<(String, Option<(String, String)>)> = records
        .iter()
        .map(|r| {
            let parent = r.trace_context().map(|cx| {
                let span = cx.span().span_context().clone();
                (span.trace_id().to_string(), span.span_id().to_string())
            });
            (idem_tests::sdk::value(r), parent)
        })
        .collect();
    let expected_parent = Some((
        sent_in.trace_id().to_string(),
        sent_in.span_id().to_string(),
    ));
    assert_eq!(
        read,
        vec![
            ("t1".to_string(), expected_parent.clone()),
            ("t2".to_string(), expected_parent),
            ("untraced".to_string(), None),
        ]
    );
}
