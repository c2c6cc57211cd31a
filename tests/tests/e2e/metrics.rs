//! The Prometheus endpoints (`--metrics-listen`, issue 29) of a live cluster, scraped
//! as an operator's Prometheus does, move as the cluster does: a retried idempotent
//! batch counts one duplicate on its leader; a killed follower makes every partition
//! the leader leads under-replicated (all are on the three brokers) and ISR shrinks, and once it is back and caught
//! up the gauge returns to 0 with an ISR expansion; RPCs are counted by name; the
//! producer's state and the log's size are reported; the coordinator reports its
//! committed transaction, how long it took, and how long its slices took to load, and
//! a group's lag as its commits move.

use std::collections::BTreeMap;

use idem_client::{Admin, Isolation, OffsetSpec};
use idem_proto::v1::InitProducerIdRequest;
use idem_proto::ErrorCode;
use idem_tests::cluster::Cluster;
use idem_tests::scrape::{scrape, value};
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::{raw, txn};

const TOPIC: &str = "watched";

fn free_addr() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe a free port");
    probe.local_addr().expect("probed address").to_string()
}

/// Waits until `name{labels}` scraped from `addr` satisfies `ok`; returns the value.
async fn wait_for_metric(
    addr: &str,
    name: &str,
    labels: &[(&str, &str)],
    ok: impl Fn(f64) -> bool,
) -> f64 {
    let what = format!("{name}{labels:?} at {addr}");
    let (found, _) = wait_until(PATIENCE, &what, || async {
        let found = scrape(addr).ok().and_then(|t| value(&t, name, labels));
        let reached = found.is_some_and(&ok);
        seen_if(found, reached)
    })
    .await;
    found.unwrap_or_default()
}

