"""Lists the consumer groups of a cluster with confluent-kafka's AdminClient
(ListGroups to every broker, merged), optionally only those in STATES, then prints one
JSON line: {"valid": [{"group_id", "state", "type", "simple"}...], "errors": [...]}.

usage: list_groups.py BOOTSTRAP [STATE...]     e.g. list_groups.py 127.0.0.1:9094 STABLE
"""
import json
import sys

from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient


def main():
    bootstrap, states = sys.argv[1], sys.argv[2:]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    options = {"request_timeout": 20}
    if states:
        options["states"] = {ConsumerGroupState[s] for s in states}
    result = admin.list_consumer_groups(**options).result()
    print(json.dumps({
        "valid": sorted(
            ({"group_id": g.group_id, "state": g.state.name,
              "type": getattr(getattr(g, "type", None), "name", None),
              "simple": g.is_simple_consumer_group}
             for g in result.valid),
            key=lambda g: g["group_id"]),
        "errors": [str(e) for e in result.errors],
    }))


if __name__ == "__main__":
    main()
