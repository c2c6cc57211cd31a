//! `idem dev` checks ACLs when asked (issue 29): open by default and saying so at
//! start; with `--authorizer acl` a produce the ACLs do not allow is refused naming the
//! topic and writes nothing, and `idem acl add|remove` against the dev node changes
//! that before it answers, with no restart; transactions work (the dev coordinator
//! reaches its broker as its own principal); a restart enforces the stored ACLs.

use std::path::{Path, PathBuf};
use std::process::Output;

use idem_client::credentials::Credentials;
use idem_client::{Admin, Isolation, OffsetSpec};
use idem_proto::ErrorCode;
use idem_tests::cli::{idem, idem_with_input};

use crate::acls::{broker_as, produce_request};
use crate::cli::DevServer;

const TOPIC: &str = "orders";

struct Tokens {
    _dir: tempfile::TempDir,
    file: PathBuf,
    admin: PathBuf,
    alice: PathBuf,
}

impl Tokens {
    fn new() -> Tokens {
        let dir = tempfile::tempdir().expect("dir");
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).expect("write");
            path
        };
        Tokens {
            file: write("tokens", "admin t-admin\nalice t-alice\n"),
            admin: write("admin-token", "t-admin\n"),
            alice: write("alice-token", "t-alice\n"),
            _dir: dir,
        }
    }
}

fn start_secured(data_dir: &Path, tokens: &Tokens) -> DevServer {
    let file = tokens.file.display().to_string();
    DevServer::start_with(
        data_dir,
        "127.0.0.1:0",
        &[
            "--authorizer",
            "acl",
            "--auth-token-file",
            &file,
            "--super-users",
            "User:admin",
        ],
    )
}

/// `idem --auth-token TOKEN ARGS...` against `dev`.
fn idem_as(dev: &DevServer, token: &Path, args: &[&str]) -> Output {
    let token = token.display().to_string();
    let mut all = vec!["--auth-token", token.as_str()];
    all.extend_from_slice(args);
    idem(&dev.addr, &all)
}

fn produce_as(dev: &DevServer, token: &Path, lines: &str) -> Output {
    let token = token.display().to_string();
    idem_with_input(
        &dev.addr,
        &["--auth-token", &token, "produce", TOPIC],
        lines,
    )
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn acl_args(verb: &str) -> Vec<&str> {
    vec![
        "acl",
        verb,
        "--principal",
        "User:alice",
        "--allow",
        "--operation",
        "write",
        "--topic",
        TOPIC,
    ]
}

async fn admin(dev: &DevServer) -> Admin {
    Admin::connect_with(
        &dev.addr,
        Credentials::bearer("t-admin").expect("token"),
        None,
    )
    .await
    .expect("admin connects")
}

async fn log_end(admin: &Admin) -> i64 {
    admin
        .list_offsets(TOPIC, 0, OffsetSpec::Latest, Isolation::ReadUncommitted)
        .await
        .expect("ListOffsets")
}

/// alice's produce is refused, through the CLI and on the wire, as an authorization
/// failure naming the topic.
async fn assert_refused(dev: &DevServer, tokens: &Tokens, value: &str) {
    let output = produce_as(dev, &tokens.alice, &format!("{value}\n"));
    assert!(!output.status.success(), "alice's produce succeeded");
    let said = stderr(&output);
    assert!(
        said.contains("TopicAuthorizationFailed") && said.contains("topic orders"),
        "{said}"
    );
    let mut alice = broker_as(&dev.addr, "t-alice").await;
    let answer = alice
        .produce(produce_request(&[value]))
        .await
        .expect("Produce answered")
        .into_inner();
    let refused = &answer.topics[0].partitions[0];
    assert_eq!(refused.error_code(), ErrorCode::TopicAuthorizationFailed);
    assert_eq!(
        refused.error_message,
        "User:alice is not authorized to write topic \"orders\""
    );
}

#[test]
fn given_idem_dev_without_flags_then_it_says_it_is_open() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dev = DevServer::start(&tmp.path().join("data"), "127.0.0.1:0");
    assert!(
        dev.authorization
            .starts_with("Authorization: open, every request is allowed"),
        "{}",
        dev.authorization
    );
}

