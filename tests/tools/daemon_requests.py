#!/usr/bin/python3
"""daemon_requests.py: many `stage` requests to stagehandd at once, as one user, from a job.

  daemon_requests.py SOCKET COUNT JOB_ID SOURCE DEST_PREFIX

Opens COUNT connections to SOCKET together, sends on each a `stage` request (docs/protocol.md) of
SOURCE (an absolute path) to DEST_PREFIX<i> in job JOB_ID's directory, reads every reply to its
result frame and prints one JSON line: {"ok": N, "errors": {kind: N}, "unanswered": N}. For tests
that hold the daemon's capacity the way a user's own client could (the staging helper sends one
request per job and node; nothing stops a user from sending more).
"""
import json
import socket
import struct
import sys
import threading


def frame(obj):
    data = json.dumps(obj).encode()
    return struct.pack(">I", len(data)) + data


def read_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


def one(path, job_id, source, dest, results, i):
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(600)
            s.connect(path)
            s.sendall(frame({"v": 1, "op": "stage", "job_id": job_id, "max_bytes": 1 << 40,
                             "sources": [{"shown": source, "path": source, "dest": dest,
                                          "kind": "file", "unpack": "never"}]}))
            while True:
                head = read_exact(s, 4)
                if head is None:
                    results[i] = "closed"
                    return
                body = read_exact(s, struct.unpack(">I", head)[0])
                if body is None:
                    results[i] = "closed"
                    return
                msg = json.loads(body)
                if msg.get("type") == "result":
                    results[i] = "ok" if msg.get("ok") else msg.get("kind", "?")
                    return
    except OSError as e:
        results[i] = "oserror: " + e.strerror if e.strerror else "oserror"


def main():
    path, count, job_id, source, prefix = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    results = [None] * count
    threads = [threading.Thread(target=one, args=(path, job_id, source, f"{prefix}{i}", results, i))
               for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    errors = {}
    for r in results:
        if r not in ("ok", None):
            errors[r] = errors.get(r, 0) + 1
    print(json.dumps({"ok": results.count("ok"), "errors": errors, "unanswered": results.count(None)}))


if __name__ == "__main__":
    main()
