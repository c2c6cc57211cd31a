//! The authorizer every broker and coordinator asks before acting on a request: open
//! (no authorizer, as Kafka without `authorizer.class.name`) or ACL-checked.
//!
//! Decisions are cached per (principal, resource type, operation, name), so a produce
//! pays hash lookups rather than a scan of the ACLs; replacing the ACL set (a watch
//! event) drops the whole cache at once, so no decision outlives the ACLs it came from.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::{Arc, RwLock};

use super::decide::{authorize, Decision};
use super::model::{Acl, Operation, Resource, ResourceType};

/// Decisions kept before the cache is emptied: bounds memory when clients name many
/// distinct topics or groups.
const MAX_CACHED_DECISIONS: usize = 100_000;

/// Every decision taken for a principal other than a super user (super users, the
/// nodes among them, are allowed before any lookup), by whether the cache answered it
/// or the ACLs were scanned: how many checks a request costs shows here (a wide fetch
/// is one per topic, not one per partition).
pub const CHECKS_METRIC: &str = "idem_authorization_checks_total";

/// `--authorizer`: whether requests are checked against ACLs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthorizerKind {
    /// Every request is allowed (the default, as Kafka without an authorizer).
    #[default]
    None,
    /// Every request is checked against the ACLs stored in the cluster.
    Acl,
}

impl FromStr for AuthorizerKind {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "none" => Ok(AuthorizerKind::None),
            "acl" => Ok(AuthorizerKind::Acl),
            other => Err(format!(
                "unknown authorizer {other:?} (expected none or acl)"
            )),
        }
    }
}

impl fmt::Display for AuthorizerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AuthorizerKind::None => "none",
            AuthorizerKind::Acl => "acl",
        })
    }
}

/// A refused request: who asked to do what to which resource.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{principal} is not authorized to {operation} {resource}")]
pub struct Denied {
    pub principal: String,
    pub operation: Operation,
    pub resource: Resource,
}

impl Denied {
    /// The wire code of this refusal: Kafka's `*_AUTHORIZATION_FAILED` of the resource.
    pub fn error_code(&self) -> idem_proto::ErrorCode {
        use idem_proto::ErrorCode;
        match self.resource.resource_type {
            ResourceType::Topic => ErrorCode::TopicAuthorizationFailed,
            ResourceType::Group => ErrorCode::GroupAuthorizationFailed,
            ResourceType::Cluster => ErrorCode::ClusterAuthorizationFailed,
            ResourceType::TransactionalId => ErrorCode::TransactionalIdAuthorizationFailed,
        }
    }
}

type DecisionsByName = HashMap<String, Decision>;
type DecisionsByPrincipal = HashMap<String, HashMap<(ResourceType, Operation), DecisionsByName>>;

/// One ACL set and the decisions taken from it.
#[derive(Debug, Default)]
struct AclSet {
    acls: Vec<Acl>,
    decisions: RwLock<(DecisionsByPrincipal, usize)>,
}

impl AclSet {
    fn cached(
        &self,
        principal: &str,
        key: (ResourceType, Operation),
        name: &str,
    ) -> Option<Decision> {
        let decisions = self.decisions.read().unwrap_or_else(|e| e.into_inner());
        decisions.0.get(principal)?.get(&key)?.get(name).copied()
    }

    fn remember(
        &self,
        principal: &str,
        key: (ResourceType, Operation),
        name: &str,
        decision: Decision,
    ) {
        let mut decisions = self.decisions.write().unwrap_or_else(|e| e.into_inner());
        if decisions.1 >= MAX_CACHED_DECISIONS {
            *decisions = (HashMap::new(), 0);
        }
        decisions
            .0
            .entry(principal.to_string())
            .or_default()
            .entry(key)
            .or_default()
            .insert(name.to_string(), decision);
        decisions.1 += 1;
    }
}

/// ACL checks with cached decisions. Cheap to clone (shared).
#[derive(Debug, Clone)]
pub struct Authorizer {
    kind: AuthorizerKind,
    super_users: Arc<HashSet<String>>,
    set: Arc<RwLock<Arc<AclSet>>>,
}

impl Authorizer {
    pub fn new(kind: AuthorizerKind, super_users: impl IntoIterator<Item = String>) -> Authorizer {
        Authorizer {
            kind,
            super_users: Arc::new(super_users.into_iter().collect()),
            set: Arc::default(),
        }
    }

    /// An authorizer that allows everything.
    pub fn open() -> Authorizer {
        Authorizer::new(AuthorizerKind::None, [])
    }

    pub fn kind(&self) -> AuthorizerKind {
        self.kind
    }

    pub fn is_open(&self) -> bool {
        self.kind == AuthorizerKind::None
    }

    /// Replaces the ACL set (and with it every cached decision).
    pub fn replace_acls(&self, acls: Vec<Acl>) {
        let fresh = Arc::new(AclSet {
            acls,
            decisions: RwLock::default(),
        });
        *self.set.write().unwrap_or_else(|e| e.into_inner()) = fresh;
    }

    /// The ACLs decisions are taken from now.
    pub fn acls(&self) -> Vec<Acl> {
        self.current().acls.clone()
    }

