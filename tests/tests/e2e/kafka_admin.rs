//! Kafka admin tools list and describe what idem holds (issue 30): ListGroups lists
//! every group of every coordinator (or fails, never a shorter list), ListTransactions
//! and DescribeTransactions show a Kafka producer's transaction as its coordinator
//! holds it, DescribeProducers shows a partition leader's producer state, and
//! OffsetDelete removes only offsets no member is reading.

use std::collections::BTreeMap;

use idem_proto::v1::TxnInitProducerIdRequest;
use idem_tests::groups::{GroupClient, Member};
use idem_tests::kafka_clients::{python, TransactionalSession};
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::Cluster;
use kafka_protocol::messages::describe_producers_request::{
    DescribeProducersRequest, TopicRequest,
};
use kafka_protocol::messages::describe_producers_response::{
    DescribeProducersResponse, PartitionResponse,
};
use kafka_protocol::messages::describe_transactions_request::DescribeTransactionsRequest;
use kafka_protocol::messages::describe_transactions_response::{
    DescribeTransactionsResponse, TransactionState as Described,
};
use kafka_protocol::messages::list_groups_request::ListGroupsRequest;
use kafka_protocol::messages::list_groups_response::ListGroupsResponse;
use kafka_protocol::messages::list_transactions_request::ListTransactionsRequest;
use kafka_protocol::messages::list_transactions_response::ListTransactionsResponse;
use kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequest, OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use kafka_protocol::messages::offset_delete_response::OffsetDeleteResponse;
use kafka_protocol::messages::{GroupId, ProducerId, TopicName, TransactionalId};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Value};

use crate::acls::{binding, kafka_acl_cluster, txn_as, Secrets};
use crate::kafka::{exchange, read_response, request_frame};

const KAFKA_LISTEN: [&str; 2] = ["--kafka-listen", "127.0.0.1:0"];

const LIST_GROUPS: i16 = 16;
const OFFSET_DELETE: i16 = 47;
const DESCRIBE_PRODUCERS: i16 = 61;
const DESCRIBE_TRANSACTIONS: i16 = 65;
const LIST_TRANSACTIONS: i16 = 66;

async fn ask<T: kafka_protocol::protocol::Decodable>(
    kafka: &str,
    api_key: i16,
    version: i16,
    body: &impl kafka_protocol::protocol::Encodable,
) -> T {
    let answer = exchange(kafka, &request_frame(api_key, version, body)).await;
    read_response(&answer, api_key, version)
}

/// Raw ListGroups v4: the groups by id with their state, or the top-level code.
async fn list_groups(kafka: &str) -> Result<BTreeMap<String, String>, i16> {
    let answer: ListGroupsResponse =
        ask(kafka, LIST_GROUPS, 4, &ListGroupsRequest::default()).await;
    if answer.error_code != 0 {
        return Err(answer.error_code);
    }
    Ok(answer
        .groups
        .into_iter()
        .map(|g| (g.group_id.0.to_string(), g.group_state.to_string()))
        .collect())
}

/// Raw ListTransactions v1 with `request`'s filters: (id, producer id, state).
async fn list_transactions(
    kafka: &str,
    request: ListTransactionsRequest,
) -> Vec<(String, i64, String)> {
    let answer: ListTransactionsResponse = ask(kafka, LIST_TRANSACTIONS, 1, &request).await;
    assert_eq!(answer.error_code, 0, "{answer:?}");
    answer
        .transaction_states
        .into_iter()
        .map(|t| {
            (
                t.transactional_id.0.to_string(),
                t.producer_id.0,
                t.transaction_state.to_string(),
            )
        })
        .collect()
}

