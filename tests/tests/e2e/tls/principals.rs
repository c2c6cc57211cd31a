//! Mutual TLS names the principal: under `--authorizer acl`, a client certificate's
//! subject common name is `User:<CN>` for the ACLs, with no token. The nodes reach one
//! another with their own certificate (CN `idem server`, a super user); alice's
//! certificate may write the topic, bob's may not, and his refusal changes nothing.

use idem_client::admin::acls::AclBinding;
use idem_client::credentials::Credentials;
use idem_client::{Admin, Isolation, OffsetSpec, Producer, ProducerConfig};
use idem_tests::sdk::bytes;
use idem_tests::tls::{CertAuthority, TlsFiles};
use idem_tests::Cluster;

const TOPIC: &str = "mtls-acl";

async fn produce_one(
    bootstrap: &str,
    tls: &idem_client::TlsConfig,
    value: &str,
) -> Result<(), String> {
    let producer = Producer::connect(ProducerConfig {
        tls: Some(tls.clone()),
        ..ProducerConfig::new(bootstrap.to_string())
    })
    .await
    .map_err(|e| e.to_string())?;
    let sent = producer.send_to(TOPIC, 0, None, bytes(value)).await;
    let acked = match sent {
        Ok(delivery) => delivery.await.map(|_| ()).map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    producer.close().await;
    acked
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_mutual_tls_and_acls_when_clients_present_certificates_then_their_cn_is_the_principal(
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = CertAuthority::new("idem cluster CA");
    let server = TlsFiles::write(dir.path(), "server", &ca.server(&[]), &ca);
    let flags = server.mutual_tls_acl_flags();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut cluster = Cluster::start(1, &flags);
    let bootstrap = cluster.bootstrap();

    let admin = Admin::connect_with(
        &bootstrap,
        Credentials::none(),
        Some(ca.client_config("admin")),
    )
    .await
    .expect("the admin's certificate connects");
    admin
        .create_topic(TOPIC, 1, 1)
        .await
        .expect("a super user creates");
    let allowed = AclBinding {
        principal: "User:alice".into(),
        resource_type: "topic".into(),
        resource_name: TOPIC.into(),
        pattern_type: "literal".into(),
        operation: "write".into(),
        permission: "allow".into(),
    };
    admin
        .create_acls(std::slice::from_ref(&allowed))
        .await
        .expect("the admin adds alice's ACL");

    produce_one(&bootstrap, &ca.client_config("alice"), "from alice")
        .await
        .expect("alice's certificate may write");
    let end = || async {
        admin
            .list_offsets(TOPIC, 0, OffsetSpec::Latest, Isolation::ReadUncommitted)
            .await
            .expect("log end")
    };
    assert_eq!(end().await, 1);
    let refused = produce_one(&bootstrap, &ca.client_config("bob"), "from bob")
        .await
        .expect_err("bob's certificate may not write");
    // Bob holds no ACL: his producer is refused its producer id (idempotent write,
    // on the cluster or on some topic), naming him.
    assert!(
        refused.contains("User:bob is not authorized to write"),
        "the refusal names bob's certificate: {refused}"
    );
    assert_eq!(end().await, 1, "bob's refusal wrote nothing");
    cluster.stop_all();
}
