//! `--quota-file PATH`: each principal's produce and fetch byte rates, one line each:
//!
//! ```text
//! # principal    bytes per second
//! User:alice     produce=1048576 fetch=2097152
//! bob            produce=512KiB                # `User:` may be left out
//! *              produce=10MiB fetch=20MiB     # everyone not listed
//! ```
//!
//! A principal's line replaces the default (`*`) entirely: a kind it leaves out is not
//! limited for it. A rate takes a `KiB`, `MiB` or `GiB` suffix and must be at least 1.
//! Followed as a [`WatchedFile`]: an edit applies within a second, a line that does not
//! parse keeps the previous quotas in force (and is logged).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use idem_runtime::watched_file::{FileContents, WatchedFile};

/// The quota file, kept current.
pub type QuotaFile = WatchedFile<QuotaTable>;

#[derive(Debug, thiserror::Error)]
pub enum QuotaFileError {
    #[error("cannot read quota file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("quota file {path}, line {line}: {reason}")]
    Line {
        path: PathBuf,
        line: usize,
        reason: String,
    },
}

/// Which traffic a quota limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuotaKind {
    Produce,
    Fetch,
}

impl QuotaKind {
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaKind::Produce => "produce",
            QuotaKind::Fetch => "fetch",
        }
    }
}

/// The rates of one line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rates {
    pub produce: Option<u64>,
    pub fetch: Option<u64>,
}

impl Rates {
    fn of(&self, kind: QuotaKind) -> Option<u64> {
        match kind {
            QuotaKind::Produce => self.produce,
            QuotaKind::Fetch => self.fetch,
        }
    }
}

/// Principal → rates, and the default for principals not listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuotaTable {
    by_principal: HashMap<String, Rates>,
    default: Option<Rates>,
}

impl QuotaTable {
    /// `principal`'s quota for `kind` in bytes per second (`None`: not limited).
    pub fn rate(&self, principal: &str, kind: QuotaKind) -> Option<u64> {
        self.by_principal
            .get(principal)
            .or(self.default.as_ref())
            .and_then(|rates| rates.of(kind))
    }

    /// Parses a quota file's text; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<QuotaTable, QuotaFileError> {
        let mut table = QuotaTable::default();
        for (index, line) in text.lines().enumerate() {
            let refuse = |reason: String| QuotaFileError::Line {
                path: path.to_path_buf(),
                line: index + 1,
                reason,
            };
            let line = line.split('#').next().unwrap_or("").trim();
            let mut words = line.split_whitespace();
            let Some(who) = words.next() else { continue };
            let mut rates = Rates::default();
            for word in words {
                let (kind, value) = word.split_once('=').ok_or_else(|| {
                    refuse(format!(
                        "expected `produce=RATE` or `fetch=RATE`, not `{word}`"
                    ))
                })?;
                let slot = match kind {
                    "produce" => &mut rates.produce,
                    "fetch" => &mut rates.fetch,
                    other => {
                        return Err(refuse(format!(
                            "unknown quota `{other}`: there are `produce` and `fetch`"
                        )))
                    }
                };
                if slot.is_some() {
                    return Err(refuse(format!("`{kind}` given twice")));
                }
                *slot = Some(parse_rate(value).map_err(&refuse)?);
            }
            if rates == Rates::default() {
                return Err(refuse(format!(
                    "`{who}` has no `produce=` or `fetch=` rate"
                )));
            }
            let first = if who == "*" {
                table.default.replace(rates).is_some()
            } else {
                let name = who.strip_prefix("User:").unwrap_or(who);
                if name.is_empty() {
                    return Err(refuse("empty principal".to_string()));
                }
                table
                    .by_principal
                    .insert(format!("User:{name}"), rates)
                    .is_some()
            };
            if first {
                return Err(refuse(format!("`{who}` is listed twice")));
            }
        }
        Ok(table)
    }
}

/// `1048576`, `512KiB`, `10MiB`, `1GiB`: bytes per second, at least 1.
fn parse_rate(value: &str) -> Result<u64, String> {
    let (digits, unit) = [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)]
        .into_iter()
        .find_map(|(suffix, unit)| value.strip_suffix(suffix).map(|d| (d, unit)))
        .unwrap_or((value, 1));
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .filter(|rate| *rate > 0)
        .ok_or_else(|| {
            format!("`{value}` is not a rate in bytes per second (at least 1; KiB, MiB, GiB)")
        })
}

impl FileContents for QuotaTable {
    type Error = QuotaFileError;
    const WHAT: &'static str = "quota file";

    fn read(path: &Path) -> Result<QuotaTable, QuotaFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| QuotaFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        QuotaTable::parse(&text, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<QuotaTable, QuotaFileError> {
        QuotaTable::parse(text, Path::new("quotas"))
    }

    #[test]
    fn given_a_principal_line_then_it_replaces_the_default() {
        let table = parse(
            "# who rates\nUser:alice produce=1048576 fetch=2MiB\nbob produce=512KiB\n* produce=10MiB fetch=1GiB\n",
        )
        .expect("parsed");
        assert_eq!(table.rate("User:alice", QuotaKind::Produce), Some(1 << 20));
        assert_eq!(table.rate("User:alice", QuotaKind::Fetch), Some(2 << 20));
        assert_eq!(table.rate("User:bob", QuotaKind::Produce), Some(512 << 10));
        // bob's line names no fetch rate: bob's fetches are not limited.
        assert_eq!(table.rate("User:bob", QuotaKind::Fetch), None);
        assert_eq!(table.rate("User:carol", QuotaKind::Produce), Some(10 << 20));
        assert_eq!(table.rate("User:carol", QuotaKind::Fetch), Some(1 << 30));
        assert_eq!(
            parse("").expect("empty").rate("User:x", QuotaKind::Fetch),
            None
        );
    }

    #[test]
    fn given_a_bad_line_then_its_number_and_reason_are_named() {
        for (text, line, reason) in [
            ("alice\n", 1, "no `produce=`"),
            ("a produce=1\nb produce\n", 2, "expected `produce=RATE`"),
            ("a write=1\n", 1, "unknown quota `write`"),
            ("a produce=0\n", 1, "at least 1"),
            ("a produce=12kb\n", 1, "`12kb` is not a rate"),
            ("a produce=99999999999GiB\n", 1, "is not a rate"),
            ("a produce=1 produce=2\n", 1, "given twice"),
            ("a produce=1\nUser:a fetch=1\n", 2, "listed twice"),
            ("* produce=1\n* fetch=1\n", 2, "listed twice"),
            ("User: produce=1\n", 1, "empty principal"),
        ] {
            match parse(text) {
                Err(QuotaFileError::Line {
                    line: l, reason: r, ..
                }) => {
                    assert_eq!(l, line, "{text:?}: {r}");
                    assert!(r.contains(reason), "{text:?}: {r}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
