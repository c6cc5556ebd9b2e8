#!/usr/bin/env python3
"""Quill's own instructions per request, counted by callgrind: repeatable whatever else the
machine is doing (valgrind counts instructions, not seconds), so a change's cost can be read on a
busy machine where wall-clock benchmarks would be noise.

For each binary (the build under test and, optionally, the build before it) and each mode, Quill
runs under `valgrind --tool=callgrind` with one worker in front of a local backend; the client sends
N1 and then, in a second run, N2 requests; the cost per request is
(instructions(N2) - instructions(N1)) / (N2 - N1), so start-up and shut-down cancel out.

Modes:
  tcp        TCP mode, one connection per request (connect, 1 KiB echo, close)
  tcp-kept   TCP mode, one kept-alive client connection for every request (as the wall-clock
             benchmarks' TCP mode: the floor that HTTP keep-alive is compared with)
  http       HTTP mode, kept-alive client and server, 1 KiB responses
  http-close HTTP mode, a new client connection per request (the server connection kept)

  python3 bench/instructions.py --quill target/release/quill [--base /tmp/old/quill]
      [--modes tcp,tcp-kept,http,http-close] [--n1 300] [--n2 1300] [--port 9391] [--nginx-head]
      [--locks] [--lines]

The backend answers every request with a 1 KiB body under a one-field head (`Content-Length`),
or with `--nginx-head` under the eight-field head nginx sends with it (`Server`, `Date`,
`Content-Type`, `Content-Length`, `Last-Modified`, `Connection`, `ETag`, `Accept-Ranges`), as the
wall-clock benchmarks' nginx backends do: each field costs Quill a parse and a rewrite.

With `--locks`, a second table counts the locked instructions among them (an instruction with
the `lock` prefix, or an `xchg` with memory: atomic read-modify-writes, a reference count's
change, a mutex taken or let go) in Quill's own code, inlined std included: each costs tens of
cycles alone and more when the other worker wrote the same cache line last, which an
instruction count does not show. callgrind runs with `--dump-instr=yes` and the addresses are
read against `objdump -d` of the binary (binutils).

With `--lines`, another table counts the 64-byte lines of Quill's code (its binary's, not
libc's) that every request runs: what the instruction cache must hold for one request. The
kernel's code, run in the system calls between a request's steps, competes with it for the
32 KiB first-level cache, and a line evicted comes back from the second-level one: a cost an
instruction count does not show, larger when the same count is spread over more lines (code run
once a request, branches around blocks not taken).

Loopback only; every process it starts is stopped by its PID. Needs valgrind.
"""

import argparse
import collections
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BODY = b"x" * 1024
RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n" + BODY
# The head nginx 1.22 sends with the 1 KiB file, eight fields (what the wall-clock benchmarks'
# backends answer, and what Quill parses and rewrites there): `--nginx-head`.
NGINX_RESPONSE = (b"HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Sun, 06 Dec 2026 06:08:00 GMT\r\n"
                  b"Content-Type: application/octet-stream\r\nContent-Length: 1024\r\n"
                  b"Last-Modified: Sun, 06 Dec 2026 06:07:00 GMT\r\nConnection: keep-alive\r\n"
                  b"ETag: \"6752a1b0-400\"\r\nAccept-Ranges: bytes\r\n\r\n") + BODY


def http_backend(sock, stop, response=RESPONSE):
    """A kept-alive HTTP/1.1 server answering every request with `response` (one thread a
    conn)."""

    def serve(c):
        buf = b""
        c.settimeout(60)
        try:
            while not stop.is_set():
                while b"\r\n\r\n" not in buf:
                    d = c.recv(65536)
                    if not d:
                        return
                    buf += d
                _, buf = buf.split(b"\r\n\r\n", 1)
                c.sendall(response)
        except OSError:
            pass
        finally:
            c.close()

    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            c, _ = sock.accept()
        except socket.timeout:
            continue
        threading.Thread(target=serve, args=(c,), daemon=True).start()


def wait_port(port, within=60):
    end = time.time() + within
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"quill did not listen on {port} within {within}s")


def read_response(s):
    """Reads one response with a Content-Length body from a socket: (status, body length).
    RuntimeError when the peer closes first. (bench/floor.py uses it too.)"""
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(65536)
        if not d:
            raise RuntimeError("EOF before a response head")
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    n = 0
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == b"content-length":
            n = int(v)
    while len(rest) < n:
        d = s.recv(65536)
        if not d:
            raise RuntimeError("EOF in a response body")
        rest += d
    return int(head.split()[1]), len(rest)


