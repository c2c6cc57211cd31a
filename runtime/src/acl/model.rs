//! What an ACL says: a principal may (or may not) perform an operation on the
//! resources a pattern names. Plain values with a text form (`topic`, `write`,
//! `prefixed`) shared by the etcd encoding, the RPCs and the CLI; parsing refuses
//! anything else with an error naming the bad word.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The name of the one cluster resource (Kafka's `kafka-cluster`).
pub const CLUSTER_NAME: &str = "idem-cluster";

/// The principal of a request that presented no credential.
pub const ANONYMOUS: &str = "User:ANONYMOUS";

/// The principal an ACL for `User:*` applies to: every principal.
pub const ANY_USER: &str = "User:*";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AclParseError {
    #[error("unknown resource type {0:?} (expected topic, group, transactional-id or cluster)")]
    ResourceType(String),
    #[error(
        "unknown operation {0:?} (expected read, write, create, describe, alter, delete or all)"
    )]
    Operation(String),
    #[error("unknown permission {0:?} (expected allow or deny)")]
    Permission(String),
    #[error("unknown pattern type {0:?} (expected literal or prefixed)")]
    PatternType(String),
    #[error("principal {0:?} is not of the form User:<name>")]
    Principal(String),
    #[error("an ACL's resource name may not be empty")]
    EmptyName,
    #[error("a prefixed pattern may not be the wildcard \"*\" (use a literal \"*\")")]
    PrefixedWildcard,
}

macro_rules! text_enum {
    ($(#[$meta:meta])* $name:ident, $error:ident, { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(rename_all = "kebab-case")]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = AclParseError;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                match text.to_ascii_lowercase().replace('_', "-").as_str() {
                    $($text => Ok($name::$variant),)+
                    _ => Err(AclParseError::$error(text.to_string())),
                }
            }
        }
    };
}

text_enum!(
    /// What kind of thing an ACL protects.
    ResourceType, ResourceType, {
        Topic => "topic",
        Group => "group",
        TransactionalId => "transactional-id",
        Cluster => "cluster",
    }
);

text_enum!(
    /// What a principal does to a resource. `All` in an ACL matches every operation;
    /// a request never asks for `All` (it stays last: tests rely on it).
    Operation, Operation, {
        Read => "read",
        Write => "write",
        Create => "create",
        Describe => "describe",
        Alter => "alter",
        Delete => "delete",
        All => "all",
    }
);

text_enum!(
    Permission, Permission, {
        Allow => "allow",
        Deny => "deny",
    }
);

text_enum!(
    /// How an ACL's name matches a resource's: the same name (`*` matching every
    /// name), or every name starting with it.
    PatternType, PatternType, {
        Literal => "literal",
        Prefixed => "prefixed",
    }
);

/// One named resource a request touches.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Resource {
    pub resource_type: ResourceType,
    pub name: String,
}

impl Resource {
    pub fn topic(name: &str) -> Resource {
        Resource {
            resource_type: ResourceType::Topic,
            name: name.to_string(),
        }
    }

    pub fn group(name: &str) -> Resource {
        Resource {
            resource_type: ResourceType::Group,
            name: name.to_string(),
        }
    }

    pub fn transactional_id(name: &str) -> Resource {
        Resource {
            resource_type: ResourceType::TransactionalId,
            name: name.to_string(),
        }
    }

    pub fn cluster() -> Resource {
        Resource {
            resource_type: ResourceType::Cluster,
            name: CLUSTER_NAME.to_string(),
        }
    }
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:?}", self.resource_type, self.name)
    }
}

/// The resources an ACL applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ResourcePattern {
    pub resource_type: ResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

impl ResourcePattern {
    /// Whether `resource` is one this pattern names.
    pub fn matches(&self, resource_type: ResourceType, name: &str) -> bool {
        if self.resource_type != resource_type {
            return false;
        }
        match self.pattern_type {
            PatternType::Literal => self.name == "*" || self.name == name,
            PatternType::Prefixed => name.starts_with(&self.name),
        }
    }
}

/// One access control entry.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Acl {
    /// `User:<name>`, or `User:*` for every principal.
    pub principal: String,
    pub pattern: ResourcePattern,
    pub operation: Operation,
    pub permission: Permission,
}

impl Acl {
    /// An ACL from its parts, refusing an empty name, a prefixed `*` and a principal
    /// not of the form `User:<name>`. The cluster resource's name is always
    /// [`CLUSTER_NAME`], whatever was given.
    pub fn new(
        principal: &str,
        resource_type: ResourceType,
        name: &str,
        pattern_type: PatternType,
        operation: Operation,
        permission: Permission,
    ) -> Result<Acl, AclParseError> {
        match principal.strip_prefix("User:") {
            Some(user) if !user.is_empty() => {}
            _ => return Err(AclParseError::Principal(principal.to_string())),
        }
        let name = if resource_type == ResourceType::Cluster {
            CLUSTER_NAME
        } else {
            name
        };
        if name.is_empty() {
            return Err(AclParseError::EmptyName);
        }
        if pattern_type == PatternType::Prefixed && name == "*" {
            return Err(AclParseError::PrefixedWildcard);
        }
        Ok(Acl {
            principal: principal.to_string(),
            pattern: ResourcePattern {
                resource_type,
                name: name.to_string(),
                pattern_type,
            },
            operation,
            permission,
        })
    }
}

impl fmt::Display for Acl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} {} {} {} {:?}",
            self.principal,
            self.permission,
            self.operation,
            self.pattern.resource_type,
            self.pattern.pattern_type,
            self.pattern.name
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_parse_case_insensitively_and_unknown_words_are_named() {
        assert_eq!("WRITE".parse::<Operation>(), Ok(Operation::Write));
        assert_eq!(
            "transactional_id".parse::<ResourceType>(),
            Ok(ResourceType::TransactionalId)
        );
        assert_eq!(
            "erase".parse::<Operation>(),
            Err(AclParseError::Operation("erase".to_string()))
        );
    }

    #[test]
    fn bad_acls_are_refused() {
        let acl = |principal, name, pattern| {
            Acl::new(
                principal,
                ResourceType::Topic,
                name,
                pattern,
                Operation::Read,
                Permission::Allow,
            )
        };
        assert_eq!(
            acl("User:a", "", PatternType::Literal),
            Err(AclParseError::EmptyName)
        );
        assert_eq!(
            acl("alice", "t", PatternType::Literal),
            Err(AclParseError::Principal("alice".to_string()))
        );
        assert_eq!(
            acl("User:a", "*", PatternType::Prefixed),
            Err(AclParseError::PrefixedWildcard)
        );
        assert!(acl("User:*", "orders", PatternType::Literal).is_ok());
    }

    #[test]
    fn a_cluster_acl_names_the_cluster() {
        let acl = Acl::new(
            "User:broker",
            ResourceType::Cluster,
            "",
            PatternType::Literal,
            Operation::All,
            Permission::Allow,
        )
        .expect("valid");
        assert_eq!(acl.pattern.name, CLUSTER_NAME);
    }
}
