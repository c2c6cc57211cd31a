//! Kafka clients without certificates authenticate with SASL (PLAIN, OAUTHBEARER) using
//! an idem token of `--auth-token-file`, and are then that token's principal for the
//! ACLs, as a gRPC client presenting `authorization: Bearer <token>` is: alice's token
//! writes where alice may, bob's is refused and writes nothing, a wrong password is an
//! authentication failure that leaves the broker serving everyone else. Plaintext
//! (`SASL_PLAINTEXT`) and TLS (`SASL_SSL`) listeners alike; under mutual TLS the token
//! overrides the certificate's principal. Only real clients (confluent-kafka, kcat)
//! speak Kafka here.

use idem_client::admin::acls::AclBinding;
use idem_client::credentials::Credentials;
use idem_client::{Admin, Isolation, OffsetSpec, TlsConfig};
use idem_tests::cluster::{as_strs, Cluster};
use idem_tests::kafka_clients::{kcat, kcat_read_with, python};
use idem_tests::tls::{CertAuthority, TlsFiles};
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::BrokerProcess;
use serde_json::Value;

use crate::kafka::KAFKA_LISTEN;

/// The token file every test's broker checks: the operator, the broker itself, and two
/// users.
const TOKENS: &str = "admin t-admin\nbroker t-broker\nalice t-alice\nbob t-bob\n";

/// The token file and the broker's own token, in a directory kept while the test runs.
struct TokenFiles {
    _dir: tempfile::TempDir,
    tokens: String,
    own: String,
}

impl TokenFiles {
    fn write() -> TokenFiles {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path.display().to_string()
        };
        let tokens = write("tokens", TOKENS);
        let own = write("broker-token", "t-broker\n");
        TokenFiles {
            _dir: dir,
            tokens,
            own,
        }
    }

    /// A broker's flags: the Kafka listener and the token file, authorization off.
    fn flags(&self) -> Vec<String> {
        let mut flags: Vec<String> = KAFKA_LISTEN.map(String::from).to_vec();
        flags.extend(["--auth-token-file".to_string(), self.tokens.clone()]);
        flags
    }

    /// A broker with [`TokenFiles::flags`], `topic` created on it (one partition), an
    /// admin client of it (no credential: authorization is off) and its Kafka address.
    async fn broker_with_topic(&self, topic: &str) -> (BrokerProcess, Admin, String) {
        let broker = BrokerProcess::start_with(&as_strs(&self.flags()));
        let admin = Admin::connect_with(&broker.bootstrap(), Credentials::none(), None)
            .await
            .expect("admin connects");
        admin.create_topic(topic, 1, 1).await.expect("create topic");
        let kafka = broker.kafka_bootstrap();
        (broker, admin, kafka)
    }

    /// [`TokenFiles::flags`] under ACLs, the operator and the broker super users.
    fn acl_flags(&self) -> Vec<String> {
        let mut flags = self.flags();
        flags.extend(
            [
                "--authorizer",
                "acl",
                "--super-users",
                "User:broker,User:admin",
                "--auth-token",
                &self.own,
            ]
            .map(String::from),
        );
        flags
    }
}

/// librdkafka settings for SASL/PLAIN over `protocol` as `username` with `token`.
fn sasl_plain(protocol: &str, username: &str, token: &str) -> Vec<String> {
    vec![
        format!("security.protocol={protocol}"),
        "sasl.mechanism=PLAIN".to_string(),
        format!("sasl.username={username}"),
        format!("sasl.password={token}"),
    ]
}

/// `produce.py`: `count` records ("0" ..) to `topic`/0 with `settings`.
async fn produce(bootstrap: &str, topic: &str, count: usize, settings: &[String]) -> Value {
    let count = count.to_string();
    let mut args = vec![bootstrap.to_string(), topic.to_string(), "0".into(), count];
    // A refusal is final: no retrying until the default 300 s delivery timeout
    // (`settings` may say otherwise: the last value of a key wins).
    args.push("message.timeout.ms=10000".into());
    args.extend(settings.iter().cloned());
    python("produce.py", &as_strs(&args)).await
}

