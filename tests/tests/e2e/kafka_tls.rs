//! The Kafka listener of a TLS broker speaks TLS only (`security.protocol=SSL`): Kafka
//! clients trusting the broker's CA produce and read every record once, in order, and a
//! plaintext client is closed on without an answer while the others are served. Under
//! mutual TLS a connection is its client certificate's principal (`User:<CN>`) for the
//! ACLs, as on gRPC: who holds a Write ACL writes, who holds none is refused
//! (TOPIC_AUTHORIZATION_FAILED) and writes nothing, and a client without a
//! certificate cannot connect. A SIGHUP rotates the listener's certificate with the
//! gRPC listeners'.

use std::path::Path;

use idem_client::admin::acls::AclBinding;
use idem_client::credentials::Credentials;
use idem_client::{Admin, Isolation, OffsetSpec, TlsConfig};
use idem_tests::cluster::{as_strs, Cluster};
use idem_tests::kafka_clients::{kcat, kcat_bin, kcat_read_with, python, run};
use idem_tests::scrape::{scrape, value};
use idem_tests::tls::{CertAuthority, TlsFiles};
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::BrokerProcess;
use serde_json::Value;

use crate::kafka::{api_versions_v0, exchange, KAFKA_LISTEN};

/// librdkafka settings (`key=value`) for TLS trusting `ca`, presenting `identity`'s
/// certificate when given.
pub(crate) fn ssl_settings(ca: &Path, identity: Option<&TlsFiles>) -> Vec<String> {
    let mut settings = vec![
        "security.protocol=SSL".to_string(),
        format!("ssl.ca.location={}", ca.display()),
    ];
    if let Some(identity) = identity {
        settings.push(format!(
            "ssl.certificate.location={}",
            identity.cert.display()
        ));
        settings.push(format!("ssl.key.location={}", identity.key.display()));
    }
    settings
}

/// The same settings as kcat's `-X key=value` arguments.
fn kcat_flags(settings: &[String]) -> Vec<String> {
    settings
        .iter()
        .flat_map(|setting| ["-X".to_string(), setting.clone()])
        .collect()
}

/// `(offset, value)` of every record of `topic`/0 from the start, read by kcat over TLS.
pub(crate) async fn kcat_read_tls(
    bootstrap: &str,
    topic: &str,
    settings: &[String],
) -> Vec<(i64, String)> {
    kcat_read_with(bootstrap, topic, 0, settings).await
}

/// Whether kcat lists `bootstrap`'s metadata with `settings` (3 s to get it).
async fn kcat_lists(bootstrap: &str, settings: &[String]) -> bool {
    let mut args: Vec<String> = ["-b", bootstrap, "-L", "-m", "3"]
        .map(String::from)
        .to_vec();
    args.extend(kcat_flags(settings));
    run(kcat_bin(), &as_strs(&args), "").await.success
}

/// `produce.py`: `count` records ("0" ..) to `topic`/0 with `settings`; its reports.
async fn produce(bootstrap: &str, topic: &str, count: usize, settings: &[String]) -> Value {
    let count = count.to_string();
    let mut args = vec![bootstrap.to_string(), topic.to_string(), "0".into(), count];
    args.extend(settings.iter().cloned());
    python("produce.py", &as_strs(&args)).await
}

/// The delivery reports of `produce.py`, as `(value, offset, error)` (no offset for a
/// record not written).
fn reports(produced: &Value) -> Vec<(String, Option<i64>, Option<String>)> {
    assert_eq!(produced["undelivered"], 0, "{produced}");
    produced["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .map(|report| {
            (
                report["value"].as_str().expect("value").to_string(),
                // librdkafka reports a refused record at offset -1 (or none).
                report["offset"].as_i64().filter(|offset| *offset >= 0),
                report["error"].as_str().map(str::to_string),
            )
        })
        .collect()
}

