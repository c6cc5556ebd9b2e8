#!/usr/bin/env python3
"""The FastCGI shoot-out (called by bench/fastcgi.sh): nginx 1.22 (`fastcgi_pass` to an upstream
with `keepalive 8` and `fastcgi_keep_conn on`) against Quill's `fastcgi` route action, both in
front of the same php-fpm 8.2 (`pm = static`, `pm.max_children = 2`), one pool on a Unix socket
and one on 127.0.0.1:9420, serving hello.php and 20k.php.

Per round (order rotating; each candidate alone, stopped before the next starts), for each script and each transport (unix,
tcp): `wrk -t1 -cC` keep-alive; requests/s, the proxy's CPU per request (utime+stime of its
processes from /proc), php-fpm's CPU per request, the load generator's own CPU. Once per
candidate and transport, a fresh proxy: the connections php-fpm accepted (`strace -f -c -e
trace=accept,accept4` on php-fpm's processes) during `h2load --h1 -t1 -cC -n 10000`.

Python 3 standard library only; loopback only. Every process it starts is recorded in WORK/pids
(for fastcgi.sh's EXIT trap) and stopped by PID here.
"""

import argparse
import datetime
import json
import os
import platform
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402
from harness import fmt, log, median  # noqa: E402
from static import children_cpu_s, loadavg, parse_h2load  # noqa: E402

PHP_TCP = 9420
# Each candidate listens twice: the first port goes to the Unix-socket pool, the second to TCP.
PORTS = {"nginx": (9421, 9422), "quill": (9423, 9424), "quill-base": (9425, 9426)}
ALL_CANDIDATES = ["quill", "quill-base", "nginx"]
QUILL_BINS = {"quill": "quill_bin", "quill-base": "quill_base_bin"}
TRANSPORTS = ("unix", "tcp")
SCRIPTS = {"hello.php": len("Hello, world\n"), "20k.php": 20480}
CONN_REQUESTS = 10000
PACKAGES = ["nginx", "php8.2-fpm", "wrk", "nghttp2-client", "strace"]


