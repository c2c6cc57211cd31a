//! A data dir belongs to one cluster: a broker pointed at another cluster's etcd (or
//! prefix), or at an etcd that lost its data, refuses to start instead of deleting
//! every partition that catalog does not list.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use idem_client::Delivery;
use idem_proto::ErrorCode;
use idem_tests::binaries::binary;
use idem_tests::etcd::EtcdServer;
use idem_tests::raw;
use idem_tests::sdk::{self, read_all, send_one};
use idem_tests::server_process::BrokerProcess;

fn broker_args<'a>(endpoint: &'a str, prefix: &'a str) -> Vec<&'a str> {
    vec![
        "--id",
        "1",
        "--etcd",
        endpoint,
        "--etcd-prefix",
        prefix,
        "--lease-ttl-ms",
        "2000",
    ]
}

/// Runs the broker binary on `data_dir` with `args` until it exits (a broker that is
/// still running after 30 s started: it is killed and that is the answer); its exit
/// code and stderr.
async fn run_broker(data_dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let data_dir = data_dir.to_string_lossy().into_owned();
    let mut all = vec!["--listen", "127.0.0.1:0", "--data-dir", data_dir.as_str()];
    all.extend_from_slice(args);
    let mut child = tokio::process::Command::new(binary("idem-broker"))
        .args(&all)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run idem-broker");
    let mut stderr = child.stderr.take().expect("stderr piped");
    let mut log = String::new();
    let exited = tokio::time::timeout(Duration::from_secs(30), async {
        let (status, _) = tokio::join!(child.wait(), stderr.read_to_string(&mut log));
        status.expect("wait for idem-broker")
    })
    .await;
    match exited {
        Ok(status) => (status.code(), log),
        Err(_) => (Some(0), format!("still running after 30 s: {log}")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_data_dir_of_one_cluster_when_its_broker_meets_another_or_an_empty_catalog_then_it_refuses_and_keeps_every_record(
) {
    let etcd = EtcdServer::start();
    let endpoint = etcd.endpoint();
    let mut broker = BrokerProcess::start_with(&broker_args(&endpoint, "/one"));
    let mut client = raw::connect(&broker.bootstrap()).await;
    assert_eq!(
        raw::create_topic(&mut client, "kept", 1).await,
        ErrorCode::None
    );
    let producer = sdk::one_record_per_batch(&broker.bootstrap(), Delivery::ExactlyOnce).await;
    for value in ["a", "b", "c"] {
        send_one(&producer, "kept", 0, value).await.expect("acked");
    }
    broker.stop();
    let partition_dir = broker.data_dir().join("kept-0");
    assert!(partition_dir.is_dir());

    // An etcd prefix no cluster ever used: the same as an etcd that lost its data.
    let (code, stderr) = run_broker(broker.data_dir(), &broker_args(&endpoint, "/empty")).await;
    assert_ne!(code, Some(0), "started against an empty catalog: {stderr}");
    assert!(stderr.contains("has no cluster"), "{stderr}");
    assert!(partition_dir.is_dir(), "the partition survived: {stderr}");

    // Another cluster's prefix.
    let mut other = BrokerProcess::start_with(&broker_args(&endpoint, "/two"));
    other.stop();
    let (code, stderr) = run_broker(broker.data_dir(), &broker_args(&endpoint, "/two")).await;
    assert_ne!(code, Some(0), "joined another cluster: {stderr}");
    assert!(
        stderr.contains("but etcd under prefix \"/two\" is cluster"),
        "{stderr}"
    );
    assert!(partition_dir.is_dir(), "the partition survived: {stderr}");

    // Back in its own cluster, everything is there.
    broker.restart();
    let read = read_all(&broker.bootstrap(), "kept", &[0]).await;
    let values: Vec<String> = read.iter().map(sdk::value).collect();
    assert_eq!(values, ["a", "b", "c"]);
}
