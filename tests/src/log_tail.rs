//! The end of a process's log file, for a failing test's message: the lines nearest
//! the failure, not the whole file.

use std::path::Path;

/// The last `lines` lines of the file at `path` (empty if it cannot be read), and how
/// many lines it has.
pub fn log_tail(path: &Path, lines: usize) -> (String, usize) {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = log.lines().collect();
    let from = all.len().saturating_sub(lines);
    (all[from..].join("\n"), all.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_lines_and_the_count_are_returned() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("log");
        std::fs::write(&path, "a\nb\nc\n").expect("write");
        assert_eq!(log_tail(&path, 2), ("b\nc".to_string(), 3));
        assert_eq!(log_tail(&path, 9), ("a\nb\nc".to_string(), 3));
        assert_eq!(log_tail(&dir.path().join("none"), 2), (String::new(), 0));
    }
}
