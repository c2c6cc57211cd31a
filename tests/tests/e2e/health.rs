//! Health tells the truth: through the standard gRPC health API a server reports
//! NOT_SERVING while it loads its state (a broker's logs, a coordinator's slices) and
//! while it has lost its etcd lease, and SERVING only when it can do its job. Each state
//! is awaited with a deadline.

use etcd_client::{Client, PutOptions};
use idem_proto::batch::{self, ProducerInfo};
use idem_tests::cli::idem;
use idem_tests::raw;
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::{BrokerProcess, Cluster, CoordinatorProcess};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const BROKER: &str = "idem.v1.Broker";
const COORDINATOR: &str = "idem.v1.TxnCoordinator";
const CAUGHT_UP: &str = "idem.CaughtUp";

/// Awaits `address`'s health for `service` reporting `wanted` (a refused connection
/// counts as "not yet"), failing after `PATIENCE` with what was seen last.
async fn await_status(address: &str, service: &str, wanted: ServingStatus) {
    let endpoint =
        tonic::transport::Endpoint::from_shared(format!("http://{address}")).expect("endpoint");
    let what = format!("{address} {service} reports {wanted:?}");
    wait_until(PATIENCE, &what, || async {
        match endpoint.connect().await {
            Ok(channel) => {
                let request = HealthCheckRequest {
                    service: service.into(),
                };
                match HealthClient::new(channel).check(request).await {
                    Ok(answer) if answer.get_ref().status() == wanted => Seen::Reached(()),
                    Ok(answer) => Seen::Not(format!("{:?}", answer.get_ref().status())),
                    Err(status) => Seen::Not(format!("error {status}")),
                }
            }
            Err(e) => Seen::Not(format!("cannot connect: {e}")),
        }
    })
    .await;
}

#[tokio::test]
async fn given_a_broker_loading_a_large_log_then_it_is_not_serving_until_loaded() {
    let mut broker = BrokerProcess::start_with(&["--segment-bytes", "1048576"]);
    let address = broker.bootstrap();
    let mut client = raw::connect(&address).await;
    // Many partitions, each with a few segments to recover after a SIGKILL: loading
    // takes long enough (hundreds of ms in a debug build) to be seen.
    let partitions = 64;
    raw::create_topic(&mut client, "big", partitions).await;
    let value = "x".repeat(256 * 1024);
    for partition in 0..partitions {
        for _ in 0..3 {
            let records = raw::records(&[&value, &value]);
            let batch = batch::encode(ProducerInfo::NONE, 0, &records);
            raw::produce(&mut client, "big", partition, batch).await;
        }
    }
    broker.kill();
    let restarted = tokio::task::spawn_blocking(move || {
        broker.restart();
        broker
    });
    await_status(&address, BROKER, ServingStatus::NotServing).await;
    await_status(&address, BROKER, ServingStatus::Serving).await;
    let _broker = restarted.await.expect("restarted");
}

/// A stopped broker and a coordinator bootstrapped from it alone.
fn coordinator_without_its_broker() -> (BrokerProcess, CoordinatorProcess) {
    let mut broker = BrokerProcess::start();
    broker.stop();
    let coordinator = CoordinatorProcess::coordinator(&[
        "--data-dir",
        "{data_dir}",
        "--bootstrap",
        broker.bootstrap().as_str(),
        "--txn-log-partitions",
        "2",
    ]);
    (broker, coordinator)
}

#[tokio::test]
async fn given_a_coordinator_whose_broker_is_down_then_it_serves_once_its_slices_load() {
    let (mut broker, coordinator) = coordinator_without_its_broker();
    // Without its broker it cannot load a slice of the transaction log.
    await_status(
        &coordinator.bootstrap(),
        COORDINATOR,
        ServingStatus::NotServing,
    )
    .await;
    broker.restart();
    await_status(
        &coordinator.bootstrap(),
        COORDINATOR,
        ServingStatus::Serving,
    )
    .await;
}

