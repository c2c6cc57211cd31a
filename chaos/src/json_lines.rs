//! Reading a JSON-lines file (the history, the nemesis log): one value per non-blank
//! line, each error naming the file's 1-based line and the column, not serde_json's own
//! position (always "line 1" of the one-line input).

use std::io::{self, BufRead};

use serde::de::DeserializeOwned;

/// Why a JSON-lines file could not be read.
#[derive(Debug)]
pub enum LineError {
    Io(io::Error),
    Parse {
        line: usize,
        column: usize,
        reason: String,
    },
}

/// Every non-blank line of `input` as a `T`, with its 1-based line number.
pub fn parse_lines<T: DeserializeOwned>(input: impl BufRead) -> Result<Vec<(usize, T)>, LineError> {
    let mut values = Vec::new();
    for (n, line) in input.lines().enumerate() {
        let line_no = n + 1;
        let line = line.map_err(LineError::Io)?;
        if line.trim().is_empty() {
            continue;
        }
        let value = serde_json::from_str(&line).map_err(|error| {
            let message = error.to_string();
            let position = format!(" at line {} column {}", error.line(), error.column());
            LineError::Parse {
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
