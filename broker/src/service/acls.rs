//! CreateAcls, DescribeAcls, DeleteAcls: the wire form of ACLs onto the store every
//! server follows (etcd, or `idem dev`'s embedded store). Each binding is parsed before anything is stored, so one bad
//! word stores nothing; the answer names it.

use idem_proto::v1::{
    AclBinding, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use idem_proto::ErrorCode;
use idem_runtime::acl::{Acl, AclParseError, AclStore, ResourceType};

use super::BrokerService;

/// A wire binding as an ACL; the error names the bad word.
pub(super) fn acl_of(binding: &AclBinding) -> Result<Acl, AclParseError> {
    Acl::new(
        &binding.principal,
        binding.resource_type.parse()?,
        &binding.resource_name,
        if binding.pattern_type.is_empty() {
            idem_runtime::acl::PatternType::Literal
        } else {
            binding.pattern_type.parse()?
        },
        binding.operation.parse()?,
        binding.permission.parse()?,
    )
}

pub(super) fn binding_of(acl: &Acl) -> AclBinding {
    AclBinding {
        principal: acl.principal.clone(),
        resource_type: acl.pattern.resource_type.to_string(),
        resource_name: acl.pattern.name.clone(),
        pattern_type: acl.pattern.pattern_type.to_string(),
        operation: acl.operation.to_string(),
        permission: acl.permission.to_string(),
    }
}

/// Every binding parsed, or the first refusal (`INVALID_REQUEST`, naming it).
fn parse_all(bindings: &[AclBinding]) -> Result<Vec<Acl>, (ErrorCode, String)> {
    if bindings.is_empty() {
        return Err((ErrorCode::InvalidRequest, "no ACL given".to_string()));
    }
    bindings
        .iter()
        .enumerate()
        .map(|(i, binding)| {
            acl_of(binding).map_err(|e| (ErrorCode::InvalidRequest, format!("ACL {}: {e}", i + 1)))
        })
        .collect()
}

/// Whether `acl` passes DescribeAcls' filters (empty = any).
fn matches_filter(acl: &Acl, filter: &DescribeAclsRequest) -> Result<bool, AclParseError> {
    let resource_type = match filter.resource_type.as_str() {
        "" => None,
        word => Some(word.parse::<ResourceType>()?),
    };
    Ok(
        (filter.principal.is_empty() || acl.principal == filter.principal)
            && resource_type.is_none_or(|t| acl.pattern.resource_type == t)
            && (filter.resource_name.is_empty() || acl.pattern.name == filter.resource_name),
    )
}

impl BrokerService {
    fn acl_store(&self) -> Result<&AclStore, (ErrorCode, String)> {
        self.acl_store.as_ref().ok_or((
            ErrorCode::InvalidRequest,
            "this broker keeps no ACLs: ACLs are stored in etcd (--etcd) or by idem dev"
                .to_string(),
        ))
    }

    pub(super) async fn serve_create_acls(&self, request: CreateAclsRequest) -> CreateAclsResponse {
        let created = async {
            let acls = parse_all(&request.acls)?;
            let store = self.acl_store()?;
            let mut created = 0;
            for acl in &acls {
                if store
                    .add(acl)
                    .await
                    .map_err(|e| (ErrorCode::RequestTimedOut, e.to_string()))?
                {
                    created += 1;
                }
                tracing::info!(acl = %acl, "ACL added");
            }
            Ok(created)
        }
        .await;
        match created {
            Ok(created) => CreateAclsResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                created,
            },
            Err((code, message)) => CreateAclsResponse {
                error_code: code as i32,
                error_message: message,
                created: 0,
            },
        }
    }

    pub(super) async fn serve_delete_acls(&self, request: DeleteAclsRequest) -> DeleteAclsResponse {
        let deleted = async {
            let acls = parse_all(&request.acls)?;
            let store = self.acl_store()?;
            let mut deleted = 0;
            for acl in &acls {
                if store
                    .remove(acl)
                    .await
                    .map_err(|e| (ErrorCode::RequestTimedOut, e.to_string()))?
                {
                    deleted += 1;
                    tracing::info!(acl = %acl, "ACL removed");
                }
            }
            Ok(deleted)
        }
        .await;
        match deleted {
            Ok(deleted) => DeleteAclsResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                deleted,
            },
            Err((code, message)) => DeleteAclsResponse {
                error_code: code as i32,
                error_message: message,
                deleted: 0,
            },
        }
    }

    pub(super) async fn serve_describe_acls(
        &self,
        request: DescribeAclsRequest,
    ) -> DescribeAclsResponse {
        let listed = async {
            let store = self.acl_store()?;
            let acls = store
                .list()
                .await
                .map_err(|e| (ErrorCode::RequestTimedOut, e.to_string()))?;
            let mut bindings = Vec::new();
            for acl in &acls {
                if matches_filter(acl, &request)
                    .map_err(|e| (ErrorCode::InvalidRequest, e.to_string()))?
                {
                    bindings.push(binding_of(acl));
                }
            }
            Ok(bindings)
        }
        .await;
        match listed {
            Ok(acls) => DescribeAclsResponse {
                error_code: ErrorCode::None as i32,
                error_message: String::new(),
                acls,
            },
            Err((code, message)) => DescribeAclsResponse {
                error_code: code as i32,
                error_message: message,
                acls: Vec::new(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(operation: &str, name: &str) -> AclBinding {
        AclBinding {
            principal: "User:a".into(),
            resource_type: "topic".into(),
            resource_name: name.into(),
            pattern_type: "prefixed".into(),
            operation: operation.into(),
            permission: "allow".into(),
        }
    }

    #[test]
    fn a_binding_round_trips() {
        let acl = acl_of(&binding("write", "orders")).expect("valid");
        assert_eq!(binding_of(&acl), binding("write", "orders"));
    }

    #[test]
    fn one_bad_binding_refuses_them_all_naming_it() {
        let refused = parse_all(&[binding("write", "orders"), binding("erase", "orders")])
            .expect_err("refused");
        assert_eq!(refused.0, ErrorCode::InvalidRequest);
        assert!(
            refused.1.contains("ACL 2") && refused.1.contains("erase"),
            "{}",
            refused.1
        );
        let empty = parse_all(&[binding("write", "")]).expect_err("refused");
        assert!(empty.1.contains("empty"), "{}", empty.1);
    }
}
