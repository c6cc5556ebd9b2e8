#!/usr/bin/env python3
"""The TLS termination shoot-out (called by bench/tls.sh; the targets of docs/benchmarks.md#tls-termination):
Quill (`protocol = "http"` with `[listener.tls]`, 2 workers) against HAProxy 2.6 (`mode http`,
`nbthread 2`, OpenSSL 3) and nginx 1.22 (2 workers, OpenSSL 3) terminating TLS in front of the
same two nginx backends (127.0.0.1:9051 and :9052, plain HTTP, 1 worker each).

Certificates: ECDSA P-256 and RSA 2048, self-signed, made with `openssl req` in the work dir at
bench time. Every candidate keeps its defaults for protocol and ciphers (TLS 1.3, X25519 with the
OpenSSL 3.0 clients here) and has session tickets on.

Workloads, in interleaved rounds (every candidate per round, order rotating, a fresh start per
certificate and round):
  full     `ab -r -s 10 -t S -n 500000 -c 50 https://…/1k`: HTTP/1.0, a new TLS connection (a full
           handshake: ab never resumes) per request; ECDSA and RSA;
  resumed  2 × `openssl s_time -connect … -reuse -www /1k -time S` in parallel: every connection
           resumes the first one's session (a TLS 1.3 ticket); ECDSA only (a resumed TLS 1.3
           handshake does no certificate signature);
  wrk1k, wrk200k  `wrk -t1 -c50 -dS --latency https://…/1k|/200k` after a 1 s warm-up:
           keep-alive over TLS; ECDSA only.
For each: per second, and the proxy's CPU per handshake or request = the change in utime+stime
(/proc/PID/stat) summed over all its processes (all threads) during the client run / the
handshakes or requests completed; handshakes per CPU-second = 1e6 / that. The clients share the
2 CPUs and are the bottleneck at handshakes (OpenSSL 3.0 verifies the server's signature), so
the per-CPU-second figure, not the rate, is what is compared.

Then, once per candidate on a fresh start (ECDSA): 9,000 idle TLS connections (bench/tls/
idle_tls.py: handshake done, nothing sent); user-space memory per idle connection = (RssAnon with
them − RssAnon before) / connections still open, summed over the candidate's processes
(RssAnon: the anonymous pages, i.e. heap; HAProxy's shared-memory session cache is not in it).

Python 3 standard library only; loopback only. Every process it starts is recorded in WORK/pids
(for tls.sh's EXIT trap) and stopped by PID here.
"""

import argparse
import datetime
import json
import os
import platform
import re
import signal
import socket
import ssl
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import harness  # noqa: E402  (bench/harness.py: /proc helpers, Procs, wrk/ab parsers)
from harness import CLK_TCK, fmt, log, median  # noqa: E402

BACKENDS = (9051, 9052)
PORTS = {"quill": 9261, "haproxy": 9262, "nginx": 9263, "quill-base": 9264}
# quill-base: a second Quill binary (--quill-base-bin, e.g. the build before a change) with quill's
# configuration, in the same rounds: a before/after comparison on the same machine at the same time.
ALL_CANDIDATES = ["quill", "haproxy", "nginx", "quill-base"]
PEERS = ("haproxy", "nginx")
KINDS = ("ecdsa", "rsa")
KIND_NAMES = {"ecdsa": "ECDSA P-256", "rsa": "RSA 2048"}
# (certificate kind, workload) run each round, in this order.
PLAN = [("ecdsa", "full"), ("ecdsa", "resumed"), ("ecdsa", "wrk1k"), ("ecdsa", "wrk200k"),
        ("rsa", "full")]
WORKERS = 2
CONCURRENCY = 50
MAXCONN = 9900
S_TIME_PROCS = 2


# ---------------------------------------------------------------- certificates and configs

