//! Exactly-once consume-transform-produce (issue 26), the seed documents' end-to-end
//! flow: processors in one group (the SDK's `transform` example, as separate processes)
//! read an input topic, write f(input) to an output topic and commit their input
//! offsets in the same transaction. While they run, processors are SIGKILLed and
//! restarted, one is paused past its session timeout and resumed (it was fenced: its
//! transaction cannot commit, nothing it wrote shows), a fourth joins and is killed,
//! and the group's coordinator is SIGKILLed. At the end a read_committed reader of the
//! output finds exactly one output per input, in input order per partition, and the
//! group's committed offsets equal the input's log end.

use std::time::Duration;

use idem_client::{Producer, ProducerConfig, ProducerRecord};
use idem_tests::groups::GroupClient;
use idem_tests::processor::{assert_pipeline_exactly_once, wait_committed, Processor};
use idem_tests::wait::{wait_until, Seen};
use idem_tests::Cluster;

const INPUT: &str = "words";
const OUTPUT: &str = "shouts";
const GROUP: &str = "uppercase";
const PARTITIONS: i32 = 6;
const PER_PARTITION: usize = 5_000;
/// The input arrives in five waves, one before each fault, so processors are busy
/// (transactions open) when it strikes.
const WAVE: usize = PER_PARTITION / 5;
/// Short sessions, so a paused member is removed within seconds.
const SESSION_MS: &str = "6000";
/// How long a whole run may take to commit every input (the processors do it at their
/// own pace through the faults).
const RUN: Duration = Duration::from_secs(180);

fn input_value(p: i32, n: usize) -> String {
    format!("p{p}-word-{n:05}")
}

/// Writes input records `wave * WAVE ..` of the next wave to every partition.
async fn fill(bootstrap: &str, wave: usize) {
    let producer = Producer::connect(ProducerConfig::new(bootstrap))
        .await
        .expect("producer connects");
    let mut deliveries = Vec::new();
    for n in wave * WAVE..(wave + 1) * WAVE {
        for p in 0..PARTITIONS {
            let record = ProducerRecord::new(INPUT, input_value(p, n)).partition(p);
            deliveries.push(producer.send_record(record).await.expect("send"));
        }
    }
    for d in deliveries {
        d.await.expect("acknowledged");
    }
}

/// Waits until the group has committed at least `at_least` input offsets in all.
async fn progressed(group: &GroupClient, at_least: i64, what: &str) {
    wait_committed(group, INPUT, PARTITIONS, at_least, RUN, what).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_processors_killed_paused_and_their_coordinator_killed_then_each_input_yields_exactly_one_output_in_order(
) {
    let mut cluster =
        Cluster::start_with_coordinators(3, 2, &[], &["--group-session-timeout-ms", SESSION_MS])
            .await;
    cluster.create_topic(INPUT, PARTITIONS, 3).await;
    cluster.create_topic(OUTPUT, PARTITIONS, 3).await;
    let bootstrap = cluster.bootstrap();
    let total = (PARTITIONS as usize * PER_PARTITION) as i64;
    let wave_total = total / 5;
    let group = GroupClient::new(&bootstrap, GROUP);

    let mut a = Processor::start(&bootstrap, INPUT, OUTPUT, GROUP, "a");
    let b = Processor::start(&bootstrap, INPUT, OUTPUT, GROUP, "b");
    let _c = Processor::start(&bootstrap, INPUT, OUTPUT, GROUP, "c");

    // Wave 1; a processor is SIGKILLed mid-wave and comes back as the same instance.
    fill(&bootstrap, 0).await;
    progressed(&group, wave_total / 2, "half of wave 1 is processed").await;
    a.restart();

    // Wave 2; b sleeps past its session: the group drops it, gives its partitions away,
    // and b, resumed, is fenced (its open transaction cannot commit) and joins again.
    // First the killed instance's session ends and the three live members share the
    // partitions two each, so b surely owns some when it sleeps.
    group
        .wait_until_owned(&[2, 2, 2], RUN, "three members own two partitions each")
        .await;
    fill(&bootstrap, 1).await;
    b.pause();
    wait_until(RUN, "the paused member is removed", || async {
        let members = group.describe().await.members.len();
        if members == 2 {
            Seen::Reached(())
        } else {
            Seen::Not(format!("{members} members"))
        }
    })
    .await;
    b.resume();

    // Wave 3; a fourth processor joins, then dies (its session ends).
    fill(&bootstrap, 2).await;
    let mut d = Processor::start(&bootstrap, INPUT, OUTPUT, GROUP, "d");
    progressed(&group, 5 * wave_total / 2, "half of wave 3 is processed").await;
    d.kill();

    // Wave 4; the group's coordinator is SIGKILLed; the other takes the slice over.
    fill(&bootstrap, 3).await;
    let (owner, _) = group.find().await.expect("the group's coordinator");
    cluster.kill_coordinator(owner);
    progressed(&group, 4 * wave_total, "wave 4 is processed").await;
    cluster.restart_coordinator(owner);

    fill(&bootstrap, 4).await;
    progressed(&group, total, "everything is processed").await;
    // b learned it was no longer a member when it woke, and gave its partitions up.
    assert!(b.log().contains("lost"), "b was not fenced: {}", b.log());

    assert_pipeline_exactly_once(
        &group,
        &bootstrap,
        (INPUT, OUTPUT),
        PARTITIONS,
        PER_PARTITION,
        input_value,
    )
    .await;
}
