"""confluent-kafka's idempotent producer sending for a while, then a read-back: the
Kafka side of scripts/bench-kafka.sh (issue 30's benchmark, RATE 0: as fast as it
can), and a producer that runs through a fault in the e2e tests (a steady RATE).

Sends RECORD_SIZE-byte records round-robin over PARTITIONS partitions of TOPIC for
SECONDS (at most RATE records/s unless 0), then flushes; the rate reported is
acknowledged records over the time from the first send to the last acknowledgement,
as `idem bench produce` measures it. Each value
starts with the stamp `idem bench` writes (big-endian producer u32, sequence u64,
nanoseconds u64, then zero padding), so the read-back after the timed part can check
what `idem bench` checks: every acknowledged record present once, in send order within
its partition, nothing unacknowledged counted.

usage: timed_produce.py BOOTSTRAP TOPIC PARTITIONS SECONDS RECORD_SIZE RATE [key=value ...]
prints one JSON line: records, seconds, records_per_sec, failed, read, lost,
duplicated, reordered, verified.
"""
import json
import struct
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

STAMP = struct.Struct(">IQQ")


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    partitions, seconds, record_size = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
    rate = float(sys.argv[6])
    config = {
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "linger.ms": 5,
    }
    for setting in sys.argv[7:]:
        key, value = setting.split("=", 1)
        # The binding wants Python booleans where librdkafka takes true/false.
        config[key] = {"true": True, "false": False}.get(value, value)

    acked = [0]
    failed = set()
    last_error = [None]

    def delivered(err, msg):
        if err is None:
            acked[0] += 1
        else:
            failed.add(STAMP.unpack_from(msg.value())[1])
            last_error[0] = str(err)

    config["on_delivery"] = delivered
    producer = Producer(config)
    padding = bytes(record_size - STAMP.size)
    start = time.monotonic()
    deadline = start + seconds
    sequence = 0
    # The clock is read once per 100 sends: a read per record costs as much as a send.
    while True:
        if sequence % 100 == 0:
            now = time.monotonic()
            if now >= deadline:
                break
            ahead = start + sequence / rate - now if rate > 0 else 0
            if ahead > 0:
                # poll() returns at the first delivery report: sleep the rest.
                producer.poll(0)
                time.sleep(ahead)
        nanos = time.monotonic_ns()
        value = STAMP.pack(0, sequence, nanos) + padding
        while True:
            try:
                producer.produce(topic, value=value, partition=sequence % partitions)
                break
            except BufferError:
                # The local queue is full: wait for acknowledgements, as a real app would.
                producer.poll(0.001)
        sequence += 1
    left = producer.flush(120)
    elapsed = time.monotonic() - start
    sent = sequence
    if config.get("delivery.report.only.error") is True:
        # Reports come for failures only: everything else flushed was acknowledged.
        acked[0] = sent - len(failed) - left

    read = verify(bootstrap, topic, partitions, sent, failed)
    print(json.dumps({
        "records": acked[0],
        "sent": sent,
        "seconds": elapsed,
        "records_per_sec": acked[0] / elapsed,
        "mb_per_sec": acked[0] * record_size / elapsed / 1e6,
        "failed": len(failed),
        "unflushed": left,
        "last_error": last_error[0],
        **read,
        # Records left unanswered count as sent, not acknowledged: they may be read.
        "verified": left == 0 and read["lost"] == 0 and read["duplicated"] == 0
        and read["reordered"] == 0,
    }))


def verify(bootstrap, topic, partitions, sent, failed):
    """Reads every partition from the start: which sequences came back, how often, and
    whether each partition holds them in send order. Lost: acknowledged (sent and not
    failed) but not read."""
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": "bench-verify",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "isolation.level": "read_committed",
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = bytearray(sent)
    duplicated = reordered = read = 0
    last = [-1] * partitions
    at_end = set()
    idle_since = time.monotonic()
    while len(at_end) < partitions and time.monotonic() - idle_since < 30:
        for msg in consumer.consume(num_messages=10000, timeout=1.0):
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise RuntimeError(str(msg.error()))
            idle_since = time.monotonic()
            at_end.discard(msg.partition())
            _, sequence, _ = STAMP.unpack_from(msg.value())
            read += 1
            if sequence >= sent:
                raise RuntimeError(f"read sequence {sequence}, only {sent} sent")
            if seen[sequence]:
                duplicated += 1
            seen[sequence] = 1
            if sequence <= last[msg.partition()]:
                reordered += 1
            last[msg.partition()] = sequence
    consumer.close()
    lost = sum(1 for sequence in range(sent) if not seen[sequence] and sequence not in failed)
    return {"read": read, "lost": lost, "duplicated": duplicated, "reordered": reordered}


if __name__ == "__main__":
    main()