def make_certs(work):
    """ECDSA P-256 and RSA 2048 self-signed certificates for localhost / 127.0.0.1."""
    d = os.path.join(work, "certs")
    os.makedirs(d, exist_ok=True)
    keyopts = {"ecdsa": ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
               "rsa": ["-newkey", "rsa:2048"]}
    for kind in KINDS:
        cert, key = os.path.join(d, kind + ".pem"), os.path.join(d, kind + ".key")
        subprocess.run(["openssl", "req", "-x509"] + keyopts[kind] + [
            "-nodes", "-keyout", key, "-out", cert, "-days", "30", "-subj", "/CN=localhost",
            "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
            check=True, capture_output=True, timeout=60)
        with open(os.path.join(d, kind + ".combined.pem"), "w") as f:  # HAProxy's crt: cert + key
            f.write(open(cert).read() + open(key).read())
    return d


def write_configs(work, certs):
    harness.write_backends(work, BACKENDS)
    be = ["127.0.0.1:%d" % p for p in BACKENDS]
    for kind in KINDS:
        cert, key = os.path.join(certs, kind + ".pem"), os.path.join(certs, kind + ".key")
        with open(os.path.join(work, "haproxy-%s.cfg" % kind), "w") as f:
            combined = os.path.join(certs, kind + ".combined.pem")
            f.write(harness.haproxy_http(WORKERS, MAXCONN, PORTS["haproxy"], be,
                                         " ssl crt %s alpn http/1.1" % combined))
        with open(os.path.join(work, "nginx-%s.conf" % kind), "w") as f:
            f.write("""daemon off;
worker_processes {workers};
worker_rlimit_nofile 20000;
pid {w}/nginx-{kind}.pid;
error_log {w}/nginx-{kind}.err warn;
events {{ worker_connections 19900; }}
http {{
    access_log off;
    keepalive_timeout 600s;
    keepalive_requests 1000000;
    client_header_timeout 600s;
    upstream be {{ server {be0}; server {be1}; keepalive 256; keepalive_requests 1000000; }}
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {cert};
        ssl_certificate_key {key};
        ssl_protocols TLSv1.2 TLSv1.3;
        ssl_session_tickets on;
        location / {{
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_read_timeout 600s;
        }}
    }}
}}
""".format(workers=WORKERS, w=work, kind=kind, port=PORTS["nginx"], be0=be[0], be1=be[1],
           cert=cert, key=key))
        for quill in ("quill", "quill-base"):
            write_quill_config(work, kind, quill, PORTS[quill], be, cert, key)


def write_quill_config(work, kind, name, port, be, cert, key):
    """WORK/NAME-KIND.toml: quill's (or quill-base's) configuration."""
    with open(os.path.join(work, "%s-%s.toml" % (name, kind)), "w") as f:
        f.write("""# written by bench/tls/tls.py
workers = {workers}
max_connections = {mc}
[[listener]]
name = "tls"
listen = "127.0.0.1:{port}"
protocol = "http"
mode = ["roundrobin"]
servers = ["{be0}", "{be1}"]
[listener.http]
keepalive_timeout = "600s"
header_timeout = "600s"
[listener.tls]
cert = "{cert}"
key = "{key}"
tickets = true
""".format(workers=WORKERS, mc=MAXCONN, port=port, be0=be[0], be1=be[1],
           cert=cert, key=key))
        if name == "quill-base" and base_ciphers():
            f.write("ciphers = [%s]\n" % ", ".join('"%s"' % c for c in base_ciphers()))


def base_ciphers():
    """QUILL_BASE_CIPHERS=A,B: quill-base's listener offers only these suites, in this order
    (e.g. TLS_AES_256_GCM_SHA384, the suite the peers negotiate, for a like-for-like run)."""
    return [c.strip() for c in os.environ.get("QUILL_BASE_CIPHERS", "").split(",") if c.strip()]


def candidate_cmd(name, kind, work, quill_bin, quill_base_bin=None):
    if name in ("quill", "quill-base"):
        binary = quill_bin if name == "quill" else quill_base_bin
        return [binary, "-f", "--config", os.path.join(work, "%s-%s.toml" % (name, kind))]
    if name == "haproxy":
        return ["haproxy", "-db", "-f", os.path.join(work, "haproxy-%s.cfg" % kind)]
    if name == "nginx":
        return ["nginx", "-p", work + "/", "-c", os.path.join(work, "nginx-%s.conf" % kind),
                "-e", os.path.join(work, "nginx-%s.err" % kind)]
    raise ValueError(name)


# ---------------------------------------------------------------- helpers

def tls_get(port, path="/1k", timeout=5.0):
    """GET over TLS (HTTP/1.0); returns (status, body length, 'TLSv1.3 CIPHER') or (None, error, None)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
            with ctx.wrap_socket(raw) as s:
                s.sendall(("GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" % path).encode())
                data = b""
                while True:
                    try:
                        chunk = s.recv(65536)
                    except ssl.SSLEOFError:  # a close without close_notify after the body
                        break
                    if not chunk:
                        break
                    data += chunk
                negotiated = "%s %s" % (s.version(), s.cipher()[0])
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), len(body), negotiated
    except (OSError, ValueError, IndexError) as e:
        return None, "%s: %s" % (type(e).__name__, e), None


def rss_anon_kib(pids):
    return harness.status_kib(pids, "RssAnon")


def parse_s_time(out):
    """openssl s_time -reuse: connections, how many were resumed ('r') and how many were not ('*')."""
    m = re.search(r"(\d+) connections in [\d.]+ real seconds", out)
    marks = "".join(l for l in out.splitlines() if re.fullmatch(r"[r*]+", l.strip() or "x"))
    return {"connections": int(m.group(1)) if m else None,
            "resumed_marks": marks.count("r"), "full_marks": marks.count("*")}


class Refused(Exception):
    """A candidate did not come up terminating TLS (exited at start, or answered without TLS)."""


class Candidate:
    def __init__(self, name, kind, bench):
        self.name, self.kind, self.bench = name, kind, bench
        self.port = PORTS[name]
        self.proc = None
        self.negotiated = None

    def start(self):
        if harness.port_open(self.port):
            raise RuntimeError("port %d already in use before starting %s" % (self.port, self.name))
        cmd = candidate_cmd(self.name, self.kind, self.bench.work, self.bench.args.quill_bin,
                            self.bench.args.quill_base_bin)
        self.proc = self.bench.procs.start(self.name, cmd)
        if not harness.wait_ready(self.port, self.proc):
            exited = self.proc.poll()
            tail = self.log_tail()
            self.stop()
            lines = [l for l in tail.splitlines() if l.strip() and not l.startswith("=== ")]
            raise Refused("%s exited at start with status %s: %s  (command: %s)" % (
                self.name, exited, lines[-1] if lines else "(no output)", " ".join(cmd))
                if exited is not None else "%s did not listen on %d within 15 s" % (self.name, self.port))
        status, size, negotiated = tls_get(self.port)
        if status != 200 or size != 1024:
            self.stop()
            raise Refused("%s listens on %d but a TLS GET /1k through it gave %s %s (does it "
                          "terminate TLS with this config? command: %s)" % (
                              self.name, self.port, status, size, " ".join(cmd)))
        self.negotiated = negotiated
        time.sleep(0.2)

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
            self.bench.procs.stop(self.proc, (signal.SIGTERM,), wait=10)
            self.proc = None


# ---------------------------------------------------------------- the benchmark

class Bench:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.procs = harness.Procs(self.work)
        self.results = {"runs": [], "idle": [], "failures": [], "negotiated": {}}
        self.refused = {}

    def start_backends(self):
        self.backend_procs = []
        for i, port in enumerate(BACKENDS, 1):
            if harness.port_open(port):
                raise RuntimeError("port %d already in use" % port)
            p = self.procs.start("backend%d" % i, [
                "nginx", "-p", self.work + "/", "-c", os.path.join(self.work, "backend%d.conf" % i),
                "-e", os.path.join(self.work, "backend%d.err" % i)])
            if not harness.wait_ready(port, p):
                raise RuntimeError("backend on %d did not start (see %s/backend%d.log)" % (port, self.work, i))
            self.backend_procs.append(p)
        time.sleep(0.3)
        for port in BACKENDS:
            for path, size in (("/1k", 1024), ("/200k", 204800)):
                got = harness.http_get(port, path)
                if got != (200, size):
                    raise RuntimeError("backend %d %s returned %s" % (port, path, got))

    def client(self, cand, workload):
        """Runs the client(s) of one workload; returns (row fields, raw output)."""
        url = "https://127.0.0.1:%d/%s" % (cand.port, "200k" if workload == "wrk200k" else "1k")
        secs = self.args.duration if workload.startswith("wrk") else self.args.hs_secs
        if workload.startswith("wrk"):
            harness.run_client(["wrk", "-t1", "-c%d" % CONCURRENCY, "-d1s", url], 30)  # warm-up
        pids = cand.pids()
        if workload == "resumed":
            cmd = ["openssl", "s_time", "-connect", "127.0.0.1:%d" % cand.port, "-reuse", "-www", "/1k",
                   "-time", str(secs)]
            c0, t0 = harness.cpu_ticks(pids), time.monotonic()
            ps = [subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT, text=True) for _ in range(S_TIME_PROCS)]
            outs = []
            for p in ps:
                try:
                    outs.append(p.communicate(timeout=secs + 30)[0])
                except subprocess.TimeoutExpired:
                    p.kill()
                    outs.append(p.communicate()[0] + "\n[tls.py: s_time timed out]")
            c1, t1 = harness.cpu_ticks(pids), time.monotonic()
            parsed = [parse_s_time(o) for o in outs]
            conns = [x["connections"] for x in parsed]
            n = sum(conns) if all(c is not None for c in conns) else None
            resumed = sum(x["resumed_marks"] for x in parsed)
            full = sum(x["full_marks"] for x in parsed)
            r = {"rps": n / secs if n else None, "requests": n, "resumed": resumed, "not_resumed": full,
                 "errors": full + sum(1 for c in conns if c is None),
                 "cmd": "%d × %s" % (S_TIME_PROCS, " ".join(cmd))}
            out = "\n".join(o[-1500:] for o in outs)
        else:
            if workload.startswith("wrk"):
                cmd = ["wrk", "-t1", "-c%d" % CONCURRENCY, "-d%ds" % secs, "--latency", url]
                parse = harness.parse_wrk
            else:
                cmd = ["ab", "-r", "-s", "10", "-t", str(secs), "-n", "500000", "-c", str(CONCURRENCY), url]
                parse = harness.parse_ab
            c0, t0 = harness.cpu_ticks(pids), time.monotonic()
            rc, out = harness.run_client(cmd, secs + 60)
            c1, t1 = harness.cpu_ticks(pids), time.monotonic()
            r = parse(out)
            r["cmd"] = " ".join(cmd)
            m = re.search(r"SSL/TLS Protocol:\s+(\S+)", out)
            if m:
                r["tls"] = m.group(1)
            m = re.search(r"Server Temp Key:\s+(.+)", out)
            if m:
                r["temp_key"] = m.group(1).strip()
        n = r.get("requests") or 0
        cpu_s = (c1 - c0) / CLK_TCK
        r.update({"wall_s": round(t1 - t0, 3), "cpu_s": cpu_s,
                  "cpu_us_per_req": cpu_s * 1e6 / n if n else None,
                  "per_cpu_s": n / cpu_s if n and cpu_s else None, "pids": pids})
        return r, out

    def measure(self, cand, kind, workload, rnd):
        r, out = self.client(cand, workload)
        alive = cand.alive()
        n = r.get("requests") or 0
        row = {"round": rnd, "kind": kind, "workload": workload, "candidate": cand.name, **r}
        row["valid"] = bool(r.get("rps") and alive and r["errors"] <= 0.01 * n)
        if not alive:
            self.results["failures"].append({"round": rnd, "candidate": cand.name, "kind": kind,
                                             "phase": workload, "error": "candidate exited during the run",
                                             "log_tail": cand.log_tail()[-800:]})
        if not r.get("rps"):
            row["output_tail"] = out[-2000:]
            log("  %s %s %s: no result: %s" % (cand.name, kind, workload, out[-300:].strip()))
        else:
            log("  %-8s %-5s %-8s %9.0f /s  cpu %7.1f us  %7.0f per cpu-s  errors %d" % (
                cand.name, kind, workload, r["rps"], r["cpu_us_per_req"] or 0, r["per_cpu_s"] or 0,
                r["errors"]))
        self.results["runs"].append(row)

    def start_candidate(self, name, kind, phase, rnd=None):
        if name in self.refused:
            return None
        c = Candidate(name, kind, self)
        try:
            c.start()
        except Refused as e:
            log("NOT measured: %s" % e)
            self.refused[name] = str(e)
            self.results["failures"].append({"round": rnd, "candidate": name, "kind": kind,
                                             "phase": phase, "error": str(e)})
            return None
        self.results["negotiated"].setdefault(name, c.negotiated)
        return c

    def load_round(self, rnd, order):
        for kind in KINDS:
            workloads = [wl for k, wl in PLAN if k == kind]
            for name in order:
                c = self.start_candidate(name, kind, "start", rnd)
                if c is None:
                    continue
                try:
                    for wl in workloads:
                        if not c.alive():
                            self.results["failures"].append({"round": rnd, "candidate": name, "kind": kind,
                                                             "phase": "before " + wl, "error": "exited"})
                            break
                        self.measure(c, kind, wl, rnd)
                finally:
                    c.stop()

    def idle_one(self, name):
        n = self.args.idle
        c = self.start_candidate(name, "ecdsa", "idle")
        if c is None:
            return
        ready = os.path.join(self.work, "idle-%s.ready" % name)
        stop = os.path.join(self.work, "idle-%s.stop" % name)
        for f in (ready, stop):
            if os.path.exists(f):
                os.unlink(f)
        row = {"candidate": name, "n": n}
        try:
            time.sleep(0.5)
            pids = c.pids()
            row["anon_before_kib"], row["rss_before_kib"] = rss_anon_kib(pids), harness.rss_kib(pids)
            holder = self.procs.start("idle-" + name, [
                sys.executable, os.path.join(HERE, "idle_tls.py"), "127.0.0.1", str(c.port), "-n", str(n),
                "--hold", "300", "--ready-file", ready, "--stop-file", stop],
                stdout=subprocess.PIPE)
            deadline = time.monotonic() + 150
            while not os.path.exists(ready) and time.monotonic() < deadline and holder.poll() is None:
                time.sleep(0.2)
            if os.path.exists(ready):
                row.update(json.load(open(ready)))
                time.sleep(2.0)  # settle
                pids = c.pids()
                row["anon_with_kib"], row["rss_with_kib"] = rss_anon_kib(pids), harness.rss_kib(pids)
            open(stop, "w").close()
            try:
                out, _ = holder.communicate(timeout=60)
                row.update(json.loads(out.decode().strip().splitlines()[-1]))
            except (subprocess.TimeoutExpired, ValueError, IndexError) as e:
                row["error"] = "idle_tls.py: %s" % e
            self.procs.stop(holder)
            still = row.get("still_open")
            if still and "anon_with_kib" in row:
                row["anon_kib_per_conn"] = (row["anon_with_kib"] - row["anon_before_kib"]) / still
                row["rss_kib_per_conn"] = (row["rss_with_kib"] - row["rss_before_kib"]) / still
            row["alive"] = c.alive()
            log("  idle %-8s opened %s still open %s  RssAnon %s -> %s KiB  %.2f KiB/conn" % (
                name, row.get("opened"), still, row.get("anon_before_kib"), row.get("anon_with_kib"),
                row.get("anon_kib_per_conn") or 0))
        finally:
            c.stop()
        self.results["idle"].append(row)

    def run(self):
        t0 = time.monotonic()
        self.start_backends()
        names = self.args.only
        for rnd in range(1, self.args.rounds + 1):
            k = (rnd - 1) % len(names)
            order = names[k:] + names[:k]
            log("round %d/%d: %s" % (rnd, self.args.rounds, " ".join(order)))
            self.load_round(rnd, order)
        if self.args.idle:
            log("idle: %d TLS connections per candidate" % self.args.idle)
            for name in names:
                self.idle_one(name)
        self.results["elapsed_s"] = round(time.monotonic() - t0, 1)


# ---------------------------------------------------------------- tables

def rows_of(results, cand, kind, wl):
    return [r for r in results["runs"] if r["candidate"] == cand and r["kind"] == kind
            and r["workload"] == wl and r["valid"]]


def stat(results, cand, kind, wl, key):
    xs = [r[key] for r in rows_of(results, cand, kind, wl) if r.get(key) is not None]
    if not xs:
        return None, None, None
    return median(xs), min(xs), max(xs)


def per_round_ratio(results, cand, ref, kind, wl, key, invert=False):
    """Median over rounds of cand's key / ref's key (ref's / cand's with invert)."""
    out = []
    for r in rows_of(results, cand, kind, wl):
        peers = [p for p in rows_of(results, ref, kind, wl) if p["round"] == r["round"]]
        if peers and r.get(key) and peers[0].get(key):
            out.append(peers[0][key] / r[key] if invert else r[key] / peers[0][key])
    return median(out)


def better_peer_ratio(results, cand, kind, wl):
    """Per round, against the peer with the higher req/s that round: (req/s ratio, CPU/req ratio);
    medians over rounds."""
    rps, cpu = [], []
    for r in rows_of(results, cand, kind, wl):
        peers = [p for name in PEERS for p in rows_of(results, name, kind, wl) if p["round"] == r["round"]]
        peers = [p for p in peers if p.get("rps")]
        if not peers or not r.get("rps"):
            continue
        best = max(peers, key=lambda p: p["rps"])
        rps.append(r["rps"] / best["rps"])
        if r.get("cpu_us_per_req") and best.get("cpu_us_per_req"):
            cpu.append(r["cpu_us_per_req"] / best["cpu_us_per_req"])
    return median(rps), median(cpu)


def per_cpu_ratio(results, cand, kind, wl):
    """Per round, requests per CPU-second of `cand` over the most efficient peer's (the lowest
    CPU per request that round); the median over rounds."""
    xs = []
    for r in rows_of(results, cand, kind, wl):
        peers = [p for name in PEERS for p in rows_of(results, name, kind, wl)
                 if p["round"] == r["round"] and p.get("cpu_us_per_req")]
        if peers and r.get("cpu_us_per_req"):
            xs.append(min(p["cpu_us_per_req"] for p in peers) / r["cpu_us_per_req"])
    return median(xs)


def rng(m, lo, hi, nd=0):
    if m is None:
        return "–"
    return "%s (%s–%s)" % (fmt(m, nd), fmt(lo, nd), fmt(hi, nd))


def render(results, cands, meta):
    out = []
    w = out.append
    w("# TLS termination shoot-out — %s" % meta["date"])
    w("")
    for name, why in meta.get("refused", {}).items():
        w("**%s was NOT measured: %s**" % (name, why))
        w("")
    w("Command: `%s`  " % meta["command"])
    w("Rounds: %d; machine: %s, %d CPUs (%s); load average before %s; elapsed %s s.  " % (
        meta["rounds"], meta["kernel"], meta["cpus"], meta["cpu_model"], meta["load_before"],
        results.get("elapsed_s", "–")))
    w("Versions: %s.  " % "; ".join("%s %s" % kv for kv in sorted(meta["versions"].items())))
    w("Negotiated (a TLS GET through each at start, Python's OpenSSL 3.0 client): %s." % "; ".join(
        "%s %s" % (k, v) for k, v in sorted(results.get("negotiated", {}).items())))
    w("")
    w("Candidates, each terminating TLS 1.3 (defaults; session tickets on) in front of the same two nginx "
      "backends (127.0.0.1:9051, :9052; plain HTTP, 1 worker each): `quill` (`quill -f --config quill-KIND.toml`: "
      "`workers = 2`, `protocol = \"http\"`, `[listener.tls] cert/key`, `tickets = true`), `haproxy` (2.6, "
      "`mode http`, `nbthread 2`, `bind … ssl crt … alpn http/1.1`, `http-reuse always`), `nginx` (1.22, "
      "2 workers, `listen … ssl`, `ssl_protocols TLSv1.2 TLSv1.3` (1.22's default stops at TLS 1.2), `ssl_session_tickets on`, upstream `keepalive 256`). Certificates made by "
      "`openssl req -x509` at bench time: ECDSA P-256 and RSA 2048. Every candidate is started fresh for each "
      "certificate and round; the candidate order rotates each round.")
    w("")

    def hs_table(kind, wl, title, note):
        w("## %s" % title)
        w("")
        w(note)
        w("")
        w("| candidate | per second | CPU µs per handshake | handshakes per CPU-second | ×haproxy | ×nginx | "
          "resumed | errors |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|")
        for c in cands:
            rps = stat(results, c, kind, wl, "rps")
            cpu = stat(results, c, kind, wl, "cpu_us_per_req")
            pcs = stat(results, c, kind, wl, "per_cpu_s")
            xs = [fmt(per_round_ratio(results, c, p, kind, wl, "per_cpu_s"), 2) if p in cands else "–"
                  for p in PEERS]
            allrows = [r for r in results["runs"] if r["candidate"] == c and r["kind"] == kind and r["workload"] == wl]
            errs = sum(r.get("errors") or 0 for r in allrows)
            res = "–"
            if wl == "resumed" and allrows:
                a = sum(r.get("resumed", 0) for r in allrows)
                b = sum(r.get("not_resumed", 0) for r in allrows)
                res = "%.1f%%" % (100.0 * a / (a + b)) if a + b else "–"
            w("| %s | %s | %s | %s | %s | %s | %s | %d |" % (
                c, rng(*rps), rng(*cpu, nd=1), rng(*pcs), xs[0], xs[1], res, errs))
        w("")
        seen = []
        for c in cands:
            got = sorted({"%s, %s" % (r.get("tls"), r.get("temp_key")) for r in results["runs"]
                          if r["candidate"] == c and r["kind"] == kind and r["workload"] == wl and r.get("tls")})
            if got:
                seen.append("%s %s" % (c, " / ".join(got)))
        if seen:
            w("ab reported: %s." % "; ".join(seen))
            w("")

    full_note = ("`ab -r -s 10 -t %s -n 500000 -c 50 https://127.0.0.1:PORT/1k`: HTTP/1.0, a new TLS connection "
                 "and a full handshake per request (ab does not resume), one proxied 1 KiB request each. CPU = "
                 "utime+stime of the proxy's processes (all threads) during the run; handshakes per CPU-second = "
                 "handshakes / that. Medians over rounds (min–max); ×peer = median over rounds of the per-round "
                 "ratio of handshakes per CPU-second. The single-threaded OpenSSL 3.0 client is the bottleneck, "
                 "so the rate says little; the per-CPU-second figure is the comparison.") % meta["hs_secs"]
    hs_table("ecdsa", "full", "Full handshakes, ECDSA P-256", full_note)
    hs_table("rsa", "full", "Full handshakes, RSA 2048", "Same client as above, RSA 2048 certificates.")
    hs_table("ecdsa", "resumed", "Resumed handshakes (TLS 1.3 session tickets), ECDSA P-256",
             "%d × `openssl s_time -connect 127.0.0.1:PORT -reuse -www /1k -time %s` in parallel: each "
             "connection resumes the session of the s_time's first one (a TLS 1.3 ticket; psk_dhe_ke, so an "
             "X25519 exchange but no signature) and GETs /1k. resumed = share of connections s_time marked "
             "as reused ('r'); a connection not resumed counts as an error." % (S_TIME_PROCS, meta["hs_secs"]))

    w("## Keep-alive over TLS (ECDSA P-256)")
    w("")
    w("`wrk -t1 -c50 -d%ss --latency https://127.0.0.1:PORT/1k|/200k` after a 1 s warm-up (the handshakes "
      "happen in the warm-up). ×best = median over rounds of req/s / the better (higher req/s) of haproxy and "
      "nginx in that round; CPU ×best = the same for CPU µs per request against that same peer." % meta["duration"])
    w("")
    w("| candidate | 1 KiB req/s | µs/req | ×best | CPU ×best | 200 KiB req/s | µs/req | ×best | CPU ×best | errors |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in cands:
        cells = []
        errs = 0
        for wl in ("wrk1k", "wrk200k"):
            rps = stat(results, c, "ecdsa", wl, "rps")
            cpu = stat(results, c, "ecdsa", wl, "cpu_us_per_req")
            xr, xc = better_peer_ratio(results, c, "ecdsa", wl)
            cells += [rng(*rps), rng(*cpu, nd=1), fmt(xr, 2), fmt(xc, 2)]
            errs += sum(r.get("errors") or 0 for r in results["runs"]
                        if r["candidate"] == c and r["workload"] == wl)
        w("| %s | %s | %d |" % (c, " | ".join(cells), errs))
    w("")

    if results["idle"]:
        w("## %s idle TLS connections (handshake done, no request)" % fmt(meta["idle"]))
        w("")
        w("Once per candidate, fresh, ECDSA: `bench/tls/idle_tls.py 127.0.0.1 PORT -n %d` (one Python process, "
          "OpenSSL 3.0 client, 64 handshakes in flight) opens them, then holds them; memory read 2 s after the "
          "last handshake. KiB/conn = (with − before) / connections still open, summed over the proxy's "
          "processes; RssAnon is the anonymous (heap) memory, VmRSS also counts shared and file pages. "
          "×haproxy = anon KiB/conn / haproxy's." % meta["idle"])
        w("")
        w("| candidate | RssAnon before MiB | with MiB | anon KiB/conn | ×haproxy | VmRSS KiB/conn | opened | still open | open s |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        ha = next((r.get("anon_kib_per_conn") for r in results["idle"] if r["candidate"] == "haproxy"), None)
        for r in results["idle"]:
            k = r.get("anon_kib_per_conn")
            w("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["candidate"], fmt((r.get("anon_before_kib") or 0) / 1024, 1),
                fmt(r["anon_with_kib"] / 1024, 1) if r.get("anon_with_kib") else "–",
                fmt(k, 2), fmt(k / ha, 2) if k is not None and ha else "–",
                fmt(r.get("rss_kib_per_conn"), 2), r.get("opened", "–"), r.get("still_open", "–"),
                r.get("open_s", "–")))
        w("")

    if "quill" in cands and "quill-base" in cands:
        if base_ciphers():
            w("## quill against quill-base (the same configuration but quill-base's `ciphers = [%s]`; "
              "the same rounds)" % ", ".join(base_ciphers()))
        else:
            w("## quill against quill-base (the same configuration, the same rounds)")
        w("")
        w("Median over rounds of the per-round ratio quill / quill-base (req/s or handshakes per "
          "CPU-second: above 1 is better; CPU µs per request or handshake: below 1 is better).")
        w("")
        w("| workload | quill | quill-base | ratio | CPU µs quill | CPU µs quill-base | CPU ratio |")
        w("|---|---:|---:|---:|---:|---:|---:|")
        for kind, wl in PLAN:
            key = "rps" if wl.startswith("wrk") else "per_cpu_s"
            q, b = stat(results, "quill", kind, wl, key), stat(results, "quill-base", kind, wl, key)
            cq = stat(results, "quill", kind, wl, "cpu_us_per_req")
            cb = stat(results, "quill-base", kind, wl, "cpu_us_per_req")
            x = per_round_ratio(results, "quill", "quill-base", kind, wl, key)
            xc = per_round_ratio(results, "quill", "quill-base", kind, wl, "cpu_us_per_req")
            w("| %s %s (%s) | %s | %s | %s | %s | %s | %s |" % (
                KIND_NAMES[kind], wl, "req/s" if key == "rps" else "per CPU-s", rng(*q), rng(*b),
                fmt(x, 3), rng(*cq, nd=1), rng(*cb, nd=1), fmt(xc, 3)))
        w("")

    verdicts = targets(results, cands)
    if verdicts:
        w("## Quill against the issue's targets")
        w("")
        w("| target | measured | verdict |")
        w("|---|---|---|")
        for desc, shown, ok in verdicts:
            w("| %s | %s | %s |" % (desc, shown, "–" if ok is None else ("**met**" if ok else "**NOT met**")))
        w("")
    if results["failures"]:
        w("## Failures")
        w("")
        for f in results["failures"]:
            w("- %s" % json.dumps({k: v for k, v in f.items() if k != "log_tail"}))
            if f.get("log_tail"):
                w("  ```\n  %s\n  ```" % f["log_tail"].strip().replace("\n", "\n  "))
        w("")
    return "\n".join(out)


def targets(results, cands):
    if "quill" not in cands:
        return []
    v = []

    def hs(kind, peer, need):
        x = per_round_ratio(results, "quill", peer, kind, "full", "per_cpu_s")
        v.append(("%s full handshakes per CPU-second ≥ %.1f× %s" % (KIND_NAMES[kind], need, peer),
                  "%s×" % fmt(x, 2), None if x is None else x >= need))
    if "haproxy" in cands:
        hs("ecdsa", "haproxy", 2.0)
    if "nginx" in cands:
        hs("ecdsa", "nginx", 1.5)
    for p in PEERS:
        if p in cands:
            hs("rsa", p, 1.2)
    xr, xc = better_peer_ratio(results, "quill", "ecdsa", "wrk200k")
    v.append(("200 KiB keep-alive: req/s ≥ 1.0× the better peer", "%s×" % fmt(xr, 2), None if xr is None else xr >= 1.0))
    v.append(("200 KiB keep-alive: CPU per request ≤ 0.9× the better peer's", "%s×" % fmt(xc, 2),
              None if xc is None else xc <= 0.9))
    xr, xc = better_peer_ratio(results, "quill", "ecdsa", "wrk1k")
    v.append(("1 KiB keep-alive: req/s ≥ 1.2× the better peer", "%s× (CPU per request %s×)" % (fmt(xr, 2), fmt(xc, 2)),
              None if xr is None else xr >= 1.2))
    # The same target read as efficiency, like the handshake targets: on 2 CPUs shared with wrk
    # and the backends (most of each request's CPU), req/s moves little with the proxy's own cost.
    xe = per_cpu_ratio(results, "quill", "ecdsa", "wrk1k")
    v.append(("1 KiB keep-alive: requests per proxy CPU-second ≥ 1.2× the most efficient peer's",
              "%s×" % fmt(xe, 2), None if xe is None else xe >= 1.2))
    q = next((r.get("anon_kib_per_conn") for r in results["idle"] if r["candidate"] == "quill"), None)
    h = next((r.get("anon_kib_per_conn") for r in results["idle"] if r["candidate"] == "haproxy"), None)
    if q is not None and h:
        v.append(("idle TLS connection: user-space memory ≤ 1/4 of haproxy's",
                  "%s vs %s KiB/conn (%s×)" % (fmt(q, 2), fmt(h, 2), fmt(q / h, 2)), q / h <= 0.25))
    return v


# ---------------------------------------------------------------- main

def versions(quill_bin, cands):
    v = {}
    pkgs = ["haproxy", "nginx", "wrk", "apache2-utils", "openssl", "libssl3"]
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"] + pkgs,
                             capture_output=True, text=True, timeout=20).stdout
        for line in out.splitlines():
            k, _, ver = line.partition(" ")
            v[k] = ver
    except (OSError, subprocess.TimeoutExpired):
        pass
    if "quill" in cands and quill_bin:
        try:
            v["quill"] = subprocess.run([quill_bin, "--version"], capture_output=True, text=True,
                                        timeout=10).stdout.strip() or "?"
        except (OSError, subprocess.TimeoutExpired):
            v["quill"] = "?"
    v["python"] = platform.python_version()
    return v


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--quill-bin")
    p.add_argument("--quill-base-bin")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=4, help="seconds of each wrk run")
    p.add_argument("--hs-secs", type=int, default=4, help="seconds of each ab / s_time run")
    p.add_argument("--idle", type=int, default=9000)
    p.add_argument("--only", default=",".join(ALL_CANDIDATES))
    p.add_argument("--results", default=os.path.join(os.path.dirname(HERE), "results"))
    p.add_argument("--command", default="bash bench/tls.sh")
    a = p.parse_args(argv)
    names = [n.strip() for n in a.only.split(",") if n.strip()]
    for n in names:
        if n not in ALL_CANDIDATES:
            p.error("unknown candidate %r (known: %s)" % (n, ", ".join(ALL_CANDIDATES)))
    refused = {}
    if "quill" in names and not a.quill_bin:
        refused["quill"] = "no working quill binary (the build or `quill --version` failed)"
        names.remove("quill")
    if "quill-base" in names and not a.quill_base_bin:
        refused["quill-base"] = "no --quill-base-bin"
        names.remove("quill-base")
    a.only = names
    if not 1 <= a.rounds <= 20:
        p.error("--rounds must be 1..20")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)

    certs = make_certs(a.work)
    write_configs(a.work, certs)
    bench = Bench(a)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": a.command, "rounds": a.rounds, "duration": a.duration, "hs_secs": a.hs_secs,
            "idle": a.idle, "kernel": "Linux " + platform.release(), "cpus": os.cpu_count(),
            "cpu_model": harness.cpu_model(), "load_before": " ".join(open("/proc/loadavg").read().split()[:3]),
            "versions": versions(a.quill_bin, names), "ports": {n: PORTS[n] for n in names}}
    interrupted = harness.run_guarded(bench)
    refused.update(bench.refused)
    meta["refused"] = refused
    meta["interrupted"] = interrupted
    shown = [n for n in a.only if n not in bench.refused]
    md = render(bench.results, shown, meta)
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "tls.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(a.results, "tls.json"), "w") as f:
        json.dump({"meta": meta, **bench.results}, f, indent=1, default=str)
    print(md)
    if interrupted:
        return 1
    return 3 if refused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
