#!/usr/bin/env python3
# Stand-in for a multi-node `strand`, for the cluster harness tests only.
#
#   fake-strand-cluster.py format --cluster-id ID --node-id N --initial-controllers V
#                                 [--override log.dirs=DIR] [server.properties]
#       writes DIR/meta.properties (refuses an already formatted DIR)
#   fake-strand-cluster.py server.properties [--override k=v ...]
#       needs a formatted log.dirs; listens on the PLAINTEXT and/or CONTROLLER ports of
#       `listeners`; registers itself in <parent of log.dirs>/.fake-registry/<node.id>
#       after fake.register.delay.ms (default 300); answers ApiVersions v0 (advertising
#       DescribeCluster 0..fake.describe.cluster.max, default 2) and DescribeCluster
#       v0-v2 listing the registered brokers whose process is alive; a SIGSTOPped one is
#       listed as fenced (v2) or left out (v0/v1), like Kafka's unfenced-only listing.
#       fake.exit.after.ms=T makes it exit(7) after T ms. SIGTERM: exit 0.
import os, re, signal, socket, struct, sys, threading, time

def parse(argv):
    props, over, pos = {}, {}, []
    i = 0
    while i < len(argv):
        if argv[i] == "--override":
            k, v = argv[i + 1].split("=", 1); over[k] = v; i += 2
        elif argv[i].startswith("--"):
            over[argv[i][2:]] = argv[i + 1]; i += 2
        else:
            pos.append(argv[i]); i += 1
    for p in pos:
        for line in open(p):
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1); props[k.strip()] = v.strip()
    props.update(over)
    return props

if len(sys.argv) > 1 and sys.argv[1] == "format":
    p = parse(sys.argv[2:])
    print("fake format:", sys.argv[2:], flush=True)
    d = p["log.dirs"]
    os.makedirs(d, exist_ok=True)
    meta = os.path.join(d, "meta.properties")
    if os.path.exists(meta):
        print("already formatted", flush=True); sys.exit(1)
    for k in ("cluster-id", "node-id", "initial-controllers"):
        if k not in p:
            print("missing --" + k, flush=True); sys.exit(1)
    if len(p["cluster-id"]) != 22:
        print("bad cluster id", flush=True); sys.exit(1)
    with open(meta, "w") as f:
        f.write("version=1\ncluster.id=%s\nnode.id=%s\n" % (p["cluster-id"], p["node-id"]))
    sys.exit(0)

p = parse(sys.argv[1:])
print("fake strand args:", sys.argv[1:], flush=True)
signal.signal(signal.SIGTERM, lambda *a: (print("SIGTERM, bye", flush=True), os._exit(0)))
node_id = int(p["node.id"])
roles = p["process.roles"].split(",")
logdir = p["log.dirs"]
meta = os.path.join(logdir, "meta.properties")
if not os.path.exists(meta):
    print("not formatted:", meta, flush=True); sys.exit(1)
cluster_id = re.search(r"cluster.id=(\S+)", open(meta).read()).group(1)
listeners = dict(re.findall(r"(\w+)://127\.0\.0\.1:(\d+)", p["listeners"]))
assert ("PLAINTEXT" in listeners) == ("broker" in roles), p["listeners"]
assert ("CONTROLLER" in listeners) == ("controller" in roles), p["listeners"]
registry = os.path.join(os.path.dirname(os.path.abspath(logdir)), ".fake-registry")
os.makedirs(registry, exist_ok=True)
dc_max = int(p.get("fake.describe.cluster.max", "2"))

def proc_state(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None

def brokers():
    out = []
    for name in sorted(os.listdir(registry)):
        try:
            host, port, pid = open(os.path.join(registry, name)).read().split()
        except (OSError, ValueError):
            continue
        st = proc_state(int(pid))
        if st is None or st in "ZX":
            continue
        out.append((int(name), host, int(port), st == "T"))
    return out

def cstr(s):
    b = s.encode(); return bytes([len(b) + 1]) + b

def describe_cluster(ver):
    r = struct.pack(">ih", 0, 0) + b"\x00"  # throttle, error, null message
    if ver >= 1:
        r += b"\x01"
    r += cstr(cluster_id) + struct.pack(">i", 1)
    listed = [b for b in brokers() if ver >= 2 or not b[3]]
    r += bytes([len(listed) + 1])
    for bid, host, port, fenced in listed:
        r += struct.pack(">i", bid) + cstr(host) + struct.pack(">i", port) + b"\x00"
        if ver >= 2:
            r += bytes([fenced])
        r += b"\x00"
    return r + struct.pack(">i", -2**31) + b"\x00"

def serve(c):
    try:
        while True:
            hdr = c.recv(4, socket.MSG_WAITALL)
            if len(hdr) < 4: return
            n = struct.unpack(">i", hdr)[0]
            req = c.recv(n, socket.MSG_WAITALL)
            key, ver, corr = struct.unpack(">hhi", req[:8])
            if key == 18 and ver == 0:
                apis = [(18, 0, 3), (60, 0, dc_max)]
                body = struct.pack(">ihi", corr, 0, len(apis))
                for a in apis: body += struct.pack(">hhh", *a)
            elif key == 60 and ver <= 2:
                body = struct.pack(">i", corr) + b"\x00" + describe_cluster(ver)
            else:
                return
            c.sendall(struct.pack(">i", len(body)) + body)
    except Exception:
        pass

def listen(port):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", int(port))); s.listen(50)
    def loop():
        while True:
            c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()

for name, port in listeners.items():
    listen(port)
if "PLAINTEXT" in listeners:
    time.sleep(int(p.get("fake.register.delay.ms", "300")) / 1000)
    tmp = os.path.join(registry, ".%d.tmp" % node_id)
    with open(tmp, "w") as f:
        f.write("127.0.0.1 %s %d\n" % (listeners["PLAINTEXT"], os.getpid()))
    os.rename(tmp, os.path.join(registry, str(node_id)))
    print("registered", flush=True)
if "fake.exit.after.ms" in p:
    time.sleep(int(p["fake.exit.after.ms"]) / 1000)
    print("fake crash", flush=True); os._exit(7)
# short sleeps: after SIGSTOP/SIGCONT a SIGTERM may land on another thread, and Python
# runs handlers only when the main thread comes back to the interpreter
while True:
    time.sleep(0.1)