#[tokio::test]
async fn given_idem_dev_with_acls_when_an_acl_is_added_and_removed_then_produce_follows_at_once() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("data");
    let tokens = Tokens::new();
    let dev = start_secured(&data_dir, &tokens);
    assert!(
        dev.authorization.starts_with("Authorization: ACLs"),
        "{}",
        dev.authorization
    );
    let created = idem_as(
        &dev,
        &tokens.admin,
        &["topic", "create", TOPIC, "--partitions", "1"],
    );
    assert!(created.status.success(), "{}", stderr(&created));
    let admin = admin(&dev).await;
    assert_eq!(log_end(&admin).await, 0);
    // alice writes another topic: an idempotent producer id is hers (Kafka's
    // IDEMPOTENT_WRITE), so what her produce is refused is the topic.
    let scratch = idem_as(
        &dev,
        &tokens.admin,
        &[
            "acl",
            "add",
            "--principal",
            "User:alice",
            "--operation",
            "write",
            "--topic",
            "scratch",
        ],
    );
    assert!(scratch.status.success(), "{}", stderr(&scratch));

    // No ACL for orders: refused, nothing written.
    assert_refused(&dev, &tokens, "a-1").await;
    assert_eq!(log_end(&admin).await, 0, "a refused produce wrote");

    // Allowed: the very next produce is accepted (the change applied before `acl add`
    // answered; no restart).
    let added = idem_as(&dev, &tokens.admin, &acl_args("add"));
    assert!(added.status.success(), "{}", stderr(&added));
    let produced = produce_as(&dev, &tokens.alice, "a-2\na-3\n");
    assert!(produced.status.success(), "{}", stderr(&produced));
    assert_eq!(log_end(&admin).await, 2);
    let consumed = idem_as(
        &dev,
        &tokens.admin,
        &["consume", TOPIC, "--from-beginning", "--max-messages", "2"],
    );
    assert!(consumed.status.success(), "{}", stderr(&consumed));
    assert_eq!(String::from_utf8_lossy(&consumed.stdout), "a-2\na-3\n");

    // A transaction too: the dev coordinator writes its log and the COMMIT marker
    // through the dev broker as its own node principal, which the ACLs never name.
    let txn_acl = idem_as(
        &dev,
        &tokens.admin,
        &[
            "acl",
            "add",
            "--principal",
            "User:alice",
            "--operation",
            "write",
            "--transactional-id",
            "alice-txn",
        ],
    );
    assert!(txn_acl.status.success(), "{}", stderr(&txn_acl));
    let alice_token = tokens.alice.display().to_string();
    let in_txn = idem_with_input(
        &dev.addr,
        &[
            "--auth-token",
            &alice_token,
            "produce",
            TOPIC,
            "--transactional-id",
            "alice-txn",
        ],
        "t-1\n",
    );
    assert!(in_txn.status.success(), "{}", stderr(&in_txn));
    // EndTxn answers once the commit is decided; the COMMIT marker follows (as in
    // Kafka). A read_committed consumer returns t-1 only once it is written.
    let consumed = idem_as(
        &dev,
        &tokens.admin,
        &["consume", TOPIC, "--from-beginning", "--max-messages", "3"],
    );
    assert!(consumed.status.success(), "{}", stderr(&consumed));
    assert_eq!(String::from_utf8_lossy(&consumed.stdout), "a-2\na-3\nt-1\n");
    // The BEGIN marker, the record and the COMMIT marker.
    assert_eq!(log_end(&admin).await, 5);

    // Removed: refused again at once, nothing more written.
    let removed = idem_as(&dev, &tokens.admin, &acl_args("remove"));
    assert!(removed.status.success(), "{}", stderr(&removed));
    assert_refused(&dev, &tokens, "a-4").await;
    assert_eq!(log_end(&admin).await, 5, "a refused produce wrote");

    // alice may not change ACLs herself.
    let herself = idem_as(&dev, &tokens.alice, &acl_args("add"));
    assert!(!herself.status.success());
    assert!(
        stderr(&herself).contains("User:alice is not authorized to alter cluster"),
        "{}",
        stderr(&herself)
    );

    // The ACLs are kept in the data dir: given back, they hold after a restart from
    // the first answer.
    let added = idem_as(&dev, &tokens.admin, &acl_args("add"));
    assert!(added.status.success(), "{}", stderr(&added));
    drop(admin);
    drop(dev);
    let dev = start_secured(&data_dir, &tokens);
    let produced = produce_as(&dev, &tokens.alice, "a-5\n");
    assert!(produced.status.success(), "{}", stderr(&produced));
    assert_eq!(log_end(&self::admin(&dev).await).await, 6);
}
