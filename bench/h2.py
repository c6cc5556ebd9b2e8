#!/usr/bin/env python3
"""HTTP/2 to clients (called by bench/h2.sh; the targets of issue 26 and docs/benchmarks.md#http2):
Quill (`protocol = "http"` with `[listener.tls]`, ALPN h2 by default once HTTP/2 lands, 2 workers)
against HAProxy 2.6 (`mode http`, `nbthread 2`, `bind … ssl crt … alpn h2,http/1.1`, `http-reuse
always`), nginx 1.22 (2 workers, `listen … ssl http2`, upstream `keepalive`) and h2o 2.2.5
(`num-threads: 2`, `proxy.reverse.url`), each terminating TLS 1.3 with one ECDSA P-256 certificate
made at bench time, in front of the same nginx backends (127.0.0.1:9061 and :9062, plain HTTP/1.1,
1 worker each) serving 1 KiB and 1 MiB files. h2o 2.2.5 takes one `proxy.reverse.url` (a sequence
is refused: "argument cannot be a sequence"), so it sends everything to the first backend.

Every candidate is first probed with h2load offering only ALPN h2 (`--npn-list=h2`, 20 requests of
/1k and 2 of /1m): it must negotiate h2 over TLS 1.3 and answer every request with a 2xx and the
whole body. A candidate that exits at start, does not listen, or fails the probe (Quill before its
HTTP/2 lands: ALPN http/1.1 only) is reported NOT measured and the exit status is 3.

Loads, in interleaved rounds (every candidate of a round started fresh at its start; within each
load every candidate in turn, the order rotating each round): `h2load --npn-list=h2 -tT -cC -mM -DS`
after a 1 s warm-up run of the same shape (the warm-up does the handshakes of that shape once; the
measured run makes its own C connections again, a few handshakes among 10^4-10^5 requests):
  mux1k  -c50 -m10 /1k   multiplexed 1 KiB;
  m1     -c200 -m1 /1k   one stream per connection (h1-like);
  dl1m   -c10 -m1 /1m    1 MiB downloads.
For each: req/s and h2load's own checks (negotiated protocol, requests succeeded = total, status
codes); CPU per request (or per GiB for dl1m) of the proxy = the change in utime+stime
(/proc/PID/stat) summed over all its processes (all threads) during the measured run / the
requests that succeeded (with -D, those completed in time); the same for the two backends (all their processes) and for h2load (its rusage as a
reaped child), since all three share the 2 CPUs; the proxy's cores (CPU / wall) and h2load's cores
per thread (>= 0.90: h2load set the pace, "sat"; rerun with --threads 2).

Then, once per candidate on a fresh start: N idle HTTP/2 TLS connections, each after one complete
request (bench/idle_hold.py --h2 /1k, spread over processes of at most 3,000 connections each, from
127.0.0.2+); user-space memory per connection = (RssAnon with them - RssAnon before) / connections
still open, summed over the proxy's processes. And the system calls per multiplexed request: after
a 1 s warm-up, `h2load -c50 -m10 -n R` (every request completes) twice with strace attached to all
of the proxy's processes and threads: once `strace -f -c` (all calls; minus an equal window without
load), once `strace -f -yy -e trace=<sends and receives>` so that each send and receive is put on
the client side (the socket's local port is the proxy's) or the server side (its remote port is a
backend's). Per request = calls / the 2xx responses. The windows include the 50 connections'
handshakes and HTTP/2 prefaces (a few calls each, about 0.01 per request at R = 20,000).

h2load does not reconnect after a GOAWAY, so every candidate runs without a cap on requests per
connection (nginx: `keepalive_requests 1000000`; see write_configs for Quill).

Python 3 standard library only; loopback only. Every process it starts is recorded in WORK/pids
(for h2.sh's EXIT trap) and stopped by PID here.
"""

import argparse
import datetime
import json
import os
import platform
import re
import resource
import signal
import socket
import ssl
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402  (bench/harness.py: /proc helpers, Procs, strace window)
from harness import CLK_TCK, fmt, log, median  # noqa: E402

BACKENDS = (9061, 9062)
PORTS = {"quill": 9301, "haproxy": 9302, "nginx": 9303, "h2o": 9304, "quill-base": 9305}
# quill-base: a second Quill binary (--quill-base-bin, e.g. the build before a change) with quill's
# configuration, in the same rounds: a before/after comparison on the same machine at the same time.
ALL_CANDIDATES = ["quill", "haproxy", "nginx", "h2o", "quill-base"]
PEERS = ("haproxy", "nginx", "h2o")
WORKERS = 2
MAXCONN = 9900
SIZES = {"/1k": 1024, "/1m": 1 << 20}
GIB = float(1 << 30)
# name: (path, h2load -c, h2load -m, title)
LOADS = {"mux1k": ("/1k", 50, 10, "multiplexed 1 KiB"),
         "m1": ("/1k", 200, 1, "one stream per connection, 1 KiB"),
         "dl1m": ("/1m", 10, 1, "1 MiB downloads")}
LOAD_ORDER = ["mux1k", "m1", "dl1m"]
SAT = 0.90
IDLE_PER_PROCESS = 3000
SEND_CALLS = ("write", "writev", "pwritev", "pwritev2", "send", "sendto", "sendmsg", "sendmmsg",
              "sendfile", "sendfile64")
RECV_CALLS = ("read", "readv", "preadv", "preadv2", "recv", "recvfrom", "recvmsg", "recvmmsg")
TRACED = SEND_CALLS + RECV_CALLS + ("splice",)


# ---------------------------------------------------------------- certificate and configs

def make_cert(work):
    """An ECDSA P-256 self-signed certificate for localhost / 127.0.0.1: (cert, key, cert+key)."""
    d = os.path.join(work, "certs")
    os.makedirs(d, exist_ok=True)
    cert, key, combined = (os.path.join(d, n) for n in ("ecdsa.pem", "ecdsa.key", "ecdsa.combined.pem"))
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                    "-nodes", "-keyout", key, "-out", cert, "-days", "30", "-subj", "/CN=localhost",
                    "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    with open(combined, "w") as f:  # HAProxy's crt: certificate + key
        f.write(open(cert).read() + open(key).read())
    # h2o started as root reads them before it switches to nobody; readable anyway (a bench key).
    os.chmod(d, 0o755)
    for p in (cert, key, combined):
        os.chmod(p, 0o644)
    return cert, key, combined


