//! Producer settings, each with a documented default, and the three delivery modes of
//! the classic table. `acks` is derived from the mode, never set on its own, so no
//! combination can quietly weaken a guarantee.

use crate::tls::TlsConfig;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::connection::{DEFAULT_METADATA_MAX_AGE, MAX_MESSAGE_BYTES};
use crate::error::ClientError;

/// Kafka's limit on requests in flight per partition for which idempotence keeps order:
/// the broker caches the last 5 batches of each producer.
pub const MAX_IN_FLIGHT_EXACTLY_ONCE: usize = 5;

/// How a produced record may end up in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Delivery {
    /// acks=1, no retries: a failure is reported, never retried; a record may be lost.
    AtMostOnce,
    /// acks=all, retries until `delivery_timeout`, no producer id: a lost response and
    /// its retry write the record twice; retries may also reorder batches.
    AtLeastOnce,
    /// acks=all, idempotent producer id and per-partition sequence numbers, at most 5
    /// requests in flight per partition, retries resend the same bytes: each record is
    /// written once and in send order.
    #[default]
    ExactlyOnce,
}

impl Delivery {
    /// The `acks` this mode sends: -1 (all in-sync replicas) or 1 (leader only).
    pub fn acks(self) -> i32 {
        match self {
            Delivery::AtMostOnce => 1,
            Delivery::AtLeastOnce | Delivery::ExactlyOnce => -1,
        }
    }
    pub fn retries(self) -> bool {
        !matches!(self, Delivery::AtMostOnce)
    }
    pub fn idempotent(self) -> bool {
        matches!(self, Delivery::ExactlyOnce)
    }
}

impl fmt::Display for Delivery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Delivery::AtMostOnce => "at-most-once",
            Delivery::AtLeastOnce => "at-least-once",
            Delivery::ExactlyOnce => "exactly-once",
        })
    }
}

impl FromStr for Delivery {
    type Err = ClientError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().replace('_', "-").as_str() {
            "exactly-once" => Ok(Delivery::ExactlyOnce),
            "at-least-once" => Ok(Delivery::AtLeastOnce),
            "at-most-once" => Ok(Delivery::AtMostOnce),
            other => Err(ClientError::InvalidConfig(format!(
                "unknown delivery mode {other:?}: expected exactly-once, at-least-once or at-most-once"
            ))),
        }
    }
}

/// Everything a [`crate::Producer`] needs. Build with [`ProducerConfig::new`] and adjust
/// fields; [`ProducerConfig::validate`] runs on connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerConfig {
    /// `host:port` of a broker (an `http://` prefix is accepted), or a comma-separated
    /// list of them, tried in turn until one answers (Kafka's `bootstrap.servers`).
    pub bootstrap: String,
    /// Default [`Delivery::ExactlyOnce`].
    pub delivery: Delivery,
    /// How long a partition's open batch waits for more records before it is sent.
    /// Default 5 ms.
    pub linger: Duration,
    /// A batch is sealed once it holds about this many bytes. Default 256 KiB: under
    /// load a partition's batches fill up while its 5 requests are in flight, and
    /// 256 KiB batches carried 35 to 50% more records/s than 64 KiB ones in every
    /// delivery mode (docs/benchmarks.md); below that load `linger` seals them first.
    pub batch_size: usize,
    /// Produce requests outstanding per partition. Default 5; at most 5 for exactly-once.
    pub max_in_flight: usize,
    /// Upper bound on the time from `send` to success or failure, retries included.
    /// Default 120 s (Kafka's `delivery.timeout.ms`). Must be at least
    /// `linger + request_timeout`.
    pub delivery_timeout: Duration,
    /// How long one produce request may take before it counts as lost. Default 30 s.
    pub request_timeout: Duration,
    /// Pause before resending after a failure. Default 100 ms.
    pub retry_backoff: Duration,
    /// Bytes of records buffered per partition (open batch plus unacknowledged
    /// batches) before `send` waits. Default 32 MiB.
    pub buffer_memory: usize,
    /// How old a topic's metadata may get before a `send` to it asks for it again (in
    /// the background), so partitions added to the topic are used. Default 5 min
    /// (Kafka's `metadata.max.age.ms`).
    pub metadata_max_age: Duration,
    /// What every call presents (a bearer token; none = `User:ANONYMOUS`).
    pub credentials: crate::credentials::Credentials,
    /// TLS for every connection (brokers and coordinators); `None`, the default, dials
    /// in plaintext.
    pub tls: Option<TlsConfig>,
}

impl ProducerConfig {
    pub fn new(bootstrap: impl Into<String>) -> Self {
        ProducerConfig {
            bootstrap: bootstrap.into(),
            delivery: Delivery::ExactlyOnce,
            linger: Duration::from_millis(5),
            batch_size: 256 * 1024,
            max_in_flight: MAX_IN_FLIGHT_EXACTLY_ONCE,
            delivery_timeout: Duration::from_secs(120),
            request_timeout: Duration::from_secs(30),
            retry_backoff: Duration::from_millis(100),
            buffer_memory: 32 * 1024 * 1024,
            metadata_max_age: DEFAULT_METADATA_MAX_AGE,
            credentials: Default::default(),
            tls: None,
        }
    }

