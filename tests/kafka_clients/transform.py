"""A consume-transform-produce processor (KIP-447) built only from confluent-kafka: a
consumer in GROUP (group.protocol=consumer, read_committed, no auto commit) of INPUT,
and a transactional producer (TRANSACTIONAL_ID) that writes, for each input record,
"out-" + its value to the same partition of OUTPUT, and sends the consumed offsets
with send_offsets_to_transaction in the same transaction. One JSON line per event,
flushed at once:

  {"assigned": [partition, ...]} / {"revoked": [partition, ...]}
  {"committed": n, "inputs": [[partition, offset, value], ...]}
                                       transaction n committed these inputs
  {"dying": n, "at": point, "inputs": [...]}
                                       about to SIGKILL itself inside transaction n
  {"error": code, "reason": text}      a failed step (the script then ends)

die=N:POINT SIGKILLs the process in its Nth transaction, its outputs produced and
acknowledged (flushed) and, at POINT "offsets", the offsets sent too; at POINT
"outputs", before they are sent. The transaction is then open and holds data, as a
processor that crashes mid-transaction leaves it. It runs until stdin says "close".

usage: transform.py BOOTSTRAP GROUP INPUT OUTPUT TRANSACTIONAL_ID [die=N:POINT]
                    [key=value librdkafka settings...]
"""
import json
import os
import select
import signal
import sys

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

# Each call's own limit, shorter than the test's patience with this script.
CALL_TIMEOUT_S = 60


def say(**event):
    print(json.dumps(event), flush=True)


def main():
    bootstrap, group, source, sink, transactional_id = sys.argv[1:6]
    die_at, die_point = None, None
    settings = {}
    for setting in sys.argv[6:]:
        key, value = setting.split("=", 1)
        if key == "die":
            number, die_point = value.split(":")
            die_at = int(number)
        else:
            settings[key] = value
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.protocol": "consumer", "enable.auto.commit": False,
                         "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": transactional_id, **settings})
    try:
        producer.init_transactions(CALL_TIMEOUT_S)
    except KafkaException as e:
        say(error=e.args[0].name(), reason=str(e.args[0]))
        return
    consumer.subscribe(
        [source],
        on_assign=lambda c, ps: say(assigned=sorted(p.partition for p in ps)),
        on_revoke=lambda c, ps: say(revoked=sorted(p.partition for p in ps)),
    )
    number = 0
    while True:
        ready, _, _ = select.select([sys.stdin], [], [], 0)
        if ready and sys.stdin.readline().strip() in ("close", ""):
            break
        records = []
        for msg in consumer.consume(num_messages=50, timeout=0.5):
            if msg.error():
                say(error=msg.error().name(), reason=msg.error().str())
                return
            records.append(msg)
        if not records:
            continue
        number += 1
        inputs = [[m.partition(), m.offset(), m.value().decode()] for m in records]
        next_offsets = {}
        for m in records:
            next_offsets[m.partition()] = m.offset() + 1
        try:
            producer.begin_transaction()
            for m in records:
                producer.produce(sink, value=b"out-" + m.value(), partition=m.partition())
            if number == die_at and die_point == "outputs":
                die(producer, number, die_point, inputs)
            producer.send_offsets_to_transaction(
                [TopicPartition(source, p, o) for p, o in sorted(next_offsets.items())],
                consumer.consumer_group_metadata(), CALL_TIMEOUT_S)
            if number == die_at and die_point == "offsets":
                die(producer, number, die_point, inputs)
            producer.commit_transaction(CALL_TIMEOUT_S)
        except KafkaException as e:
            # No rewind-and-retry: the test's single processor must never need one, so
            # any failure ends the script and the test says which.
            say(error=e.args[0].name(), reason=str(e.args[0]))
            return
        say(committed=number, inputs=inputs)
    consumer.close()
    say(closed=True)


def die(producer, number, point, inputs):
    """Leaves the transaction open with its data written, as a crash would."""
    left = producer.flush(CALL_TIMEOUT_S)
    say(dying=number, at=point, inputs=inputs, unsent=left)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
