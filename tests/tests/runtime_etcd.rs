//! Guarantee: a server's etcd lease is kept alive for as long as it runs, reported lost
//! the moment etcd says it is gone, and revoked (its keys deleted) on a clean stop; a
//! wait for another holder's key ends when the key goes, even when it went between the
//! read and the watch.
//!
//! Every test starts its own real `etcd` (see `idem_tests::etcd`).

use std::time::Duration;

use etcd_client::{Client, PutOptions};
use idem_runtime::lease_keeper::LeaseKeeper;
use idem_runtime::shutdown::CancellationToken;
use idem_runtime::until_deleted::{until_deleted, Waited};
use idem_tests::etcd::EtcdServer;
use tokio::time::Instant;

/// Bounds every wait for an event: CI machines are slow and shared.
const PATIENCE: Duration = Duration::from_secs(30);

async fn client(etcd: &EtcdServer) -> Client {
    Client::connect(etcd.endpoints(), None)
        .await
        .expect("etcd client")
}

#[tokio::test]
async fn given_a_kept_lease_when_its_ttl_passes_then_it_still_lives_and_is_held() {
    let etcd = EtcdServer::start();
    let mut raw = client(&etcd).await;
    let keeper = LeaseKeeper::grant(&raw, Duration::from_secs(1), &CancellationToken::new())
        .await
        .expect("grant");
    // Three TTLs: the lease outlives them only if it is refreshed.
    let outlived = tokio::time::timeout(Duration::from_secs(3), keeper.lost().cancelled()).await;
    assert!(outlived.is_err(), "the lease was reported lost");
    let ttl = raw
        .lease_time_to_live(keeper.lease_id(), None)
        .await
        .expect("time to live")
        .ttl();
    assert!(ttl > 0, "etcd has the lease alive, ttl {ttl}");
    assert!(keeper.holds());
}

#[tokio::test]
async fn given_a_kept_lease_when_someone_revokes_it_then_it_is_reported_lost_and_not_held() {
    let etcd = EtcdServer::start();
    let mut raw = client(&etcd).await;
    let keeper = LeaseKeeper::grant(&raw, Duration::from_secs(3), &CancellationToken::new())
        .await
        .expect("grant");
    raw.lease_revoke(keeper.lease_id()).await.expect("revoke");
    tokio::time::timeout(PATIENCE, keeper.lost().cancelled())
        .await
        .expect("the loss is reported");
    assert!(!keeper.holds());
}

#[tokio::test]
async fn given_a_key_bound_to_a_kept_lease_when_the_keeper_revokes_then_the_key_is_gone() {
    let etcd = EtcdServer::start();
    let mut raw = client(&etcd).await;
    let stop = CancellationToken::new();
    let keeper = LeaseKeeper::grant(&raw, Duration::from_secs(60), &stop)
        .await
        .expect("grant");
    let put = raw
        .put(
            "/k",
            "v",
            Some(PutOptions::new().with_lease(keeper.lease_id())),
        )
        .await
        .expect("put");
    let seen_at = put.header().map_or(0, |h| h.revision());
    let mut watcher = raw.clone();
    let waiting = tokio::spawn(async move {
        until_deleted(&mut watcher, "/k", seen_at, Instant::now() + PATIENCE).await
    });
    keeper.revoke().await;
    assert!(!keeper.holds());
    let waited = waiting.await.expect("joined").expect("watch");
    assert_eq!(waited, Waited::Deleted);
    let left = raw.get("/k", None).await.expect("get");
    assert!(left.kvs().is_empty());
}

#[tokio::test]
async fn given_a_key_deleted_after_it_was_read_when_waiting_then_the_delete_is_seen() {
    let etcd = EtcdServer::start();
    let mut raw = client(&etcd).await;
    let put = raw.put("/held", "x", None).await.expect("put");
    let seen_at = put.header().map_or(0, |h| h.revision());
    raw.delete("/held", None).await.expect("delete");
    let waited = until_deleted(&mut raw, "/held", seen_at, Instant::now() + PATIENCE)
        .await
        .expect("watch");
    assert_eq!(waited, Waited::Deleted);
}

#[tokio::test]
async fn given_a_key_that_stays_when_waiting_then_the_wait_gives_up_at_its_deadline() {
    let etcd = EtcdServer::start();
    let mut raw = client(&etcd).await;
    let put = raw.put("/stays", "x", None).await.expect("put");
    let seen_at = put.header().map_or(0, |h| h.revision());
    let waited = until_deleted(
        &mut raw,
        "/stays",
        seen_at,
        Instant::now() + Duration::from_millis(200),
    )
    .await
    .expect("watch");
    assert_eq!(waited, Waited::GaveUp);
}
