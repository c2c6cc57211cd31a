"""The committed offsets of group GROUP for partitions 0..PARTITIONS-1 of TOPIC, as
confluent-kafka's committed() reads them (OffsetFetch); -1001 is librdkafka's "none".
Prints one JSON line: {"offsets": [offset per partition]} or {"error": code}.

usage: group_committed.py BOOTSTRAP GROUP TOPIC PARTITIONS
"""
import json
import sys

from confluent_kafka import Consumer, KafkaException, TopicPartition


def main():
    bootstrap, group, topic, partitions = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "group.protocol": "consumer"})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)],
                                   timeout=30)
        errors = [tp.error.name() for tp in found if tp.error is not None]
        if errors:
            print(json.dumps({"error": errors[0]}))
        else:
            print(json.dumps({"offsets": [tp.offset for tp in sorted(found, key=lambda t: t.partition)]}))
    except KafkaException as e:
        print(json.dumps({"error": e.args[0].name()}))
    finally:
        consumer.close()


if __name__ == "__main__":
    main()
