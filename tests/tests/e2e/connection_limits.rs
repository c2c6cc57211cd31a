//! Connection and in-flight limits (issue 29): `--max-connections-per-ip` closes a
//! client's connection past the limit at once (counted, the others still served) and
//! frees the place when a connection goes; `--max-in-flight-per-connection` makes one
//! connection's RPCs past the limit wait their turn while another connection is served.

use std::time::Duration;

use idem_proto::v1::{
    FetchPartition, FetchRequest, FetchTopic, IsolationLevel, ListOffsetsPartition,
    ListOffsetsRequest, ListOffsetsTopic,
};
use idem_proto::ErrorCode;
use idem_tests::raw::{self, RawClient};
use idem_tests::scrape::{scrape, value};
use idem_tests::BrokerProcess;
use tokio::time::Instant;

fn free_addr() -> String {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").expect("probe a free port");
    probe.local_addr().expect("probed address").to_string()
}

/// Whether a connection made now is served: an RPC on it answers.
async fn served(bootstrap: &str) -> Result<RawClient, String> {
    let mut client = raw::try_connect(bootstrap)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    tokio::time::timeout(Duration::from_secs(5), list_latest(&mut client, "t"))
        .await
        .map_err(|_| "no answer in 5 s".to_string())?
        .map(|_| client)
}

/// ListOffsets of partition 0 of `topic`: the code it answered, or the RPC's failure.
async fn list_latest(client: &mut RawClient, topic: &str) -> Result<ErrorCode, String> {
    let answer = client
        .list_offsets(ListOffsetsRequest {
            isolation_level: IsolationLevel::ReadUncommitted as i32,
            topics: vec![ListOffsetsTopic {
                name: topic.to_string(),
                partitions: vec![ListOffsetsPartition {
                    partition: 0,
                    timestamp: -1,
                }],
            }],
        })
        .await
        .map_err(|status| format!("{:?}: {}", status.code(), status.message()))?
        .into_inner();
    Ok(answer.topics[0].partitions[0].error_code())
}

#[tokio::test]
async fn given_two_connections_per_ip_when_a_third_is_made_then_it_is_closed_until_one_goes() {
    let metrics = free_addr();
    let broker = BrokerProcess::start_with(&[
        "--max-connections-per-ip",
        "2",
        "--metrics-listen",
        &metrics,
    ]);
    let bootstrap = broker.bootstrap();
    let mut first = served(&bootstrap).await.expect("first connection");
    assert_eq!(raw::create_topic(&mut first, "t", 1).await, ErrorCode::None);
    let second = served(&bootstrap).await.expect("second connection");

    // Closed before its first HTTP/2 frame: the client's call fails at once (how
    // tonic words it depends on when it notices the close: a transport error,
    // Unavailable, Cancelled), never by waiting for an answer; the refusal counted
    // below is the server's side of it.
    let refused = served(&bootstrap)
        .await
        .expect_err("a third connection from 127.0.0.1");
    assert!(!refused.contains("no answer"), "{refused}");
    // At least once: a tonic channel whose connection is closed dials again by itself.
    let text = scrape(&metrics).expect("scrape");
    let refusals = value(
        &text,
        "idem_connections_refused_total",
        &[("reason", "max_connections_per_ip")],
    );
    assert!(refusals.is_some_and(|n| n >= 1.0), "{refusals:?}");
    assert_eq!(value(&text, "idem_connections_open", &[]), Some(2.0));
    // The two held are served still.
    assert_eq!(
        list_latest(&mut first, "t").await,
        Ok(ErrorCode::None),
        "the first is served still"
    );

    // One goes; once the broker has seen it close, a new connection is served.
    drop(second);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let open = value(
            &scrape(&metrics).expect("scrape"),
            "idem_connections_open",
            &[],
        );
        if open == Some(1.0) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the closed connection is still counted: {open:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    served(&bootstrap).await.expect("a place was freed");
}

/// A long-poll fetch of the empty partition 0 of `t`, waiting `wait` for a record that
/// never comes; returns when it was answered.
async fn long_poll(mut client: RawClient, wait: Duration) -> Instant {
    client
        .fetch(FetchRequest {
            max_wait_ms: wait.as_millis() as i32,
            min_bytes: 1,
            max_bytes: 1 << 20,
            isolation_level: IsolationLevel::ReadUncommitted as i32,
            topics: vec![FetchTopic {
                name: "t".to_string(),
                partitions: vec![FetchPartition {
                    partition: 0,
                    fetch_offset: 0,
                    partition_max_bytes: 1 << 20,
                    current_leader_epoch: None,
                }],
            }],
            replica_id: None,
            include_control_batches: false,
        })
        .await
        .expect("Fetch");
    Instant::now()
}

#[tokio::test]
async fn given_one_rpc_in_flight_per_connection_when_two_long_polls_share_one_then_they_take_turns()
{
    let broker = BrokerProcess::start_with(&["--max-in-flight-per-connection", "1"]);
    let bootstrap = broker.bootstrap();
    let mut client = raw::connect(&bootstrap).await;
    assert_eq!(
        raw::create_topic(&mut client, "t", 1).await,
        ErrorCode::None
    );

    // Two long-polls on one connection (clones of a client share its connection): with
    // one slot the second starts waiting only once the first was answered.
    let wait = Duration::from_millis(1500);
    let started = Instant::now();
    let first = tokio::spawn(long_poll(client.clone(), wait));
    let second = tokio::spawn(long_poll(client.clone(), wait));
    // Another connection is served meanwhile: the limit is per connection.
    let mut other = served(&bootstrap).await.expect("another connection");
    assert_eq!(list_latest(&mut other, "t").await, Ok(ErrorCode::None));
    let other_answered = Instant::now();
    let done = [first.await.expect("first"), second.await.expect("second")];
    let last = done.iter().max().copied().unwrap_or(started);
    assert!(
        last - started >= wait * 2,
        "two long-polls of {wait:?} on one connection both ended within {:?}: they ran at once",
        last - started
    );
    assert!(
        other_answered < last,
        "the other connection waited for this one's turns"
    );
}
