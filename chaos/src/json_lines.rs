//! Reading a JSON-lines file (the history, the nemesis log): one value per non-blank
//! line, each error naming the file's 1-based line and the column, not serde_json's own
//! position (always "line 1" of the one-line input). Both files share the one error
//! type, [`JsonLinesError`], which names the file and what its lines hold.

use std::io::{self, BufRead};

use serde::de::DeserializeOwned;

/// What a JSON-lines file holds, as its errors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Contents {
    /// The file, e.g. `history`.
    pub file: &'static str,
    /// What each line is, e.g. `a history event`.
    pub each_line: &'static str,
}

/// A JSON-lines file that cannot be read (or whose values break a rule of the file).
#[derive(Debug, thiserror::Error)]
pub enum JsonLinesError {
    #[error("cannot read the {}: {source}", contents.file)]
    Io {
        contents: Contents,
        #[source]
        source: io::Error,
    },
    /// The line is not a JSON value of the documented shape.
    #[error("line {line}, column {column}: not {}: {reason}", contents.each_line)]
    Parse {
        contents: Contents,
        line: usize,
        column: usize,
        reason: String,
    },
    /// The line parses but breaks a rule of the file.
    #[error("line {line}: {reason}")]
    Invalid { line: usize, reason: String },
}

impl JsonLinesError {
    /// The 1-based line of the file the error is about, if any.
    pub fn line(&self) -> Option<usize> {
        match self {
            JsonLinesError::Io { .. } => None,
            JsonLinesError::Parse { line, .. } | JsonLinesError::Invalid { line, .. } => {
                Some(*line)
            }
        }
    }
}

/// Every non-blank line of `input` as a `T`, with its 1-based line number.
pub fn parse_lines<T: DeserializeOwned>(
    input: impl BufRead,
    contents: Contents,
) -> Result<Vec<(usize, T)>, JsonLinesError> {
    let mut values = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line_no = n + 1;
        let line = line.map_err(|source| JsonLinesError::Io { contents, source })?;
        if line.trim().is_empty() {
            continue;
        }
        let value = serde_json::from_str(&line).map_err(|error| {
            let message = error.to_string();
            let position = format!(" at line {} column {}", error.line(), error.column());
            JsonLinesError::Parse {
                contents,
                line: line_no,
                column: error.column(),
                reason: message
                    .strip_suffix(&position)
                    .unwrap_or(&message)
                    .to_owned(),
            }
        })?;
        values.push((line_no, value));
    }
    Ok(values)
}
