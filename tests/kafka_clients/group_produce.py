"""Produces COUNT records to each of PARTITIONS partitions of TOPIC with an idempotent
confluent-kafka producer: value "P-I" for the I-th record (from START) of partition P.
Prints one JSON line: how many were delivered and the delivery errors.

usage: group_produce.py BOOTSTRAP TOPIC PARTITIONS COUNT [START]
"""
import json
import sys

from confluent_kafka import Producer


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    partitions, count = int(sys.argv[3]), int(sys.argv[4])
    start = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                         "linger.ms": 5})
    delivered, errors = [0], []

    def report(err, _msg):
        if err is None:
            delivered[0] += 1
        else:
            errors.append(str(err))

    for i in range(start, start + count):
        for p in range(partitions):
            producer.produce(topic, value=f"{p}-{i}".encode(), partition=p, on_delivery=report)
            producer.poll(0)
    left = producer.flush(60)
    print(json.dumps({"delivered": delivered[0], "undelivered": left, "errors": errors}))


if __name__ == "__main__":
    main()
