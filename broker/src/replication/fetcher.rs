//! One leader's fetcher: follows every partition this broker replicates from that
//! leader, naming this broker as the replica and, per partition, the leader epoch it
//! follows. It appends the leader's batches at the leader's offsets, makes them
//! durable, and follows the leader's high watermark. Before a partition's first fetch,
//! and again after an error or a reconnection, it asks the leader where its latest
//! epoch ends and cuts any tail the leader does not have (KIP-101).
//!
//! Quiet partitions share one long-poll Fetch; a partition that gets data fetches on
//! its own until it is quiet again (see [`fetch_until_failure`]). A partition the
//! leader refuses is left out for a short pause while the others go on. A broken
//! connection starts everything over.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use idem_proto::transport::MAX_MESSAGE_BYTES;
use idem_proto::v1::broker_client::BrokerClient;
use idem_proto::v1::{
    FetchPartition, FetchPartitionResponse, FetchRequest, FetchResponse, FetchTopic,
    IsolationLevel, OffsetForLeaderEpochRequest,
};
use idem_proto::ErrorCode;
use idem_runtime::authn::NodeCredential;
use idem_runtime::log_limit::LogLimit;
use idem_runtime::shutdown::CancellationToken;
use idem_runtime::tls::PeerTls;
use idem_runtime::warn_limited;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// A client of the leader, presenting this broker's credential on every fetch.
type LeaderClient = BrokerClient<InterceptedService<Channel, NodeCredential>>;

use crate::cluster::membership::Membership;
use crate::partition::Partition;
use crate::replication::epoch_history::truncation_point;
use crate::replication::following::{FetcherShared, Following, PartitionKey};

/// After the connection to the leader failed.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);
/// A partition the leader refused sits out a pause that starts short and doubles with
/// every refusal in a row. The common refusal is brief: a new topic or a new leader
/// epoch reaches the follower's catalog before the leader's, and the leader answers
/// UNKNOWN_TOPIC_OR_PARTITION or NOT_LEADER_OR_FOLLOWER for a few milliseconds (a
/// fixed 100 ms pause made every new topic's first acks=all writes wait 70 to 100 ms).
const FIRST_PAUSE: Duration = Duration::from_millis(5);
const MAX_PAUSE: Duration = Duration::from_millis(500);
const MAX_WAIT_MS: i32 = 500;
/// Per partition and per fetch, as Kafka's replica.fetch.max.bytes and
/// replica.fetch.response.max.bytes.
const PARTITION_MAX_BYTES: i32 = 1024 * 1024;
const RESPONSE_MAX_BYTES: i32 = 8 * 1024 * 1024;

/// A followed partition as this fetcher sees it.
pub(crate) struct Followed {
    pub(crate) following: Following,
    pub(crate) partition: Arc<Partition>,
    /// Must ask the leader where our latest epoch ends before fetching.
    must_truncate: bool,
    /// Left out of fetches until then.
    paused_until: Option<Instant>,
    /// In a fetch loop of its own (see [`fetch_until_failure`]), not the shared one.
    busy: bool,
    /// Refusals since the leader last answered this partition without an error.
    refusals: u32,
}

impl Followed {
    fn fetchable(&self, now: Instant) -> bool {
        !self.busy && !self.must_truncate && self.paused_until.is_none_or(|until| until <= now)
    }

    fn pause(&mut self) {
        self.paused_until = Some(Instant::now() + pause_after(self.refusals));
        self.refusals = self.refusals.saturating_add(1);
        self.must_truncate = true;
    }
}

/// The pause after `earlier` refusals in a row.
fn pause_after(earlier: u32) -> Duration {
    FIRST_PAUSE
        .saturating_mul(1 << earlier.min(16))
        .min(MAX_PAUSE)
}

/// Runs until `stop` is cancelled; then returns between two fetches, once every busy
/// partition's loop has applied what it was applying.
pub async fn run(
    me: i32,
    leader: i32,
    shared: Arc<FetcherShared>,
    membership: Arc<Membership>,
    peer_tls: Option<PeerTls>,
    stop: CancellationToken,
) {
    let mut version = shared.subscribe();
    let mut followed: HashMap<PartitionKey, Followed> = HashMap::new();
    // A fetch loop that keeps failing leaves partitions under-replicated: say so at WARN,
    // once per interval.
    let mut warn_limit = LogLimit::for_repeated_failures();
    while !stop.is_cancelled() {
        let Some(connected) = stop
            .run_until_cancelled(leader_client(&membership, leader, peer_tls.as_ref()))
            .await
        else {
            return;
        };
        let reason = match connected {
            Ok(client) => {
                // A new connection may mean a restarted leader: check every tail again.
                // The busy partitions' loops ended with the old connection.
                for f in followed.values_mut() {
                    f.must_truncate = true;
                    f.busy = false;
                }
                match fetch_until_failure(&shared, &mut version, &mut followed, client, &stop).await
                {
                    Some(reason) => reason,
                    None => return,
                }
            }
            Err(reason) => reason,
        };
        warn_limited!(
            warn_limit,
            me,
            leader,
            reason,
            "follower fetch interrupted; reconnecting"
        );
        if stop
            .run_until_cancelled(tokio::time::sleep(RECONNECT_PAUSE))
            .await
            .is_none()
        {
            return;
        }
    }
}

