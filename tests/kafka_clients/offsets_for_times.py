"""Looks offsets up by timestamp with confluent-kafka's Consumer.offsets_for_times
(ListOffsets with a timestamp), then prints one JSON line: {"offsets": [...]}, one
offset per TIMESTAMP in order (-1: no record that new).

usage: offsets_for_times.py BOOTSTRAP TOPIC PARTITION ISOLATION TIMESTAMP...
       ISOLATION is read_committed or read_uncommitted
"""
import json
import sys

from confluent_kafka import Consumer, TopicPartition


def main():
    bootstrap, topic, partition, isolation = sys.argv[1:5]
    timestamps = [int(t) for t in sys.argv[5:]]
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "offsets-for-times",
                         "isolation.level": isolation, "enable.auto.commit": False})
    offsets = []
    for timestamp in timestamps:
        [found] = consumer.offsets_for_times(
            [TopicPartition(topic, int(partition), timestamp)], timeout=20)
        if found.error is not None:
            raise SystemExit(f"offsets_for_times({timestamp}): {found.error}")
        offsets.append(found.offset)
    consumer.close()
    print(json.dumps({"offsets": offsets}))


if __name__ == "__main__":
    main()
