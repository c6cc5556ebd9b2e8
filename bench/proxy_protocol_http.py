#!/usr/bin/env python3
"""PROXY protocol in HTTP mode and over TLS to servers (docs/design.md#proxy-protocol), one run.

A. Keep-alive clients through an HTTP listener with `proxy_protocol = "v1"` to nginx (1 worker,
   `listen ... proxy_protocol`): BASE_BIN (a build from before private server connections: a new
   server connection per request) against QUILL_BIN (the connection that carried a client's
   header serves that client's next requests). `wrk -t1 -c20` (kept alive). Per candidate and
   round: requests/s, Quill CPU per request (/proc/PID/stat, all threads), server connections
   accepted by nginx per request (stub_status `accepts`), then syscalls per request under
   `strace -f -c`.
B. New connections through a TCP listener with `server_tls` to nginx (`listen ... ssl`), without
   and with `proxy_protocol = "v2"` (`listen ... ssl proxy_protocol`), QUILL_BIN only:
   `wrk -t1 -c20 -H 'Connection: close'`: requests/s, CPU and syscalls per connection.
Rounds alternate the order. All traffic on 127.0.0.1; every process is stopped by PID.
Usage: python3 bench/proxy_protocol_http.py QUILL_BIN BASE_BIN WORKDIR [--rounds N] [--seconds S]
Prints a Markdown table and writes results/proxy_protocol_http.md beside this file.
"""

import argparse
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NG_PP, NG_TLS, NG_TLS_PP, NG_STATUS = 9081, 9082, 9083, 9084
Q_AFTER, Q_BASE, Q_TLS, Q_TLS_PP = 9281, 9282, 9283, 9284
CLK = os.sysconf("SC_CLK_TCK")

# The same helpers as the plain PROXY benchmark beside this one (this directory is on the path).
from proxy_protocol import cpu_ticks, strace_calls, wait_port, wrk  # noqa: E402


def accepts():
    """nginx's stub_status `accepts` (a raw GET: this directory's http.py shadows the stdlib's)."""
    with socket.create_connection(("127.0.0.1", NG_STATUS), timeout=5) as s:
        s.sendall(b"GET /status HTTP/1.0\r\nHost: x\r\n\r\n")
        data = b""
        while True:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    body = data.split(b"\r\n\r\n", 1)[1].decode()
    return int(body.split("\n")[2].split()[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("quill")
    ap.add_argument("base")
    ap.add_argument("work")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--seconds", type=int, default=5)
    a = ap.parse_args()
    w = os.path.abspath(a.work)
    os.makedirs(w, exist_ok=True)
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=backend",
                    "-keyout", os.path.join(w, "key.pem"), "-out", os.path.join(w, "cert.pem")],
                   check=True, capture_output=True)
    procs = []
    rows = {}
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
  keepalive_requests 1000000;
  ssl_certificate {w}/cert.pem;
  ssl_certificate_key {w}/key.pem;
  server {{
    listen 127.0.0.1:{pp} proxy_protocol;
    listen 127.0.0.1:{tls} ssl;
    listen 127.0.0.1:{tlspp} ssl proxy_protocol;
    location / {{ return 200 "0123456789abcdef\\n"; }}
  }}
  server {{
    listen 127.0.0.1:{st};
    location /status {{ stub_status; }}
  }}
}}
""".format(w=w, pp=NG_PP, tls=NG_TLS, tlspp=NG_TLS_PP, st=NG_STATUS))
        procs.append(subprocess.Popen(["nginx", "-p", w + "/", "-c", os.path.join(w, "nginx.conf")],
                                      stderr=open(os.path.join(w, "nginx.stderr"), "w")))
        http_cfg = """workers = 2
[[listener]]
name = "http"
listen = "127.0.0.1:{q}"
protocol = "http"
servers = ["127.0.0.1:{pp}"]
proxy_protocol = "v1"
"""
        for name, port in (("after", Q_AFTER), ("base", Q_BASE)):
            with open(os.path.join(w, "%s.toml" % name), "w") as f:
                f.write(http_cfg.format(q=port, pp=NG_PP))
        with open(os.path.join(w, "tls.toml"), "w") as f:
            f.write("""workers = 2
