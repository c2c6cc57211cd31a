//! `--auth-token-file PATH`: the bearer tokens a server accepts, one `PRINCIPAL TOKEN`
//! line each (`alice s3cret` or `User:alice s3cret`; `#` starts a comment). Followed
//! as a [`WatchedFile`]: adding or revoking a token needs no restart and no signal; a
//! file that fails to parse keeps the previous tokens in force and is logged.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::principal::Principal;
use crate::watched_file::{FileContents, WatchedFile};

#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    #[error("cannot read token file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("token file {path}, line {line}: expected `PRINCIPAL TOKEN`")]
    Line { path: PathBuf, line: usize },
    #[error("token file {path}, line {line}: token already given on line {first}")]
    Duplicate {
        path: PathBuf,
        line: usize,
        first: usize,
    },
}

/// Token → principal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tokens {
    by_token: HashMap<String, Principal>,
}

impl Tokens {
    /// Parses a token file's text; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Tokens, TokenFileError> {
        let mut by_token = HashMap::new();
        let mut lines_of = HashMap::new();
        for (index, line) in text.lines().enumerate() {
            let line_number = index + 1;
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(name), Some(token), None) = (words.next(), words.next(), words.next()) else {
                return Err(TokenFileError::Line {
                    path: path.to_path_buf(),
                    line: line_number,
                });
            };
            let name = name.strip_prefix("User:").unwrap_or(name);
            if name.is_empty() {
                return Err(TokenFileError::Line {
                    path: path.to_path_buf(),
                    line: line_number,
                });
            }
            if let Some(first) = lines_of.insert(token.to_string(), line_number) {
                return Err(TokenFileError::Duplicate {
                    path: path.to_path_buf(),
                    line: line_number,
                    first,
                });
            }
            by_token.insert(token.to_string(), Principal::user(name));
        }
        Ok(Tokens { by_token })
    }

    pub fn principal(&self, token: &str) -> Option<&Principal> {
        self.by_token.get(token)
    }
}

/// The tokens of `--auth-token-file`, kept current as the file changes.
pub type TokenFile = WatchedFile<Tokens>;

impl FileContents for Tokens {
    type Error = TokenFileError;
    const WHAT: &'static str = "token file";

    fn read(path: &Path) -> Result<Tokens, TokenFileError> {
        let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Tokens::parse(&text, path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_give_user_principals() {
        let tokens = Tokens::parse(
            "# who token\nalice t-a\n\nUser:bob t-b  # trailing comment\n",
            Path::new("f"),
        )
        .expect("parsed");
        assert_eq!(tokens.principal("t-a"), Some(&Principal::user("alice")));
        assert_eq!(tokens.principal("t-b"), Some(&Principal::user("bob")));
        assert_eq!(tokens.principal("alice"), None);
    }

    #[test]
    fn bad_lines_are_named() {
        assert!(matches!(
            Tokens::parse("alice\n", Path::new("f")),
            Err(TokenFileError::Line { line: 1, .. })
        ));
        assert!(matches!(
            Tokens::parse("a t\nb t x\n", Path::new("f")),
            Err(TokenFileError::Line { line: 2, .. })
        ));
        assert!(matches!(
            Tokens::parse("a t\nb t\n", Path::new("f")),
            Err(TokenFileError::Duplicate {
                line: 2,
                first: 1,
                ..
            })
        ));
    }

    #[tokio::test]
    async fn a_changed_file_is_reloaded() {
        use std::time::Duration;
        use tokio_util::sync::CancellationToken;

        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("tokens");
        std::fs::write(&path, "alice t-a\n").expect("write");
        let file = TokenFile::load(&path).expect("loaded");
        let stop = CancellationToken::new();
        file.spawn_reload(stop.clone());
        std::fs::write(&path, "alice t-a\nbob t-bob-longer\n").expect("write");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while file.current().principal("t-bob-longer").is_none() {
            assert!(tokio::time::Instant::now() < deadline, "not reloaded");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.cancel();
    }
}
