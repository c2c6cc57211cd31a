//! Solo ownership (`idem dev`, no etcd): this coordinator owns every transaction log
//! partition. Its coordinator epoch and writer producer id live in
//! `{data_dir}/coordinator-state.json`; every start (and every release after a
//! fencing) writes epoch + 1 there, fsynced, before claiming anything, so no two runs
//! ever write the log under the same epoch. The writer producer id is allocated once
//! and kept.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use backon::Retryable;
use idem_pidstore::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;

use crate::error::CoordinatorError;
use crate::ownership::token::OwnershipToken;
use crate::ownership::{Claim, OwnerInfo, Ownership};
use crate::producer_ids::SharedProducerIds;
use crate::retry;

pub const STATE_FILE: &str = "coordinator-state.json";

/// What the state file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SoloState {
    pub coordinator_epoch: i32,
    pub writer_producer_id: i64,
}

/// Reads the state file; `None` when there is none yet.
pub fn read_state(path: &Path) -> Result<Option<SoloState>, CoordinatorError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            CoordinatorError::CorruptStateFile {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(CoordinatorError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Replaces the state file atomically and durably (temp file, fsync, rename, fsync of
/// the directory).
pub fn write_state(path: &Path, state: SoloState) -> Result<(), CoordinatorError> {
    let io = |source| CoordinatorError::Io {
        path: path.to_path_buf(),
        source,
    };
    let json = serde_json::to_vec(&state).unwrap_or_default();
    idem_runtime::atomic_file::replace(path, &json).map_err(io)
}

/// The next epoch after `previous`; an exhausted epoch (it must fit the writer's i16
/// producer epoch) is an error.
pub fn next_epoch(previous: Option<SoloState>) -> Result<i32, CoordinatorError> {
    let epoch = previous.map_or(0, |s| s.coordinator_epoch) + 1;
    if epoch > i32::from(i16::MAX) {
        return Err(CoordinatorError::EpochExhausted(epoch));
    }
    Ok(epoch)
}

pub struct SoloOwnership {
    id: i32,
    address: String,
    path: PathBuf,
    pids: SharedProducerIds,
    state: Mutex<Shared>,
    released: mpsc::UnboundedSender<i32>,
    released_rx: Mutex<Option<mpsc::UnboundedReceiver<i32>>>,
}

#[derive(Default)]
struct Shared {
    epochs: HashMap<i32, i32>,
    tokens: HashMap<i32, OwnershipToken>,
}

impl SoloOwnership {
    /// Checks that the data dir is usable and the state file (if any) readable.
    pub fn open(
        id: i32,
        address: String,
        data_dir: &Path,
        pids: SharedProducerIds,
    ) -> Result<Self, CoordinatorError> {
        std::fs::create_dir_all(data_dir).map_err(|source| CoordinatorError::Io {
            path: data_dir.to_path_buf(),
            source,
        })?;
        let path = data_dir.join(STATE_FILE);
        read_state(&path)?;
        let (released, released_rx) = mpsc::unbounded_channel();
        Ok(SoloOwnership {
            id,
            address,
            path,
            pids,
            state: Mutex::new(Shared::default()),
            released,
            released_rx: Mutex::new(Some(released_rx)),
        })
    }

    /// Bumps the epoch in the file (allocating the writer id on the first run).
    async fn bump(&self) -> Result<SoloState, CoordinatorError> {
        let previous = read_state(&self.path)?;
        let coordinator_epoch = next_epoch(previous)?;
        let writer_producer_id = match previous {
            Some(state) => state.writer_producer_id,
            None => self.pids.next_producer_id().await?,
        };
        let state = SoloState {
            coordinator_epoch,
            writer_producer_id,
        };
        write_state(&self.path, state)?;
        Ok(state)
    }

    /// Bumps the epoch, retrying what may pass (an I/O error, producer ids not yet
    /// available); a corrupt state file or an exhausted epoch never passes.
    async fn bump_until_done(&self) -> Option<SoloState> {
        let fatal = |e: &CoordinatorError| {
            matches!(
                e,
                CoordinatorError::CorruptStateFile { .. } | CoordinatorError::EpochExhausted(_)
            )
        };
        let bumped = (|| self.bump())
            .retry(retry::until_done())
            .when(|e| !fatal(e))
            .notify(|e, _| {
                tracing::warn!(error = %e, "solo coordinator epoch bump failed; retrying");
            })
            .await;
        bumped
            .inspect_err(|e| {
                tracing::error!(error = %e, "solo coordinator cannot claim the transaction log");
            })
            .ok()
    }

    fn claim(&self, partition: i32, state: SoloState) -> Claim {
        let token = OwnershipToken::new();
        if let Ok(mut shared) = self.state.lock() {
            shared.epochs.insert(partition, state.coordinator_epoch);
            if let Some(old) = shared.tokens.insert(partition, token.clone()) {
                old.lose();
            }
        }
        Claim {
            partition,
            coordinator_epoch: state.coordinator_epoch,
            writer_producer_id: state.writer_producer_id,
            token,
        }
    }
}

impl Ownership for SoloOwnership {
    fn run(
        self: Arc<Self>,
        partitions: i32,
        claims: mpsc::UnboundedSender<Claim>,
    ) -> BoxFuture<'static, ()> {
        Box::pin(async move {
            let Some(state) = self.bump_until_done().await else {
                return;
            };
            tracing::info!(
                coordinator_epoch = state.coordinator_epoch,
                writer_producer_id = state.writer_producer_id,
                partitions,
                "solo coordinator owns every transaction log partition"
            );
            for partition in 0..partitions {
                if claims.send(self.claim(partition, state)).is_err() {
                    return;
                }
            }
            let Some(mut released) = self.released_rx.lock().ok().and_then(|mut r| r.take()) else {
                return;
            };
            while let Some(partition) = released.recv().await {
                let Some(state) = self.bump_until_done().await else {
                    return;
                };
                tracing::info!(
                    partition,
                    coordinator_epoch = state.coordinator_epoch,
                    "claiming a released transaction log partition again"
                );
                if claims.send(self.claim(partition, state)).is_err() {
                    return;
                }
            }
        })
    }

    fn owner_of(&self, partition: i32) -> Option<OwnerInfo> {
        let shared = self.state.lock().ok()?;
        let coordinator_epoch = *shared.epochs.get(&partition)?;
        Some(OwnerInfo {
            coordinator_id: self.id,
            address: self.address.clone(),
            external_address: None,
            coordinator_epoch,
        })
    }

    fn holds_lease(&self) -> bool {
        true
    }

    fn release(&self, partition: i32, coordinator_epoch: i32) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let released = self.state.lock().is_ok_and(|mut shared| {
                if shared.epochs.get(&partition) != Some(&coordinator_epoch) {
                    return false; // an older claim; the current one stays
                }
                shared.epochs.remove(&partition);
                shared.tokens.remove(&partition).is_some_and(|token| {
                    token.lose();
                    true
                })
            });
            if released {
                let _ = self.released.send(partition);
            }
        })
    }

    fn leave(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            if let Ok(mut shared) = self.state.lock() {
                for (_, token) in shared.tokens.drain() {
                    token.lose();
                }
                shared.epochs.clear();
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicI64, Ordering};

    use idem_runtime::shutdown::{CancellationToken, Duties};

    use super::*;
    use crate::producer_ids::ProducerIdSource;

    struct Counter(AtomicI64);

    impl ProducerIdSource for Counter {
        fn next_producer_id(&self) -> BoxFuture<'_, Result<i64, CoordinatorError>> {
            Box::pin(async move { Ok(self.0.fetch_add(1, Ordering::SeqCst)) })
        }
    }

    async fn claims_of_one_run(dir: &Path, pids: Arc<Counter>) -> Vec<Claim> {
        let ownership =
            Arc::new(SoloOwnership::open(0, "127.0.0.1:1".into(), dir, pids).expect("opens"));
        let (tx, mut rx) = mpsc::unbounded_channel();
        let run = Duties::under(&CancellationToken::new());
        run.spawn("solo ownership", ownership.clone().run(3, tx));
        let mut claims = Vec::new();
        for _ in 0..3 {
            claims.push(rx.recv().await.expect("claim"));
        }
        run.stop().await;
        claims
    }

    #[tokio::test]
    async fn every_start_claims_every_partition_under_a_higher_epoch_and_the_same_writer() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = Arc::new(Counter(AtomicI64::new(500)));
        let first = claims_of_one_run(dir.path(), pids.clone()).await;
        assert_eq!(
            first.iter().map(|c| c.partition).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert!(first
            .iter()
            .all(|c| c.coordinator_epoch == 1 && c.writer_producer_id == 500));
        let second = claims_of_one_run(dir.path(), pids.clone()).await;
        assert!(second
            .iter()
            .all(|c| c.coordinator_epoch == 2 && c.writer_producer_id == 500));
        assert_eq!(
            pids.0.load(Ordering::SeqCst),
            501,
            "the writer id is allocated once"
        );
        assert_eq!(
            read_state(&dir.path().join(STATE_FILE)).expect("reads"),
            Some(SoloState {
                coordinator_epoch: 2,
                writer_producer_id: 500
            })
        );
    }

    #[tokio::test]
    async fn a_released_partition_is_claimed_again_under_the_next_epoch() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ownership = Arc::new(
            SoloOwnership::open(
                4,
                "h:1".into(),
                dir.path(),
                Arc::new(Counter(AtomicI64::new(9))),
            )
            .expect("opens"),
        );
        let (tx, mut rx) = mpsc::unbounded_channel();
        let run = Duties::under(&CancellationToken::new());
        run.spawn("solo ownership", ownership.clone().run(2, tx));
        let first = rx.recv().await.expect("claim");
        rx.recv().await.expect("claim");
        ownership.release(first.partition, 1).await;
        ownership.release(first.partition, 1).await; // a repeat releases nothing more
        assert!(first.token.is_lost());
        let again = rx.recv().await.expect("claim");
        assert_eq!((again.partition, again.coordinator_epoch), (0, 2));
        assert_eq!(
            ownership.owner_of(0),
            Some(OwnerInfo {
                coordinator_id: 4,
                address: "h:1".into(),
                external_address: None,
                coordinator_epoch: 2
            })
        );
        run.stop().await;
    }

    #[test]
    fn a_corrupt_state_file_is_an_error_not_a_fresh_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join(STATE_FILE), b"{not json").expect("write");
        let opened = SoloOwnership::open(
            0,
            "h:1".into(),
            dir.path(),
            Arc::new(Counter(AtomicI64::new(0))),
        );
        assert!(matches!(
            opened,
            Err(CoordinatorError::CorruptStateFile { .. })
        ));
    }

    #[test]
    fn the_epoch_must_fit_a_producer_epoch() {
        let at = |coordinator_epoch| {
            Some(SoloState {
                coordinator_epoch,
                writer_producer_id: 1,
            })
        };
        assert_eq!(next_epoch(None).expect("epoch"), 1);
        assert_eq!(next_epoch(at(41)).expect("epoch"), 42);
        assert!(matches!(
            next_epoch(at(i32::from(i16::MAX))),
            Err(CoordinatorError::EpochExhausted(_))
        ));
    }
}
