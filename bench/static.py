#!/usr/bin/env python3
"""The file-serving shoot-out (called by bench/static.sh): `quill serve` against nginx 1.22
(2 workers), h2o 2.2.5 (2 threads) and lighttpd 1.4 (1 process, a per-core reference), all
serving the same generated docroot on 127.0.0.1.

Workloads (docs/benchmarks.md#serving-files):
  1. load, in interleaved rounds (every candidate per round, order rotating): 1 KiB keep-alive
     (`wrk -t1 -c50` and `h2load --h1 -t1 -c50 -n N`), 1 MiB keep-alive (`wrk -t1 -c10`),
     10,000 x 4 KiB files at random (`wrk -t1 -c50 -s random.lua`), 1 KiB without keep-alive
     (`ab -c 50`); requests/s, the server's CPU per request (utime+stime of all its processes
     from /proc), the load generator's own CPU per request and whether it kept a core busy,
     ratios to the best peer (nginx, h2o, lighttpd) in the same round;
  2. memory (every round, a fresh server each): RSS per idle keep-alive client (N clients, each
     after one complete request, bench/idle_hold.py --request) and RSS growth under
     `wrk -t1 -c1000` over the warm idle process;
  3. system calls (once per candidate): all of them per 1 KiB keep-alive request (`strace -f -c`
     during wrk, minus an equal window without load) and `openat`/`openat2` per request over the
     10,000 random files (`strace -f -c -e trace=openat,openat2`).

Python 3 standard library only; loopback only. Every process it starts is recorded in WORK/pids
(for static.sh's EXIT trap) and stopped by PID here.
"""

import argparse
import datetime
import json
import os
import platform
import re
import resource
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402  (same directory: /proc helpers, Procs, client parsers, strace window)
from harness import fmt, log, median  # noqa: E402

PORTS = {"quill": 9411, "nginx": 9412, "h2o": 9413, "lighttpd": 9414, "quill-base": 9415}
ALL_CANDIDATES = ["quill", "quill-base", "nginx", "h2o", "lighttpd"]
DEFAULT_CANDIDATES = ["quill", "nginx", "h2o", "lighttpd"]
QUILL_BINS = {"quill": "quill_bin", "quill-base": "quill_base_bin"}
PEERS = ("nginx", "h2o", "lighttpd")  # "the best peer"
WORKLOADS = ["wrk1k", "h2load1k", "wrk1m", "many", "ab1k"]
WORKLOAD_NAMES = {"wrk1k": "1 KiB keep-alive (wrk)", "h2load1k": "1 KiB keep-alive (h2load)",
                  "wrk1m": "1 MiB keep-alive (wrk -c10)", "many": "10,000 x 4 KiB random (wrk)",
                  "ab1k": "1 KiB no keep-alive (ab)"}
WORKERS = 2
CONCURRENCY = 50
MANY = 10000
MIB = 1 << 20
PACKAGES = ["nginx", "h2o", "lighttpd", "wrk", "apache2-utils", "nghttp2-client", "strace"]


# ---------------------------------------------------------------- docroot and configs

def make_docroot(root):
    """The one docroot every candidate serves: 1k.bin, 1m.bin, many/f0..f9999.bin (4 KiB each,
    distinct contents) and index.html. World-readable: nginx's workers and h2o run as nobody."""
    os.makedirs(os.path.join(root, "many"), exist_ok=True)
    with open(os.path.join(root, "1k.bin"), "wb") as f:
        f.write(os.urandom(1024))
    with open(os.path.join(root, "1m.bin"), "wb") as f:
        f.write(os.urandom(MIB))
    block = os.urandom(4096 + MANY)
    for i in range(MANY):
        with open(os.path.join(root, "many", "f%d.bin" % i), "wb") as f:
            f.write(block[i:i + 4096])
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("<!doctype html><title>quill bench</title><p>static shoot-out docroot</p>\n")
    for d, dirs, files in os.walk(root):
        os.chmod(d, 0o755)
        for name in files:
            os.chmod(os.path.join(d, name), 0o644)


