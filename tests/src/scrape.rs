//! Reading a server's Prometheus endpoint (`--metrics-listen`) as an operator's scraper
//! does: `GET /metrics`, then the value of one series by name and labels.

use std::time::Duration;

/// The text a GET of `http://{addr}/metrics` answers, or why there is none.
pub fn scrape(addr: &str) -> Result<String, String> {
    ureq::get(&format!("http://{addr}/metrics"))
        .timeout(Duration::from_secs(5))
        .call()
        .map_err(|e| format!("GET http://{addr}/metrics: {e}"))?
        .into_string()
        .map_err(|e| format!("reading the metrics of {addr}: {e}"))
}

/// The value of the series `name` whose labels include every `key="value"` of
/// `labels` (a counter never incremented, or a gauge never set, is absent: `None`).
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (series_name, series_labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let matches = series_name == name
                && labels.iter().all(|(k, v)| {
                    series_labels
                        .split(',')
                        .any(|l| l == format!("{k}=\"{v}\""))
                });
            if matches {
                value.parse().ok()
            } else {
                None
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_is_found_by_name_and_labels() {
        let text = "# TYPE idem_refusals_total counter\n\
                    idem_refusals_total{code=\"OUT_OF_ORDER_SEQUENCE_NUMBER\"} 3\n\
                    idem_refusals_total{code=\"NOT_LEADER_OR_FOLLOWER\"} 1\n\
                    idem_under_replicated_partitions 1\n";
        assert_eq!(
            value(
                text,
                "idem_refusals_total",
                &[("code", "NOT_LEADER_OR_FOLLOWER")]
            ),
            Some(1.0)
        );
        assert_eq!(
            value(text, "idem_under_replicated_partitions", &[]),
            Some(1.0)
        );
        assert_eq!(value(text, "idem_refusals_total", &[("code", "X")]), None);
        assert_eq!(value(text, "idem_under", &[]), None);
    }
}
