//! TLS on every listener: a TLS-only cluster that requires client certificates serves
//! clients presenting a certificate of its CA (idempotent and transactional produce,
//! read-committed consume), replicates and runs transactions over mutual TLS between
//! its own members, and refuses every other client with an error that says why, while
//! it goes on serving; its certificate rotates on SIGHUP without a restart.

mod peer_certs;
mod peer_rotation;
mod principals;

use std::time::Duration;

use idem_client::credentials::Credentials;
use idem_client::{
    Admin, ClientError, Consumer, ConsumerConfig, Isolation, Producer, ProducerConfig,
    ProducerRecord, TlsConfig, TransactionalConfig, TransactionalProducer,
};
use idem_tests::cli::idem;
use idem_tests::scrape::{scrape, value};
use idem_tests::sdk::bytes;
use idem_tests::tls::{CertAuthority, TlsFiles};
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::{BrokerProcess, Cluster};

const ORDERS: &str = "tls-orders";

/// Every value of `topic`/0 from the log start, read committed, once `count` are there.
async fn read_values(bootstrap: &str, tls: &TlsConfig, topic: &str, count: usize) -> Vec<String> {
    let config = ConsumerConfig {
        isolation: Isolation::ReadCommitted,
        max_wait: Duration::from_millis(50),
        tls: Some(tls.clone()),
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::connect(bootstrap, config)
        .await
        .expect("consumer connects over mTLS");
    consumer.assign(vec![(topic.to_string(), 0)]);
    consumer.seek_to_beginning(topic, 0).expect("seek");
    let mut values = Vec::new();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while values.len() < count && tokio::time::Instant::now() < deadline {
        for record in consumer.poll(Duration::from_secs(1)).await.expect("poll") {
            values.push(
                String::from_utf8_lossy(record.value.as_deref().unwrap_or_default()).into_owned(),
            );
        }
    }
    values
}

/// Connects an admin client with `tls` and says how it was refused.
async fn refusal(bootstrap: &str, tls: Option<TlsConfig>) -> ClientError {
    match Admin::connect_with(bootstrap, Credentials::none(), tls).await {
        Err(e) => e,
        Ok(admin) => admin
            .metadata(&[ORDERS])
            .await
            .expect_err("a refused client got metadata"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_mutual_tls_cluster_when_clients_present_its_certificates_then_everything_works_and_others_are_refused(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = CertAuthority::new("idem cluster CA");
    let server = TlsFiles::write(dir.path(), "server", &ca.server(&[]), &ca);
    let flags = server.server_flags("required");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start(2, &flags);
    cluster.spawn_coordinators(1, &flags);
    let bootstrap = cluster.bootstrap();
    let tls = ca.client_config("alice");

    // Replication between the brokers runs over mTLS: the ISR fills up.
    let admin = Admin::connect_with(&bootstrap, Credentials::none(), Some(tls.clone()))
        .await
        .expect("admin connects over mTLS");
    admin
        .create_topic(ORDERS, 1, 2)
        .await
        .expect("create topic");
    wait_until(PATIENCE, "both replicas in the ISR", || async {
        let isr = admin
            .metadata(&[ORDERS])
            .await
            .ok()
            .and_then(|m| m.topic(ORDERS).map(|t| t.partitions.clone()))
            .and_then(|p| p.first().map(|p| p.isr.clone()))
            .unwrap_or_default();
        let full = isr.len() == 2;
        seen_if(isr, full)
    })
    .await;

    // Idempotent produce, then consume: every record once, in order.
    let producer = Producer::connect(ProducerConfig {
        tls: Some(tls.clone()),
        ..ProducerConfig::new(bootstrap.clone())
    })
    .await
    .expect("idempotent producer connects over mTLS");
    for i in 0..10 {
        producer
            .send_to(ORDERS, 0, None, bytes(&format!("plain-{i}")))
            .await
            .expect("send")
            .await
            .expect("acked");
    }
    producer.close().await;

    // A transaction: the coordinator reaches the brokers over mTLS to write its log and
    // the commit markers.
    let txn = TransactionalProducer::connect(TransactionalConfig {
        tls: Some(tls.clone()),
        request_timeout: Duration::from_secs(5),
        delivery_timeout: Duration::from_secs(60),
        ..TransactionalConfig::new(bootstrap.clone(), "tls-checkout")
    })
    .await
    .expect("transactional producer connects over mTLS");
    txn.init_transactions().await.expect("init transactions");
    txn.begin().expect("begin");
    for i in 0..5 {
        txn.send(ProducerRecord::new(ORDERS, format!("txn-{i}")).partition(0))
            .await
            .expect("send")
            .await
            .expect("acked");
    }
    txn.commit().await.expect("commit");
    txn.close().await;

    let expected: Vec<String> = (0..10)
        .map(|i| format!("plain-{i}"))
        .chain((0..5).map(|i| format!("txn-{i}")))
        .collect();
    assert_eq!(read_values(&bootstrap, &tls, ORDERS, 15).await, expected);

    // Refused: plaintext, no client certificate, a certificate of another CA, trusting
    // another CA. Each says it is a TLS matter.
    let other = CertAuthority::new("another CA");
    // (what, client TLS, what the error's hint must say)
    let refusals = [
        ("plaintext", None, "may require TLS"),
        (
            "no client certificate",
            Some(TlsConfig::new(ca.cert_pem())),
            "client certificate",
        ),
        (
            "client certificate of another CA",
            Some({
                let issued = other.client("mallory");
                TlsConfig::new(ca.cert_pem()).with_client_identity(issued.cert_pem, issued.key_pem)
            }),
            "client certificate",
        ),
        (
            "trusting another CA",
            Some(other.client_config("bob")),
            "not signed by the given CA",
        ),
    ];
    for (what, tls, says) in refusals {
        let error = refusal(&bootstrap, tls).await;
        let text = error.to_string();
        assert!(
            matches!(&error, ClientError::Tls { hint, .. } if hint.contains(says)),
            "{what}: {error:?}"
        );
        eprintln!("{what}: {text}");
    }

    // `idem health`, what container health checks run, over mTLS to a broker and to the
    // coordinator; refused in plaintext. The CLI also topic-lists over mTLS.
    let alice = ca.client("alice");
    let alice_files = TlsFiles::write(dir.path(), "alice", &alice, &ca);
    let cli_tls = [
        "--tls-ca".to_string(),
        alice_files.ca.display().to_string(),
        "--tls-cert".to_string(),
        alice_files.cert.display().to_string(),
        "--tls-key".to_string(),
        alice_files.key.display().to_string(),
    ];
    let cli_tls: Vec<&str> = cli_tls.iter().map(String::as_str).collect();
    let coordinator = cluster.coordinator(1).bootstrap();
    for address in [bootstrap.as_str(), coordinator.as_str()] {
        let out = idem(&bootstrap, &[&cli_tls[..], &["health", address]].concat());
        assert!(
            out.status.success(),
            "idem health {address} over mTLS: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let plaintext = idem(&bootstrap, &["health", address, "--timeout-ms", "1000"]);
        assert!(
            !plaintext.status.success(),
            "plaintext health check of {address} passed"
        );
    }
    let listed = idem(&bootstrap, &[&cli_tls[..], &["topic", "list"]].concat());
    assert!(
        String::from_utf8_lossy(&listed.stdout).contains(ORDERS),
        "idem topic list over mTLS: {}",
        String::from_utf8_lossy(&listed.stderr)
    );

    // The cluster went on serving the right client.
    assert_eq!(
        read_values(&bootstrap, &tls, ORDERS, 15).await.len(),
        15,
        "served after the refusals"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_tls_broker_when_its_files_are_rotated_and_it_gets_sighup_then_new_connections_use_them(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let old_ca = CertAuthority::new("old CA");
    let files = TlsFiles::write(dir.path(), "broker", &old_ca.server(&[]), &old_ca);
    let metrics = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe a free port");
        probe.local_addr().expect("probed address").to_string()
    };
    let mut flags = files.server_flags("required");
    flags.extend(["--metrics-listen".to_string(), metrics.clone()]);
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let broker = BrokerProcess::start_with(&flags);
    let bootstrap = broker.bootstrap();
    let pid = broker.pid();
    Admin::connect_with(
        &bootstrap,
        Credentials::none(),
        Some(old_ca.client_config("alice")),
    )
    .await
    .expect("the old CA's client connects");
    let reloads = |result: &'static str| {
        let metrics = metrics.clone();
        async move {
            wait_until(
                PATIENCE,
                &format!("one {result} reload counted"),
                || async {
                    let count = scrape(&metrics).ok().and_then(|text| {
                        value(&text, "idem_tls_reloads_total", &[("result", result)])
                    });
                    seen_if(count, count == Some(1.0))
                },
            )
            .await;
        }
    };

    // A bad certificate file and a SIGHUP: refused, the old files stay in use.
    std::fs::write(&files.cert, "not a certificate").expect("write bad cert");
    broker.hang_up();
    reloads("error").await;
    assert!(
        broker.log().contains("TLS reload refused"),
        "{}",
        broker.log()
    );
    Admin::connect_with(
        &bootstrap,
        Credentials::none(),
        Some(old_ca.client_config("alice")),
    )
    .await
    .expect("still served with the old certificate");

    // Rotation to a new CA: after SIGHUP, a client trusting only the new CA gets in.
    let new_ca = CertAuthority::new("new CA");
    files.replace(&new_ca.server(&[]), new_ca.cert_pem());
    broker.hang_up();
    reloads("ok").await;
    Admin::connect_with(
        &bootstrap,
        Credentials::none(),
        Some(new_ca.client_config("carol")),
    )
    .await
    .expect("the new CA's client is served after the reload");
    assert_eq!(broker.pid(), pid, "the same process");
    assert!(broker.is_running(), "SIGHUP did not stop the broker");
    assert!(
        matches!(
            refusal(&bootstrap, Some(old_ca.client_config("alice"))).await,
            ClientError::Tls { .. }
        ),
        "the old CA's client is refused after the rotation"
    );
}
