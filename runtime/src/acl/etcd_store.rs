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
//! stops applying as soon as the event arrives (milliseconds), with no restart. A
//! broken watch (etcd restarted, cancelled by etcd) is re-read and re-watched; until
//! then the last ACLs read stay in force ([`EtcdAclStore::load_and_watch`]).

use std::fmt::Write as _;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};
use etcd_client::{GetOptions, WatchOptions};
use tokio_util::sync::CancellationToken;

use super::authorizer::Authorizer;
use super::model::Acl;
use crate::etcd_call::{bounded, EtcdCallError};
use crate::log_limit::LogLimit;
use crate::warn_limited;

#[derive(Debug, thiserror::Error)]
pub enum AclStoreError {
    #[error(transparent)]
    Etcd(#[from] EtcdCallError),
    #[error("etcd cancelled the ACL watch (compacted to revision {compact_revision}): {reason}")]
    WatchCancelled {
        compact_revision: i64,
        reason: String,
    },
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
    ///
    /// While etcd is unreachable the authorizer keeps deciding on the last ACLs it was
    /// given (as Kafka's authorizer keeps its cache while ZooKeeper is away): refusing
    /// everyone would turn an etcd outage into a cluster outage, and allowing everyone
    /// would turn it into a breach. A broken or cancelled watch is followed by a full
    /// re-read before watching again from the revision read, so a change made while no
    /// watch was open (an ACL removed during the outage) is applied, never missed;
    /// retries back off from 250 ms to 2 s (jittered).
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
            let mut failures = LogLimit::for_repeated_failures();
            loop {
                let watched = tokio::select! {
                    () = stop.cancelled() => return,
                    watched = store.follow(&authorizer, from) => watched,
                };
                match watched {
                    Ok(()) => tracing::info!("ACL watch ended; reading and watching again"),
                    Err(error) => {
                        warn_limited!(failures, %error, "ACL watch broken; reading and watching again")
                    }
                }
                // Catch up on what the broken watch missed, however long that takes.
                let mut pauses = rewatch_pauses();
                loop {
                    let pause = pauses.next().unwrap_or(REWATCH_PAUSE_MAX);
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(pause) => {}
                    }
                    match store.list().await {
                        Ok((acls, revision)) => {
                            tracing::info!(acls = acls.len(), revision, "ACLs read again");
                            authorizer.replace_acls(acls);
                            from = revision + 1;
                            break;
                        }
                        Err(error) => {
                            warn_limited!(failures, %error, "cannot read the ACLs; the last ones read stay in force")
                        }
                    }
                }
            }
        });
        Ok(())
    }

    /// Applies every change from `from` on until the watch ends (`Ok`) or breaks; the
    /// caller reads everything again either way. Public for the etcd-fault tests.
    pub async fn follow(&self, authorizer: &Authorizer, from: i64) -> Result<(), AclStoreError> {
        let mut client = self.client.clone();
        let options = WatchOptions::new().with_prefix().with_start_revision(from);
        let mut stream = bounded(
            "watch acls",
            client.watch(acls_dir(&self.prefix), Some(options)),
        )
        .await?;
        loop {
            let message = stream.message().await.map_err(|source| {
                AclStoreError::Etcd(EtcdCallError::Failed {
                    what: "watch acls",
                    source,
                })
            })?;
            let Some(response) = message else {
                return Ok(());
            };
            // etcd cancels a watch (a compacted start revision, say) and sends nothing
            // more on it while the stream stays open: waiting on would miss every change.
            if response.canceled() {
                return Err(AclStoreError::WatchCancelled {
                    compact_revision: response.compact_revision(),
                    reason: response.cancel_reason().to_string(),
                });
            }
            if response.events().is_empty() {
                continue;
            }
            let (acls, revision) = self.list().await?;
            tracing::info!(acls = acls.len(), revision, "ACLs changed");
            authorizer.replace_acls(acls);
        }
    }
}

/// Longest pause between two attempts to read the ACLs again, before jitter.
const REWATCH_PAUSE_MAX: Duration = Duration::from_secs(2);

/// Pauses before reading the ACLs again after a broken watch: 250 ms doubling to 2 s
/// while etcd stays away, jittered (up to as much again) so the servers of a cluster
/// that lost etcd together do not return to it in lock step.
fn rewatch_pauses() -> ExponentialBackoff {
    ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(250))
        .with_max_delay(REWATCH_PAUSE_MAX)
        .without_max_times()
        .with_jitter()
        .build()
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
