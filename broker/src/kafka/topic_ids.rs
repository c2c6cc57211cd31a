//! Kafka's topic ids (KIP-516) for idem's topics, both ways: KIP-848's heartbeat and
//! ConsumerGroupDescribe name assigned and owned partitions by topic id, idem's group
//! coordinator by topic name. The ids are the ones Metadata v10+ answers, so a client
//! resolves them with the Metadata it already has. A topic without an id (created
//! before ids existed) cannot be named by id and is left out of assignments.

use std::collections::HashMap;

use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::service::BrokerService;

/// A snapshot of every topic's id, taken once per request.
#[derive(Debug, Default, Clone)]
pub struct TopicIds {
    by_name: HashMap<String, Uuid>,
    by_id: HashMap<Uuid, String>,
}

impl TopicIds {
    pub fn of(service: &BrokerService) -> Self {
        Self::from_pairs(
            service
                .topic_ids()
                .into_iter()
                .filter(|(_, id)| !id.is_zero())
                .map(|(name, id)| (name, Uuid::from_bytes(*id.as_bytes()))),
        )
    }

    pub fn from_pairs(pairs: impl IntoIterator<Item = (String, Uuid)>) -> Self {
        let mut ids = TopicIds::default();
        for (name, id) in pairs {
            ids.by_id.insert(id, name.clone());
            ids.by_name.insert(name, id);
        }
        ids
    }

    pub fn id(&self, name: &str) -> Option<Uuid> {
        self.by_name.get(name).copied()
    }

    pub fn name(&self, id: &Uuid) -> Option<&str> {
        self.by_id.get(id).map(String::as_str)
    }
}

/// `Some(text)` as the crate's string, `None` for an empty one (Kafka's nullable
/// strings: an empty error message is sent as null).
pub fn nullable(text: String) -> Option<StrBytes> {
    (!text.is_empty()).then(|| StrBytes::from_string(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn given_pairs_then_names_and_ids_resolve_both_ways() {
        let a = Uuid::from_u128(1);
        let ids = TopicIds::from_pairs([("orders".to_string(), a)]);
        assert_eq!(ids.id("orders"), Some(a));
        assert_eq!(ids.name(&a), Some("orders"));
        assert_eq!(ids.id("other"), None);
        assert_eq!(ids.name(&Uuid::from_u128(2)), None);
    }
}