/// A connection to `leader`, or why there is none.
async fn leader_client(
    membership: &Membership,
    leader: i32,
    tls: Option<&PeerTls>,
) -> Result<LeaderClient, String> {
    let brokers = membership
        .live_brokers()
        .await
        .map_err(|e| format!("cannot read the live brokers: {e}"))?;
    let address = brokers
        .into_iter()
        .find(|b| b.broker_id == leader)
        .ok_or_else(|| format!("leader {leader} is not registered"))?
        .address;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
        .map_err(|e| format!("leader {leader} advertises {address:?}: {e}"))?
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(2));
    let endpoint = match tls {
        Some(tls) => endpoint
            // The TLS of now: a SIGHUP may have rotated the certificate since.
            .tls_config(tls.client_config())
            .map_err(|e| format!("TLS to leader {leader} at {address}: {e}"))?,
        None => endpoint,
    };
    let channel = endpoint
        .connect()
        .await
        .map_err(|e| format!("cannot connect to leader {leader} at {address}: {e}"))?;
    Ok(
        BrokerClient::with_interceptor(channel, membership.credential().clone())
            .max_decoding_message_size(MAX_MESSAGE_BYTES),
    )
}

/// Brings `followed` in line with the registry's assignment: new partitions (or a new
/// leader epoch) start with a truncation check, dropped ones are forgotten.
fn refresh(shared: &FetcherShared, followed: &mut HashMap<PartitionKey, Followed>) {
    let assignment = shared.assignment();
    followed.retain(|key, f| {
        assignment.get(key).is_some_and(|(following, partition)| {
            *following == f.following && Arc::ptr_eq(partition, &f.partition)
        })
    });
    for (key, (following, partition)) in assignment.iter() {
        followed.entry(key.clone()).or_insert_with(|| Followed {
            following: *following,
            partition: partition.clone(),
            must_truncate: true,
            paused_until: None,
            busy: false,
            refusals: 0,
        });
    }
}

