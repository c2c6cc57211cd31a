//! Log compaction on real brokers (`cleanup.policy=compact`): a keyed topic updated far
//! more often than it has keys is compacted on every replica to each key's latest value
//! (compared with a model), tombstones vanish after `delete.retention.ms`, a transactional
//! topic never shows an aborted value to read_committed nor loses a committed one, a
//! compacted topic written by transactions stays bounded by its live keys (markers and
//! emptied batches become fillers) with its producers' state intact, and a record without
//! a key is refused.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use idem_client::{
    Admin, AlterConfigOp, Consumer, ConsumerConfig, ConsumerRecord, ErrorCode, Isolation, NewTopic,
    OffsetSpec, Producer, ProducerConfig, ProducerRecord,
};
use idem_proto::batch::{self, ProducerInfo, Record};
use idem_proto::txn::TXN_LOG_TOPIC;
use idem_proto::v1::ControlType;
use idem_tests::raw;
use idem_tests::txn;
use idem_tests::wait::{seen_if, wait_until, PATIENCE};
use idem_tests::{BrokerProcess, Cluster};

const KEYS: usize = 100;

/// Brokers that roll 16 KiB segments and look for cleaning every 100 ms.
async fn cluster() -> Cluster {
    Cluster::start_with_coordinators(
        3,
        1,
        &[
            "--segment-bytes",
            "16384",
            "--log-retention-check-interval-ms",
            "100",
        ],
        &[],
    )
    .await
}

/// A compacted topic, RF 3, whose active segment rolls after a second so the last
/// updates get compacted too, and whose tombstones live 2 s.
async fn create_compacted(admin: &Admin, name: &str) {
    admin
        .create_topic_with(
            NewTopic::new(name, 1)
                .replication_factor(3)
                .config("cleanup.policy", "compact")
                .config("segment.ms", "1000")
                .config("delete.retention.ms", "2000"),
        )
        .await
        .expect("compacted topic created");
}

/// Every record of partition 0 from the log start to the end `isolation` sees.
async fn read_all(bootstrap: &str, topic: &str, isolation: Isolation) -> Vec<ConsumerRecord> {
    let admin = Admin::connect(bootstrap).await.expect("admin");
    let end = admin
        .list_offsets(topic, 0, OffsetSpec::Latest, isolation)
        .await
        .expect("end");
    let config = ConsumerConfig {
        isolation,
        max_wait: Duration::from_millis(50),
        start: OffsetSpec::Earliest,
        // A pass that removes the records under the consumer moves it on.
        auto_offset_reset: Some(OffsetSpec::Earliest),
        ..ConsumerConfig::default()
    };
    let mut consumer = Consumer::connect(bootstrap, config)
        .await
        .expect("consumer");
    consumer.assign(vec![(topic.to_string(), 0)]);
    let mut records = Vec::new();
    while consumer.position(topic, 0).await.expect("position") < end {
        records.extend(consumer.poll(Duration::from_secs(5)).await.expect("poll"));
    }
    records
}

fn text(bytes: &Option<bytes::Bytes>) -> Option<String> {
    bytes
        .as_ref()
        .map(|b| String::from_utf8_lossy(b).into_owned())
}

/// Key -> latest value of a read (a tombstone removes the key), and how many records
/// each key has.
fn latest(records: &[ConsumerRecord]) -> (BTreeMap<String, String>, BTreeMap<String, usize>) {
    let mut values = BTreeMap::new();
    let mut counts = BTreeMap::new();
    for r in records {
        let key = text(&r.key).expect("keyed");
        *counts.entry(key.clone()).or_default() += 1;
        match text(&r.value) {
            Some(v) => values.insert(key, v),
            None => values.remove(&key),
        };
    }
    (values, counts)
}

