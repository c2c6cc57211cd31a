//! Transactions end to end through a solo coordinator run in-process and a real
//! single-node `idem-broker` (given by `IDEM_BROKER_BIN`; the test is skipped without
//! it, since this crate must not depend on the broker crate): a committed transaction
//! becomes visible to read_committed, an aborted one never does, and a restarted
//! coordinator reads the same state back from `__transaction_state`.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use idem_client::{
    Admin, Consumer, ConsumerConfig, OffsetSpec, ProducerRecord, TransactionalConfig,
    TransactionalProducer,
};
use idem_coordinator::{BoundCoordinator, CoordinatorConfig};
use idem_proto::v1::txn_coordinator_client::TxnCoordinatorClient;
use idem_proto::v1::{
    DescribeTransactionRequest, DescribeTransactionResponse, ListTransactionsRequest,
};
use idem_proto::ErrorCode;
use tonic::transport::Channel;

struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Longest the test waits for a state the broker and coordinator reach in a few seconds.
const PATIENCE: Duration = Duration::from_secs(30);

/// Calls `probe` until it returns a value; panics naming `what` after [`PATIENCE`].
/// (This crate cannot use the tests crate's `wait` module: that crate depends on it.)
async fn eventually<T, Fut>(what: &str, mut probe: impl FnMut() -> Fut) -> T
where
    Fut: std::future::Future<Output = Option<T>>,
{
    let started = std::time::Instant::now();
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            started.elapsed() < PATIENCE,
            "{what}: not within {PATIENCE:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// DescribeTransaction of `transactional_id`, when the coordinator knows it.
async fn described(
    client: &TxnCoordinatorClient<Channel>,
    transactional_id: &str,
) -> Option<DescribeTransactionResponse> {
    let answer = client
        .clone()
        .describe_transaction(DescribeTransactionRequest {
            transactional_id: transactional_id.into(),
        })
        .await
        .expect("describe")
        .into_inner();
    (answer.error_code == ErrorCode::None as i32).then_some(answer)
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

async fn start_coordinator(
    dir: &std::path::Path,
    listen: SocketAddr,
    bootstrap: &str,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let mut config = CoordinatorConfig::solo(dir.to_path_buf(), listen, bootstrap.to_string());
    config.txn_log_partitions = 2;
    config.txn_check_interval_ms = 100;
    let shutdown = idem_runtime::shutdown::CancellationToken::new();
    let bound = BoundCoordinator::bind(config, None, shutdown.clone())
        .await
        .expect("binds");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = stopped.await;
        shutdown.cancel();
    });
    let serving = tokio::spawn(async move {
        bound.serve().await.expect("serves");
    });
    (stop, serving)
}