fn names(names: &[&'static str]) -> Vec<StrBytes> {
    names.iter().map(|n| StrBytes::from_static_str(n)).collect()
}

/// Raw DescribeTransactions v0 of `ids`.
async fn describe_transactions(kafka: &str, ids: &[&str]) -> Vec<Described> {
    let request = DescribeTransactionsRequest::default().with_transactional_ids(
        ids.iter()
            .map(|id| TransactionalId(StrBytes::from_string((*id).to_string())))
            .collect(),
    );
    let answer: DescribeTransactionsResponse = ask(kafka, DESCRIBE_TRANSACTIONS, 0, &request).await;
    answer.transaction_states
}

/// Raw DescribeProducers v0 of `topic`'s `partitions`.
async fn describe_producers(
    kafka: &str,
    topic: &str,
    partitions: &[i32],
) -> Vec<PartitionResponse> {
    let request = DescribeProducersRequest::default().with_topics(vec![TopicRequest::default()
        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
        .with_partition_indexes(partitions.to_vec())]);
    let answer: DescribeProducersResponse = ask(kafka, DESCRIBE_PRODUCERS, 0, &request).await;
    answer
        .topics
        .into_iter()
        .next()
        .expect("the topic answered")
        .partitions
}

/// The first of `g0`, `g1`, … whose coordinator is `coordinator`, other than `taken`.
async fn group_on(grpc: &str, coordinator: i32, taken: &[String]) -> String {
    for i in 0..64 {
        let id = format!("g{i}");
        if taken.contains(&id) {
            continue;
        }
        let (owner, _) = GroupClient::new(grpc, &id).find().await.expect("found");
        if owner == coordinator {
            return id;
        }
    }
    panic!("no group id of 64 hashes to coordinator {coordinator}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_groups_on_two_coordinators_when_a_kafka_admin_lists_them_then_every_group_with_its_state_and_a_dead_coordinator_is_an_error(
) {
    let mut cluster = Cluster::start_with_coordinators(1, 2, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 2, 1).await;
    let grpc = cluster.bootstrap();
    let kafka = cluster.broker(1).kafka_bootstrap();

    // A Stable group (one member) and an Empty one (offsets only) on each coordinator.
    let mut stable = Vec::new();
    let mut empty = Vec::new();
    for coordinator in [1, 2] {
        let taken: Vec<String> = stable.iter().chain(&empty).cloned().collect();
        let id = group_on(&grpc, coordinator, &taken).await;
        stable.push(id.clone());
        let taken: Vec<String> = stable.iter().chain(&empty).cloned().collect();
        empty.push(group_on(&grpc, coordinator, &taken).await);
    }
    for id in &stable {
        let client = GroupClient::new(&grpc, id);
        let mut member = Member::new("m1", &["orders"]);
        let mut state = String::new();
        for _ in 0..20 {
            member.heartbeat(&client).await;
            state = client.describe().await.state;
            if state == "Stable" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        assert_eq!(state, "Stable", "group {id}");
    }
    for id in &empty {
        GroupClient::new(&grpc, id)
            .commit("", -1, &[("orders", 0, 5)])
            .await;
    }

    let listed = python("list_groups.py", &[&kafka]).await;
    let mut expected: Vec<Value> = stable
        .iter()
        .map(|id| json!({"group_id": id, "state": "STABLE", "type": "CONSUMER", "simple": false}))
        .chain(empty.iter().map(
            |id| json!({"group_id": id, "state": "EMPTY", "type": "CONSUMER", "simple": false}),
        ))
        .collect();
    expected.sort_by_key(|g| g["group_id"].as_str().unwrap_or_default().to_string());
    assert_eq!(listed["valid"], Value::Array(expected), "{listed}");
    assert_eq!(listed["errors"], json!([]), "{listed}");

    let only_stable = python("list_groups.py", &[&kafka, "STABLE"]).await;
    let ids: Vec<&str> = only_stable["valid"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|g| g["group_id"].as_str())
        .collect();
    let mut want: Vec<&str> = stable.iter().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(ids, want, "{only_stable}");

    // Coordinator 2 dies: until its slices are taken over, ListGroups fails as a whole.
    cluster.kill_coordinator(2);
    assert_eq!(
        list_groups(&kafka).await,
        Err(15),
        "COORDINATOR_NOT_AVAILABLE, not the half coordinator 1 holds"
    );
    // Once coordinator 1 took the slices over, every group is listed again.
    let all: Vec<String> = stable.iter().chain(&empty).cloned().collect();
    wait_until(PATIENCE, "every group is listed again", || async {
        match list_groups(&kafka).await {
            Ok(groups) if groups.keys().cloned().collect::<Vec<_>>() == sorted(&all) => {
                Seen::Reached(())
            }
            other => Seen::Not(format!("{other:?}")),
        }
    })
    .await;
}

fn sorted(ids: &[String]) -> Vec<String> {
    let mut ids = ids.to_vec();
    ids.sort();
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_open_kafka_transaction_when_listed_and_described_then_ongoing_with_its_partitions_until_committed(
) {
    let cluster = Cluster::start_with_coordinators(1, 2, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 2, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();

    let steps = json!([
        ["init", "p", "checkout"],
        ["begin", "p"],
        ["produce", "p", "orders", 0, "a"],
        ["produce", "p", "orders", 1, "b"],
        ["flush", "p"],
        ["wait"],
        ["commit", "p"],
    ]);
    let mut session = TransactionalSession::start(
        &kafka,
        &steps,
        &["transaction.timeout.ms=30000", "message.timeout.ms=30000"],
    );
    let ran = session.until_waiting().await;
    assert!(ran.iter().all(|s| s["ok"] == Value::Bool(true)), "{ran:?}");

    let open = list_transactions(&kafka, ListTransactionsRequest::default()).await;
    assert_eq!(open.len(), 1, "{open:?}");
    let (id, producer_id, state) = open[0].clone();
    assert_eq!((id.as_str(), state.as_str()), ("checkout", "Ongoing"));
    assert!(producer_id >= 0, "{open:?}");

    let described = describe_transactions(&kafka, &["checkout", "nobody"]).await;
    let checkout = &described[0];
    assert_eq!(checkout.error_code, 0, "{checkout:?}");
    assert_eq!(checkout.transaction_state.as_str(), "Ongoing");
    assert_eq!(checkout.producer_id, ProducerId(producer_id));
    assert_eq!(checkout.transaction_timeout_ms, 30_000);
    assert!(checkout.transaction_start_time_ms > 0, "{checkout:?}");
    let partitions: Vec<(String, Vec<i32>)> = checkout
        .topics
        .iter()
        .map(|t| (t.topic.0.to_string(), t.partitions.clone()))
        .collect();
    assert_eq!(partitions, [("orders".to_string(), vec![0, 1])]);
    assert_eq!(described[1].error_code, 105, "TRANSACTIONAL_ID_NOT_FOUND");

    // The open transaction in its partitions, from their leader: BEGIN at offset 0.
    let producers = describe_producers(&kafka, "orders", &[0, 1]).await;
    for partition in &producers {
        assert_eq!(partition.error_code, 0, "{partition:?}");
        let [producer] = partition.active_producers.as_slice() else {
            panic!("one producer: {partition:?}");
        };
        assert_eq!(producer.producer_id, ProducerId(producer_id));
        assert_eq!(producer.producer_epoch, i32::from(checkout.producer_epoch));
        assert_eq!(producer.current_txn_start_offset, 0, "{producer:?}");
        assert_eq!(producer.last_sequence, 0, "one record each");
    }

    // Filters.
    let by_state = |states: &[&'static str]| {
        ListTransactionsRequest::default().with_state_filters(names(states))
    };
    assert_eq!(
        list_transactions(&kafka, by_state(&["Ongoing"])).await,
        open
    );
    assert!(list_transactions(&kafka, by_state(&["CompleteCommit"]))
        .await
        .is_empty());
    let by_producer =
        |id: i64| ListTransactionsRequest::default().with_producer_id_filters(vec![ProducerId(id)]);
    assert_eq!(
        list_transactions(&kafka, by_producer(producer_id)).await,
        open
    );
    assert!(list_transactions(&kafka, by_producer(producer_id + 1))
        .await
        .is_empty());
    let longer_than = |ms: i64| ListTransactionsRequest::default().with_duration_filter(ms);
    assert!(list_transactions(&kafka, longer_than(3_600_000))
        .await
        .is_empty());
    assert_eq!(list_transactions(&kafka, longer_than(0)).await, open);

    session.proceed().await;
    let (ran, _) = session.finish().await;
    assert!(ran.iter().all(|s| s["ok"] == Value::Bool(true)), "{ran:?}");

    // Committed: no transaction open any more, anywhere.
    let (ended, _) = wait_until(PATIENCE, "the commit completes", || async {
        let described = describe_transactions(&kafka, &["checkout"]).await;
        let state = described[0].transaction_state.to_string();
        if state == "CompleteCommit" || state == "Empty" {
            Seen::Reached(described)
        } else {
            Seen::Not(state)
        }
    })
    .await;
    assert!(ended[0].topics.is_empty(), "{ended:?}");
    let ongoing = list_transactions(&kafka, by_state(&["Ongoing"])).await;
    assert!(ongoing.is_empty(), "{ongoing:?}");
    let done = list_transactions(&kafka, by_state(&["CompleteCommit", "Empty"])).await;
    assert_eq!(done.len(), 1, "{done:?}");
    for partition in describe_producers(&kafka, "orders", &[0, 1]).await {
        let producer = &partition.active_producers[0];
        assert_eq!(producer.current_txn_start_offset, -1, "{producer:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_idempotent_kafka_producer_when_its_partition_is_described_then_the_leader_reports_its_last_sequence_and_a_follower_refuses(
) {
    let cluster = Cluster::start_with_coordinators(2, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("events", 1, 2).await;
    let leader = cluster.leader_of("events", 0).await.leader_id;
    let follower = if leader == 1 { 2 } else { 1 };
    let kafka = cluster.broker(leader).kafka_bootstrap();

    const BATCHES: usize = 4;
    const PER_BATCH: usize = 3;
    let before = now_ms();
    let produced = python(
        "produce_batches.py",
        &[
            &kafka,
            "events",
            "0",
            &BATCHES.to_string(),
            &PER_BATCH.to_string(),
        ],
    )
    .await;
    let after = now_ms();
    assert_eq!(
        produced["delivered"],
        json!(BATCHES * PER_BATCH),
        "{produced}"
    );

    let answer = describe_producers(&kafka, "events", &[0]).await;
    let [partition] = answer.as_slice() else {
        panic!("one partition: {answer:?}");
    };
    assert_eq!(partition.error_code, 0, "{partition:?}");
    let [producer] = partition.active_producers.as_slice() else {
        panic!("one producer: {partition:?}");
    };
    assert!(producer.producer_id.0 >= 0, "{producer:?}");
    assert_eq!(producer.producer_epoch, 0);
    // librdkafka numbers records from 0 within the producer id: 12 records, 0..=11.
    assert_eq!(producer.last_sequence, (BATCHES * PER_BATCH) as i32 - 1);
    assert!(
        (before..=after).contains(&producer.last_timestamp),
        "{producer:?} within {before}..={after}"
    );
    assert_eq!(producer.coordinator_epoch, -1, "no marker ever");
    assert_eq!(producer.current_txn_start_offset, -1, "no transaction");

    let at_follower =
        describe_producers(&cluster.broker(follower).kafka_bootstrap(), "events", &[0]).await;
    assert_eq!(
        at_follower[0].error_code, 6,
        "NOT_LEADER_OR_FOLLOWER: {at_follower:?}"
    );
    assert!(at_follower[0].active_producers.is_empty());

    let unknown = describe_producers(&kafka, "events", &[7]).await;
    assert_eq!(
        unknown[0].error_code, 3,
        "UNKNOWN_TOPIC_OR_PARTITION: {unknown:?}"
    );
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_acls_when_an_anonymous_kafka_admin_lists_and_describes_then_only_what_it_may_describe(
) {
    let secrets = Secrets::new();
    let (cluster, admin) = kafka_acl_cluster(&secrets).await;
    admin
        .create_topic("guarded", 1, 1)
        .await
        .expect("topic created by the operator");
    // Two transactional ids, initialised by the operator; anonymous clients may
    // describe one of them.
    let coordinator = cluster.coordinator(1).addr().to_string();
    let mut txn_coordinator = txn_as(&coordinator, "t-admin").await;
    for id in ["visible", "hidden"] {
        let answer = txn_coordinator
            .init_producer_id(TxnInitProducerIdRequest {
                transactional_id: id.into(),
                transaction_timeout_ms: 30_000,
                producer_id: None,
                producer_epoch: 0,
            })
            .await
            .expect("InitProducerId")
            .into_inner();
        assert_eq!(answer.error_code, 0, "{answer:?}");
    }
    // Two groups likewise.
    for group in ["visible-group", "hidden-group"] {
        admin
            .reset_group_offsets(group, &[(("guarded".to_string(), 0), 0)])
            .await
            .expect("offsets set by the operator");
    }
    admin
        .create_acls(&[
            binding(
                "User:ANONYMOUS",
                "transactional-id",
                "visible",
                "literal",
                "describe",
            ),
            binding(
                "User:ANONYMOUS",
                "group",
                "visible-group",
                "literal",
                "describe",
            ),
        ])
        .await
        .expect("ACLs stored");
    let kafka = cluster.broker(1).kafka_bootstrap();

    // ACLs reach the broker through an etcd watch.
    let (listed, _) = wait_until(PATIENCE, "the broker applies the ACL", || async {
        let listed = list_transactions(&kafka, ListTransactionsRequest::default()).await;
        if listed.is_empty() {
            Seen::Not("nothing listed yet".to_string())
        } else {
            Seen::Reached(listed)
        }
    })
    .await;
    let ids: Vec<&str> = listed.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids, ["visible"], "{listed:?}");

    let described = describe_transactions(&kafka, &["visible", "hidden"]).await;
    assert_eq!(described[0].error_code, 0, "{:?}", described[0]);
    assert_eq!(described[0].transaction_state.as_str(), "Empty");
    assert_eq!(
        described[1].error_code, 53,
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED: {:?}",
        described[1]
    );

    let producers = describe_producers(&kafka, "guarded", &[0]).await;
    assert_eq!(producers[0].error_code, 29, "TOPIC_AUTHORIZATION_FAILED");

    let groups = list_groups(&kafka).await.expect("listed");
    assert_eq!(
        groups.keys().collect::<Vec<_>>(),
        ["visible-group"],
        "{groups:?}"
    );
}

/// Raw OffsetDelete v0 of `group`'s `partitions` (topic, partition): the top-level code
/// and each partition's.
async fn offset_delete(
    kafka: &str,
    group: &str,
    partitions: &[(&str, i32)],
) -> (i16, BTreeMap<(String, i32), i16>) {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (topic, partition) in partitions {
        topics.entry(topic).or_default().push(*partition);
    }
    let request = OffsetDeleteRequest::default()
        .with_group_id(GroupId(StrBytes::from_string(group.to_string())))
        .with_topics(
            topics
                .into_iter()
                .map(|(topic, partitions)| {
                    OffsetDeleteRequestTopic::default()
                        .with_name(TopicName(StrBytes::from_string(topic.to_string())))
                        .with_partitions(
                            partitions
                                .into_iter()
                                .map(|p| {
                                    OffsetDeleteRequestPartition::default().with_partition_index(p)
                                })
                                .collect(),
                        )
                })
                .collect(),
        );
    let answer: OffsetDeleteResponse = ask(kafka, OFFSET_DELETE, 0, &request).await;
    let codes = answer
        .topics
        .into_iter()
        .flat_map(|t| {
            let name = t.name.0.to_string();
            t.partitions
                .into_iter()
                .map(move |p| ((name.clone(), p.partition_index), p.error_code))
        })
        .collect();
    (answer.error_code, codes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_committed_offsets_when_a_kafka_admin_deletes_them_then_unsubscribed_topics_lose_them_and_subscribed_ones_are_refused(
) {
    let cluster = Cluster::start_with_coordinators(1, 1, &KAFKA_LISTEN, &[]).await;
    cluster.create_topic("orders", 1, 1).await;
    cluster.create_topic("audit", 2, 1).await;
    let grpc = cluster.bootstrap();
    let kafka = cluster.broker(1).kafka_bootstrap();

    // Offsets committed while the group was empty, then a member reading `orders`.
    let group = GroupClient::new(&grpc, "cleanup");
    group
        .commit(
            "",
            -1,
            &[("orders", 0, 5), ("audit", 0, 7), ("audit", 1, 9)],
        )
        .await;
    let mut member = Member::new("m1", &["orders"]);
    member.heartbeat(&group).await;
    assert_eq!(group.describe().await.members.len(), 1);

    let (code, partitions) = offset_delete(
        &kafka,
        "cleanup",
        &[("orders", 0), ("audit", 0), ("audit", 1)],
    )
    .await;
    assert_eq!(code, 0);
    assert_eq!(
        partitions,
        BTreeMap::from([
            (("audit".to_string(), 0), 0),
            (("audit".to_string(), 1), 0),
            (("orders".to_string(), 0), 86),
        ]),
        "GROUP_SUBSCRIBED_TO_TOPIC for the topic the member reads"
    );
    assert_eq!(group.committed("audit", 2).await, [-1, -1], "deleted");
    assert_eq!(group.committed("orders", 1).await, [5], "kept");

    let (unknown, _) = offset_delete(&kafka, "nobody", &[("audit", 0)]).await;
    assert_eq!(unknown, 69, "GROUP_ID_NOT_FOUND");
}
