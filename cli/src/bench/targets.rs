//! The ratios issue 6 sets as targets, computed from one run's rows. On a shared
//! machine a round's throughput can move by half between rounds, but modes run
//! back to back in a round see the same conditions, so each ratio is the median over
//! rounds of the two modes' rates in the same round (paired), not a ratio of medians.

use super::report::{paired_ratio, ModeReport};

pub const NULL_ROW: &str = "null/at-least-once-unordered";

/// `(numerator mode, denominator mode, goal)`: numerator ≥ goal × denominator.
const TARGETS: [(&str, &str, f64); 4] = [
    ("exactly-once", "at-least-once-unordered", 0.98),
    ("transactional", "at-least-once", 0.97),
    ("transactional", "at-most-once", 0.90),
    ("exactly-once", NULL_ROW, 0.50),
];

#[derive(Debug, Clone, serde::Serialize)]
pub struct TargetCheck {
    pub name: String,
    pub ratio: f64,
    pub goal: f64,
    pub met: bool,
}

/// Every target whose two modes both ran.
pub fn check(rows: &[ModeReport]) -> Vec<TargetCheck> {
    let find = |mode: &str| rows.iter().find(|r| r.mode == mode);
    TARGETS
        .iter()
        .filter_map(|(num, den, goal)| {
            let ratio = paired_ratio(find(num)?, find(den)?)?;
            Some(TargetCheck {
                name: format!("{num} / {den}"),
                ratio,
                goal: *goal,
                met: ratio >= *goal,
            })
        })
        .collect()
}

pub fn table(checks: &[TargetCheck]) -> String {
    if checks.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\ntarget (paired per round, median)                          ratio    goal  met\n",
    );
    for c in checks {
        out.push_str(&format!(
            "{:<56} {:>7.4} {:>7.2}  {}\n",
            c.name,
            c.ratio,
            c.goal,
            if c.met { "yes" } else { "NO" }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(mode: &str, rounds: &[f64]) -> ModeReport {
        let mut sorted = rounds.to_vec();
        sorted.sort_by(f64::total_cmp);
        ModeReport {
            mode: mode.into(),
            records_per_sec: sorted[(sorted.len() - 1) / 2],
            round_records_per_sec: rounds.to_vec(),
            ..ModeReport::empty()
        }
    }

    #[test]
    fn a_ratio_pairs_rounds_so_a_slow_round_slows_both_sides() {
        // Round 2 is slow for everything; a ratio of medians would say 0.5.
        let a = row("exactly-once", &[100.0, 10.0, 100.0]);
        let b = row("at-least-once-unordered", &[100.0, 10.0, 200.0]);
        assert_eq!(paired_ratio(&a, &b), Some(1.0));
        let checks = check(&[a, b]);
        assert_eq!(checks.len(), 1);
        assert!(checks[0].met);
        assert!(table(&checks).contains("exactly-once / at-least-once-unordered"));
    }

    #[test]
    fn without_both_modes_there_is_no_check() {
        assert!(check(&[row("exactly-once", &[1.0])]).is_empty());
        assert_eq!(table(&[]), "");
    }
}
