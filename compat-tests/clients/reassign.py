"""kafka-python's admin client moves partitions (KIP-455) for the reassignment
tests: `reassign.py BOOTSTRAP TOPIC PARTITION REPLICAS` starts a move
(REPLICAS: comma-separated broker ids, or `cancel`), then prints one JSON
line per poll of list_partition_reassignments until nothing is in flight:
{"ongoing": {...}}, and a last {"done": true}. The per-partition answer of
the move is printed first: {"error": null} or {"error": "NAME"}."""
import json
import sys
import time

from kafka import TopicPartition
from kafka.admin import KafkaAdminClient


def main():
    bootstrap, topic, partition, replicas = sys.argv[1:5]
    tp = TopicPartition(topic, int(partition))
    target = None if replicas == "cancel" else [int(b) for b in replicas.split(",")]
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)
    result = admin.alter_partition_reassignments({tp: target}, timeout_ms=30000)
    err = result.get(tp)
    print(json.dumps({"error": None if err is None else err.__name__}), flush=True)
    if err is not None:
        return
    deadline = time.time() + 120
    while time.time() < deadline:
        ongoing = admin.list_partition_reassignments({topic: [int(partition)]})
        if not ongoing:
            print(json.dumps({"done": True}), flush=True)
            return
        print(json.dumps({"ongoing": {f"{t.topic}-{t.partition}": v for t, v in ongoing.items()}}), flush=True)
        time.sleep(0.2)
    print(json.dumps({"done": False}), flush=True)


if __name__ == "__main__":
    main()
