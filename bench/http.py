#!/usr/bin/env python3
"""The HTTP shoot-out (called by bench/http.sh): Quill's HTTP mode against HAProxy `mode http` and
nginx `http` proxying, with Quill's TCP mode and a direct connection for reference, all over the
same two nginx backends as bench/run.sh (127.0.0.1:9001 and :9002).

Workloads (docs/benchmarks.md#http-mode):
  1. load, in interleaved rounds (every candidate per round, order rotating): `wrk` keep-alive
     1 KiB and 200 KiB, `ab` without keep-alive 1 KiB; requests/s, p99, CPU µs per request of the
     proxy (utime+stime of its processes from /proc), ratios to the better of HAProxy and nginx;
  2. idle (every round): on a fresh candidate, `wrk` 1 KiB alone, then again while N idle
     keep-alive clients are held, each after one complete request (bench/idle_hold.py
     --request); the throughput ratio with/without and the user-space RSS per idle client;
  3. syscalls per kept-alive proxied request (once per candidate): `strace -c -f -p PID...`
     attached after a warm-up while `wrk -t1 -c50` runs for a fixed time, minus an equal window
     without load, divided by the requests wrk reports;
  4. server connections (once per candidate): the connections the backends accept (nginx
     `stub_status`) while a fresh candidate serves `ab -c 50` requests without keep-alive.

Python 3 standard library only; loopback only. Every process it starts is recorded in WORK/pids
(for http.sh's EXIT trap) and stopped by PID here.
"""

import argparse
import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402  (same directory: /proc helpers, Procs, client parsers, strace window)
from harness import fmt, log, median  # noqa: E402

PORTS = {"quill-http": 9251, "haproxy-http": 9252, "nginx-http": 9253, "quill-tcp": 9254,
         "quill-base-http": 9255, "quill-http-maglev": 9256, "quill-tcp-maglev": 9257, "direct": 9001}
ALL_CANDIDATES = ["quill-http", "quill-base-http", "haproxy-http", "nginx-http", "quill-tcp", "direct",
                  "quill-http-maglev", "quill-tcp-maglev"]
DEFAULT_CANDIDATES = ["quill-http", "haproxy-http", "nginx-http", "quill-tcp", "direct"]
ALIASES = {"quill": "quill-http", "haproxy": "haproxy-http", "nginx": "nginx-http",
           "quill-base": "quill-base-http"}
QUILL_BINS = {"quill-http": "quill_bin", "quill-tcp": "quill_bin", "quill-base-http": "quill_base_bin",
              "quill-http-maglev": "quill_bin", "quill-tcp-maglev": "quill_bin"}
PEERS = ("haproxy-http", "nginx-http")  # "the better of HAProxy and nginx"
CPU_REF = "haproxy-http"                # CPU per request is held to HAProxy's
WORKLOADS = ["wrk1k", "wrk200k", "ab1k"]
WORKLOAD_NAMES = {"wrk1k": "wrk 1 KiB keep-alive", "wrk200k": "wrk 200 KiB keep-alive",
                  "ab1k": "ab 1 KiB, no keep-alive"}
WORKERS = 2
CONCURRENCY = 50
STATUS_PATH = "/nginx_status"
UNUSED_PACKAGES = ("libnginx-mod-stream", "pen", "systemd")  # in harness.versions, not used here


# ---------------------------------------------------------------- configs

def write_configs(work, args):
    """The backends (harness.write_configs, plus a stub_status location for counting accepts),
    HAProxy mode http, nginx http, and (with --quill-toml) Quill's TOML."""
    harness.write_configs(work)
    for i in (1, 2):
        path = os.path.join(work, "backend%d.conf" % i)
        text = open(path).read()
        if "location / { }" not in text:
            raise RuntimeError("harness.write_configs changed: no 'location / { }' in %s" % path)
        text = text.replace("location / { }", "location / { }\n        location = %s { stub_status; }"
                            % STATUS_PATH)
        with open(path, "w") as f:
            f.write(text)
    # Quill -H adds X-Forwarded-For to every request; the peers are asked to do the same.
    with open(os.path.join(work, "haproxy-http.cfg"), "w") as f:
        f.write(harness.haproxy_http(WORKERS, harness.MAXCONN, PORTS["haproxy-http"],
                                     ["127.0.0.1:9001", "127.0.0.1:9002"]))
    with open(os.path.join(work, "nginx-http.conf"), "w") as f:
        f.write("""daemon off;
worker_processes {workers};
worker_rlimit_nofile 20000;
pid {w}/nginx-http.pid;
error_log {w}/nginx-http.err warn;
events {{ worker_connections 19900; }}
http {{
    access_log off;
    keepalive_timeout 600s;
    keepalive_requests 1000000;
    client_header_timeout 600s;
    upstream be {{ server 127.0.0.1:9001; server 127.0.0.1:9002; keepalive 256; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_read_timeout 600s;
        }}
    }}
}}
""".format(workers=WORKERS, w=work, port=PORTS["nginx-http"]))
    for name in ("quill-http", "quill-base-http"):
        with open(os.path.join(work, name + ".toml"), "w") as f:
            f.write("""# written by bench/http.py (--quill-toml)
workers = {workers}
max_connections = {mc}
[[listener]]
name = "http"
listen = "127.0.0.1:{port}"
protocol = "http"
mode = ["roundrobin"]
servers = ["127.0.0.1:9001", "127.0.0.1:9002"]
[listener.http]
keepalive_timeout = "600s"
""".format(workers=WORKERS, mc=harness.MAXCONN, port=PORTS[name]))