def write_configs(work, cert, key, combined):
    harness.write_backends(work, BACKENDS)
    www = os.path.join(work, "www")
    with open(os.path.join(www, "1m"), "wb") as f:
        f.write(b"z" * SIZES["/1m"])
    os.chmod(os.path.join(www, "1m"), 0o644)
    be = ["127.0.0.1:%d" % p for p in BACKENDS]
    with open(os.path.join(work, "haproxy.cfg"), "w") as f:
        f.write(harness.haproxy_http(WORKERS, MAXCONN, PORTS["haproxy"], be,
                                     " ssl crt %s alpn h2,http/1.1" % combined))
    with open(os.path.join(work, "nginx.conf"), "w") as f:
        f.write("""daemon off;
worker_processes {workers};
worker_rlimit_nofile 20000;
pid {w}/nginx.pid;
error_log {w}/nginx.err warn;
events {{ worker_connections 19900; }}
http {{
    access_log off;
    keepalive_timeout 600s;
    keepalive_requests 1000000;
    client_header_timeout 600s;
    upstream be {{ server {be0}; server {be1}; keepalive 256; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port} ssl http2;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {{
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_read_timeout 600s;
        }}
    }}
}}
""".format(workers=WORKERS, w=work, port=PORTS["nginx"], be0=be[0], be1=be[1], cert=cert, key=key))
    # h2o started as root switches to nobody: its own directory is writable by nobody.
    h2o_dir = os.path.join(work, "h2o")
    os.makedirs(h2o_dir, exist_ok=True)
    os.chmod(h2o_dir, 0o777)
    with open(os.path.join(h2o_dir, "h2o.conf"), "w") as f:
        f.write("""num-threads: {workers}
max-connections: 19900
http1-request-timeout: 600
http2-idle-timeout: 600
pid-file: {d}/h2o.pid
error-log: {d}/error.log
listen:
  host: 127.0.0.1
  port: {port}
  ssl:
    certificate-file: {cert}
    key-file: {key}
    minimum-version: TLSv1.2
    ocsp-update-interval: 0
hosts:
  default:
    paths:
      /:
        proxy.reverse.url: http://{be0}/
""".format(workers=WORKERS, d=h2o_dir, port=PORTS["h2o"], cert=cert, key=key, be0=be[0]))
    # h2load does not reconnect after a GOAWAY: with a cap on requests per connection (nginx's
    # default keepalive_requests 1000, hence 1000000 above) every request of that connection past
    # the cap fails. If Quill's HTTP/2 gets such a cap with a default, raise it here as for nginx.
    for name in ("quill", "quill-base"):
        with open(os.path.join(work, name + ".toml"), "w") as f:
            # concentrate = false: every worker accepts, as the peers' threads all do (kept so
            # runs compare with the earlier ones; since 2026-12-03 `concentrate` leaves TLS
            # listeners to every worker anyway, docs/http2.md).
            # max_handshakes_per_source 64: h2load opens its 50 connections at once from one
            # address, and under strace their handshakes are slow enough to pass the default 32
            # in progress per address and worker (Quill then closes the least recently active
            # one, its guard against handshake floods; the peers have none).
            # server_keepalive 256: idle server connections kept per server and worker, as nginx's
            # `keepalive 256` per upstream and worker here (500 streams in flight need more than
            # the default 64, or finished requests' connections are closed and new ones opened).
            f.write("""# written by bench/h2.py (ALPN h2,http/1.1 is the default on TLS HTTP listeners)
workers = {workers}
max_connections = {mc}
concentrate = false
[[listener]]
name = "web"
listen = "127.0.0.1:{port}"
protocol = "http"
mode = ["roundrobin"]
servers = ["{be0}", "{be1}"]
[listener.http]
keepalive_timeout = "600s"
header_timeout = "600s"
server_keepalive = 256
[listener.tls]
cert = "{cert}"
key = "{key}"
max_handshakes_per_source = 64
""".format(workers=WORKERS, mc=MAXCONN, port=PORTS[name], be0=be[0], be1=be[1], cert=cert, key=key))


def candidate_cmd(name, work, quill_bin, quill_base_bin=None):
    if name in ("quill", "quill-base"):
        binary = quill_bin if name == "quill" else quill_base_bin
        return [binary, "-f", "--config", os.path.join(work, name + ".toml")]
    if name == "haproxy":
        return ["haproxy", "-db", "-f", os.path.join(work, "haproxy.cfg")]
    if name == "nginx":
        return ["nginx", "-p", work + "/", "-c", os.path.join(work, "nginx.conf"),
                "-e", os.path.join(work, "nginx.err")]
    if name == "h2o":
        return ["h2o", "-c", os.path.join(work, "h2o", "h2o.conf")]
    raise ValueError(name)


# ---------------------------------------------------------------- h2load

def parse_h2load(out):
    """h2load's summary: req/s, request counts, status codes, what TLS and ALPN negotiated, data
    bytes. `requests` = the requests that succeeded (complete responses; with -D, h2load counts
    the status of a response whose body was still coming when time ran out, but not the request);
    `errors` = failed (errored and timed out included) + non-2xx responses; `all_ok` = every
    request succeeded, none failed, and every status was 2xx."""
    r = {"rps": None, "requests": None, "errors": None, "all_ok": False}
    m = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, (\d+) succeeded, (\d+) failed, "
                  r"(\d+) errored, (\d+) timeout", out)
    if m:
        for k, v in zip(("total", "started", "done", "succeeded", "failed", "errored", "timeout"),
                        m.groups()):
            r[k] = int(v)
    m = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if m:
        r["s2xx"], r["s3xx"], r["s4xx"], r["s5xx"] = (int(x) for x in m.groups())
    if "total" in r and "s2xx" in r:
        non2xx = r["s3xx"] + r["s4xx"] + r["s5xx"]
        r["requests"] = r["succeeded"]
        r["errors"] = r["failed"] + non2xx
        r["all_ok"] = r["total"] > 0 and r["succeeded"] == r["total"] and r["failed"] == 0 and non2xx == 0
    m = re.search(r"traffic: .*?, ([\d.]+\w*) \((\d+)\) data", out)
    if m:
        r["data_bytes"] = int(m.group(2))
    for key, pat in (("protocol", r"Application protocol: (\S+)"), ("tls", r"TLS Protocol: (\S+)"),
                     ("cipher", r"Cipher: (\S+)"), ("temp_key", r"Server Temp Key: (.+)")):
        m = re.search(pat, out)
        r[key] = m.group(1).strip() if m else None
    if r["protocol"] is None and "No protocol negotiated" in out:
        r["protocol"] = "none"
    return r


def h2load_cmd(url, c, m, threads, duration=None, n=None):
    cmd = ["h2load", "--npn-list=h2", "-t%d" % min(threads, c), "-c%d" % c, "-m%d" % m]
    cmd += ["-D", str(duration)] if duration is not None else ["-n", str(n)]
    return cmd + [url]


