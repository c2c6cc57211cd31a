//! The five delivery modes a bench compares, as Kafka's figures name them, and the
//! producer settings each one means. Only the mode decides acks, retries, idempotence
//! and requests in flight, so two runs of one mode always measure the same thing.

use std::fmt;
use std::str::FromStr;

use idem_client::{Delivery, ProducerConfig};

/// Requests in flight per partition of the pipelined modes (Kafka's default, and the
/// most idempotence keeps in order).
const PIPELINED: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// acks=1, no retries, 5 in flight.
    AtMostOnce,
    /// acks=all, retries, 1 in flight: in order, but a retry may duplicate.
    AtLeastOnce,
    /// acks=all, retries, 5 in flight: a retry may duplicate and reorder.
    AtLeastOnceUnordered,
    /// Idempotent producer: acks=all, 5 in flight, each record written once, in order.
    ExactlyOnce,
    /// Transactional producer committing every `--txn-ms`.
    Transactional,
}

impl Mode {
    /// Every mode, in the order `--modes all` runs them.
    pub const ALL: [Mode; 5] = [
        Mode::AtMostOnce,
        Mode::AtLeastOnce,
        Mode::AtLeastOnceUnordered,
        Mode::ExactlyOnce,
        Mode::Transactional,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Mode::AtMostOnce => "at-most-once",
            Mode::AtLeastOnce => "at-least-once",
            Mode::AtLeastOnceUnordered => "at-least-once-unordered",
            Mode::ExactlyOnce => "exactly-once",
            Mode::Transactional => "transactional",
        }
    }

    /// Whether a correct run of this mode reads back each record once and in each
    /// producer's order (the other modes may duplicate under faults, or lose records).
    pub fn promises_exactly_once(self) -> bool {
        matches!(self, Mode::ExactlyOnce | Mode::Transactional)
    }

    /// The plain producer's settings; `None` for the transactional mode, whose data path
    /// the SDK fixes (exactly-once, 5 in flight).
    pub fn producer_config(self, bootstrap: &str) -> Option<ProducerConfig> {
        let (delivery, max_in_flight) = match self {
            Mode::AtMostOnce => (Delivery::AtMostOnce, PIPELINED),
            Mode::AtLeastOnce => (Delivery::AtLeastOnce, 1),
            Mode::AtLeastOnceUnordered => (Delivery::AtLeastOnce, PIPELINED),
            Mode::ExactlyOnce => (Delivery::ExactlyOnce, PIPELINED),
            Mode::Transactional => return None,
        };
        Some(ProducerConfig {
            max_in_flight,
            ..ProducerConfig::new(bootstrap).with_delivery(delivery)
        })
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Mode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == wanted)
            .ok_or_else(|| {
                let names: Vec<&str> = Mode::ALL.iter().map(|m| m.name()).collect();
                format!("unknown mode {s:?}: expected all or {}", names.join(", "))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for mode in Mode::ALL {
            assert_eq!(mode.name().parse::<Mode>(), Ok(mode));
        }
        assert_eq!("EXACTLY_ONCE".parse::<Mode>(), Ok(Mode::ExactlyOnce));
    }

    #[test]
    fn each_mode_sets_what_its_name_promises() {
        let config = |m: Mode| m.producer_config("b:1").expect("plain mode");
        assert_eq!(config(Mode::AtMostOnce).acks(), 1);
        assert_eq!(config(Mode::AtMostOnce).max_in_flight, 5);
        assert_eq!(config(Mode::AtLeastOnce).acks(), -1);
        assert_eq!(config(Mode::AtLeastOnce).max_in_flight, 1);
        assert_eq!(config(Mode::AtLeastOnceUnordered).max_in_flight, 5);
        assert!(!config(Mode::AtLeastOnceUnordered).delivery.idempotent());
        assert!(config(Mode::ExactlyOnce).delivery.idempotent());
        assert!(Mode::Transactional.producer_config("b:1").is_none());
        for mode in Mode::ALL.into_iter().filter(|m| *m != Mode::Transactional) {
            assert!(config(mode).validate().is_ok(), "{mode}");
        }
    }
}
