#!/usr/bin/env python3
# fake broker: answers ApiVersions v0 with an empty list, ignores everything else
import socket, sys, threading, struct, signal, re
props = open(sys.argv[1]).read()
port = int(re.search(r'listeners=PLAINTEXT://127.0.0.1:(\d+)', props).group(1))
print("fake strand args:", sys.argv[1:], flush=True)
signal.signal(signal.SIGTERM, lambda *a: (print("SIGTERM, bye", flush=True), sys.exit(0)))
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port)); s.listen(50)
def serve(c):
    try:
        while True:
            hdr = c.recv(4, socket.MSG_WAITALL)
            if len(hdr) < 4: return
            n = struct.unpack(">i", hdr)[0]
            req = c.recv(n, socket.MSG_WAITALL)
            key, ver, corr = struct.unpack(">hhi", req[:8])
            if key == 18 and ver == 0:
                body = struct.pack(">ihi", corr, 0, 0)
                c.sendall(struct.pack(">i", len(body)) + body)
    except Exception: pass
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