    pub fn with_delivery(mut self, delivery: Delivery) -> Self {
        self.delivery = delivery;
        self
    }

    /// The `acks` every produce request carries.
    pub fn acks(&self) -> i32 {
        self.delivery.acks()
    }

    /// Checks every setting; the producer refuses to start with an invalid one.
    pub fn validate(&self) -> Result<(), ClientError> {
        let invalid = |m: String| Err(ClientError::InvalidConfig(m));
        if self.bootstrap.trim().is_empty() {
            return invalid("bootstrap address is empty".into());
        }
        if self.max_in_flight == 0 {
            return invalid("max_in_flight must be at least 1".into());
        }
        if self.delivery.idempotent() && self.max_in_flight > MAX_IN_FLIGHT_EXACTLY_ONCE {
            return invalid(format!(
                "exactly-once allows at most {MAX_IN_FLIGHT_EXACTLY_ONCE} requests in flight per partition, got {}",
                self.max_in_flight
            ));
        }
        if self.batch_size == 0 || self.batch_size > MAX_MESSAGE_BYTES / 2 {
            return invalid(format!(
                "batch_size must be between 1 and {} bytes, got {}",
                MAX_MESSAGE_BYTES / 2,
                self.batch_size
            ));
        }
        if self.buffer_memory < self.batch_size {
            return invalid(format!(
                "buffer_memory ({}) must be at least batch_size ({})",
                self.buffer_memory, self.batch_size
            ));
        }
        if self.request_timeout.is_zero() {
            return invalid("request_timeout must be positive".into());
        }
        if self.request_timeout.as_millis() > i32::MAX as u128 {
            return invalid("request_timeout does not fit the protocol's i32 milliseconds".into());
        }
        if self.delivery_timeout < self.linger + self.request_timeout {
            return invalid(format!(
                "delivery_timeout ({:?}) must be at least linger + request_timeout ({:?})",
                self.delivery_timeout,
                self.linger + self.request_timeout
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_parses_the_cli_spellings() {
        assert_eq!(
            "exactly-once".parse::<Delivery>().ok(),
            Some(Delivery::ExactlyOnce)
        );
        assert_eq!(
            "at-least-once".parse::<Delivery>().ok(),
            Some(Delivery::AtLeastOnce)
        );
        assert_eq!(
            "at-most-once".parse::<Delivery>().ok(),
            Some(Delivery::AtMostOnce)
        );
        assert_eq!(
            "AT_MOST_ONCE".parse::<Delivery>().ok(),
            Some(Delivery::AtMostOnce)
        );
        assert!(matches!(
            "twice".parse::<Delivery>(),
            Err(ClientError::InvalidConfig(_))
        ));
    }

    #[test]
    fn delivery_round_trips_through_display() {
        for d in [
            Delivery::AtMostOnce,
            Delivery::AtLeastOnce,
            Delivery::ExactlyOnce,
        ] {
            assert_eq!(d.to_string().parse::<Delivery>().ok(), Some(d));
        }
    }

    #[test]
    fn acks_follow_the_delivery_mode() {
        let config = ProducerConfig::new("127.0.0.1:1");
        assert_eq!(config.acks(), -1);
        assert_eq!(
            config.clone().with_delivery(Delivery::AtLeastOnce).acks(),
            -1
        );
        assert_eq!(config.with_delivery(Delivery::AtMostOnce).acks(), 1);
    }

    #[test]
    fn defaults_are_documented_values_and_valid() {
        let config = ProducerConfig::new("127.0.0.1:9092");
        assert_eq!(config.delivery, Delivery::ExactlyOnce);
        assert_eq!(config.linger, Duration::from_millis(5));
        assert_eq!(config.batch_size, 256 * 1024);
        assert_eq!(config.max_in_flight, 5);
        assert_eq!(config.delivery_timeout, Duration::from_secs(120));
        assert_eq!(config.request_timeout, Duration::from_secs(30));
        assert_eq!(config.retry_backoff, Duration::from_millis(100));
        assert!(config.validate().is_ok());
    }

    #[test]
    fn exactly_once_refuses_more_than_five_in_flight() {
        let mut config = ProducerConfig::new("127.0.0.1:9092");
        config.max_in_flight = 6;
        assert!(matches!(
            config.validate(),
            Err(ClientError::InvalidConfig(_))
        ));
        config.delivery = Delivery::AtLeastOnce;
        assert!(config.validate().is_ok());
    }

    #[test]
    fn delivery_timeout_must_cover_one_request() {
        let mut config = ProducerConfig::new("127.0.0.1:9092");
        config.delivery_timeout = Duration::from_secs(10);
        assert!(matches!(
            config.validate(),
            Err(ClientError::InvalidConfig(_))
        ));
    }

    #[test]
    fn empty_bootstrap_and_zero_sizes_are_refused() {
        let base = ProducerConfig::new("127.0.0.1:9092");
        let mut c = base.clone();
        c.bootstrap = " ".into();
        assert!(c.validate().is_err());
        let mut c = base.clone();
        c.batch_size = 0;
        assert!(c.validate().is_err());
        let mut c = base;
        c.max_in_flight = 0;
        assert!(c.validate().is_err());
    }
}
