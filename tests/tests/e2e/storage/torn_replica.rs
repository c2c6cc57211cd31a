//! A follower whose disk lost the tail of its log in a crash (a torn write) must not
//! lead: it had fetched records the leader then acknowledged, and an election won with
//! its shorter log would make every other replica truncate to it. On restart it takes
//! itself out of the ISR before it takes part in elections, so while it catches up only
//! the replicas that still hold everything may lead; then it rejoins.

use idem_proto::ErrorCode;
use idem_tests::Cluster;
use idem_tests::{raw, segments};

const RECORDS: i32 = 40;

#[tokio::test]
async fn given_a_follower_restarted_with_a_torn_log_then_it_leaves_the_isr_and_never_leads_what_it_lost(
) {
    // A lag limit far beyond the test: only the restart can take the follower out.
    let mut cluster = Cluster::start(3, &["--replica-lag-time-max-ms", "120000"]);
    cluster.create_topic("ledger", 1, 3).await;
    let leader = cluster.leader_of("ledger", 0).await.leader_id;
    let followers: Vec<i32> = cluster
        .ids()
        .into_iter()
        .filter(|id| *id != leader)
        .collect();
    let (torn, witness) = (followers[0], followers[1]);
    let mut client = raw::connect(&cluster.broker(leader).bootstrap()).await;
    for seq in 0..RECORDS {
        let value = format!("r{seq}");
        let answer = raw::produce(
            &mut client,
            "ledger",
            0,
            raw::idempotent_batch(11, 0, seq, &[&value]),
        )
        .await;
        assert_eq!(
            (answer.error_code(), answer.base_offset),
            (ErrorCode::None, i64::from(seq)),
            "{}",
            answer.error_message
        );
    }
    // acks=all: every record is on all three replicas, which are all still in sync.
    let before = cluster
        .partition(leader, "ledger", 0)
        .await
        .expect("ledger-0 described");
    assert_eq!(before.isr.len(), 3, "{:?}", before.isr);

    cluster.kill(torn);
    let segment = segments::active_segment(&cluster.broker(torn).data_dir().join("ledger-0"))
        .expect("a segment");
    let length = std::fs::metadata(&segment).expect("segment").len();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&segment)
        .expect("open segment");
    file.set_len(length / 2 + 7).expect("tear the segment");
    drop(file);

    // The leader is paused so that it cannot readmit the follower as it catches up.
    cluster.pause(leader);
    cluster.restart(torn);
    let seen = cluster
        .wait_for(witness, "ledger", 0, |p| !p.isr.contains(&torn))
        .await;
    assert_eq!(
        seen.leader_id, leader,
        "a follower leaving changes no leader"
    );
    assert_eq!(seen.isr.len(), 2, "{:?}", seen.isr);

    // The witness dies and the paused leader's registration lapses: the torn replica is
    // the only live one, and out of the ISR it must not take over.
    cluster.kill(witness);
    cluster.wait_for_registration(torn, leader, false).await;
    let offline = cluster
        .partition(torn, "ledger", 0)
        .await
        .expect("ledger-0 described");
    assert_ne!(offline.leader_id, torn, "the torn replica took over");

    cluster.resume(leader);
    let healed = cluster
        .wait_for(leader, "ledger", 0, |p| {
            p.leader_id == leader && p.isr.contains(&torn)
        })
        .await;
    assert_eq!(healed.high_watermark, i64::from(RECORDS));
    let mut client = raw::connect(&cluster.broker(leader).bootstrap()).await;
    let values = raw::values(&raw::read_partition(&mut client, "ledger", 0).await);
    assert_eq!(
        values,
        (0..RECORDS).map(|i| format!("r{i}")).collect::<Vec<_>>()
    );
    cluster.restart(witness);
    cluster
        .wait_for(leader, "ledger", 0, |p| p.isr.len() == 3)
        .await;
    cluster.stop_all();
    assert_eq!(
        cluster.compare_replicas("ledger", 0, i64::from(RECORDS)),
        RECORDS as usize
    );
}