#[tokio::test]
async fn given_metrics_endpoints_when_the_cluster_moves_then_the_metrics_follow() {
    let metrics: BTreeMap<i32, String> = (1..=3).map(|id| (id, free_addr())).collect();
    let own = metrics
        .iter()
        .map(|(id, addr)| (*id, vec!["--metrics-listen".to_string(), addr.clone()]))
        .collect();
    let mut cluster = Cluster::start_each(3, &["--replica-lag-time-max-ms", "1000"], &own);
    let coordinator_metrics = free_addr();
    cluster
        .add_coordinators(
            1,
            &[
                "--metrics-listen",
                &coordinator_metrics,
                "--group-lag-interval-ms",
                "200",
            ],
        )
        .await;
    cluster.create_topic(TOPIC, 1, 3).await;
    let leader = cluster.leader_of(TOPIC, 0).await;
    let leader_metrics = &metrics[&leader.leader_id];
    wait_for_metric(
        leader_metrics,
        "idem_under_replicated_partitions",
        &[],
        |v| v == 0.0,
    )
    .await;

    // A retried batch is a duplicate, answered with its original offset, and counted.
    let mut client = raw::connect(&cluster.broker(leader.leader_id).bootstrap()).await;
    let producer = client
        .init_producer_id(InitProducerIdRequest::default())
        .await
        .expect("InitProducerId")
        .into_inner();
    assert_eq!(producer.error_code(), ErrorCode::None);
    let batch = raw::idempotent_batch(producer.producer_id, 0, 0, &["once"]);
    let before = scrape(leader_metrics)
        .ok()
        .and_then(|t| value(&t, "idem_produce_duplicate_batches_total", &[]))
        .unwrap_or(0.0);
    for _ in 0..2 {
        let answer = raw::produce(&mut client, TOPIC, 0, batch.clone()).await;
        assert_eq!(
            (answer.error_code(), answer.base_offset),
            (ErrorCode::None, 0)
        );
    }
    wait_for_metric(
        leader_metrics,
        "idem_produce_duplicate_batches_total",
        &[],
        |v| v == before + 1.0,
    )
    .await;
    // The producer's state and the log's bytes are reported.
    wait_for_metric(leader_metrics, "idem_producer_states", &[], |v| v >= 1.0).await;
    wait_for_metric(
        leader_metrics,
        "idem_log_size_bytes",
        &[("topic", TOPIC), ("partition", "0")],
        |v| v > 0.0,
    )
    .await;
    let produced = wait_for_metric(
        leader_metrics,
        "idem_rpc_requests_total",
        &[("rpc", "Produce")],
        |v| v >= 2.0,
    )
    .await;
    assert!(produced >= 2.0);

    // A follower dies: under-replicated on the leader, an ISR shrink; back: 0, expand.
    let follower = *leader
        .replicas
        .iter()
        .find(|r| **r != leader.leader_id)
        .expect("a follower");
    cluster.kill(follower);
    // Every partition is on all three brokers, so every one the leader leads (the
    // watched one and internal ones) has the dead follower among its replicas.
    let what = format!("every partition led at {leader_metrics} under-replicated");
    wait_until(PATIENCE, &what, || async {
        let text = scrape(leader_metrics).unwrap_or_default();
        let led = value(&text, "idem_partitions_led", &[]);
        let under = value(&text, "idem_under_replicated_partitions", &[]);
        let reached = led.is_some_and(|n| n >= 1.0) && under == led;
        seen_if((led, under), reached)
    })
    .await;
    wait_for_metric(
        leader_metrics,
        "idem_isr_changes_total",
        &[("change", "shrink")],
        |v| v >= 1.0,
    )
    .await;
    cluster.restart(follower);
    wait_for_metric(
        leader_metrics,
        "idem_under_replicated_partitions",
        &[],
        |v| v == 0.0,
    )
    .await;
    wait_for_metric(
        leader_metrics,
        "idem_isr_changes_total",
        &[("change", "expand")],
        |v| v >= 1.0,
    )
    .await;

    // The coordinator counts the transaction it completed.
    let transactional = txn::producer(&cluster.bootstrap(), "metrics-txn").await;
    txn::commit_one(&transactional, TOPIC, "in-txn")
        .await
        .expect("a transaction commits");
    wait_for_metric(
        &coordinator_metrics,
        "idem_transactions",
        &[("state", "CompleteCommit")],
        |v| v == 1.0,
    )
    .await;
    wait_for_metric(
        &coordinator_metrics,
        "idem_transaction_duration_seconds_count",
        &[("outcome", "CompleteCommit")],
        |v| v == 1.0,
    )
    .await;
    wait_for_metric(
        &coordinator_metrics,
        "idem_txn_log_slice_load_seconds_count",
        &[],
        |v| v >= 1.0,
    )
    .await;

    // A group's lag is the records its committed offsets are behind, per topic, and
    // follows its commits.
    let admin = Admin::connect(&cluster.bootstrap())
        .await
        .expect("admin connects");
    let end = admin
        .list_offsets(TOPIC, 0, OffsetSpec::Latest, Isolation::ReadUncommitted)
        .await
        .expect("high watermark");
    assert!(end >= 2, "two records and a marker, at least: {end}");
    let tp = || vec![((TOPIC.to_string(), 0), 0)];
    admin
        .reset_group_offsets("lagging", &tp())
        .await
        .expect("commits offset 0");
    let lag_labels = [("group", "lagging"), ("topic", TOPIC)];
    let lag = wait_for_metric(
        &coordinator_metrics,
        "idem_consumer_group_lag",
        &lag_labels,
        |v| v == end as f64,
    )
    .await;
    assert_eq!(lag, end as f64);
    wait_for_metric(&coordinator_metrics, "idem_groups", &[], |v| v >= 1.0).await;
    admin
        .reset_group_offsets("lagging", &[((TOPIC.to_string(), 0), end)])
        .await
        .expect("commits the high watermark");
    wait_for_metric(
        &coordinator_metrics,
        "idem_consumer_group_lag",
        &lag_labels,
        |v| v == 0.0,
    )
    .await;
    cluster.stop_all();
}
