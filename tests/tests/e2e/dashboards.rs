//! The Grafana dashboard and the Prometheus alerts shipped in `deploy/` name only
//! metrics the servers record: every `idem_*` series their expressions use is the
//! name of a `counter!`, `gauge!` or `histogram!` in the broker, coordinator or runtime
//! sources (a histogram's `_bucket`, `_sum` and `_count` included). A metric renamed
//! in the code without its panel fails here instead of leaving the panel empty. The
//! metrics e2e test shows the recorded ones reach `/metrics`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn rust_files(dir: &Path, into: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read source dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            rust_files(&path, into);
        } else if path.extension().is_some_and(|e| e == "rs") {
            into.push(path);
        }
    }
}

/// The names of every metric recorded in `source`: a string literal `"idem_..."` that
/// is the first argument of a `metrics::` macro.
fn recorded_in(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in source.match_indices("\"idem_") {
        let before = source[..at].trim_end();
        if !["counter!(", "gauge!(", "histogram!("]
            .iter()
            .any(|m| before.ends_with(m))
        {
            continue;
        }
        let rest = &source[at + 1..];
        if let Some(end) = rest.find('"') {
            names.push(rest[..end].to_string());
        }
    }
    names
}

/// Every `idem_[a-z_]+` token of `text`.
fn series_named_in(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices("idem_") {
        let name: String = text[at..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || *c == '_')
            .collect();
        names.insert(name);
    }
    names
}

#[test]
fn given_the_shipped_dashboard_and_alerts_then_every_metric_they_use_is_recorded() {
    let mut files = Vec::new();
    for crate_dir in ["broker/src", "coordinator/src", "runtime/src"] {
        rust_files(&repo().join(crate_dir), &mut files);
    }
    let recorded: BTreeSet<String> = files
        .iter()
        .flat_map(|f| recorded_in(&std::fs::read_to_string(f).expect("read source")))
        .collect();
    assert!(
        recorded.len() >= 15,
        "the scan found too few metrics to be reading the sources right: {recorded:?}"
    );

    let dashboard = std::fs::read_to_string(repo().join("deploy/grafana/idem-dashboard.json"))
        .expect("dashboard");
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).expect("dashboard JSON");
    let mut expressions = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().into_iter().flatten() {
            expressions.push(target["expr"].as_str().expect("an expr").to_string());
        }
    }
    assert!(expressions.len() >= 15, "{expressions:?}");
    expressions.push(
        std::fs::read_to_string(repo().join("deploy/prometheus/alerts.yml")).expect("alerts"),
    );

    for text in &expressions {
        for series in series_named_in(text) {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|suffix| series.strip_suffix(suffix))
                .filter(|base| recorded.contains(*base))
                .unwrap_or(&series);
            assert!(
                recorded.contains(base),
                "{series} (in {text:?}) is recorded nowhere; recorded: {recorded:?}"
            );
        }
    }
}

#[test]
fn the_source_scan_finds_macro_names_only() {
    let source = r#"
        metrics::counter!("idem_a_total").increment(1);
        metrics::histogram!(
            "idem_b_seconds",
            "rpc" => rpc
        );
        let s = "idem_not_a_metric";
    "#;
    assert_eq!(recorded_in(source), vec!["idem_a_total", "idem_b_seconds"]);
    assert_eq!(
        series_named_in("sum(rate(idem_x_total[5m])) / idem_y"),
        BTreeSet::from(["idem_x_total".to_string(), "idem_y".to_string()])
    );
}
