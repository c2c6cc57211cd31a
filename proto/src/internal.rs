//! Internal topics: the topics idem keeps its own state in (`__transaction_state`, later
//! `__consumer_offsets`). One rule names them for every process: a name starting with
//! `__`. Clients may read them but never create or write them; only the coordinator that
//! owns a partition appends to it (docs/protocol.md, "Internal topics").

/// The prefix that makes a topic internal.
pub const INTERNAL_TOPIC_PREFIX: &str = "__";

/// Whether `topic` is an internal topic, written only by its owning coordinator.
pub fn is_internal_topic(topic: &str) -> bool {
    topic.starts_with(INTERNAL_TOPIC_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::TXN_LOG_TOPIC;

    #[test]
    fn given_names_then_only_double_underscore_ones_are_internal() {
        assert!(is_internal_topic(TXN_LOG_TOPIC));
        assert!(is_internal_topic("__consumer_offsets"));
        assert!(is_internal_topic("__"));
        for name in ["orders", "_orders", "orders__", "a__b", ""] {
            assert!(!is_internal_topic(name), "{name:?}");
        }
    }
}