#[tokio::test]
async fn given_a_tls_broker_when_kafka_clients_speak_ssl_then_they_are_served_and_plaintext_is_closed(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = CertAuthority::new("idem kafka CA");
    let server = TlsFiles::write(dir.path(), "server", &ca.server(&[]), &ca);
    let mut flags = server.server_flags("none");
    flags.extend(KAFKA_LISTEN.map(String::from));
    let broker = BrokerProcess::start_with(&as_strs(&flags));
    let bootstrap = broker.kafka_bootstrap();
    let admin = Admin::connect_with(
        &broker.bootstrap(),
        Credentials::none(),
        Some(TlsConfig::new(ca.cert_pem())),
    )
    .await
    .expect("admin connects over TLS");
    admin
        .create_topic("tls-orders", 1, 1)
        .await
        .expect("create topic");
    let ssl = ssl_settings(&server.ca, None);

    // An idempotent producer over TLS: every record acked once, at consecutive offsets.
    let mut settings = ssl.clone();
    settings.push("enable.idempotence=true".into());
    // Undelivered within 10 s is a failure: no waiting out produce.py's 60 s flush.
    settings.push("message.timeout.ms=10000".into());
    let produced = reports(&produce(&bootstrap, "tls-orders", 200, &settings).await);
    let expected: Vec<(i64, String)> = (0..200).map(|i| (i, i.to_string())).collect();
    let acked: Vec<(i64, String)> = produced
        .iter()
        .map(|(value, offset, error)| {
            assert_eq!(error, &None, "record {value}");
            (offset.expect("an acked record's offset"), value.clone())
        })
        .collect();
    assert_eq!(acked, expected, "acked in order at consecutive offsets");

    // kcat lists the broker and the topic over TLS.
    let mut args: Vec<String> = ["-b", bootstrap.as_str(), "-L", "-J"]
        .map(String::from)
        .to_vec();
    args.extend(kcat_flags(&ssl));
    let out = kcat(&as_strs(&args), "").await;
    let metadata: Value = serde_json::from_str(out.trim()).expect("kcat -J prints JSON");
    assert_eq!(
        metadata["brokers"][0]["name"],
        bootstrap.as_str(),
        "{metadata}"
    );
    let topics = metadata["topics"].as_array().expect("topics");
    assert!(
        topics.iter().any(|t| t["topic"] == "tls-orders"),
        "{metadata}"
    );

    // A plaintext Kafka client gets no Kafka answer: the handshake fails and the
    // connection closes (at most a TLS alert record, content type 21, comes back).
    let answer = exchange(&bootstrap, &api_versions_v0(0, 7)).await;
    assert!(
        answer.is_empty() || answer[0] == 21,
        "a plaintext ApiVersions got {answer:?}"
    );

    // The broker serves TLS clients on: every record read back once, in order.
    assert_eq!(
        kcat_read_tls(&bootstrap, "tls-orders", &ssl).await,
        expected
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_mutual_tls_and_acls_when_kafka_clients_present_certificates_then_their_cn_is_the_principal(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = CertAuthority::new("idem kafka CA");
    let server = TlsFiles::write(dir.path(), "server", &ca.server(&[]), &ca);
    let mut flags = server.mutual_tls_acl_flags();
    flags.extend(KAFKA_LISTEN.map(String::from));
    let mut cluster = Cluster::start(1, &as_strs(&flags));
    let bootstrap = cluster.broker(1).kafka_bootstrap();
    let admin = Admin::connect_with(
        &cluster.bootstrap(),
        Credentials::none(),
        Some(ca.client_config("admin")),
    )
    .await
    .expect("the admin's certificate connects");
    admin
        .create_topic("mtls-orders", 1, 1)
        .await
        .expect("a super user creates");
    let acl = |principal: &str, operation: &str| AclBinding {
        principal: principal.into(),
        resource_type: "topic".into(),
        resource_name: "mtls-orders".into(),
        pattern_type: "literal".into(),
        operation: operation.into(),
        permission: "allow".into(),
    };
    // Carol may see the topic but not write it: her refusal comes from Produce itself,
    // not from Metadata hiding the topic (as bob's, who holds nothing, does).
    admin
        .create_acls(&[acl("User:alice", "write"), acl("User:carol", "describe")])
        .await
        .expect("the admin adds the ACLs");
    let identity = |name: &str| TlsFiles::write(dir.path(), name, &ca.client(name), &ca);
    let as_user = |name: &str| {
        let mut settings = ssl_settings(&server.ca, Some(&identity(name)));
        // A refusal is final: no retrying until the default 300 s delivery timeout.
        settings.push("message.timeout.ms=10000".into());
        settings
    };

    let alice = reports(&produce(&bootstrap, "mtls-orders", 5, &as_user("alice")).await);
    let acked: Vec<(Option<i64>, Option<String>)> = alice
        .iter()
        .map(|(_, offset, error)| (*offset, error.clone()))
        .collect();
    assert_eq!(
        acked,
        (0..5)
            .map(|offset| (Some(offset), None))
            .collect::<Vec<_>>(),
        "alice's certificate may write"
    );

    for refused in ["bob", "carol"] {
        let denied = reports(&produce(&bootstrap, "mtls-orders", 3, &as_user(refused)).await);
        assert_eq!(denied.len(), 3, "{refused}: {denied:?}");
        // What was written is read back below: a refused record's reported offset is
        // the refusal's base offset, not a place in the log.
        for (value, _, error) in denied {
            let error = error.unwrap_or_default();
            assert!(
                error.contains("TOPIC_AUTHORIZATION_FAILED") && error.contains("val=29"),
                "{refused}'s record {value}: {error}"
            );
        }
    }

    // Nothing but alice's records was written.
    let end = admin
        .list_offsets(
            "mtls-orders",
            0,
            OffsetSpec::Latest,
            Isolation::ReadUncommitted,
        )
        .await
        .expect("log end");
    assert_eq!(end, 5);
    let read = kcat_read_tls(&bootstrap, "mtls-orders", &as_user("admin")).await;
    let expected: Vec<(i64, String)> = (0..5).map(|i| (i, i.to_string())).collect();
    assert_eq!(read, expected);

    // Without a client certificate the handshake is refused: no metadata.
    assert!(
        !kcat_lists(&bootstrap, &ssl_settings(&server.ca, None)).await,
        "a client without a certificate listed metadata"
    );
    cluster.stop_all();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_tls_broker_when_its_files_are_rotated_and_it_gets_sighup_then_new_kafka_connections_use_them(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let old_ca = CertAuthority::new("old CA");
    let files = TlsFiles::write(dir.path(), "broker", &old_ca.server(&[]), &old_ca);
    let old_ca_file = dir.path().join("old-ca.crt");
    std::fs::write(&old_ca_file, old_ca.cert_pem()).expect("write the old CA");
    let metrics = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe a free port");
        probe.local_addr().expect("probed address").to_string()
    };
    let mut flags = files.server_flags("none");
    flags.extend(["--metrics-listen".to_string(), metrics.clone()]);
    flags.extend(KAFKA_LISTEN.map(String::from));
    let broker = BrokerProcess::start_with(&as_strs(&flags));
    let bootstrap = broker.kafka_bootstrap();
    assert!(kcat_lists(&bootstrap, &ssl_settings(&old_ca_file, None)).await);

    let new_ca = CertAuthority::new("new CA");
    files.replace(&new_ca.server(&[]), new_ca.cert_pem());
    broker.hang_up();
    wait_until(PATIENCE, "one reload counted", || async {
        let count = scrape(&metrics)
            .ok()
            .and_then(|text| value(&text, "idem_tls_reloads_total", &[("result", "ok")]));
        seen_if(count, count == Some(1.0))
    })
    .await;
    // `files.ca` now holds the new CA only.
    assert!(
        kcat_lists(&bootstrap, &ssl_settings(&files.ca, None)).await,
        "a Kafka client trusting the new CA is served after the reload"
    );
    assert!(
        !kcat_lists(&bootstrap, &ssl_settings(&old_ca_file, None)).await,
        "a Kafka client trusting only the old CA still got metadata"
    );
}
