//! A COMMIT marker carries the epoch its producer moves to, which is the epoch the next
//! transaction begins at. A copy of it that arrives late, after the next transaction
//! began (a retried request overtaken by its own retry), must not end that one: the
//! broker answers it as already applied, and the next transaction's records stay
//! invisible until their own outcome, here an abort.

use idem_client::Isolation;
use idem_proto::v1::ControlType;
use idem_proto::ErrorCode;
use idem_tests::raw::{self, RawClient};
use idem_tests::txn::{values, wait_for_lso, wait_until_stable};
use idem_tests::Cluster;

const TOPIC: &str = "ledger";
const PRODUCER_ID: i64 = 777;

async fn marker(client: &mut RawClient, control: ControlType, epoch: i32) -> (ErrorCode, i64) {
    raw::write_marker_at_0(client, TOPIC, PRODUCER_ID, control, epoch).await
}

async fn produce(client: &mut RawClient, epoch: i16, values: &[&str]) {
    let batch = raw::transactional_batch(PRODUCER_ID, epoch, 0, values);
    let answer = raw::produce(client, TOPIC, 0, batch).await;
    assert_eq!(answer.error_code(), ErrorCode::None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_the_next_transaction_open_when_the_last_commit_marker_arrives_again_then_it_changes_nothing(
) {
    let cluster = Cluster::start(1, &[]);
    cluster.create_topic(TOPIC, 1, 1).await;
    let bootstrap = cluster.bootstrap();
    let mut broker = raw::connect(&bootstrap).await;

    // Transaction of epoch 0, committed by a marker at epoch 1 (offsets 0 to 2).
    assert_eq!(
        marker(&mut broker, ControlType::Begin, 0).await.0,
        ErrorCode::None
    );
    produce(&mut broker, 0, &["debit-1"]).await;
    assert_eq!(
        marker(&mut broker, ControlType::Commit, 1).await,
        (ErrorCode::None, 2)
    );
    // The next transaction, of epoch 1 (BEGIN at 3, its record at 4).
    assert_eq!(
        marker(&mut broker, ControlType::Begin, 1).await,
        (ErrorCode::None, 3)
    );
    produce(&mut broker, 1, &["debit-2"]).await;

    // The COMMIT again, late: nothing appended, the transaction of epoch 1 stays open.
    assert_eq!(
        marker(&mut broker, ControlType::Commit, 1).await,
        (ErrorCode::None, -1)
    );
    wait_for_lso(&bootstrap, TOPIC, &[0], 3).await;
    assert_eq!(
        values(&bootstrap, TOPIC, &[0], Isolation::ReadCommitted).await,
        vec!["debit-1"],
        "the open transaction's record is not visible"
    );

    // Its own outcome decides: aborted, its record is never visible.
    assert_eq!(
        marker(&mut broker, ControlType::Abort, 2).await,
        (ErrorCode::None, 5)
    );
    assert_eq!(wait_until_stable(&bootstrap, TOPIC, &[0]).await, vec![6]);
    assert_eq!(
        values(&bootstrap, TOPIC, &[0], Isolation::ReadCommitted).await,
        vec!["debit-1"]
    );
}
