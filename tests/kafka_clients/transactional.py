"""Runs transactional producers (confluent-kafka) through STEPS, a JSON list of steps,
printing one JSON line per step (flushed) and a last line with every delivery report.

usage: transactional.py BOOTSTRAP STEPS [key=value librdkafka settings...]

Steps, each naming a producer of this process:
  ["init", name, transactional_id]   new Producer + init_transactions()
  ["begin", name]                    begin_transaction()
  ["produce", name, topic, partition, value]
  ["flush", name]                    flush(): every produced record sent and acknowledged
                                     (abort_transaction() drops what is still queued)
  ["commit", name] / ["abort", name] commit_transaction() / abort_transaction()
  ["send_offsets", name, group, topic, partition, offset]
                                     send_offsets_to_transaction() with the metadata of a
                                     consumer of `group` that never joins it
  ["wait"]                           prints {"waiting": true}, then reads a line of stdin
                                     (the test acts on the cluster meanwhile)

A step's line: {"step": [...], "ok": true} or, when librdkafka raised,
{"step": [...], "ok": false, "code": "_FENCED", "error": "...", "fatal": true,
 "retriable": false, "abortable": false}.
"""
import json
import sys

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

# Each call's own limit, shorter than the test's patience with this script.
CALL_TIMEOUT_S = 60


def main():
    bootstrap, steps = sys.argv[1], json.loads(sys.argv[2])
    settings = {}
    for setting in sys.argv[3:]:
        key, value = setting.split("=", 1)
        settings[key] = value
    producers = {}
    consumers = {}
    reports = []

    def delivered(err, msg):
        reports.append({
            "topic": msg.topic(),
            "partition": msg.partition(),
            "value": msg.value().decode(),
            "offset": msg.offset(),
            "error": None if err is None else str(err),
        })

    for step in steps:
        action = step[0]
        line = {"step": step}
        try:
            if action == "init":
                config = {"bootstrap.servers": bootstrap, "transactional.id": step[2]}
                config.update(settings)
                producers[step[1]] = Producer(config)
                producers[step[1]].init_transactions(CALL_TIMEOUT_S)
            elif action == "begin":
                producers[step[1]].begin_transaction()
            elif action == "produce":
                producer = producers[step[1]]
                producer.produce(step[2], value=step[4].encode(), partition=step[3],
                                 on_delivery=delivered)
                producer.poll(0)
            elif action == "flush":
                left = producers[step[1]].flush(CALL_TIMEOUT_S)
                if left:
                    raise RuntimeError(f"{left} records still unsent")
            elif action == "commit":
                producers[step[1]].commit_transaction(CALL_TIMEOUT_S)
            elif action == "abort":
                producers[step[1]].abort_transaction(CALL_TIMEOUT_S)
            elif action == "send_offsets":
                group, topic, partition, offset = step[2], step[3], step[4], step[5]
                if group not in consumers:
                    consumers[group] = Consumer({"bootstrap.servers": bootstrap,
                                                 "group.id": group,
                                                 "enable.auto.commit": False})
                metadata = consumers[group].consumer_group_metadata()
                producers[step[1]].send_offsets_to_transaction(
                    [TopicPartition(topic, partition, offset)], metadata, CALL_TIMEOUT_S)
            elif action == "wait":
                print(json.dumps({"waiting": True}), flush=True)
                sys.stdin.readline()
            else:
                raise ValueError(f"unknown step {step}")
            line["ok"] = True
        except KafkaException as e:
            err = e.args[0]
            line.update(ok=False, code=err.name(), error=str(err), fatal=err.fatal(),
                        retriable=err.retriable(), abortable=err.txn_requires_abort())
        except Exception as e:  # a step on a producer that never initialised, say
            line.update(ok=False, code=type(e).__name__, error=str(e), fatal=True,
                        retriable=False, abortable=False)
        print(json.dumps(line), flush=True)
    for producer in producers.values():
        try:
            producer.poll(0)  # the last delivery reports
        except KafkaException:
            pass  # a producer in a fatal state raises it again; its step said so
    for consumer in consumers.values():
        consumer.close()
    print(json.dumps({"done": True, "reports": reports}), flush=True)


if __name__ == "__main__":
    main()