def write_configs(work, www):
    """nginx, h2o and lighttpd configurations (the random-path wrk script too)."""
    with open(os.path.join(work, "nginx.conf"), "w") as f:
        f.write("""daemon off;
worker_processes {workers};
worker_rlimit_nofile 20000;
pid {w}/nginx.pid;
error_log {w}/nginx.err warn;
events {{ worker_connections 19900; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    access_log off;
    sendfile on;
    tcp_nopush on;
    open_file_cache max=20000 inactive=60s;
    open_file_cache_valid 60s;
    keepalive_timeout 600s;
    keepalive_requests 1000000;
    client_header_timeout 600s;
    server {{
        listen 127.0.0.1:{port};
        root {www};
        index index.html;
    }}
}}
""".format(workers=WORKERS, w=work, port=PORTS["nginx"], www=www))
    # h2o started as root switches to nobody: its own directory is writable by nobody.
    h2o_dir = os.path.join(work, "h2o")
    os.makedirs(h2o_dir, exist_ok=True)
    os.chmod(h2o_dir, 0o777)
    with open(os.path.join(work, "h2o.conf"), "w") as f:
        f.write("""num-threads: {workers}
max-connections: 19900
http1-request-timeout: 600
pid-file: {d}/h2o.pid
error-log: {d}/error.log
listen:
  host: 127.0.0.1
  port: {port}
hosts:
  default:
    paths:
      /:
        file.dir: {www}
""".format(workers=WORKERS, d=h2o_dir, port=PORTS["h2o"], www=www))
    with open(os.path.join(work, "lighttpd.conf"), "w") as f:
        f.write("""server.document-root = "{www}"
server.bind = "127.0.0.1"
server.port = {port}
server.pid-file = "{w}/lighttpd.pid"
server.errorlog = "{w}/lighttpd.err"
server.max-fds = 20000
server.max-connections = 9990
server.max-keep-alive-requests = 1000000
server.max-keep-alive-idle = 600
server.max-read-idle = 600
index-file.names = ( "index.html" )
include_shell "/usr/share/lighttpd/create-mime.conf.pl"
""".format(www=www, port=PORTS["lighttpd"], w=work))
    with open(os.path.join(work, "random.lua"), "w") as f:
        f.write("""-- written by bench/static.py: each request a random one of the %d files
math.randomseed(%d)
request = function()
  return wrk.format("GET", "/many/f" .. math.random(0, %d) .. ".bin")
end
""" % (MANY, 12345, MANY - 1))


def candidate_cmd(name, work, www, quill_bin):
    port = PORTS[name]
    if name in QUILL_BINS:
        return [quill_bin, "serve", www, "--listen", "127.0.0.1:%d" % port, "--workers", str(WORKERS)]
    if name == "nginx":
        return ["nginx", "-p", work + "/", "-c", os.path.join(work, "nginx.conf"),
                "-e", os.path.join(work, "nginx.err")]
    if name == "h2o":
        return ["h2o", "-c", os.path.join(work, "h2o.conf")]
    if name == "lighttpd":
        return ["lighttpd", "-D", "-f", os.path.join(work, "lighttpd.conf")]
    raise ValueError(name)


class Refused(Exception):
    """A candidate's binary exited at start (e.g. a Quill without `serve`)."""


class Candidate:
    """A running server."""

    def __init__(self, name, bench):
        self.name, self.bench = name, bench
        self.port = PORTS[name]
        self.proc = None

    def start(self):
        """Start and check it serves /1k.bin. False if it did not become ready; raises Refused
        if the process exited (the binary refused its arguments or config)."""
        if harness.port_open(self.port):
            raise RuntimeError("port %d already in use before starting %s" % (self.port, self.name))
        quill_bin = getattr(self.bench.args, QUILL_BINS.get(self.name, "quill_bin"), None)
        cmd = candidate_cmd(self.name, self.bench.work, self.bench.www, quill_bin)
        self.proc = self.bench.procs.start(self.name, cmd)
        if not harness.wait_ready(self.port, self.proc):
            exited = self.proc.poll()
            tail = self.log_tail()
            self.stop()
            if exited is not None:
                lines = [ln for ln in tail.splitlines() if ln.strip() and not ln.startswith("=== ")]
                raise Refused("%s exited at start with status %s: %s  (command: %s)" % (
                    self.name, exited, lines[-1] if lines else "(no output)",
                    " ".join(cmd).replace(self.bench.work, "WORK")))
            log("%s did not become ready (see %s/%s.log)" % (self.name, self.bench.work, self.name))
            return False
        for path, size in (("/1k.bin", 1024), ("/1m.bin", MIB), ("/many/f9999.bin", 4096)):
            got = harness.http_get(self.port, path)
            if got != (200, size):
                log("%s: GET %s gave %s %s" % (self.name, path, got[0], got[1]))
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
        return self.proc is not None and self.proc.poll() is None

    def pids(self):
        return harness.descendants(self.proc.pid) if self.proc else []

    def stop(self):
        if self.proc is not None:
            # Quill drains on the first SIGTERM and exits at once on the second.
            self.bench.procs.stop(self.proc, (signal.SIGTERM, signal.SIGTERM), wait=6)
            self.proc = None


# ---------------------------------------------------------------- clients

def parse_h2load(out):
    r = {"rps": None, "requests": None, "p50_ms": None, "p99_ms": None, "errors": 0}
    m = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, (\d+) failed, "
                  r"(\d+) errored, (\d+) timeout", out)
    if m:
        r["requests"] = int(m.group(1))
        r["errors"] = int(m.group(2))  # "failed" already counts the errored and timed-out ones
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if m:
        r["errors"] += int(m.group(3)) + int(m.group(4))
    return r


