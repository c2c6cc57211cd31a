"""Produces COUNT records (values "0" .. "COUNT-1", keys "k0" ..) to one partition
with confluent-kafka, then prints one JSON line: what each delivery report said, and
the client-level errors librdkafka raised (an authentication failure, ...).

usage: produce.py BOOTSTRAP TOPIC PARTITION COUNT [key=value librdkafka settings...]
e.g.   produce.py 127.0.0.1:9094 orders 0 500 enable.idempotence=true compression.type=lz4
The pseudo-setting oauth.token=TOKEN makes the oauth_cb return TOKEN (an hour's
lifetime), for sasl.mechanism=OAUTHBEARER.
"""
import json
import sys
import time

from confluent_kafka import Producer


def main():
    bootstrap, topic, partition, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    config = {"bootstrap.servers": bootstrap}
    for setting in sys.argv[5:]:
        key, value = setting.split("=", 1)
        config[key] = value
    errors = []
    config["error_cb"] = lambda err: errors.append(str(err))
    token = config.pop("oauth.token", None)
    if token is not None:
        config["oauth_cb"] = lambda _config: (token, time.time() + 3600)
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
    print(json.dumps({"undelivered": left, "reports": reports, "errors": errors}))


if __name__ == "__main__":
    main()