def candidate_cmd(name, work, quill_bin, use_toml):
    port = PORTS[name]
    listen = "127.0.0.1:%d" % port
    be = ["127.0.0.1:9001", "127.0.0.1:9002"]
    if name in ("quill-http", "quill-base-http"):
        if use_toml:
            return [quill_bin, "-f", "--config", os.path.join(work, name + ".toml")]
        return [quill_bin, "-r", "-x", str(harness.MAXCONN), "--workers", str(WORKERS), "-H", listen] + be
    if name == "quill-tcp":
        return [quill_bin, "-r", "-x", str(harness.MAXCONN), "--workers", str(WORKERS), listen] + be
    # Maglev keyed by address and port (-r): wrk's connections, all from 127.0.0.1, spread.
    if name == "quill-http-maglev":
        return [quill_bin, "-r", "--maglev", "-x", str(harness.MAXCONN), "--workers", str(WORKERS), "-H",
                listen] + be
    if name == "quill-tcp-maglev":
        return [quill_bin, "-r", "--maglev", "-x", str(harness.MAXCONN), "--workers", str(WORKERS),
                listen] + be
    if name == "haproxy-http":
        return ["haproxy", "-db", "-f", os.path.join(work, "haproxy-http.cfg")]
    if name == "nginx-http":
        return ["nginx", "-p", work + "/", "-c", os.path.join(work, "nginx-http.conf"),
                "-e", os.path.join(work, "nginx-http.err")]
    raise ValueError(name)


class Refused(Exception):
    """A candidate's binary exited at start (e.g. a Quill without HTTP mode refusing -H)."""


class Candidate:
    """A running candidate (`direct` is backend 1 itself)."""

    def __init__(self, name, bench):
        self.name, self.bench = name, bench
        self.port = PORTS[name]
        self.proc = None

    def start(self):
        """Start and check it answers GET /1k. False if it did not become ready; raises Refused
        if the process exited (the binary refused its arguments or config)."""
        if self.name == "direct":
            return True
        if harness.port_open(self.port):
            raise RuntimeError("port %d already in use before starting %s" % (self.port, self.name))
        quill_bin = getattr(self.bench.args, QUILL_BINS.get(self.name, "quill_bin"), None)
        cmd = candidate_cmd(self.name, self.bench.work, quill_bin, self.bench.args.quill_toml)
        self.proc = self.bench.procs.start(self.name, cmd)
        if not harness.wait_ready(self.port, self.proc):
            exited = self.proc.poll()
            tail = self.log_tail()
            self.stop()
            if exited is not None:
                lines = [l for l in tail.splitlines() if l.strip() and not l.startswith("=== ")]
                raise Refused("%s exited at start with status %s: %s  (command: %s)" % (
                    self.name, exited, lines[-1] if lines else "(no output)", " ".join(cmd)))
            log("%s did not become ready (see %s/%s.log)" % (self.name, self.bench.work, self.name))
            return False
        status, size = harness.http_get(self.port, "/1k")
        if status != 200 or size != 1024:
            log("%s: GET /1k through it gave %s %s" % (self.name, status, size))
            self.stop()
            return False
        time.sleep(0.2)
        return True

    def log_tail(self):
        try:
            with open(os.path.join(self.bench.work, self.name + ".log"), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 1500))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def alive(self):
        return self.name == "direct" or (self.proc is not None and self.proc.poll() is None)

    def pids(self):
        if self.name == "direct":
            return self.bench.backend_pids[0]
        return harness.descendants(self.proc.pid) if self.proc else []

    def stop(self):
        if self.proc is not None:
            # Quill drains on the first SIGTERM and exits at once on the second.
            self.bench.procs.stop(self.proc, (signal.SIGTERM, signal.SIGTERM), wait=6)
            self.proc = None