def write_files(work, children=2):
    """The PHP docroot, php-fpm's configuration (two pools of `children` each), nginx's and
    Quill's."""
    php = os.path.join(work, "php")
    os.makedirs(php, exist_ok=True)
    files = {"hello.php": '<?php echo "Hello, world\\n";\n',
             "20k.php": '<?php echo str_repeat("0123456789abcdef", 1280);\n',
             "index.php": '<?php echo "index\\n";\n'}
    for name, text in files.items():
        with open(os.path.join(php, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(php, name), 0o644)
    os.chmod(php, 0o755)
    os.chmod(work, 0o755)
    sock = os.path.join(work, "php.sock")
    pool = """pm = static
pm.max_children = %d
pm.status_path = /fpm-status
catch_workers_output = yes
""" % children
    with open(os.path.join(work, "php-fpm.conf"), "w") as f:
        f.write("""[global]
pid = {w}/php-fpm.pid
error_log = {w}/php-fpm.err
daemonize = no
[unix]
listen = {sock}
listen.mode = 0666
{pool}
[tcp]
listen = 127.0.0.1:{tcp}
listen.allowed_clients = 127.0.0.1
{pool}
""".format(w=work, sock=sock, pool=pool, tcp=PHP_TCP))
    with open(os.path.join(work, "nginx.conf"), "w") as f:
        f.write("""daemon off;
worker_processes 2;
worker_rlimit_nofile 20000;
pid {w}/nginx.pid;
error_log {w}/nginx.err warn;
events {{ worker_connections 19900; }}
http {{
    access_log off;
    keepalive_timeout 600s;
    keepalive_requests 1000000;
    upstream php_unix {{ server unix:{sock}; keepalive 8; }}
    upstream php_tcp {{ server 127.0.0.1:{tcp}; keepalive 8; }}
    server {{
        listen 127.0.0.1:{pu};
        root {php};
        index index.php;
        location ~ \\.php$ {{
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
            fastcgi_keep_conn on;
            fastcgi_pass php_unix;
        }}
    }}
    server {{
        listen 127.0.0.1:{pt};
        root {php};
        index index.php;
        location ~ \\.php$ {{
            include /etc/nginx/fastcgi_params;
            fastcgi_param SCRIPT_FILENAME $document_root$fastcgi_script_name;
            fastcgi_keep_conn on;
            fastcgi_pass php_tcp;
        }}
    }}
}}
""".format(w=work, sock=sock, tcp=PHP_TCP, php=php, pu=PORTS["nginx"][0], pt=PORTS["nginx"][1]))
    for name in ("quill", "quill-base"):
        pu, pt = PORTS[name]
        with open(os.path.join(work, name + ".toml"), "w") as f:
            f.write("""# written by bench/fastcgi.py: the issue's FastCGI route action, Unix and TCP pools;
# max = pm.max_children: connections kept, requests over it queued (docs/fastcgi.md#connections)
workers = 2
[[pool]]
name = "php"
protocol = "fastcgi"
servers = [{{ address = "{sock}", max = {children} }}]

[[pool]]
name = "php-tcp"
protocol = "fastcgi"
servers = [{{ address = "127.0.0.1:{tcp}", max = {children} }}]

[[listener]]
name = "unix"
listen = "127.0.0.1:{pu}"
protocol = "http"
[listener.http]
keepalive_timeout = "600s"
[[listener.route]]
path = "/"
fastcgi = {{ pool = "php", root = "{php}", index = "index.php", split_path = ".php" }}

[[listener]]
name = "tcp"
listen = "127.0.0.1:{pt}"
protocol = "http"
[listener.http]
keepalive_timeout = "600s"
[[listener.route]]
path = "/"
fastcgi = {{ pool = "php-tcp", root = "{php}", index = "index.php", split_path = ".php" }}
""".format(sock=sock, tcp=PHP_TCP, pu=pu, pt=pt, php=php, children=children))


def candidate_cmd(name, work, quill_bin):
    if name in QUILL_BINS:
        return [quill_bin, "-f", "--config", os.path.join(work, name + ".toml")]
    return ["nginx", "-p", work + "/", "-c", os.path.join(work, "nginx.conf"),
            "-e", os.path.join(work, "nginx.err")]


class Refused(Exception):
    """A candidate exited at start (e.g. a Quill that does not serve FastCGI yet)."""


def log_tail(work, name):
    try:
        with open(os.path.join(work, name + ".log"), "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 1500))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.procs = harness.Procs(self.work)
        self.refused = {}
        self.fpm = None
        self.results = {"runs": [], "connections": [], "failures": []}

    def fpm_pids(self):
        return harness.descendants(self.fpm.pid)

    def start_fpm(self):
        if harness.port_open(PHP_TCP):
            raise RuntimeError("port %d already in use" % PHP_TCP)
        cmd = ["php-fpm8.2", "-F", "-y", os.path.join(self.work, "php-fpm.conf")]
        if os.getuid() == 0:
            cmd.insert(1, "-R")  # php-fpm refuses to run its pools as root without it
        self.fpm = self.procs.start("php-fpm", cmd)
        if not harness.wait_ready(PHP_TCP, self.fpm):
            raise RuntimeError("php-fpm did not start: %s" % log_tail(self.work, "php-fpm")[-500:])
        deadline = time.monotonic() + 10
        while not os.path.exists(os.path.join(self.work, "php.sock")) and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        log("php-fpm up: %s" % self.fpm_pids())

    def start(self, name, phase, rnd=None):
        """A fresh candidate that answers hello.php on both ports, or None (recorded)."""
        if name in self.refused:
            return None
        for port in PORTS[name]:
            if harness.port_open(port):
                raise RuntimeError("port %d already in use before starting %s" % (port, name))
        quill_bin = getattr(self.args, QUILL_BINS.get(name, "quill_bin"), None)
        cmd = candidate_cmd(name, self.work, quill_bin)
        p = self.procs.start(name, cmd)
        ok = all(harness.wait_ready(port, p) for port in PORTS[name])
        if not ok:
            exited = p.poll()
            tail = log_tail(self.work, name)
            self.procs.stop(p, (signal.SIGTERM, signal.SIGTERM), wait=6)
            lines = [ln for ln in tail.splitlines() if ln.strip() and not ln.startswith("=== ")]
            msg = "%s %s: %s  (command: %s)" % (
                name, "exited at start with status %s" % exited if exited is not None else "did not listen",
                lines[-1] if lines else "(no output)", " ".join(cmd).replace(self.work, "WORK"))
            self.refused[name] = msg
            log("ERROR: %s is not measured: %s" % (name, msg))
            self.results["failures"].append({"round": rnd, "candidate": name, "phase": phase, "error": msg})
            return None
        for port in PORTS[name]:
            for script, size in SCRIPTS.items():
                got = harness.http_get(port, "/" + script)
                if got != (200, size):
                    msg = "%s: GET /%s on %d gave %s %s, not 200 with %d bytes" % (
                        name, script, port, got[0], got[1], size)
                    self.procs.stop(p, (signal.SIGTERM, signal.SIGTERM), wait=6)
                    self.refused[name] = msg
                    log("ERROR: %s is not measured: %s" % (name, msg))
                    self.results["failures"].append({"round": rnd, "candidate": name, "phase": phase,
                                                     "error": msg})
                    return None
        time.sleep(0.2)
        return p

    def measure(self, name, p, script, transport, rnd):
        port = PORTS[name][TRANSPORTS.index(transport)]
        url = "http://127.0.0.1:%d/%s" % (port, script)
        c = self.args.concurrency
        harness.run_client(["wrk", "-t1", "-c%d" % c, "-d1s", url], 30)  # warm-up
        cmd = ["wrk", "-t1", "-c%d" % c, "-d%ds" % self.args.duration, "--latency", url]
        pids, fpids = harness.descendants(p.pid), self.fpm_pids()
        la = loadavg()
        s0 = harness.ctx_switches(pids)
        c0, f0, g0, t0 = harness.cpu_ticks(pids), harness.cpu_ticks(fpids), children_cpu_s(), time.monotonic()
        rc, out = harness.run_client(cmd, self.args.duration + 30)
        c1, f1, g1, t1 = harness.cpu_ticks(pids), harness.cpu_ticks(fpids), children_cpu_s(), time.monotonic()
        s1 = harness.ctx_switches(pids)
        r = harness.parse_wrk(out)
        req = r["requests"] or 0
        wall = t1 - t0

        def per(x):
            return x * 1e6 / req if req else None
        row = {"round": rnd, "candidate": name, "script": script, "transport": transport,
               "cmd": " ".join(cmd), "exit": rc, "wall_s": round(wall, 3), "loadavg": la,
               "cpu_us_per_req": per((c1 - c0) / harness.CLK_TCK),
               "switches_per_req": (s1 - s0) / req if req else None,
               "fpm_cpu_us_per_req": per((f1 - f0) / harness.CLK_TCK),
               "gen_cpu_us_per_req": per(g1 - g0), "gen_core": (g1 - g0) / wall if wall else None, **r}
        row["valid"] = bool(r["rps"] and p.poll() is None and r["errors"] <= 0.01 * req)
        row["stalled"] = not req  # not one response in the whole run
        if r["rps"] is None:
            row["output_tail"] = out[-1500:]
        log("  %-10s %-9s %-4s %8s req/s  proxy %s us/req  php-fpm %s us/req  client %s us/req  "
            "errors %d  p99 %s ms  load %s" % (
                name, script, transport, fmt(r["rps"]), fmt(row["cpu_us_per_req"], 1),
                fmt(row["fpm_cpu_us_per_req"], 1), fmt(row["gen_cpu_us_per_req"], 1), r["errors"],
                r["p99_ms"], la))
        self.results["runs"].append(row)

    def load_round(self, rnd, order):
        # One candidate at a time, stopped before the next starts: a php-fpm child serves one
        # connection until it closes, so a proxy left running with kept connections would hold
        # the children the next one needs (both stalled so when they ran side by side).
        for name in order:
            p = self.start(name, "load start", rnd)
            if not p:
                continue
            try:
                for script in SCRIPTS:
                    for transport in TRANSPORTS:
                        self.measure(name, p, script, transport, rnd)
            finally:
                self.procs.stop(p, (signal.SIGTERM, signal.SIGTERM), wait=6)

    def connections_one(self, name, transport):
        """php-fpm's accepts while a fresh proxy serves CONN_REQUESTS kept-alive requests."""
        p = self.start(name, "connections start")
        if not p:
            return
        try:
            port = PORTS[name][TRANSPORTS.index(transport)]
            # -N10: a connection with no response for 10 s is given up (counted as errors), so
            # a stalled proxy shows as failed requests, not as a run that never ends.
            cmd = ["h2load", "--h1", "-t1", "-N10", "-c%d" % self.args.concurrency,
                   "-n%d" % self.args.conn_requests,
                   "http://127.0.0.1:%d/hello.php" % port]
            calls, total, window, out = harness.Bench.strace_window(
                self, self.fpm_pids(), load_cmd=cmd, trace="accept,accept4")
            r = parse_h2load(out)
            n = r["requests"]
            row = {"candidate": name, "transport": transport, "cmd": " ".join(cmd), "requests": n,
                   "errors": r["errors"], "accepts": total, "calls": calls,
                   "per_10k": total * 10000 / n if n else None, "window_s": round(window, 2),
                   "loadavg": loadavg()}
            self.results["connections"].append(row)
            log("  %-10s %-4s php-fpm accepted %d connections for %s requests (%s per 10,000)" % (
                name, transport, total, n, fmt(row["per_10k"], 1)))
        except RuntimeError as e:
            self.results["failures"].append({"candidate": name, "phase": "connections", "error": str(e)})
            log("  %s connections: %s" % (name, e))
        finally:
            self.procs.stop(p, (signal.SIGTERM, signal.SIGTERM), wait=6)
            time.sleep(0.5)

    def run(self):
        t_start = time.monotonic()
        write_files(self.work, self.args.fpm_children)
        self.start_fpm()
        base = list(self.args.only)
        for rnd in range(self.args.rounds):
            k = rnd % len(base)
            order = base[k:] + base[:k]
            log("round %d/%d, order: %s; load %s" % (rnd + 1, self.args.rounds, " ".join(order), loadavg()))
            self.load_round(rnd, order)
        if self.args.strace:
            log("php-fpm connections per %d requests (strace -f -c -e trace=accept,accept4)" % self.args.conn_requests)
            for name in base:
                for transport in TRANSPORTS:
                    self.connections_one(name, transport)
        self.results["elapsed_s"] = round(time.monotonic() - t_start, 1)


def summarize(results, cands):
    runs = results["runs"]
    rounds = sorted({r["round"] for r in runs})

    def get(c, s, t, key, rnd=None):
        return [r[key] for r in runs if (r["candidate"], r["script"], r["transport"]) == (c, s, t)
                and (rnd is None or r["round"] == rnd) and r.get("valid") and r.get(key) is not None]

    def x_nginx(c, s, t, key):
        out = []
        for rnd in rounds:
            a, b = get(c, s, t, key, rnd), get("nginx", s, t, key, rnd)
            if a and b and b[0]:
                out.append(a[0] / b[0])
        return median(out)

    load = {}
    for c in cands:
        for s in SCRIPTS:
            for t in TRANSPORTS:
                rows = [r for r in runs if (r["candidate"], r["script"], r["transport"]) == (c, s, t)]
                if rows:
                    load["%s %s %s" % (c, s, t)] = {
                        "candidate": c, "script": s, "transport": t,
                        "rps": median(get(c, s, t, "rps")), "p99_ms": median(get(c, s, t, "p99_ms")),
                        "cpu_us_per_req": median(get(c, s, t, "cpu_us_per_req")),
                        "switches_per_req": median(get(c, s, t, "switches_per_req")),
                        "fpm_cpu_us_per_req": median(get(c, s, t, "fpm_cpu_us_per_req")),
                        "gen_cpu_us_per_req": median(get(c, s, t, "gen_cpu_us_per_req")),
                        "gen_core": median(get(c, s, t, "gen_core")),
                        "x_nginx": x_nginx(c, s, t, "rps"), "cpu_x_nginx": x_nginx(c, s, t, "cpu_us_per_req"),
                        "errors": sum(r["errors"] for r in rows), "runs": len(get(c, s, t, "rps")),
                        "stalled": sum(1 for r in rows if r.get("stalled")), "rows": len(rows)}
    return {"load": load, "connections": results["connections"]}


def render(results, cands, meta, refused):
    summ = summarize(results, cands)
    lines = []
    w = lines.append
    w("# FastCGI — %s" % meta["date"])
    w("")
    for name, msg in list(refused.items()) + list(meta.get("skipped", {}).items()):
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
    w("php-fpm 8.2 (`php-fpm8.2 -F -y CONF`, `pm = static`, `pm.max_children = %d`; pool `unix` on a Unix "
      "socket with `listen.mode = 0666`, pool `tcp` on 127.0.0.1:%d) serves `hello.php` (13 bytes) and "
      "`20k.php` (20,480 bytes) to `nginx` (2 workers, `fastcgi_pass` to an upstream with `keepalive 8`, "
      "`fastcgi_keep_conn on`) and `quill` (`%s`: `[[pool]] protocol = \"fastcgi\"`, each server's `max` = pm.max_children, and a route "
      "`fastcgi = { pool, root, index = \"index.php\", split_path = \".php\" }`)." % (
          meta["fpm_children"], PHP_TCP, meta["quill_cmd"]))
    w("")
    w("## Load (medians over rounds)")
    w("")
    w("| candidate | script | php-fpm via | req/s | ×nginx | proxy µs/req | CPU ×nginx | switches/req "
      "| php-fpm µs/req | client µs/req | client core | p99 ms | errors | stalled runs |")
    w("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for d in summ["load"].values():
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d of %d |" % (
            d["candidate"], d["script"], d["transport"], fmt(d["rps"]), fmt(d["x_nginx"], 2),
            fmt(d["cpu_us_per_req"], 1), fmt(d["cpu_x_nginx"], 2), fmt(d["switches_per_req"], 2),
            fmt(d["fpm_cpu_us_per_req"], 1),
            fmt(d["gen_cpu_us_per_req"], 1), fmt(d["gen_core"], 2), fmt(d["p99_ms"], 2), d["errors"],
            d["stalled"], d["rows"]))
    w("")
    w("`wrk -t1 -c%d -d%ds --latency URL` after a 1 s warm-up. proxy µs/req = utime+stime of the proxy's "
      "processes (/proc/PID/stat) / requests; switches/req = the proxy's context switches (voluntary and "
      "involuntary, all its threads) per request; php-fpm µs/req the same for php-fpm's master and children; "
      "client = wrk's own CPU (its rusage), client core = its CPU / wall time (≥ 0.90: wrk set the pace). "
      "×nginx = median over rounds of the ratio to nginx in the same round. A stalled run (not one "
      "response in the whole run) is left out of the medians and counted in the last column." % (
          meta["concurrency"], meta["duration"]))
    w("")
    if summ["connections"]:
        w("## php-fpm connections opened")
        w("")
        w("| candidate | php-fpm via | requests | connections accepted | per 10,000 requests | errors |")
        w("|---|---|---:|---:|---:|---:|")
        for r in summ["connections"]:
            w("| %s | %s | %s | %s | %s | %s |" % (r["candidate"], r["transport"], fmt(r["requests"]),
                                                   fmt(r["accepts"]), fmt(r["per_10k"], 1), r["errors"]))
        w("")
        w("A fresh proxy, then `h2load --h1 -t1 -N10 -c%d -n%d …/hello.php` while `strace -f -c -e "
          "trace=accept,accept4` is attached to php-fpm's processes (its children accept); per 10,000 "
          "= accepted × 10,000 / requests completed." % (meta["concurrency"], meta["conn_requests"]))
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
    p.add_argument("--quill-base-bin")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=8)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--conn-requests", type=int, default=CONN_REQUESTS,
                   help="requests of the php-fpm connection count (h2load -n)")
    p.add_argument("--fpm-children", type=int, default=2, help="pm.max_children of each pool")
    p.add_argument("--no-strace", dest="strace", action="store_false")
    p.add_argument("--only", default="quill,nginx")
    p.add_argument("--skipped", default="")
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    p.add_argument("--command", default="bash bench/fastcgi.sh")
    a = p.parse_args(argv)
    a.only = [n for n in dict.fromkeys(x.strip() for x in a.only.split(",")) if n]
    for n in a.only:
        if n not in ALL_CANDIDATES:
            p.error("unknown candidate %r (known: %s)" % (n, ", ".join(ALL_CANDIDATES)))
        if n in QUILL_BINS and not getattr(a, QUILL_BINS[n]):
            p.error("%s needs --%s" % (n, QUILL_BINS[n].replace("_", "-")))
    if not 100 <= a.conn_requests <= 1000000 or not 1 <= a.fpm_children <= 256:
        p.error("--conn-requests must be 100..1000000, --fpm-children 1..256")
    if not a.only or not 1 <= a.rounds <= 20 or not 1 <= a.duration <= 600 or not 1 <= a.concurrency <= 1000:
        p.error("need candidates; --rounds 1..20, --duration 1..600, --concurrency 1..1000")
    a.skipped = dict(x.split("=", 1) for x in a.skipped.split(";") if "=" in x)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)

    vers = {}
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"] + PACKAGES,
                             capture_output=True, text=True, timeout=20).stdout
        vers = dict(line.partition(" ")[::2] for line in out.splitlines())
    except (OSError, subprocess.TimeoutExpired):
        pass
    for name in ("quill", "quill-base"):
        path = getattr(a, QUILL_BINS[name])
        if path:
            vers[name] = subprocess.run([path, "--version"], capture_output=True, text=True,
                                        timeout=10).stdout.strip() or "?"
    vers["python"] = platform.python_version()
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": a.command, "rounds": a.rounds, "candidates": a.only,
            "kernel": "Linux " + platform.release(), "cpus": os.cpu_count(), "load_before": loadavg(),
            "duration": a.duration, "concurrency": a.concurrency, "conn_requests": a.conn_requests,
            "fpm_children": a.fpm_children,
            "versions": vers,
            "quill_cmd": "quill -f --config WORK/quill.toml", "skipped": a.skipped}
    bench = Bench(a)
    interrupted = harness.run_guarded(bench)
    meta.update(interrupted=interrupted, refused=bench.refused, load_after=loadavg())
    md, summ = render(bench.results, a.only, meta, bench.refused)
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "fastcgi.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(a.results, "fastcgi.json"), "w") as f:
        json.dump({"meta": meta, "summary": summ, **bench.results}, f, indent=1, default=str)
    print(md)
    if interrupted:
        return 1
    return 3 if bench.refused or a.skipped else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
