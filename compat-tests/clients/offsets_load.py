#!/usr/bin/env python3
"""Committed offsets for the coordinator load benchmark (strand-vs-kafka
--coordinator-offsets), on confluent-kafka (librdkafka).

    offsets_load.py commit BOOTSTRAP TOPIC GROUPS COMMITS
        GROUPS groups each commit offsets 1..COMMITS of TOPIC's partition 0
        (asynchronously, then one synchronous commit of the last): GROUPS x
        COMMITS records in __consumer_offsets. Prints "ok". Each group first
        commits offset 0 synchronously until that succeeds: an asynchronous
        commit that fails while the coordinator loads is retried by
        librdkafka after later ones, and would overwrite them.
    offsets_load.py wait BOOTSTRAP TOPIC GROUPS COMMITS SINCE
        Asks every group's committed offset until each answers COMMITS, and
        prints the seconds from SINCE (a Unix time, when the broker was
        started) to the last answer: the time until the coordinator has
        loaded the groups again.
"""
import sys
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition

mode, bootstrap, topic = sys.argv[1:4]
groups, commits = int(sys.argv[4]), int(sys.argv[5])


def consumer(group):
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
        }
    )


if mode == "commit":
    for g in range(groups):
        c = consumer(f"load-{g}")
        while True:
            try:
                c.commit(offsets=[TopicPartition(topic, 0, 0)], asynchronous=False)
                break
            except KafkaException:
                time.sleep(0.05)
        for offset in range(1, commits):
            c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=True)
            c.poll(0)
        c.commit(offsets=[TopicPartition(topic, 0, commits)], asynchronous=False)
        c.close()
    print("ok")
elif mode == "wait":
    since = float(sys.argv[6])
    deadline = time.time() + 600
    for g in range(groups):
        # committed() answers for the consumer's own group.
        c = consumer(f"load-{g}")
        while True:
            try:
                got = c.committed([TopicPartition(topic, 0)], timeout=10)
            except KafkaException:
                got = None
            if got and got[0].offset == commits:
                break
            if time.time() > deadline:
                sys.exit(f"group load-{g}: committed offset {got} after 600 s, not {commits}")
            time.sleep(0.01)
        c.close()
    print(f"{time.time() - since:.3f}")
else:
    sys.exit(f"unknown mode {mode}")
