"""The chaos workload's Kafka client: one confluent-kafka idempotent producer sending
unique values one at a time (each flushed before the next, so the history holds one
operation at a time per process), round robin over TOPICS x PARTITIONS, until stdin says
"stop". Prints one JSON line per event, flushed:

  {"invoke": [topic, partition, value]}          before the record is produced
  {"ok": [topic, partition, value, offset]}      its delivery report, acknowledged
  {"info": [topic, partition, value], "error": text}
                                                 a failed delivery: librdkafka cannot
                                                 say whether the broker wrote it
  {"fatal": text}                                librdkafka's producer failed for
                                                 good (it then exits): for an idempotent
                                                 producer, a broker that broke its
                                                 sequence rules
  {"stopped": true}                              after the last operation

usage: chaos_produce.py BOOTSTRAP NAME PARTITIONS TOPIC... [key=value settings...]
"""
import json
import select
import sys
import time

from confluent_kafka import KafkaException, Producer

# A delivery fails after this long, as the SDK producers' delivery timeout.
MESSAGE_TIMEOUT_MS = 15000
# A pause between sends, keeping the client near one SDK producer's rate (~40 a second
# in a CI run): flat out it sent ~110 a second, and the checker's work and the CPU it
# took from the cluster on 2 cores grew with it.
PAUSE_S = 0.015


def say(**event):
    print(json.dumps(event), flush=True)


def stop_asked():
    ready, _, _ = select.select([sys.stdin], [], [], 0)
    return bool(ready) and sys.stdin.readline().strip() in ("stop", "")


def main():
    bootstrap, name, partitions = sys.argv[1], sys.argv[2], int(sys.argv[3])
    topics = [a for a in sys.argv[4:] if "=" not in a]
    config = {"bootstrap.servers": bootstrap, "enable.idempotence": True,
              "linger.ms": 0, "message.timeout.ms": MESSAGE_TIMEOUT_MS}
    for setting in (a for a in sys.argv[4:] if "=" in a):
        key, value = setting.split("=", 1)
        config[key] = value
    producer = Producer(config)
    n = 0
    while not stop_asked():
        if n:
            time.sleep(PAUSE_S)
        topic = topics[n % len(topics)]
        partition = (n // len(topics)) % partitions
        value = f"{name}-{n}"
        outcome = {}

        def delivered(err, msg, outcome=outcome):
            outcome["err"] = err
            outcome["offset"] = None if err is not None else msg.offset()

        say(invoke=[topic, partition, value])
        try:
            producer.produce(topic, value.encode(), partition=partition,
                             on_delivery=delivered)
            # Until its delivery report: at most message.timeout.ms, then an error.
            while "err" not in outcome:
                producer.flush(1.0)
        except KafkaException as e:
            say(info=[topic, partition, value], error=str(e))
            say(fatal=str(e))
            return
        if outcome["err"] is None:
            say(ok=[topic, partition, value, outcome["offset"]])
        else:
            say(info=[topic, partition, value], error=str(outcome["err"]))
            if outcome["err"].fatal():
                say(fatal=str(outcome["err"]))
                return
        n += 1
    say(stopped=True)


if __name__ == "__main__":
    main()
