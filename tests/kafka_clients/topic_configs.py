"""Reads and changes a topic's configs with confluent-kafka's AdminClient
(DescribeConfigs, IncrementalAlterConfigs), step by step, then prints one JSON line:
{"steps": [{"step", "configs"?, "error"?}...]}. "configs" maps each key to
{"value", "source", "default", "read_only"}; "error" is {"code", "message"}.

usage: topic_configs.py BOOTSTRAP TOPIC STEP...
  describe            DescribeConfigs of TOPIC
  describe-broker     DescribeConfigs of broker 1
  set:KEY=VALUE       IncrementalAlterConfigs SET
  validate:KEY=VALUE  the same with validate_only
  delete:KEY          IncrementalAlterConfigs DELETE
  append:KEY=VALUE    IncrementalAlterConfigs APPEND
"""
import json
import sys

from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                   ConfigResource, ConfigSource, ResourceType)

OPS = {"set": AlterConfigOpType.SET, "validate": AlterConfigOpType.SET,
       "delete": AlterConfigOpType.DELETE, "append": AlterConfigOpType.APPEND}


def failure(e):
    error = e.args[0]
    return {"code": error.name(), "message": error.str()}


def describe(admin, resource):
    try:
        configs = admin.describe_configs([resource], request_timeout=20)[resource].result()
    except KafkaException as e:
        return {"error": failure(e)}
    return {"configs": {name: {"value": c.value, "source": ConfigSource(c.source).name,
                               "default": c.is_default, "read_only": c.is_read_only}
                        for name, c in configs.items()}}


def alter(admin, topic, step):
    verb, _, setting = step.partition(":")
    key, _, value = setting.partition("=")
    entry = ConfigEntry(key, value or None, incremental_operation=OPS[verb])
    resource = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
    try:
        admin.incremental_alter_configs(
            [resource], validate_only=verb == "validate", request_timeout=20)[resource].result()
    except KafkaException as e:
        return {"error": failure(e)}
    return {}


def main():
    bootstrap, topic, steps = sys.argv[1], sys.argv[2], sys.argv[3:]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    done = []
    for step in steps:
        if step == "describe":
            outcome = describe(admin, ConfigResource(ResourceType.TOPIC, topic))
        elif step == "describe-broker":
            outcome = describe(admin, ConfigResource(ResourceType.BROKER, "1"))
        else:
            outcome = alter(admin, topic, step)
        done.append({"step": step, **outcome})
    print(json.dumps({"steps": done}))


if __name__ == "__main__":
    main()
