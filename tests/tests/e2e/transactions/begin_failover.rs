//! A BEGIN marker is answered once it is in the leader's log, before any follower holds
//! it: the transaction's data after it is what waits for the in-sync replicas. Lost
//! with its leader before any data was acknowledged, it costs the transaction, never
//! correctness: the new leader refuses the transaction's data, the ABORT goes through,
//! nothing of it is ever readable and nothing is left open.

use bytes::Bytes;
use idem_proto::v1::{
    ControlType, ListOpenTransactionsRequest, PartitionProduceData, ProduceRequest,
    TopicProduceData,
};
use idem_proto::ErrorCode;
use idem_tests::raw::{self, RawClient};
use idem_tests::txn::wait_until_stable;
use idem_tests::Cluster;

const TOPIC: &str = "ledger";
const PRODUCER_ID: i64 = 4242;

async fn marker(client: &mut RawClient, control: ControlType, epoch: i32) -> (ErrorCode, i64) {
    raw::write_marker_at_0(client, TOPIC, PRODUCER_ID, control, epoch).await
}

/// Produces with acks=all, waiting at most `timeout_ms` for the in-sync replicas.
async fn produce(client: &mut RawClient, records: Bytes, timeout_ms: i32) -> ErrorCode {
    let answer = client
        .produce(ProduceRequest {
            coordinator_epoch: None,
            acks: -1,
            timeout_ms,
            topics: vec![TopicProduceData {
                name: TOPIC.into(),
                partitions: vec![PartitionProduceData {
                    partition: 0,
                    records,
                }],
            }],
        })
        .await
        .expect("Produce")
        .into_inner();
    answer.topics[0].partitions[0].error_code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_begin_only_the_leader_held_when_it_died_then_the_transaction_aborts_and_nothing_of_it_is_visible(
) {
    let mut cluster = Cluster::start(3, &[]);
    cluster.create_topic(TOPIC, 1, 3).await;
    let old = cluster.leader_of(TOPIC, 0).await;
    let followers: Vec<i32> = old
        .replicas
        .iter()
        .copied()
        .filter(|id| *id != old.leader_id)
        .collect();
    let mut at_leader = raw::connect(&cluster.broker(old.leader_id).bootstrap()).await;
    let batch = raw::transactional_batch(PRODUCER_ID, 0, 0, &["debit-1", "credit-1"]);

    // Killed, not paused: a frozen follower may hold a fetch answer in its socket and
    // append it when it wakes.
    for id in &followers {
        cluster.kill(*id);
    }
    // Both followers are down but still in sync: a BEGIN that waited for them would
    // time out (5 s) instead.
    assert_eq!(
        marker(&mut at_leader, ControlType::Begin, 0).await,
        (ErrorCode::None, 0)
    );
    // The data after it is appended, but not acknowledged without the followers.
    assert_eq!(
        produce(&mut at_leader, batch.clone(), 300).await,
        ErrorCode::RequestTimedOut
    );
    cluster.kill(old.leader_id);
    for id in &followers {
        cluster.restart(*id);
    }
    let new = cluster.new_leader(TOPIC, 0, &old).await;
    let mut at_new = raw::connect(&cluster.broker(new.leader_id).bootstrap()).await;

    // The new leader never saw the BEGIN: the producer's retry is refused and appends
    // nothing, so the transaction cannot commit there.
    assert_eq!(
        produce(&mut at_new, batch, 5_000).await,
        ErrorCode::InvalidTxnState
    );
    let (code, offset) = marker(&mut at_new, ControlType::Abort, 1).await;
    assert_eq!(
        code,
        ErrorCode::None,
        "an ABORT without its BEGIN is accepted"
    );
    assert_eq!(offset, 0, "the ABORT is the partition's first batch");

    let bootstrap = cluster.broker(new.leader_id).bootstrap();
    assert_eq!(wait_until_stable(&bootstrap, TOPIC, &[0]).await, vec![1]);
    assert!(
        raw::read_partition(&mut at_new, TOPIC, 0).await.is_empty(),
        "no record of the transaction is readable, even read_uncommitted"
    );
    let open = at_new
        .list_open_transactions(ListOpenTransactionsRequest {
            topics: vec![TOPIC.into()],
        })
        .await
        .expect("ListOpenTransactions")
        .into_inner();
    assert!(open.transactions.is_empty(), "{:?}", open.transactions);

    // The old leader comes back, cuts the BEGIN and the data only it held, and
    // follows: every replica holds the same single batch, the ABORT.
    cluster.restart(old.leader_id);
    cluster
        .wait_for(old.leader_id, TOPIC, 0, |p| p.isr.len() == 3)
        .await;
    cluster.stop_all();
    assert_eq!(cluster.compare_replicas(TOPIC, 0, 1), 1);
}
