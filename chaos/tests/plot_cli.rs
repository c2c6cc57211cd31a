//! `idem-chaos plot REPORT_DIR` writes `REPORT_DIR/timeline.svg` with every fault shaded;
//! it exits 0 when written and 2 when the report cannot be read.

use std::path::Path;
use std::process::{Command, Output};

use idem_chaos::history::{Call, Isolation, Op, OpKind, Read, SendRecord, Txn};

const SECOND: u64 = 1_000_000_000;

fn run_plot(report_dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_idem-chaos"))
        .arg("plot")
        .arg(report_dir)
        .output()
        .expect("run idem-chaos")
}

fn send(value: &str, offset: Option<i64>) -> Call {
    Call::Send(SendRecord {
        topic: "t".into(),
        partition: 0,
        value: value.into(),
        offset,
    })
}

/// Three seconds of a run: sends ok before and after the fault, one failing and a
/// transaction of unknown outcome inside it, a consumer polling throughout.
fn history() -> String {
    let txn = Call::Txn(Txn {
        transactional_id: "tid".into(),
        sends: vec![SendRecord {
            topic: "t".into(),
            partition: 1,
            value: "x".into(),
            offset: None,
        }],
        commit: true,
    });
    let poll = Call::Poll(Read {
        isolation: Isolation::ReadCommitted,
        records: vec![],
    });
    let events = [
        (100, "p", OpKind::Invoke, send("a", None)),
        (150, "c", OpKind::Invoke, poll.clone()),
        (200, "tx", OpKind::Invoke, txn.clone()),
        (300, "p", OpKind::Ok, send("a", Some(0))),
        (900, "c", OpKind::Ok, poll.clone()),
        (1_100, "p", OpKind::Invoke, send("b", None)),
        (1_900, "p", OpKind::Fail, send("b", None)),
        (2_000, "tx", OpKind::Info, txn),
        (2_600, "p", OpKind::Invoke, send("c", None)),
        (2_650, "p", OpKind::Ok, send("c", Some(1))),
    ];
    events
        .into_iter()
        .enumerate()
        .map(|(index, (time_ms, process, kind, call))| {
            let op = Op {
                index: index as u64,
                time_ns: time_ms * 1_000_000,
                process: process.into(),
                kind,
                call,
            };
            serde_json::to_string(&op).expect("event as json") + "\n"
        })
        .collect()
}

fn report(history: &str, nemesis: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("history.jsonl"), history).expect("write history");
    if let Some(nemesis) = nemesis {
        std::fs::write(dir.path().join("nemesis.jsonl"), nemesis).expect("write nemesis");
    }
    dir
}

#[test]
fn given_a_report_with_a_kill_when_plotted_then_the_svg_shades_it_and_names_the_series() {
    let nemesis = format!(
        "{{\"family\":\"kill\",\"fault\":\"KillBroker(1)\",\"start_ns\":{},\"end_ns\":{}}}\n",
        SECOND,
        2 * SECOND
    );
    let dir = report(&history(), Some(&nemesis));

    let output = run_plot(dir.path());
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let svg = std::fs::read_to_string(dir.path().join("timeline.svg")).expect("timeline.svg");
    assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
    assert!(svg.trim_end().ends_with("</svg>"));
    let shaded = svg
        .lines()
        .filter(|line| line.starts_with("<rect") && line.contains("fill=\"#D62728\""))
        .count();
    assert_eq!(
        shaded, 3,
        "the kill shaded in both panels, and its legend swatch"
    );
    for label in [
        "KillBroker(1)",
        "fault: kill",
        "send ok",
        "send fail/info",
        "txn fail/info",
        "poll ok",
        "send p50",
        "send p99",
        "txn p99",
    ] {
        assert!(svg.contains(&format!("\n{label}\n")), "no {label:?} text");
    }
}

#[test]
fn given_a_report_without_nemesis_log_when_plotted_then_it_is_drawn_without_faults() {
    let dir = report(&history(), None);
    let output = run_plot(dir.path());
    assert_eq!(output.status.code(), Some(0), "{output:?}");
    let svg = std::fs::read_to_string(dir.path().join("timeline.svg")).expect("timeline.svg");
    assert!(!svg.contains("fault:"));
    assert!(svg.contains("\nsend ok\n"));
}

#[test]
fn given_unreadable_reports_when_plotted_then_it_exits_2_naming_the_file_and_line() {
    let missing = tempfile::tempdir().expect("temp dir");
    let output = run_plot(missing.path());
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("history.jsonl"));

    let bad_nemesis = report(&history(), Some("{\"family\":\"kill\"}\n"));
    let output = run_plot(bad_nemesis.path());
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    let message = String::from_utf8_lossy(&output.stderr);
    assert!(
        message.contains("nemesis.jsonl") && message.contains("line 1"),
        "{message}"
    );
    assert!(!bad_nemesis.path().join("timeline.svg").exists());

    let bad_history = report("{\"index\":0}\n", None);
    let output = run_plot(bad_history.path());
    assert_eq!(output.status.code(), Some(2), "{output:?}");
}

#[test]
fn given_a_report_when_written_from_rust_then_the_path_of_the_svg_is_returned() {
    let dir = report(&history(), Some(""));
    let picture = idem_chaos::plot::write_timeline(dir.path()).expect("drawn");
    assert_eq!(picture, dir.path().join("timeline.svg"));
    assert!(picture.is_file());
}
