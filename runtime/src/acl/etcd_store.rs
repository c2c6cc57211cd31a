//! ACLs in etcd, and the watch that keeps every server's [`Authorizer`] current.
//!
//! One key per ACL, `{prefix}/acls/{type}/{pattern}/{hex(name)}/{hex(principal)}/
//! {operation}/{permission}`, the value the ACL as JSON. One key per ACL (rather than
//! one per resource, as Kafka's ZooKeeper layout) because an add or a remove is then a
//! single put or delete: concurrent changes to the same resource never race through a
//! read-modify-write, adding an ACL twice is a no-op, and a watch event names exactly
//! the ACL that changed. Names are hex-encoded so any name makes a valid, unique key.
//!
//! The watch re-reads the whole prefix on every event (ACL sets are small) and
//! replaces the authorizer's set at once, dropping its cached decisions: a removed ACL
//! stops applying as soon as the event arrives (milliseconds), with no restart.

use std::fmt::Write as _;
use std::time::Duration;

use etcd_client::{GetOptions, WatchOptions};
use tokio_util::sync::CancellationToken;

use super::authorizer::Authorizer;
use super::model::Acl;
use crate::etcd_call::{bounded, EtcdCallError};

/// How long a broken watch waits before reading and watching again.
const REWATCH_AFTER: Duration = Duration::from_millis(500);

#[derive(Debug, thiserror::Error)]
pub enum AclStoreError {
    #[error(transparent)]
    Etcd(#[from] EtcdCallError),
    #[error("embedded ACL store: {0}")]
    Embedded(String),
    #[error("ACL key {key} holds no valid ACL: {reason}")]
    Corrupt { key: String, reason: String },
}

fn hex(text: &str) -> String {
    text.bytes()
        .fold(String::with_capacity(text.len() * 2), |mut out, b| {
            let _ = write!(out, "{b:02x}");
            out
        })
}

/// The prefix every ACL key starts with.
pub fn acls_dir(prefix: &str) -> String {
    format!("{}/acls/", prefix.trim_end_matches('/'))
}

/// The key of one ACL.
pub fn acl_key(prefix: &str, acl: &Acl) -> String {
    format!(
        "{}{}/{}/{}/{}/{}/{}",
        acls_dir(prefix),
        acl.pattern.resource_type,
        acl.pattern.pattern_type,
        hex(&acl.pattern.name),
        hex(&acl.principal),
        acl.operation,
        acl.permission
    )
}

/// The ACLs of one etcd cluster under one prefix.
#[derive(Clone)]
pub struct EtcdAclStore {
    client: etcd_client::Client,
    prefix: String,
}

impl std::fmt::Debug for EtcdAclStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdAclStore")
            .field("prefix", &self.prefix)
            .finish()
    }
}

impl EtcdAclStore {
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<Self, AclStoreError> {
        Ok(EtcdAclStore {
            client: crate::etcd_call::connect(endpoints).await?,
            prefix: prefix.to_string(),
        })
    }

    /// Stores `acl`; `false` when it was stored already.
    pub async fn add(&self, acl: &Acl) -> Result<bool, AclStoreError> {
        let key = acl_key(&self.prefix, acl);
        let value = serde_json::to_string(acl).map_err(|e| AclStoreError::Corrupt {
            key: key.clone(),
            reason: e.to_string(),
        })?;
        let mut client = self.client.clone();
        let answer = bounded(
            "put acl",
            client.put(
                key,
                value,
                Some(etcd_client::PutOptions::new().with_prev_key()),
            ),
        )
        .await?;
        Ok(answer.prev_key().is_none())
    }

    /// Removes `acl`; `false` when there was no such ACL.
    pub async fn remove(&self, acl: &Acl) -> Result<bool, AclStoreError> {
        let mut client = self.client.clone();
        let answer = bounded(
            "delete acl",
            client.delete(acl_key(&self.prefix, acl), None),
        )
        .await?;
        Ok(answer.deleted() > 0)
    }

