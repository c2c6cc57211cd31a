"""Creates a topic through Kafka's CreateTopics with confluent-kafka's AdminClient and
prints one JSON line: the error (null when created).

usage: create_topic.py BOOTSTRAP TOPIC PARTITIONS REPLICATION_FACTOR
"""
import json
import sys

from confluent_kafka.admin import AdminClient, NewTopic


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    partitions, replication = int(sys.argv[3]), int(sys.argv[4])
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication)],
        operation_timeout=30)
    error = None
    try:
        futures[topic].result(timeout=60)
    except Exception as e:  # the KafkaException carries the broker's error
        error = str(e)
    print(json.dumps({"error": error}))


if __name__ == "__main__":
    main()
