#!/usr/bin/env python3
"""Consume-transform-produce processors on confluent-kafka (librdkafka), driven
line by line over stdin/stdout by tests/transactions.rs, so that the same
exactly-once history and the same broker-side checks run with this client and
with the rdkafka crate.

    eos_processor.py BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID

Commands (one per line; each answered by one line, "ok ..." or "err ..."):
    start NAME            a new processor: transactional producer
                          (init_transactions) and read_committed consumer
    batch NAME MAX        consume up to MAX records, begin a transaction,
                          write "NAME|partition:offset" for each to the same
                          partition of OUTPUT, send the consumer's offsets to
                          the transaction and flush; answers "ok COUNT"
    commit NAME / abort NAME
                          end the transaction; "err CODE fatal|abortable|retriable|other"
    close_consumer NAME   close the processor's consumer (its producer stays)
    quit
"""
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer

bootstrap, input_topic, output_topic, group, txn_id = sys.argv[1:6]
processors = {}


def reply(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def error_reply(e):
    err = e.args[0] if e.args else None
    if err is None or not hasattr(err, "name"):
        return f"err {e!r} other"
    kind = (
        "fatal" if err.fatal()
        else "abortable" if err.txn_requires_abort()
        else "retriable" if err.retriable()
        else "other"
    )
    return f"err {err.name()} {kind}"


def start(name):
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "transactional.id": txn_id,
        "enable.idempotence": True,
        "acks": "all",
        "linger.ms": 1,
        "transaction.timeout.ms": 60000,
    })
    producer.init_transactions(30)
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "isolation.level": "read_committed",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    consumer.subscribe([input_topic])
    processors[name] = {"producer": producer, "consumer": consumer}


def batch(name, limit):
    p = processors[name]
    consumer, producer = p["consumer"], p["producer"]
    msgs = []
    deadline = time.monotonic() + 10
    while len(msgs) < limit and time.monotonic() < deadline:
        m = consumer.poll(0.2)
        if m is None:
            if msgs:
                break
            continue
        if m.error():
            raise KafkaException(m.error())
        msgs.append(m)
    if not msgs:
        return 0
    producer.begin_transaction()
    for m in msgs:
        value = f"{name}|{m.partition()}:{m.offset()}"
        producer.produce(output_topic, value.encode(), partition=m.partition())
    positions = consumer.position(consumer.assignment())
    producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
    producer.flush(30)
    return len(msgs)


def main():
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        cmd, args = words[0], words[1:]
        try:
            if cmd == "quit":
                reply("ok")
                return
            if cmd == "start":
                start(args[0])
                reply("ok")
            elif cmd == "batch":
                reply(f"ok {batch(args[0], int(args[1]))}")
            elif cmd == "commit":
                processors[args[0]]["producer"].commit_transaction(30)
                reply("ok")
            elif cmd == "abort":
                processors[args[0]]["producer"].abort_transaction(30)
                reply("ok")
            elif cmd == "close_consumer":
                consumer = processors[args[0]].pop("consumer", None)
                if consumer is not None:
                    consumer.close()
                reply("ok")
            else:
                reply(f"err unknown-command:{cmd} other")
        except KafkaException as e:
            reply(error_reply(e))


if __name__ == "__main__":
    main()
