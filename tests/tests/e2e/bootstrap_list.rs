//! A client reaches the cluster through any broker of its bootstrap list (Kafka's
//! `bootstrap.servers`): with the first broker dead or paused it gets in through the
//! next, and with every broker dead it says which it could not reach and why.

use std::time::Duration;

use idem_client::{ClientError, Isolation, Producer, ProducerConfig};
use idem_tests::cli::idem;
use idem_tests::{sdk, txn, Cluster};

const TOPIC: &str = "orders";

/// Every broker's address, broker 1 first.
fn bootstrap_list(cluster: &Cluster) -> String {
    cluster
        .ids()
        .into_iter()
        .map(|id| cluster.broker(id).bootstrap())
        .collect::<Vec<_>>()
        .join(",")
}

fn topic_list(bootstrap: &str) -> std::process::Output {
    idem(bootstrap, &["topic", "list"])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_first_bootstrap_broker_killed_when_clients_connect_then_they_go_through_the_next(
) {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_topic(TOPIC, 1, 3).await;
    let bootstrap = bootstrap_list(&cluster);

    cluster.kill(1);
    // The CLI needs only Metadata, which any live broker answers.
    let listed = topic_list(&bootstrap);
    assert!(
        listed.status.success(),
        "idem --bootstrap {bootstrap} topic list: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&listed.stdout).trim(), TOPIC);

    // The producer gets in through broker 2 and writes once a live broker leads.
    cluster
        .wait_for(2, TOPIC, 0, |p| p.leader_id == 2 || p.leader_id == 3)
        .await;
    let producer = Producer::connect(ProducerConfig::new(bootstrap.as_str()))
        .await
        .expect("a producer connects through the second broker");
    let written = sdk::send_one(&producer, TOPIC, 0, "order-1")
        .await
        .expect("written");
    producer.close().await;
    let read = sdk::read_all(&bootstrap, TOPIC, &[0]).await;
    assert_eq!(read.iter().map(sdk::value).collect::<Vec<_>>(), ["order-1"]);
    assert_eq!(read[0].offset, written.offset);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_first_bootstrap_broker_paused_when_a_client_connects_then_it_goes_through_the_next(
) {
    let cluster = Cluster::start(2, &[]);
    cluster.create_topic(TOPIC, 1, 2).await;
    let bootstrap = bootstrap_list(&cluster);

    // A paused broker accepts connections and never answers: only its silence to
    // Metadata tells it apart from a live one.
    cluster.pause(1);
    let config = ProducerConfig {
        request_timeout: Duration::from_secs(2),
        ..ProducerConfig::new(bootstrap.as_str())
    };
    let producer = Producer::connect(config)
        .await
        .expect("a producer connects through the second broker");
    producer.close().await;
    cluster.resume(1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_every_bootstrap_broker_dead_when_clients_connect_then_the_error_names_each_address()
{
    let mut cluster = Cluster::start(2, &[]);
    let addresses: Vec<String> = cluster
        .ids()
        .into_iter()
        .map(|id| cluster.broker(id).bootstrap())
        .collect();
    let bootstrap = addresses.join(",");
    for id in cluster.ids() {
        cluster.kill(id);
    }

    let listed = topic_list(&bootstrap);
    assert!(!listed.status.success());
    let stderr = String::from_utf8_lossy(&listed.stderr);
    for address in &addresses {
        assert!(stderr.contains(&format!("{address}: ")), "{stderr}");
    }

    let error = Producer::connect(ProducerConfig::new(bootstrap.as_str()))
        .await
        .expect_err("no broker answers");
    assert!(matches!(error, ClientError::Connect { .. }), "{error}");
    for address in &addresses {
        assert!(
            error.to_string().contains(&format!("{address}: ")),
            "{error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_first_bootstrap_broker_dead_when_a_coordinator_starts_then_it_serves_through_the_next(
) {
    let mut cluster = Cluster::start_with_coordinators(3, 1, &[], &[]).await;
    cluster.create_topic(TOPIC, 1, 3).await;
    let bootstrap = bootstrap_list(&cluster);
    // Broker 1 is the first address of every coordinator's bootstrap list.
    cluster.kill(1);
    cluster.kill_coordinator(1);
    cluster.restart_coordinator(1);
    cluster.wait_for_coordinators().await;
    let producer = txn::producer(&bootstrap, "through-the-next").await;
    txn::commit_one(&producer, TOPIC, "committed")
        .await
        .expect("a transaction commits with broker 1 down");
    txn::wait_until_stable(&bootstrap, TOPIC, &[0]).await;
    let read = txn::values(&bootstrap, TOPIC, &[0], Isolation::ReadCommitted).await;
    assert_eq!(read, vec!["committed".to_string()]);
}
