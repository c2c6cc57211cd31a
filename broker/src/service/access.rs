//! Who may call what on a broker (issue 29; the table is in docs/operations.md,
//! "Authentication and authorization"). Each RPC names the (operation, resource)
//! pairs it needs *before* anything is done, so a refused request changes nothing:
//! Produce and Fetch refuse per partition (TOPIC_AUTHORIZATION_FAILED in the
//! partition's answer), Metadata leaves out the topics it may not describe (or marks
//! the ones asked for by name), every other RPC is refused whole with a
//! PERMISSION_DENIED status naming principal, operation and resource.

use idem_proto::v1::MetadataResponse;
use idem_proto::ErrorCode;
use idem_runtime::acl::{Denied, Operation, Resource, ResourceType};
use tonic::Status;

use super::BrokerService;
use crate::error::BrokerError;

/// The gRPC status of a request refused whole.
pub(super) fn denied_status(denied: &Denied) -> Status {
    metrics::counter!("idem_authorization_denied_total", "resource" => denied.resource.resource_type.as_str())
        .increment(1);
    tracing::debug!(principal = %denied.principal, operation = %denied.operation, resource = %denied.resource, "request not authorized");
    Status::permission_denied(denied.to_string())
}

impl BrokerService {
    /// Whether `principal` may do every one of `needs`; the first refusal otherwise.
    pub(crate) fn require(
        &self,
        principal: &str,
        needs: impl IntoIterator<Item = (Operation, Resource)>,
    ) -> Result<(), Status> {
        if self.authorizer.is_open() {
            return Ok(());
        }
        for (operation, resource) in needs {
            self.authorizer
                .check(principal, operation, &resource)
                .map_err(|denied| denied_status(&denied))?;
        }
        Ok(())
    }

    /// Every one of `needs`, as the refusal itself (the Kafka listener answers it with
    /// the Kafka code of the resource's type: `Denied::error_code`).
    pub(crate) fn check_all(
        &self,
        principal: &str,
        needs: impl IntoIterator<Item = (Operation, Resource)>,
    ) -> Result<(), Denied> {
        self.authorizer.check_all(principal, needs).inspect_err(|denied| {
            metrics::counter!("idem_authorization_denied_total", "resource" => denied.resource.resource_type.as_str())
                .increment(1);
            tracing::debug!(principal = %denied.principal, operation = %denied.operation, resource = %denied.resource, "request not authorized");
        })
    }

    /// [`Self::require`] for `operation` on each of `topics`.
    pub(super) fn require_topics<'a>(
        &self,
        principal: &str,
        operation: Operation,
        topics: impl IntoIterator<Item = &'a String>,
    ) -> Result<(), Status> {
        if self.authorizer.is_open() {
            return Ok(());
        }
        self.require(
            principal,
            topics
                .into_iter()
                .map(|topic| (operation, Resource::topic(topic))),
        )
    }

    /// One topic's check, as a per-partition refusal.
    pub(crate) fn authorize_topic(
        &self,
        principal: &str,
        operation: Operation,
        topic: &str,
    ) -> Result<(), BrokerError> {
        self.authorizer
            .check_topic(principal, operation, topic)
            .map_err(BrokerError::Unauthorized)
    }

    /// An idempotent producer id (Kafka's IDEMPOTENT_WRITE): write on the cluster, or
    /// write on some topic.
    pub(crate) fn require_idempotent_write(&self, principal: &str) -> Result<(), Status> {
        if self.authorizer.is_open()
            || self
                .authorizer
                .may_on_some(principal, Operation::Write, ResourceType::Topic)
        {
            return Ok(());
        }
        self.require(principal, [(Operation::Write, Resource::cluster())])
    }

    /// Leaves out of a Metadata answer the topics `principal` may not describe; a topic
    /// asked for by name is kept, marked TOPIC_AUTHORIZATION_FAILED and emptied.
    pub(crate) fn filter_metadata(
        &self,
        principal: &str,
        named: bool,
        mut response: MetadataResponse,
    ) -> MetadataResponse {
        if self.authorizer.is_open() {
            return response;
        }
        response.topics.retain_mut(|topic| {
            match self
                .authorizer
                .check_topic(principal, Operation::Describe, &topic.name)
            {
                Ok(()) => true,
                Err(_) if named => {
                    topic.error_code = ErrorCode::TopicAuthorizationFailed as i32;
                    topic.partitions.clear();
                    topic.topic_id.clear();
                    true
                }
                Err(_) => false,
            }
        });
        response
    }
}
