#!/usr/bin/env python3
"""confluent-kafka (librdkafka) against a secured Strand listener, for
tests/security.rs. One command per run; prints one line: "ok ..." or
"err <librdkafka error name> <message>".

  alter <bootstrap> <user> <SCRAM-SHA-256|SCRAM-SHA-512> <password> [k=v ...]
  describe <bootstrap> <user> [k=v ...]
  roundtrip <bootstrap> <topic> <count> [k=v ...]   (acks=all, idempotent;
      then reads the topic back with a read_committed consumer)
  create <bootstrap> <topic> <partitions> <replicas> [k=v ...]   (once that
      many brokers are registered; min.insync.replicas = replicas)
  ready <host:port,...> <brokers> [k=v ...]   (the cluster lists that many
      brokers and each one given answers metadata: "ok", else "err ...")
  controller-probe <host:port> <ca.pem> <none|cert.pem:key.pem|plaintext|sasl:USER:PASSWORD|sasl+tls:USER:PASSWORD> <vote|harmless>
      (on a controller listener: with "vote" a Raft Vote at a term far
      ahead first, then a harmless controller request: "answered <the first
      answer>" or "refused ...")
"""
import json
import socket
import ssl
import struct
import sys
import time
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


def create(bootstrap, topic, partitions, replicas, extra):
    from confluent_kafka.admin import NewTopic
    conf = settings(bootstrap, extra)
    conf["error_cb"] = fatal_errors
    admin = AdminClient(conf)
    deadline = time.time() + 60
    while len(admin.list_topics(timeout=10).brokers) < replicas:
        if time.time() > deadline:
            raise Failed(f"TIMEOUT fewer than {replicas} brokers registered")
        time.sleep(0.2)
    new = NewTopic(topic, partitions, replicas,
                   config={"min.insync.replicas": str(replicas)})
    admin.create_topics([new], request_timeout=30)[topic].result()
    print("ok")


def ready(bootstrap, brokers, extra):
    conf = settings(bootstrap, extra)
    conf["error_cb"] = fatal_errors
    listed = len(AdminClient(conf).list_topics(timeout=5).brokers)
    if listed < brokers:
        raise Failed(f"NOT_READY {listed} of {brokers} brokers registered")
    for one in bootstrap.split(","):
        conf = settings(one, extra)
        conf["error_cb"] = fatal_errors
        AdminClient(conf).list_topics(timeout=5)
    print("ok")


def frame(value):
    body = json.dumps(value).encode()
    return struct.pack(">I", len(body)) + body


def read_frame(sock):
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (n,) = struct.unpack(">I", head)
    body = b""
    while len(body) < n:
        chunk = sock.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    return json.loads(body)


def controller_probe(addr, ca, credential, what):
    host, port = addr.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)
    try:
        if credential.startswith("sasl:") or credential.startswith("sasl+tls:"):
            # The controller listener's SASL/PLAIN login (over TLS with
            # "sasl+tls", without a client certificate).
            kind, user, password = credential.split(":", 2)
            if kind == "sasl+tls":
                ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
                ctx.load_verify_locations(ca)
                sock = ctx.wrap_socket(sock, server_hostname=host)
            token = list(b"\0" + user.encode() + b"\0" + password.encode())
            sock.sendall(frame({"mechanism": "PLAIN", "token": token}))
            login = read_frame(sock)
            if login is None or "error" in login:
                print(f"refused sasl {login}")
                return
        elif credential != "plaintext":
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.load_verify_locations(ca)
            if credential != "none":
                cert, key = credential.split(":", 1)
                ctx.load_cert_chain(cert, key)
            sock = ctx.wrap_socket(sock, server_hostname=host)
        # What a stranger would send: a vote for itself at a term far ahead
        # (a node that counted it would step down).
        if what == "vote":
            sock.sendall(frame({"Vote": {"vote": {"leader_id": {"term": 1000000, "node_id": 99},
                                                  "committed": False},
                                         "last_log_id": None}}))
        sock.sendall(frame({"Controller": None}))
        answer = read_frame(sock)
    except (ssl.SSLError, OSError) as e:
        print(f"refused {type(e).__name__} {e}")
        return
    if answer is None:
        print("refused closed")
    elif isinstance(answer, dict) and "error" in answer:
        # The listener took the first frame for a SASL login and refused it.
        print(f"refused {answer['error']}")
    else:
        print("answered " + json.dumps(answer)[:200])


def main():
    cmd, args = sys.argv[1], sys.argv[2:]
    try:
        if cmd == "alter":
            alter(args[0], args[1], args[2], args[3], args[4:])
        elif cmd == "describe":
            describe(args[0], args[1], args[2:])
        elif cmd == "create":
            create(args[0], args[1], int(args[2]), int(args[3]), args[4:])
        elif cmd == "ready":
            ready(args[0], int(args[1]), args[2:])
        elif cmd == "controller-probe":
            controller_probe(args[0], args[1], args[2], args[3])
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