def client(mode, port, n):
    req = b"GET / HTTP/1.1\r\nHost: bench\r\n\r\n"
    if mode in ("http", "tcp-kept"):
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        for _ in range(n):
            s.sendall(req)
            read_response(s)
        s.close()
        return
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.sendall(req)
        read_response(s)
        s.close()


def instructions(quill, mode, n, port, backend_port, work, by_address=False):
    """Quill's instructions over a run of `n` requests; with `by_address`, also how many times
    each instruction of the binary ran (a Counter by address, callgrind's `--dump-instr=yes`):
    (instructions, Counter or None)."""
    out = os.path.join(work, f"cg.{os.getpid()}.{mode}.{n}.{time.time_ns()}")
    args = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"]
    if by_address:
        args.append("--dump-instr=yes")
    args += [quill, "--workers", "1", "-r"]
    if mode not in ("tcp", "tcp-kept"):
        args.append("-H")
    args += [f"127.0.0.1:{port}", f"127.0.0.1:{backend_port}"]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port)
        time.sleep(0.5)
        client(mode, port, n)
        time.sleep(0.5)
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    total = 0
    costs = None
    # One file per thread may be written (callgrind's --separate-threads is off: one file).
    for name in os.listdir(work):
        if name.startswith(os.path.basename(out)):
            path = os.path.join(work, name)
            with open(path) as f:
                for line in f:
                    if line.startswith("summary:") or line.startswith("totals:"):
                        total = max(total, int(line.split()[1]))
            if by_address:
                costs = (costs or collections.Counter()) + address_costs(path, quill)
            os.remove(path)
    if by_address and not costs:
        raise RuntimeError(f"no instruction of {quill} in its callgrind profile ({mode} mode)")
    return total, costs


def address_costs(profile, binary):
    """How many times each instruction of `binary` ran in a callgrind profile taken with
    `--dump-instr=yes`: a Counter by address, as the object file has them (callgrind takes a
    position-independent binary's load offset off: objdump's addresses)."""
    name = os.path.basename(binary)
    objects = {}
    in_binary = False
    addr = line_no = 0
    after_call = False
    costs = collections.Counter()

    def position(token, last):
        if token == "*":
            return last
        sign = {"+": 1, "-": -1}.get(token[0])
        digits = token[1:] if sign else token
        value = int(digits, 16) if digits.startswith("0x") else int(digits)
        return last + sign * value if sign else value

    with open(profile) as f:
        for line in f:
            # `ob=(n) path` names an object the first time, `ob=(n)` after; `cob=` names a
            # callee's object, which may come first there.
            m = re.match(r"(c?ob)=\((\d+)\)(?: (.*))?", line)
            if m:
                kind, key, obj = m.groups()
                if obj:
                    objects[key] = obj.strip()
                if kind == "ob":
                    in_binary = os.path.basename(objects.get(key, "")) == name
                continue
            if line.startswith("calls="):
                after_call = True
                continue
            if not line[:1] or line[0] not in "0123456789+-*":
                continue
            parts = line.split()
            addr = position(parts[0], addr)
            if len(parts) >= 2:
                line_no = position(parts[1], line_no)
            if len(parts) < 3:
                continue
            if after_call:
                # The cost of a call, the callee's included: not this instruction's own.
                after_call = False
                continue
            if in_binary:
                costs[addr] += int(parts[2])
    return costs


def code_lines(c1, c2, n1, n2):
    """The 64-byte lines of code that every request of the run ran (an address that ran at
    least 0.9 times a request more in the longer run), and the addresses among them."""
    every = 0.9 * (n2 - n1)
    addrs = [a for a in c2 if c2[a] - c1.get(a, 0) >= every]
    return len({a >> 6 for a in addrs}), len(addrs)


