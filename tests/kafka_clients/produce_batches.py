"""Produces BATCHES batches of PER_BATCH records to one partition with an idempotent
confluent-kafka producer, flushing after each batch (so each is its own request),
then prints one JSON line: {"delivered": N, "errors": [...]}.

usage: produce_batches.py BOOTSTRAP TOPIC PARTITION BATCHES PER_BATCH
"""
import json
import sys

from confluent_kafka import Producer


def main():
    bootstrap, topic = sys.argv[1], sys.argv[2]
    partition, batches, per_batch = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    delivered, errors = [0], []

    def report(err, _msg):
        if err is None:
            delivered[0] += 1
        else:
            errors.append(str(err))

    for b in range(batches):
        for i in range(per_batch):
            producer.produce(topic, value=f"{b}-{i}".encode(), partition=partition,
                             on_delivery=report)
        left = producer.flush(30)
        if left:
            errors.append(f"{left} records of batch {b} unsent")
    print(json.dumps({"delivered": delivered[0], "errors": errors}))


if __name__ == "__main__":
    main()
