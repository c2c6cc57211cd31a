//! Exactly-once consume-transform-produce at the width users run (issues 22 and 26):
//! three `transform` processes in one group over a 120-partition input, 40 partitions
//! each, one SIGKILLed mid-stream and restarted as the same instance. Every partition
//! ends with exactly one output per input in input order and the group's committed
//! offsets at the input's log end; the group's lag lists all 120 partitions at 0.

use std::time::Duration;

use idem_client::{Admin, Producer, ProducerConfig, ProducerRecord};
use idem_tests::groups::GroupClient;
use idem_tests::processor::{assert_pipeline_exactly_once, wait_committed, Processor};
use idem_tests::wait::{wait_until, Seen};
use idem_tests::Cluster;

const INPUT: &str = "wide-words";
const OUTPUT: &str = "wide-shouts";
const GROUP: &str = "wide-uppercase";
const PARTITIONS: i32 = 120;
const PER_PARTITION: usize = 50;
const SESSION_MS: &str = "6000";
const RUN: Duration = Duration::from_secs(180);

fn input_value(p: i32, n: usize) -> String {
    format!("p{p}-word-{n:03}")
}

/// Writes input records `from..to` to every partition.
async fn fill(bootstrap: &str, from: usize, to: usize) {
    let producer = Producer::connect(ProducerConfig::new(bootstrap))
        .await
        .expect("producer connects");
    let mut deliveries = Vec::new();
    for n in from..to {
        for p in 0..PARTITIONS {
            let record = ProducerRecord::new(INPUT, input_value(p, n)).partition(p);
            deliveries.push(producer.send_record(record).await.expect("send"));
        }
    }
    for d in deliveries {
        d.await.expect("acknowledged");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_three_processors_on_120_partitions_and_one_killed_then_each_input_yields_exactly_one_output_in_order(
) {
    let cluster =
        Cluster::start_with_coordinators(3, 2, &[], &["--group-session-timeout-ms", SESSION_MS])
            .await;
    cluster.create_topic(INPUT, PARTITIONS, 3).await;
    cluster.create_topic(OUTPUT, PARTITIONS, 3).await;
    let bootstrap = cluster.bootstrap();
    let total = (PARTITIONS as usize * PER_PARTITION) as i64;
    let group = GroupClient::new(&bootstrap, GROUP);

    let mut a = Processor::start(&bootstrap, INPUT, OUTPUT, GROUP, "a");
    let _b = Processor::start(&bootstrap, INPUT, OUTPUT, GROUP, "b");
    let _c = Processor::start(&bootstrap, INPUT, OUTPUT, GROUP, "c");
    group
        .wait_until_owned(&[40, 40, 40], RUN, "three members own 40 partitions each")
        .await;

    // The first half; a processor is SIGKILLed once some of it is committed, and comes
    // back as the same instance (fencing its zombie's open transaction).
    fill(&bootstrap, 0, PER_PARTITION / 2).await;
    wait_committed(
        &group,
        INPUT,
        PARTITIONS,
        total / 4,
        RUN,
        "a quarter is processed",
    )
    .await;
    a.restart();
    fill(&bootstrap, PER_PARTITION / 2, PER_PARTITION).await;
    wait_committed(
        &group,
        INPUT,
        PARTITIONS,
        total,
        RUN,
        "everything is processed",
    )
    .await;

    assert_pipeline_exactly_once(
        &group,
        &bootstrap,
        (INPUT, OUTPUT),
        PARTITIONS,
        PER_PARTITION,
        input_value,
    )
    .await;
    // Every partition is owned by some member again.
    wait_until(RUN, "the members own all 120 partitions", || async {
        let owned: usize = group
            .describe()
            .await
            .members
            .iter()
            .flat_map(|m| &m.assignment)
            .map(|t| t.partitions.len())
            .sum();
        if owned == PARTITIONS as usize {
            Seen::Reached(())
        } else {
            Seen::Not(format!("{owned} owned"))
        }
    })
    .await;
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    let lags = admin.group_lag(GROUP).await.expect("group lag");
    assert_eq!(lags.len(), PARTITIONS as usize, "{lags:?}");
    for (p, lag) in (0..PARTITIONS).zip(&lags) {
        assert_eq!(
            (
                lag.topic.as_str(),
                lag.partition,
                lag.committed,
                lag.log_end,
                lag.lag
            ),
            (
                INPUT,
                p,
                Some(PER_PARTITION as i64),
                PER_PARTITION as i64,
                Some(0)
            ),
            "{lag:?}"
        );
        assert!(lag.owner.is_some(), "{lag:?}");
    }
}
