//! Authorization by ACLs (issue 29): [`model`] what an ACL says, [`decide`] the pure
//! Kafka-rules decision, [`authorizer`] the cached decider every server asks,
//! [`etcd_store`] where a cluster keeps ACLs and how every server follows their changes,
//! [`embedded_store`] the same for `idem dev`, [`store`] either of them.
//! Shared by broker and coordinator, which may not depend on each other.

pub mod authorizer;
pub mod decide;
pub mod embedded_store;
pub mod etcd_store;
pub mod model;
pub mod store;

pub use authorizer::{Authorizer, AuthorizerKind, Denied};
pub use decide::{authorize, Decision};
pub use embedded_store::EmbeddedAclStore;
pub use etcd_store::{AclStoreError, EtcdAclStore};
pub use model::{
    Acl, AclParseError, Operation, PatternType, Permission, Resource, ResourcePattern,
    ResourceType, ANONYMOUS, ANY_USER, CLUSTER_NAME,
};
pub use store::AclStore;