async fn read_all(bootstrap: &str) -> Vec<String> {
    let mut consumer = Consumer::connect(
        bootstrap,
        ConsumerConfig {
            start: OffsetSpec::Earliest,
            ..ConsumerConfig::default()
        },
    )
    .await
    .expect("consumer");
    consumer.assign(vec![("orders".into(), 0)]);
    let mut values = Vec::new();
    for _ in 0..4 {
        for record in consumer
            .poll(Duration::from_millis(300))
            .await
            .expect("poll")
        {
            values.push(String::from_utf8_lossy(&record.value.unwrap_or_default()).into_owned());
        }
    }
    values
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_solo_coordinator_then_commits_show_aborts_do_not_and_a_restart_keeps_the_state() {
    let Ok(broker_bin) = std::env::var("IDEM_BROKER_BIN") else {
        eprintln!("IDEM_BROKER_BIN not set; skipping");
        return;
    };
    let broker_dir = tempfile::tempdir().expect("tempdir");
    let coordinator_dir = tempfile::tempdir().expect("tempdir");
    let broker_addr = format!("127.0.0.1:{}", free_port());
    let coordinator_addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().expect("addr");
    let _broker = Reaped(
        Command::new(broker_bin)
            .args(["--listen", &broker_addr, "--data-dir"])
            .arg(broker_dir.path())
            .args(["--coordinator", &coordinator_addr.to_string()])
            .stdout(Stdio::null())
            .spawn()
            .expect("broker starts"),
    );
    let (stop, serving) =
        start_coordinator(coordinator_dir.path(), coordinator_addr, &broker_addr).await;

    let admin = eventually("the broker accepts connections", || async {
        Admin::connect(&broker_addr).await.ok()
    })
    .await;
    admin.create_topic("orders", 1, 1).await.expect("topic");

    let producer = TransactionalProducer::connect(TransactionalConfig::new(&broker_addr, "smoke"))
        .await
        .expect("producer");
    producer.init_transactions().await.expect("init");
    producer.begin().expect("begin");
    let delivered = producer
        .send(ProducerRecord::new("orders", "committed").partition(0))
        .await
        .expect("send");
    producer.commit().await.expect("commit");
    delivered.await.expect("delivered");
    producer.begin().expect("begin");
    let _aborted = producer
        .send(ProducerRecord::new("orders", "aborted").partition(0))
        .await
        .expect("send");
    producer.abort().await.expect("abort");
    producer.begin().expect("begin");
    let _committed = producer
        .send(ProducerRecord::new("orders", "committed-2").partition(0))
        .await
        .expect("send");
    producer.commit().await.expect("commit");

    assert_eq!(
        read_all(&broker_addr).await,
        vec!["committed", "committed-2"]
    );

    // A transaction open past its timeout is aborted by the coordinator; its producer
    // is fenced and cannot commit it.
    let coordinator = TxnCoordinatorClient::connect(format!("http://{coordinator_addr}"))
        .await
        .expect("coordinator");
    let mut slow_config = TransactionalConfig::new(&broker_addr, "slow");
    slow_config.transaction_timeout = Duration::from_millis(300);
    let slow = TransactionalProducer::connect(slow_config)
        .await
        .expect("producer");
    slow.init_transactions().await.expect("init");
    slow.begin().expect("begin");
    let _late = slow
        .send(ProducerRecord::new("orders", "timed-out").partition(0))
        .await
        .expect("send");
    // Awaits the coordinator's abort itself rather than sleeping past the timeout.
    eventually(
        "the coordinator aborts the timed-out transaction",
        || async {
            described(&coordinator, "slow")
                .await
                .and_then(|answer| answer.transaction)
                .filter(|t| t.state == "PrepareAbort" || t.state == "CompleteAbort")
        },
    )
    .await;
    assert!(
        slow.commit().await.is_err(),
        "a timed-out transaction committed"
    );
    slow.close().await;

    // A new instance fences the old one and aborts its open transaction.
    let zombie = TransactionalProducer::connect(TransactionalConfig::new(&broker_addr, "z"))
        .await
        .expect("producer");
    zombie.init_transactions().await.expect("init");
    zombie.begin().expect("begin");
    let _zombie_record = zombie
        .send(ProducerRecord::new("orders", "zombie").partition(0))
        .await
        .expect("send");
    let successor = TransactionalProducer::connect(TransactionalConfig::new(&broker_addr, "z"))
        .await
        .expect("producer");
    successor
        .init_transactions()
        .await
        .expect("init fences the zombie");
    assert!(zombie.commit().await.is_err(), "the zombie committed");
    successor.begin().expect("begin");
    let _successor_record = successor
        .send(ProducerRecord::new("orders", "successor").partition(0))
        .await
        .expect("send");
    successor.commit().await.expect("commit");
    zombie.close().await;
    successor.close().await;
    assert_eq!(
        read_all(&broker_addr).await,
        vec!["committed", "committed-2", "successor"]
    );

    let mut client = TxnCoordinatorClient::connect(format!("http://{coordinator_addr}"))
        .await
        .expect("coordinator");
    let before = client
        .describe_transaction(DescribeTransactionRequest {
            transactional_id: "smoke".into(),
        })
        .await
        .expect("describe")
        .into_inner();
    assert_eq!(
        before.error_code,
        ErrorCode::None as i32,
        "{}",
        before.error_message
    );
    let missing = client
        .describe_transaction(DescribeTransactionRequest {
            transactional_id: "nobody".into(),
        })
        .await
        .expect("describe")
        .into_inner();
    assert_eq!(
        missing.error_code,
        ErrorCode::TransactionalIdNotFound as i32
    );
    let listed = client
        .list_transactions(ListTransactionsRequest::default())
        .await
        .expect("list")
        .into_inner();
    assert_eq!(listed.owned_partitions, vec![0, 1]);
    producer.close().await;

    // Restart: the state is read back from the log under the next epoch.
    let _ = stop.send(());
    serving.await.expect("stopped");
    let (stop, serving) =
        start_coordinator(coordinator_dir.path(), coordinator_addr, &broker_addr).await;
    let client = TxnCoordinatorClient::connect(format!("http://{coordinator_addr}"))
        .await
        .expect("coordinator");
    let after = eventually("the restarted coordinator describes smoke", || {
        described(&client, "smoke")
    })
    .await;
    let (before, after) = (
        before.transaction.expect("txn"),
        after.transaction.expect("txn"),
    );
    assert_eq!(
        (
            before.producer_id,
            before.producer_epoch,
            before.state.as_str()
        ),
        (
            after.producer_id,
            after.producer_epoch,
            after.state.as_str()
        )
    );
    assert_eq!(after.state, "CompleteCommit");
    let _ = stop.send(());
    serving.await.expect("stopped");
}