    /// Every stored ACL, and the revision they were read at.
    pub async fn list(&self) -> Result<(Vec<Acl>, i64), AclStoreError> {
        let mut client = self.client.clone();
        let answer = bounded(
            "list acls",
            client.get(
                acls_dir(&self.prefix),
                Some(GetOptions::new().with_prefix()),
            ),
        )
        .await?;
        let revision = answer.header().map_or(0, |h| h.revision());
        let mut acls = Vec::with_capacity(answer.kvs().len());
        for kv in answer.kvs() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let acl: Acl =
                serde_json::from_slice(kv.value()).map_err(|e| AclStoreError::Corrupt {
                    key: key.clone(),
                    reason: e.to_string(),
                })?;
            acls.push(acl);
        }
        acls.sort();
        Ok((acls, revision))
    }

    /// Loads the stored ACLs into `authorizer` once (a server refuses to start when it
    /// cannot: serving with no ACLs would refuse everyone, serving with stale ones is
    /// worse), then keeps them current until `stop`.
    pub async fn load_and_watch(
        &self,
        authorizer: &Authorizer,
        stop: CancellationToken,
    ) -> Result<(), AclStoreError> {
        let (acls, revision) = self.list().await?;
        tracing::info!(acls = acls.len(), "ACLs loaded");
        authorizer.replace_acls(acls);
        let store = self.clone();
        let authorizer = authorizer.clone();
        tokio::spawn(async move {
            let mut from = revision + 1;
            loop {
                let watched = tokio::select! {
                    () = stop.cancelled() => return,
                    watched = store.follow(&authorizer, from) => watched,
                };
                match watched {
                    Ok(next) => from = next,
                    Err(error) => {
                        tracing::warn!(%error, "ACL watch broken; reading and watching again")
                    }
                }
                tokio::select! {
                    () = stop.cancelled() => return,
                    () = tokio::time::sleep(REWATCH_AFTER) => {}
                }
                // Catch up on what the broken watch missed.
                match store.list().await {
                    Ok((acls, revision)) => {
                        authorizer.replace_acls(acls);
                        from = revision + 1;
                    }
                    Err(error) => tracing::warn!(%error, "cannot read the ACLs"),
                }
            }
        });
        Ok(())
    }

    /// Applies every change from `from` on until the watch ends; the revision to
    /// watch from next.
    async fn follow(&self, authorizer: &Authorizer, from: i64) -> Result<i64, AclStoreError> {
        let mut client = self.client.clone();
        let options = WatchOptions::new().with_prefix().with_start_revision(from);
        let mut stream = bounded(
            "watch acls",
            client.watch(acls_dir(&self.prefix), Some(options)),
        )
        .await?;
        let mut next = from;
        loop {
            let message = stream.message().await.map_err(|source| {
                AclStoreError::Etcd(EtcdCallError::Failed {
                    what: "watch acls",
                    source,
                })
            })?;
            let Some(response) = message else {
                return Ok(next);
            };
            if response.events().is_empty() {
                continue;
            }
            let (acls, revision) = self.list().await?;
            tracing::info!(acls = acls.len(), revision, "ACLs changed");
            authorizer.replace_acls(acls);
            next = revision + 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::model::{Operation, PatternType, Permission, ResourceType};
    use super::*;

    #[test]
    fn every_acl_has_its_own_key_whatever_its_name() {
        let acl = |name: &str, permission| {
            Acl::new(
                "User:a",
                ResourceType::Topic,
                name,
                PatternType::Literal,
                Operation::Write,
                permission,
            )
            .expect("valid")
        };
        let a = acl_key("/idem/", &acl("orders/x", Permission::Allow));
        assert!(a.starts_with("/idem/acls/topic/literal/"), "{a}");
        assert!(!a["/idem/acls/".len()..].contains("orders"), "{a}");
        assert_ne!(a, acl_key("/idem", &acl("orders/x", Permission::Deny)));
        assert_ne!(a, acl_key("/idem", &acl("orders", Permission::Allow)));
    }
}
