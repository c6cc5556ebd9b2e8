#!/usr/bin/env python3
"""Does a cold page cache stall a worker's other clients? (docs/benchmarks.md#a-cold-page-cache)

`quill serve DIR --workers 1` serves big files and one small hot file. One client downloads the
big files one after another, reading as fast as it can; another fetches the hot 1 KiB file in a
loop on a kept-alive connection and records each request's latency. Two phases: the big files
warm (read once before), then cold (their pages dropped with posix_fadvise(POSIX_FADV_DONTNEED)
before each download; `fincore` checks the drop when util-linux has it). A worker that blocks in
`sendfile` on a disk read makes the hot client wait meanwhile: its p99 and max grow in the cold
phase.

  python3 bench/coldio.py --quill-bin target/release/quill [--files 8] [--size-mib 64]
                          [--rounds 2] [--workers 1]

Python 3 standard library only; loopback only; the server is stopped by its PID.
"""

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

PORT = 9431


def drop_pages(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def warm(path):
    with open(path, "rb") as f:
        while f.read(1 << 20):
            pass


def resident_pages(path):
    """fincore's RES column in bytes, or None without fincore."""
    if not shutil.which("fincore"):
        return None
    out = subprocess.run(["fincore", "-b", "-n", "-o", "RES", path], capture_output=True,
                         text=True, check=False).stdout.split()
    return int(out[0]) if out and out[0].isdigit() else None


def request(sock, path):
    sock.sendall(("GET %s HTTP/1.1\r\nHost: x\r\n\r\n" % path).encode())


def read_response(sock, buf):
    """Reads one response with Content-Length; returns (body length, leftover bytes)."""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the head")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if not head.startswith(b"HTTP/1.1 200"):
        raise ConnectionError("unexpected response: %r" % head[:60])
    got = len(rest)
    while got < length:
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("closed in the body")
        got += len(chunk)
    return length, b""


HOT = r"""
import socket, sys, time
port, out, stop = int(sys.argv[1]), sys.argv[2], sys.argv[3]
import os
s = socket.create_connection(("127.0.0.1", port))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
req = b"GET /hot.html HTTP/1.1\r\nHost: x\r\n\r\n"
lat = []
deadline = time.monotonic() + 600
while not os.path.exists(stop) and time.monotonic() < deadline:
    t = time.perf_counter()
    s.sendall(req)
    buf = b""
    while True:
        buf += s.recv(65536)
        head, sep, body = buf.partition(b"\r\n\r\n")
        if sep and len(body) >= 1024:
            break
    lat.append(time.perf_counter() - t)
    time.sleep(0.002)
with open(out, "w") as f:
    f.write("\n".join("%.6f" % x for x in lat))
"""


def hot_client(work, tag):
    """The hot client, a process of its own (no GIL shared with the downloader): its latencies
    land in a file when the stop file appears."""
    out = os.path.join(work, "hot-%s.txt" % tag)
    stop = os.path.join(work, "stop-%s" % tag)
    proc = subprocess.Popen([sys.executable, "-c", HOT, str(PORT), out, stop])
    return proc, out, stop


def cold_client(files, cold, stats):
    s = socket.create_connection(("127.0.0.1", PORT))
    for path, name in files:
        if cold:
            drop_pages(path)
            res = resident_pages(path)
            if res is not None:
                stats["resident_before"].append(res)
        t = time.perf_counter()
        request(s, "/" + name)
        n, _ = read_response(s, b"")
        dt = time.perf_counter() - t
        stats["mib_s"].append(n / dt / (1 << 20))
    s.close()


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


def phase(files, cold, work, tag):
    stats = {"mib_s": [], "resident_before": []}
    if not cold:
        for path, _ in files:
            warm(path)
    proc, out, stop = hot_client(work, tag)
    time.sleep(0.5)
    t = time.perf_counter()
    cold_client(files, cold, stats)
    wall = time.perf_counter() - t
    open(stop, "w").close()
    proc.wait(timeout=30)
    with open(out) as f:
        lat = [float(x) for x in f.read().split()]
    during = lat[len(lat) // 10:] if lat else [0.0]
    return {
        "phase": "cold" if cold else "warm",
        "hot_requests": len(during),
        "p50_ms": pct(during, 0.50) * 1e3,
        "p99_ms": pct(during, 0.99) * 1e3,
        "max_ms": max(during) * 1e3,
        "download_mib_s": sum(stats["mib_s"]) / len(stats["mib_s"]),
        "wall_s": wall,
        "resident_before_max": max(stats["resident_before"]) if stats["resident_before"] else None,
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quill-bin", required=True)
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--size-mib", type=int, default=64)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--dir", help="docroot on a real disk (default: a temp dir under /var/tmp)")
    a = p.parse_args()
    root = a.dir or tempfile.mkdtemp(prefix="quill-coldio-", dir="/var/tmp")
    files = []
    try:
        with open(os.path.join(root, "hot.html"), "wb") as f:
            f.write(b"h" * 1024)
        for i in range(a.files):
            name = "big%d.bin" % i
            path = os.path.join(root, name)
            if not os.path.exists(path) or os.path.getsize(path) != a.size_mib << 20:
                with open(path, "wb") as f:
                    for _ in range(a.size_mib):
                        f.write(os.urandom(1 << 20))
            files.append((path, name))
        server = subprocess.Popen([a.quill_bin, "serve", root, "--listen", "127.0.0.1:%d" % PORT,
                                   "--workers", str(a.workers)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.05)
            print("| round | phase | hot requests | p50 ms | p99 ms | max ms | download MiB/s | "
                  "resident before (max bytes) |")
            print("|---|---|---:|---:|---:|---:|---:|---:|")
            for rnd in range(a.rounds):
                for cold in (False, True):
                    r = phase(files, cold, root, "%d-%d" % (rnd, cold))
                    print("| %d | %s | %d | %.2f | %.2f | %.2f | %.0f | %s |" % (
                        rnd + 1, r["phase"], r["hot_requests"], r["p50_ms"], r["p99_ms"],
                        r["max_ms"], r["download_mib_s"], r["resident_before_max"]))
                    sys.stdout.flush()
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
    finally:
        if not a.dir:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