#[tokio::test]
async fn given_a_broker_whose_lease_is_revoked_then_it_is_not_serving_until_registered_again() {
    let mut cluster = Cluster::start(1, &[]);
    let address = cluster.broker(1).bootstrap();
    await_status(&address, BROKER, ServingStatus::Serving).await;
    let mut etcd = Client::connect([cluster.etcd(0).endpoint()], None)
        .await
        .expect("etcd");
    let key = "/idem/brokers/1";
    let registration = etcd.get(key, None).await.expect("get");
    let broker_lease = registration.kvs().first().expect("registered").lease();
    // Another holder takes the id before the lease goes, so the broker cannot register
    // again until it lets go: NOT_SERVING is a state, not a blip.
    let squatter = etcd.lease_grant(60, None).await.expect("grant").id();
    let value = r#"{"broker_id":1,"address":"127.0.0.1:1","data_dir_id":"someone-else"}"#;
    etcd.put(key, value, Some(PutOptions::new().with_lease(squatter)))
        .await
        .expect("squat");
    etcd.lease_revoke(broker_lease).await.expect("revoke");
    await_status(&address, BROKER, ServingStatus::NotServing).await;
    etcd.lease_revoke(squatter).await.expect("let go");
    await_status(&address, BROKER, ServingStatus::Serving).await;
}

/// A broker restarted out of a partition's ISR serves (its RPCs answer) but has not
/// caught up: `idem.CaughtUp` (the brokers' Kubernetes readiness) reports NOT_SERVING
/// until it is back in every ISR. Made to last: the partition's other replica, its
/// leader, is down too, so there is nothing to catch up from until it returns.
#[tokio::test]
async fn given_a_broker_out_of_an_isr_then_it_serves_but_is_not_caught_up_until_back_in_it() {
    let mut cluster = Cluster::start(2, &["--replica-lag-time-max-ms", "1000"]);
    cluster.create_topic("lagging", 1, 2).await;
    let leader = cluster.leader_of("lagging", 0).await.leader_id;
    let follower = if leader == 1 { 2 } else { 1 };
    let address = cluster.broker(follower).bootstrap();
    await_status(&address, CAUGHT_UP, ServingStatus::Serving).await;
    cluster.kill(follower);
    cluster
        .wait_for(leader, "lagging", 0, |p| p.isr == vec![leader])
        .await;
    cluster.kill(leader);
    cluster.restart(follower);
    await_status(&address, BROKER, ServingStatus::Serving).await;
    await_status(&address, CAUGHT_UP, ServingStatus::NotServing).await;
    cluster.restart(leader);
    await_status(&address, CAUGHT_UP, ServingStatus::Serving).await;
}

/// A coordinator killed and restarted after the other took all of its slices over owns
/// nothing (slices are not handed back), yet it serves: it answers FindCoordinator and
/// refuses the rest with NOT_COORDINATOR. Reporting it NOT_SERVING for good would keep
/// a container health check unhealthy and stall a Kubernetes rolling restart.
#[tokio::test]
async fn given_a_coordinator_restarted_after_the_other_took_every_slice_then_it_serves() {
    let mut cluster = Cluster::start_with_coordinators(1, 2, &[], &[]).await;
    let address = cluster.coordinator(2).bootstrap();
    await_status(&address, COORDINATOR, ServingStatus::Serving).await;
    cluster.kill_coordinator(2);
    let survivor = cluster.coordinator(1).bootstrap();
    let what = "coordinator 1 owns every slice";
    wait_until(PATIENCE, what, || async {
        match idem_tests::txn::owned_partitions(&survivor).await {
            Ok(owned) if owned.len() == idem_tests::cluster::TXN_LOG_PARTITIONS as usize => {
                Seen::Reached(())
            }
            other => Seen::Not(format!("{other:?}")),
        }
    })
    .await;
    cluster.restart_coordinator(2);
    let address = cluster.coordinator(2).bootstrap();
    await_status(&address, COORDINATOR, ServingStatus::Serving).await;
    let owned = idem_tests::txn::owned_partitions(&address)
        .await
        .expect("ListTransactions");
    assert!(
        owned.is_empty(),
        "it serves while owning nothing: {owned:?}"
    );
}