/// Fetches until the connection fails; returns why.
///
/// Quiet partitions share one long-poll. A partition whose answer brings data leaves
/// it for a fetch loop of its own (append, fsync, fetch again) and comes back once a
/// whole long-poll brings nothing: a busy partition never waits for another's fsync,
/// and an idle broker pays one long-poll per leader, not one per partition.
///
/// Returns why the connection failed, or `None` once `stop` is cancelled and every busy
/// loop returned.
async fn fetch_until_failure(
    shared: &Arc<FetcherShared>,
    version: &mut watch::Receiver<u64>,
    followed: &mut HashMap<PartitionKey, Followed>,
    client: LeaderClient,
    stop: &CancellationToken,
) -> Option<String> {
    let mut round: usize = 0;
    // Busy partitions' loops are tasks of their own, so they run on every worker and
    // go on while this loop awaits anything else; dropping the set ends them (after a
    // failure the connection they use is broken anyway).
    let mut busy = JoinSet::new();
    loop {
        version.mark_unchanged();
        refresh(shared, followed);
        // The checks only ask the leader until they cut a tail: stopping drops them at
        // a question, never in the middle of a cut.
        match stop
            .run_until_cancelled(truncate_divergent_tails(followed, &client))
            .await
        {
            Some(Ok(())) => {}
            Some(Err(reason)) => return Some(reason),
            None => break,
        }
        let request = fetch_request(followed, Instant::now(), round);
        let shared_fetch = async {
            match request {
                Some(request) => client.clone().fetch(request).await,
                None => std::future::pending().await,
            }
        };
        let resume = followed.values().filter_map(|f| f.paused_until).min();
        let resumed = async {
            match resume {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        round = round.wrapping_add(1);
        // Anything but the shared fetch's answer drops it and asks again with the
        // partitions as they are now (a cancelled long-poll costs no data).
        tokio::select! {
            response = shared_fetch => {
                let response = match response {
                    Ok(response) => response.into_inner(),
                    Err(status) => return Some(status.to_string()),
                };
                for (key, answer) in answers(response) {
                    let Some(f) = followed.get_mut(&key) else { continue };
                    if answer.error_code() == ErrorCode::None && !answer.records.is_empty() {
                        f.busy = true;
                        busy.spawn(follow_while_busy(
                            shared.clone(),
                            client.clone(),
                            key,
                            f.following,
                            f.partition.clone(),
                            answer,
                            stop.clone(),
                        ));
                    } else {
                        match apply(f.following, &f.partition, answer).await {
                            Ok(()) => f.refusals = 0,
                            Err(reason) => {
                                refused(&key, &reason);
                                f.pause();
                            }
                        }
                    }
                }
            }
            Some(joined) = busy.join_next(), if !busy.is_empty() => {
                // A loop that panicked leaves its partition marked busy: start over.
                let (key, following, outcome) = match joined {
                    Ok(ended) => ended,
                    Err(e) => return Some(format!("a partition's fetch loop failed: {e}")),
                };
                // A loop of a since-replaced assignment says nothing about the new one.
                let Some(f) = followed.get_mut(&key).filter(|f| f.following == following) else {
                    continue;
                };
                f.busy = false;
                match outcome {
                    Ok(()) => f.refusals = 0,
                    Err(FetchFailed::Refused(reason)) => {
                        refused(&key, &reason);
                        f.pause();
                    }
                    Err(FetchFailed::Transport(reason)) => return Some(reason),
                }
            }
            _ = version.changed() => {}
            () = resumed => {}
            () = stop.cancelled() => break,
        }
    }
    // Stopping: each busy loop returns once it applied what it holds.
    while busy.join_next().await.is_some() {}
    None
}

fn refused(key: &PartitionKey, reason: &str) {
    tracing::debug!(
        topic = key.0,
        partition = key.1,
        reason,
        "follower fetch refused"
    );
}

/// Why fetching a partition stopped.
enum FetchFailed {
    /// The call did not reach the leader or got no answer: reconnect.
    Transport(String),
    /// The leader answered with an error for this partition: pause it.
    Refused(String),
}

/// Every partition's answer, by key.
fn answers(
    response: FetchResponse,
) -> impl Iterator<Item = (PartitionKey, FetchPartitionResponse)> {
    response.topics.into_iter().flat_map(|topic| {
        let name = topic.name;
        topic
            .partitions
            .into_iter()
            .map(move |p| ((name.clone(), p.partition), p))
    })
}

/// A busy partition's own loop: applies `first`, then fetches this partition alone
/// until a long-poll brings nothing (or the registry moved it on, or `stop` is
/// cancelled: never between a fetch's answer and its append). Returns its key.
async fn follow_while_busy(
    shared: Arc<FetcherShared>,
    mut client: LeaderClient,
    key: PartitionKey,
    following: Following,
    partition: Arc<Partition>,
    first: FetchPartitionResponse,
    stop: CancellationToken,
) -> (PartitionKey, Following, Result<(), FetchFailed>) {
    let outcome = async {
        let mut answer = first;
        loop {
            let brought_data = !answer.records.is_empty();
            apply(following, &partition, answer)
                .await
                .map_err(FetchFailed::Refused)?;
            if !brought_data || !shared.still_follows(&key, following) {
                return Ok(());
            }
            let request = request_for(following.me, [(&key, following, partition.as_ref())]);
            let Some(fetched) = stop.run_until_cancelled(client.fetch(request)).await else {
                return Ok(());
            };
            let response = fetched
                .map_err(|s| FetchFailed::Transport(s.to_string()))?
                .into_inner();
            answer = answers(response)
                .find(|(k, _)| *k == key)
                .map(|(_, a)| a)
                .ok_or_else(|| {
                    FetchFailed::Refused("the leader's answer lacks the partition".into())
                })?;
        }
    }
    .await;
    (key, following, outcome)
}

/// One Fetch for every quiet partition not waiting on a truncation check or a pause;
/// the starting partition rotates each round so no partition always comes last under
/// the response's byte limit.
fn fetch_request(
    followed: &HashMap<PartitionKey, Followed>,
    now: Instant,
    round: usize,
) -> Option<FetchRequest> {
    let mut ready: Vec<(&PartitionKey, &Followed)> =
        followed.iter().filter(|(_, f)| f.fetchable(now)).collect();
    if ready.is_empty() {
        return None;
    }
    ready.sort_by(|a, b| a.0.cmp(b.0));
    let start = round % ready.len();
    ready.rotate_left(start);
    let me = ready[0].1.following.me;
    Some(request_for(
        me,
        ready
            .into_iter()
            .map(|(key, f)| (key, f.following, f.partition.as_ref())),
    ))
}

/// A follower's Fetch for `partitions`, each from its log end, in the given order.
fn request_for<'a>(
    me: i32,
    partitions: impl IntoIterator<Item = (&'a PartitionKey, Following, &'a Partition)>,
) -> FetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for ((topic, index), following, partition) in partitions {
        let wanted = FetchPartition {
            partition: *index,
            fetch_offset: partition.offsets().log_end_offset,
            partition_max_bytes: PARTITION_MAX_BYTES,
            current_leader_epoch: Some(following.leader_epoch),
        };
        match topics.last_mut() {
            Some(last) if last.name == *topic => last.partitions.push(wanted),
            _ => topics.push(FetchTopic {
                name: topic.clone(),
                partitions: vec![wanted],
            }),
        }
    }
    FetchRequest {
        max_wait_ms: MAX_WAIT_MS,
        min_bytes: 1,
        max_bytes: RESPONSE_MAX_BYTES,
        isolation_level: IsolationLevel::ReadUncommitted as i32,
        topics,
        replica_id: Some(me),
        include_control_batches: false,
    }
}

