//! Group commit. A [`SyncPoint`] fsyncs everything appended up to the moment it was
//! taken, without the caller holding the log: producers append under the log's mutex,
//! release it, then sync. Syncs are serialised and each records how far it reached, so
//! a sync whose data an earlier fsync already covered returns at once: one fsync
//! acknowledges every batch appended while the previous one ran.
//!
//! After a failed fsync the kernel may have dropped the dirty pages, so a later fsync
//! that succeeds proves nothing: the first failure is remembered and every later sync
//! fails until the log is reopened (and recovered).

use std::fs::File;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::error::LogError;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What a sync has to fsync: the active segment up to `end`, plus sealed segments that
/// were rolled without an fsync (flush policy `never`).
#[derive(Debug)]
struct Tail {
    active: Arc<File>,
    end: i64,
    unsynced_sealed: Vec<Arc<File>>,
}

#[derive(Debug)]
struct Synced {
    /// Offset below which everything is known fsynced.
    to: i64,
    /// The first fsync failure, if any.
    failure: Option<(io::ErrorKind, String)>,
}

impl Synced {
    fn check(&self) -> io::Result<()> {
        match &self.failure {
            None => Ok(()),
            Some((kind, message)) => Err(io::Error::new(
                *kind,
                format!("an earlier fsync of this log failed ({message}); reopen the log"),
            )),
        }
    }
}

/// State shared between a log and its sync points. Lock order: `synced`, then `tail`.
#[derive(Debug)]
pub(crate) struct SyncShared {
    /// Held for the whole of an fsync, which serialises them.
    synced: Mutex<Synced>,
    tail: Mutex<Tail>,
}

impl SyncShared {
    pub fn new(active: Arc<File>, end: i64, synced_to: i64) -> Arc<SyncShared> {
        Arc::new(SyncShared {
            synced: Mutex::new(Synced {
                to: synced_to,
                failure: None,
            }),
            tail: Mutex::new(Tail {
                active,
                end,
                unsynced_sealed: Vec::new(),
            }),
        })
    }

    /// The active segment now holds data up to `end`.
    pub fn appended(&self, end: i64) {
        lock(&self.tail).end = end;
    }

    /// A new active segment; `unsynced` is the old one if it was not fsynced.
    pub fn rolled(&self, active: Arc<File>, unsynced: Option<Arc<File>>) {
        let mut tail = lock(&self.tail);
        tail.active = active;
        tail.unsynced_sealed.extend(unsynced);
    }

    /// Runs an fsync the log does itself (flush, roll), under the same rules as a
    /// sync point: refused after an earlier failure, and a failure is remembered. On
    /// success everything below `offset` is durable; `all_sealed` says the fsync covered
    /// every sealed segment too.
    pub fn log_fsync(
        &self,
        offset: i64,
        all_sealed: bool,
        fsync: impl FnOnce() -> Result<(), LogError>,
    ) -> Result<(), LogError> {
        let mut synced = lock(&self.synced);
        synced.check()?;
        if let Err(e) = fsync() {
            let kind = match &e {
                LogError::Io(io) | LogError::IoAt { source: io, .. } => io.kind(),
                _ => io::ErrorKind::Other,
            };
            synced.failure = Some((kind, e.to_string()));
            return Err(e);
        }
        synced.to = synced.to.max(offset);
        if all_sealed {
            lock(&self.tail).unsynced_sealed.clear();
        }
        Ok(())
    }

    /// The log was cut to `end`; `active` is the segment that now ends it.
    pub fn truncated(&self, active: Arc<File>, end: i64) {
        let mut synced = lock(&self.synced);
        synced.to = synced.to.min(end);
        let mut tail = lock(&self.tail);
        tail.active = active;
        tail.end = end;
    }

    pub fn synced_to(&self) -> i64 {
        lock(&self.synced).to
    }

    fn sync_to(&self, end_offset: i64) -> io::Result<()> {
        let mut synced = lock(&self.synced);
        synced.check()?;
        if synced.to >= end_offset {
            return Ok(());
        }
        let (active, end, sealed) = {
            let mut tail = lock(&self.tail);
            let sealed = std::mem::take(&mut tail.unsynced_sealed);
            (Arc::clone(&tail.active), tail.end, sealed)
        };
        let result = sealed
            .iter()
            .chain(std::iter::once(&active))
            .try_for_each(|file| file.sync_data());
        if let Err(e) = result {
            synced.failure = Some((e.kind(), e.to_string()));
            return Err(e);
        }
        synced.to = synced.to.max(end);
        Ok(())
    }
}

/// A handle to fsync everything appended to a log up to [`SyncPoint::end_offset`],
/// usable after the log's lock is released. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SyncPoint {
    shared: Arc<SyncShared>,
    end_offset: i64,
}

impl SyncPoint {
    pub(crate) fn new(shared: Arc<SyncShared>, end_offset: i64) -> SyncPoint {
        SyncPoint { shared, end_offset }
    }

    /// Makes every batch below `end_offset` durable. Returns at once if an earlier
    /// fsync already covered them; otherwise fsyncs everything appended so far, which
    /// may reach further and so serve later callers too.
    pub fn sync(&self) -> io::Result<()> {
        self.shared.sync_to(self.end_offset)
    }

    /// The log end offset when this sync point was taken.
    pub fn end_offset(&self) -> i64 {
        self.end_offset
    }

    /// The offset below which the log is known to be fsynced right now.
    pub fn synced_offset(&self) -> i64 {
        self.shared.synced_to()
    }
}
