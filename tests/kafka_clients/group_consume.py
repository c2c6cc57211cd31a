"""One confluent-kafka consumer in group GROUP (KIP-848: group.protocol=consumer;
`group.protocol=` with no value leaves librdkafka's default, the classic protocol)
subscribed to TOPIC, committing synchronously after each record. Prints one JSON line
per event, flushed at once so a test acts on it as it happens, each with "t", the
system-wide monotonic clock in seconds (comparable across processes of one host):

  {"assigned": [[partition, ...]]}        partitions added by a rebalance
  {"revoked": [partition, ...]}           partitions taken away
  {"received": [partition, offset, value]} a record, before its commit
  {"committed": [partition, next_offset]} the commit of that record returned
  {"commit_error": [partition, offset, code]}
  {"error": code, "fatal": bool, "reason": text}
                                          an error event (the script ends on an
                                          authorization or a fatal error)
  {"closed": true}                        after close(), which leaves the group

It runs until stdin says "close" (then closes: a leave) or it is killed.

usage: group_consume.py BOOTSTRAP GROUP TOPIC [key=value librdkafka settings...]
       revoke_delay_ms=N (not a librdkafka setting): each revocation takes N ms
       before it is reported, as a consumer finishing its work would
"""
import json
import select
import sys
import time

from confluent_kafka import Consumer, KafkaException, KafkaError

FATAL = {KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED}


def say(**event):
    event["t"] = time.monotonic()
    print(json.dumps(event), flush=True)


def main():
    bootstrap, group, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    config = {"bootstrap.servers": bootstrap, "group.id": group,
              "group.protocol": "consumer", "enable.auto.commit": False,
              "auto.offset.reset": "earliest"}
    for setting in sys.argv[4:]:
        key, value = setting.split("=", 1)
        if value:
            config[key] = value
        else:
            config.pop(key, None)
    revoke_delay = int(config.pop("revoke_delay_ms", "0")) / 1000

    def on_revoke(_consumer, partitions):
        if partitions:
            time.sleep(revoke_delay)
        say(revoked=sorted(p.partition for p in partitions))

    consumer = Consumer(config)
    consumer.subscribe(
        [topic],
        on_assign=lambda c, ps: say(assigned=sorted(p.partition for p in ps)),
        on_revoke=on_revoke,
    )
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 0)
        if ready and sys.stdin.readline().strip() in ("close", ""):
            break
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            code = msg.error().code()
            say(error=msg.error().name(), fatal=msg.error().fatal(), reason=msg.error().str())
            # librdkafka reports a fatal group error as _FATAL, naming the cause in
            # its reason ("Group authorization failed").
            if code in FATAL or code == KafkaError._FATAL:
                break
            continue
        say(received=[msg.partition(), msg.offset(), msg.value().decode()])
        try:
            consumer.commit(message=msg, asynchronous=False)
            say(committed=[msg.partition(), msg.offset() + 1])
        except KafkaException as e:
            say(commit_error=[msg.partition(), msg.offset(), e.args[0].name()])
    consumer.close()
    say(closed=True)


if __name__ == "__main__":
    main()
