"""Consumers with group.protocol=consumer (KIP-848) against a broker.

usage: kip848_group.py BOOTSTRAP TOPIC GROUP split|resume

split:  two consumers share TOPIC (6 partitions, 60 records written
        first, record i to partition i % 6); prints their assignments once
        disjoint and complete and each has read its partitions to the end,
        and which records each read, in order; the first commits and leaves, and the
        second's assignment after that is printed; it commits and leaves.
resume: 60 more records are written; one consumer of GROUP reads until
        it has seen them, then prints every record it read.
migrate: a classic consumer (cooperative-sticky) holds TOPIC (6
        partitions); a consumer-protocol consumer joins its group (the
        group moves to the consumer protocol) and they split the
        partitions; then it leaves (the group moves back to classic) and
        the classic consumer holds all six again. Prints the two
        assignments and the group's type at each step, and whether a
        partition was ever assigned to both at once.
Each result is one JSON line on stdout.
"""
import json
import sys
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

bootstrap, topic, group, mode = sys.argv[1:5]


def out(**kv):
    print(json.dumps(kv), flush=True)


def produce(first):
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(first, first + 60):
        p.produce(topic, str(i).encode(), partition=i % 6)
    p.flush()


def consumer(name, protocol="consumer"):
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.protocol": protocol,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "client.id": name,
    }
    if protocol == "classic":
        conf["partition.assignment.strategy"] = "cooperative-sticky"
    c = Consumer(conf)
    c.subscribe([topic])
    return c


def assigned(c):
    return sorted(tp.partition for tp in c.assignment())


if mode == "split":
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result()
    produce(0)
    c1, c2 = consumer("c1"), consumer("c2")
    read = {"c1": [], "c2": []}
    deadline = time.time() + 60
    while time.time() < deadline:
        for name, c in (("c1", c1), ("c2", c2)):
            m = c.poll(0.1)
            if m is not None and not m.error():
                read[name].append(int(m.value()))
        a1, a2 = assigned(c1), assigned(c2)
        # Until each has read every record of the partitions it holds now
        # (a partition handed over uncommitted is read again from the start,
        # as Kafka does).
        caught_up = all(
            len({v for v in read[n] if v % 6 in a}) == 10 * len(a)
            for n, a in (("c1", a1), ("c2", a2)))
        if a1 and a2 and sorted(a1 + a2) == list(range(6)) and caught_up:
            break
    out(event="split", c1=assigned(c1), c2=assigned(c2), read=read)
    c1.commit(asynchronous=False)
    c1.close()
    deadline = time.time() + 60
    while time.time() < deadline and len(c2.assignment()) < 6:
        c2.poll(0.1)
    out(event="after_leave", c2=assigned(c2))
    try:
        c2.commit(asynchronous=False)
    except Exception as e:  # nothing new to commit is not an error here
        if "No offset stored" not in str(e):
            raise
    c2.close()
elif mode == "migrate":
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 6, 1)])[topic].result()
    produce(0)

    def group_type():
        for g in admin.list_consumer_groups().result().valid:
            if g.group_id == group:
                return str(g.type).split(".")[-1]
        return None

    overlap = []

    def poll_until(consumers, done):
        deadline = time.time() + 60
        while time.time() < deadline:
            for c in consumers:
                c.poll(0.1)
            sets = [set(assigned(c)) for c in consumers]
            if len(sets) == 2 and sets[0] & sets[1]:
                overlap.append(sorted(sets[0] & sets[1]))
            if done(sets):
                return

    k = consumer("classic-k", "classic")
    poll_until([k], lambda s: len(s[0]) == 6)
    out(event="classic", k=assigned(k), type=group_type())
    c = consumer("consumer-c")
    poll_until([k, c], lambda s: s[0] and s[1] and len(s[0] | s[1]) == 6
               and not s[0] & s[1])
    out(event="mixed", k=assigned(k), c=assigned(c), type=group_type(),
        overlap=overlap)
    c.close()
    poll_until([k], lambda s: len(s[0]) == 6)
    out(event="downgraded", k=assigned(k), type=group_type())
    k.close()
elif mode == "resume":
    produce(60)
    c = consumer("c3")
    read = []
    deadline = time.time() + 60
    while time.time() < deadline and sorted(read)[-1:] != [119]:
        m = c.poll(0.1)
        if m is not None and not m.error():
            read.append(int(m.value()))
    # A moment more, to catch anything read twice.
    end = time.time() + 2
    while time.time() < end:
        m = c.poll(0.1)
        if m is not None and not m.error():
            read.append(int(m.value()))
    out(event="resume", read=read, assignment=assigned(c))
    c.close()
