//! FindCoordinator for groups (key type 0) and transactional ids (1): the answer names
//! the receiving broker itself whenever idem has an owner for the key, because this
//! broker proxies the coordinator APIs (`coordinator_link.rs`): Kafka clients know a
//! coordinator only by node id, and idem's coordinator ids overlap its broker ids.
//! Without an owner the answer is idem's code (COORDINATOR_NOT_AVAILABLE while a slice
//! is unowned), which the client retries. Describe on the group or transactional id is
//! checked first, as the coordinator checks it for SDK callers. v4+ (KIP-699) asks for
//! several keys at once and is answered per key.

use idem_runtime::acl::{Operation, Resource};
use kafka_protocol::messages::find_coordinator_request::FindCoordinatorRequest;
use kafka_protocol::messages::find_coordinator_response::{Coordinator, FindCoordinatorResponse};
use kafka_protocol::messages::BrokerId;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::errors::kafka_code;
use super::metadata::split_host_port;
use crate::service::BrokerService;

/// Kafka's `CoordinatorType`.
const GROUP: i8 = 0;
const TRANSACTION: i8 = 1;

pub fn serve(
    service: &BrokerService,
    principal: &str,
    request: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let key_type = request.key_type;
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .into_iter()
            .map(|key| find(service, principal, key_type, key))
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let found = find(service, principal, key_type, request.key);
    FindCoordinatorResponse::default()
        .with_error_code(found.error_code)
        .with_error_message(found.error_message)
        .with_node_id(found.node_id)
        .with_host(found.host)
        .with_port(found.port)
}

/// The answer for one key.
fn find(service: &BrokerService, principal: &str, key_type: i8, key: StrBytes) -> Coordinator {
    let refused = |code: i16, message: String| {
        Coordinator::default()
            .with_key(key.clone())
            .with_node_id(BrokerId(-1))
            .with_host(StrBytes::from_static_str(""))
            .with_port(-1)
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_string(message)))
    };
    let resource = match key_type {
        GROUP => Resource::group(key.as_str()),
        TRANSACTION => Resource::transactional_id(key.as_str()),
        other => {
            return refused(
                ResponseError::InvalidRequest.code(),
                format!("key type {other} is neither a group (0) nor a transaction (1)"),
            )
        }
    };
    if let Err(denied) = service.check_all(principal, [(Operation::Describe, resource)]) {
        return refused(kafka_code(denied.error_code() as i32), denied.to_string());
    }
    if let Err(e) = service.coordinator_of(key.as_str()) {
        return refused(kafka_code(e.code() as i32), e.to_string());
    }
    match service.kafka_advertised().and_then(split_host_port) {
        Some((host, port)) => Coordinator::default()
            .with_key(key)
            .with_node_id(BrokerId(service.broker_id()))
            .with_host(StrBytes::from_string(host))
            .with_port(port)
            .with_error_code(0),
        None => refused(
            ResponseError::CoordinatorNotAvailable.code(),
            "this broker has no Kafka address to name".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use idem_runtime::acl::ANONYMOUS;

    use super::*;

    fn broker(dir: &std::path::Path, coordinator: Option<&str>) -> BrokerService {
        crate::kafka::test_broker::service(dir, coordinator, None)
    }

    fn key(text: &'static str) -> StrBytes {
        StrBytes::from_static_str(text)
    }

    #[test]
    fn given_an_owned_transactional_id_then_the_receiving_broker_is_named() {
        let dir = tempfile::tempdir().expect("tempdir");
        let service = broker(dir.path(), Some("127.0.0.1:7000"));
        let v3 = serve(
            &service,
            ANONYMOUS,
            FindCoordinatorRequest::default()
                .with_key(key("orders-tx"))
                .with_key_type(TRANSACTION),
            3,
        );
        assert_eq!(v3.error_code, 0);
        assert_eq!(v3.node_id, BrokerId(7), "this broker, not the coordinator");
        assert_eq!((v3.host.as_str(), v3.port), ("127.0.0.1", 9094));

        let v4 = serve(
            &service,
            ANONYMOUS,
            FindCoordinatorRequest::default()
                .with_key_type(GROUP)
                .with_coordinator_keys(vec![key("g1"), key("g2")]),
            4,
        );
        let answered: Vec<_> = v4
            .coordinators
            .iter()
            .map(|c| (c.key.as_str(), c.error_code, c.node_id.0, c.port))
            .collect();
        assert_eq!(answered, [("g1", 0, 7, 9094), ("g2", 0, 7, 9094)]);
    }

    #[test]
    fn given_no_coordinator_or_a_bad_key_type_then_the_error_code() {
        let dir = tempfile::tempdir().expect("tempdir");
        let service = broker(dir.path(), None);
        let none = serve(
            &service,
            ANONYMOUS,
            FindCoordinatorRequest::default()
                .with_key(key("orders-tx"))
                .with_key_type(TRANSACTION),
            2,
        );
        assert_eq!(
            (none.error_code, none.node_id),
            (ResponseError::CoordinatorNotAvailable.code(), BrokerId(-1))
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let service = broker(dir.path(), Some("127.0.0.1:7000"));
        let share = serve(
            &service,
            ANONYMOUS,
            FindCoordinatorRequest::default()
                .with_key_type(2)
                .with_coordinator_keys(vec![key("s")]),
            6,
        );
        assert_eq!(
            share.coordinators[0].error_code,
            ResponseError::InvalidRequest.code()
        );
    }
}
