//! The nemesis log of a chaos run (`nemesis.jsonl`): one JSON object per injected fault,
//! `{"family":"kill","fault":"KillBroker(1)","start_ns":2952484850,"end_ns":4586012850}`,
//! times in nanoseconds since the run began (the history's `time_ns` clock).
//! [`read_nemesis_log`] keeps the file's order, ignores fields it does not know, refuses
//! a fault that ends before it starts; errors name the 1-based line.

use std::io::BufRead;

use serde::{Deserialize, Serialize};

use crate::json_lines::{parse_lines, Contents, JsonLinesError};

/// One fault the nemesis injected, from `start_ns` until it healed at `end_ns`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultInterval {
    /// `kill`, `pause`, `partition`, `etcd`, …
    pub family: String,
    /// What exactly was done, e.g. `KillBroker(1)`.
    pub fault: String,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// A nemesis log that cannot be read.
pub type NemesisLogError = JsonLinesError;

/// What the lines of the nemesis log are, for its errors.
const CONTENTS: Contents = Contents {
    file: "nemesis log",
    each_line: "a fault interval",
};

/// Parses a nemesis log, one [`FaultInterval`] per non-blank line.
pub fn read_nemesis_log(input: impl BufRead) -> Result<Vec<FaultInterval>, NemesisLogError> {
    let mut faults = Vec::new();
    for (line, fault) in parse_lines::<FaultInterval>(input, CONTENTS)? {
        if fault.end_ns < fault.start_ns {
            return Err(JsonLinesError::Invalid {
                line,
                reason: format!(
                    "fault {:?} ends at {} ns, before it starts at {} ns",
                    fault.fault, fault.end_ns, fault.start_ns
                ),
            });
        }
        faults.push(fault);
    }
    Ok(faults)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_the_documented_lines_when_read_then_every_interval_is_kept_in_order() {
        let text = concat!(
            r#"{"family":"kill","fault":"KillBroker(1)","start_ns":2952484850,"end_ns":4586012850}"#,
            "\n\n",
            r#"{"end_ns":9011709706,"family":"partition","fault":"CutFromEtcd(Coordinator(2))","start_ns":7045287285}"#,
            "\n",
        );
        let faults = read_nemesis_log(text.as_bytes()).expect("valid log");
        assert_eq!(
            faults,
            vec![
                FaultInterval {
                    family: "kill".into(),
                    fault: "KillBroker(1)".into(),
                    start_ns: 2_952_484_850,
                    end_ns: 4_586_012_850,
                },
                FaultInterval {
                    family: "partition".into(),
                    fault: "CutFromEtcd(Coordinator(2))".into(),
                    start_ns: 7_045_287_285,
                    end_ns: 9_011_709_706,
                },
            ]
        );
    }

    #[test]
    fn given_an_empty_log_when_read_then_there_are_no_faults() {
        assert_eq!(read_nemesis_log(&b""[..]).expect("empty"), vec![]);
    }

    #[test]
    fn given_a_line_without_end_when_read_then_the_error_names_the_line_and_field() {
        let text = concat!(
            r#"{"family":"kill","fault":"KillBroker(1)","start_ns":1,"end_ns":2}"#,
            "\n",
            r#"{"family":"pause","fault":"PauseBroker(2)","start_ns":3}"#,
            "\n",
        );
        let err = read_nemesis_log(text.as_bytes()).expect_err("no end_ns");
        assert_eq!(err.line(), Some(2));
        let message = err.to_string();
        assert!(message.starts_with("line 2, column "), "{message}");
        assert!(message.contains("missing field `end_ns`"), "{message}");
        assert!(!message.contains("line 1"), "{message}");
    }

    #[test]
    fn given_a_line_that_is_not_json_when_read_then_the_error_names_the_line() {
        let err = read_nemesis_log(&b"KillBroker(1) from 1 to 2\n"[..]).expect_err("not json");
        assert_eq!(err.line(), Some(1));
        assert!(err.to_string().contains("not a fault interval"), "{err}");
    }

    #[test]
    fn given_a_negative_time_when_read_then_it_is_refused() {
        let text = r#"{"family":"kill","fault":"KillBroker(1)","start_ns":-5,"end_ns":2}"#;
        let err = read_nemesis_log(text.as_bytes()).expect_err("negative");
        assert_eq!(err.line(), Some(1));
    }

    #[test]
    fn given_a_fault_ending_before_it_starts_when_read_then_it_is_refused_with_its_line() {
        let text = concat!(
            "\n",
            r#"{"family":"etcd","fault":"PauseEtcd","start_ns":10,"end_ns":9}"#,
        );
        let err = read_nemesis_log(text.as_bytes()).expect_err("backwards");
        assert_eq!(err.line(), Some(2));
        assert!(err.to_string().contains("before it starts"), "{err}");
    }
}
