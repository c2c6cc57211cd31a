//! Where a server's ACLs are kept: etcd in a cluster, the embedded store in `idem dev`.
//! Both answer the same three changes and lists; how each keeps authorizers current
//! is its own ([`EtcdAclStore::load_and_watch`], [`EmbeddedAclStore::feed`]).

use super::embedded_store::EmbeddedAclStore;
use super::etcd_store::{AclStoreError, EtcdAclStore};
use super::model::Acl;

#[derive(Debug, Clone)]
pub enum AclStore {
    /// Boxed: an etcd client is some 3.5 KB, the embedded store a pointer or two.
    Etcd(Box<EtcdAclStore>),
    Embedded(EmbeddedAclStore),
}

impl AclStore {
    /// Stores `acl`; `false` when it was stored already.
    pub async fn add(&self, acl: &Acl) -> Result<bool, AclStoreError> {
        match self {
            AclStore::Etcd(store) => store.add(acl).await,
            AclStore::Embedded(store) => store.add(acl).await,
        }
    }

    /// Removes `acl`; `false` when there was no such ACL.
    pub async fn remove(&self, acl: &Acl) -> Result<bool, AclStoreError> {
        match self {
            AclStore::Etcd(store) => store.remove(acl).await,
            AclStore::Embedded(store) => store.remove(acl).await,
        }
    }

    /// Every stored ACL, sorted.
    pub async fn list(&self) -> Result<Vec<Acl>, AclStoreError> {
        match self {
            AclStore::Etcd(store) => Ok(store.list().await?.0),
            AclStore::Embedded(store) => store.list().await,
        }
    }
}
