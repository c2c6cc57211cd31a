//! Internal and external listeners (`--external-listen`, Kafka's named listeners): a
//! cluster whose brokers and coordinators each bind a second socket publishes both
//! addresses in etcd, and every address handed to a client is the one of the listener
//! the client asked through. A client that came in from outside (the host of a compose
//! cluster) is told only external addresses (brokers, coordinators, transaction log
//! owners, FindCoordinator on brokers and on coordinators), one on the cluster's own
//! network only internal ones; and a producer and consumer bootstrapped from the
//! external addresses alone run a transaction end to end.

use std::collections::{BTreeMap, BTreeSet};

use etcd_client::GetOptions;
use idem_client::{Isolation, ProducerRecord};
use idem_proto::v1::{FindCoordinatorRequest, MetadataRequest, MetadataResponse};
use idem_proto::ErrorCode;
use idem_tests::cluster::Cluster;
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::{raw, txn};

const EXTERNAL: [&str; 2] = ["--external-listen", "127.0.0.1:0"];
const TOPIC: &str = "through-the-front-door";
const TXN_ID: &str = "external-txn";

/// Every registration under `{/idem}/{dir}`, by id: (internal, external).
async fn published(etcd: &str, dir: &str) -> BTreeMap<i32, (String, String)> {
    let mut client = etcd_client::Client::connect([etcd], None)
        .await
        .expect("etcd connects");
    let answer = client
        .get(
            format!("/idem/{dir}/"),
            Some(GetOptions::new().with_prefix()),
        )
        .await
        .expect("etcd get");
    answer
        .kvs()
        .iter()
        .map(|kv| {
            let p: serde_json::Value =
                serde_json::from_slice(kv.value()).expect("registration JSON");
            let id = p.get("broker_id").or_else(|| p.get("id"));
            let id = id.and_then(|id| id.as_i64()).expect("an id");
            let text = |field: &str| {
                p.get(field)
                    .and_then(|a| a.as_str())
                    .unwrap_or_else(|| panic!("{dir}/{id} published no {field}: {p}"))
                    .to_string()
            };
            let id = i32::try_from(id).expect("an i32 id");
            (id, (text("address"), text("external_address")))
        })
        .collect()
}

fn internal(of: &BTreeMap<i32, (String, String)>) -> BTreeSet<String> {
    of.values().map(|(i, _)| i.clone()).collect()
}

fn external(of: &BTreeMap<i32, (String, String)>) -> BTreeSet<String> {
    of.values().map(|(_, e)| e.clone()).collect()
}

async fn metadata(address: &str) -> MetadataResponse {
    raw::connect(address)
        .await
        .metadata(MetadataRequest { topics: vec![] })
        .await
        .expect("Metadata")
        .into_inner()
}

/// The addresses a Metadata answer hands out: brokers, coordinators, and the owners of
/// the transaction log's partitions.
fn handed_out(m: &MetadataResponse) -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>) {
    (
        m.brokers.iter().map(|b| b.address.clone()).collect(),
        m.coordinators.iter().map(|c| c.address.clone()).collect(),
        m.txn_log_owners.iter().map(|o| o.address.clone()).collect(),
    )
}

/// FindCoordinator for `TXN_ID` asked of a coordinator (not a broker) at `address`,
/// until it knows the owner: a coordinator learns the other's claims by its periodic
/// scan, and answers the retriable COORDINATOR_NOT_AVAILABLE until then.
async fn find_on_coordinator(address: &str) -> String {
    let client = txn::coordinator_client(address)
        .await
        .expect("coordinator connects");
    let what = format!("{address} knows the owner of {TXN_ID}");
    let (found, _) = wait_until(PATIENCE, &what, || {
        let mut client = client.clone();
        async move {
            let answer = client
                .find_coordinator(FindCoordinatorRequest {
                    transactional_id: TXN_ID.into(),
                    group_id: String::new(),
                })
                .await
                .expect("FindCoordinator")
                .into_inner();
            match answer.error_code() {
                ErrorCode::None => Seen::Reached(answer.address),
                ErrorCode::CoordinatorNotAvailable => Seen::Not(answer.error_message),
                other => panic!("FindCoordinator refused with {other:?}: {answer:?}"),
            }
        }
    })
    .await;
    found
}