def children_cpu_s():
    """CPU seconds of the reaped children so far: the delta around one client run is that
    client's own CPU (no other child is reaped meanwhile: servers are reaped when stopped)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


# ---------------------------------------------------------------- the benchmark

class Bench:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.www = os.path.join(self.work, "www")
        self.procs = harness.Procs(self.work)
        self.candidates = list(args.only)
        self.refused = {}
        self.results = {"runs": [], "idle": [], "c1000": [], "syscalls": [], "openat": [],
                        "failures": []}

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

    def client_cmd(self, cand, workload):
        """(warm-up command or None, measured command, timeout, parser)."""
        base = "http://127.0.0.1:%d" % cand.port
        d, c = self.args.duration, CONCURRENCY
        if workload == "wrk1k":
            cmd = ["wrk", "-t1", "-c%d" % c, "-d%ds" % d, "--latency", base + "/1k.bin"]
            return cmd[:3] + ["-d1s", base + "/1k.bin"], cmd, d + 30, harness.parse_wrk
        if workload == "h2load1k":
            cmd = ["h2load", "--h1", "-t1", "-c%d" % c, "-n%d" % self.args.h2load_requests, base + "/1k.bin"]
            return None, cmd, 300, parse_h2load
        if workload == "wrk1m":
            cmd = ["wrk", "-t1", "-c10", "-d%ds" % d, "--latency", base + "/1m.bin"]
            return cmd[:3] + ["-d1s", base + "/1m.bin"], cmd, d + 30, harness.parse_wrk
        if workload == "many":
            lua = os.path.join(self.work, "random.lua")
            cmd = ["wrk", "-t1", "-c%d" % c, "-d%ds" % d, "--latency", "-s", lua, base + "/"]
            return ["wrk", "-t1", "-c%d" % c, "-d1s", "-s", lua, base + "/"], cmd, d + 30, harness.parse_wrk
        if workload == "ab1k":
            cmd = ["ab", "-r", "-s", "10", "-n", str(self.args.ab_requests), "-c", str(c), base + "/1k.bin"]
            return None, cmd, 300, harness.parse_ab
        raise ValueError(workload)

    # -- 1. load
    def measure(self, cand, workload, rnd):
        warm, cmd, timeout, parse = self.client_cmd(cand, workload)
        if warm:
            harness.run_client(warm, 30)
        pids = cand.pids()
        la = loadavg()
        s0 = harness.ctx_switches(pids)
        c0, g0, t0 = harness.cpu_ticks(pids), children_cpu_s(), time.monotonic()
        with harness.RssSampler(pids) as rs:
            rc, out = harness.run_client(cmd, timeout)
        c1, g1, t1 = harness.cpu_ticks(pids), children_cpu_s(), time.monotonic()
        s1 = harness.ctx_switches(pids)
        r = parse(out)
        req = r["requests"] or 0
        wall = t1 - t0
        cpu_s = (c1 - c0) / harness.CLK_TCK
        gen_s = g1 - g0
        alive = cand.alive()
        row = {"round": rnd, "workload": workload, "candidate": cand.name,
               "cmd": " ".join(cmd).replace(self.work, "WORK"), "exit": rc, "wall_s": round(wall, 3),
               "loadavg": la, "cpu_s": cpu_s, "server_cores": cpu_s / wall if wall else None,
               "cpu_us_per_req": cpu_s * 1e6 / req if req else None,
               "switches_per_req": (s1 - s0) / req if req else None,
               "gen_cpu_s": gen_s, "gen_cpu_us_per_req": gen_s * 1e6 / req if req else None,
               "gen_core": gen_s / wall if wall else None, "peak_rss_kib": rs.peak, "pids": pids, **r}
        # One client thread: more than 90 % of a core means the client, not the server, set the pace.
        row["gen_saturated"] = bool(row["gen_core"] and row["gen_core"] >= 0.9)
        if workload == "wrk1m" and req:
            row["cpu_s_per_gib"] = cpu_s / (req * MIB / (1 << 30))
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
            log("  %-10s %-8s %9.0f req/s  cpu %s us/req (%.2f cores)  client %s us/req (%.2f core%s)  "
                "errors %d  load %s" % (
                    cand.name, workload, r["rps"], fmt(row["cpu_us_per_req"], 1), row["server_cores"] or 0,
                    fmt(row["gen_cpu_us_per_req"], 1), row["gen_core"] or 0,
                    ", saturated" if row["gen_saturated"] else "", r["errors"], la))
        self.results["runs"].append(row)

    def load_round(self, rnd, order):
        cands = {}
        try:
            for name in order:
                c = self.fresh(name, "load start", rnd)
                if c:
                    cands[name] = c
            for wl in self.args.workloads:
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

    # -- 2. memory: idle keep-alive clients, and wrk -c1000
    def settled_rss(self, pids, seconds=5):
        prev, rss = -1, harness.rss_kib(pids)
        settle = time.monotonic() + seconds
        while rss != prev and time.monotonic() < settle:
            time.sleep(0.3)
            prev, rss = rss, harness.rss_kib(pids)
        return rss

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
        try:
            pids = c.pids()
            harness.run_client(["wrk", "-t1", "-c%d" % CONCURRENCY, "-d1s",
                                "http://127.0.0.1:%d/1k.bin" % c.port], 30)  # warm-up
            time.sleep(0.5)
            samples = []
            for _ in range(3):
                samples.append(harness.rss_kib(pids))
                time.sleep(0.1)
            rss_before = median(samples)
            hold = self.procs.start("idle_hold", [
                sys.executable, os.path.join(HERE, "idle_hold.py"), "127.0.0.1", str(c.port),
                "-n", str(n), "--request", "/1k.bin", "--per-process", "3000",
                "--hold", "120", "--open-timeout", "90",
                "--ready-file", ready, "--stop-file", stop], stdout=subprocess.PIPE)
            deadline = time.monotonic() + 105
            while not os.path.exists(ready) and hold.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            opened = json.load(open(ready)) if os.path.exists(ready) else {"opened": 0, "errors": {"no ready file": 1}}
            time.sleep(1.0)
            rss_idle = self.settled_rss(pids)
            open(stop, "w").close()
            try:
                hold_out, _ = hold.communicate(timeout=60)
                final = json.loads(hold_out.strip().splitlines()[-1])
            except (subprocess.TimeoutExpired, ValueError, IndexError):
                final = {"still_open": None}
            still = final.get("still_open")
            row = {"round": rnd, "candidate": name, "requested": n, "opened": opened.get("opened"),
                   "open_errors": opened.get("errors"), "still_open": still,
                   "rss_before_kib": rss_before, "rss_idle_kib": rss_idle,
                   "kib_per_client": (rss_idle - rss_before) / still if still else None,
                   "alive": c.alive(), "loadavg": loadavg()}
            self.results["idle"].append(row)
            log("  %-10s idle: opened %s still %s  rss %.1f -> %.1f MiB (%s KiB/client)" % (
                name, row["opened"], still, rss_before / 1024, rss_idle / 1024, fmt(row["kib_per_client"], 2)))
        finally:
            if hold is not None and hold.poll() is None:
                open(stop, "w").close()
                self.procs.stop(hold, (signal.SIGTERM,), wait=20)
            elif hold is not None:
                self.procs.live.pop(hold.pid, None)
            c.stop()
        time.sleep(1.0)

    def c1000_one(self, name, rnd):
        c = self.fresh(name, "c1000 start", rnd)
        if not c:
            return
        try:
            pids = c.pids()
            url = "http://127.0.0.1:%d/1k.bin" % c.port
            harness.run_client(["wrk", "-t1", "-c%d" % CONCURRENCY, "-d1s", url], 30)  # warm-up
            time.sleep(0.5)
            rss_warm = self.settled_rss(pids, 3)
            d = max(3, min(self.args.duration, 5))
            cmd = ["wrk", "-t1", "-c1000", "-d%ds" % d, "--latency", url]
            with harness.RssSampler(pids) as rs:
                rc, out = harness.run_client(cmd, d + 30)
            time.sleep(1.0)
            rss_after = self.settled_rss(pids, 3)
            w = harness.parse_wrk(out)
            if not w["rps"]:
                w["errors"] += 1  # no response at all in the run: not a figure to compare
            row = {"round": rnd, "candidate": name, "cmd": " ".join(cmd), "rps": w["rps"],
                   "errors": w["errors"], "p99_ms": w["p99_ms"], "rss_warm_kib": rss_warm,
                   "rss_peak_kib": rs.peak, "rss_after_kib": rss_after,
                   "growth_kib": rs.peak - rss_warm, "kept_kib": rss_after - rss_warm,
                   "alive": c.alive(), "loadavg": loadavg()}
            self.results["c1000"].append(row)
            log("  %-10s wrk -c1000: %s req/s, rss %.1f -> peak %.1f -> after %.1f MiB, errors %d" % (
                name, fmt(w["rps"]), rss_warm / 1024, rs.peak / 1024, rss_after / 1024, w["errors"]))
        finally:
            c.stop()
        time.sleep(0.5)

    # -- 3. system calls
    def syscalls_one(self, name):
        """All syscalls per 1 KiB keep-alive request, minus an equal window without load."""
        c = self.fresh(name, "syscalls start")
        if not c:
            return
        try:
            url = "http://127.0.0.1:%d/1k.bin" % c.port
            harness.run_client(["wrk", "-t1", "-c%d" % CONCURRENCY, "-d2s", url], 30)  # warm-up
            time.sleep(0.3)
            pids = c.pids()
            load_cmd = ["wrk", "-t1", "-c%d" % CONCURRENCY, "-d%ds" % self.args.strace_duration, url]
            lc, lt, window, out = harness.Bench.strace_window(self, pids, load_cmd=load_cmd)
            w = harness.parse_wrk(out)
            ic, it, iwindow, _ = harness.Bench.strace_window(self, pids, seconds=window)
            n = w["requests"]
            if not n:
                raise RuntimeError("wrk under strace gave no request count: %s" % out[-300:])
            per = {k: (lc.get(k, 0) - ic.get(k, 0)) / n for k in set(lc) | set(ic)}
            top = sorted(per.items(), key=lambda kv: -kv[1])[:8]
            row = {"candidate": name, "requests": n, "wrk_cmd": " ".join(load_cmd),
                   "wrk_errors": w["errors"], "load_window_s": round(window, 3),
                   "load_calls": lt, "idle_calls": it, "per_request": (lt - it) / n,
                   "top": [[k, round(v, 3)] for k, v in top if v > 0.0005],
                   "load_by_syscall": lc, "idle_by_syscall": ic, "loadavg": loadavg()}
            self.results["syscalls"].append(row)
            log("  %-10s syscalls/req %.2f  (%d requests)  top %s" % (name, row["per_request"], n, row["top"][:5]))
        except RuntimeError as e:
            log("  %s syscalls: %s" % (name, e))
            self.results["failures"].append({"candidate": name, "phase": "syscalls", "error": str(e)})
        finally:
            c.stop()
            time.sleep(0.5)

    def openat_one(self, name):
        """openat/openat2 per request over the 10,000 files, after one pass of warm-up."""
        c = self.fresh(name, "openat start")
        if not c:
            return
        try:
            lua = os.path.join(self.work, "random.lua")
            base = "http://127.0.0.1:%d/" % c.port
            warm, warm_requests = self.warm_files(c)
            time.sleep(0.3)
            pids = c.pids()
            load_cmd = ["wrk", "-t1", "-c%d" % CONCURRENCY, "-d%ds" % self.args.strace_duration, "-s", lua, base]
            calls, total, window, out = harness.Bench.strace_window(self, pids, load_cmd=load_cmd,
                                                                    trace="openat,openat2")
            w = harness.parse_wrk(out)
            n = w["requests"]
            if not n:
                raise RuntimeError("wrk under strace gave no request count: %s" % out[-300:])
            row = {"candidate": name, "requests": n, "wrk_cmd": " ".join(load_cmd).replace(self.work, "WORK"),
                   "wrk_errors": w["errors"], "window_s": round(window, 3), "calls": calls,
                   "openat": total, "per_request": total / n, "warm_cmd": warm, "warm_requests": warm_requests,
                   "loadavg": loadavg()}
            self.results["openat"].append(row)
            log("  %-10s openat/req %.3f  (%d calls, %d requests)" % (name, row["per_request"], total, n))
        except RuntimeError as e:
            log("  %s openat: %s" % (name, e))
            self.results["failures"].append({"candidate": name, "phase": "openat", "error": str(e)})
        finally:
            c.stop()
            time.sleep(0.5)

    def run(self):
        t_start = time.monotonic()
        log("making the docroot %s (1k.bin, 1m.bin, %d x 4 KiB, index.html)" % (self.www, MANY))
        os.chmod(self.work, 0o755)  # nginx's workers and h2o run as nobody
        make_docroot(self.www)
        write_configs(self.work, self.www)
        base = list(self.candidates)
        for rnd in range(self.args.rounds):
            k = rnd % len(base)
            order = base[k:] + base[:k]
            log("round %d/%d, order: %s; load %s" % (rnd + 1, self.args.rounds, " ".join(order), loadavg()))
            self.load_round(rnd, order)
            if self.args.idle:
                log("round %d: %d idle keep-alive clients" % (rnd + 1, self.args.idle))
                for name in order:
                    self.idle_one(name, rnd)
            log("round %d: wrk -c1000 RSS growth" % (rnd + 1))
            for name in order:
                self.c1000_one(name, rnd)
        if self.args.strace_duration:
            log("syscalls per 1 KiB keep-alive request and openat per random-file request (strace, %ds)"
                % self.args.strace_duration)
            for name in base:
                self.syscalls_one(name)
                self.openat_one(name)
        self.results["elapsed_s"] = round(time.monotonic() - t_start, 1)

    def warm_files(self, cand):
        """The random-file load itself for max(5 s, --duration), so the open-file caches fill up
        (on a quiet machine that is about 30 requests per file; the report gives the count, since
        on a busy one it can be far fewer). Returns (the command, the requests it made)."""
        lua = os.path.join(self.work, "random.lua")
        d = max(5, self.args.duration)
        cmd = ["wrk", "-t1", "-c%d" % CONCURRENCY, "-d%ds" % d, "-s", lua, "http://127.0.0.1:%d/" % cand.port]
        rc, out = harness.run_client(cmd, d + 30)
        r = harness.parse_wrk(out)
        if not r["requests"] or r["errors"]:
            log("  %s: the warm-up over the files gave %s requests, %s errors (exit %s): %s" % (
                cand.name, r["requests"], r["errors"], rc, out[-300:].strip()))
        return " ".join(cmd).replace(self.work, "WORK").replace(str(cand.port), "PORT"), r["requests"]


# ---------------------------------------------------------------- report

def summarize(results, cands):
    runs = results["runs"]
    rounds = sorted({r["round"] for r in runs})

    def get(cand, wl, key, rnd=None):
        return [r[key] for r in runs if r["candidate"] == cand and r["workload"] == wl
                and (rnd is None or r["round"] == rnd) and r.get("valid") and r.get(key) is not None]

    def x_best(cand, wl, key, pick):
        """Median over rounds of cand's `key` / the best peer's in the same round (pick: max or
        min); a peer is compared with the other peers."""
        out = []
        for rnd in rounds:
            a = get(cand, wl, key, rnd)
            best = pick([v for p in PEERS if p != cand for v in get(p, wl, key, rnd)], default=None)
            if a and best:
                out.append(a[0] / best)
        return median(out)

    load = {}
    for c in cands:
        load[c] = {}
        for wl in WORKLOADS:
            rows = [r for r in runs if r["candidate"] == c and r["workload"] == wl]
            if not rows:
                continue
            load[c][wl] = {
                "rps": median(get(c, wl, "rps")), "p99_ms": median(get(c, wl, "p99_ms")),
                "cpu_us_per_req": median(get(c, wl, "cpu_us_per_req")),
                "cpu_s_per_gib": median(get(c, wl, "cpu_s_per_gib")),
                "server_cores": median(get(c, wl, "server_cores")),
                "switches_per_req": median(get(c, wl, "switches_per_req")),
                "gen_cpu_us_per_req": median(get(c, wl, "gen_cpu_us_per_req")),
                "gen_core": median(get(c, wl, "gen_core")),
                "gen_saturated": sum(1 for r in rows if r.get("gen_saturated")),
                "x_best": x_best(c, wl, "rps", max), "cpu_x_best": x_best(c, wl, "cpu_us_per_req", min),
                "errors": sum(r["errors"] for r in rows), "runs": len(get(c, wl, "rps")), "rows": len(rows)}
    idle, c1000 = {}, {}
    for c in cands:
        rows = [r for r in results["idle"] if r["candidate"] == c]
        if rows:
            m = lambda k: median([r[k] for r in rows])  # noqa: E731
            idle[c] = {"kib_per_client": m("kib_per_client"), "rss_before_kib": m("rss_before_kib"),
                       "rss_idle_kib": m("rss_idle_kib"), "opened": min(r["opened"] or 0 for r in rows),
                       "still_open": min(r["still_open"] or 0 for r in rows), "runs": len(rows)}
        rows = [r for r in results["c1000"] if r["candidate"] == c]
        if rows:
            m = lambda k: median([r[k] for r in rows])  # noqa: E731
            c1000[c] = {"rps": m("rps"), "rss_warm_kib": m("rss_warm_kib"), "rss_peak_kib": m("rss_peak_kib"),
                        "growth_kib": m("growth_kib"), "kept_kib": m("kept_kib"),
                        "errors": sum(r["errors"] for r in rows), "runs": len(rows)}
    return {"load": load, "idle": idle, "c1000": c1000,
            "syscalls": {r["candidate"]: r for r in results["syscalls"]},
            "openat": {r["candidate"]: r for r in results["openat"]}}


def render_load(w, summ, cands, meta):
    L = summ["load"]
    w("## Load (medians over rounds)")
    w("")
    w("req/s; **×best** = median over rounds of req/s / the best other peer's (nginx, h2o, lighttpd) in "
      "the same round; **µs/req** = the server's CPU (utime+stime of all its processes and threads, "
      "/proc/PID/stat) per request; **CPU ×best** = µs/req / the lowest other peer's; **cores** = the "
      "server's CPU / wall time; **switches/req** = the server's context switches (voluntary and "
      "involuntary, all its threads, /proc/PID/task/*/status) per request; **client µs/req** = the load generator's own CPU per request (its "
      "rusage), with **client core** its CPU / wall time: ≥ 0.90 of its one thread's core means the "
      "client set the pace (\"sat\").")
    w("")
    for wl in WORKLOADS:
        if not any(wl in L.get(c, {}) for c in cands):
            continue
        w("### %s" % WORKLOAD_NAMES[wl])
        w("")
        extra = " CPU s/GiB |" if wl == "wrk1m" else ""
        w("| candidate | req/s | ×best | µs/req | CPU ×best |%s cores | switches/req | client µs/req | "
          "client core | errors |" % extra)
        w("|---|---:|---:|---:|---:|" + ("---:|" if extra else "") + "---:|---:|---:|---:|---:|")
        for c in cands:
            d = L.get(c, {}).get(wl)
            if not d:
                continue
            cells = [c, fmt(d["rps"]), fmt(d["x_best"], 2), fmt(d["cpu_us_per_req"], 1), fmt(d["cpu_x_best"], 2)]
            if extra:
                cells.append(fmt(d["cpu_s_per_gib"], 2))
            sat = " sat" if d["gen_saturated"] else ""
            if d["gen_saturated"] and d["rows"] > 1:
                sat = " sat %d/%d" % (d["gen_saturated"], d["rows"])
            cells += [fmt(d["server_cores"], 2), fmt(d["switches_per_req"], 2),
                      fmt(d["gen_cpu_us_per_req"], 1),
                      fmt(d["gen_core"], 2) + sat, str(d["errors"])]
            w("| " + " | ".join(cells) + " |")
        w("")
    w("Commands (URL on 127.0.0.1:PORT): %s. wrk runs follow a 1 s warm-up of the same kind. A run with "
      "more than 1%% failed requests, or where the server exited, is left out of the medians." % "; ".join(
          "%s: `%s`" % (WORKLOAD_NAMES[wl], cmd) for wl, cmd in meta["commands"].items()))
    w("")


def render_rest(w, summ, cands, meta):
    I, M, S, O = summ["idle"], summ["c1000"], summ["syscalls"], summ["openat"]
    if I:
        w("## Memory per idle keep-alive client (%s clients, each after one request)" % fmt(meta["idle"]))
        w("")
        w("| candidate | RSS before MiB | RSS with idle MiB | KiB per idle client | opened | still open |")
        w("|---|---:|---:|---:|---:|---:|")
        for c in cands:
            if c in I:
                r = I[c]
                w("| %s | %s | %s | %s | %s | %s |" % (c, fmt(r["rss_before_kib"] / 1024, 1),
                                                       fmt(r["rss_idle_kib"] / 1024, 1),
                                                       fmt(r["kib_per_client"], 2), r["opened"], r["still_open"]))
        w("")
        w("A fresh server, warmed by `wrk -t1 -c50 -d1s …/1k.bin`; then `bench/idle_hold.py --request "
          "/1k.bin` opens the clients from 127.0.0.2+ (3,000 per process), each sends one GET and reads "
          "the whole response, then idles. KiB per idle client = (VmRSS with them − before) / still open "
          "(user space only: kernel socket buffers are not in RSS). Medians over rounds; opened and "
          "still open are the worst round.")
        w("")
    if M:
        w("## RSS growth under `wrk -t1 -c1000`")
        w("")
        w("| candidate | req/s | RSS warm MiB | peak MiB | growth MiB | kept after MiB | errors |")
        w("|---|---:|---:|---:|---:|---:|---:|")
        for c in cands:
            if c in M:
                r = M[c]
                w("| %s | %s | %s | %s | %s | %s | %s |" % (
                    c, fmt(r["rps"]), fmt(r["rss_warm_kib"] / 1024, 1), fmt(r["rss_peak_kib"] / 1024, 1),
                    fmt(r["growth_kib"] / 1024, 1), fmt(r["kept_kib"] / 1024, 1), r["errors"]))
        w("")
        w("A fresh server, warmed by `wrk -t1 -c50 -d1s`; RSS once settled, then sampled every 100 ms "
          "during `wrk -t1 -c1000 -dS …/1k.bin` (S = the duration, at most 5); growth = peak − warm, kept "
          "= RSS 1 s after − warm.")
        w("")
    if S or O:
        w("## System calls")
        w("")
        w("| candidate | syscalls per 1 KiB ka request | top per request | openat per random-file request "
          "| openat calls | requests | warm-up requests |")
        w("|---|---:|---|---:|---:|---:|---:|")
        for c in cands:
            s, o = S.get(c), O.get(c)
            if not s and not o:
                continue
            top = ", ".join("%s %.2f" % (k, v) for k, v in s["top"][:6]) if s else "–"
            w("| %s | %s | %s | %s | %s | %s | %s |" % (
                c, fmt(s["per_request"], 2) if s else "–", top, fmt(o["per_request"], 3) if o else "–",
                fmt(o["openat"]) if o else "–", fmt(o["requests"]) if o else "–",
                fmt(o["warm_requests"]) if o else "–"))
        w("")
        w("Once per candidate, a fresh server. Syscalls: warm-up `wrk -t1 -c%d -d2s`, then `strace -f -c "
          "-p PID…` on all its processes and threads while `wrk -t1 -c%d -d%ds …/1k.bin` runs, minus an "
          "equal window without load, / the requests wrk reports. openat: warm-up `wrk -t1 -c%d -d%ds -s "
          "random.lua` (the random-file load itself, so the open-file caches fill: its requests are in the "
          "last column; a file cache is warm after a few per file, 10,000 files), then `strace -f -c -e "
          "trace=openat,openat2` during `wrk -t1 -c%d -d%ds -s random.lua`, / its requests. strace slows "
          "the server: only the counts mean anything." % (
              CONCURRENCY, CONCURRENCY, meta["strace_duration"], CONCURRENCY, max(5, meta["duration"]),
              CONCURRENCY, meta["strace_duration"]))
        w("")


def render(results, cands, meta, refused):
    summ = summarize(results, cands)
    lines = []
    w = lines.append
    w("# Serving files — %s" % meta["date"])
    w("")
    for name, msg in refused.items():
        w("**%s was NOT measured: %s**" % (name, msg))
        w("")
    for name, msg in meta.get("skipped", {}).items():
        w("**%s was NOT measured: %s**" % (name, msg))
        w("")
    if meta.get("interrupted"):
        w("**Interrupted or failed: partial results.**")
        w("")
    w("Command: `%s`  " % meta["command"])
    w("Rounds: %d; machine: %s, %d CPUs; load average before %s, after %s; elapsed %s s.  " % (
        meta["rounds"], meta["kernel"], meta["cpus"], meta["load_before"], meta.get("load_after", "–"),
        results.get("elapsed_s", "–")))
    w("Versions: %s." % "; ".join("%s %s" % (k, v) for k, v in meta["versions"].items()))
    w("")
    w("One docroot (a temp dir: `1k.bin`, `1m.bin`, `many/f0.bin`…`f9999.bin` of 4 KiB, `index.html`) "
      "served by: `quill` (`%s`), `nginx` (2 workers, `sendfile on; tcp_nopush on; open_file_cache "
      "max=20000 inactive=60s; open_file_cache_valid 60s; access_log off`), `h2o` (`num-threads: 2`, "
      "`file.dir`, no access log), `lighttpd` (1 process, no access log: a per-core reference)." %
      meta["quill_cmd"])
    w("")
    render_load(w, summ, cands, meta)
    render_rest(w, summ, cands, meta)
    if results["failures"]:
        w("## Failures")
        w("")
        for f in results["failures"]:
            w("- %s" % json.dumps(f))
        w("")
    return "\n".join(lines), summ


def versions(args):
    v = {}
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"] + PACKAGES,
                             capture_output=True, text=True, timeout=20).stdout
        for line in out.splitlines():
            k, _, ver = line.partition(" ")
            v[k] = ver
    except (OSError, subprocess.TimeoutExpired):
        pass
    for name, path in (("quill", args.quill_bin), ("quill-base", args.quill_base_bin)):
        if path:
            try:
                v[name] = subprocess.run([path, "--version"], capture_output=True, text=True,
                                         timeout=10).stdout.strip() or "?"
            except (OSError, subprocess.TimeoutExpired):
                v[name] = "?"
    v["python"] = platform.python_version()
    return v


def parse_args(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--quill-bin")
    p.add_argument("--quill-base-bin", help="a second Quill binary, the candidate quill-base")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=8, help="seconds of each wrk run")
    p.add_argument("--ab-requests", type=int, default=20000)
    p.add_argument("--h2load-requests", type=int, default=400000)
    p.add_argument("--idle", type=int, default=9000, help="idle keep-alive clients (0: no idle test)")
    p.add_argument("--strace-duration", type=int, default=3, help="0: no strace counts")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--only", default=",".join(DEFAULT_CANDIDATES))
    p.add_argument("--skipped", default="", help="NAME=why;... candidates left out by static.sh")
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    p.add_argument("--command", default="bash bench/static.sh")
    a = p.parse_args(argv)
    names = []
    for n in a.only.split(","):
        n = n.strip()
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
    a.workloads = [x for x in a.workloads.split(",") if x]
    for x in a.workloads:
        if x not in WORKLOADS:
            p.error("unknown workload %r (known: %s)" % (x, ", ".join(WORKLOADS)))
    if not 1 <= a.rounds <= 20 or not 1 <= a.duration <= 600:
        p.error("--rounds must be 1..20 and --duration 1..600")
    if not 0 <= a.idle <= 9000:
        p.error("--idle must be 0..9000 (the open-file limit and lighttpd's max-connections)")
    if not 0 <= a.strace_duration <= 60 or not 100 <= a.ab_requests <= 1000000 \
            or not 1000 <= a.h2load_requests <= 10000000:
        p.error("--strace-duration 0..60, --ab-requests 100..1000000, --h2load-requests 1000..10000000")
    a.skipped = dict(x.split("=", 1) for x in a.skipped.split(";") if "=" in x)
    return a


def main(argv):
    a = parse_args(argv)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)

    bench = Bench(a)
    qcmd = candidate_cmd("quill", a.work, "WWW", "quill")
    commands = {}
    for wl in WORKLOADS:
        if wl in a.workloads:
            _, cmd, _, _ = bench.client_cmd(Candidate("nginx", bench), wl)
            commands[wl] = " ".join(cmd).replace(a.work, "WORK").replace("127.0.0.1:%d" % PORTS["nginx"],
                                                                          "127.0.0.1:PORT")
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": a.command, "rounds": a.rounds, "candidates": a.only,
            "kernel": "Linux " + platform.release(), "cpus": os.cpu_count(), "load_before": loadavg(),
            "duration": a.duration, "ab_requests": a.ab_requests, "h2load_requests": a.h2load_requests,
            "idle": a.idle, "strace_duration": a.strace_duration, "commands": commands,
            "quill_cmd": " ".join(qcmd).replace(a.work, "WORK"), "versions": versions(a),
            "ports": {n: PORTS[n] for n in a.only}, "skipped": a.skipped}
    interrupted = harness.run_guarded(bench)
    meta["interrupted"] = interrupted
    meta["refused"] = bench.refused
    meta["load_after"] = loadavg()
    md, summ = render(bench.results, a.only + [n for n in a.skipped if n not in a.only], meta, bench.refused)
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "static.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(a.results, "static.json"), "w") as f:
        json.dump({"meta": meta, "summary": summ, **bench.results}, f, indent=1, default=str)
    print(md)
    for name, msg in bench.refused.items():
        log("ERROR: %s was not measured: %s" % (name, msg))
    if interrupted:
        return 1
    return 3 if bench.refused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