/// `(offset, error)` of each delivery report of `produce.py`, in report order (no
/// offset for a record not written).
fn outcomes(produced: &Value) -> Vec<(Option<i64>, Option<String>)> {
    produced["reports"]
        .as_array()
        .expect("reports")
        .iter()
        .map(|report| {
            (
                // librdkafka reports a refused record at offset -1 (or none).
                report["offset"].as_i64().filter(|offset| *offset >= 0),
                report["error"].as_str().map(str::to_string),
            )
        })
        .collect()
}

/// What `count` records acked in order from offset 0 report.
fn acked_in_order(count: i64) -> Vec<(Option<i64>, Option<String>)> {
    (0..count).map(|offset| (Some(offset), None)).collect()
}

/// The client-level errors `produce.py` saw (librdkafka's error callback).
fn client_errors(produced: &Value) -> Vec<String> {
    produced["errors"]
        .as_array()
        .expect("errors")
        .iter()
        .filter_map(|error| error.as_str().map(str::to_string))
        .collect()
}

/// `("0", 0), ("1", 1), ...`: `count` records as produce.py writes them, read back.
fn records(count: i64) -> Vec<(i64, String)> {
    (0..count).map(|i| (i, i.to_string())).collect()
}

/// The log end of `topic`/0, asked by `admin` over gRPC.
async fn log_end(admin: &Admin, topic: &str) -> i64 {
    admin
        .list_offsets(topic, 0, OffsetSpec::Latest, Isolation::ReadUncommitted)
        .await
        .expect("log end")
}