def alpn_offer(port):
    """What a TLS client offering ALPN h2,http/1.1 gets from 127.0.0.1:port (for the NOT measured
    line): 'TLSv1.3, ALPN http/1.1', or the error."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2", "http/1.1"])
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
            with ctx.wrap_socket(raw) as s:
                return "%s, ALPN %s" % (s.version(), s.selected_alpn_protocol() or "none selected")
    except (OSError, ssl.SSLError) as e:
        return "%s: %s" % (type(e).__name__, e)


def children_cpu_s():
    """CPU seconds of the reaped children so far: the change around one client run is that
    client's own CPU (no other child is reaped meanwhile: servers are reaped when stopped)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


class Refused(Exception):
    """A candidate did not come up speaking HTTP/2 over TLS 1.3 (exited at start, did not
    listen, or failed the h2load probe)."""


class Candidate:
    def __init__(self, name, bench):
        self.name, self.bench = name, bench
        self.port = PORTS[name]
        self.proc = None
        self.negotiated = None

    def start(self):
        if harness.port_open(self.port):
            raise RuntimeError("port %d already in use before starting %s" % (self.port, self.name))
        cmd = candidate_cmd(self.name, self.bench.work, self.bench.args.quill_bin,
                            self.bench.args.quill_base_bin)
        self.proc = self.bench.procs.start(self.name, cmd)
        if not harness.wait_ready(self.port, self.proc):
            exited = self.proc.poll()
            tail = self.log_tail()
            self.stop()
            lines = [x for x in tail.splitlines() if x.strip() and not x.startswith("=== ")]
            raise Refused("%s exited at start with status %s: %s  (command: %s)" % (
                self.name, exited, lines[-1] if lines else "(no output)", " ".join(cmd))
                if exited is not None else "%s did not listen on %d within 15 s" % (self.name, self.port))
        why = self.probe()
        if why:
            self.stop()
            raise Refused("%s listens on %d but %s (command: %s)" % (self.name, self.port, why, " ".join(cmd)))
        time.sleep(0.2)

    def probe(self):
        """h2load offering only h2: 20 × /1k and 2 × /1m. None if it all went as it should."""
        for path, n in (("/1k", 20), ("/1m", 2)):
            cmd = h2load_cmd("https://127.0.0.1:%d%s" % (self.port, path), 2 if n > 2 else 1, 1, 1, n=n)
            rc, out = harness.run_client(cmd, 60)
            r = parse_h2load(out)
            counts = re.search(r"requests: .*", out)
            counts = counts.group(0) if counts else out.strip()[-300:]
            if r["protocol"] != "h2":
                return ("h2load offering only ALPN h2 (`%s`) %s (%s); a TLS client offering h2,http/1.1 "
                        "got: %s" % (" ".join(cmd), "negotiated %s" % r["protocol"] if r["protocol"]
                                     else "completed no handshake", counts, alpn_offer(self.port)))
            if r["tls"] != "TLSv1.3":
                return "h2load negotiated %s, not TLSv1.3" % r["tls"]
            if not r["all_ok"] or r.get("data_bytes") != n * SIZES[path]:
                return ("h2load (`%s`) did not get every response whole: %s; %s bytes of data, %d expected" % (
                    " ".join(cmd), counts, r.get("data_bytes"), n * SIZES[path]))
            self.negotiated = "%s %s %s, %s" % (r["protocol"], r["tls"], r["cipher"], r["temp_key"])
        return None

    def log_tail(self):
        return harness.file_tail(os.path.join(self.bench.work, self.name + ".log"))

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def pids(self):
        return harness.descendants(self.proc.pid) if self.proc else []

    def stop(self):
        if self.proc is not None:
            self.bench.procs.stop(self.proc, (signal.SIGTERM,), wait=10)
            self.proc = None


# ---------------------------------------------------------------- the benchmark

