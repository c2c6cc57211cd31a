//! `idem bench` under ACLs (issue 29): it presents `--auth-token` on every connection,
//! so a principal the ACLs allow benches a secured cluster and every record is
//! verified; without the rights it stops at once with the authorization error naming
//! what was refused, rather than hanging or reporting a rate of nothing.

use std::process::{Command, Output};
use std::time::Duration;

use idem_tests::binaries::binary;

use crate::acls::{binding, secured_cluster, Secrets};

/// How long a refused bench may take to say so (a hang would be the bug).
const REFUSED_WITHIN: Duration = Duration::from_secs(30);

/// `idem [--auth-token TOKEN] bench produce` against `bootstrap`, two modes.
async fn bench(bootstrap: &str, token: Option<&std::path::Path>) -> Output {
    let mut command = Command::new(binary("idem"));
    if let Some(token) = token {
        command.arg("--auth-token").arg(token);
    }
    command
        .args(["bench", "produce", "--bootstrap", bootstrap])
        .args(["--partitions", "2", "--records", "2000", "--json"])
        .args(["--modes", "exactly-once,transactional"])
        .env("IDEM_LOG", "error");
    tokio::time::timeout(
        REFUSED_WITHIN * 4,
        tokio::task::spawn_blocking(move || command.output().expect("run idem bench")),
    )
    .await
    .expect("idem bench ended")
    .expect("bench task")
}

fn values(json: &str, key: &str) -> Vec<String> {
    let needle = format!("\"{key}\":");
    json.match_indices(&needle)
        .map(|(at, _)| {
            let rest = json[at + needle.len()..].trim_start();
            let end = rest.find([',', '}', '\n']).unwrap_or(rest.len());
            rest[..end].trim().trim_matches('"').to_string()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_acls_when_benched_with_an_allowed_token_then_it_verifies_and_without_one_it_is_refused(
) {
    let secrets = Secrets::new();
    let (cluster, admin) = secured_cluster(&secrets).await;
    let bootstrap = cluster.bootstrap();
    // alice may do anything to `bench*` topics and transactional ids; bob may create
    // and describe them, not write.
    let acls = vec![
        binding("User:alice", "topic", "bench", "prefixed", "all"),
        binding("User:alice", "transactional-id", "bench", "prefixed", "all"),
        binding("User:bob", "topic", "bench", "prefixed", "create"),
        binding("User:bob", "topic", "bench", "prefixed", "describe"),
    ];
    admin.create_acls(&acls).await.expect("ACLs stored");
    let dir = tempfile::tempdir().expect("dir");
    let token = |name: &str, token: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, token).expect("write");
        path
    };
    let (alice, bob) = (token("alice", "t-alice\n"), token("bob", "t-bob\n"));

    let allowed = bench(&bootstrap, Some(&alice)).await;
    assert!(
        allowed.status.success(),
        "{}",
        String::from_utf8_lossy(&allowed.stderr)
    );
    let json = String::from_utf8_lossy(&allowed.stdout);
    assert_eq!(
        values(&json, "mode"),
        vec!["exactly-once", "transactional"],
        "{json}"
    );
    assert_eq!(values(&json, "verified"), vec!["true"; 2], "{json}");
    assert_eq!(values(&json, "records"), vec!["2000"; 2], "{json}");

    // No token: User:ANONYMOUS, refused creating the run's topic.
    let started = std::time::Instant::now();
    let anonymous = bench(&bootstrap, None).await;
    let said = String::from_utf8_lossy(&anonymous.stderr);
    assert!(!anonymous.status.success(), "{said}");
    // (The status message is quoted in the error chain: the topic's quotes escaped.)
    assert!(
        said.contains("User:ANONYMOUS is not authorized to create topic")
            && said.contains("bench-exactly-once-"),
        "{said}"
    );
    assert!(anonymous.stdout.is_empty(), "a refused run reported rows");
    assert!(
        started.elapsed() < REFUSED_WITHIN,
        "{:?}",
        started.elapsed()
    );

    // Creating is not writing: bob's run stops at its first producer, naming the write
    // it lacks.
    let started = std::time::Instant::now();
    let refused = bench(&bootstrap, Some(&bob)).await;
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("User:bob is not authorized to write"),
        "{said}"
    );
    assert!(refused.stdout.is_empty(), "a refused run reported rows");
    assert!(
        started.elapsed() < REFUSED_WITHIN,
        "{:?}",
        started.elapsed()
    );
}