[[listener]]
name = "tls"
listen = "127.0.0.1:{q1}"
servers = ["127.0.0.1:{tls}"]
server_tls = {{ verify = false }}
[[listener]]
name = "tls-v2"
listen = "127.0.0.1:{q2}"
servers = ["127.0.0.1:{tlspp}"]
server_tls = {{ verify = false }}
proxy_protocol = "v2"
""".format(q1=Q_TLS, q2=Q_TLS_PP, tls=NG_TLS, tlspp=NG_TLS_PP))
        quills = {}
        for name, binary, cfg in (("after", a.quill, "after.toml"), ("base", a.base, "base.toml"),
                                  ("tls", a.quill, "tls.toml")):
            p = subprocess.Popen([binary, "--config", os.path.join(w, cfg)],
                                 stderr=open(os.path.join(w, "quill-%s.stderr" % name), "w"))
            procs.append(p)
            quills[name] = p
        for port in (NG_PP, NG_TLS, NG_TLS_PP, NG_STATUS, Q_AFTER, Q_BASE, Q_TLS, Q_TLS_PP):
            wait_port(port)
        quills["tls-v2"] = quills["tls"]
        # Headers really go: nginx answers 400 to a connection without one.
        for port, close in ((Q_AFTER, False), (Q_BASE, False), (Q_TLS_PP, True)):
            _, _, bad, _ = wrk(port, 1, close)
            if bad:
                raise RuntimeError("nginx refused %d requests through port %d" % (bad, port))
        cases = [("A", [("base", Q_BASE), ("after", Q_AFTER)], False),
                 ("B", [("tls", Q_TLS), ("tls-v2", Q_TLS_PP)], True)]
        for r in range(a.rounds):
            for _, cands, close in cases:
                order = cands if r % 2 == 0 else list(reversed(cands))
                for name, port in order:
                    pid = quills[name].pid
                    t0, acc0 = cpu_ticks(pid), accepts()
                    reqs, errors, bad, _ = wrk(port, a.seconds, close)
                    ticks, acc = cpu_ticks(pid) - t0, accepts() - acc0
                    sreqs, calls = strace_calls(pid, port, a.seconds, w, close)
                    rows.setdefault(name, []).append({
                        "rps": reqs / a.seconds,
                        "cpu_us": ticks / CLK * 1e6 / max(reqs, 1),
                        "conns": acc / max(reqs, 1),
                        "syscalls": sum(calls.values()) / max(sreqs, 1),
                        "connect": calls.get("connect", 0) / max(sreqs, 1),
                        "bad": bad, "errors": errors,
                        "calls": {k: v / max(sreqs, 1) for k, v in calls.items()},
                    })
                    x = rows[name][-1]
                    print("round %d %s: %.0f req/s, %.1f us CPU/req, %.3f server conns/req, "
                          "%.2f syscalls/req%s" % (r + 1, name, x["rps"], x["cpu_us"], x["conns"],
                                                   x["syscalls"],
                                                   (" errors " + errors) if errors else ""),
                          file=sys.stderr, flush=True)
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
        return v[(len(v) - 1) // 2]

    lines = ["# PROXY protocol: HTTP mode and TLS to servers (bench/proxy_protocol_http.py)", "",
             "Run %s UTC, %d rounds of %d s per candidate, order alternating; Quill 2 workers, nginx "
             "1 worker; lower medians." % (time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
                                           a.rounds, a.seconds), "",
             "A. HTTP mode, `proxy_protocol = \"v1\"`, `wrk -t1 -c20` kept alive:", "",
             "| Quill | requests/s | CPU µs per request | server connections per request (nginx accepts) "
             "| syscalls per request (strace -f -c) | connect per request |",
             "|---|---|---|---|---|---|"]
    for name, label in (("base", "before (a connection per request)"),
                        ("after", "after (private connection kept)")):
        lines.append("| %s | %.0f | %.1f | %.4f | %.2f | %.4f |" % (
            label, med(name, "rps"), med(name, "cpu_us"), med(name, "conns"),
            med(name, "syscalls"), med(name, "connect")))
    lines += ["", "B. TCP mode, `server_tls`, `wrk -t1 -c20 -H 'Connection: close'` (a connection "
              "per request):", "",
              "| listener | requests/s | CPU µs per connection | syscalls per connection |",
              "|---|---|---|---|"]
    for name in ("tls", "tls-v2"):
        lines.append("| %s | %.0f | %.1f | %.2f |" % (
            "server_tls" if name == "tls" else "server_tls + proxy_protocol v2",
            med(name, "rps"), med(name, "cpu_us"), med(name, "syscalls")))
    last = {n: rows[n][-1]["calls"] for n in ("tls", "tls-v2")}
    lines += ["", "B by syscall, per connection (last round):", "",
              "| syscall | server_tls | + proxy_protocol v2 |", "|---|---|---|"]
    for k in sorted(set(last["tls"]) | set(last["tls-v2"]), key=lambda k: -last["tls-v2"].get(k, 0)):
        lines.append("| %s | %.2f | %.2f |" % (k, last["tls"].get(k, 0), last["tls-v2"].get(k, 0)))
    lines += ["", "Rounds: " + "; ".join(
        "%s %.0f req/s %.1f µs %.2f calls%s" % (n, x["rps"], x["cpu_us"], x["syscalls"],
                                               (" errors " + x["errors"]) if x["errors"] else "")
        for n in ("base", "after", "tls", "tls-v2") for x in rows[n])]
    text = "\n".join(lines) + "\n"
    print(text)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "proxy_protocol_http.md"), "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
