#!/usr/bin/env python3
"""confluent-kafka (librdkafka) against a secured Strand listener, for
tests/security.rs. One command per run; prints one line: "ok ..." or
"err <librdkafka error name> <message>".

  alter <bootstrap> <user> <SCRAM-SHA-256|SCRAM-SHA-512> <password> [k=v ...]
  describe <bootstrap> <user> [k=v ...]
  roundtrip <bootstrap> <topic> <count> [k=v ...]   (acks=all, idempotent;
      then reads the topic back with a read_committed consumer)
"""
import sys
import uuid

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo,
                                   ScramMechanism, UserScramCredentialUpsertion)


def settings(bootstrap, extra):
    conf = {"bootstrap.servers": bootstrap}
    for kv in extra:
        k, v = kv.split("=", 1)
        conf[k] = v
    return conf


class Failed(Exception):
    pass


def fatal_errors(err):
    # Authentication and TLS failures are reported here, not as exceptions.
    if err.code() in (KafkaError._AUTHENTICATION, KafkaError._SSL,
                      KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._ALL_BROKERS_DOWN,
                      KafkaError._TRANSPORT):
        raise Failed(f"{err.name()} {err.str()}")


def alter(bootstrap, user, mechanism, password, extra):
    admin = AdminClient(settings(bootstrap, extra))
    m = ScramMechanism.SCRAM_SHA_512 if mechanism == "SCRAM-SHA-512" else ScramMechanism.SCRAM_SHA_256
    up = UserScramCredentialUpsertion(user, ScramCredentialInfo(m, 8192), password.encode())
    futures = admin.alter_user_scram_credentials([up], request_timeout=30)
    futures[user].result()
    print("ok")


def describe(bootstrap, user, extra):
    admin = AdminClient(settings(bootstrap, extra))
    future = admin.describe_user_scram_credentials([user], request_timeout=30)
    desc = future[user].result() if isinstance(future, dict) else future.result()[user]
    infos = sorted(f"{i.mechanism.name}:{i.iterations}" for i in desc.scram_credential_infos)
    print("ok " + " ".join(infos))


def roundtrip(bootstrap, topic, count, extra):
    conf = settings(bootstrap, extra)
    conf["error_cb"] = fatal_errors
    producer = Producer({**conf, "acks": "all", "enable.idempotence": True,
                         "message.timeout.ms": 30000})
    delivered = []

    def on_delivery(err, msg):
        if err is not None:
            raise Failed(f"{err.name()} {err.str()}")
        delivered.append(msg.offset())

    for i in range(count):
        producer.produce(topic, value=f"secure-{i}".encode(), on_delivery=on_delivery)
        producer.poll(0)
    while len(delivered) < count:
        producer.poll(0.5)
    producer.flush(30)
    consumer = Consumer({**conf, "group.id": f"sec-{uuid.uuid4()}",
                         "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    # Every value exactly once, and in production order within each
    # partition (the only order Kafka promises across partitions).
    seen = {}
    while sum(len(v) for v in seen.values()) < count:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            raise Failed(f"{msg.error().name()} {msg.error().str()}")
        seen.setdefault(msg.partition(), []).append(int(msg.value().decode().split("-")[1]))
    consumer.close()
    everything = sorted(i for v in seen.values() for i in v)
    if everything != list(range(count)):
        raise Failed(f"MISMATCH read {len(everything)} values, not each of 0..{count} once")
    for partition, values in seen.items():
        if values != sorted(values):
            raise Failed(f"MISMATCH partition {partition} out of production order")
    print(f"ok {count}")


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    try:
        if cmd == "alter":
            alter(args[0], args[1], args[2], args[3], args[4:])
        elif cmd == "describe":
            describe(args[0], args[1], args[2:])
        elif cmd == "roundtrip":
            roundtrip(args[0], args[1], int(args[2]), args[3:])
        else:
            raise SystemExit(f"unknown command {cmd}")
    except Failed as e:
        print(f"err {e}")
    except KafkaException as e:
        err = e.args[0]
        print(f"err {err.name()} {err.str()}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