#[tokio::test]
async fn given_a_coordinator_whose_lease_is_revoked_then_it_is_not_serving_until_registered_again()
{
    let mut cluster = Cluster::start_with_coordinators(1, 1, &[], &[]).await;
    let address = cluster.coordinator(1).bootstrap();
    await_status(&address, COORDINATOR, ServingStatus::Serving).await;
    let mut etcd = Client::connect([cluster.etcd(0).endpoint()], None)
        .await
        .expect("etcd");
    let key = "/idem/coordinators/members/1";
    let registration = etcd.get(key, None).await.expect("get");
    let coordinator_lease = registration.kvs().first().expect("registered").lease();
    // Another holder takes the id before the lease goes, so the coordinator cannot
    // register again until it lets go: NOT_SERVING is a state, not a blip.
    let squatter = etcd.lease_grant(60, None).await.expect("grant").id();
    let value = r#"{"id":1,"address":"127.0.0.1:1"}"#;
    etcd.put(key, value, Some(PutOptions::new().with_lease(squatter)))
        .await
        .expect("squat");
    etcd.lease_revoke(coordinator_lease).await.expect("revoke");
    await_status(&address, COORDINATOR, ServingStatus::NotServing).await;
    etcd.lease_revoke(squatter).await.expect("let go");
    await_status(&address, COORDINATOR, ServingStatus::Serving).await;
}

/// `idem health ADDR`, the containers' health check, exits 0 only for a server that
/// answers SERVING, and says why otherwise: a coordinator that cannot load its slices
/// (NOT_SERVING), a broker that is down (unreachable), a service the server does not
/// have.
#[tokio::test]
async fn given_idem_health_then_it_exits_zero_only_for_a_serving_server() {
    let (mut broker, coordinator) = coordinator_without_its_broker();
    let bootstrap = broker.bootstrap();
    let health = |args: &[&str]| {
        let out = idem(&bootstrap, &[&["health"], args].concat());
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).trim().to_string(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    await_status(
        &coordinator.bootstrap(),
        COORDINATOR,
        ServingStatus::NotServing,
    )
    .await;
    let (code, stdout, stderr) = health(&[&coordinator.bootstrap()]);
    assert_eq!(
        (code, stdout.as_str()),
        (Some(1), "NOT_SERVING"),
        "{stderr}"
    );
    assert!(
        stderr.contains("reports NOT_SERVING for the server"),
        "{stderr}"
    );
    let (code, _, stderr) = health(&[&broker.bootstrap(), "--timeout-ms", "500"]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("cannot reach"), "{stderr}");

    broker.restart();
    await_status(
        &coordinator.bootstrap(),
        COORDINATOR,
        ServingStatus::Serving,
    )
    .await;
    for args in [
        vec![coordinator.bootstrap()],
        vec![
            coordinator.bootstrap(),
            "--service".into(),
            COORDINATOR.into(),
        ],
    ] {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = health(&args);
        assert_eq!((code, stdout.as_str()), (Some(0), "SERVING"), "{stderr}");
    }
    await_status(&broker.bootstrap(), BROKER, ServingStatus::Serving).await;
    let (code, stdout, stderr) = health(&[&broker.bootstrap(), "--service", BROKER]);
    assert_eq!((code, stdout.as_str()), (Some(0), "SERVING"), "{stderr}");
    // A broker has no transaction coordinator service.
    let (code, _, stderr) = health(&[&broker.bootstrap(), "--service", COORDINATOR]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("did not answer a health check"), "{stderr}");
}
