#!/usr/bin/env python3
"""PROXY protocol cost (docs/benchmarks.md#proxy-protocol): Quill's TCP mode, plain and with `proxy_protocol = "v2"`, in one
run, in front of one nginx (1 worker) serving a small response on two listeners of the same
server block: 127.0.0.1:9071 plain and 127.0.0.1:9072 with `proxy_protocol` (nginx strips and
checks the header). Quill (2 workers) listens on 9271 (to 9071) and 9272 (to 9072, v2 header).

Clients: `wrk -t1 -c20 -H 'Connection: close'` (a new connection per request, so every request
pays the header). Per candidate and round: requests/s and Quill's CPU per connection from
/proc/PID/stat (utime+stime, all threads) over a wrk run; then a second wrk run with
`strace -f -c` attached to Quill: syscalls per connection. Rounds alternate the order.
Usage: python3 bench/proxy_protocol.py QUILL_BIN WORKDIR [--rounds N] [--seconds S]
Prints a Markdown table and writes results/proxy_protocol.md beside this file.
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NGINX_PLAIN, NGINX_PP = 9071, 9072
QUILL_PLAIN, QUILL_PP = 9271, 9272
CLK = os.sysconf("SC_CLK_TCK")


def wait_port(port, within=10.0):
    end = time.time() + within
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("port %d not accepting" % port)


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def wrk(port, seconds, close=True):
    """`wrk -t1 -c20` for SECONDS, a new connection per request unless `close` is false:
    (requests, socket errors, non-2xx responses, wrk's output). Also bench/proxy_protocol_http.py's."""
    cmd = ["wrk", "-t1", "-c20", "-d%ds" % seconds]
    if close:
        cmd += ["-H", "Connection: close"]
    out = subprocess.run(cmd + ["http://127.0.0.1:%d/" % port], capture_output=True, text=True,
                         timeout=seconds + 30).stdout
    reqs = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Socket errors: (.*)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return reqs, (errors.group(1) if errors else ""), int(non2xx.group(1)) if non2xx else 0, out


def strace_calls(pid, port, seconds, work, close=True):
    """System calls of PID (and its threads) while `wrk` runs: (requests, {syscall: calls})."""
    out_file = os.path.join(work, "strace.out")
    st = subprocess.Popen(["strace", "-f", "-c", "-o", out_file, "-p", str(pid)],
                          stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        reqs, _, _, _ = wrk(port, seconds, close)
    finally:
        st.send_signal(signal.SIGINT)
        st.wait(timeout=30)
    calls = {}
    with open(out_file) as f:
        for line in f:
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
            if m and m.group(2) != "total":
                calls[m.group(2)] = int(m.group(1))
    return reqs, calls


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("quill")
    ap.add_argument("work")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=5)
    a = ap.parse_args()
    w = a.work
    os.makedirs(w, exist_ok=True)
    procs = []
    try:
        with open(os.path.join(w, "nginx.conf"), "w") as f:
            f.write("""
worker_processes 1;
daemon off;
pid {w}/nginx.pid;
error_log {w}/nginx.err warn;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  server {{
    listen 127.0.0.1:{p1};
    listen 127.0.0.1:{p2} proxy_protocol;
    location / {{ return 200 "0123456789abcdef\\n"; }}
  }}
}}
""".format(w=w, p1=NGINX_PLAIN, p2=NGINX_PP))
        procs.append(subprocess.Popen(["nginx", "-p", w + "/", "-c", os.path.join(w, "nginx.conf")],
                                      stderr=open(os.path.join(w, "nginx.stderr"), "w")))
        with open(os.path.join(w, "quill.toml"), "w") as f:
            f.write("""workers = 2