class Bench:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.procs = harness.Procs(self.work)
        self.results = {"runs": [], "idle": [], "syscalls": [], "failures": [], "negotiated": {}}
        self.refused = {}
        self.backend_procs = []

    def start_backends(self):
        self.backend_procs += harness.start_nginx_backends(self.procs, self.work, BACKENDS)
        time.sleep(0.3)
        for port in BACKENDS:
            for path in ("/1k", "/1m"):
                got = harness.http_get(port, path)
                if got != (200, SIZES[path]):
                    raise RuntimeError("backend %d %s returned %s" % (port, path, got))

    def backend_pids(self):
        return [p for b in self.backend_procs for p in harness.descendants(b.pid)]

    def start_candidate(self, name, phase, rnd=None):
        if name in self.refused:
            return None
        c = Candidate(name, self)
        try:
            c.start()
        except Refused as e:
            log("NOT measured: %s" % e)
            self.refused[name] = str(e)
            self.results["failures"].append({"round": rnd, "candidate": name, "phase": phase, "error": str(e)})
            return None
        self.results["negotiated"].setdefault(name, c.negotiated)
        return c

    # -- 1. loads
    def measure(self, cand, load, rnd):
        path, conns, streams, _ = LOADS[load]
        url = "https://127.0.0.1:%d%s" % (cand.port, path)
        threads = self.args.threads
        w0 = time.monotonic()
        wrc, _ = harness.run_client(h2load_cmd(url, conns, streams, threads, duration=1), 30)  # warm-up
        warmup_s = time.monotonic() - w0
        cmd = h2load_cmd(url, conns, streams, threads, duration=self.args.duration)
        pids, bpids = cand.pids(), self.backend_pids()
        s0 = harness.cpu_ticks_split(pids)
        c0, b0, h0, t0 = harness.cpu_ticks(pids), harness.cpu_ticks(bpids), children_cpu_s(), time.monotonic()
        rc, out = harness.run_client(cmd, self.args.duration + 60)
        c1, b1, h1, t1 = harness.cpu_ticks(pids), harness.cpu_ticks(bpids), children_cpu_s(), time.monotonic()
        s1 = harness.cpu_ticks_split(pids)
        r = parse_h2load(out)
        alive = cand.alive()
        n = r.get("requests") or 0
        wall = t1 - t0
        cpu_s, be_s, cl_s = (c1 - c0) / CLK_TCK, (b1 - b0) / CLK_TCK, h1 - h0
        row = {"round": rnd, "workload": load, "candidate": cand.name, "cmd": " ".join(cmd),
               "h2load_rc": rc, "wall_s": round(wall, 3), "cpu_s": cpu_s, "backend_cpu_s": be_s,
               "h2load_cpu_s": round(cl_s, 3), "threads": min(threads, conns), "pids": pids,
               "warmup_rc": wrc, "warmup_s": round(warmup_s, 3),
               "load_before": " ".join(open("/proc/loadavg").read().split()[:3]), **r}
        if n:
            row.update({"cpu_us_per_req": cpu_s * 1e6 / n, "backend_us_per_req": be_s * 1e6 / n,
                        "h2load_us_per_req": cl_s * 1e6 / n,
                        "user_us_per_req": (s1[0] - s0[0]) / CLK_TCK * 1e6 / n,
                        "kernel_us_per_req": (s1[1] - s0[1]) / CLK_TCK * 1e6 / n})
            gib = n * SIZES[path] / GIB
            row.update({"cpu_s_per_gib": cpu_s / gib, "backend_s_per_gib": be_s / gib,
                        "h2load_s_per_gib": cl_s / gib})
        row["cores"] = cpu_s / wall if wall else None
        row["client_core"] = cl_s / wall / row["threads"] if wall else None
        problems = []
        if r.get("protocol") != "h2":
            problems.append("negotiated %s, not h2" % r.get("protocol"))
        if not r["all_ok"]:
            problems.append("%s of %s requests succeeded (%s failed, %s errored, %s timeout; status "
                            "codes 2xx/3xx/4xx/5xx %s/%s/%s/%s)" % (
                                r.get("succeeded"), r.get("total"), r.get("failed"), r.get("errored"),
                                r.get("timeout"), r.get("s2xx"), r.get("s3xx"), r.get("s4xx"), r.get("s5xx")))
        if not alive:
            problems.append("candidate exited during the run")
        if wrc is None:  # seen once in a loaded validation run, against HAProxy at -c200; not reproduced
            self.results["failures"].append({"round": rnd, "candidate": cand.name, "phase": load,
                                             "error": "the 1 s warm-up run had not ended after 30 s (killed); "
                                                      "the measured run is kept", "counted": True})
        row["problems"] = problems
        row["valid"] = bool(r.get("rps") and n and alive and r.get("protocol") == "h2"
                            and (r.get("errors") or 0) <= 0.01 * n)
        if problems:
            self.results["failures"].append({"round": rnd, "candidate": cand.name, "phase": load,
                                             "error": "; ".join(problems), "counted": row["valid"],
                                             "log_tail": "" if alive else cand.log_tail()[-800:]})
        if not r.get("rps"):
            row["output_tail"] = out[-2000:]
            log("  %s %s: no result: %s" % (cand.name, load, out[-300:].strip()))
        else:
            log("  %-10s %-6s %9.0f req/s  proxy %7.1f us/req (user %.1f, kernel %.1f)  backend %6.1f  "
                "h2load %5.1f (core %.2f)  %s" % (
                cand.name, load, r["rps"], row.get("cpu_us_per_req") or 0, row.get("user_us_per_req") or 0,
                row.get("kernel_us_per_req") or 0, row.get("backend_us_per_req") or 0,
                row.get("h2load_us_per_req") or 0, row["client_core"] or 0,
                "; ".join(problems) if problems else "ok"))
        self.results["runs"].append(row)

    def load_round(self, rnd, order):
        running = {}
        try:
            for name in order:
                c = self.start_candidate(name, "start", rnd)
                if c is not None:
                    running[name] = c
            for load in self.args.loads:
                for name in order:
                    c = running.get(name)
                    if c is None:
                        continue
                    if not c.alive():
                        self.results["failures"].append({"round": rnd, "candidate": name,
                                                         "phase": "before " + load, "error": "exited",
                                                         "log_tail": c.log_tail()[-800:]})
                        c.stop()
                        running.pop(name)
                        continue
                    self.measure(c, load, rnd)
        finally:
            for c in running.values():
                c.stop()

    # -- 2. idle connections
    def idle_one(self, name):
        n = self.args.idle
        c = self.start_candidate(name, "idle")
        if c is None:
            return
        ready = os.path.join(self.work, "idle-%s.ready" % name)
        stop = os.path.join(self.work, "idle-%s.stop" % name)
        for f in (ready, stop):
            if os.path.exists(f):
                os.unlink(f)
        row = {"candidate": name, "n": n}
        holder = None
        try:
            time.sleep(0.5)
            pids = c.pids()
            row["anon_before_kib"], row["rss_before_kib"] = harness.status_kib(pids, "RssAnon"), harness.rss_kib(pids)
            cmd = [sys.executable, os.path.join(HERE, "idle_hold.py"), "127.0.0.1", str(c.port),
                   "-n", str(n), "--h2", "/1k", "--per-process", str(IDLE_PER_PROCESS),
                   # At most 32 handshakes under way at once per holder process (and so per
                   # source address): Quill closes the least recently active handshake past
                   # 32 in progress from one address (`max_handshakes_per_source`), its guard
                   # against handshake floods; the peers have no such bound.
                   "--inflight", "32", "--open-timeout", "240", "--hold", "300",
                   "--ready-file", ready, "--stop-file", stop]
            row["cmd"] = " ".join(cmd[1:])
            holder = self.procs.start("idle-" + name, cmd, stdout=subprocess.PIPE)
            deadline = time.monotonic() + 270
            while not os.path.exists(ready) and time.monotonic() < deadline and holder.poll() is None:
                time.sleep(0.2)
            if os.path.exists(ready):
                row.update(json.load(open(ready)))
                time.sleep(2.0)  # settle
                pids = c.pids()
                row["anon_with_kib"], row["rss_with_kib"] = harness.status_kib(pids, "RssAnon"), harness.rss_kib(pids)
                row["backend_conns"] = harness.established_to(BACKENDS)
            open(stop, "w").close()
            try:
                out, _ = holder.communicate(timeout=90)
                row.update(json.loads(out.decode().strip().splitlines()[-1]))
            except (subprocess.TimeoutExpired, ValueError, IndexError) as e:
                row["error"] = "idle_hold.py: %s" % e
            still = row.get("still_open")
            if still and "anon_with_kib" in row:
                row["anon_kib_per_conn"] = (row["anon_with_kib"] - row["anon_before_kib"]) / still
                row["rss_kib_per_conn"] = (row["rss_with_kib"] - row["rss_before_kib"]) / still
            row["alive"] = c.alive()
            if row.get("opened") != n or still != n or not row["alive"]:
                self.results["failures"].append({"candidate": name, "phase": "idle", "error": (
                    "opened %s, still open %s of %d; errors %s; candidate %s" % (
                        row.get("opened"), still, n, row.get("errors"), "alive" if row["alive"] else "exited"))})
            log("  idle %-10s opened %s still open %s  RssAnon %s -> %s KiB  %.2f KiB/conn  errors %s" % (
                name, row.get("opened"), still, row.get("anon_before_kib"), row.get("anon_with_kib"),
                row.get("anon_kib_per_conn") or 0, row.get("errors")))
        finally:
            if holder is not None:
                self.procs.stop(holder, (signal.SIGTERM,), wait=20)
            c.stop()
        self.results["idle"].append(row)

    # -- 3. system calls per multiplexed request
    def strace_sides(self, pids, load_cmd, port):
        """strace -f -yy on the sends and receives of `pids` while load_cmd runs; each call is
        put on a side by its socket (local port `port`: client; remote port a backend's: server).
        Returns ({side: {"sends", "recvs", "eagain_sends", "eagain_recvs"}}, {call: count},
        client output)."""
        out_file = os.path.join(self.work, "strace-yy.out")
        err_path = os.path.join(self.work, "strace-yy.err")
        if os.path.exists(out_file):
            os.unlink(out_file)
        cmd = ["strace", "-f", "-yy", "-s0", "-e", "trace=" + ",".join(TRACED), "-e", "signal=none",
               "-o", out_file]
        for p in pids:
            cmd += ["-p", str(p)]
        nthreads = harness.thread_count(pids)
        with open(err_path, "w") as err:
            st = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        with open(self.procs.pidfile, "a") as f:
            f.write("%d %s strace\n" % (st.pid, harness.start_time(st.pid) or "?"))
        try:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and st.poll() is None:
                attached = sum(int(m.group(1) or 1) for m in re.finditer(
                    r"attached(?: with (\d+) threads)?", open(err_path).read()))
                if attached >= nthreads:
                    break
                time.sleep(0.05)
            time.sleep(0.3)
            _, client_out = harness.run_client(load_cmd, 180)
            time.sleep(0.3)
        finally:
            if st.poll() is None:
                st.send_signal(signal.SIGINT)
            try:
                st.wait(timeout=30)
            except subprocess.TimeoutExpired:
                st.kill()
                st.wait(timeout=5)
        if not os.path.exists(out_file):
            raise RuntimeError("strace -yy wrote nothing: %s" % open(err_path).read()[-500:])
        sides, by_call = classify_trace(out_file, port)
        return sides, by_call, client_out

    def syscalls_one(self, name):
        c = self.start_candidate(name, "syscalls")
        if c is None:
            return
        try:
            url = "https://127.0.0.1:%d/1k" % c.port
            path, conns, streams, _ = LOADS["mux1k"]
            harness.run_client(h2load_cmd(url, conns, streams, 1, duration=1), 60)  # warm-up
            time.sleep(0.3)
            pids = c.pids()
            load_cmd = h2load_cmd(url, conns, streams, 1, n=self.args.strace_requests)
            # harness.Bench.strace_window needs only .work and .procs.pidfile of its self.
            lc, lt, window, out = harness.Bench.strace_window(self, pids, load_cmd=load_cmd)
            r = parse_h2load(out)
            ic, it, iwindow, _ = harness.Bench.strace_window(self, pids, seconds=window)
            n = r.get("requests")
            if not n or not r["all_ok"]:
                raise RuntimeError("h2load under strace -c: %s 2xx of %s (%s)" % (
                    r.get("s2xx"), r.get("total"), out[-300:].strip()))
            per = {k: (lc.get(k, 0) - ic.get(k, 0)) / n for k in set(lc) | set(ic)}
            top = sorted(per.items(), key=lambda kv: -kv[1])[:10]
            row = {"candidate": name, "requests": n, "cmd": " ".join(load_cmd), "rps_traced": r["rps"],
                   "load_window_s": round(window, 3), "idle_window_s": round(iwindow, 3),
                   "load_calls": lt, "idle_calls": it, "per_request": (lt - it) / n,
                   "top": [[k, round(v, 3)] for k, v in top if v > 0.0005],
                   "load_by_syscall": lc, "idle_by_syscall": ic, "pids": pids}
            sides, by_call, out2 = self.strace_sides(pids, load_cmd, c.port)
            r2 = parse_h2load(out2)
            n2 = r2.get("requests")
            if not n2 or not r2["all_ok"]:
                raise RuntimeError("h2load under strace -yy: %s 2xx of %s (%s)" % (
                    r2.get("s2xx"), r2.get("total"), out2[-300:].strip()))
            row.update({"yy_requests": n2, "yy_rps_traced": r2["rps"], "sides": sides,
                        "yy_by_call": by_call})
            for side, k in sides.items():
                for what, v in list(k.items()):
                    row["%s_%s_per_req" % (side, what)] = v / n2
            self.results["syscalls"].append(row)
            log("  syscalls %-10s %.2f per request (top %s); client side: sends %.3f receives %.3f "
                "(EAGAIN %.3f); server side: sends %.3f receives %.3f" % (
                    name, row["per_request"], row["top"][:4], row.get("client_sends_per_req", 0),
                    row.get("client_recvs_per_req", 0), row.get("client_eagain_recvs_per_req", 0),
                    row.get("server_sends_per_req", 0), row.get("server_recvs_per_req", 0)))
        except RuntimeError as e:
            log("  %s syscalls: %s" % (name, e))
            self.results["failures"].append({"candidate": name, "phase": "syscalls", "error": str(e)})
        finally:
            c.stop()
            time.sleep(0.5)

    def run(self):
        t0 = time.monotonic()
        self.start_backends()
        names = self.args.only
        for rnd in range(1, self.args.rounds + 1):
            k = (rnd - 1) % len(names) if names else 0
            order = names[k:] + names[:k]
            log("round %d/%d: %s" % (rnd, self.args.rounds, " ".join(order)))
            self.load_round(rnd, order)
        if self.args.idle:
            log("idle: %d HTTP/2 TLS connections per candidate, each after one request" % self.args.idle)
            for name in names:
                self.idle_one(name)
        if self.args.strace_requests:
            log("system calls per multiplexed request (strace, %d requests)" % self.args.strace_requests)
            for name in names:
                self.syscalls_one(name)
        self.results["elapsed_s"] = round(time.monotonic() - t0, 1)


