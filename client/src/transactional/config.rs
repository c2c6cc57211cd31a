//! Settings of a [`crate::TransactionalProducer`], each with a documented default. Its
//! data path is the exactly-once producer's (acks=all, at most 5 batches in flight per
//! partition, ordered retries), so the derived [`ProducerConfig`] is validated too.

use crate::tls::TlsConfig;
use std::time::Duration;

use crate::error::ClientError;
use crate::producer::config::{Delivery, ProducerConfig, MAX_IN_FLIGHT_EXACTLY_ONCE};

/// Everything a transactional producer needs. Build with [`TransactionalConfig::new`]
/// and adjust fields; validated on connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionalConfig {
    /// `host:port` of a broker (an `http://` prefix is accepted), or a comma-separated
    /// list of them, tried in turn until one answers (Kafka's `bootstrap.servers`).
    pub bootstrap: String,
    /// Names this producer across restarts: a new instance with the same id fences the
    /// old one and aborts its open transaction.
    pub transactional_id: String,
    /// How long the coordinator lets a transaction stay open before it aborts it (and
    /// fences this producer). Default 60 s.
    pub transaction_timeout: Duration,
    /// How long one request may take. Default 30 s.
    pub request_timeout: Duration,
    /// Upper bound from `send` to its record's success or failure, retries included;
    /// also bounds each coordinator call with its retries. Default 120 s. Must be at
    /// least `linger + request_timeout`.
    pub delivery_timeout: Duration,
    /// A batch is sealed once it holds about this many bytes. Default 256 KiB.
    pub batch_size: usize,
    /// How long a partition's open batch waits for more records. Default 5 ms.
    pub linger: Duration,
    /// How old a topic's metadata may get before a `send` to it asks for it again, so
    /// partitions added to the topic are used. Default 5 min.
    pub metadata_max_age: Duration,
    /// What every call presents (a bearer token; none = `User:ANONYMOUS`).
    pub credentials: crate::credentials::Credentials,
    /// TLS for every connection (brokers and coordinators); `None`, the default, dials
    /// in plaintext.
    pub tls: Option<TlsConfig>,
}

impl TransactionalConfig {
    pub fn new(bootstrap: impl Into<String>, transactional_id: impl Into<String>) -> Self {
        let defaults = ProducerConfig::new("");
        TransactionalConfig {
            bootstrap: bootstrap.into(),
            transactional_id: transactional_id.into(),
            transaction_timeout: Duration::from_secs(60),
            request_timeout: defaults.request_timeout,
            delivery_timeout: defaults.delivery_timeout,
            batch_size: defaults.batch_size,
            linger: defaults.linger,
            metadata_max_age: defaults.metadata_max_age,
            credentials: defaults.credentials,
            tls: None,
        }
    }

    /// The exactly-once producer settings the partitions' data path runs with.
    pub fn producer_config(&self) -> ProducerConfig {
        ProducerConfig {
            linger: self.linger,
            batch_size: self.batch_size,
            max_in_flight: MAX_IN_FLIGHT_EXACTLY_ONCE,
            delivery_timeout: self.delivery_timeout,
            request_timeout: self.request_timeout,
            metadata_max_age: self.metadata_max_age,
            credentials: self.credentials.clone(),
            tls: self.tls.clone(),
            ..ProducerConfig::new(self.bootstrap.clone()).with_delivery(Delivery::ExactlyOnce)
        }
    }

    /// `transaction_timeout` as the protocol's milliseconds.
    pub fn transaction_timeout_ms(&self) -> i32 {
        self.transaction_timeout.as_millis().min(i32::MAX as u128) as i32
    }

    /// Checks every setting; the producer refuses to start with an invalid one.
    pub fn validate(&self) -> Result<(), ClientError> {
        if self.transactional_id.trim().is_empty() {
            return Err(ClientError::InvalidConfig(
                "transactional_id is empty".into(),
            ));
        }
        if self.transaction_timeout.is_zero()
            || self.transaction_timeout.as_millis() > i32::MAX as u128
        {
            return Err(ClientError::InvalidConfig(format!(
                "transaction_timeout must be between 1 ms and {} ms, got {:?}",
                i32::MAX,
                self.transaction_timeout
            )));
        }
        self.producer_config().validate()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_documented_values_and_valid() {
        let c = TransactionalConfig::new("127.0.0.1:9092", "orders");
        assert_eq!(c.transaction_timeout, Duration::from_secs(60));
        assert_eq!(c.request_timeout, Duration::from_secs(30));
        assert_eq!(c.delivery_timeout, Duration::from_secs(120));
        assert_eq!(c.batch_size, 256 * 1024);
        assert_eq!(c.linger, Duration::from_millis(5));
        assert_eq!(c.transaction_timeout_ms(), 60_000);
        assert!(c.validate().is_ok());
    }

    #[test]
    fn the_data_path_is_exactly_once_with_five_in_flight() {
        let p = TransactionalConfig::new("b:1", "t").producer_config();
        assert_eq!(p.delivery, Delivery::ExactlyOnce);
        assert_eq!(p.max_in_flight, 5);
        assert_eq!(p.acks(), -1);
    }

    #[test]
    fn empty_ids_zero_timeouts_and_bad_producer_settings_are_refused() {
        let base = TransactionalConfig::new("127.0.0.1:9092", "orders");
        let invalid =
            |c: TransactionalConfig| matches!(c.validate(), Err(ClientError::InvalidConfig(_)));
        assert!(invalid(TransactionalConfig {
            transactional_id: " ".into(),
            ..base.clone()
        }));
        assert!(invalid(TransactionalConfig {
            transaction_timeout: Duration::ZERO,
            ..base.clone()
        }));
        assert!(invalid(TransactionalConfig {
            transaction_timeout: Duration::from_secs(u64::from(u32::MAX)),
            ..base.clone()
        }));
        assert!(invalid(TransactionalConfig {
            delivery_timeout: Duration::from_secs(1),
            ..base.clone()
        }));
        assert!(invalid(TransactionalConfig {
            bootstrap: String::new(),
            ..base
        }));
    }
}
