//! The README's compose walkthrough, from this host against `deploy/compose.yaml` run
//! from the images the test command built: `up --wait` is healthy within 60 s; the
//! `idem` CLI on the host creates a topic through the external listeners, produces
//! plainly and in a transaction, and reads everything back read_committed, as does a
//! client inside the compose network by service names; Metadata asked from the host
//! names only host addresses; the brokers' named volumes keep the
//! logs across a stop and start of every broker.
//!
//! A test binary of its own, like the container chaos run: eight containers starting
//! and stopping beside the e2e tests' timing-bounded fault tests made those miss their
//! recovery bounds on 2 cores (two of three suite runs on 2026-12-05), and cargo runs
//! test binaries one after the other.

use std::process::Output;

use idem_proto::v1::MetadataRequest;
use idem_tests::cli::idem_with_input;
use idem_tests::compose::{ComposeCluster, BROKERS, UP_WITHIN};
use idem_tests::kafka_clients::kcat;
use idem_tests::raw;

const TOPIC: &str = "orders";

fn ok(output: Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Every value a read_committed consumer reads from the start, sorted.
fn consume_all(bootstrap: &str) -> Vec<String> {
    let out = ok(
        idem_with_input(
            bootstrap,
            &["consume", TOPIC, "--from-beginning", "--timeout-ms", "3000"],
            "",
        ),
        "consume",
    );
    let mut values: Vec<String> = out.lines().map(str::to_string).collect();
    values.sort();
    values
}

#[tokio::test]
async fn given_the_compose_cluster_when_used_from_the_host_then_the_walkthrough_works() {
    let cluster = ComposeCluster::up("idem-e2e-walkthrough");
    assert!(
        cluster.up_took <= UP_WITHIN,
        "up took {:?}",
        cluster.up_took
    );
    let bootstrap = cluster.bootstrap();

    let metadata = raw::connect(&cluster.broker_address(1))
        .await
        .metadata(MetadataRequest { topics: vec![] })
        .await
        .expect("Metadata from the host")
        .into_inner();
    let mut brokers: Vec<String> = metadata.brokers.into_iter().map(|b| b.address).collect();
    brokers.sort();
    let mut expected: Vec<String> = (1..=3).map(|id| cluster.broker_address(id)).collect();
    expected.sort();
    assert_eq!(brokers, expected, "the host is told host addresses");
    let mut coordinators: Vec<String> = metadata
        .coordinators
        .into_iter()
        .map(|c| c.address)
        .collect();
    coordinators.sort();
    let mut expected = vec![
        cluster.coordinator_address(1),
        cluster.coordinator_address(2),
    ];
    expected.sort();
    assert_eq!(coordinators, expected, "and host addresses of coordinators");

    ok(
        idem_with_input(
            &bootstrap,
            &[
                "topic",
                "create",
                TOPIC,
                "--partitions",
                "6",
                "--replication-factor",
                "3",
            ],
            "",
        ),
        "topic create",
    );
    let plain: Vec<String> = (1..=10).map(|i| format!("order-{i}")).collect();
    ok(
        idem_with_input(&bootstrap, &["produce", TOPIC], &(plain.join("\n") + "\n")),
        "produce",
    );
    let paid: Vec<String> = (1..=5).map(|i| format!("paid-{i}")).collect();
    ok(
        idem_with_input(
            &bootstrap,
            &["produce", TOPIC, "--transactional-id", "payments"],
            &(paid.join("\n") + "\n"),
        ),
        "transactional produce",
    );
    let mut everything: Vec<String> = plain.iter().chain(&paid).cloned().collect();
    everything.sort();
    assert_eq!(consume_all(&bootstrap), everything);
    // A client inside the network, by service names, reads the same.
    let inside = ok(
        cluster.compose(&[
            "exec",
            "-T",
            "broker-1",
            "idem",
            "--bootstrap",
            "broker-2:9092",
            "consume",
            TOPIC,
            "--from-beginning",
            "--timeout-ms",
            "3000",
        ]),
        "consume inside the network",
    );
    let mut inside: Vec<String> = inside.lines().map(str::to_string).collect();
    inside.sort();
    assert_eq!(inside, everything, "read inside the compose network");

    // A Kafka client on the host (kcat): told every broker's published Kafka address,
    // it reads the same records, read_committed.
    let kafka_bootstrap = cluster.kafka_address(1);
    let listed = kcat(&["-b", &kafka_bootstrap, "-L"], "").await;
    for id in 1..=3 {
        let address = cluster.kafka_address(id);
        assert!(
            listed.contains(&address),
            "kcat -L lacks {address}: {listed}"
        );
    }
    let read = kcat(
        &[
            "-b",
            &kafka_bootstrap,
            "-C",
            "-t",
            TOPIC,
            "-o",
            "beginning",
            "-e",
            "-q",
            "-f",
            "%s\\n",
            "-X",
            "isolation.level=read_committed",
        ],
        "",
    )
    .await;
    let mut read: Vec<String> = read.lines().map(str::to_string).collect();
    read.sort();
    assert_eq!(read, everything, "read by kcat through the Kafka listeners");

    // The logs live on the named volumes: every broker stopped and started again
    // still has them.
    let mut services = vec!["stop", "--timeout", "10"];
    services.extend(BROKERS);
    ok(cluster.compose(&services), "compose stop");
    services[0] = "start";
    services.drain(1..3);
    ok(cluster.compose(&services), "compose start");
    for broker in BROKERS {
        cluster.wait_healthy(broker).await;
    }
    assert_eq!(
        consume_all(&bootstrap),
        everything,
        "the records survive a restart of every broker"
    );
}
