//! `idem-chaos check` exits 0 on a valid history, 1 on anomalies, 2 on unreadable input.

use std::path::Path;
use std::process::{Command, Output};

use idem_chaos::history::{Call, HistoryWriter, Isolation, OpKind, Read, ReadRecord, SendRecord};

fn run_check(history: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem-chaos"))
        .arg("check")
        .arg(history)
        .output()
        .expect("run idem-chaos")
}

/// A producer sends "a" and "b" to t/0, acknowledged at 0 and 1; the read_committed
/// final read returns `read`.
fn history(read: &[(i64, &str)]) -> Vec<u8> {
    let mut writer = HistoryWriter::new(Vec::new());
    for (offset, value) in [(0, "a"), (1, "b")] {
        let send = |offset| {
            Call::Send(SendRecord {
                topic: "t".into(),
                partition: 0,
                value: value.into(),
                offset,
            })
        };
        writer.invoke("producer-1", send(None)).expect("invoke");
        writer
            .complete("producer-1", OpKind::Ok, send(Some(offset)))
            .expect("complete");
    }
    let final_read = |records| {
        Call::FinalRead(Read {
            isolation: Isolation::ReadCommitted,
            records,
        })
    };
    let records = read
        .iter()
        .map(|&(offset, value)| ReadRecord {
            topic: "t".into(),
            partition: 0,
            offset,
            value: value.into(),
        })
        .collect();
    writer
        .invoke("final", final_read(Vec::new()))
        .expect("invoke");
    writer
        .complete("final", OpKind::Ok, final_read(records))
        .expect("complete");
    writer.into_inner()
}

fn write(dir: &Path, name: &str, contents: &[u8]) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("write history");
    path
}

fn verdict(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout).expect("stdout is the verdict as JSON")
}

#[test]
fn given_histories_when_checked_then_the_exit_status_says_valid_anomalous_or_unreadable() {
    let dir = tempfile::tempdir().expect("temp dir");
    let dir = dir.path();

    let valid = run_check(&write(dir, "valid.jsonl", &history(&[(0, "a"), (1, "b")])));
    assert_eq!(valid.status.code(), Some(0), "{valid:?}");
    assert_eq!(verdict(&valid)["valid"], true);
    let summary = String::from_utf8_lossy(&valid.stderr);
    assert!(
        summary.contains("valid") && !summary.contains("INVALID"),
        "{summary}"
    );

    let lost = run_check(&write(dir, "lost.jsonl", &history(&[(1, "b")])));
    assert_eq!(lost.status.code(), Some(1), "{lost:?}");
    let json = verdict(&lost);
    assert_eq!(json["valid"], false);
    assert_eq!(json["anomalies"]["lost"][0]["value"], "a");
    let summary = String::from_utf8_lossy(&lost.stderr);
    assert!(
        summary.contains("INVALID") && summary.contains("lost 1"),
        "{summary}"
    );

    let mut text = history(&[(0, "a")]);
    text.extend_from_slice(b"{\"index\":99,\"type\":\n");
    let malformed = run_check(&write(dir, "malformed.jsonl", &text));
    assert_eq!(malformed.status.code(), Some(2), "{malformed:?}");
    assert!(malformed.stdout.is_empty());
    let message = String::from_utf8_lossy(&malformed.stderr);
    assert!(message.contains("line 7, column"), "{message}");

    let missing = run_check(&dir.join("no-such-history.jsonl"));
    assert_eq!(missing.status.code(), Some(2), "{missing:?}");
}
