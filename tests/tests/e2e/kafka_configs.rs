//! Kafka admin clients read and change topic configs (issue 30): confluent-kafka's
//! `describe_configs` shows every key a topic may set with the value in effect and
//! where it comes from, `incremental_alter_configs` sets and deletes the topic's own
//! values (validate_only changes nothing), and what idem refuses (a bad value, APPEND,
//! a broker resource, an unknown topic, a principal without the ACL) is an error the
//! client shows and changes nothing.

use idem_client::admin::acls::AclBinding;
use idem_client::AlterConfigOp;
use idem_tests::kafka_clients::python;
use idem_tests::wait::{wait_until, Seen, PATIENCE};
use idem_tests::Cluster;
use serde_json::Value;

use crate::acls::binding;

const KAFKA_LISTEN: [&str; 2] = ["--kafka-listen", "127.0.0.1:0"];
const TOPIC: &str = "configured";
/// Every key a topic may set (docs/topics.md).
const KEYS: usize = 9;

/// `topic_configs.py`'s steps, run in order against `kafka`.
async fn steps(kafka: &str, topic: &str, steps: &[&str]) -> Vec<Value> {
    let mut args = vec![kafka, topic];
    args.extend_from_slice(steps);
    let ran = python("topic_configs.py", &args).await;
    let done = ran["steps"].as_array().cloned().unwrap_or_default();
    assert_eq!(done.len(), steps.len(), "{ran}");
    done
}

/// The `(value, source, default)` of `key` in a describe step.
fn entry(step: &Value, key: &str) -> (String, String, bool) {
    let c = &step["configs"][key];
    (
        c["value"].as_str().unwrap_or_default().to_string(),
        c["source"].as_str().unwrap_or_default().to_string(),
        c["default"].as_bool().unwrap_or_default(),
    )
}

fn error_code(step: &Value) -> &str {
    step["error"]["code"].as_str().unwrap_or("none")
}

fn error_message(step: &Value) -> &str {
    step["error"]["message"].as_str().unwrap_or_default()
}

fn default(value: &str) -> (String, String, bool) {
    (value.to_string(), "DEFAULT_CONFIG".to_string(), true)
}

#[tokio::test]
async fn given_a_topic_when_a_kafka_admin_describes_and_alters_its_configs_then_idem_shows_and_keeps_them(
) {
    let cluster = Cluster::start(1, &KAFKA_LISTEN);
    cluster.create_topic(TOPIC, 1, 1).await;
    let kafka = cluster.broker(1).kafka_bootstrap();
    let done = steps(
        &kafka,
        TOPIC,
        &[
            "describe",
            "set:retention.ms=3600000",
            "describe",
            "validate:segment.bytes=1048576",
            "set:segment.bytes=12",
            "append:cleanup.policy=compact",
            "set:retention.hours=1",
            "delete:retention.ms",
            "describe",
            "describe-broker",
        ],
    )
    .await;
    let [before, set, after_set, validated, bad_value, append, unknown_key, deleted, after_delete, broker] =
        &done[..]
    else {
        unreachable!("ten steps");
    };
    // Every key, each the broker's default.
    assert_eq!(
        before["configs"].as_object().map(|c| c.len()),
        Some(KEYS),
        "{before}"
    );
    assert_eq!(entry(before, "retention.ms"), default("604800000"));
    assert_eq!(entry(before, "cleanup.policy"), default("delete"));
    let segment_bytes = entry(before, "segment.bytes");
    assert!(segment_bytes.2, "{before}");

    assert_eq!(error_code(set), "none", "{set}");
    assert_eq!(
        entry(after_set, "retention.ms"),
        (
            "3600000".to_string(),
            "DYNAMIC_TOPIC_CONFIG".to_string(),
            false
        )
    );
    assert_eq!(error_code(validated), "none", "{validated}");
    assert_eq!(error_code(bad_value), "INVALID_CONFIG", "{bad_value}");
    assert!(
        error_message(bad_value).contains("segment.bytes"),
        "{bad_value}"
    );
    assert_eq!(error_code(append), "INVALID_REQUEST", "{append}");
    assert!(error_message(append).contains("operation 2"), "{append}");
    assert_eq!(error_code(unknown_key), "INVALID_CONFIG", "{unknown_key}");
    assert!(
        error_message(unknown_key).contains("retention.hours"),
        "{unknown_key}"
    );
    assert_eq!(error_code(deleted), "none", "{deleted}");
    // Deleted: the default again; validated, refused and unknown: nothing changed.
    assert_eq!(entry(after_delete, "retention.ms"), default("604800000"));
    assert_eq!(entry(after_delete, "segment.bytes"), segment_bytes);
    assert_eq!(entry(after_delete, "cleanup.policy"), default("delete"));
    assert_eq!(
        after_delete["configs"].as_object().map(|c| c.len()),
        Some(KEYS)
    );

    assert_eq!(error_code(broker), "INVALID_REQUEST", "{broker}");
    assert!(
        error_message(broker).contains("topic configs only"),
        "{broker}"
    );

    // idem's own API sees what a Kafka client set.
    let set = steps(&kafka, TOPIC, &["set:retention.ms=3600000"]).await;
    assert_eq!(error_code(&set[0]), "none", "{}", set[0]);
    let admin = idem_client::Admin::connect(&cluster.bootstrap())
        .await
        .expect("admin");
    let described = admin.describe_configs(TOPIC).await.expect("described");
    let retention = described
        .iter()
        .find(|e| e.name == "retention.ms")
        .expect("retention.ms");
    assert_eq!(
        (retention.value.as_str(), retention.is_default),
        ("3600000", false)
    );

    // An unknown topic: described or altered, UNKNOWN_TOPIC_OR_PARTITION.
    let missing = steps(&kafka, "missing", &["describe", "set:retention.ms=1"]).await;
    for step in &missing {
        assert_eq!(error_code(step), "UNKNOWN_TOPIC_OR_PART", "{step}");
    }
}

