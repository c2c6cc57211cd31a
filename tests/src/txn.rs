//! Transaction helpers for end-to-end tests: a bare coordinator client for exact control
//! of the wire, transactional producers with short timeouts, and readers that return
//! what a consumer of either isolation level sees, read to the partition's end (the LSO
//! for read_committed, the high watermark for read_uncommitted).

use std::time::{Duration, Instant};

use idem_client::{
    Admin, ClientError, Consumer, ConsumerConfig, ConsumerRecord, Isolation, OffsetSpec,
    ProducerRecord, TransactionalConfig, TransactionalProducer,
};
use idem_proto::txn::{txn_log_partition, TXN_LOG_TOPIC};
use idem_proto::v1::txn_coordinator_client::TxnCoordinatorClient;
use idem_proto::v1::{
    DescribeTransactionRequest, FindCoordinatorRequest, FindCoordinatorResponse,
    ListTransactionsRequest, TransactionDescription, TxnInitProducerIdRequest,
    TxnInitProducerIdResponse,
};
use idem_proto::ErrorCode;
use tonic::transport::Channel;

use crate::cluster::TXN_LOG_PARTITIONS;
use crate::raw;
use crate::wait::{try_wait_until, wait_until, Seen, PATIENCE};
use crate::Cluster;

pub type RawCoordinator = TxnCoordinatorClient<Channel>;

pub async fn coordinator_client(address: &str) -> Result<RawCoordinator, tonic::transport::Error> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .expect("endpoint")
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(10))
        .connect()
        .await?;
    Ok(TxnCoordinatorClient::new(channel))
}

/// A raw InitProducerId for `transactional_id`; `renewing`: the caller's own producer id
/// and epoch when a running instance renews itself, `None` for a new instance.
pub async fn init_producer_id(
    coordinator: &mut RawCoordinator,
    transactional_id: &str,
    timeout_ms: i32,
    renewing: Option<(i64, i32)>,
) -> TxnInitProducerIdResponse {
    coordinator
        .init_producer_id(TxnInitProducerIdRequest {
            transactional_id: transactional_id.into(),
            transaction_timeout_ms: timeout_ms,
            producer_id: renewing.map(|(id, _)| id),
            producer_epoch: renewing.map_or(0, |(_, epoch)| epoch),
        })
        .await
        .expect("InitProducerId")
        .into_inner()
}

/// The transaction log partitions a coordinator owns and has loaded.
pub async fn owned_partitions(address: &str) -> Result<Vec<i32>, String> {
    let mut client = coordinator_client(address)
        .await
        .map_err(|e| e.to_string())?;
    let answer = client
        .list_transactions(ListTransactionsRequest { states: Vec::new() })
        .await
        .map_err(|e| e.to_string())?
        .into_inner();
    Ok(answer.owned_partitions)
}

/// Asks a broker which coordinator owns `transactional_id`, until one does.
pub async fn find_coordinator(bootstrap: &str, transactional_id: &str) -> FindCoordinatorResponse {
    let broker = raw::connect(bootstrap).await;
    let what = format!("a coordinator owns {transactional_id}");
    let (answer, _) = wait_until(PATIENCE, &what, || {
        let mut broker = broker.clone();
        async move {
            let answer = broker
                .find_coordinator(FindCoordinatorRequest {
                    transactional_id: transactional_id.into(),
                    group_id: String::new(),
                })
                .await
                .expect("FindCoordinator")
                .into_inner();
            if answer.error_code() == ErrorCode::None {
                Seen::Reached(answer)
            } else {
                Seen::Not(answer.error_message)
            }
        }
    })
    .await;
    answer
}