    fn current(&self) -> Arc<AclSet> {
        self.set.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Whether `principal` may perform `operation` on the named resource.
    pub fn decide(
        &self,
        principal: &str,
        operation: Operation,
        resource_type: ResourceType,
        name: &str,
    ) -> Decision {
        if self.is_open() || self.super_users.contains(principal) {
            return Decision::Allow;
        }
        let set = self.current();
        let key = (resource_type, operation);
        if let Some(decision) = set.cached(principal, key, name) {
            metrics::counter!(CHECKS_METRIC, "decided_by" => "cache").increment(1);
            return decision;
        }
        metrics::counter!(CHECKS_METRIC, "decided_by" => "acls").increment(1);
        let decision = authorize(
            &set.acls,
            false, // super users were allowed above
            principal,
            operation,
            resource_type,
            name,
        );
        set.remember(principal, key, name, decision);
        decision
    }

    /// [`Self::decide`], as a `Result` naming what was refused.
    pub fn check(
        &self,
        principal: &str,
        operation: Operation,
        resource: &Resource,
    ) -> Result<(), Denied> {
        match self.decide(principal, operation, resource.resource_type, &resource.name) {
            Decision::Allow => Ok(()),
            Decision::Deny => Err(Denied {
                principal: principal.to_string(),
                operation,
                resource: resource.clone(),
            }),
        }
    }

    /// Whether some ACL lets `principal` perform `operation` on some resource of the
    /// type (Kafka's `authorizeByResourceType`, for IDEMPOTENT_WRITE): an allow for it,
    /// or for `User:*`, not cancelled by a deny of the same pattern. A scan, for rare
    /// calls (InitProducerId) only.
    pub fn may_on_some(
        &self,
        principal: &str,
        operation: Operation,
        resource_type: ResourceType,
    ) -> bool {
        if self.is_open() || self.super_users.contains(principal) {
            return true;
        }
        let set = self.current();
        set.acls.iter().any(|acl| {
            acl.pattern.resource_type == resource_type
                && acl.permission == super::model::Permission::Allow
                && (acl.principal == principal || acl.principal == super::model::ANY_USER)
                && self.decide(principal, operation, resource_type, &acl.pattern.name)
                    == Decision::Allow
        })
    }

    /// [`Self::check`] for each of `needs`; the first refusal.
    pub fn check_all(
        &self,
        principal: &str,
        needs: impl IntoIterator<Item = (Operation, Resource)>,
    ) -> Result<(), Denied> {
        if self.is_open() {
            return Ok(());
        }
        needs
            .into_iter()
            .try_for_each(|(operation, resource)| self.check(principal, operation, &resource))
    }

    /// [`Self::check`] for a topic.
    pub fn check_topic(
        &self,
        principal: &str,
        operation: Operation,
        topic: &str,
    ) -> Result<(), Denied> {
        match self.decide(principal, operation, ResourceType::Topic, topic) {
            Decision::Allow => Ok(()),
            Decision::Deny => Err(Denied {
                principal: principal.to_string(),
                operation,
                resource: Resource::topic(topic),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::{PatternType, Permission};
    use super::*;

    fn allow_write(topic: &str) -> Acl {
        Acl::new(
            "User:a",
            ResourceType::Topic,
            topic,
            PatternType::Literal,
            Operation::Write,
            Permission::Allow,
        )
        .expect("valid")
    }

    #[test]
    fn an_open_authorizer_allows_everything() {
        assert!(Authorizer::open()
            .check("User:x", Operation::Alter, &Resource::cluster())
            .is_ok());
    }

    #[test]
    fn a_replaced_acl_set_drops_cached_decisions() {
        let authorizer = Authorizer::new(AuthorizerKind::Acl, []);
        authorizer.replace_acls(vec![allow_write("orders")]);
        assert!(authorizer
            .check_topic("User:a", Operation::Write, "orders")
            .is_ok());
        // Cached now; a new set must not answer from the old cache.
        assert!(authorizer
            .check_topic("User:a", Operation::Write, "orders")
            .is_ok());
        authorizer.replace_acls(vec![]);
        let denied = authorizer
            .check_topic("User:a", Operation::Write, "orders")
            .expect_err("denied");
        assert_eq!(
            denied.to_string(),
            "User:a is not authorized to write topic \"orders\""
        );
    }

    #[test]
    fn super_users_pass_without_acls() {
        let authorizer = Authorizer::new(AuthorizerKind::Acl, ["User:broker".to_string()]);
        assert!(authorizer
            .check("User:broker", Operation::Alter, &Resource::cluster())
            .is_ok());
        assert!(authorizer
            .check("User:other", Operation::Alter, &Resource::cluster())
            .is_err());
    }

    #[test]
    fn the_cache_is_bounded() {
        let authorizer = Authorizer::new(AuthorizerKind::Acl, []);
        for i in 0..MAX_CACHED_DECISIONS + 10 {
            authorizer.decide(
                "User:a",
                Operation::Read,
                ResourceType::Topic,
                &i.to_string(),
            );
        }
        let set = authorizer.current();
        let size = set.decisions.read().expect("lock").1;
        assert!(size <= MAX_CACHED_DECISIONS, "{size}");
    }
}
