#!/usr/bin/env python3
"""The floor (called by bench/floor.sh; issue 27 point 1, docs/benchmarks.md#the-floor-user-and-kernel-time-per-request):
how much CPU a 1 KiB request costs each proxy, split into user time (the proxy's own code) and
kernel time (the system calls and the TCP/IP work every proxy pays), next to Quill's TCP mode,
which forwards bytes and parses nothing: the floor that no HTTP proxy on the same kernel can go
under.

Modes and candidates, all with 2 workers or threads, in front of the same two nginx backends
(127.0.0.1:9131 and :9132, 1 worker each, plain HTTP/1.1):
  tcp         wrk -t1 -c50 keep-alive through a byte pipe: Quill TCP mode (`quill -r`),
              HAProxy `mode tcp`, nginx `stream`;
  http        wrk -t1 -c50 keep-alive: `quill -r -H`, HAProxy `mode http` (`http-reuse always`),
              nginx http (upstream `keepalive`), h2o `proxy.reverse.url`;
  http-close  `ab -r -c 50 -n N` (HTTP/1.0, a new client connection per request; the proxies keep
              their server connections), the same four with the same configurations;
  tls         wrk -t1 -c50 over https (TLS 1.3, an ECDSA P-256 certificate made at bench time,
              HTTP/1.1): Quill `[listener.tls]`, HAProxy `ssl crt`, nginx `ssl`, h2o `ssl`;
  static      wrk -t1 -c50 keep-alive on a 1 KiB file: `quill serve`, nginx, h2o.
h2o 2.2.5 takes one `proxy.reverse.url`, so h2o sends everything to the first backend.

Per round (every candidate of every mode, the candidates' order rotating each round, each
mode's candidates started fresh): a warm-up (wrk -d1s, or ab -n 1000), then the measured run;
around it, utime and stime of all the proxy's processes (all threads) from /proc/PID/stat, the
same for the backends, the client's own rusage (wrk or ab, a reaped child) and /proc/stat for the
whole machine (softirq, steal, the kernel's threads, and the rest: other work on a shared
machine). Per request = the change / the requests the client completed. A run is quiet when other
work took at most --quiet-cores (0.2) of a core during it; a candidate's figures are the medians
over its quiet runs, or over all its valid runs (marked) when it has none. "Above the floor" = the
candidate's median CPU per request - Quill TCP mode's.

Then once per candidate and mode on a fresh start, after a warm-up: `strace -f -c` attached to all
its processes and threads during a fixed window of load (wrk -dW, or ab -t W), nothing subtracted:
system calls / the requests the client completed in the window (the window includes opening wrk's
50 connections). Then Quill alone under `valgrind --tool=callgrind`, one worker, a local backend
(bench/instructions.py's), N1 and N2 requests from a Python client, kept alive except in
http-close: instructions per request = (Ir(N2) - Ir(N1)) / (N2 - N1).

Python 3 standard library only; loopback only. Every process it starts is recorded in WORK/pids
(for floor.sh's EXIT trap) and stopped by PID here.
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402  (bench/harness.py: /proc helpers, Procs, client parsers, strace window)
import instructions  # noqa: E402  (bench/instructions.py: the callgrind backend and response reader)
from harness import CLK_TCK, fmt, log, median  # noqa: E402

BACKENDS = (9131, 9132)
CALLGRIND_PORT = 9147  # Quill under callgrind; its backend listens on 9148
WORKERS = 2
MAXCONN = 9900
CONCURRENCY = 50
# --batch-peers: the backends and the load generator (in the CPU and the strace runs) run under
# SCHED_BATCH, so that waking them (a request sent to a backend, a response to wrk) does not
# preempt the proxy under test. They still share the 2 cores: this approximates a machine where
# they have cores of their own, as far as wake-up preemption goes. In one experiment here
# (2026-12-05) 0.9 us of added user time in the proxy cost about 0.8 us of its kernel time
# besides without it, and none with it. chrt execs the command, so its PID is the peer's.
BATCH = ("chrt", "-b", "0")
MODES = ["tcp", "http", "http-close", "tls", "static"]
TITLES = {"tcp": "TCP mode, 1 KiB, kept alive (wrk)",
          "http": "HTTP keep-alive, 1 KiB (wrk)",
          "http-close": "HTTP, a new client connection per request, 1 KiB (ab)",
          "tls": "TLS 1.3 keep-alive, 1 KiB (wrk over https)",
          "static": "static 1 KiB file (wrk)"}
CANDIDATES = {"tcp": ["quill", "quill-base", "haproxy", "nginx"],
              "http": ["quill", "quill-base", "haproxy", "nginx", "h2o"],
              "http-close": ["quill", "quill-base", "haproxy", "nginx", "h2o"],
              "tls": ["quill", "quill-base", "haproxy", "nginx", "h2o"],
              "static": ["quill", "quill-base", "nginx", "h2o"]}
# quill-base: the build before a change (QUILL_BASE_BIN), run as quill is, in the same rounds.
ALL_NAMES = ["quill", "quill-base", "haproxy", "nginx", "h2o"]
QUILLS = ("quill", "quill-base")
# http-close runs the http configurations (the same processes' settings, a different client).
CONFIG_OF = {"http-close": "http"}
PORTS = {("tcp", "quill"): 9133, ("tcp", "haproxy"): 9134, ("tcp", "nginx"): 9135,
         ("http", "quill"): 9136, ("http", "haproxy"): 9137, ("http", "nginx"): 9138, ("http", "h2o"): 9139,
         ("tls", "quill"): 9140, ("tls", "haproxy"): 9141, ("tls", "nginx"): 9142, ("tls", "h2o"): 9143,
         ("static", "quill"): 9144, ("static", "nginx"): 9145, ("static", "h2o"): 9146,
         ("tcp", "quill-base"): 9151, ("http", "quill-base"): 9152, ("tls", "quill-base"): 9153,
         ("static", "quill-base"): 9154}
FLOOR = ("tcp", "quill")
PATH, SIZE = "/1k", 1024


def config_key(mode, name):
    return (CONFIG_OF.get(mode, mode), name)


def port_of(mode, name):
    return PORTS[config_key(mode, name)]


# ---------------------------------------------------------------- certificate and configs

def make_cert(work):
    """An ECDSA P-256 self-signed certificate for localhost and 127.0.0.1: (cert, key, both in one
    file for HAProxy's `crt`)."""
    d = os.path.join(work, "certs")
    os.makedirs(d, exist_ok=True)
    cert, key, both = (os.path.join(d, n) for n in ("p256.pem", "p256.key", "p256.both.pem"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "30", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    with open(both, "w") as f:
        f.write(open(cert).read() + open(key).read())
    # h2o started as root reads them before it becomes nobody; a bench key, readable anyway.
    os.chmod(d, 0o755)
    for p in (cert, key, both):
        os.chmod(p, 0o644)
    return cert, key, both


NGINX_HEAD = """daemon off;
{modules}worker_processes {workers};
worker_rlimit_nofile 20000;
pid {w}/{name}.pid;
error_log {w}/{name}.err warn;
events {{ worker_connections 19900; }}
"""

NGINX_PROXY = """http {{
    access_log off;
    keepalive_timeout 600s;
    keepalive_requests 1000000;
    client_header_timeout 600s;
    upstream be {{ server {be0}; server {be1}; keepalive 256; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port}{ssl};
{tls}        location / {{
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_read_timeout 600s;
        }}
    }}
}}
"""

H2O_HEAD = """num-threads: {workers}
max-connections: 19900
http1-request-timeout: 600
pid-file: {d}/h2o.pid
error-log: {d}/error.log
listen:
  host: 127.0.0.1
  port: {port}
{tls}hosts:
  default:
    paths:
      /:
        {what}
"""


def write_configs(work, cert, key, both):
    """Every candidate's configuration, WORK/MODE-NAME.{conf,cfg,toml} (h2o: WORK/h2o-MODE/)."""
    harness.write_backends(work, BACKENDS)
    www = os.path.join(work, "www")
    be = ["127.0.0.1:%d" % p for p in BACKENDS]

    def put(name, text):
        with open(os.path.join(work, name), "w") as f:
            f.write(text)

    # -- tcp
    put("tcp-haproxy.cfg", harness.haproxy_tcp(WORKERS, MAXCONN, PORTS[("tcp", "haproxy")], be))
    put("tcp-nginx.conf", NGINX_HEAD.format(
        modules="load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n", workers=WORKERS, w=work,
        name="tcp-nginx") + """stream {{
    upstream be {{ server {be0}; server {be1}; }}
    server {{ listen 127.0.0.1:{port}; proxy_pass be; proxy_timeout 600s; }}
}}
""".format(be0=be[0], be1=be[1], port=PORTS[("tcp", "nginx")]))

    # -- http and tls
    put("http-haproxy.cfg", harness.haproxy_http(WORKERS, MAXCONN, PORTS[("http", "haproxy")], be))
    put("tls-haproxy.cfg", harness.haproxy_http(WORKERS, MAXCONN, PORTS[("tls", "haproxy")], be,
                                                " ssl crt %s alpn http/1.1" % both))
    for mode, ssl_on, tls in (
            ("http", "", ""),
            ("tls", " ssl", "        ssl_certificate %s;\n        ssl_certificate_key %s;\n"
                            "        ssl_protocols TLSv1.2 TLSv1.3;\n" % (cert, key))):
        put("%s-nginx.conf" % mode, NGINX_HEAD.format(modules="", workers=WORKERS, w=work, name=mode + "-nginx")
            + NGINX_PROXY.format(be0=be[0], be1=be[1], port=PORTS[(mode, "nginx")], ssl=ssl_on, tls=tls))
    for name in QUILLS:
        put("tls-%s.toml" % name, quill_toml(PORTS[("tls", name)], be, cert, key))

    # -- static
    put("static-nginx.conf", NGINX_HEAD.format(modules="", workers=WORKERS, w=work, name="static-nginx") + """http {{
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
    }}
}}
""".format(port=PORTS[("static", "nginx")], www=www))

    # -- h2o (started as root it switches to nobody: its own directory is writable by nobody)
    for mode, what, tls in (
            ("http", "proxy.reverse.url: http://%s/" % be[0], ""),
            ("tls", "proxy.reverse.url: http://%s/" % be[0],
             "  ssl:\n    certificate-file: %s\n    key-file: %s\n    minimum-version: TLSv1.2\n"
             "    ocsp-update-interval: 0\n" % (cert, key)),
            ("static", "file.dir: %s" % www, "")):
        d = os.path.join(work, "h2o-" + mode)
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o777)
        put(os.path.join(d, "h2o.conf"), H2O_HEAD.format(workers=WORKERS, d=d, port=PORTS[(mode, "h2o")],
                                                        tls=tls, what=what))


def quill_toml(port, servers, cert=None, key=None, workers=WORKERS):
    """Quill's HTTP listener, as `quill -r -H` (plain) or with `[listener.tls]`. TLS: ALPN is left
    at its default (wrk offers none: HTTP/1.1); max_handshakes_per_source 64 because wrk opens its
    50 connections at once from one address, and under strace their handshakes are slow enough to
    pass the default 32 in progress per address and worker (bench/h2.py does the same)."""
    text = """# written by bench/floor.py
workers = {workers}
max_connections = {mc}
[[listener]]
name = "floor"
listen = "127.0.0.1:{port}"
protocol = "http"
mode = ["roundrobin"]
servers = [{servers}]
[listener.http]
keepalive_timeout = "600s"
header_timeout = "600s"
""".format(workers=workers, mc=MAXCONN, port=port, servers=", ".join('"%s"' % s for s in servers))
    if cert:
        text += '[listener.tls]\ncert = "%s"\nkey = "%s"\nmax_handshakes_per_source = 64\n' % (cert, key)
    return text


def candidate_cmd(mode, name, work, quill_bins):
    """The command line of candidate `name` in `mode`; `quill_bins`: the binary of each of
    QUILLS (a name, for the report)."""
    mode = CONFIG_OF.get(mode, mode)
    port = PORTS[(mode, name)]
    listen = "127.0.0.1:%d" % port
    be = ["127.0.0.1:%d" % p for p in BACKENDS]
    if name in QUILLS:
        quill_bin = quill_bins[name]
        if mode == "tcp":
            return [quill_bin, "-r", "-x", str(MAXCONN), "--workers", str(WORKERS), listen] + be
        if mode == "http":
            return [quill_bin, "-r", "-x", str(MAXCONN), "--workers", str(WORKERS), "-H", listen] + be
        if mode == "tls":
            return [quill_bin, "-f", "--config", os.path.join(work, "tls-%s.toml" % name)]
        if mode == "static":
            return [quill_bin, "serve", os.path.join(work, "www"), "--listen", listen, "--workers", str(WORKERS)]
    if name == "haproxy":
        return ["haproxy", "-db", "-f", os.path.join(work, "%s-haproxy.cfg" % mode)]
    if name == "nginx":
        return ["nginx", "-p", work + "/", "-c", os.path.join(work, "%s-nginx.conf" % mode),
                "-e", os.path.join(work, "%s-nginx.err" % mode)]
    if name == "h2o":
        return ["h2o", "-c", os.path.join(work, "h2o-" + mode, "h2o.conf")]
    raise ValueError((mode, name))


# ---------------------------------------------------------------- helpers

def tls_context():
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    return ctx


def tls_get(port, path=PATH, timeout=5.0):
    """One HTTP/1.1 GET over TLS (no ALPN offered, as wrk): (status, body length, 'TLSv1.3 CIPHER')
    or (None, error, None)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
            with tls_context().wrap_socket(raw) as s:
                s.sendall(("GET %s HTTP/1.1\r\nHost: localhost\r\n\r\n" % path).encode())
                status, n = instructions.read_response(s)
                return status, n, "%s %s" % (s.version(), s.cipher()[0])
    except (OSError, ValueError, IndexError, RuntimeError) as e:
        return None, "%s: %s" % (type(e).__name__, e), None


def children_cpu():
    """(user, system) seconds of the reaped children so far: the change around one client run is
    that client's own CPU (nothing else is reaped meanwhile: servers are reaped when stopped)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime, ru.ru_stime


def machine_ticks():
    """/proc/stat's cpu line: busy (user+nice+system+irq+softirq), softirq and steal ticks."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return {"busy": user + nice + system + irq + softirq, "softirq": softirq, "steal": steal}


def kthread_ticks():
    """utime+stime ticks of the kernel's threads (kthreadd, pid 2, and its children: ksoftirqd,
    kworkers, ...): kernel work done for this traffic outside the processes that caused it."""
    total = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = harness.proc_stat(int(name))
            if st and (name == "2" or st[1] == "2"):
                total += int(st[11]) + int(st[12])
    return total


def loadavg():
    return " ".join(open("/proc/loadavg").read().split()[:3])


class Refused(Exception):
    """A candidate did not come up (exited at start, did not listen, or answered wrong)."""


class Candidate:
    def __init__(self, mode, name, bench):
        self.mode, self.name, self.bench = mode, name, bench
        self.port = port_of(mode, name)
        self.proc = None
        self.negotiated = None

    @property
    def label(self):
        return "%s/%s" % (self.mode, self.name)

    def start(self):
        if harness.port_open(self.port):
            raise RuntimeError("port %d already in use before starting %s" % (self.port, self.label))
        cmd = candidate_cmd(self.mode, self.name, self.bench.work, self.bench.quill_bins)
        self.proc = self.bench.procs.start("%s-%s" % (CONFIG_OF.get(self.mode, self.mode), self.name), cmd)
        if not harness.wait_ready(self.port, self.proc):
            exited = self.proc.poll()
            tail = self.log_tail()
            self.stop()
            lines = [x for x in tail.splitlines() if x.strip() and not x.startswith("=== ")]
            raise Refused("%s exited at start with status %s: %s  (command: %s)" % (
                self.label, exited, lines[-1] if lines else "(no output)", " ".join(cmd))
                if exited is not None else "%s did not listen on %d within 15 s" % (self.label, self.port))
        if self.mode == "tls":
            status, n, self.negotiated = tls_get(self.port)
            ok = status == 200 and n == SIZE and (self.negotiated or "").startswith("TLSv1.3 ")
        else:
            status, n = harness.http_get(self.port, PATH)
            ok = status == 200 and n == SIZE
        if not ok:
            self.stop()
            raise Refused("%s: GET %s gave %s %s (%s)" % (self.label, PATH, status, n, self.negotiated))
        time.sleep(0.2)

    def log_tail(self):
        name = "%s-%s" % (CONFIG_OF.get(self.mode, self.mode), self.name)
        return harness.file_tail(os.path.join(self.bench.work, name + ".log"))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def pids(self):
        return harness.descendants(self.proc.pid) if self.proc else []

    def stop(self):
        if self.proc is not None:
            # Quill drains on the first SIGTERM and exits at once on the second.
            self.bench.procs.stop(self.proc, (signal.SIGTERM, signal.SIGTERM), wait=10)
            self.proc = None


# ---------------------------------------------------------------- the benchmark

class Bench:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.procs = harness.Procs(self.work)
        self.results = {"runs": [], "syscalls": [], "callgrind": [], "failures": [], "negotiated": {}}
        self.refused = {}
        self.backend_procs = []

    def start_backends(self):
        self.backend_procs += harness.start_nginx_backends(self.procs, self.work, BACKENDS,
                                                           prefix=BATCH if self.args.batch_peers else ())
        time.sleep(0.3)
        for port in BACKENDS:
            got = harness.http_get(port, PATH)
            if got != (200, SIZE):
                raise RuntimeError("backend %d %s returned %s" % (port, PATH, got))

    def backend_pids(self):
        return [p for b in self.backend_procs for p in harness.descendants(b.pid)]

    def start_candidate(self, mode, name, phase, rnd=None):
        key = "%s/%s" % (mode, name)
        if key in self.refused:
            return None
        c = Candidate(mode, name, self)
        try:
            c.start()
        except Refused as e:
            log("NOT measured: %s" % e)
            self.refused[key] = str(e)
            self.results["failures"].append({"round": rnd, "mode": mode, "candidate": name, "phase": phase,
                                             "error": str(e)})
            return None
        if c.negotiated:
            self.results["negotiated"].setdefault(key, c.negotiated)
        return c

    def client_cmds(self, c, seconds=None):
        """(warm-up, measured) client commands for candidate c; `seconds`: a time-bounded run (the
        strace window) instead of the measured one. Under SCHED_BATCH with --batch-peers (see
        BATCH)."""
        scheme = "https" if c.mode == "tls" else "http"
        url = "%s://127.0.0.1:%d%s" % (scheme, c.port, PATH)
        if c.mode == "http-close":
            warm = ["ab", "-r", "-s", "10", "-n", "1000", "-c", str(CONCURRENCY), url]
            if seconds:
                cmd = ["ab", "-r", "-s", "10", "-t", str(seconds), "-n", "1000000", "-c", str(CONCURRENCY), url]
            else:
                cmd = ["ab", "-r", "-s", "10", "-n", str(self.args.ab_requests), "-c", str(CONCURRENCY), url]
        else:
            warm = ["wrk", "-t1", "-c%d" % CONCURRENCY, "-d1s", url]
            cmd = ["wrk", "-t1", "-c%d" % CONCURRENCY, "-d%ds" % (seconds or self.args.duration), "--latency", url]
        prefix = list(BATCH) if self.args.batch_peers else []
        return prefix + warm, prefix + cmd

    @staticmethod
    def parser(mode):
        return harness.parse_ab if mode == "http-close" else harness.parse_wrk

    # -- 1. CPU per request, user and kernel apart
    def measure(self, c, rnd):
        warm, cmd = self.client_cmds(c)
        harness.run_client(warm, 60)
        pids, bpids = c.pids(), self.backend_pids()
        la = loadavg()
        x0 = harness.ctx_switches(pids)
        s0, b0, k0, m0, kt0, t0 = (harness.cpu_ticks_split(pids), harness.cpu_ticks_split(bpids), children_cpu(),
                                   machine_ticks(), kthread_ticks(), time.monotonic())
        rc, out = harness.run_client(cmd, self.args.duration + 120)
        s1, b1, k1, m1, kt1, t1 = (harness.cpu_ticks_split(pids), harness.cpu_ticks_split(bpids), children_cpu(),
                                   machine_ticks(), kthread_ticks(), time.monotonic())
        x1 = harness.ctx_switches(pids)
        r = self.parser(c.mode)(out)
        n = r["requests"] or 0
        alive = c.alive()
        wall = t1 - t0
        user, kern = (s1[0] - s0[0]) / CLK_TCK, (s1[1] - s0[1]) / CLK_TCK
        buser, bkern = (b1[0] - b0[0]) / CLK_TCK, (b1[1] - b0[1]) / CLK_TCK
        cuser, ckern = k1[0] - k0[0], k1[1] - k0[1]
        busy = (m1["busy"] - m0["busy"]) / CLK_TCK
        kthreads = (kt1 - kt0) / CLK_TCK
        row = {"round": rnd, "mode": c.mode, "candidate": c.name, "cmd": " ".join(cmd), "exit": rc,
               "wall_s": round(wall, 3), "load_before": la, "pids": pids, "cpu_s": user + kern,
               "user_s": user, "kernel_s": kern, "backend_user_s": buser, "backend_kernel_s": bkern,
               "client_user_s": round(cuser, 4), "client_kernel_s": round(ckern, 4), "machine_busy_s": busy,
               "kthreads_s": kthreads,
               "ctx_switches": x1 - x0,
               "softirq_s": (m1["softirq"] - m0["softirq"]) / CLK_TCK,
               "steal_s": (m1["steal"] - m0["steal"]) / CLK_TCK, **r}
        # Everything else the machine did meanwhile: other processes (other people's builds on a
        # shared machine) and interrupt work that landed on an idle CPU (charged to no process).
        row["others_s"] = busy - (user + kern) - (buser + bkern) - (cuser + ckern) - kthreads
        if n:
            per = 1e6 / n
            row.update({"cpu_us_per_req": (user + kern) * per, "user_us_per_req": user * per,
                        "kernel_us_per_req": kern * per, "backend_us_per_req": (buser + bkern) * per,
                        "backend_user_us_per_req": buser * per, "backend_kernel_us_per_req": bkern * per,
                        "client_us_per_req": (cuser + ckern) * per, "client_user_us_per_req": cuser * per,
                        "client_kernel_us_per_req": ckern * per, "softirq_us_per_req": row["softirq_s"] * per,
                        "steal_us_per_req": row["steal_s"] * per,
                        "kthreads_us_per_req": kthreads * per, "ctx_per_req": (x1 - x0) / n,
                        "others_us_per_req": row["others_s"] * per})
        row["cores"] = (user + kern) / wall if wall else None
        row["others_cores"] = row["others_s"] / wall if wall else None
        # Quiet: other work took at most --quiet-cores of the 2 cores during the run. The tables use
        # a candidate's quiet runs when it has any (a build beside the benchmark takes a whole core).
        row["quiet"] = row["others_cores"] is not None and row["others_cores"] <= self.args.quiet_cores
        row["valid"] = bool(r["rps"] and n and alive and r["errors"] <= 0.01 * n)
        if not alive:
            self.results["failures"].append({"round": rnd, "mode": c.mode, "candidate": c.name,
                                             "phase": "load", "error": "exited during the run",
                                             "log_tail": c.log_tail()[-800:]})
        if not r["rps"]:
            row["output_tail"] = out[-2000:]
            log("  %-18s no result (exit %s): %s" % (c.label, rc, out[-300:].strip()))
        else:
            log("  %-18s %8.0f req/s  CPU %6.2f us/req (user %5.2f, kernel %6.2f)  backends %5.2f  client %5.2f"
                "  kthreads %5.2f  others %5.2f (%.2f cores%s)  errors %d" % (
                    c.label, r["rps"], row.get("cpu_us_per_req") or 0, row.get("user_us_per_req") or 0,
                    row.get("kernel_us_per_req") or 0, row.get("backend_us_per_req") or 0,
                    row.get("client_us_per_req") or 0, row.get("kthreads_us_per_req") or 0,
                    row.get("others_us_per_req") or 0, row["others_cores"] or 0,
                    "" if row["quiet"] else ": disturbed", r["errors"]))
        self.results["runs"].append(row)

    def load_round(self, rnd):
        for mode in self.args.modes:
            names = [n for n in CANDIDATES[mode] if n in self.args.only]
            if not names:
                continue
            k = (rnd - 1) % len(names)
            order = names[k:] + names[:k]
            log("round %d/%d, %s: %s" % (rnd, self.args.rounds, mode, " ".join(order)))
            running = {}
            try:
                for name in order:
                    c = self.start_candidate(mode, name, "start", rnd)
                    if c is not None:
                        running[name] = c
                for name in order:
                    c = running.get(name)
                    if c is None:
                        continue
                    if not c.alive():
                        self.results["failures"].append({"round": rnd, "mode": mode, "candidate": name,
                                                         "phase": "before the load", "error": "exited",
                                                         "log_tail": c.log_tail()[-800:]})
                        continue
                    self.measure(c, rnd)
            finally:
                for c in running.values():
                    c.stop()

    # -- 2. system calls per request
    def syscalls_one(self, mode, name):
        c = self.start_candidate(mode, name, "syscalls")
        if c is None:
            return
        try:
            warm, cmd = self.client_cmds(c, seconds=self.args.strace_duration)
            harness.run_client(warm, 60)
            time.sleep(0.3)
            pids = c.pids()
            # harness.Bench.strace_window needs only .work and .procs.pidfile of its self.
            calls, total, window, out = harness.Bench.strace_window(self, pids, load_cmd=cmd)
            r = self.parser(mode)(out)
            n = r["requests"]
            if not n or r["errors"] > 0.01 * n:
                raise RuntimeError("the client under strace completed %s requests with %s errors: %s" % (
                    n, r["errors"], out[-300:].strip()))
            top = sorted(calls.items(), key=lambda kv: -kv[1])[:8]
            row = {"mode": mode, "candidate": name, "cmd": " ".join(cmd), "requests": n,
                   "rps_traced": r["rps"], "window_s": round(window, 3), "calls": total,
                   "per_request": total / n, "connections": n if mode == "http-close" else CONCURRENCY,
                   "top": [[k, round(v / n, 3)] for k, v in top if v / n >= 0.0005],
                   "by_syscall": calls, "pids": pids}
            self.results["syscalls"].append(row)
            log("  syscalls %-18s %.2f per request over %d requests (top %s)" % (
                c.label, row["per_request"], n, row["top"][:4]))
        except RuntimeError as e:
            log("  %s syscalls: %s" % (c.label, e))
            self.results["failures"].append({"mode": mode, "candidate": name, "phase": "syscalls",
                                             "error": str(e)})
        finally:
            c.stop()
            time.sleep(0.5)

    # -- 3. Quill's instructions per request (callgrind)
    def callgrind_one(self, mode, name):
        """Quill (`name`: quill or quill-base) with one worker under callgrind, N1 then N2
        requests: (Ir(N2) - Ir(N1)) / (N2 - N1)."""
        n1, n2 = self.args.callgrind_n1, self.args.callgrind_n1 + self.args.callgrind_requests
        port, be = CALLGRIND_PORT, "127.0.0.1:%d" % (CALLGRIND_PORT + 1)
        listen = "127.0.0.1:%d" % port
        q = self.quill_bins[name]
        if mode == "tcp":
            argv = [q, "--workers", "1", "-r", listen, be]
        elif mode in ("http", "http-close"):
            argv = [q, "--workers", "1", "-r", "-H", listen, be]
        elif mode == "tls":
            toml = os.path.join(self.work, "callgrind-tls.toml")
            with open(toml, "w") as f:
                f.write(quill_toml(port, [be], self.cert, self.key, workers=1))
            argv = [q, "-f", "--config", toml]
        else:
            # `quill serve` as a route of a listener, with `symlinks = "anywhere"`: valgrind 3.19
            # does not know openat2 (the default `inside` opens with RESOLVE_BENEATH) and answers
            # ENOSYS, a 404. Files are opened once and cached, so the cost per request is the same.
            toml = os.path.join(self.work, "callgrind-static.toml")
            with open(toml, "w") as f:
                f.write('workers = 1\n[[listener]]\nname = "floor"\nlisten = "%s"\nprotocol = "http"\n'
                        '[[listener.route]]\nstatic = { root = "%s", symlinks = "anywhere" }\n'
                        % (listen, os.path.join(self.work, "www")))
            argv = [q, "-f", "--config", toml]
        row = {"mode": mode, "candidate": name, "n1": n1, "n2": n2,
               "cmd": " ".join(["quill"] + argv[1:]).replace(self.work, "WORK")}
        try:
            i1 = self.callgrind_run(argv, mode, n1)
            i2 = self.callgrind_run(argv, mode, n2)
            row.update({"ir_n1": i1, "ir_n2": i2, "per_request": (i2 - i1) / (n2 - n1)})
            log("  callgrind %-10s %-10s %s Ir at %d, %s at %d: %s instructions per request" % (
                mode, name, fmt(i1), n1, fmt(i2), n2, fmt(row["per_request"])))
        except RuntimeError as e:
            row["error"] = str(e)
            log("  callgrind %s: %s" % (mode, e))
            self.results["failures"].append({"mode": mode, "candidate": name, "phase": "callgrind",
                                             "error": str(e)})
        self.results["callgrind"].append(row)

    def callgrind_run(self, argv, mode, n):
        out = os.path.join(self.work, "cg", "%s.%d.out" % (mode, n))
        os.makedirs(os.path.dirname(out), exist_ok=True)
        p = self.procs.start("callgrind-" + mode, ["valgrind", "--tool=callgrind",
                                                   "--callgrind-out-file=" + out] + argv)
        try:
            if not harness.wait_ready(CALLGRIND_PORT, p, timeout=60):
                raise RuntimeError("quill under valgrind did not listen on %d within 60 s (see %s/callgrind-%s.log)"
                                   % (CALLGRIND_PORT, self.work, mode))
            time.sleep(0.5)
            callgrind_client(mode, CALLGRIND_PORT, n)
            time.sleep(0.5)
        except (OSError, RuntimeError) as e:
            raise RuntimeError("%s client: %s" % (mode, e))
        finally:
            self.procs.stop(p, (signal.SIGTERM, signal.SIGTERM), wait=60)
            total = 0
            for name in os.listdir(os.path.dirname(out)):
                if name.startswith(os.path.basename(out)):
                    with open(os.path.join(os.path.dirname(out), name)) as f:
                        for line in f:
                            if line.startswith(("summary:", "totals:")):
                                total = max(total, int(line.split()[1]))
                    os.remove(os.path.join(os.path.dirname(out), name))
        if not total:
            raise RuntimeError("no callgrind summary in %s" % out)
        return total

    def run(self):
        t0 = time.monotonic()
        self.start_backends()
        for rnd in range(1, self.args.rounds + 1):
            self.load_round(rnd)
        if self.args.strace_duration:
            log("system calls per request (strace -f -c, %d s of load)" % self.args.strace_duration)
            for mode in self.args.modes:
                for name in CANDIDATES[mode]:
                    if name in self.args.only:
                        self.syscalls_one(mode, name)
        if self.args.callgrind_requests and any(q in self.args.only for q in QUILLS):
            if not shutil.which("valgrind"):
                self.results["failures"].append({"phase": "callgrind", "error": "valgrind is not installed"})
            else:
                log("Quill's instructions per request (callgrind, one worker)")
                stop = threading.Event()
                bsock = socket.socket()
                bsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                bsock.bind(("127.0.0.1", CALLGRIND_PORT + 1))
                bsock.listen(1024)
                # bench/instructions.py's backend: every request answered with 1 KiB, kept alive,
                # under nginx's eight-field head (as the wall-clock runs' backends) or a one-field one.
                head = instructions.NGINX_RESPONSE if self.args.callgrind_head == "nginx" else instructions.RESPONSE
                threading.Thread(target=instructions.http_backend, args=(bsock, stop, head), daemon=True).start()
                try:
                    for mode in self.args.modes:
                        for name in QUILLS:
                            if name in self.args.only:
                                self.callgrind_one(mode, name)
                finally:
                    stop.set()
                    bsock.close()
        self.results["elapsed_s"] = round(time.monotonic() - t0, 1)


def callgrind_client(mode, port, n):
    """n requests for GET /1k: on one kept-alive connection (over TLS in tls mode), or a new
    connection per request (http-close). Every response is read whole."""
    req = ("GET %s HTTP/1.1\r\nHost: bench\r\n\r\n" % PATH).encode()
    deadline = time.monotonic() + 600
    if mode == "http-close":
        for _ in range(n):
            with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
                s.sendall(req)
                instructions.read_response(s)
            if time.monotonic() > deadline:
                raise RuntimeError("more than 600 s for %d requests" % n)
        return
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    if mode == "tls":
        s = tls_context().wrap_socket(s)
    try:
        for _ in range(n):
            s.sendall(req)
            status, size = instructions.read_response(s)
            if status != 200 or size != SIZE:
                raise RuntimeError("got %s with %d bytes" % (status, size))
            if time.monotonic() > deadline:
                raise RuntimeError("more than 600 s for %d requests" % n)
    finally:
        s.close()


# ---------------------------------------------------------------- tables

def valid_rows(results, mode, cand):
    return [r for r in results["runs"] if r["mode"] == mode and r["candidate"] == cand and r["valid"]]


def used_rows(results, mode, cand):
    """The runs a candidate's figures come from: its quiet valid runs, or when it has none all its
    valid runs."""
    rows = valid_rows(results, mode, cand)
    return [r for r in rows if r.get("quiet")] or rows


def med(results, mode, cand, key):
    return median([r.get(key) for r in used_rows(results, mode, cand)])


def span(results, mode, cand, key, nd=1):
    xs = [r[key] for r in valid_rows(results, mode, cand) if r.get(key) is not None]
    if not xs:
        return "–"
    if len(xs) == 1:
        return fmt(xs[0], nd)
    return "%s–%s" % (fmt(min(xs), nd), fmt(max(xs), nd))


def above_floor(results, mode, cand, key="cpu_us_per_req"):
    """cand's median `key` - Quill TCP mode's median `key` (each over the runs `used_rows` picks)."""
    a, b = med(results, mode, cand, key), med(results, *FLOOR, key)
    return None if a is None or b is None else a - b


def summarize(results, modes, only):
    out = []
    sys_of = {(r["mode"], r["candidate"]): r for r in results["syscalls"]}
    cg_of = {(r["mode"], r.get("candidate", "quill")): r.get("per_request") for r in results["callgrind"]}
    for mode in modes:
        for cand in CANDIDATES[mode]:
            if cand not in only:
                continue
            s = sys_of.get((mode, cand), {})
            valid = valid_rows(results, mode, cand)
            row = {"mode": mode, "candidate": cand, "runs": len(valid),
                   "quiet_runs": len([r for r in valid if r.get("quiet")]),
                   "syscalls_per_req": s.get("per_request"),
                   "instructions_per_req": cg_of.get((mode, cand)),
                   "above_floor_us": above_floor(results, mode, cand),
                   "user_above_floor_us": above_floor(results, mode, cand, "user_us_per_req"),
                   "kernel_above_floor_us": above_floor(results, mode, cand, "kernel_us_per_req")}
            for key in ("rps", "cpu_us_per_req", "user_us_per_req", "kernel_us_per_req", "backend_us_per_req",
                        "client_us_per_req", "softirq_us_per_req", "steal_us_per_req", "kthreads_us_per_req",
                        "others_us_per_req", "others_cores", "ctx_per_req", "cores"):
                row[key] = med(results, mode, cand, key)
            out.append(row)
    return out


def render(results, summary, meta):
    out = []
    w = out.append
    w("# The floor: user and kernel time per request — %s" % meta["date"])
    w("")
    for name, why in sorted(meta.get("refused", {}).items()):
        w("**%s was NOT measured: %s**" % (name, why))
        w("")
    if meta.get("interrupted"):
        w("**The run was interrupted or its set-up failed: the tables are partial.**")
        w("")
    w("Command: `%s`  " % meta["command"])
    w("Rounds: %d; wrk %d s, ab %s requests; strace windows %s s; callgrind %s requests.  " % (
        meta["rounds"], meta["duration"], fmt(meta["ab_requests"]), meta["strace_duration"] or "(skipped)",
        "%d and %d" % (meta["callgrind_n1"], meta["callgrind_n1"] + meta["callgrind_requests"])
        if meta["callgrind_requests"] else "(skipped)"))
    w("Machine: %s, %d CPUs (%s); load average %s before, %s after; elapsed %s s.  " % (
        meta["kernel"], meta["cpus"], meta["cpu_model"], meta["load_before"], meta.get("load_after", "–"),
        results.get("elapsed_s", "–")))
    w("Versions: %s.  " % "; ".join("%s %s" % kv for kv in sorted(meta["versions"].items())))
    if meta.get("batch_peers"):
        w("**The backends and the load generator ran under SCHED_BATCH (`--batch-peers`)**: waking them does "
          "not preempt the proxy, which approximates, for wake-up preemption only, a machine where they have "
          "cores of their own.  ")
    if meta.get("quill_src"):
        w("Quill binary: `%s`.  " % meta["quill_src"])
    if meta.get("quill_base_src"):
        w("quill-base (the build before): `%s`.  " % meta["quill_base_src"])
    if results.get("negotiated"):
        w("TLS negotiated (a Python client, no ALPN, as wrk): %s." % "; ".join(
            "%s %s" % kv for kv in sorted(results["negotiated"].items())))
    w("")
    w("## CPU per request, user and kernel apart")
    w("")
    w("Medians over the candidate's quiet runs: those during which other work on the machine (not the proxy, "
      "the backends, the client or the kernel's threads) took at most %s of a core; a candidate with no quiet "
      "run is marked † and its medians are over all its valid runs. Other work slows everything on 2 cores, "
      "req/s most of all; compare CPU per request. **above floor** = the candidate's median CPU µs/req − Quill "
      "TCP mode's; **of which kernel** = the same for kernel time alone." % meta["quiet_cores"])
    w("")
    w("**syscalls/req**: `strace -f -c` during "
      "a %s s window of the same load, nothing subtracted. **instr/req**: Quill's own user-space instructions "
      "(callgrind, one worker). **backends** and **client**: the CPU per request of the two nginx backends and "
      "of wrk or ab, which share the 2 cores with the proxy." % (meta["strace_duration"] or "–"))
    w("")
    w("| mode | candidate | req/s | CPU µs/req | user | kernel | above floor | of which kernel | syscalls/req "
      "| instr/req | backends µs/req | client µs/req |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in summary:
        floor = (r["mode"], r["candidate"]) == FLOOR
        name = ("**%s**" % r["candidate"]) if r["candidate"] in QUILLS else r["candidate"]
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["mode"], name + ("" if r["quiet_runs"] else " †"),
            fmt(r["rps"]), fmt(r["cpu_us_per_req"], 2), fmt(r["user_us_per_req"], 2),
            fmt(r["kernel_us_per_req"], 2), "(floor)" if floor else signed(r["above_floor_us"]),
            "–" if floor else signed(r["kernel_above_floor_us"]), fmt(r["syscalls_per_req"], 2),
            fmt(r["instructions_per_req"]), fmt(r["backend_us_per_req"], 2), fmt(r["client_us_per_req"], 2)))
    w("")
    w("Modes: %s." % "; ".join("**%s** %s" % (m, TITLES[m]) for m in meta["modes"]))
    w("")
    out.extend(render_rounds(results, meta["modes"]))
    w("## The machine during each run")
    w("")
    w("Medians over the same runs as above, µs per request of the run: **softirq** and **steal** for the whole machine "
      "(/proc/stat; with tick accounting, softirq time is also charged to whichever process it interrupted, "
      "so it is partly inside the kernel figures above); **kthreads**: the kernel's own threads (ksoftirqd, "
      "kworkers; kernel work for this traffic done outside the processes that caused it); **others** = the "
      "machine's busy time minus the proxy's, the backends', the client's and the kernel threads': other "
      "processes (other work on a shared machine) and interrupts that landed on an idle CPU; **others' cores** = "
      "that in cores, the quiet test; **quiet / valid**: the candidate's quiet runs and valid runs. **cores** = the proxy's CPU "
      "seconds / wall seconds; **load before**: the 1-minute load average before each run (this benchmark's own "
      "processes count in it); **ctx sw/req**: the proxy's context switches (voluntary and involuntary, all its "
      "threads) per request: a worker that sleeps and is woken per event pays the kernel for each. **CPU range**: the proxy's CPU µs/req, lowest–highest over the valid runs.")
    w("")
    w("| mode | candidate | quiet / valid | cores | ctx sw/req | CPU range | softirq | steal | kthreads | others | others' cores, each run | load before |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for r in summary:
        runs = [x for x in results["runs"] if x["mode"] == r["mode"] and x["candidate"] == r["candidate"]]
        w("| %s | %s | %d / %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["mode"], r["candidate"], r["quiet_runs"], r["runs"], fmt(r["cores"], 2), fmt(r["ctx_per_req"], 3),
            span(results, r["mode"], r["candidate"], "cpu_us_per_req", 2), fmt(r["softirq_us_per_req"], 2),
            fmt(r["steal_us_per_req"], 2), fmt(r["kthreads_us_per_req"], 2), fmt(r["others_us_per_req"], 2),
            ", ".join(fmt(x.get("others_cores"), 2) for x in runs),
            ", ".join(x["load_before"].split()[0] for x in runs)))
    w("")
    if results["syscalls"]:
        w("## System calls per request")
        w("")
        w("Once per candidate and mode, started fresh, after the warm-up: `strace -f -c -p PID…` attached to "
          "all the proxy's processes and threads while `wrk -t1 -c50 -d%ss` (or `ab -r -s 10 -t %s -n 1000000 "
          "-c 50`) runs; the calls / the requests the client completed. Nothing is subtracted: the window "
          "includes opening wrk's 50 connections (and their TLS handshakes) and the proxy's timers. strace "
          "slows the proxy several times over: the traced req/s means nothing, only the counts." % (
              meta["strace_duration"], meta["strace_duration"]))
        w("")
        w("| mode | candidate | syscalls/req | requests | connections | window s | top calls per request |")
        w("|---|---|---:|---:|---:|---:|---|")
        for r in results["syscalls"]:
            w("| %s | %s | %s | %s | %s | %s | %s |" % (
                r["mode"], r["candidate"], fmt(r["per_request"], 2), fmt(r["requests"]), fmt(r["connections"]),
                fmt(r["window_s"], 1), ", ".join("%s %s" % (k, v) for k, v in r["top"][:6])))
        w("")
    if results["callgrind"]:
        w("## Quill's instructions per request (callgrind)")
        w("")
        w("`valgrind --tool=callgrind` on Quill with one worker in front of bench/instructions.py's Python "
          "backend (1 KiB, kept alive, under %s) on 127.0.0.1:%d; a Python client sends N1 then, in a second run, N2 "
          "requests for /1k on one kept-alive connection (a new connection per request in http-close; over "
          "TLS 1.3 in tls); per request = (Ir(N2) − Ir(N1)) / (N2 − N1), so start-up and shut-down cancel. "
          "Instructions are not seconds: they count Quill's own user-space work, whatever the machine is "
          "doing, and none of the kernel's." % (
              "the eight-field head nginx sends with it" if meta.get("callgrind_head", "one") == "nginx"
              else "a one-field head, `Content-Length`", CALLGRIND_PORT + 1))
        w("")
        w("| mode | candidate | instructions/req | Ir at N1 | Ir at N2 | N1, N2 | command |")
        w("|---|---|---:|---:|---:|---|---|")
        for r in results["callgrind"]:
            w("| %s | %s | %s | %s | %s | %d, %d | `%s` |" % (
                r["mode"], r.get("candidate", "quill"),
                fmt(r.get("per_request")) if "error" not in r else "**%s**" % r["error"],
                fmt(r.get("ir_n1")), fmt(r.get("ir_n2")), r["n1"], r["n2"], r["cmd"]))
        w("")
    w("## Configurations")
    w("")
    w("Backends: 2 × nginx (1 worker each, `sendfile on; tcp_nopush on; keepalive_requests 1000000`) on "
      "127.0.0.1:%d and :%d serving `1k`. Candidates (127.0.0.1, 2 workers or threads each): %s. h2o 2.2.5 "
      "takes one `proxy.reverse.url`: h2o sends every request to the first backend, the others alternate "
      "(the backends' CPU is summed over both)." % (BACKENDS[0], BACKENDS[1], "; ".join(
          "%s/%s %d `%s`" % (m, n, p, " ".join(candidate_cmd(m, n, "WORK", {q: q for q in QUILLS})))
          for (m, n), p in sorted(PORTS.items(), key=lambda kv: kv[1]))))
    w("")
    w("What the files say: HAProxy 2.6 `nbthread 2`, `mode tcp` (tcp) or `mode http` with `option "
      "http-keep-alive`, `option forwardfor`, `http-reuse always` (http, tls: `bind … ssl crt … alpn "
      "http/1.1`); nginx 1.22 `worker_processes 2`, `stream { proxy_pass }` (tcp) or `proxy_pass` to an "
      "upstream with `keepalive 256`, `proxy_http_version 1.1`, `Connection \"\"`, X-Forwarded-For (http; "
      "tls: `listen … ssl`, `ssl_protocols TLSv1.2 TLSv1.3`), or `root` with `sendfile on; tcp_nopush on; "
      "open_file_cache` (static); h2o 2.2.5 `num-threads: 2`, `proxy.reverse.url` (http; tls: `ssl:` with "
      "`minimum-version: TLSv1.2`) or `file.dir` (static); Quill's TLS listener: `protocol = \"http\"`, "
      "`[listener.tls] cert/key`, `max_handshakes_per_source = 64` (wrk opens its 50 connections at once "
      "from one address). No server caps the requests of a client connection (nginx: `keepalive_requests "
      "1000000`); no access logs. http-close runs the http configurations (each started "
      "fresh) under ab.")
    w("")
    if results["failures"]:
        w("## Failures")
        w("")
        for f in results["failures"]:
            w("- %s" % json.dumps({k: v for k, v in f.items() if k != "log_tail"}, ensure_ascii=False))
            if f.get("log_tail"):
                w("  ```\n  %s\n  ```" % f["log_tail"].strip().replace("\n", "\n  "))
        w("")
    return "\n".join(out)


def signed(v):
    return "–" if v is None else "%+.2f" % v


def round_by_round(results, modes):
    """Figures taken within each round, where the machine's drift between rounds cancels: each
    Quill build's HTTP mode minus its own TCP mode (issue 27 point 2's gap), and Quill's CPU per
    request over quill-base's in each mode. Rows: (label, [value per round], median); values None
    where a run is missing or not valid."""
    rounds = sorted({r["round"] for r in results["runs"]})

    def cpu(rnd, mode, cand):
        rows = [r for r in results["runs"] if r["round"] == rnd and r["mode"] == mode
                and r["candidate"] == cand and r["valid"]]
        return rows[0]["cpu_us_per_req"] if rows else None

    out = []
    if "tcp" in modes and "http" in modes:
        for cand in QUILLS:
            gaps = [None if cpu(n, "http", cand) is None or cpu(n, "tcp", cand) is None
                    else cpu(n, "http", cand) - cpu(n, "tcp", cand) for n in rounds]
            if any(g is not None for g in gaps):
                out.append(("%s: http − tcp (µs)" % cand, gaps, median(gaps), 2))
    for mode in modes:
        ratios = [None if cpu(n, mode, "quill") is None or not cpu(n, mode, "quill-base")
                  else cpu(n, mode, "quill") / cpu(n, mode, "quill-base") for n in rounds]
        if any(x is not None for x in ratios):
            out.append(("%s: quill / quill-base" % mode, ratios, median(ratios), 3))
    return rounds, out


def render_rounds(results, modes):
    """The round-by-round table ([`round_by_round`]), or nothing when there is no pair to show."""
    rounds, rows = round_by_round(results, modes)
    if not rows:
        return []
    out = ["## Round by round", "",
           "Pairs taken within one round, so that the machine's drift between rounds (on a shared virtual machine, "
           "tens of percent within minutes) cancels: Quill's HTTP keep-alive CPU per request minus its own TCP "
           "mode's (issue 27 point 2: at most 1.5 µs), and each mode's CPU per request of Quill over the build "
           "before. Valid runs, quiet or not.", "",
           "| pair | " + " | ".join("round %d" % n for n in rounds) + " | median |",
           "|---|" + "---:|" * (len(rounds) + 1)]
    for label, values, mid, nd in rows:
        out.append("| %s | %s | %s |" % (label, " | ".join(fmt(v, nd) for v in values), fmt(mid, nd)))
    out.append("")
    return out


# ---------------------------------------------------------------- main

def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--quill-bin")
    p.add_argument("--quill-src", default="", help="where --quill-bin was copied from (for the report)")
    p.add_argument("--quill-base-bin", help="the build before, measured as candidate quill-base")
    p.add_argument("--quill-base-src", default="", help="where --quill-base-bin was copied from")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=5, help="seconds of each measured wrk run")
    p.add_argument("--ab-requests", type=int, default=30000)
    p.add_argument("--strace-duration", type=int, default=3, help="seconds of load under strace; 0 skips")
    p.add_argument("--callgrind-requests", type=int, default=1000, help="N2 - N1; 0 skips callgrind")
    p.add_argument("--callgrind-n1", type=int, default=300)
    p.add_argument("--callgrind-head", choices=["nginx", "one"], default="nginx",
                   help="the callgrind backend's response head: nginx's eight fields, or Content-Length alone")
    p.add_argument("--quiet-cores", type=float, default=0.2,
                   help="a run is quiet when other work took at most this many cores during it")
    p.add_argument("--only", default=",".join(ALL_NAMES))
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    p.add_argument("--batch-peers", action="store_true",
                   help="the backends and the load generator under SCHED_BATCH (see BATCH)")
    p.add_argument("--command", default="bash bench/floor.sh")
    a = p.parse_args(argv)
    a.only = [n.strip() for n in a.only.split(",") if n.strip()]
    for n in a.only:
        if n not in ALL_NAMES:
            p.error("unknown candidate %r (known: %s)" % (n, ", ".join(ALL_NAMES)))
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    for m in modes:
        if m not in MODES:
            p.error("unknown mode %r (known: %s)" % (m, ", ".join(MODES)))
    a.modes = [m for m in MODES if m in modes]
    if not 1 <= a.rounds <= 20 or not 1 <= a.duration <= 600 or not 100 <= a.ab_requests <= 10000000:
        p.error("--rounds 1..20, --duration 1..600, --ab-requests 100..10000000")
    if not 0 <= a.strace_duration <= 60 or not 0 <= a.callgrind_requests <= 100000 or not 1 <= a.callgrind_n1 <= 100000:
        p.error("--strace-duration 0..60, --callgrind-requests 0..100000, --callgrind-n1 1..100000")
    refused = {}
    if "quill" in a.only and not a.quill_bin:
        refused["quill"] = "no working quill binary (the build or `quill --version` failed)"
        a.only.remove("quill")
    if "quill-base" in a.only and not a.quill_base_bin:
        refused["quill-base"] = "no quill-base binary (set QUILL_BASE_BIN to the build before)"
        a.only.remove("quill-base")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)

    cert, key, both = make_cert(a.work)
    write_configs(a.work, cert, key, both)
    os.chmod(a.work, 0o755)  # the backends' workers and h2o run as nobody
    bench = Bench(a)
    bench.cert, bench.key = cert, key
    bench.quill_bins = {"quill": a.quill_bin, "quill-base": a.quill_base_bin}
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": a.command, "rounds": a.rounds, "duration": a.duration, "ab_requests": a.ab_requests,
            "strace_duration": a.strace_duration, "callgrind_requests": a.callgrind_requests,
            "callgrind_n1": a.callgrind_n1, "callgrind_head": a.callgrind_head, "quiet_cores": a.quiet_cores, "batch_peers": a.batch_peers, "modes": a.modes, "candidates": a.only,
            "kernel": "Linux " + platform.release(), "cpus": os.cpu_count(), "cpu_model": harness.cpu_model(),
            "load_before": loadavg(), "versions": harness.versions(
                a.quill_bin, ["quill"], pkgs=("haproxy", "nginx", "libnginx-mod-stream", "h2o", "wrk",
                                             "apache2-utils", "openssl", "strace", "valgrind")), "quill_src": a.quill_src, "quill_base_src": a.quill_base_src,
            "ports": {"%s/%s" % k: v for k, v in PORTS.items()}, "backends": list(BACKENDS)}
    interrupted = harness.run_guarded(bench)
    meta["load_after"] = loadavg()
    refused.update(bench.refused)
    meta["refused"] = refused
    meta["interrupted"] = interrupted
    summary = summarize(bench.results, a.modes, a.only)
    md = render(bench.results, summary, meta)
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "floor.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(a.results, "floor.json"), "w") as f:
        json.dump({"meta": meta, "summary": summary, **bench.results}, f, indent=1, default=str)
    print(md)
    if interrupted:
        return 1
    return 3 if refused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
