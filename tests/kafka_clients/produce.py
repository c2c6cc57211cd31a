"""Produces COUNT records (values "0" .. "COUNT-1", keys "k0" ..) to one partition
with confluent-kafka, then prints one JSON line: what each delivery report said.

usage: produce.py BOOTSTRAP TOPIC PARTITION COUNT [key=value librdkafka settings...]
e.g.   produce.py 127.0.0.1:9094 orders 0 500 enable.idempotence=true compression.type=lz4
"""
import json
import sys

from confluent_kafka import Producer


def main():
    bootstrap, topic, partition, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    config = {"bootstrap.servers": bootstrap}
    for setting in sys.argv[5:]:
        key, value = setting.split("=", 1)
        config[key] = value
    reports = []

    def delivered(err, msg):
        reports.append({
            "value": msg.value().decode(),
            "offset": msg.offset(),
            "error": None if err is None else str(err),
        })

    producer = Producer(config)
    for i in range(count):
        producer.produce(topic, value=str(i).encode(), key=f"k{i}".encode(),
                         partition=partition, on_delivery=delivered)
        producer.poll(0)
    left = producer.flush(60)
    print(json.dumps({"undelivered": left, "reports": reports}))


if __name__ == "__main__":
    main()