CALL_LINE = re.compile(r"^(\d+)\s+(?:<\.\.\. (\w+) resumed>(.*)|(\w+)\((.*))$")
TCP_FD = re.compile(r"\d+<TCP:\[[\d.]+:(\d+)->[\d.]+:(\d+)\]>")
RESULT = re.compile(r"\)\s+=\s+(-?\d+|\?)(?:\s+(E[A-Z]+))?")


def classify_trace(path, port):
    """Counts the sends and receives of a `strace -f -yy` output by side: "client" (a socket
    whose local port is `port`), "server" (remote port a backend's), "other" (pipes, eventfds,
    files, anything else). A call strace split (`<unfinished ...>` / `<... resumed>`) counts once,
    its result taken from the resumed half. splice counts as a receive when its input is a socket,
    else as a send when its output is one."""
    sides = {s: {"sends": 0, "recvs": 0, "eagain_sends": 0, "eagain_recvs": 0}
             for s in ("client", "server", "other")}
    by_call = {}
    pending = {}

    def side_of(local, remote):
        if local == port:
            return "client"
        if remote in BACKENDS:
            return "server"
        return "other"

    def finish(side, kind, rest):
        m = RESULT.search(rest)
        if m and m.group(2) == "EAGAIN":
            sides[side]["eagain_" + kind] += 1

    with open(path, errors="replace") as f:
        for line in f:
            m = CALL_LINE.match(line.rstrip("\n"))
            if not m:
                continue
            pid = m.group(1)
            if m.group(2):  # "<... call resumed>"
                got = pending.pop(pid, None)
                if got:
                    finish(got[0], got[1], m.group(3))
                continue
            call, rest = m.group(4), m.group(5)
            if call in SEND_CALLS:
                kind = "sends"
            elif call in RECV_CALLS:
                kind = "recvs"
            elif call == "splice":
                kind = None
            else:
                continue
            fds = TCP_FD.findall(rest.split(",", 1)[0])
            if call == "splice":
                if fds:
                    kind = "recvs"
                else:
                    fds = TCP_FD.findall(rest.split(",", 1)[1] if "," in rest else "")[:1]
                    kind = "sends"
            side = side_of(int(fds[0][0]), int(fds[0][1])) if fds else "other"
            sides[side][kind] += 1
            by_call["%s %s" % (side, call)] = by_call.get("%s %s" % (side, call), 0) + 1
            if rest.rstrip().endswith("<unfinished ...>"):
                pending[pid] = (side, kind)
            else:
                finish(side, kind, rest)
    return sides, by_call


