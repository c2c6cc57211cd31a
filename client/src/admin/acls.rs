//! ACLs (issue 29): add, list and remove them through any broker, which stores them in
//! etcd where every broker and coordinator follows them. Adding an ACL twice or
//! removing one twice changes nothing more, so answers lost in transport are retried.
//! A refused binding (an unknown word, an empty name) is `Broker { code:
//! INVALID_REQUEST, .. }` naming it, and nothing was stored.

pub use idem_proto::v1::AclBinding;
use idem_proto::v1::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};

use super::Admin;
use crate::error::ClientError;

/// Which ACLs [`Admin::describe_acls`] lists; empty fields match any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AclFilter {
    pub principal: String,
    pub resource_type: String,
    pub resource_name: String,
}

fn refused(code: i32, message: String) -> Result<(), ClientError> {
    if code == 0 {
        Ok(())
    } else {
        Err(ClientError::broker(code, message))
    }
}

impl Admin {
    /// Stores `acls`, all or none; how many were not stored before.
    pub async fn create_acls(&self, acls: &[AclBinding]) -> Result<i32, ClientError> {
        let request = CreateAclsRequest {
            acls: acls.to_vec(),
        };
        let answer = self
            .connection()
            .call_retrying(|mut client| {
                let request = request.clone();
                async move { client.create_acls(request).await }
            })
            .await?;
        refused(answer.error_code, answer.error_message)?;
        Ok(answer.created)
    }

    /// The stored ACLs `filter` matches.
    pub async fn describe_acls(&self, filter: &AclFilter) -> Result<Vec<AclBinding>, ClientError> {
        let request = DescribeAclsRequest {
            principal: filter.principal.clone(),
            resource_type: filter.resource_type.clone(),
            resource_name: filter.resource_name.clone(),
        };
        let answer = self
            .connection()
            .call_retrying(|mut client| {
                let request = request.clone();
                async move { client.describe_acls(request).await }
            })
            .await?;
        refused(answer.error_code, answer.error_message)?;
        Ok(answer.acls)
    }

    /// Removes exactly `acls`; how many of them were stored.
    pub async fn delete_acls(&self, acls: &[AclBinding]) -> Result<i32, ClientError> {
        let request = DeleteAclsRequest {
            acls: acls.to_vec(),
        };
        let answer = self
            .connection()
            .call_retrying(|mut client| {
                let request = request.clone();
                async move { client.delete_acls(request).await }
            })
            .await?;
        refused(answer.error_code, answer.error_message)?;
        Ok(answer.deleted)
    }
}
