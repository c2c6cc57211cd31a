//! Per-principal byte-rate quotas on produce and fetch (`--quota-file`, issue 29): the
//! rates come from [`quota_file`], the holds from [`byte_rate`]; [`Quotas`] is the shell
//! the service asks after serving a request. Traffic the cluster makes for itself is
//! not counted: replica fetches (Kafka keeps replication apart from client quotas too)
//! and the coordinators' own reads and writes of internal topics.

pub mod byte_rate;
pub mod quota_file;

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use byte_rate::ByteRateLimiter;
pub use quota_file::{QuotaFile, QuotaFileError, QuotaKind, QuotaTable};

/// Holds the response `hold` long (none when zero); the time held, for its
/// `throttle_time_ms`.
pub async fn hold_response(hold: Duration) -> i32 {
    if hold.is_zero() {
        return 0;
    }
    tokio::time::sleep(hold).await;
    i32::try_from(hold.as_millis()).unwrap_or(i32::MAX)
}

/// The quotas of one broker: the file's rates and a bucket per principal and kind.
#[derive(Debug)]
pub struct Quotas {
    file: QuotaFile,
    produce: Mutex<ByteRateLimiter>,
    fetch: Mutex<ByteRateLimiter>,
    /// The limiters' clock: milliseconds since this instant (monotonic).
    started: Instant,
}

impl Quotas {
    /// Reads `--quota-file`; a broker refuses to start on an error. The file is
    /// followed until `stop`.
    pub fn load(path: &Path, stop: CancellationToken) -> Result<Quotas, QuotaFileError> {
        let file = QuotaFile::load(path)?;
        file.spawn_reload(stop);
        Ok(Quotas {
            file,
            produce: Mutex::default(),
            fetch: Mutex::default(),
            started: Instant::now(),
        })
    }

    /// Counts `bytes` of `kind` against `principal`'s quota and says how long to hold
    /// the response (zero: within the quota, or no quota).
    pub fn hold(&self, kind: QuotaKind, principal: &str, bytes: usize) -> Duration {
        let Some(rate) = self.file.current().rate(principal, kind) else {
            return Duration::ZERO;
        };
        let limiter = match kind {
            QuotaKind::Produce => &self.produce,
            QuotaKind::Fetch => &self.fetch,
        };
        let now_ms = i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX);
        let hold_ms = limiter.lock().unwrap_or_else(|e| e.into_inner()).record(
            principal,
            rate,
            bytes as u64,
            now_ms,
        );
        if hold_ms > 0 {
            // Labelled by principal: only principals with a quota get here, a set the
            // operator wrote down (or bounded by who has tokens, for the default).
            let labels = [
                ("kind", kind.as_str().to_string()),
                ("principal", principal.to_string()),
            ];
            metrics::counter!("idem_quota_throttled_requests_total", &labels).increment(1);
            metrics::counter!("idem_quota_throttle_ms_total", &labels).increment(hold_ms);
        }
        Duration::from_millis(hold_ms)
    }
}
