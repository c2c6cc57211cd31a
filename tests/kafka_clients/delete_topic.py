"""Deletes a topic through Kafka's DeleteTopics with confluent-kafka's AdminClient and
prints one JSON line: the error (null when deleted).

usage: delete_topic.py BOOTSTRAP TOPIC
"""
import json
import sys

from confluent_kafka.admin import AdminClient


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_topics([topic], operation_timeout=30)
    error = None
    try:
        futures[topic].result(timeout=60)
    except Exception as e:  # the KafkaException carries the broker's error
        error = str(e)
    print(json.dumps({"error": error}))


if __name__ == "__main__":
    main()
