//! A single-node broker for the Kafka handlers' unit tests: no network, no etcd; told
//! about a coordinator (or not), serving Kafka on 127.0.0.1:9094, with ACLs when asked.

use std::sync::Arc;
use std::time::Duration;

use idem_pidstore::{ProducerIdManager, SledPidStore};
use idem_runtime::acl::{
    Acl, Authorizer, AuthorizerKind, Operation, PatternType, Permission, ResourceType,
};
use idem_runtime::authn::NodeCredential;

use super::coordinator_link::{CoordinatorLink, LinkTimeouts};
use super::KafkaContext;
use crate::log::LogConfig;
use crate::partition::PartitionSettings;
use crate::service::BrokerService;
use crate::topics::TopicRegistry;

/// Broker 7 in `dir`, its `--coordinator`, and ACLs to check (`None`: open).
pub fn service(
    dir: &std::path::Path,
    coordinator: Option<&str>,
    acls: Option<Vec<Acl>>,
) -> BrokerService {
    let settings = PartitionSettings {
        log: LogConfig::default(),
        max_batch_bytes: 1 << 20,
        producer_id_expiration_ms: 60_000,
        topic_defaults: crate::topic_config::TopicDefaults::new(
            LogConfig::DEFAULT_SEGMENT_BYTES,
            1 << 20,
        ),
    };
    let topics = TopicRegistry::open(dir, 7, settings, 100).expect("registry");
    let store = SledPidStore::open(dir.join("pidstore")).expect("pid store");
    let producer_ids = Arc::new(ProducerIdManager::new(Arc::new(store), 7));
    let authorizer = match acls {
        None => Authorizer::open(),
        Some(acls) => {
            let authorizer = Authorizer::new(AuthorizerKind::Acl, Vec::new());
            authorizer.replace_acls(acls);
            authorizer
        }
    };
    BrokerService::new(
        7,
        "127.0.0.1:9092".into(),
        Arc::new(topics),
        producer_ids,
        1 << 20,
    )
    .with_coordinator(coordinator.map(str::to_string))
    .with_kafka_advertised(Some("127.0.0.1:9094".into()))
    .with_authorizer(authorizer)
}

/// What a connection of `service` serves with.
pub fn context(service: BrokerService) -> KafkaContext {
    KafkaContext {
        service: Arc::new(service),
        max_request_bytes: 1 << 20,
        link: Arc::new(CoordinatorLink::new(
            NodeCredential::default(),
            None,
            LinkTimeouts {
                connect: Duration::from_millis(500),
                request: Duration::from_secs(2),
            },
        )),
        tokens: None,
        failed_authentication_delay: Duration::ZERO,
    }
}

/// `User:ANONYMOUS` may do `operation` on the literal resource.
pub fn allow(resource_type: ResourceType, name: &str, operation: Operation) -> Acl {
    Acl::new(
        "User:ANONYMOUS",
        resource_type,
        name,
        PatternType::Literal,
        operation,
        Permission::Allow,
    )
    .expect("a valid ACL")
}