/// The same settings as kcat's `-X key=value` arguments after `args`.
fn kcat_args(args: &[&str], settings: &[String]) -> Vec<String> {
    let mut all: Vec<String> = args.iter().map(|arg| arg.to_string()).collect();
    for setting in settings {
        all.extend(["-X".to_string(), setting.clone()]);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_acls_when_kafka_clients_authenticate_with_sasl_plain_then_the_tokens_principal_is_authorized(
) {
    let files = TokenFiles::write();
    let cluster = Cluster::start(1, &as_strs(&files.acl_flags()));
    let admin = crate::acls::admin_of(&cluster).await;
    admin
        .create_topic("sasl-orders", 1, 1)
        .await
        .expect("topic created by the operator");
    let allow = |operation: &str| AclBinding {
        principal: "User:alice".into(),
        resource_type: "topic".into(),
        resource_name: "sasl-orders".into(),
        pattern_type: "literal".into(),
        operation: operation.into(),
        permission: "allow".into(),
    };
    // Nothing for User:ANONYMOUS or User:bob.
    admin
        .create_acls(&[allow("write"), allow("read")])
        .await
        .expect("ACLs stored");
    let kafka = cluster.broker(1).kafka_bootstrap();
    let alice = sasl_plain("SASL_PLAINTEXT", "alice", "t-alice");
    // ACLs reach the broker through an etcd watch: wait until alice sees the topic.
    wait_until(PATIENCE, "the broker applies alice's ACLs", || async {
        let args = kcat_args(&["-b", &kafka, "-L", "-J"], &alice);
        let listed = kcat(&as_strs(&args), "").await;
        let listed: Value = serde_json::from_str(listed.trim()).expect("kcat -J prints JSON");
        match listed["topics"].as_array().map(Vec::len) {
            Some(1) => Seen::Reached(()),
            _ => Seen::Not(listed.to_string()),
        }
    })
    .await;

    // Alice's idempotent producer: every record acked once, at consecutive offsets.
    let mut idempotent = alice.clone();
    idempotent.push("enable.idempotence=true".into());
    let produced = produce(&kafka, "sasl-orders", 50, &idempotent).await;
    assert_eq!(produced["undelivered"], 0, "{produced}");
    assert_eq!(outcomes(&produced), acked_in_order(50), "{produced}");

    // Bob authenticates (his token is good) but holds no ACL: refused, as is a client
    // that never starts SASL (User:ANONYMOUS holds none either).
    let bob = sasl_plain("SASL_PLAINTEXT", "bob", "t-bob");
    let anonymous = Vec::new();
    for (who, settings) in [("bob", bob), ("anonymous", anonymous)] {
        let refused = produce(&kafka, "sasl-orders", 3, &settings).await;
        let outcomes = outcomes(&refused);
        assert_eq!(outcomes.len(), 3, "{who}: {refused}");
        for (_, error) in outcomes {
            let error = error.unwrap_or_default();
            assert!(
                error.contains("TOPIC_AUTHORIZATION_FAILED") && error.contains("val=29"),
                "{who}: {error}"
            );
        }
    }

    // Only alice's records are in the log, once each, in order.
    assert_eq!(log_end(&admin, "sasl-orders").await, 50);
    assert_eq!(
        kcat_read_with(&kafka, "sasl-orders", 0, &alice).await,
        records(50)
    );
}

#[tokio::test]
async fn given_a_wrong_password_when_a_kafka_client_authenticates_then_it_fails_and_others_are_served(
) {
    let files = TokenFiles::write();
    let (_broker, admin, kafka) = files.broker_with_topic("sasl-guarded").await;

    // An unknown token, and alice's token under bob's name: authentication fails,
    // librdkafka says why (never quoting the password), nothing is delivered.
    for (username, token, why) in [
        ("alice", "t-wrong", "invalid credentials"),
        ("bob", "t-alice", "is not the name of the token's principal"),
    ] {
        let mut settings = sasl_plain("SASL_PLAINTEXT", username, token);
        // Nothing will be delivered: give up after 3 s rather than 10.
        settings.push("message.timeout.ms=3000".into());
        let refused = produce(&kafka, "sasl-guarded", 3, &settings).await;
        let errors = client_errors(&refused);
        assert!(
            errors.iter().any(|error| error
                .contains("SASL authentication error: Authentication failed")
                && error.contains(why)),
            "{username}/{token}: {refused}"
        );
        assert!(
            errors.iter().all(|error| !error.contains(token)),
            "the password is quoted: {errors:?}"
        );
        for (offset, error) in outcomes(&refused) {
            assert_eq!(offset, None, "{refused}");
            assert!(error.is_some(), "{refused}");
        }
    }
    assert_eq!(log_end(&admin, "sasl-guarded").await, 0);

    // The broker serves the next client as before.
    let alice = sasl_plain("SASL_PLAINTEXT", "alice", "t-alice");
    let produced = produce(&kafka, "sasl-guarded", 3, &alice).await;
    assert_eq!(outcomes(&produced), acked_in_order(3), "{produced}");
    assert_eq!(
        kcat_read_with(&kafka, "sasl-guarded", 0, &alice).await,
        records(3)
    );
}

#[tokio::test]
async fn given_a_token_file_when_kcat_uses_sasl_plain_then_it_lists_metadata_and_round_trips_a_record(
) {
    let files = TokenFiles::write();
    let (_broker, _admin, kafka) = files.broker_with_topic("sasl-kcat").await;
    // kcat's own spelling, `sasl.mechanisms`.
    let sasl = [
        "security.protocol=SASL_PLAINTEXT",
        "sasl.mechanisms=PLAIN",
        "sasl.username=alice",
        "sasl.password=t-alice",
    ]
    .map(String::from);

    let listed = kcat(&as_strs(&kcat_args(&["-b", &kafka, "-L", "-J"], &sasl)), "").await;
    let listed: Value = serde_json::from_str(listed.trim()).expect("kcat -J prints JSON");
    assert_eq!(listed["brokers"][0]["name"], kafka.as_str(), "{listed}");
    let topics = listed["topics"].as_array().expect("topics");
    assert!(topics.iter().any(|t| t["topic"] == "sasl-kcat"), "{listed}");

    let args = kcat_args(&["-b", &kafka, "-P", "-t", "sasl-kcat", "-p", "0"], &sasl);
    kcat(&as_strs(&args), "over sasl\n").await;
    assert_eq!(
        kcat_read_with(&kafka, "sasl-kcat", 0, &sasl).await,
        [(0, "over sasl".to_string())]
    );
}

#[tokio::test]
async fn given_a_tls_broker_when_a_kafka_client_uses_sasl_ssl_then_it_produces_and_consumes() {
    let files = TokenFiles::write();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = CertAuthority::new("idem kafka CA");
    let server = TlsFiles::write(dir.path(), "server", &ca.server(&[]), &ca);
    let mut flags = server.server_flags("none");
    flags.extend(files.flags());
    let broker = BrokerProcess::start_with(&as_strs(&flags));
    let admin = Admin::connect_with(
        &broker.bootstrap(),
        Credentials::none(),
        Some(TlsConfig::new(ca.cert_pem())),
    )
    .await
    .expect("admin connects over TLS");
    admin
        .create_topic("sasl-ssl", 1, 1)
        .await
        .expect("create topic");
    let kafka = broker.kafka_bootstrap();
    let mut settings = sasl_plain("SASL_SSL", "alice", "t-alice");
    settings.push(format!("ssl.ca.location={}", server.ca.display()));

    let mut idempotent = settings.clone();
    idempotent.push("enable.idempotence=true".into());
    let produced = produce(&kafka, "sasl-ssl", 20, &idempotent).await;
    assert_eq!(outcomes(&produced), acked_in_order(20), "{produced}");
    assert_eq!(
        kcat_read_with(&kafka, "sasl-ssl", 0, &settings).await,
        records(20)
    );
}

#[tokio::test]
async fn given_a_token_file_when_a_kafka_client_uses_sasl_oauthbearer_then_the_bearer_token_authenticates(
) {
    let files = TokenFiles::write();
    let (_broker, admin, kafka) = files.broker_with_topic("sasl-oauth").await;
    let oauth = |token: &str| {
        vec![
            "security.protocol=SASL_PLAINTEXT".to_string(),
            "sasl.mechanism=OAUTHBEARER".to_string(),
            format!("oauth.token={token}"),
            "message.timeout.ms=3000".to_string(),
        ]
    };

    let refused = produce(&kafka, "sasl-oauth", 3, &oauth("t-wrong")).await;
    let errors = client_errors(&refused);
    assert!(
        errors
            .iter()
            .any(|error| error.contains("Authentication failed: invalid credentials")),
        "{refused}"
    );
    assert_eq!(log_end(&admin, "sasl-oauth").await, 0);

    let produced = produce(&kafka, "sasl-oauth", 5, &oauth("t-alice")).await;
    assert_eq!(outcomes(&produced), acked_in_order(5), "{produced}");
    assert_eq!(client_errors(&produced), Vec::<String>::new());
    assert_eq!(log_end(&admin, "sasl-oauth").await, 5);
}

/// `idem dev --auth-token-file` prints kcat examples that authenticate with SASL/PLAIN
/// (NAME and TOKEN to fill in from the file): filled in with alice's line, they list
/// the metadata and round-trip records.
#[tokio::test]
async fn given_idem_dev_with_a_token_file_when_kcat_runs_its_printed_sasl_examples_then_records_round_trip(
) {
    /// Reaps idem dev even when an assertion fails.
    struct Reaped(std::process::Child);
    impl Drop for Reaped {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let files = TokenFiles::write();
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut dev = std::process::Command::new(idem_tests::binaries::binary("idem"))
        .args([
            "dev",
            "--listen",
            "127.0.0.1:0",
            "--coordinator-listen",
            "127.0.0.1:0",
            "--kafka-listen",
            "127.0.0.1:0",
            "--auth-token-file",
            &files.tokens,
            "--data-dir",
        ])
        .arg(tmp.path().join("data"))
        .stdout(std::process::Stdio::piped())
        .spawn()
        .map(Reaped)
        .expect("spawn idem dev");
    let stdout = dev.0.stdout.take().expect("stdout");
    // The banner's lines from the Kafka listener's to its kcat -L example.
    let banner = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        let mut lines = std::io::BufReader::new(stdout).lines();
        let mut banner = Vec::new();
        for line in lines.by_ref().map_while(Result::ok) {
            let listed = line.trim_end().ends_with(" -L");
            if line.starts_with("kafka listener on ") || !banner.is_empty() {
                banner.push(line);
            }
            if listed {
                break;
            }
        }
        // Keep draining so idem dev never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        banner
    })
    .await
    .expect("reader");
    let kafka = banner
        .first()
        .and_then(|line| line.strip_prefix("kafka listener on "))
        .expect("idem dev prints its kafka listener line")
        .to_string();
    let listing = banner.last().expect("a kcat -L example").trim().to_string();
    // `kcat -X ... -b ADDRESS -L`, filled in with alice's line of the token file.
    let settings: Vec<String> = listing
        .split_whitespace()
        .skip_while(|word| *word != "-X")
        .take_while(|word| *word != "-b")
        .filter(|word| *word != "-X")
        .map(|setting| {
            setting
                .replace("sasl.username=NAME", "sasl.username=alice")
                .replace("sasl.password=TOKEN", "sasl.password=t-alice")
        })
        .collect();
    assert!(
        settings.contains(&"security.protocol=sasl_plaintext".to_string())
            && settings.contains(&"sasl.password=t-alice".to_string()),
        "{listing}"
    );

    let listed = kcat(
        &as_strs(&kcat_args(&["-b", &kafka, "-L", "-J"], &settings)),
        "",
    )
    .await;
    let listed: Value = serde_json::from_str(listed.trim()).expect("kcat -J prints JSON");
    assert_eq!(listed["brokers"][0]["name"], kafka.as_str(), "{listed}");
    // Open authorization: alice (any principal) creates and writes.
    let created = python("create_topic.py", &[&kafka, "demo", "1", "1"]).await;
    assert_eq!(created["error"], Value::Null);
    let args = kcat_args(&["-b", &kafka, "-P", "-t", "demo", "-p", "0"], &settings);
    kcat(&as_strs(&args), "1\n2\n3\n").await;
    assert_eq!(
        kcat_read_with(&kafka, "demo", 0, &settings).await,
        [
            (0, "1".to_string()),
            (1, "2".to_string()),
            (2, "3".to_string())
        ]
    );
}

/// Under mutual TLS a connection starts as its certificate's principal; SASL on top of
/// it (`SASL_SSL`) makes it the token's, as a bearer token overrides a certificate on
/// gRPC: carol's certificate holds no ACL, alice's token does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_mutual_tls_when_a_client_also_authenticates_with_sasl_then_the_token_overrides_the_certificate(
) {
    let files = TokenFiles::write();
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = CertAuthority::new("idem kafka CA");
    let server = TlsFiles::write(dir.path(), "server", &ca.server(&[]), &ca);
    let mut flags = server.mutual_tls_acl_flags();
    flags.extend(files.flags());
    let cluster = Cluster::start(1, &as_strs(&flags));
    let admin = Admin::connect_with(
        &cluster.bootstrap(),
        Credentials::none(),
        Some(ca.client_config("admin")),
    )
    .await
    .expect("the admin's certificate connects");
    admin
        .create_topic("sasl-mtls", 1, 1)
        .await
        .expect("a super user creates");
    admin
        .create_acls(&[AclBinding {
            principal: "User:alice".into(),
            resource_type: "topic".into(),
            resource_name: "sasl-mtls".into(),
            pattern_type: "literal".into(),
            operation: "write".into(),
            permission: "allow".into(),
        }])
        .await
        .expect("the admin adds alice's ACL");
    let kafka = cluster.broker(1).kafka_bootstrap();
    let carol = TlsFiles::write(dir.path(), "carol", &ca.client("carol"), &ca);
    let carol_tls = |protocol: &str| {
        vec![
            format!("security.protocol={protocol}"),
            format!("ssl.ca.location={}", server.ca.display()),
            format!("ssl.certificate.location={}", carol.cert.display()),
            format!("ssl.key.location={}", carol.key.display()),
        ]
    };

    // Carol's certificate alone: User:carol, who may not write.
    let refused = produce(&kafka, "sasl-mtls", 3, &carol_tls("SSL")).await;
    for (offset, error) in outcomes(&refused) {
        assert_eq!(offset, None, "{refused}");
        let error = error.unwrap_or_default();
        assert!(error.contains("TOPIC_AUTHORIZATION_FAILED"), "{refused}");
    }
    // The same certificate with alice's token: User:alice, who may. ACLs reach the
    // broker through an etcd watch: wait until alice sees the topic (write implies
    // describe).
    let mut as_alice = carol_tls("SASL_SSL");
    as_alice.extend(
        [
            "sasl.mechanism=PLAIN",
            "sasl.username=alice",
            "sasl.password=t-alice",
        ]
        .map(String::from),
    );
    wait_until(PATIENCE, "the broker applies alice's ACL", || async {
        let args = kcat_args(&["-b", &kafka, "-L", "-J", "-t", "sasl-mtls"], &as_alice);
        let listed = kcat(&as_strs(&args), "").await;
        let listed: Value = serde_json::from_str(listed.trim()).expect("kcat -J prints JSON");
        match listed["topics"][0]["error"].as_str() {
            None => Seen::Reached(()),
            Some(_) => Seen::Not(listed.to_string()),
        }
    })
    .await;
    let produced = produce(&kafka, "sasl-mtls", 5, &as_alice).await;
    assert_eq!(outcomes(&produced), acked_in_order(5), "{produced}");
    assert_eq!(log_end(&admin, "sasl-mtls").await, 5);
}
