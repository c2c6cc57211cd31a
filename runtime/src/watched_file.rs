//! A settings file a server follows while it runs (the bearer tokens of
//! `--auth-token-file`, the byte-rate quotas of `--quota-file`): parsed at start, where
//! an error refuses the start, then re-read whenever its modification time or size
//! changes (checked every second), so a change needs no restart and no signal. A
//! change that fails to parse keeps the previous contents in force and is logged:
//! a typo while editing must not open or close the server.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

/// How often the file is checked for a change.
const RELOAD_EVERY: Duration = Duration::from_secs(1);

/// What a followed file holds, and how it is read.
pub trait FileContents: Sized + Send + Sync + 'static {
    type Error: std::error::Error + Send + Sync + 'static;
    /// What the file is, for the log: "token file".
    const WHAT: &'static str;
    /// Reads and parses the file at `path`.
    fn read(path: &Path) -> Result<Self, Self::Error>;
}

/// The contents of a file, kept current. Cheap to clone (shared).
#[derive(Debug)]
pub struct WatchedFile<T> {
    path: PathBuf,
    current: Arc<RwLock<Arc<T>>>,
    /// The file's modification time and size when it was read: a change after the
    /// load and before the reload task first looks is not missed.
    loaded: Option<(SystemTime, u64)>,
}

impl<T> Clone for WatchedFile<T> {
    fn clone(&self) -> Self {
        WatchedFile {
            path: self.path.clone(),
            current: self.current.clone(),
            loaded: self.loaded,
        }
    }
}

fn stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let metadata = std::fs::metadata(path).ok()?;
    Some((metadata.modified().ok()?, metadata.len()))
}

impl<T: FileContents> WatchedFile<T> {
    /// Reads the file; a server refuses to start on an error.
    pub fn load(path: &Path) -> Result<WatchedFile<T>, T::Error> {
        let loaded = stamp(path);
        Ok(WatchedFile {
            loaded,
            path: path.to_path_buf(),
            current: Arc::new(RwLock::new(Arc::new(T::read(path)?))),
        })
    }

    /// The contents last read successfully.
    pub fn current(&self) -> Arc<T> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Re-reads the file whenever it changes, until `stop`.
    pub fn spawn_reload(&self, stop: CancellationToken) {
        let file = self.clone();
        tokio::spawn(async move {
            let mut seen = file.loaded;
            loop {
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(RELOAD_EVERY) => {}
                }
                let now = stamp(&file.path);
                if now == seen {
                    continue;
                }
                seen = now;
                match T::read(&file.path) {
                    Ok(contents) => {
                        *file.current.write().unwrap_or_else(|e| e.into_inner()) =
                            Arc::new(contents);
                        tracing::info!(path = %file.path.display(), "{} reloaded", T::WHAT);
                    }
                    Err(error) => tracing::warn!(
                        %error,
                        "{} not reloaded; its previous contents stay in force",
                        T::WHAT
                    ),
                }
            }
        });
    }
}