class Locked:
    """The locked instructions of one binary (by `objdump -d`), and their executions in a
    callgrind profile of it taken with `--dump-instr=yes`."""

    def __init__(self, binary):
        self.binary = binary
        self.name = os.path.basename(binary)
        self.locked = set()
        text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", binary],
                              capture_output=True, text=True, check=True).stdout
        for line in text.splitlines():
            m = re.match(r"\s*([0-9a-f]+):\s+(\S+)\s*(.*)", line)
            if m and (m.group(2) == "lock" or (m.group(2).startswith("xchg") and "(" in m.group(3))):
                self.locked.add(int(m.group(1), 16))

    def count(self, costs):
        """How many times a run executed a locked instruction of the binary, from its
        `address_costs`."""
        return sum(c for a, c in costs.items() if a in self.locked)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quill", required=True)
    ap.add_argument("--base")
    ap.add_argument("--modes", default="tcp,http,http-close")
    ap.add_argument("--n1", type=int, default=300)
    ap.add_argument("--n2", type=int, default=1300)
    ap.add_argument("--port", type=int, default=9391)
    ap.add_argument("--nginx-head", action="store_true",
                    help="the backend answers with nginx's eight-field head, not a one-field one")
    ap.add_argument("--locks", action="store_true",
                    help="also count the locked instructions per request (needs objdump)")
    ap.add_argument("--lines", action="store_true",
                    help="also count the 64-byte lines of Quill's code every request runs")
    a = ap.parse_args()
    stop = threading.Event()
    bsock = socket.socket()
    bsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    bsock.bind(("127.0.0.1", a.port + 1))
    bsock.listen(1024)
    response = NGINX_RESPONSE if a.nginx_head else RESPONSE
    threading.Thread(target=http_backend, args=(bsock, stop, response), daemon=True).start()
    builds = [("quill", a.quill)] + ([("quill-base", a.base)] if a.base else [])
    locked = {name: Locked(binary) for name, binary in builds} if a.locks else {}
    rows, lock_rows, line_rows = [], [], []
    dump = a.locks or a.lines
    with tempfile.TemporaryDirectory(prefix="quill-cg.") as work:
        for mode in a.modes.split(","):
            per, locks, lines = {}, {}, {}
            for name, binary in builds:
                i1, c1 = instructions(binary, mode, a.n1, a.port, a.port + 1, work, dump)
                i2, c2 = instructions(binary, mode, a.n2, a.port, a.port + 1, work, dump)
                per[name] = (i2 - i1) / (a.n2 - a.n1)
                print(f"{mode:10} {name:10} {i1:>14,} Ir at {a.n1}, {i2:>14,} at {a.n2}: "
                      f"{per[name]:,.0f} instructions per request", file=sys.stderr)
                if a.locks:
                    l1, l2 = locked[name].count(c1), locked[name].count(c2)
                    locks[name] = (l2 - l1) / (a.n2 - a.n1)
                    print(f"{mode:10} {name:10} {l1:>14,} locked at {a.n1}, {l2:>14,} at {a.n2}: "
                          f"{locks[name]:,.2f} per request", file=sys.stderr)
                if a.lines:
                    lines[name], addrs = code_lines(c1, c2, a.n1, a.n2)
                    print(f"{mode:10} {name:10} {addrs:,} instructions in {lines[name]:,} lines "
                          f"of 64 bytes run every request", file=sys.stderr)
            rows.append((mode, per))
            lock_rows.append((mode, locks))
            line_rows.append((mode, lines))
    stop.set()
    head = "nginx's eight-field head" if a.nginx_head else "a one-field head"
    table(f"Instructions per request, responses with {head}:", builds, rows, "{:,.0f}", a.base)
    if a.locks:
        print()
        table("Locked instructions per request, among them:", builds, lock_rows, "{:,.2f}", a.base)
    if a.lines:
        print()
        table("Lines of code (64 bytes) every request runs, Quill's binary alone:", builds,
              line_rows, "{:,.0f}", a.base)


def table(title, builds, rows, fmt, base):
    print(title)
    print()
    print("| mode | " + " | ".join(n for n, _ in builds) + (" | quill / quill-base |" if base else ""))
    print("|---|" + "---|" * len(builds) + ("---|" if base else ""))
    for mode, per in rows:
        cells = " | ".join(fmt.format(per[n]) for n, _ in builds)
        ratio = ""
        if base:
            # A count of about nothing (TCP mode's locked instructions) gives no ratio.
            ratio = " | – |"
            if abs(per["quill-base"]) >= 0.5:
                ratio = f" | {per['quill'] / per['quill-base']:.3f} |"
        print(f"| {mode} | {cells}{ratio}")


if __name__ == "__main__":
    main()