# ---------------------------------------------------------------- tables

def rows_of(results, cand, wl):
    return [r for r in results["runs"] if r["candidate"] == cand and r["workload"] == wl and r["valid"]]


def stat(results, cand, wl, key):
    xs = [r[key] for r in rows_of(results, cand, wl) if r.get(key) is not None]
    if not xs:
        return None, None, None
    return median(xs), min(xs), max(xs)


def peer_ratio(results, cand, wl, key, ref="max-rps", peers=PEERS):
    """Median over rounds of cand's `key` / a peer's `key` in the same round. The peer is, each
    round, the one with the highest req/s (ref="max-rps") or the lowest `key` (ref="min")."""
    xs = []
    for r in rows_of(results, cand, wl):
        ps = [p for name in peers if name != cand for p in rows_of(results, name, wl)
              if p["round"] == r["round"] and p.get(key) and p.get("rps")]
        if not ps or not r.get(key):
            continue
        best = max(ps, key=lambda p: p["rps"]) if ref == "max-rps" else min(ps, key=lambda p: p[key])
        xs.append(r[key] / best[key])
    return median(xs)


def rng(m, lo, hi, nd=0):
    if m is None:
        return "–"
    if lo == hi:
        return fmt(m, nd)
    return "%s (%s–%s)" % (fmt(m, nd), fmt(lo, nd), fmt(hi, nd))