def backend_status(port):
    """nginx stub_status of a backend: {"active", "accepts", "handled", "requests"}. The request
    that reads it is itself one accepted connection and one request, counted in the figures."""
    import socket
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(("GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" % STATUS_PATH).encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    text = data.decode(errors="replace")
    m = re.search(r"Active connections:\s*(\d+).*?\n\s*(\d+)\s+(\d+)\s+(\d+)", text, re.S)
    if not m:
        raise RuntimeError("backend %d: no stub_status in %r" % (port, text[-200:]))
    return dict(zip(("active", "accepts", "handled", "requests"), map(int, m.groups())))


# ---------------------------------------------------------------- the benchmark

class Bench:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.procs = harness.Procs(self.work)
        self.candidates = list(args.only)
        self.refused = {}  # name -> the message, once its binary refused to start
        self.backend_pids = []
        self.results = {"runs": [], "idle": [], "syscalls": [], "connections": [], "failures": []}

    def start_backends(self):
        write_configs(self.work, self.args)
        procs = []
        for i, port in enumerate(harness.BACKENDS, 1):
            if harness.port_open(port):
                raise RuntimeError("port %d already in use" % port)
            p = self.procs.start("backend%d" % i, [
                "nginx", "-p", self.work + "/", "-c", os.path.join(self.work, "backend%d.conf" % i),
                "-e", os.path.join(self.work, "backend%d.err" % i)])
            if not harness.wait_ready(port, p):
                raise RuntimeError("backend on %d did not start (see %s/backend%d.log)" % (port, self.work, i))
            procs.append(p)
        time.sleep(0.3)
        self.backend_pids = [harness.descendants(p.pid) for p in procs]
        for port in harness.BACKENDS:
            for path, size in (("/1k", 1024), ("/200k", 204800)):
                got = harness.http_get(port, path)
                if got != (200, size):
                    raise RuntimeError("backend %d %s returned %s" % (port, path, got))
            backend_status(port)
        log("backends up: %s" % self.backend_pids)

    def all_backend_pids(self):
        return [p for ps in self.backend_pids for p in ps]

    def fresh(self, name, phase, rnd=None):
        """A freshly started candidate, or None (failure recorded; a refusing binary is recorded
        once, loudly, and not tried again)."""
        if name in self.refused:
            return None
        c = Candidate(name, self)
        try:
            if c.start():
                return c
            self.results["failures"].append({"round": rnd, "candidate": name, "phase": phase,
                                             "error": "did not become ready", "log_tail": c.log_tail()})
        except Refused as e:
            self.refused[name] = str(e)
            log("ERROR: %s is not measured: %s" % (name, e))
            self.results["failures"].append({"round": rnd, "candidate": name, "phase": phase,
                                             "error": str(e)})
        return None

    # -- 1. load
    def measure(self, cand, workload, rnd):
        url = "http://127.0.0.1:%d/%s" % (cand.port, "200k" if workload == "wrk200k" else "1k")
        if workload.startswith("wrk"):
            harness.run_client(["wrk", "-t1", "-c%d" % CONCURRENCY, "-d1s", url], 30)  # warm-up
            cmd = ["wrk", "-t1", "-c%d" % CONCURRENCY, "-d%ds" % self.args.duration, "--latency", url]
            timeout, parse = self.args.duration + 30, harness.parse_wrk
        else:
            cmd = ["ab", "-r", "-s", "10", "-n", str(self.args.ab_requests), "-c", str(CONCURRENCY), url]
            timeout, parse = 300, harness.parse_ab
        pids = cand.pids()
        bpids = self.all_backend_pids()
        c0, b0, t0 = harness.cpu_ticks(pids), harness.cpu_ticks(bpids), time.monotonic()
        with harness.RssSampler(pids) as rs:
            rc, out = harness.run_client(cmd, timeout)
        c1, b1, t1 = harness.cpu_ticks(pids), harness.cpu_ticks(bpids), time.monotonic()
        r = parse(out)
        req = r["requests"] or 0
        alive = cand.alive()
        row = {"round": rnd, "workload": workload, "candidate": cand.name, "cmd": " ".join(cmd),
               "exit": rc, "wall_s": round(t1 - t0, 3),
               "cpu_s": (c1 - c0) / harness.CLK_TCK, "backend_cpu_s": (b1 - b0) / harness.CLK_TCK,
               "cpu_us_per_req": (c1 - c0) / harness.CLK_TCK * 1e6 / req if req else None,
               "backend_cpu_us_per_req": (b1 - b0) / harness.CLK_TCK * 1e6 / req if req else None,
               "peak_rss_kib": rs.peak, "pids": pids, **r}
        row["valid"] = bool(r["rps"] and alive and r["errors"] <= 0.01 * req)
        if not alive:
            self.results["failures"].append({"round": rnd, "candidate": cand.name, "phase": workload,
                                             "error": "candidate exited during the run",
                                             "log_tail": cand.log_tail()})
            log("  %s exited during %s" % (cand.name, workload))
        if r["rps"] is None:
            row["output_tail"] = out[-2000:]
            log("  %s %s: no result (exit %s): %s" % (cand.name, workload, rc, out[-300:].strip()))
        else:
            log("  %-15s %-7s %10.0f req/s  p99 %s ms  cpu %s us/req  errors %d" % (
                cand.name, workload, r["rps"], r["p99_ms"],
                None if row["cpu_us_per_req"] is None else round(row["cpu_us_per_req"], 1), r["errors"]))
        self.results["runs"].append(row)

    def load_round(self, rnd, order):
        cands = {}
        try:
            for name in order:
                c = self.fresh(name, "load start", rnd)
                if c:
                    cands[name] = c
            for wl in WORKLOADS:
                for name in order:
                    if name not in cands:
                        continue
                    c = cands[name]
                    if not c.alive():
                        log("  %s is not running before %s: restarting it" % (name, wl))
                        self.results["failures"].append({"round": rnd, "candidate": name,
                                                         "phase": "before " + wl,
                                                         "error": "candidate had exited",
                                                         "log_tail": c.log_tail()})
                        c.stop()
                        c = self.fresh(name, "restart", rnd)
                        if not c:
                            del cands[name]
                            continue
                        cands[name] = c
                    self.measure(c, wl, rnd)
        finally:
            for c in cands.values():
                c.stop()

    # -- 2. idle keep-alive clients
    def idle_one(self, name, rnd):
        c = self.fresh(name, "idle start", rnd)
        if not c:
            return
        n = self.args.idle
        hold = None
        ready = os.path.join(self.work, "idle.ready")
        stop = os.path.join(self.work, "idle.stop")
        for f in (ready, stop):
            if os.path.exists(f):
                os.unlink(f)
        url = "http://127.0.0.1:%d/1k" % c.port
        cmd = ["wrk", "-t1", "-c%d" % CONCURRENCY, "-d%ds" % self.args.idle_duration, "--latency", url]
        try:
            pids = c.pids()
            harness.run_client(["wrk", "-t1", "-c%d" % CONCURRENCY, "-d1s", url], 30)  # warm-up
            c0 = harness.cpu_ticks(pids)
            _, out0 = harness.run_client(cmd, self.args.idle_duration + 30)
            c1 = harness.cpu_ticks(pids)
            w0 = harness.parse_wrk(out0)
            time.sleep(0.5)
            samples = []
            for _ in range(3):
                samples.append(harness.rss_kib(pids))
                time.sleep(0.1)
            rss_before = median(samples)
            hold = self.procs.start("idle_hold", [
                sys.executable, os.path.join(HERE, "idle_hold.py"), "127.0.0.1", str(c.port),
                "-n", str(n), "--request", "/1k", "--per-process", "3000",
                "--hold", "150", "--open-timeout", "90",
                "--ready-file", ready, "--stop-file", stop], stdout=subprocess.PIPE)
            deadline = time.monotonic() + 105
            while not os.path.exists(ready) and hold.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            opened = json.load(open(ready)) if os.path.exists(ready) else {"opened": 0, "errors": {"no ready file": 1}}
            time.sleep(1.0)
            prev, rss_idle = -1, harness.rss_kib(pids)
            settle = time.monotonic() + 5
            while rss_idle != prev and time.monotonic() < settle:
                time.sleep(0.3)
                prev, rss_idle = rss_idle, harness.rss_kib(pids)
            be_idle = harness.established_to(harness.BACKENDS)
            c2 = harness.cpu_ticks(pids)
            _, out1 = harness.run_client(cmd, self.args.idle_duration + 30)
            c3 = harness.cpu_ticks(pids)
            w1 = harness.parse_wrk(out1)
            open(stop, "w").close()
            try:
                hold_out, _ = hold.communicate(timeout=60)
                final = json.loads(hold_out.strip().splitlines()[-1])
            except (subprocess.TimeoutExpired, ValueError, IndexError):
                final = {"still_open": None}
            still = final.get("still_open")

            def per_req(a, b, w):
                return (b - a) / harness.CLK_TCK * 1e6 / w["requests"] if w["requests"] else None
            row = {"round": rnd, "candidate": name, "requested": n,
                   "opened": opened.get("opened"), "open_errors": opened.get("errors"),
                   "open_seconds": opened.get("open_seconds"),
                   "still_open": still, "closed": final.get("closed"),
                   "rss_before_kib": rss_before, "rss_idle_kib": rss_idle,
                   "kib_per_client": (rss_idle - rss_before) / still if still else None,
                   "backend_conns_idle": be_idle, "wrk_cmd": " ".join(cmd),
                   "rps_without": w0["rps"], "rps_with": w1["rps"],
                   "ratio": w1["rps"] / w0["rps"] if w0["rps"] and w1["rps"] else None,
                   "p99_without_ms": w0["p99_ms"], "p99_with_ms": w1["p99_ms"],
                   "cpu_us_per_req_without": per_req(c0, c1, w0), "cpu_us_per_req_with": per_req(c2, c3, w1),
                   "wrk_errors": w0["errors"] + w1["errors"],
                   "errors": (n - (opened.get("opened") or 0)) + (n - (still or 0)) + w0["errors"] + w1["errors"]}
            for key, w, out in (("without", w0, out0), ("with", w1, out1)):
                if w["rps"] is None:
                    row["wrk_output_tail_" + key] = out[-1500:]
            self.results["idle"].append(row)
            log("  %-15s idle: opened %s still %s  rss %.1f -> %.1f MiB (%s KiB/client)  be %d  "
                "wrk %s -> %s req/s (x%s)  errors %d" % (
                    name, row["opened"], still, rss_before / 1024, rss_idle / 1024,
                    fmt(row["kib_per_client"], 2), be_idle, fmt(w0["rps"]), fmt(w1["rps"]),
                    fmt(row["ratio"], 2), row["errors"]))
        finally:
            if hold is not None and hold.poll() is None:
                open(stop, "w").close()
                self.procs.stop(hold, (signal.SIGTERM,), wait=20)
            elif hold is not None:
                self.procs.live.pop(hold.pid, None)
            c.stop()
        time.sleep(1.0)

    # -- 3. syscalls per kept-alive request
    def syscalls_one(self, name):
        c = self.fresh(name, "syscalls start")
        if not c:
            return
        try:
            url = "http://127.0.0.1:%d/1k" % c.port
            harness.run_client(["wrk", "-t1", "-c%d" % CONCURRENCY, "-d2s", url], 30)  # warm-up
            time.sleep(0.3)
            pids = c.pids()
            load_cmd = ["wrk", "-t1", "-c%d" % CONCURRENCY, "-d%ds" % self.args.strace_duration, url]
            # harness.Bench.strace_window needs only .work and .procs.pidfile of its self.
            lc, lt, window, out = harness.Bench.strace_window(self, pids, load_cmd=load_cmd)
            w = harness.parse_wrk(out)
            ic, it, iwindow, _ = harness.Bench.strace_window(self, pids, seconds=window)
            n = w["requests"]
            if not n:
                raise RuntimeError("wrk under strace gave no request count: %s" % out[-300:])
            per = {k: (lc.get(k, 0) - ic.get(k, 0)) / n for k in set(lc) | set(ic)}
            top = sorted(per.items(), key=lambda kv: -kv[1])[:8]
            row = {"candidate": name, "requests": n, "wrk_cmd": " ".join(load_cmd),
                   "wrk_errors": w["errors"], "rps_traced": w["rps"],
                   "load_window_s": round(window, 3), "idle_window_s": round(iwindow, 3),
                   "load_calls": lt, "idle_calls": it, "per_request": (lt - it) / n,
                   "top": [[k, round(v, 3)] for k, v in top if v > 0.0005],
                   "load_by_syscall": lc, "idle_by_syscall": ic, "pids": pids}
            self.results["syscalls"].append(row)
            log("  %-15s syscalls/req %.2f  (%d requests, load %d, idle %d calls, %.1fs)  top %s" % (
                name, row["per_request"], n, lt, it, window, row["top"][:5]))
        except RuntimeError as e:
            log("  %s syscalls: %s" % (name, e))
            self.results["failures"].append({"candidate": name, "phase": "syscalls", "error": str(e)})
        finally:
            c.stop()
            time.sleep(0.5)

    # -- 4. server connections opened without client keep-alive
    def connections_one(self, name):
        c = self.fresh(name, "connections start")
        if not c:
            return
        try:
            url = "http://127.0.0.1:%d/1k" % c.port
            before = [backend_status(p) for p in harness.BACKENDS]
            cmd = ["ab", "-r", "-s", "10", "-n", str(self.args.conn_requests), "-c", str(CONCURRENCY), url]
            pids = c.pids()
            c0 = harness.cpu_ticks(pids)
            rc, out = harness.run_client(cmd, 600)
            c1 = harness.cpu_ticks(pids)
            after = [backend_status(p) for p in harness.BACKENDS]
            ab = harness.parse_ab(out)
            # Each status read is one accept and one request of its own: the second read's is
            # inside the difference.
            accepts = [a["accepts"] - b["accepts"] - 1 for a, b in zip(after, before)]
            requests = [a["requests"] - b["requests"] - 1 for a, b in zip(after, before)]
            row = {"candidate": name, "ab_cmd": " ".join(cmd), "ab_complete": ab["requests"],
                   "ab_errors": ab["errors"], "rps": ab["rps"],
                   "cpu_us_per_req": (c1 - c0) / harness.CLK_TCK * 1e6 / ab["requests"] if ab["requests"] else None,
                   "backend_accepts": accepts, "backend_requests": requests,
                   "server_connections": sum(accepts), "limit": CONCURRENCY + 2 * WORKERS}
            if ab["rps"] is None:
                row["output_tail"] = out[-1500:]
            self.results["connections"].append(row)
            log("  %-15s %s requests: %d server connections opened (%s), backend requests %s, ab errors %d" % (
                name, fmt(ab["requests"]), row["server_connections"], accepts, requests, ab["errors"]))
        except RuntimeError as e:
            log("  %s connections: %s" % (name, e))
            self.results["failures"].append({"candidate": name, "phase": "connections", "error": str(e)})
        finally:
            c.stop()
            time.sleep(0.5)

    def run(self):
        t_start = time.monotonic()
        self.start_backends()
        base = list(self.candidates)
        for rnd in range(self.args.rounds):
            k = rnd % len(base)
            order = base[k:] + base[:k]
            log("round %d/%d, order: %s" % (rnd + 1, self.args.rounds, " ".join(order)))
            self.load_round(rnd, order)
            if self.args.idle:
                log("round %d: %d idle keep-alive clients" % (rnd + 1, self.args.idle))
                for name in order:
                    self.idle_one(name, rnd)
        log("syscalls per kept-alive request (strace -f -c, wrk -t1 -c%d -d%ds)" % (
            CONCURRENCY, self.args.strace_duration))
        for name in base:
            self.syscalls_one(name)
        log("server connections opened during ab -n %d -c %d (no keep-alive)" % (
            self.args.conn_requests, CONCURRENCY))
        for name in base:
            self.connections_one(name)
        self.results["elapsed_s"] = round(time.monotonic() - t_start, 1)


# ---------------------------------------------------------------- report

def summarize(results, cands):
    runs = results["runs"]
    rounds = sorted({r["round"] for r in runs} | {r["round"] for r in results["idle"]})

    def get(cand, wl, key, rnd=None):
        return [r[key] for r in runs if r["candidate"] == cand and r["workload"] == wl
                and (rnd is None or r["round"] == rnd) and r.get("valid") and r.get(key) is not None]

    def x_best(cand, wl):
        """Median over rounds of rps / the better of the peers' rps in the same round."""
        out = []
        for rnd in rounds:
            a = get(cand, wl, "rps", rnd)
            best = max([v for p in PEERS for v in get(p, wl, "rps", rnd)], default=None)
            if a and best:
                out.append(a[0] / best)
        return median(out)

    def cpu_x(cand, wl):
        out = []
        for rnd in rounds:
            a, b = get(cand, wl, "cpu_us_per_req", rnd), get(CPU_REF, wl, "cpu_us_per_req", rnd)
            if a and b and b[0]:
                out.append(a[0] / b[0])
        return median(out)

    load = {}
    for c in cands:
        load[c] = {wl: {"rps": median(get(c, wl, "rps")), "p99_ms": median(get(c, wl, "p99_ms")),
                        "cpu_us_per_req": median(get(c, wl, "cpu_us_per_req")),
                        "backend_cpu_us_per_req": median(get(c, wl, "backend_cpu_us_per_req")),
                        "x_best": x_best(c, wl), "cpu_x_haproxy": cpu_x(c, wl),
                        "errors": sum(r["errors"] for r in runs if r["candidate"] == c and r["workload"] == wl),
                        "runs": len(get(c, wl, "rps"))}
                   for wl in WORKLOADS}
    idle = {}
    for c in cands:
        rows = [r for r in results["idle"] if r["candidate"] == c]
        if rows:
            m = lambda k: median([r[k] for r in rows])
            idle[c] = {"rps_without": m("rps_without"), "rps_with": m("rps_with"), "ratio": m("ratio"),
                       "rss_before_mib": m("rss_before_kib") / 1024 if m("rss_before_kib") is not None else None,
                       "rss_idle_mib": m("rss_idle_kib") / 1024 if m("rss_idle_kib") is not None else None,
                       "kib_per_client": m("kib_per_client"), "backend_conns": m("backend_conns_idle"),
                       "p99_with_ms": m("p99_with_ms"),
                       "opened": min(r["opened"] or 0 for r in rows),
                       "still_open": min(r["still_open"] or 0 for r in rows),
                       "errors": sum(r["errors"] for r in rows), "runs": len(rows)}
    syscalls = {r["candidate"]: r for r in results["syscalls"]}
    conns = {r["candidate"]: r for r in results["connections"]}
    return {"load": load, "idle": idle, "syscalls": syscalls, "connections": conns}


def targets(summ, name, n_idle):
    """The issue's targets for one candidate: list of (target, measured, PASS/FAIL/n/a)."""
    L, I, S, C = summ["load"], summ["idle"], summ["syscalls"], summ["connections"]
    out = []

    def check(desc, ok, shown):
        out.append((desc, shown, "n/a" if ok is None else ("PASS" if ok else "FAIL")))

    for wl in WORKLOADS:
        d = L.get(name, {}).get(wl, {})
        x = d.get("x_best")
        check("%s: req/s ≥ 1.2× the better of HAProxy and nginx" % WORKLOAD_NAMES[wl],
              None if x is None else x >= 1.2, "×%s" % fmt(x, 2))
        x = d.get("cpu_x_haproxy")
        check("%s: CPU µs/req ≤ 0.75× HAProxy's" % WORKLOAD_NAMES[wl], None if x is None else x <= 0.75,
              "%s µs vs %s µs (×%s)" % (fmt(d.get("cpu_us_per_req"), 1),
                                        fmt(L.get(CPU_REF, {}).get(wl, {}).get("cpu_us_per_req"), 1),
                                        fmt(x, 2)))
    i = I.get(name, {})
    k = i.get("kib_per_client")
    check("≤ 1 KiB user-space memory per idle keep-alive client (%s held)" % fmt(n_idle),
          None if k is None else k <= 1.0, "%s KiB" % fmt(k, 2))
    r = i.get("ratio")
    check("wrk 1 KiB with the idle clients ≥ 0.9× without", None if r is None else r >= 0.9,
          "×%s (%s vs %s req/s)" % (fmt(r, 2), fmt(i.get("rps_with")), fmt(i.get("rps_without"))))
    if i:
        ok = i["opened"] == n_idle and i["still_open"] == n_idle
        check("%s idle clients opened and still open" % fmt(n_idle), ok,
              "opened %s, still open %s" % (i["opened"], i["still_open"]))
    s = S.get(name, {}).get("per_request")
    check("≤ 4.2 syscalls per kept-alive proxied request", None if s is None else s <= 4.2, fmt(s, 2))
    c = C.get(name)
    if c and c.get("ab_complete"):
        check("server connections during %s ab -c %d requests ≤ %d (concurrency + 2 per worker)" % (
            fmt(c["ab_complete"]), CONCURRENCY, c["limit"]), c["server_connections"] <= c["limit"],
            fmt(c["server_connections"]))
    else:
        check("server connections during ab -c %d without keep-alive ≤ %d" % (
            CONCURRENCY, CONCURRENCY + 2 * WORKERS), None, "not measured")
    return out


def render(results, cands, meta, refused):
    summ = summarize(results, cands)
    L, I, S, C = summ["load"], summ["idle"], summ["syscalls"], summ["connections"]
    lines = []
    w = lines.append
    w("# HTTP shoot-out — %s" % meta["date"])
    w("")
    for name, msg in refused.items():
        w("**%s was NOT measured: %s**" % (name, msg))
        w("")
    if meta.get("interrupted"):
        w("**Interrupted or failed: partial results.**")
        w("")
    w("Command: `%s`  " % meta["command"])
    w("Rounds: %d; machine: %s, %d CPUs; load average before %s; elapsed %s s.  " % (
        meta["rounds"], meta["kernel"], meta["cpus"], meta["load_before"], results.get("elapsed_s", "–")))
    w("Versions: %s." % "; ".join(v if v.startswith(k + " ") else "%s %s" % (k, v)
                                  for k, v in meta["versions"].items() if k not in UNUSED_PACKAGES))
    w("")
    w("Candidates over the same two nginx backends (127.0.0.1:9001, :9002; 1 worker each): "
      "`haproxy-http` (`mode http`, `nbthread 2`, `http-reuse always`, `option forwardfor`), "
      "`nginx-http` (2 workers, upstream `keepalive 256`, `proxy_http_version 1.1`, "
      "`Connection \"\"`, X-Forwarded-For), `quill-http` (`%s`), `quill-tcp` (Quill's TCP mode, "
      "for reference), `direct` (backend 9001 itself; its CPU is the backend's)." % meta["quill_http_cmd"])
    w("")
    w("## Load (medians over rounds)")
    w("")
    w("×best = median over rounds of req/s / the better of haproxy-http and nginx-http in the same "
      "round; CPU ×HA = median over rounds of CPU µs/req / haproxy-http's.")
    w("")
    head = "| candidate |"
    for wl in WORKLOADS:
        head += " %s req/s | ×best | µs/req | CPU ×HA |" % {"wrk1k": "wrk 1 KiB ka", "wrk200k": "wrk 200 KiB ka",
                                                            "ab1k": "ab 1 KiB no ka"}[wl]
    w(head + " errors |")
    w("|---|" + "---:|" * (4 * len(WORKLOADS) + 1))
    for c in cands:
        cells = [c]
        for wl in WORKLOADS:
            d = L[c][wl]
            cells += [fmt(d["rps"]), fmt(d["x_best"], 2),
                      "–" if c == "direct" else fmt(d["cpu_us_per_req"], 1),
                      "–" if c == "direct" else fmt(d["cpu_x_haproxy"], 2)]
        cells.append(str(sum(L[c][wl]["errors"] for wl in WORKLOADS)))
        w("| " + " | ".join(cells) + " |")
    w("")
    w("wrk: `wrk -t1 -c%d -d%ss --latency URL` after `wrk -t1 -c%d -d1s` (warm-up); ab: `ab -r -s 10 -n %d "
      "-c %d URL` (HTTP/1.0, a new connection per request). CPU µs/req = utime+stime of the candidate's "
      "processes (all threads, /proc/PID/stat) during the client run / requests. p99 and the backends' "
      "CPU are in the JSON. A run with more than 1%% failed requests, or where the candidate exited, is "
      "left out of the medians (see Failures)." % (
          CONCURRENCY, meta["duration"], CONCURRENCY, meta["ab_requests"], CONCURRENCY))
    w("")
    if I:
        w("## %s idle keep-alive clients (each after one complete request)" % fmt(meta["idle"]))
        w("")
        w("| candidate | wrk req/s without | with idle | with / without | RSS before MiB | RSS with idle MiB "
          "| KiB per idle client | opened | still open | backend conns | p99 ms with | errors |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in cands:
            if c in I:
                r = I[c]
                w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    c, fmt(r["rps_without"]), fmt(r["rps_with"]), fmt(r["ratio"], 2),
                    fmt(r["rss_before_mib"], 1), fmt(r["rss_idle_mib"], 1), fmt(r["kib_per_client"], 2),
                    r["opened"], r["still_open"], fmt(r["backend_conns"]), fmt(r["p99_with_ms"], 2),
                    r["errors"]))
        w("")
        w("Per round, a fresh candidate: `%s` (after a 1 s warm-up), then `bench/idle_hold.py --request /1k` "
          "opens %s connections from 127.0.0.2+ (3,000 per process), each sends one HTTP/1.1 GET and "
          "reads the whole response, then stays idle; RSS is read once it settles, and the same wrk runs "
          "again while they are held. KiB per idle client = (RSS with idle − RSS before) / clients still "
          "open (user-space only: kernel socket buffers are not in RSS). still open = worst round, checked "
          "after the second wrk (non-blocking recv gives EAGAIN). backend conns = ESTABLISHED on "
          ":9001/:9002 while held (an L4 proxy holds one per client)." % (
              meta["idle_wrk_cmd"], fmt(meta["idle"])))
        w("")
    if S:
        w("## Syscalls per kept-alive proxied request")
        w("")
        w("| candidate | syscalls/req | requests | load window calls | idle window calls | window s "
          "| top syscalls per request | wrk errors |")
        w("|---|---:|---:|---:|---:|---:|---|---:|")
        for c in cands:
            if c in S:
                r = S[c]
                top = ", ".join("%s %.2f" % (k, v) for k, v in r["top"][:6])
                w("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    c, fmt(r["per_request"], 2), fmt(r["requests"]), fmt(r["load_calls"]),
                    fmt(r["idle_calls"]), fmt(r["load_window_s"], 1), top, r["wrk_errors"]))
        w("")
        w("A fresh candidate, warmed up with `wrk -t1 -c%d -d2s`; then `strace -f -c -p PID…` on all "
          "its processes (and threads) while `wrk -t1 -c%d -d%ss …/1k` runs, minus the calls of an "
          "equal window without load (attach, detach, timers), / the requests wrk reports. strace "
          "slows the proxy, so only the counts mean anything. `direct` = the backend nginx's own "
          "syscalls (the server's side of the floor)." % (CONCURRENCY, CONCURRENCY, meta["strace_duration"]))
        w("")
    if C:
        w("## Server connections opened without client keep-alive")
        w("")
        w("| candidate | requests | server connections opened | per backend | backend requests "
          "| limit (concurrency + 2 per worker) | ab req/s | CPU µs/req | ab errors |")
        w("|---|---:|---:|---|---|---:|---:|---:|---:|")
        for c in cands:
            if c in C:
                r = C[c]
                w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    c, fmt(r["ab_complete"]), fmt(r["server_connections"]),
                    " + ".join(fmt(a) for a in r["backend_accepts"]),
                    " + ".join(fmt(a) for a in r["backend_requests"]),
                    "–" if c == "direct" else r["limit"], fmt(r["rps"]),
                    "–" if c == "direct" else fmt(r["cpu_us_per_req"], 1), r["ab_errors"]))
        w("")
        w("A fresh candidate (no warm-up), then `ab -r -s 10 -n %d -c %d …/1k`; connections the two "
          "backends accepted meanwhile, from nginx `stub_status` (`accepts`, minus the status reads "
          "themselves). An L4 proxy (and `direct`) opens one per request." % (
              meta["conn_requests"], CONCURRENCY))
        w("")
    quills = [c for c in cands if c.startswith("quill")]
    for q in quills:
        t = targets(summ, q, meta["idle"])
        w("## %s against the issue's targets%s" % (
            q, " (an HTTP target for a TCP-mode proxy: for reference)" if q == "quill-tcp" else ""))
        w("")
        w("| target | measured | result |")
        w("|---|---|---|")
        for desc, shown, res in t:
            w("| %s | %s | %s |" % (desc, shown, res))
        w("")
    if results["failures"]:
        w("## Failures")
        w("")
        for f in results["failures"]:
            w("- %s" % json.dumps(f))
        w("")
    return "\n".join(lines), summ


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--quill-bin")
    p.add_argument("--quill-base-bin", help="a second Quill binary, the candidate quill-base-http")
    p.add_argument("--quill-toml", action="store_true",
                   help="start quill-http from a TOML (protocol = \"http\") instead of -H")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=8, help="seconds of each load wrk run")
    p.add_argument("--idle-duration", type=int, default=None,
                   help="seconds of each idle-test wrk run (default: --duration, at most 5)")
    p.add_argument("--ab-requests", type=int, default=20000)
    p.add_argument("--idle", type=int, default=9000, help="idle keep-alive clients (0: no idle test)")
    p.add_argument("--strace-duration", type=int, default=3)
    p.add_argument("--conn-requests", type=int, default=100000)
    p.add_argument("--only", default=",".join(DEFAULT_CANDIDATES))
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    p.add_argument("--command", default="bash bench/http.sh")
    a = p.parse_args(argv)
    names = []
    for n in a.only.split(","):
        n = ALIASES.get(n.strip(), n.strip())
        if n and n not in ALL_CANDIDATES:
            p.error("unknown candidate %r (known: %s)" % (n, ", ".join(ALL_CANDIDATES)))
        if n and n not in names:
            names.append(n)
    if not names:
        p.error("no candidates")
    for n in names:
        if n in QUILL_BINS and not getattr(a, QUILL_BINS[n]):
            p.error("%s needs --%s" % (n, QUILL_BINS[n].replace("_", "-")))
    a.only = names
    if a.idle_duration is None:
        a.idle_duration = min(a.duration, 5)
    if not 1 <= a.rounds <= 20 or not 1 <= a.duration <= 600 or not 1 <= a.idle_duration <= 600:
        p.error("--rounds must be 1..20, --duration and --idle-duration 1..600")
    if not 0 <= a.idle <= 15000:
        p.error("--idle must be 0..15000 (the open-file limit)")
    if not 1 <= a.strace_duration <= 60 or not 100 <= a.conn_requests <= 1000000:
        p.error("--strace-duration must be 1..60 and --conn-requests 100..1000000")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)

    vers = harness.versions(a.quill_bin, ["quill"] if a.quill_bin else [], None)
    if a.quill_base_bin:
        vers.update({"quill-base": v for k, v in harness.versions(
            a.quill_base_bin, ["quill"], None).items() if k == "quill"})
    bench = Bench(a)
    qcmd = candidate_cmd("quill-http", a.work, a.quill_bin or "quill", a.quill_toml)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": a.command, "rounds": a.rounds, "candidates": names,
            "kernel": "Linux " + platform.release(), "cpus": os.cpu_count(),
            "load_before": open("/proc/loadavg").read().split()[:3],
            "duration": a.duration, "idle_duration": a.idle_duration, "ab_requests": a.ab_requests,
            "idle": a.idle, "strace_duration": a.strace_duration, "conn_requests": a.conn_requests,
            "idle_wrk_cmd": "wrk -t1 -c%d -d%ds --latency …/1k" % (CONCURRENCY, a.idle_duration),
            "quill_http_cmd": " ".join(["quill"] + qcmd[1:]).replace(a.work, "WORK"),
            "versions": vers, "ports": {n: PORTS[n] for n in names}}
    meta["load_before"] = " ".join(meta["load_before"])
    interrupted = harness.run_guarded(bench)
    meta["interrupted"] = interrupted
    meta["refused"] = bench.refused
    md, summ = render(bench.results, names, meta, bench.refused)
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "http.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(a.results, "http.json"), "w") as f:
        json.dump({"meta": meta, "summary": summ, **bench.results}, f, indent=1, default=str)
    print(md)
    for name, msg in bench.refused.items():
        log("ERROR: %s was not measured: %s" % (name, msg))
    if interrupted:
        return 1
    return 3 if bench.refused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