/// Under `--authorizer acl` (the Kafka listener's principal is `User:ANONYMOUS` for a
/// client without SASL or a certificate): describe needs DESCRIBE on the topic, alter
/// needs ALTER; refused, the config is unchanged.
#[tokio::test]
async fn given_acls_when_a_kafka_admin_without_alter_changes_a_config_then_it_is_refused_and_unchanged(
) {
    let (_tokens, cluster, admin) = crate::kafka::anonymous_acl_broker().await;
    for topic in [TOPIC, "hidden"] {
        admin.create_topic(topic, 1, 1).await.expect("created");
    }
    let describe_only: AclBinding =
        binding("User:ANONYMOUS", "topic", TOPIC, "literal", "describe");
    admin
        .create_acls(&[describe_only])
        .await
        .expect("ACL stored");
    let kafka = cluster.broker(1).kafka_bootstrap();
    // ACLs reach the broker through an etcd watch: wait until the describe is allowed.
    wait_until(PATIENCE, "the broker applies the ACL", || {
        let kafka = kafka.clone();
        async move {
            let done = steps(&kafka, TOPIC, &["describe"]).await;
            match error_code(&done[0]) {
                "none" => Seen::Reached(()),
                _ => Seen::Not(done[0].to_string()),
            }
        }
    })
    .await;
    let done = steps(&kafka, TOPIC, &["set:retention.ms=1000", "describe"]).await;
    assert_eq!(
        error_code(&done[0]),
        "TOPIC_AUTHORIZATION_FAILED",
        "{}",
        done[0]
    );
    assert_eq!(entry(&done[1], "retention.ms"), default("604800000"));
    let hidden = steps(&kafka, "hidden", &["describe"]).await;
    assert_eq!(
        error_code(&hidden[0]),
        "TOPIC_AUTHORIZATION_FAILED",
        "{}",
        hidden[0]
    );
    // The operator may: the same change applies.
    admin
        .alter_configs(TOPIC, &[AlterConfigOp::set("retention.ms", "1000")], false)
        .await
        .expect("the admin alters");
    let done = steps(&kafka, TOPIC, &["describe"]).await;
    assert_eq!(entry(&done[0], "retention.ms").0, "1000");
}