/// A transactional id `<prefix>-<n>` whose `__transaction_state` partition another
/// broker than `broker` leads, so the coordinator's appends for it do not wait for
/// `broker` while a test pauses it; with that partition.
pub async fn id_logged_away_from(cluster: &Cluster, prefix: &str, broker: i32) -> (String, i32) {
    for candidate in (0..).map(|i| format!("{prefix}-{i}")) {
        let partition = txn_log_partition(&candidate, TXN_LOG_PARTITIONS);
        if cluster.leader_of(TXN_LOG_TOPIC, partition).await.leader_id != broker {
            return (candidate, partition);
        }
    }
    unreachable!("the candidates never end")
}

/// One transaction of one record, `value` to partition 0 of `topic`: begin, send and
/// wait for its acknowledgement, then commit; returns what the commit returns.
pub async fn commit_one(
    producer: &TransactionalProducer,
    topic: &str,
    value: &str,
) -> Result<(), ClientError> {
    producer.begin()?;
    producer
        .send(ProducerRecord::new(topic, value.to_string()).partition(0))
        .await?
        .await?;
    producer.commit().await
}

/// A transactional producer with short request timeouts, initialised.
pub async fn producer(bootstrap: &str, transactional_id: &str) -> TransactionalProducer {
    producer_with_timeout(bootstrap, transactional_id, Duration::from_secs(60)).await
}

/// [`producer`] with the transaction timeout a test needs.
pub async fn producer_with_timeout(
    bootstrap: &str,
    transactional_id: &str,
    transaction_timeout: Duration,
) -> TransactionalProducer {
    let config = TransactionalConfig {
        transaction_timeout,
        request_timeout: Duration::from_secs(5),
        delivery_timeout: Duration::from_secs(60),
        linger: Duration::ZERO,
        ..TransactionalConfig::new(bootstrap, transactional_id)
    };
    let producer = TransactionalProducer::connect(config)
        .await
        .expect("transactional producer connects");
    producer
        .init_transactions()
        .await
        .expect("init_transactions");
    producer
}

/// `(high watermark, last stable offset)` of a partition, from its leader.
pub async fn offsets(admin: &Admin, topic: &str, partition: i32) -> (i64, i64) {
    let hw = admin
        .list_offsets(
            topic,
            partition,
            OffsetSpec::Latest,
            Isolation::ReadUncommitted,
        )
        .await
        .expect("high watermark");
    let lso = admin
        .list_offsets(
            topic,
            partition,
            OffsetSpec::Latest,
            Isolation::ReadCommitted,
        )
        .await
        .expect("last stable offset");
    (hw, lso)
}

/// Waits until no transaction holds back `topic`'s partitions: the LSO equals the high
/// watermark (every marker is written and replicated). Returns the high watermarks.
pub async fn wait_until_stable(bootstrap: &str, topic: &str, partitions: &[i32]) -> Vec<i64> {
    wait_for_offsets(
        bootstrap,
        topic,
        partitions,
        "reach the high watermark",
        |hw, lso| hw == lso,
    )
    .await
}

/// Waits until the last stable offset of each of `topic`'s `partitions` reached
/// `offset` (say, past a transaction's COMMIT marker while a later one is open).
pub async fn wait_for_lso(bootstrap: &str, topic: &str, partitions: &[i32], offset: i64) {
    let goal = format!("reach {offset}");
    wait_for_offsets(bootstrap, topic, partitions, &goal, |_, lso| lso >= offset).await;
}

/// Polls each partition's `(high watermark, LSO)` until `done` holds (up to
/// `PATIENCE`, then fails saying the LSO did not `goal`). Returns the high watermarks.
async fn wait_for_offsets(
    bootstrap: &str,
    topic: &str,
    partitions: &[i32],
    goal: &str,
    done: impl Fn(i64, i64) -> bool,
) -> Vec<i64> {
    let admin = Admin::connect(bootstrap).await.expect("admin connects");
    let started = Instant::now();
    let mut ends = Vec::new();
    // One patience for all partitions: each waits for what is left of it.
    for p in partitions {
        let left = PATIENCE.saturating_sub(started.elapsed());
        let waited = try_wait_until(left, || async {
            let (hw, lso) = offsets(&admin, topic, *p).await;
            if done(hw, lso) {
                Seen::Reached(hw)
            } else {
                Seen::Not(format!("last stable offset {lso}, high watermark {hw}"))
            }
        })
        .await;
        match waited {
            Ok((hw, _)) => ends.push(hw),
            // Which transactions hold the LSO back is what a failure needs to say.
            Err((waited, last)) => panic!(
                "{topic}-{p}: the last stable offset did {goal}: not reached within \
                 {waited:?}; last seen: {last}; open transactions: {:#?}",
                admin.list_transactions().await
            ),
        }
    }
    ends
}