[[listener]]
name = "plain"
listen = "127.0.0.1:{q1}"
servers = ["127.0.0.1:{p1}"]
[[listener]]
name = "v2"
listen = "127.0.0.1:{q2}"
servers = ["127.0.0.1:{p2}"]
proxy_protocol = "v2"
""".format(q1=QUILL_PLAIN, q2=QUILL_PP, p1=NGINX_PLAIN, p2=NGINX_PP))
        q = subprocess.Popen([a.quill, "--config", os.path.join(w, "quill.toml")],
                             stderr=open(os.path.join(w, "quill.stderr"), "w"))
        procs.append(q)
        for p in (NGINX_PLAIN, NGINX_PP, QUILL_PLAIN, QUILL_PP):
            wait_port(p)
        # The PROXY listener really carries a header: nginx answers 400 without one.
        reqs, _, non2xx, _ = wrk(QUILL_PP, 1)
        if non2xx:
            raise RuntimeError("nginx refused %d requests through the v2 listener" % non2xx)
        rows = {"plain": [], "v2": []}
        for r in range(a.rounds):
            order = [("plain", QUILL_PLAIN), ("v2", QUILL_PP)]
            if r % 2:
                order.reverse()
            for name, port in order:
                t0 = cpu_ticks(q.pid)
                reqs, errors, non2xx, _ = wrk(port, a.seconds)
                ticks = cpu_ticks(q.pid) - t0
                sreqs, calls = strace_calls(q.pid, port, a.seconds, w)
                total = sum(calls.values())
                rows[name].append({
                    "rps": reqs / a.seconds, "cpu_us": ticks / CLK * 1e6 / max(reqs, 1),
                    "errors": errors, "non2xx": non2xx,
                    "syscalls": total / max(sreqs, 1),
                    "calls": {k: v / max(sreqs, 1) for k, v in calls.items()},
                })
                print("round %d %s: %.0f req/s, %.1f us CPU/conn, %.2f syscalls/conn" % (
                    r + 1, name, reqs / a.seconds, rows[name][-1]["cpu_us"],
                    rows[name][-1]["syscalls"]), file=sys.stderr)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()

    def med(name, key):
        v = sorted(x[key] for x in rows[name])
        return v[len(v) // 2]

    lines = ["# PROXY protocol cost (bench/proxy_protocol.py)", "",
             "Run %s UTC, %d rounds of `wrk -t1 -c20 -d%ds -H 'Connection: close'` per listener, "
             "order alternating; Quill 2 workers, TCP mode, nginx 1 worker (`listen ... proxy_protocol` "
             "on the v2 side). Medians." % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                                            a.rounds, a.seconds), "",
             "| listener | requests/s | Quill CPU µs per connection | syscalls per connection (strace -f -c) |",
             "|---|---|---|---|"]
    for name in ("plain", "v2"):
        lines.append("| %s | %.0f | %.1f | %.2f |" % (name, med(name, "rps"), med(name, "cpu_us"),
                                                      med(name, "syscalls")))
    d_sys = med("v2", "syscalls") - med("plain", "syscalls")
    d_cpu = med("v2", "cpu_us") / med("plain", "cpu_us") - 1
    lines += ["", "v2 minus plain: %+.2f syscalls per connection, %+.1f%% CPU per connection "
              "(target: at most +1 syscall and +3%%)." % (d_sys, d_cpu * 100), "",
              "Syscalls per connection by name (last round):", "",
              "| syscall | plain | v2 |", "|---|---|---|"]
    names = sorted(set(rows["plain"][-1]["calls"]) | set(rows["v2"][-1]["calls"]),
                   key=lambda k: -rows["v2"][-1]["calls"].get(k, 0))
    for k in names:
        lines.append("| %s | %.2f | %.2f |" % (k, rows["plain"][-1]["calls"].get(k, 0),
                                              rows["v2"][-1]["calls"].get(k, 0)))
    lines.append("")
    lines.append("Rounds: " + "; ".join(
        "%s %.0f req/s %.1f µs %.2f calls%s" % (n, x["rps"], x["cpu_us"], x["syscalls"],
                                               (" errors " + x["errors"]) if x["errors"] else "")
        for n in ("plain", "v2") for x in rows[n]))
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "proxy_protocol.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