fn segment_bytes(data_dir: &Path, topic: &str) -> u64 {
    std::fs::read_dir(data_dir.join(format!("{topic}-0")))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_100_keys_and_100000_updates_then_every_replica_compacts_to_the_latest_value_per_key()
{
    const TOPIC: &str = "keyed";
    const UPDATES: usize = 100_000;
    let cluster = cluster().await;
    let bootstrap = cluster.bootstrap();
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    create_compacted(&admin, TOPIC).await;
    let producer = Producer::connect(ProducerConfig::new(&bootstrap))
        .await
        .expect("producer");
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    let mut deliveries = Vec::new();
    for n in 0..UPDATES {
        let (key, value) = (format!("key-{:03}", n % KEYS), format!("value-{n:06}"));
        model.insert(key.clone(), value.clone());
        let record = ProducerRecord::new(TOPIC, value).key(key).partition(0);
        deliveries.push(producer.send_record(record).await.expect("send"));
        if deliveries.len() == 10_000 {
            for d in deliveries.drain(..) {
                d.await.expect("acknowledged");
            }
        }
    }
    // Ten keys deleted: a tombstone each.
    for k in 0..10 {
        let key = format!("key-{k:03}");
        model.remove(&key);
        let tombstone = ProducerRecord::tombstone(TOPIC, key).partition(0);
        deliveries.push(producer.send_record(tombstone).await.expect("send"));
    }
    for d in deliveries {
        d.await.expect("acknowledged");
    }
    // Compacted once each key is left once and the tombstones are gone (2 s after).
    let (read, _) = wait_until(
        PATIENCE,
        "the topic compacted to one record per key",
        || {
            let bootstrap = &bootstrap;
            async move {
                let read = read_all(bootstrap, TOPIC, Isolation::ReadCommitted).await;
                let (_, counts) = latest(&read);
                let compacted = read.len() == KEYS - 10 && counts.values().all(|c| *c == 1);
                seen_if(read, compacted)
            }
        },
    )
    .await;
    let (values, _) = latest(&read);
    assert_eq!(values, model, "each key's latest value, deleted keys gone");
    // Every replica cleaned its own copy: over 3 MB of updates went in; what stays is
    // 90 records and the fillers left where batches went (61 bytes each, merged).
    for id in cluster.ids() {
        wait_until(PATIENCE, "the replica compacted on disk", || {
            let bytes = segment_bytes(cluster.broker(id).data_dir(), TOPIC);
            async move { seen_if(bytes, bytes < 128 * 1024) }
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_committed_and_aborted_transactions_then_compaction_never_shows_an_aborted_value_nor_loses_a_committed_one(
) {
    const TOPIC: &str = "txn-keyed";
    let cluster = cluster().await;
    let bootstrap = cluster.bootstrap();
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    create_compacted(&admin, TOPIC).await;
    let producer = txn::producer(&bootstrap, "compacting").await;
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    for round in 0..60 {
        producer.begin().expect("begin");
        let aborted = round % 3 == 2;
        let mut deliveries = Vec::new();
        for k in 0..10 {
            let key = format!("key-{k}");
            let value = format!(
                "{}-{round:03}",
                if aborted { "aborted" } else { "committed" }
            );
            if !aborted {
                model.insert(key.clone(), value.clone());
            }
            let record = ProducerRecord::new(TOPIC, value).key(key).partition(0);
            deliveries.push(producer.send(record).await.expect("send"));
        }
        if aborted {
            producer.abort().await.expect("abort");
        } else {
            for d in deliveries {
                d.await.expect("acknowledged");
            }
            producer.commit().await.expect("commit");
        }
    }
    let (read, _) = wait_until(PATIENCE, "the transactional topic compacted", || {
        let bootstrap = &bootstrap;
        async move {
            let read = read_all(bootstrap, TOPIC, Isolation::ReadCommitted).await;
            let (_, counts) = latest(&read);
            seen_if(read, counts.values().all(|c| *c == 1))
        }
    })
    .await;
    assert!(
        read.iter()
            .all(|r| !text(&r.value).unwrap_or_default().starts_with("aborted")),
        "read_committed saw an aborted value"
    );
    assert_eq!(latest(&read).0, model, "every key's last committed value");
    // Uncommitted readers see no aborted value left in the compacted segments either.
    let uncommitted = read_all(&bootstrap, TOPIC, Isolation::ReadUncommitted).await;
    let stale = uncommitted
        .iter()
        .filter(|r| text(&r.value).unwrap_or_default().starts_with("aborted"))
        .count();
    assert!(
        stale <= 10,
        "at most the last aborted round, still unsealed: {stale}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_compacted_topic_then_a_record_without_a_key_is_refused_and_nothing_appended() {
    const TOPIC: &str = "keys-only";
    let cluster = cluster().await;
    let bootstrap = cluster.bootstrap();
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    create_compacted(&admin, TOPIC).await;
    let producer = Producer::connect(ProducerConfig::new(&bootstrap))
        .await
        .expect("producer");
    let refused = producer
        .send_record(ProducerRecord::new(TOPIC, "no key").partition(0))
        .await
        .expect("queued")
        .await
        .expect_err("an unkeyed record in a compacted topic");
    assert_eq!(refused.code(), Some(ErrorCode::InvalidRecord), "{refused}");
    assert!(refused.to_string().contains("no key"), "{refused}");
    let end = admin
        .list_offsets(TOPIC, 0, OffsetSpec::Latest, Isolation::ReadUncommitted)
        .await
        .expect("end");
    assert_eq!(end, 0, "nothing was appended");
}

/// `(records kept, offsets written)` over every partition of the transaction log,
/// read from each partition's leader.
async fn transaction_log_records(cluster: &Cluster) -> (usize, i64) {
    let admin = Admin::connect(&cluster.bootstrap()).await.expect("admin");
    let mut kept = 0;
    let mut written = 0;
    let observer = cluster.ids()[0];
    let mut partition = 0;
    while let Some(state) = cluster.partition(observer, TXN_LOG_TOPIC, partition).await {
        let leader = state.leader_id;
        let mut client = raw::connect(&cluster.broker(leader).bootstrap()).await;
        kept += raw::read_batches(&mut client, TXN_LOG_TOPIC, partition)
            .await
            .iter()
            .map(|(_, records)| records.len())
            .sum::<usize>();
        written += admin
            .list_offsets(
                TXN_LOG_TOPIC,
                partition,
                OffsetSpec::Latest,
                Isolation::ReadUncommitted,
            )
            .await
            .expect("end");
        partition += 1;
    }
    (kept, written)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_many_transactions_of_few_ids_then_the_transaction_log_compacts_and_a_takeover_loads_it(
) {
    const OUT: &str = "out";
    const IDS: usize = 4;
    const ROUNDS: usize = 50;
    let mut cluster = Cluster::start_with_coordinators(
        3,
        2,
        &[
            "--segment-bytes",
            "8192",
            "--log-retention-check-interval-ms",
            "100",
        ],
        &[],
    )
    .await;
    cluster.create_topic(OUT, 1, 3).await;
    let bootstrap = cluster.bootstrap();
    for round in 0..ROUNDS {
        for id in 0..IDS {
            let producer = txn::producer(&bootstrap, &format!("compacted-{id}")).await;
            producer.begin().expect("begin");
            let value = format!("{id}-{round:03}");
            let delivery = producer
                .send(ProducerRecord::new(OUT, value).partition(0))
                .await
                .expect("send");
            delivery.await.expect("acknowledged");
            producer.commit().await.expect("commit");
            producer.close().await;
        }
    }
    // Each transaction wrote several states of its id (and each new producer instance
    // one more): compaction leaves about one per id outside the active segments.
    let ((kept, written), _) = wait_until(PATIENCE, "the transaction log compacted", || {
        let cluster = &cluster;
        async move {
            let (kept, written) = transaction_log_records(cluster).await;
            seen_if((kept, written), (kept as i64) * 4 < written)
        }
    })
    .await;
    assert!(
        written >= (IDS * ROUNDS * 3) as i64,
        "{written} state records written"
    );
    assert!((kept as i64) * 4 < written, "{kept} of {written} kept");
    eprintln!("transaction log: {kept} records kept of {written} written");
    // The cleaned state of 4 ids (a few hundred bytes per partition) fits one
    // segment.bytes (8 KiB), so the cleaner merges each partition's sealed segments
    // into one on every replica, however many the history filled.
    let data_dirs: Vec<_> = cluster
        .ids()
        .into_iter()
        .map(|id| cluster.broker(id).data_dir().to_path_buf())
        .collect();
    let (sealed, _) = wait_until(PATIENCE, "each transaction log partition merged", || {
        let sealed: Vec<(String, u64)> = data_dirs
            .iter()
            .flat_map(|dir| sealed_per_partition(dir, TXN_LOG_TOPIC))
            .collect();
        async move {
            let merged = !sealed.is_empty() && sealed.iter().all(|(_, n)| *n <= 1);
            seen_if(sealed, merged)
        }
    })
    .await;
    eprintln!("transaction log: sealed segments per replica after cleaning: {sealed:?}");
    // Every coordinator is killed in turn: the survivor loads the compacted slices and
    // every id goes on (a new epoch, one more committed transaction).
    for victim in cluster.coordinator_ids() {
        cluster.kill_coordinator(victim);
        for id in 0..IDS {
            let producer = txn::producer(&bootstrap, &format!("compacted-{id}")).await;
            producer.begin().expect("begin");
            let value = format!("{id}-after-{victim}");
            producer
                .send(ProducerRecord::new(OUT, value).partition(0))
                .await
                .expect("send")
                .await
                .expect("acknowledged");
            producer.commit().await.expect("commit after the takeover");
            producer.close().await;
        }
        cluster.restart_coordinator(victim);
        cluster.wait_for_coordinators().await;
    }
    let read = read_all(&bootstrap, OUT, Isolation::ReadCommitted).await;
    let mut values: Vec<String> = read.iter().filter_map(|r| text(&r.value)).collect();
    values.sort();
    let mut expected: Vec<String> = (0..IDS)
        .flat_map(|id| (0..ROUNDS).map(move |round| format!("{id}-{round:03}")))
        .chain(
            cluster
                .coordinator_ids()
                .into_iter()
                .flat_map(|victim| (0..IDS).map(move |id| format!("{id}-after-{victim}"))),
        )
        .collect();
    expected.sort();
    assert_eq!(values, expected, "every committed record once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_broker_killed_while_it_compacts_then_it_restarts_with_every_keys_latest_value() {
    const TOPIC: &str = "killed-compacting";
    // 4 KiB segments and a cleaning pass every 10 ms: passes run all the time, so the
    // kills land in and around them (rewrites aside, renames, index rebuilds).
    let mut broker = BrokerProcess::start_with(&[
        "--segment-bytes",
        "4096",
        "--log-retention-check-interval-ms",
        "10",
    ]);
    let admin = Admin::connect(&broker.bootstrap()).await.expect("admin");
    admin
        .create_topic_with(
            NewTopic::new(TOPIC, 1)
                .config("cleanup.policy", "compact")
                .config("segment.ms", "200"),
        )
        .await
        .expect("compacted topic created");
    let mut model: BTreeMap<String, String> = BTreeMap::new();
    for round in 0..5 {
        let producer = Producer::connect(ProducerConfig::new(broker.bootstrap()))
            .await
            .expect("producer");
        let mut deliveries = Vec::new();
        for n in 0..400 {
            let (key, value) = (format!("key-{:02}", n % 20), format!("{round}-{n:04}"));
            model.insert(key.clone(), value.clone());
            let record = ProducerRecord::new(TOPIC, value).key(key).partition(0);
            deliveries.push(producer.send_record(record).await.expect("send"));
        }
        for d in deliveries {
            d.await.expect("acknowledged");
        }
        broker.kill();
        broker.restart();
        let read = read_all(&broker.bootstrap(), TOPIC, Isolation::ReadCommitted).await;
        assert_eq!(
            latest(&read).0,
            model,
            "round {round}: every key's last acknowledged value after the restart"
        );
    }
    // And it still compacts after all those kills.
    wait_until(
        PATIENCE,
        "the topic compacted to one record per key",
        || {
            let bootstrap = broker.bootstrap();
            async move {
                let read = read_all(&bootstrap, TOPIC, Isolation::ReadCommitted).await;
                let (_, counts) = latest(&read);
                seen_if(read.len(), counts.values().all(|c| *c == 1))
            }
        },
    )
    .await;
}

/// `(sealed segments, their bytes)` of partition 0 of `topic`: every `.log` file but the
/// active (last) one.
fn sealed_segments(data_dir: &Path, topic: &str) -> (u64, u64) {
    let mut sizes: Vec<(String, u64)> = std::fs::read_dir(data_dir.join(format!("{topic}-0")))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(".log"))
                .filter_map(|e| {
                    let len = e.metadata().ok()?.len();
                    Some((e.file_name().to_string_lossy().into_owned(), len))
                })
                .collect()
        })
        .unwrap_or_default();
    sizes.sort();
    sizes.pop();
    (sizes.len() as u64, sizes.iter().map(|(_, len)| len).sum())
}

/// `(partition dir, sealed .log files)` of every partition of `topic` in `data_dir`.
fn sealed_per_partition(data_dir: &Path, topic: &str) -> Vec<(String, u64)> {
    let prefix = format!("{topic}-");
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| {
            let logs = std::fs::read_dir(e.path())
                .map(|files| {
                    files
                        .filter_map(Result::ok)
                        .filter(|f| f.file_name().to_string_lossy().ends_with(".log"))
                        .count() as u64
                })
                .unwrap_or(0);
            (
                e.file_name().to_string_lossy().into_owned(),
                logs.saturating_sub(1),
            )
        })
        .collect()
}

/// Deletes the producer-state snapshots and transaction index files of partition 0 of
/// `topic`, so the broker rebuilds both by replaying the (cleaned) log from its start.
fn forget_derived_state(data_dir: &Path, topic: &str) {
    let dir = data_dir.join(format!("{topic}-0"));
    for entry in std::fs::read_dir(&dir).expect("partition dir").flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".snapshot") || name.ends_with(".txnindex") {
            std::fs::remove_file(entry.path()).expect("remove derived state");
        }
    }
}

/// A value of exactly `VALUE_BYTES` bytes.
fn padded(text: &str) -> String {
    format!("{text:-<VALUE_BYTES$}")
}

const VALUE_BYTES: usize = 100;

/// A producer driven by hand (id, epochs and markers as a coordinator would write them),
/// so its lost responses can be replayed byte for byte.
const RAW_PRODUCER: i64 = 1 << 40;

fn raw_txn_batch(epoch: i16, value: &str) -> bytes::Bytes {
    let record = Record {
        key: Some(bytes::Bytes::from_static(b"raw")),
        value: Some(bytes::Bytes::from(padded(value))),
        headers: Vec::new(),
        timestamp_ms: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64),
    };
    let producer = ProducerInfo {
        producer_id: RAW_PRODUCER,
        producer_epoch: epoch,
        base_sequence: 0,
    };
    batch::encode(producer, batch::ATTR_TRANSACTIONAL, &[record])
}

async fn raw_marker(
    client: &mut raw::RawClient,
    topic: &str,
    epoch: i16,
    control: ControlType,
) -> ErrorCode {
    let marker = raw::Marker {
        topic,
        partition: 0,
        producer_id: RAW_PRODUCER,
        producer_epoch: i32::from(epoch),
        control,
        coordinator_epoch: 0,
    };
    raw::write_marker(client, marker).await.error_code()
}

/// Waits until partition 0 of `topic` answers again and its last stable offset is its
/// high watermark (no transaction left open); returns that end.
async fn stable_end(bootstrap: &str, topic: &str) -> i64 {
    let (end, _) = wait_until(
        PATIENCE,
        "the partition serves, nothing open",
        || async move {
            let Ok(admin) = Admin::connect(bootstrap).await else {
                return seen_if(-1, false);
            };
            let committed = admin
                .list_offsets(topic, 0, OffsetSpec::Latest, Isolation::ReadCommitted)
                .await;
            let all = admin
                .list_offsets(topic, 0, OffsetSpec::Latest, Isolation::ReadUncommitted)
                .await;
            match (committed, all) {
                (Ok(c), Ok(a)) => seen_if(c, c == a),
                _ => seen_if(-1, false),
            }
        },
    )
    .await;
    end
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_hundreds_of_transactions_on_few_keys_when_cleaned_then_the_log_is_bounded_by_its_keys_and_the_producers_go_on(
) {
    const TOPIC: &str = "txn-bounded";
    const KEYS: usize = 5;
    const TXNS: usize = 300;
    const RAW_TXNS: i16 = 20;
    let mut cluster = Cluster::start_with_coordinators(
        1,
        1,
        &[
            "--segment-bytes",
            "16384",
            "--log-retention-check-interval-ms",
            "100",
        ],
        &[],
    )
    .await;
    let bootstrap = cluster.bootstrap();
    let admin = Admin::connect(&bootstrap).await.expect("admin");
    // Nothing is cleaned while the history is written (an hour of lag), so its size can
    // be measured; then the lag goes to 0.
    admin
        .create_topic_with(
            NewTopic::new(TOPIC, 1)
                .replication_factor(1)
                .config("cleanup.policy", "compact")
                .config("segment.ms", "1000")
                .config("delete.retention.ms", "500")
                .config("min.compaction.lag.ms", "3600000"),
        )
        .await
        .expect("compacted topic created");
    let mut model: BTreeMap<String, String> = BTreeMap::new();

    // The hand-driven producer: 20 transactions, the last one aborted, so its last
    // batch in the log is an ABORT marker whose transaction is empty: only the "last
    // batch of each producer stays" rule keeps it, and with it the producer's epoch.
    let mut client = raw::connect(&cluster.broker(1).bootstrap()).await;
    for epoch in 0..RAW_TXNS {
        let commit = epoch < RAW_TXNS - 1;
        let value = format!(
            "{}-raw-{epoch:02}",
            if commit { "committed" } else { "aborted" }
        );
        assert_eq!(
            raw_marker(&mut client, TOPIC, epoch, ControlType::Begin).await,
            ErrorCode::None
        );
        let answer = raw::produce(&mut client, TOPIC, 0, raw_txn_batch(epoch, &value)).await;
        assert_eq!(
            answer.error_code(),
            ErrorCode::None,
            "{}",
            answer.error_message
        );
        let end = if commit {
            ControlType::Commit
        } else {
            ControlType::Abort
        };
        assert_eq!(
            raw_marker(&mut client, TOPIC, epoch + 1, end).await,
            ErrorCode::None
        );
        if commit {
            model.insert("raw".into(), padded(&value));
        }
    }

    // The SDK's transactional producer: one record per transaction, one in five aborted.
    let producer = txn::producer(&bootstrap, "bounded").await;
    for n in 0..TXNS {
        let aborted = n % 5 == 4;
        let key = format!("key-{}", n % KEYS);
        let value = padded(&format!(
            "{}-{n:04}",
            if aborted { "aborted" } else { "committed" }
        ));
        producer.begin().expect("begin");
        let delivery = producer
            .send(
                ProducerRecord::new(TOPIC, value.clone())
                    .key(key.clone())
                    .partition(0),
            )
            .await
            .expect("send");
        if aborted {
            producer.abort().await.expect("abort");
        } else {
            delivery.await.expect("acknowledged");
            producer.commit().await.expect("commit");
            model.insert(key, value);
        }
    }
    let data_dir = cluster.broker(1).data_dir().to_path_buf();
    // segment.ms seals the active segment a second after its first batch.
    let ((written_segments, written), _) = wait_until(PATIENCE, "the history sealed", || {
        let sealed = sealed_segments(&data_dir, TOPIC);
        let active_base = active_segment_base(&data_dir, TOPIC);
        let admin = &admin;
        async move {
            let end = admin
                .list_offsets(TOPIC, 0, OffsetSpec::Latest, Isolation::ReadUncommitted)
                .await
                .expect("end");
            // 3 batches per transaction (BEGIN, data, end), one offset each.
            let written = 3 * (TXNS as i64 + i64::from(RAW_TXNS));
            seen_if(sealed, end == written && active_base == Some(end))
        }
    })
    .await;
    admin
        .alter_configs(
            TOPIC,
            &[AlterConfigOp::set("min.compaction.lag.ms", "0")],
            false,
        )
        .await
        .expect("lag lifted");

    // What may stay in the sealed segments once every horizon passed: per live key (5
    // plus "raw") its record's batch and its transaction's COMMIT, per producer its last
    // batch (a marker), and fillers: at most one between two kept batches plus one per
    // segment. Record: length 4, timestamp delta 8, offset delta 4, key 4+<=5, value
    // 4+100, header count 4 = 133 bytes; data batch 61+133 = 194; marker 61+38 = 99.
    const DATA_BATCH: u64 = 194;
    const MARKER: u64 = 99;
    const FILLER: u64 = 61;
    let live = (KEYS as u64 + 1) * (DATA_BATCH + MARKER) + 2 * MARKER;
    let kept_batches = (KEYS as u64 + 1) * 2 + 2;
    let bound = |segments: u64| live + FILLER * (kept_batches + 1 + segments);
    // That is under 3 KB, well within one segment.bytes (16 KiB): the cleaner merges
    // consecutive cleaned segments while they fit one, so one sealed segment stays,
    // however many the history filled.
    const MERGED_SEGMENTS: u64 = 1;
    let ((segments, cleaned), _) = wait_until(
        PATIENCE,
        "the sealed segments cleaned to their keys and merged",
        || {
            let (segments, bytes) = sealed_segments(&data_dir, TOPIC);
            async move {
                seen_if(
                    (segments, bytes),
                    bytes <= bound(segments) && segments <= MERGED_SEGMENTS,
                )
            }
        },
    )
    .await;
    assert!(
        written_segments > 4 * MERGED_SEGMENTS,
        "{written_segments} segments written"
    );
    eprintln!(
        "{} transactions: {written} bytes in {written_segments} sealed segments before cleaning, \
         {cleaned} in {segments} after (bound {})",
        TXNS + RAW_TXNS as usize,
        bound(segments)
    );
    assert!(cleaned * 20 < written, "{cleaned} of {written} bytes stay");

    let read = read_all(&bootstrap, TOPIC, Isolation::ReadCommitted).await;
    assert!(
        read.iter()
            .all(|r| !text(&r.value).unwrap_or_default().starts_with("aborted")),
        "read_committed saw an aborted value"
    );
    let (values, counts) = latest(&read);
    assert_eq!(values, model, "each key's last committed value");
    assert!(counts.values().all(|c| *c == 1), "{counts:?}");

    // A restart that has to replay the cleaned log (snapshots and transaction index
    // files gone): no transaction is left open, and the hand-driven producer is still at
    // the epoch its last ABORT (a marker of an emptied transaction, kept as its last
    // batch) moved it to.
    cluster.kill(1);
    forget_derived_state(&data_dir, TOPIC);
    cluster.restart(1);
    stable_end(&bootstrap, TOPIC).await;
    let mut client = raw::connect(&cluster.broker(1).bootstrap()).await;
    assert_eq!(
        raw_marker(&mut client, TOPIC, RAW_TXNS - 1, ControlType::Begin).await,
        ErrorCode::InvalidProducerEpoch,
        "a zombie at the epoch before the last ABORT is fenced"
    );
    assert_eq!(
        raw_marker(&mut client, TOPIC, RAW_TXNS, ControlType::Begin).await,
        ErrorCode::None
    );
    let batch = raw_txn_batch(RAW_TXNS, "committed-raw-after");
    let sent = raw::produce(&mut client, TOPIC, 0, batch.clone()).await;
    assert_eq!(sent.error_code(), ErrorCode::None, "{}", sent.error_message);
    // Its answer is lost, the broker restarts, and the retry is a duplicate.
    cluster.restart(1);
    // Its transaction is open: the partition serves once its end is back.
    wait_until(PATIENCE, "the partition serves again", || {
        let bootstrap = &bootstrap;
        async move {
            let end = match Admin::connect(bootstrap).await {
                Ok(admin) => admin
                    .list_offsets(TOPIC, 0, OffsetSpec::Latest, Isolation::ReadUncommitted)
                    .await
                    .unwrap_or(-1),
                Err(_) => -1,
            };
            seen_if(end, end == sent.base_offset + 1)
        }
    })
    .await;
    let mut client = raw::connect(&cluster.broker(1).bootstrap()).await;
    let retry = raw::produce(&mut client, TOPIC, 0, batch).await;
    assert_eq!(
        retry.error_code(),
        ErrorCode::None,
        "{}",
        retry.error_message
    );
    assert_eq!(
        retry.base_offset, sent.base_offset,
        "the retry is a duplicate"
    );
    assert_eq!(
        raw_marker(&mut client, TOPIC, RAW_TXNS + 1, ControlType::Commit).await,
        ErrorCode::None
    );
    model.insert("raw".into(), padded("committed-raw-after"));

    // The SDK producer goes on transactionally after the restarts.
    for n in 0..3 {
        let (key, value) = (format!("key-{n}"), padded(&format!("committed-after-{n}")));
        producer.begin().expect("begin");
        producer
            .send(
                ProducerRecord::new(TOPIC, value.clone())
                    .key(key.clone())
                    .partition(0),
            )
            .await
            .expect("send")
            .await
            .expect("acknowledged");
        producer.commit().await.expect("commit after the restart");
        model.insert(key, value);
    }
    stable_end(&bootstrap, TOPIC).await;
    let read = read_all(&bootstrap, TOPIC, Isolation::ReadCommitted).await;
    assert_eq!(
        latest(&read).0,
        model,
        "each key's last committed value after the restarts"
    );
}

/// The base offset of the active segment of partition 0 of `topic` (its file name).
fn active_segment_base(data_dir: &Path, topic: &str) -> Option<i64> {
    idem_tests::segments::active_segment(&data_dir.join(format!("{topic}-0")))
        .and_then(|path| path.file_stem()?.to_str()?.parse::<i64>().ok())
}