/// Everything a consumer of `isolation` reads from the start of the given partitions
/// to their current end (LSO or high watermark).
pub async fn read(
    bootstrap: &str,
    topic: &str,
    partitions: &[i32],
    isolation: Isolation,
) -> Vec<ConsumerRecord> {
    let admin = Admin::connect(bootstrap).await.expect("admin connects");
    let mut ends = Vec::new();
    for p in partitions {
        let end = admin
            .list_offsets(topic, *p, OffsetSpec::Latest, isolation)
            .await
            .expect("list offsets");
        ends.push(end);
    }
    let config = ConsumerConfig {
        isolation,
        max_wait: Duration::from_millis(50),
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::connect(bootstrap, config)
        .await
        .expect("consumer connects");
    consumer.assign(partitions.iter().map(|p| (topic.to_string(), *p)).collect());
    for p in partitions {
        consumer.seek_to_beginning(topic, *p).expect("seek");
    }
    let started = Instant::now();
    let mut records = Vec::new();
    loop {
        let mut done = true;
        for (p, end) in partitions.iter().zip(&ends) {
            if consumer.position(topic, *p).await.expect("position") < *end {
                done = false;
            }
        }
        if done {
            break;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{topic}: the consumer never reached the end offsets {ends:?}"
        );
        records.extend(consumer.poll(Duration::from_secs(5)).await.expect("poll"));
    }
    records
}

/// The values a consumer of `isolation` reads, in partition order.
pub async fn values(
    bootstrap: &str,
    topic: &str,
    partitions: &[i32],
    isolation: Isolation,
) -> Vec<String> {
    read(bootstrap, topic, partitions, isolation)
        .await
        .iter()
        .map(crate::sdk::value)
        .collect()
}

/// What the owning coordinator says of `transactional_id`: its description, or the
/// code it refused with (TRANSACTIONAL_ID_NOT_FOUND for an id it does not hold).
pub async fn describe(
    bootstrap: &str,
    transactional_id: &str,
) -> Result<TransactionDescription, ErrorCode> {
    let coordinator = find_coordinator(bootstrap, transactional_id).await;
    let mut client = coordinator_client(&coordinator.address)
        .await
        .expect("coordinator connects");
    let response = client
        .describe_transaction(DescribeTransactionRequest {
            transactional_id: transactional_id.into(),
        })
        .await
        .expect("DescribeTransaction")
        .into_inner();
    match response.transaction {
        Some(t) if response.error_code() == ErrorCode::None => Ok(t),
        _ => Err(response.error_code()),
    }
}

/// Polls the owning coordinator's description of `transactional_id` until `done` holds
/// (up to `PATIENCE`, then fails saying it never did `what`).
pub async fn wait_for_description(
    bootstrap: &str,
    transactional_id: &str,
    what: &str,
    done: impl Fn(&TransactionDescription) -> bool,
) -> TransactionDescription {
    let what = format!("{transactional_id} {what}");
    let (described, _) = wait_until(PATIENCE, &what, || async {
        match describe(bootstrap, transactional_id).await {
            Ok(t) if done(&t) => Seen::Reached(t),
            other => Seen::Not(format!("described as {other:?}")),
        }
    })
    .await;
    described
}