/// Applies one partition's answer: append what came, follow the high watermark, or cut
/// a tail the leader does not have.
async fn apply(
    following: Following,
    partition: &Partition,
    answer: FetchPartitionResponse,
) -> Result<(), String> {
    match answer.error_code() {
        ErrorCode::None => {
            if !answer.records.is_empty() {
                // Refused if the registry moved this partition on (say, this broker
                // now leads it) while the fetch was out.
                partition
                    .append_replicated(&answer.records, following.leader, following.leader_epoch)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            partition.follow_high_watermark(answer.high_watermark);
            if answer.log_start_offset > 0 {
                partition
                    .follow_log_start(answer.log_start_offset)
                    .map_err(|e| e.to_string())?;
            }
            Ok(())
        }
        ErrorCode::OffsetOutOfRange
            if answer.log_start_offset > partition.offsets().log_end_offset =>
        {
            // Behind the leader's log start: what we lack was deleted there too.
            partition
                .restart_at(answer.log_start_offset)
                .map_err(|e| e.to_string())
        }
        ErrorCode::OffsetOutOfRange
            if answer.high_watermark >= 0
                && answer.high_watermark < partition.offsets().log_end_offset =>
        {
            // Our tail is not on the leader: keep only what the ISR agreed on.
            partition
                .truncate_to(answer.high_watermark)
                .map_err(|e| e.to_string())
        }
        code => Err(format!("{}: {}", code.as_str_name(), answer.error_message)),
    }
}

/// Runs the truncation check of every partition that needs one, concurrently; a
/// partition whose check the leader refuses sits out a pause and tries again. A
/// transport failure ends the connection (returned).
async fn truncate_divergent_tails(
    followed: &mut HashMap<PartitionKey, Followed>,
    client: &LeaderClient,
) -> Result<(), String> {
    let checks = followed
        .iter()
        .filter(|(_, f)| f.must_truncate && f.paused_until.is_none_or(|t| t <= Instant::now()))
        .map(|(key, f)| {
            let mut client = client.clone();
            let partition = f.partition.clone();
            let following = f.following;
            async move {
                let result = truncate_divergent_tail(&partition, following, &mut client).await;
                (key.clone(), result)
            }
        });
    let mut transport = Ok(());
    for (key, result) in join_all(checks).await {
        let Some(f) = followed.get_mut(&key) else {
            continue;
        };
        match result {
            Ok(()) => {
                f.must_truncate = false;
                f.paused_until = None;
            }
            Err(FetchFailed::Refused(reason)) => {
                tracing::debug!(
                    topic = key.0,
                    partition = key.1,
                    reason,
                    "truncation check refused"
                );
                f.pause();
            }
            Err(FetchFailed::Transport(reason)) => transport = Err(reason),
        }
    }
    transport
}

/// KIP-101: asks the leader where our latest epoch ends in its log and cuts whatever we
/// hold past that point, before fetching anything.
async fn truncate_divergent_tail(
    partition: &Partition,
    following: Following,
    client: &mut LeaderClient,
) -> Result<(), FetchFailed> {
    let Some(latest) = partition.latest_epoch() else {
        return Ok(()); // an empty log has nothing to disagree on
    };
    let answer = client
        .offset_for_leader_epoch(OffsetForLeaderEpochRequest {
            topic: partition.topic().to_string(),
            partition: partition.index(),
            leader_epoch: latest,
            current_leader_epoch: following.leader_epoch,
        })
        .await
        .map_err(|s| FetchFailed::Transport(s.to_string()))?
        .into_inner();
    if answer.error_code() != ErrorCode::None {
        return Err(FetchFailed::Refused(format!(
            "{}: {}",
            answer.error_code().as_str_name(),
            answer.error_message
        )));
    }
    let local_end = partition.offsets().log_end_offset;
    if let Some(cut) = truncation_point(local_end, (answer.leader_epoch, answer.end_offset)) {
        tracing::warn!(
            topic = partition.topic(),
            partition = partition.index(),
            local_end,
            cut,
            our_epoch = latest,
            leader_epoch = answer.leader_epoch,
            "cutting a tail the new leader does not have"
        );
        partition
            .truncate_to(cut)
            .map_err(|e| FetchFailed::Refused(e.to_string()))?;
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::partition::PartitionSettings;

    pub(crate) fn followed(
        dir: &std::path::Path,
        topic: &str,
        index: i32,
    ) -> (PartitionKey, Followed) {
        let partition = Partition::open(
            topic,
            index,
            &dir.join(format!("{topic}-{index}")),
            PartitionSettings {
                log: crate::log::LogConfig::default(),
                max_batch_bytes: 1 << 20,
                producer_id_expiration_ms: 60_000,
                topic_defaults: crate::topic_config::TopicDefaults::new(
                    crate::log::LogConfig::DEFAULT_SEGMENT_BYTES,
                    1 << 20,
                ),
            },
            2,
        )
        .expect("open partition");
        let following = Following {
            me: 2,
            leader: 1,
            leader_epoch: 7,
        };
        let f = Followed {
            following,
            partition: Arc::new(partition),
            must_truncate: false,
            paused_until: None,
            busy: false,
            refusals: 0,
        };
        ((topic.to_string(), index), f)
    }

    /// `(topic, partition)` in request order.
    fn asked(request: &FetchRequest) -> Vec<(String, i32)> {
        request
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.name.clone(), p.partition)))
            .collect()
    }

    #[test]
    fn given_followed_partitions_then_one_fetch_asks_for_every_ready_one_and_rotates_the_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut all: HashMap<PartitionKey, Followed> = [
            followed(dir.path(), "a", 0),
            followed(dir.path(), "a", 1),
            followed(dir.path(), "b", 0),
            followed(dir.path(), "c", 0),
            followed(dir.path(), "d", 0),
            followed(dir.path(), "e", 0),
        ]
        .into_iter()
        .collect();
        let now = Instant::now();
        all.get_mut(&("c".to_string(), 0)).expect("c").must_truncate = true;
        all.get_mut(&("d".to_string(), 0)).expect("d").paused_until =
            Some(now + Duration::from_secs(60));
        all.get_mut(&("e".to_string(), 0)).expect("e").busy = true;
        let first = fetch_request(&all, now, 0).expect("a request");
        assert_eq!(
            asked(&first),
            [("a".into(), 0), ("a".into(), 1), ("b".into(), 0)]
        );
        assert_eq!(first.replica_id, Some(2));
        assert_eq!(
            first.topics.len(),
            2,
            "partitions of one topic share an entry"
        );
        let partition = &first.topics[0].partitions[0];
        assert_eq!(partition.current_leader_epoch, Some(7));
        assert_eq!(partition.fetch_offset, 0);
        let next = fetch_request(&all, now, 1).expect("a request");
        assert_eq!(
            asked(&next),
            [("a".into(), 1), ("b".into(), 0), ("a".into(), 0)]
        );
        // A pause ends by itself; a truncation check must pass first; a busy partition
        // is fetched by its own loop.
        let later = fetch_request(&all, now + Duration::from_secs(61), 0).expect("a request");
        assert_eq!(asked(&later).len(), 4);
        for f in all.values_mut() {
            f.must_truncate = true;
        }
        assert!(fetch_request(&all, now, 0).is_none());
    }

    #[test]
    fn given_refusals_in_a_row_then_the_pause_doubles_up_to_its_limit() {
        let pauses: Vec<u128> = (0..10).map(|n| pause_after(n).as_millis()).collect();
        assert_eq!(pauses, [5, 10, 20, 40, 80, 160, 320, 500, 500, 500]);
        assert_eq!(pause_after(u32::MAX), MAX_PAUSE);
        let dir = tempfile::tempdir().expect("tempdir");
        let (_, mut f) = followed(dir.path(), "a", 0);
        f.pause();
        f.pause();
        assert_eq!(f.refusals, 2);
        assert!(f.must_truncate, "a refused partition checks its tail again");
    }
}
