//! A SIGHUP rotates the certificate a broker dials its peers with, not only the one its
//! listeners present: after every member of a mutual-TLS cluster has moved to a new CA
//! (first trusting both, then only the new one) without a restart, a follower that
//! must connect to a new leader presents its new certificate and is accepted. Were it
//! still presenting the old one, the new leader would refuse the handshake, the
//! follower would never rejoin the ISR, and `min.insync.replicas=2` would refuse every
//! produce.

use std::collections::BTreeMap;
use std::time::Duration;

use idem_client::credentials::Credentials;
use idem_client::{Admin, NewTopic, Producer, ProducerConfig};
use idem_tests::scrape::{scrape, value};
use idem_tests::sdk::bytes;
use idem_tests::tls::{CertAuthority, TlsFiles};
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::Cluster;

const TOPIC: &str = "tls-rotated";

/// The partition's leader and ISR as `admin` sees them.
async fn leader_and_isr(admin: &Admin) -> Option<(i32, Vec<i32>)> {
    let metadata = admin.metadata(&[TOPIC]).await.ok()?;
    let partition = metadata.topic(TOPIC)?.partitions.first()?.clone();
    Some((partition.leader_id, partition.isr))
}

/// Waits until every broker's metrics count `times` successful reloads.
async fn wait_for_reloads(metrics: &BTreeMap<i32, String>, times: f64) {
    for (id, addr) in metrics {
        wait_until(
            PATIENCE,
            &format!("broker {id} reloaded {times} times"),
            || async {
                let done = scrape(addr)
                    .ok()
                    .and_then(|text| value(&text, "idem_tls_reloads_total", &[("result", "ok")]));
                seen_if(done, done == Some(times))
            },
        )
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_mtls_cluster_rotated_to_a_new_ca_on_sighup_then_a_follower_dials_the_new_leader_with_its_new_certificate(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let old_ca = CertAuthority::new("old CA");
    let files = TlsFiles::write(dir.path(), "server", &old_ca.server(&[]), &old_ca);
    let mut flags = files.server_flags("required");
    flags.extend(["--replica-lag-time-max-ms".to_string(), "1000".to_string()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let metrics: BTreeMap<i32, String> = (1..=3)
        .map(|id| {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe a free port");
            (id, probe.local_addr().expect("probed address").to_string())
        })
        .collect();
    let own = metrics
        .iter()
        .map(|(id, addr)| (*id, vec!["--metrics-listen".to_string(), addr.clone()]))
        .collect();
    let mut cluster = Cluster::start_each(3, &flags, &own);
    let bootstrap = cluster.bootstrap();

    let admin = Admin::connect_with(
        &bootstrap,
        Credentials::none(),
        Some(old_ca.client_config("alice")),
    )
    .await
    .expect("admin connects with the old CA");
    admin
        .create_topic_with(
            NewTopic::new(TOPIC, 1)
                .replication_factor(3)
                .config("min.insync.replicas", "2"),
        )
        .await
        .expect("create topic");
    let (leader, _) = wait_until(PATIENCE, "all three replicas in the ISR", || async {
        let seen = leader_and_isr(&admin).await;
        let full = seen.as_ref().is_some_and(|(_, isr)| isr.len() == 3);
        seen_if(seen, full)
    })
    .await
    .0
    .expect("metadata");

    // The rotation, as an operator does it without downtime: new certificates while
    // trusting both CAs, then only the new CA; a SIGHUP to every broker each time.
    let new_ca = CertAuthority::new("new CA");
    let issued = new_ca.server(&[]);
    files.replace(
        &issued,
        &format!("{}{}", old_ca.cert_pem(), new_ca.cert_pem()),
    );
    for id in cluster.ids() {
        cluster.broker(id).hang_up();
    }
    wait_for_reloads(&metrics, 1.0).await;
    files.replace(&issued, new_ca.cert_pem());
    for id in cluster.ids() {
        cluster.broker(id).hang_up();
    }
    wait_for_reloads(&metrics, 2.0).await;

    // The leader goes: one survivor leads, the other must dial it, a new connection,
    // with the certificate it presents now.
    cluster.kill(leader);
    let admin = Admin::connect_with(
        &bootstrap,
        Credentials::none(),
        Some(new_ca.client_config("carol")),
    )
    .await
    .expect("admin connects with the new CA");
    let producer = Producer::connect(ProducerConfig {
        tls: Some(new_ca.client_config("carol")),
        request_timeout: Duration::from_secs(5),
        delivery_timeout: Duration::from_secs(60),
        ..ProducerConfig::new(bootstrap.clone())
    })
    .await
    .expect("producer connects with the new CA");
    // acks=all under min.insync.replicas=2: answered only once the follower is back in
    // the ISR of the new leader, fetching over its new connection.
    let acked = producer
        .send_to(TOPIC, 0, None, bytes("after-rotation"))
        .await
        .expect("send")
        .await
        .expect("acked by two in-sync replicas");
    let (new_leader, isr) = leader_and_isr(&admin).await.expect("metadata");
    assert_ne!(new_leader, leader);
    assert_eq!(isr.len(), 2, "leader and follower in sync: {isr:?}");
    assert!(!isr.contains(&leader), "{isr:?}");
    assert!(acked.offset >= 0);
    for id in cluster.ids().into_iter().filter(|id| *id != leader) {
        assert!(
            !cluster.broker(id).log().contains("TLS reload refused"),
            "broker {id}: {}",
            cluster.broker(id).log()
        );
    }
}
