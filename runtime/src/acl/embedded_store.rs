//! ACLs in the embedded store (sled) of `idem dev`, whose broker and coordinator run in
//! one process: the store is the only writer of its database (sled locks it), so it
//! pushes every change into the [`Authorizer`]s it feeds itself, before the change is
//! answered. No watch and no poll: once `idem acl add` or `remove` returns, every
//! request of both servers is decided on the new set.
//!
//! One key per ACL, as in etcd ([`acl_key`]); each change is flushed to disk before
//! it is applied and answered, so a restart enforces the same set from its first
//! answer.

use std::path::Path;
use std::sync::{Arc, Mutex};

use super::authorizer::Authorizer;
use super::etcd_store::{acl_key, acls_dir, AclStoreError};
use super::model::Acl;

/// The ACLs of one `idem dev` data dir. Cheap to clone (shared).
#[derive(Clone)]
pub struct EmbeddedAclStore {
    tree: sled::Tree,
    /// The authorizers every change is applied to. The lock also orders changes: each
    /// authorizer sees them in the order they were stored.
    fed: Arc<Mutex<Vec<Authorizer>>>,
}

impl std::fmt::Debug for EmbeddedAclStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedAclStore")
            .field("acls", &self.tree.len())
            .finish()
    }
}

fn embedded(error: impl std::fmt::Display) -> AclStoreError {
    AclStoreError::Embedded(error.to_string())
}

impl EmbeddedAclStore {
    /// Opens (or creates) the store in the directory `path`.
    pub fn open(path: &Path) -> Result<EmbeddedAclStore, AclStoreError> {
        let db = sled::open(path).map_err(embedded)?;
        let tree = db.open_tree("acls").map_err(embedded)?;
        Ok(EmbeddedAclStore {
            tree,
            fed: Arc::default(),
        })
    }

    /// Loads the stored ACLs into `authorizer` and applies every later change to it.
    pub fn feed(&self, authorizer: &Authorizer) -> Result<(), AclStoreError> {
        let mut fed = self.fed.lock().unwrap_or_else(|e| e.into_inner());
        let acls = self.read_all()?;
        tracing::info!(acls = acls.len(), "ACLs loaded from the embedded store");
        authorizer.replace_acls(acls);
        fed.push(authorizer.clone());
        Ok(())
    }

    /// Stores `acl`; `false` when it was stored already.
    pub async fn add(&self, acl: &Acl) -> Result<bool, AclStoreError> {
        let key = acl_key("", acl);
        let value = serde_json::to_vec(acl).map_err(|e| AclStoreError::Corrupt {
            key: key.clone(),
            reason: e.to_string(),
        })?;
        self.change(move |tree| Ok(tree.insert(key, value).map_err(embedded)?.is_none()))
            .await
    }

    /// Removes `acl`; `false` when there was no such ACL.
    pub async fn remove(&self, acl: &Acl) -> Result<bool, AclStoreError> {
        let key = acl_key("", acl);
        self.change(move |tree| Ok(tree.remove(key).map_err(embedded)?.is_some()))
            .await
    }

    /// Every stored ACL.
    pub async fn list(&self) -> Result<Vec<Acl>, AclStoreError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || store.read_all())
            .await
            .map_err(embedded)?
    }

    /// Applies `edit`, flushes, and hands the new set to every fed authorizer, off the
    /// async threads (a flush is an fsync).
    async fn change<T: Send + 'static>(
        &self,
        edit: impl FnOnce(&sled::Tree) -> Result<T, AclStoreError> + Send + 'static,
    ) -> Result<T, AclStoreError> {
        let store = self.clone();
        tokio::task::spawn_blocking(move || {
            let fed = store.fed.lock().unwrap_or_else(|e| e.into_inner());
            let answer = edit(&store.tree)?;
            store.tree.flush().map_err(embedded)?;
            let acls = store.read_all()?;
            tracing::info!(acls = acls.len(), "ACLs changed");
            for authorizer in fed.iter() {
                authorizer.replace_acls(acls.clone());
            }
            Ok(answer)
        })
        .await
        .map_err(embedded)?
    }

    fn read_all(&self) -> Result<Vec<Acl>, AclStoreError> {
        let mut acls = Vec::new();
        for entry in self.tree.scan_prefix(acls_dir("")) {
            let (key, value) = entry.map_err(embedded)?;
            let acl: Acl = serde_json::from_slice(&value).map_err(|e| AclStoreError::Corrupt {
                key: String::from_utf8_lossy(&key).into_owned(),
                reason: e.to_string(),
            })?;
            acls.push(acl);
        }
        acls.sort();
        Ok(acls)
    }
}

#[cfg(test)]
mod tests {
    use super::super::authorizer::AuthorizerKind;
    use super::super::model::{Operation, PatternType, Permission, ResourceType};
    use super::*;

    fn write_orders() -> Acl {
        Acl::new(
            "User:a",
            ResourceType::Topic,
            "orders",
            PatternType::Literal,
            Operation::Write,
            Permission::Allow,
        )
        .expect("valid")
    }

    #[tokio::test]
    async fn a_change_applies_to_every_fed_authorizer_before_it_is_answered() {
        let dir = tempfile::tempdir().expect("dir");
        let store = EmbeddedAclStore::open(dir.path()).expect("opened");
        let (broker, coordinator) = (
            Authorizer::new(AuthorizerKind::Acl, []),
            Authorizer::new(AuthorizerKind::Acl, []),
        );
        store.feed(&broker).expect("fed");
        store.feed(&coordinator).expect("fed");
        let allowed = |a: &Authorizer| a.check_topic("User:a", Operation::Write, "orders").is_ok();
        assert!(!allowed(&broker));

        assert!(store.add(&write_orders()).await.expect("added"));
        assert!(allowed(&broker) && allowed(&coordinator));
        assert!(!store.add(&write_orders()).await.expect("added again"));
        assert_eq!(store.list().await.expect("listed"), vec![write_orders()]);

        assert!(store.remove(&write_orders()).await.expect("removed"));
        assert!(!allowed(&broker) && !allowed(&coordinator));
        assert!(!store.remove(&write_orders()).await.expect("removed again"));
    }

    #[tokio::test]
    async fn a_reopened_store_holds_what_was_stored() {
        let dir = tempfile::tempdir().expect("dir");
        {
            let store = EmbeddedAclStore::open(dir.path()).expect("opened");
            store.add(&write_orders()).await.expect("added");
        }
        let store = EmbeddedAclStore::open(dir.path()).expect("reopened");
        let authorizer = Authorizer::new(AuthorizerKind::Acl, []);
        store.feed(&authorizer).expect("fed");
        assert!(authorizer
            .check_topic("User:a", Operation::Write, "orders")
            .is_ok());
    }
}