def render(results, cands, meta):
    out = []
    w = out.append
    w("# HTTP/2 to clients — %s" % meta["date"])
    w("")
    for name, why in meta.get("refused", {}).items():
        w("**%s was NOT measured: %s**" % (name, why))
        w("")
    if meta.get("interrupted"):
        w("**The run was interrupted or its set-up failed: the tables are partial.**")
        w("")
    w("Command: `%s`  " % meta["command"])
    w("Rounds: %d; machine: %s, %d CPUs (%s); load average before %s; elapsed %s s.  " % (
        meta["rounds"], meta["kernel"], meta["cpus"], meta["cpu_model"], meta["load_before"],
        results.get("elapsed_s", "–")))
    w("Versions: %s.  " % "; ".join("%s %s" % kv for kv in sorted(meta["versions"].items())))
    w("Negotiated (h2load's probe at start, offering only h2): %s." % ("; ".join(
        "%s %s" % (k, v) for k, v in sorted(results.get("negotiated", {}).items())) or "–"))
    w("")
    w("Candidates, each terminating TLS 1.3 (ECDSA P-256 certificate made by `openssl req -x509` at bench time) "
      "with ALPN h2 in front of the same two nginx backends (127.0.0.1:9061, :9062; plain HTTP/1.1, 1 worker "
      "each, serving /1k and /1m): `quill` (`quill -f --config quill.toml`: `workers = 2`, `protocol = \"http\"`, "
      "`concentrate = false`, `server_keepalive = 256` (as nginx's `keepalive 256`), `[listener.tls] cert/key` with `max_handshakes_per_source = 64`, ALPN `h2,http/1.1` being the default), `haproxy` (2.6, `mode http`, "
      "`nbthread 2`, `bind … ssl crt … alpn h2,http/1.1`, `http-reuse always`), `nginx` (1.22, 2 workers, "
      "`listen … ssl http2`, upstream `keepalive 256`, `proxy_http_version 1.1`, `keepalive_requests 1000000`), "
      "`h2o` (2.2.5, `num-threads: 2`, `proxy.reverse.url`, which takes one URL in 2.2.5: h2o sends "
      "everything to the first backend)%s. Every candidate of a round is started fresh at the round's start; "
      "within each load the candidates run in turn, the order rotating each round." % (
          "; `quill-base` (a second Quill binary with quill's configuration)" if "quill-base" in cands else ""))
    w("")
    w("Each load: `h2load --npn-list=h2 -t%d -cC -mM -D %s https://127.0.0.1:PORT/PATH` after a 1 s warm-up "
      "run of the same shape. **µs/req** = the change in utime+stime (/proc/PID/stat) of the proxy's processes "
      "(all threads) during the run / the requests that succeeded; **backend** = the same for both nginx backends; "
      "**h2load** = its own CPU (rusage); all three share the 2 CPUs. **cores** = the proxy's CPU / wall. "
      "**client** = h2load's CPU / wall / threads (≥ %.2f: **sat**, h2load set the pace: rerun with "
      "`--threads 2`). **×best** = median over rounds of req/s / the highest peer req/s (%s; for a peer: of "
      "the others) that round; **CPU ×low** = the same for CPU per request against the lowest peer CPU per "
      "request that round. "
      "Medians over rounds (min–max). A run where h2load negotiated anything but h2, or more than 1%% of "
      "requests failed, or the candidate exited, is left out of the medians; every run with a failed request "
      "is listed under Failures and counted in **failed**." % (
          meta["threads"], meta["duration"], SAT, ", ".join(PEERS)))
    w("")

    for load in ("mux1k", "m1"):
        path, conns, streams, title = LOADS[load]
        w("## %s (`-c%d -m%d`, %s)" % (title[0].upper() + title[1:], conns, streams, path))
        w("")
        w("| candidate | req/s | ×best | µs/req | CPU ×low | cores | backend µs/req | h2load µs/req | client | failed |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in cands:
            allrows = [r for r in results["runs"] if r["candidate"] == c and r["workload"] == load]
            failed = sum((r.get("errors") or 0) + (0 if r.get("protocol") == "h2" else 1) for r in allrows)
            cl = stat(results, c, load, "client_core")
            sat = " **sat**" if cl[2] is not None and cl[2] >= SAT else ""
            w("| %s | %s | %s | %s | %s | %s | %s | %s | %s%s | %s |" % (
                c, rng(*stat(results, c, load, "rps")),
                fmt(peer_ratio(results, c, load, "rps"), 2),
                rng(*stat(results, c, load, "cpu_us_per_req"), nd=2),
                fmt(peer_ratio(results, c, load, "cpu_us_per_req", ref="min"), 2),
                fmt(stat(results, c, load, "cores")[0], 2),
                fmt(stat(results, c, load, "backend_us_per_req")[0], 2),
                fmt(stat(results, c, load, "h2load_us_per_req")[0], 2),
                fmt(cl[0], 2), sat, ("**%d**" % failed) if failed else "0"))
        w("")

    path, conns, streams, title = LOADS["dl1m"]
    w("## 1 MiB downloads (`-c%d -m%d`, %s)" % (conns, streams, path))
    w("")
    w("CPU per GiB = CPU seconds / (requests that succeeded × 1 MiB / 1 GiB). **CPU ×best** = median over rounds of the "
      "proxy's CPU per GiB / that of the peer with the highest req/s that round (the issue's target: ≥ the "
      "best's req/s at ≤ 0.8× its CPU per GiB).")
    w("")
    w("| candidate | req/s | ×best | CPU s/GiB | CPU ×best | cores | backend s/GiB | h2load s/GiB | client | failed |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in cands:
        allrows = [r for r in results["runs"] if r["candidate"] == c and r["workload"] == "dl1m"]
        failed = sum((r.get("errors") or 0) + (0 if r.get("protocol") == "h2" else 1) for r in allrows)
        cl = stat(results, c, "dl1m", "client_core")
        sat = " **sat**" if cl[2] is not None and cl[2] >= SAT else ""
        w("| %s | %s | %s | %s | %s | %s | %s | %s | %s%s | %s |" % (
            c, rng(*stat(results, c, "dl1m", "rps"), nd=1), fmt(peer_ratio(results, c, "dl1m", "rps"), 2),
            rng(*stat(results, c, "dl1m", "cpu_s_per_gib"), nd=3),
            fmt(peer_ratio(results, c, "dl1m", "cpu_s_per_gib"), 2),
            fmt(stat(results, c, "dl1m", "cores")[0], 2),
            fmt(stat(results, c, "dl1m", "backend_s_per_gib")[0], 3),
            fmt(stat(results, c, "dl1m", "h2load_s_per_gib")[0], 3),
            fmt(cl[0], 2), sat, ("**%d**" % failed) if failed else "0"))
    w("")

    if results["idle"]:
        w("## %s idle HTTP/2 TLS connections, each after one request" % fmt(meta["idle"]))
        w("")
        w("Once per candidate, fresh: `bench/idle_hold.py 127.0.0.1 PORT -n %d --h2 /1k --per-process %d` (%d "
          "holder process(es), Python's OpenSSL 3.0 client, from 127.0.0.2+): TLS with ALPN h2, the preface, SETTINGS "
          "and one GET /1k whose whole 2xx response is read, then nothing. Memory read 2 s after the last "
          "response. **anon KiB/conn** = (RssAnon with − before) / connections still open at the end, summed "
          "over the proxy's processes (the issue's figure: user-space memory, TLS included); VmRSS also counts "
          "shared and file pages. backend conns = ESTABLISHED connections to the backends while they are held." % (
              meta["idle"], IDLE_PER_PROCESS, -(-meta["idle"] // IDLE_PER_PROCESS)))
        w("")
        w("| candidate | RssAnon before MiB | with MiB | anon KiB/conn | VmRSS KiB/conn | opened | still open | open s | backend conns | errors |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in results["idle"]:
            w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["candidate"], fmt((r.get("anon_before_kib") or 0) / 1024, 1),
                fmt(r["anon_with_kib"] / 1024, 1) if r.get("anon_with_kib") else "–",
                fmt(r.get("anon_kib_per_conn"), 2), fmt(r.get("rss_kib_per_conn"), 2),
                r.get("opened", "–"), r.get("still_open", "–"), r.get("open_seconds", "–"),
                r.get("backend_conns", "–"),
                ", ".join("%s: %s" % kv for kv in sorted((r.get("errors") or {}).items())) or "none"))
        w("")

    if results["syscalls"]:
        w("## System calls per multiplexed request")
        w("")
        w("Once per candidate, fresh, after a 1 s warm-up: `%s` (every request completes) with strace attached "
          "to all the proxy's processes and threads, twice. **all** = `strace -f -c` (every call) minus an equal "
          "window without load, / the 2xx responses. The sends and receives come from a second run under "
          "`strace -f -yy -e trace=%s`: a call on a socket whose local port is the proxy's is on the **client** "
          "side, one on a socket to a backend port on the **server** side; receives include those that returned "
          "EAGAIN (shown apart). Both windows include the 50 connections' handshakes and HTTP/2 prefaces. strace "
          "slows the proxy: the traced req/s means nothing, only the counts." % (
              results["syscalls"][0].get("cmd", "h2load -c50 -m10 -n R").replace(
                  "127.0.0.1:%d" % PORTS.get(results["syscalls"][0]["candidate"], 0), "127.0.0.1:PORT"),
              ",".join(TRACED)))
        w("")
        w("| candidate | all | client sends | client receives | of which EAGAIN | server sends | server receives "
          "| top calls per request |")
        w("|---|---:|---:|---:|---:|---:|---:|---|")
        for r in results["syscalls"]:
            w("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["candidate"], fmt(r.get("per_request"), 2), fmt(r.get("client_sends_per_req"), 3),
                fmt(r.get("client_recvs_per_req"), 3), fmt(r.get("client_eagain_recvs_per_req"), 3),
                fmt(r.get("server_sends_per_req"), 3), fmt(r.get("server_recvs_per_req"), 3),
                ", ".join("%s %s" % (k, v) for k, v in r.get("top", [])[:6])))
        w("")

    if "quill" in cands and "quill-base" in cands:
        w("## quill against quill-base (the same configuration, the same rounds)")
        w("")
        w("Median over rounds of the per-round ratio quill / quill-base (req/s: above 1 is better; CPU: below 1).")
        w("")
        w("| load | req/s quill | req/s quill-base | ratio | CPU quill | CPU quill-base | CPU ratio |")
        w("|---|---:|---:|---:|---:|---:|---:|")
        for load in LOAD_ORDER:
            key = "cpu_s_per_gib" if load == "dl1m" else "cpu_us_per_req"
            nd = 3 if load == "dl1m" else 2
            w("| %s | %s | %s | %s | %s | %s | %s |" % (
                LOADS[load][3], rng(*stat(results, "quill", load, "rps")),
                rng(*stat(results, "quill-base", load, "rps")),
                fmt(peer_ratio(results, "quill", load, "rps", peers=("quill-base",)), 3),
                rng(*stat(results, "quill", load, key), nd=nd), rng(*stat(results, "quill-base", load, key), nd=nd),
                fmt(peer_ratio(results, "quill", load, key, peers=("quill-base",)), 3)))
        w("")

    w("## Quill against the issue's targets")
    w("")
    if "quill" not in cands:
        w("Not evaluated: quill was not measured.")
        w("")
    w("| target | measured | verdict |")
    w("|---|---|---|")
    for desc, shown, ok in targets(results, cands):
        w("| %s | %s | %s |" % (desc, shown, "–" if ok is None else ("**met**" if ok else "**NOT met**")))
    w("")
    if results["failures"]:
        w("## Failures")
        w("")
        w("h2load does not reconnect after a GOAWAY: a proxy that caps requests per connection fails every "
          "later request of that connection (\"errored\"), which is why nginx gets `keepalive_requests 1000000`.")
        w("")
        for f in results["failures"]:
            w("- %s" % json.dumps({k: v for k, v in f.items() if k != "log_tail"}, ensure_ascii=False))
            if f.get("log_tail"):
                w("  ```\n  %s\n  ```" % f["log_tail"].strip().replace("\n", "\n  "))
        w("")
    return "\n".join(out)


def targets(results, cands):
    """(description, measured, verdict: True/False/None) for each of issue 26's targets."""
    q = "quill" in cands
    v = []

    def add(desc, x, fmt_x, ok):
        v.append((desc, fmt_x if (q and x is not None) else "–", ok if (q and x is not None) else None))

    x = peer_ratio(results, "quill", "mux1k", "cpu_us_per_req", ref="min")
    add("multiplexed 1 KiB (-c50 -m10): CPU per request ≤ 0.75× the lowest peer's", x,
        "%s×" % fmt(x, 2), x is not None and x <= 0.75)
    x = peer_ratio(results, "quill", "mux1k", "rps")
    add("multiplexed 1 KiB: req/s ≥ the best peer's", x, "%s×" % fmt(x, 2), x is not None and x >= 1.0)
    x = peer_ratio(results, "quill", "m1", "rps")
    add("one stream per connection (-c200 -m1): req/s ≥ the best peer's", x, "%s×" % fmt(x, 2),
        x is not None and x >= 1.0)
    x = peer_ratio(results, "quill", "dl1m", "rps")
    add("1 MiB downloads (-c10 -m1): req/s ≥ the best peer's", x, "%s×" % fmt(x, 2), x is not None and x >= 1.0)
    x = peer_ratio(results, "quill", "dl1m", "cpu_s_per_gib")
    add("1 MiB downloads: CPU per GiB ≤ 0.8× that peer's", x, "%s×" % fmt(x, 2), x is not None and x <= 0.8)
    k = next((r.get("anon_kib_per_conn") for r in results["idle"] if r["candidate"] == "quill"), None)
    add("idle HTTP/2 TLS connection (after one request): ≤ 5 KiB user space", k, "%s KiB" % fmt(k, 2),
        k is not None and k <= 5.0)
    s = next((r for r in results["syscalls"] if r["candidate"] == "quill"), None)
    x = s.get("client_sends_per_req") if s else None
    add("client-side sends per multiplexed request ≤ 0.3", x, fmt(x, 3), x is not None and x <= 0.3)
    x = s.get("client_recvs_per_req") if s else None
    add("client-side receives per multiplexed request ≤ 0.3", x, fmt(x, 3), x is not None and x <= 0.3)
    return v


# ---------------------------------------------------------------- main

def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--quill-bin")
    p.add_argument("--quill-base-bin")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=5, help="seconds of each measured h2load run")
    p.add_argument("--threads", type=int, default=1, help="h2load -t")
    p.add_argument("--idle", type=int, default=9000)
    p.add_argument("--strace-requests", type=int, default=20000, help="0: no system call counts")
    p.add_argument("--only", default="quill,haproxy,nginx,h2o")
    p.add_argument("--loads", default=",".join(LOAD_ORDER), help="which loads, of %s" % ", ".join(LOAD_ORDER))
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    p.add_argument("--command", default="bash bench/h2.sh")
    a = p.parse_args(argv)
    a.loads = [x.strip() for x in a.loads.split(",") if x.strip()]
    for x in a.loads:
        if x not in LOADS:
            p.error("unknown load %r (known: %s)" % (x, ", ".join(LOAD_ORDER)))
    a.loads = [x for x in LOAD_ORDER if x in a.loads]
    names = [n.strip() for n in a.only.split(",") if n.strip()]
    for n in names:
        if n not in ALL_CANDIDATES:
            p.error("unknown candidate %r (known: %s)" % (n, ", ".join(ALL_CANDIDATES)))
    if not 1 <= a.rounds <= 20 or not 1 <= a.duration <= 600 or not 1 <= a.threads <= 8:
        p.error("--rounds 1..20, --duration 1..600, --threads 1..8")
    if not 0 <= a.idle <= 15000 or not (a.strace_requests == 0 or 1000 <= a.strace_requests <= 1000000):
        p.error("--idle 0..15000, --strace-requests 0 or 1000..1000000")
    refused = {}
    if "quill" in names and not a.quill_bin:
        refused["quill"] = "no working quill binary (the build or `quill --version` failed)"
        names.remove("quill")
    if "quill-base" in names and not a.quill_base_bin:
        refused["quill-base"] = "no --quill-base-bin"
        names.remove("quill-base")
    a.only = names

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)

    cert, key, combined = make_cert(a.work)
    write_configs(a.work, cert, key, combined)
    os.chmod(a.work, 0o755)  # the backends' workers and h2o run as nobody
    bench = Bench(a)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": a.command, "rounds": a.rounds, "duration": a.duration, "threads": a.threads,
            "idle": a.idle, "strace_requests": a.strace_requests, "kernel": "Linux " + platform.release(),
            "cpus": os.cpu_count(), "cpu_model": harness.cpu_model(),
            "load_before": " ".join(open("/proc/loadavg").read().split()[:3]),
            "versions": harness.versions(
                a.quill_bin, names, a.quill_base_bin,
                pkgs=("haproxy", "nginx", "h2o", "nghttp2-client", "openssl", "libssl3", "strace")), "ports": {n: PORTS[n] for n in names},
            "backends": list(BACKENDS)}
    interrupted = harness.run_guarded(bench)
    refused.update(bench.refused)
    meta["refused"] = refused
    meta["interrupted"] = interrupted
    shown = [n for n in a.only if n not in bench.refused]
    md = render(bench.results, shown, meta)
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "h2.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(a.results, "h2.json"), "w") as f:
        json.dump({"meta": meta, **bench.results}, f, indent=1, default=str)
    print(md)
    if interrupted:
        return 1
    return 3 if refused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