#[tokio::test]
async fn given_external_listeners_when_a_client_asks_through_either_then_it_is_told_that_listeners_addresses(
) {
    let mut cluster = Cluster::start_with_coordinators(3, 2, &EXTERNAL, &EXTERNAL).await;
    let etcd = cluster.etcd(0).endpoint();
    let brokers = published(&etcd, "brokers").await;
    let coordinators = published(&etcd, "coordinators/members").await;
    assert_eq!(brokers.len(), 3, "{brokers:?}");
    assert_eq!(coordinators.len(), 2, "{coordinators:?}");
    assert!(
        internal(&brokers).is_disjoint(&external(&brokers))
            && internal(&coordinators).is_disjoint(&external(&coordinators)),
        "each listener has its own socket: {brokers:?} {coordinators:?}"
    );

    // Inside: internal addresses only.
    let (b, c, owners) = handed_out(&metadata(&cluster.bootstrap()).await);
    assert_eq!(b, internal(&brokers));
    assert_eq!(c, internal(&coordinators));
    assert!(owners.is_subset(&internal(&coordinators)), "{owners:?}");
    assert!(!owners.is_empty());

    // Outside: external addresses only, whichever broker is asked.
    for (_, front_door) in brokers.values() {
        let (b, c, owners) = handed_out(&metadata(front_door).await);
        assert_eq!(b, external(&brokers), "asked through {front_door}");
        assert_eq!(c, external(&coordinators), "asked through {front_door}");
        assert!(owners.is_subset(&external(&coordinators)), "{owners:?}");
    }

    // FindCoordinator, of a broker and of a coordinator, through each listener.
    let (inside, outside) = brokers.values().next().cloned().expect("a broker");
    let owner = txn::find_coordinator(&inside, TXN_ID).await;
    let (owner_internal, owner_external) = coordinators
        .get(&owner.coordinator_id)
        .cloned()
        .expect("the owner is a registered coordinator");
    assert_eq!(owner.address, owner_internal);
    assert_eq!(
        txn::find_coordinator(&outside, TXN_ID).await.address,
        owner_external
    );
    for (coordinator_internal, coordinator_external) in coordinators.values() {
        assert_eq!(
            find_on_coordinator(coordinator_internal).await,
            owner_internal
        );
        assert_eq!(
            find_on_coordinator(coordinator_external).await,
            owner_external
        );
    }

    // A client that knows only the external addresses runs a transaction end to end.
    let outside_bootstrap = external(&brokers).into_iter().collect::<Vec<_>>().join(",");
    let admin = idem_client::Admin::connect(&outside_bootstrap)
        .await
        .expect("admin connects from outside");
    admin
        .create_topic(TOPIC, 3, 3)
        .await
        .expect("topic created from outside");
    let producer = txn::producer(&outside_bootstrap, TXN_ID).await;
    producer.begin().expect("begin");
    let mut sent = Vec::new();
    for i in 0..30 {
        let value = format!("v{i}");
        producer
            .send(ProducerRecord::new(TOPIC, value.clone()).partition(i % 3))
            .await
            .expect("send")
            .await
            .expect("acked");
        sent.push(value);
    }
    producer.commit().await.expect("commit from outside");
    txn::wait_until_stable(&outside_bootstrap, TOPIC, &[0, 1, 2]).await;
    let mut read = txn::values(
        &outside_bootstrap,
        TOPIC,
        &[0, 1, 2],
        Isolation::ReadCommitted,
    )
    .await;
    read.sort();
    sent.sort();
    assert_eq!(read, sent, "every committed record once, read from outside");
    cluster.stop_all();
}
