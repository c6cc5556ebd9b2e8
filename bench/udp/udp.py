#!/usr/bin/env python3
"""The UDP shoot-out (called by bench/udp.sh; the UDP targets of docs/benchmarks.md#udp):
direct vs Quill (`protocol = "udp"`, 2 workers) vs nginx 1.22 `stream` (`listen … udp reuseport`,
2 workers) vs Pen `-U` (one process), in front of the same two backends.

Backends (127.0.0.1, one process each, started once):
  dns    dnsmasq on :9601 and :9602 (Debian `dnsmasq-base`): no upstream, no hosts file, it answers
         from its own local records (`--host-record`, 20 names under bench.test); the lightest
         authoritative answerer in Debian, about 100,000 queries/s from one process here;
  echo   bench/udp/echo.py on :9611 and :9612: each datagram back unchanged.
Candidates (127.0.0.1): quill 9281, nginx 9282, pen 9283; direct = the first backend itself.
nginx and Quill end a DNS flow after its one reply (`proxy_responses 1` / `flow_responses = 1`:
DNS is one reply per query); in the raw test flows persist (each client socket sends many
requests). Pen has no such option: its UDP flows live until it drops them.

Workloads, in interleaved rounds (every candidate per round, order rotating, a fresh start for each
measurement):
  dns       `dnsperf -c 8 -q 100 -t 2 -l S -d QUERIES` (QUERIES made at bench time: the 20 names,
            type A, in turn): queries/s, lost queries (no answer in 2 s), CPU per query of the
            candidate = the change in utime+stime (/proc/PID/stat, all its processes and threads)
            during the run / queries completed;
  dns-rate  the same at `-Q R`, R = the queries/s nginx reached in this round's dns run: the lost
            queries of each candidate at the rate nginx sustains;
  echo      `quill bench udp://… --active 64 --size 512 --timeout 1s --duration S`: 64 flows, each a
            client socket sending a 512-byte datagram and waiting for its echo: requests/s,
            latency, lost (no echo within 1 s: counted exactly by sequence number), late.
Then, once per candidate on a fresh start, idle flows: `quill bench --idle N` over source addresses
127.0.0.1-127.0.0.20 (one datagram per flow, its echo received, then silent); user-space memory
per idle flow = (RssAnon with the flows − RssAnon before) / flows the candidate holds, read after
the load generator has exited (the flows live on in the balancer until their timeout). Quill: K
processes sharing the port (`reuseport = true`, 1 worker each, `flow_timeout = "600s"`,
`max_flows` above the share), nginx: K workers (`reuseport`, `proxy_timeout 600s`); one process
may hold at most 20,000 descriptors here and a flow costs each of them one (its server socket).
Pen is one process and exits at about 10,000 UDP flows with 20,000 descriptors
("Error opening socket: Too many open files"): it is given min(N, 9,000) flows. Held flows are also counted from the
kernel's side: connected UDP sockets to the backend ports in /proc/net/udp.

Until Quill has UDP, `quill check` refuses `protocol = "udp"`: Quill is then reported as NOT
measured with the binary's own error, and the peers are still measured.

Python 3 standard library only; loopback only. Every process it starts is recorded in WORK/pids
(for udp.sh's EXIT trap) and stopped by PID here.
"""

import argparse
import datetime
import json
import os
import platform
import re
import signal
import socket
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import harness  # noqa: E402  (bench/harness.py: /proc helpers, Procs)
from harness import CLK_TCK, fmt, log, median  # noqa: E402

DNS_BACKENDS = (9601, 9602)
ECHO_BACKENDS = (9611, 9612)
PORTS = {"quill": 9281, "nginx": 9282, "pen": 9283}
ALL_CANDIDATES = ["direct", "quill", "nginx", "pen"]
REF = "nginx"
WORKERS = 2
NAMES = ["h%d.bench.test" % i for i in range(20)]
DNSPERF_CLIENTS = 8
ECHO_FLOWS = 64
ECHO_SIZE = 512
# Pen exits ("Error opening socket: Too many open files") near 10,000 UDP flows with 20,000
# descriptors: two per flow. It is given 9,000.
PEN_IDLE_MAX = 9000
SOURCES = "127.0.0.1-127.0.0.20"
# A connected UDP socket that is not bound first gets its port when it connects, bound to the
# wildcard address, so its port must be free on every address: all such sockets of the host share
# the ephemeral range (net.ipv4.ip_local_port_range, 32768-60999 here: 28,232 ports), and the
# client's sockets take ports from the same range. A balancer whose server sockets are bound that
# way holds at most about 28,000 flows per host minus the client's (nginx logs `connect() … failed
# (11: Resource temporarily unavailable)`). nginx's idle config therefore binds each server socket
# to one of ten loopback addresses (`proxy_bind` by the last digit of the client's port): 10 x 28,232
# ports. Pen has no such option: it gets PEN_IDLE_MAX flows (with the client's, under the range).
BIND_SOURCES = ["127.0.1.%d" % (d + 1) for d in range(10)]


# ---------------------------------------------------------------- configs

def backends_of(config):
    return DNS_BACKENDS if config in ("dns", "base") else ECHO_BACKENDS


def quill_toml(work, config, source=None):
    """Quill's TOML for `config` (dns, echo, idle, or base: UDP with no UDP-only key). `source`
    binds the flow sockets to that address: the idle test gives each process one of
    BIND_SOURCES, as nginx's `proxy_bind`, so more flows fit than one address's ephemeral ports."""
    servers = ", ".join('"127.0.0.1:%d"' % p for p in backends_of(config))
    top = ["workers = %d" % (1 if config == "idle" else WORKERS)]
    listener = ['name = "udp"', 'listen = "127.0.0.1:%d"' % PORTS["quill"], 'protocol = "udp"',
                "servers = [%s]" % servers, 'mode = ["roundrobin"]']
    if config == "dns":
        listener.append("udp = { flow_responses = 1 }")
    if config == "idle":
        top.append("reuseport = true")
        listener.append('udp = { flow_timeout = "600s", max_flows = 50000 }')
    if source:
        listener.append('source = "%s"' % source)
    path = os.path.join(work, "quill-%s%s.toml" % (config, "-" + source if source else ""))
    with open(path, "w") as f:
        f.write("\n".join(top) + "\n\n[[listener]]\n" + "\n".join(listener) + "\n")
    return path


def nginx_conf(work, config, workers):
    ups = " ".join("server 127.0.0.1:%d;" % p for p in backends_of(config))
    opts = {"dns": "proxy_responses 1; proxy_timeout 10s;",
            "echo": "proxy_timeout 60s;",
            "idle": "proxy_timeout 600s;\n        proxy_bind $bind_src;"}[config]
    # The idle test's server sockets: bound to one of BIND_SOURCES by the client's port (see
    # BIND_SOURCES), so more flows fit than the ephemeral port range.
    bind_map = "" if config != "idle" else "    map $remote_port $bind_src {\n%s    }\n" % "".join(
        "        ~%d$ %s;\n" % (d, BIND_SOURCES[d]) for d in range(10))
    path = os.path.join(work, "nginx-%s.conf" % config)
    with open(path, "w") as f:
        f.write("""load_module /usr/lib/nginx/modules/ngx_stream_module.so;
daemon off;
worker_processes {workers};
worker_rlimit_nofile 20000;
pid {w}/nginx-{c}.pid;
error_log {w}/nginx-{c}.err warn;
events {{ worker_connections 40000; }}
stream {{
{bind_map}    upstream be {{ {ups} }}
    server {{
        listen 127.0.0.1:{port} udp reuseport;
        proxy_pass be;
        {opts}
    }}
}}
""".format(workers=workers, w=work, c=config, ups=ups, port=PORTS["nginx"], opts=opts,
           bind_map=bind_map))
    return path


def pen_cmd(config, maxconn):
    return ["pen", "-f", "-U", "-r", "-x", str(maxconn), "-c", str(maxconn * 2),
            "127.0.0.1:%d" % PORTS["pen"]] + ["127.0.0.1:%d" % p for p in backends_of(config)]


def write_queries(work):
    path = os.path.join(work, "queries.txt")
    with open(path, "w") as f:
        for _ in range(50):
            for n in NAMES:
                f.write("%s A\n" % n)
    return path


# ---------------------------------------------------------------- probes and /proc

def dns_query(name, qid=0x4242):
    q = struct.pack(">HHHHHH", qid, 0x0100, 1, 0, 0, 0)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    return q + b"\x00" + struct.pack(">HH", 1, 1)


def probe(port, config, timeout=0.3):
    """One exchange through `port`: a DNS query answered NOERROR with one answer, or an echo."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(timeout)
        s.connect(("127.0.0.1", port))
        msg = dns_query(NAMES[0]) if config == "dns" else b"udp.py probe %d" % port
        try:
            s.send(msg)
            got = s.recv(4096)
        except OSError:
            return False
        if config == "dns":
            return len(got) > 12 and got[:2] == msg[:2] and got[3] & 0x0F == 0 and got[7] >= 1
        return got == msg


def wait_answering(port, config, proc=None, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        if probe(port, config):
            return True
        time.sleep(0.1)
    return False


def rss_anon_kib(pids):
    return harness.status_kib(pids, "RssAnon")


def udp_connected_to(ports):
    """Connected UDP sockets (state 01) whose remote port is one of `ports`."""
    return harness.sockets_to(ports, ("/proc/net/udp", "/proc/net/udp6"), remote=True)


def parse_dnsperf(out):
    def num(pat, cast=float):
        m = re.search(pat, out)
        return cast(m.group(1)) if m else None
    return {"sent": num(r"Queries sent:\s+(\d+)", int),
            "requests": num(r"Queries completed:\s+(\d+)", int),
            "lost": num(r"Queries lost:\s+(\d+)", int),
            "rps": num(r"Queries per second:\s+([\d.]+)"),
            "latency_ms": (num(r"Average Latency \(s\):\s+([\d.]+)") or 0) * 1000 or None,
            "noerror": num(r"NOERROR (\d+)", int)}


class Refused(Exception):
    """A candidate did not come up answering (refused its config, exited, or did not relay)."""


# ---------------------------------------------------------------- candidates

class Candidate:
    def __init__(self, name, config, bench, procs=1):
        self.name, self.config, self.bench, self.nprocs = name, config, bench, procs
        self.port = backends_of(config)[0] if name == "direct" else PORTS[name]
        self.ps = []

    def cmds(self):
        work, a = self.bench.work, self.bench.args
        if self.name == "quill":
            if self.config == "idle":
                return [[a.quill_bin, "-f", "--config",
                         quill_toml(work, "idle", BIND_SOURCES[i % len(BIND_SOURCES)])]
                        for i in range(self.nprocs)]
            path = self.bench.quill_configs[self.config]
            return [[a.quill_bin, "-f", "--config", path]] * self.nprocs
        if self.name == "nginx":
            path = nginx_conf(work, self.config, self.nprocs if self.config == "idle" else WORKERS)
            return [["nginx", "-p", work + "/", "-c", path, "-e", os.path.join(work, "nginx-%s.err" % self.config)]]
        if self.name == "pen":
            return [pen_cmd(self.config, 19000 if self.config == "idle" else 2048)]
        return []

    def start(self):
        if self.name == "direct":
            return
        if self.name in PORTS and probe(PORTS[self.name], self.config, timeout=0.1):
            raise RuntimeError("port %d already answers before starting %s" % (self.port, self.name))
        cmds = self.cmds()
        for i, cmd in enumerate(cmds):
            p = self.bench.procs.start(self.name if len(cmds) == 1 else "%s-%d" % (self.name, i), cmd)
            self.ps.append(p)
            if not wait_answering(self.port, self.config, p):
                exited = p.poll()
                tail = self.log_tail(i if len(cmds) > 1 else None)
                self.stop()
                lines = [l for l in tail.splitlines() if l.strip() and not l.startswith("=== ")]
                raise Refused("%s %s: %s (command: %s)" % (
                    self.name, "exited at start with status %s" % exited if exited is not None
                    else "did not answer on %d within 10 s" % self.port,
                    lines[-1] if lines else "(no output)", " ".join(cmd)))
        time.sleep(0.3)
        dead = [i for i, p in enumerate(self.ps) if p.poll() is not None]
        if dead:
            # A second process sharing the port exited (e.g. it could not bind it).
            tail = self.log_tail(dead[0] if len(self.ps) > 1 else None)
            self.stop()
            raise Refused("%s: process %d of %d exited at start: %s" % (
                self.name, dead[0] + 1, len(cmds), tail.strip().splitlines()[-1] if tail.strip() else "(no output)"))

    def log_tail(self, i=None):
        name = self.name if i is None else "%s-%d" % (self.name, i)
        try:
            with open(os.path.join(self.bench.work, name + ".log"), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 1500))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def alive(self):
        return self.name == "direct" or (self.ps and all(p.poll() is None for p in self.ps))

    def pids(self):
        if self.name == "direct":
            return self.bench.backend_pids(self.config)[:1]
        out = []
        for p in self.ps:
            out.extend(harness.descendants(p.pid))
        return sorted(set(out))

    def stop(self):
        # Quill's first SIGTERM drains: its open UDP flows relay replies until they time out or
        # the drain deadline (30 s); the second stops at once, as the operator's second signal.
        signals = (signal.SIGTERM, signal.SIGTERM) if self.name == "quill" else (signal.SIGTERM,)
        for p in self.ps:
            self.bench.procs.stop(p, signals, wait=4 if self.name == "quill" else 10)
        self.ps = []


# ---------------------------------------------------------------- the benchmark

class Bench:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.procs = harness.Procs(self.work)
        self.results = {"runs": [], "idle": [], "failures": []}
        self.refused = {}
        self.backends = {}
        self.queries = write_queries(self.work)
        self.quill_configs = {}

    def check_quill(self):
        """`quill check` on each config. First a listener with `protocol = "udp"` and nothing else
        new: a binary without UDP refuses it, and that refusal is what the report shows. Then the
        configs with the UDP keys (`udp = { flow_responses, flow_timeout, max_flows }`)."""
        a = self.args
        if "quill" not in a.only:
            return
        for config in ("base", "dns", "echo", "idle"):
            tries = [quill_toml(self.work, config, BIND_SOURCES[0] if config == "idle" else None)]
            errors = []
            for path in tries:
                cp = subprocess.run([a.quill_bin, "check", "--config", path], capture_output=True,
                                    text=True, timeout=30)
                if cp.returncode == 0:
                    self.quill_configs[config] = path
                    break
                first = next((l for l in (cp.stderr + cp.stdout).splitlines() if l.strip()), "")
                errors.append("`quill check --config %s` exits %d: %s" % (
                    os.path.basename(path), cp.returncode, first.strip()))
            if config not in self.quill_configs:
                if config in ("base", "dns", "echo"):
                    self.refused["quill"] = "; ".join(errors)
                    log("NOT measured: quill: %s" % self.refused["quill"])
                    return
                self.results["failures"].append({"candidate": "quill", "phase": "idle config",
                                                 "error": "; ".join(errors)})
                log("quill idle flows NOT measured: %s" % "; ".join(errors))

    def start_backends(self):
        for i, port in enumerate(DNS_BACKENDS, 1):
            cmd = ["dnsmasq", "-k", "-C", "/dev/null", "--no-resolv", "--no-hosts", "--no-poll",
                   "--bind-interfaces", "--listen-address=127.0.0.1", "--port=%d" % port,
                   "--user=root", "--pid-file=", "--local=/bench.test/", "--cache-size=1000"]
            cmd += ["--host-record=%s,192.0.2.%d" % (n, k + 1) for k, n in enumerate(NAMES)]
            self.backends.setdefault("dns", []).append(self.procs.start("dnsmasq%d" % i, cmd))
        for i, port in enumerate(ECHO_BACKENDS, 1):
            cmd = [sys.executable, os.path.join(HERE, "echo.py"), "127.0.0.1", str(port)]
            self.backends.setdefault("echo", []).append(self.procs.start("echo%d" % i, cmd))
        for config in ("dns", "echo"):
            for port, p in zip(backends_of(config), self.backends[config]):
                if not wait_answering(port, config, p):
                    raise RuntimeError("backend %s on %d does not answer (see %s)" % (config, port, self.work))

    def backend_pids(self, config):
        return [p.pid for p in self.backends[config]]

    def start_candidate(self, name, config, phase, rnd=None, procs=1):
        if name in self.refused:
            return None
        c = Candidate(name, config, self, procs)
        try:
            c.start()
        except Refused as e:
            log("NOT measured: %s" % e)
            if config == "idle":
                self.results["failures"].append({"candidate": name, "phase": phase, "error": str(e)})
            else:
                self.refused[name] = str(e)
                self.results["failures"].append({"round": rnd, "candidate": name, "phase": phase,
                                                 "error": str(e)})
            return None
        return c

    def measure(self, c, workload, rnd, rate=None):
        a = self.args
        pids = c.pids()
        bpids = self.backend_pids(c.config)
        if workload.startswith("dns"):
            cmd = ["dnsperf", "-s", "127.0.0.1", "-p", str(c.port), "-d", self.queries,
                   "-l", str(a.duration), "-c", str(DNSPERF_CLIENTS), "-q", "100", "-t", "2"]
            if rate:
                cmd += ["-Q", str(int(rate))]
            parse = parse_dnsperf
        else:
            cmd = [a.quill_bin, "bench", "--json", "--active", str(ECHO_FLOWS), "--size", str(ECHO_SIZE),
                   "--timeout", "1s", "--duration", "%ds" % a.duration, "udp://127.0.0.1:%d" % c.port]
            parse = parse_bench
        c0, b0, t0 = harness.cpu_ticks(pids), harness.cpu_ticks(bpids), time.monotonic()
        rc, out = harness.run_client(cmd, a.duration + 60)
        c1, b1, t1 = harness.cpu_ticks(pids), harness.cpu_ticks(bpids), time.monotonic()
        r = parse(out)
        n = r.get("requests") or 0
        cpu_s = (c1 - c0) / CLK_TCK
        row = {"round": rnd, "workload": workload, "candidate": c.name, "cmd": " ".join(cmd),
               "rc": rc, "wall_s": round(t1 - t0, 3), "cpu_s": cpu_s,
               "cpu_us_per_req": cpu_s * 1e6 / n if n else None,
               "backend_cpu_us_per_req": (b1 - b0) / CLK_TCK * 1e6 / n if n else None,
               "rate_asked": rate, "pids": pids, **r}
        row["alive"] = c.alive()
        row["valid"] = bool(r.get("rps") and row["alive"])
        if not row["valid"]:
            row["output_tail"] = out[-2000:]
            log("  %s %s: no result (rc %s): %s" % (c.name, workload, rc, out[-300:].strip()))
        else:
            log("  %-7s %-9s %9.0f /s  cpu %6.1f us  lost %s%s" % (
                c.name, workload, r["rps"], row["cpu_us_per_req"] or 0, r.get("lost"),
                "  (rate %d)" % rate if rate else ""))
        self.results["runs"].append(row)
        return row

    def one(self, name, config, workload, rnd, rate=None):
        c = self.start_candidate(name, config, workload, rnd)
        if c is None:
            return None
        try:
            return self.measure(c, workload, rnd, rate)
        finally:
            c.stop()

    def round(self, rnd, order):
        a = self.args
        qps = {}
        for name in order:
            row = self.one(name, "dns", "dns", rnd)
            if row and row["valid"]:
                qps[name] = row["rps"]
        rate = qps.get(REF)
        if rate:
            for name in order:
                self.one(name, "dns", "dns-rate", rnd, rate=rate)
        else:
            log("  dns-rate skipped this round: no nginx figure")
        if a.quill_bin:
            for name in order:
                self.one(name, "echo", "echo", rnd)

    def idle_one(self, name):
        a = self.args
        n = min(a.idle, PEN_IDLE_MAX) if name == "pen" else a.idle
        procs = a.procs if name in ("quill", "nginx") else 1
        if name == "quill" and "idle" not in self.quill_configs:
            return
        c = self.start_candidate(name, "idle", "idle", procs=procs)
        if c is None:
            return
        row = {"candidate": name, "asked": n, "processes": procs if name == "quill" else 1,
               "workers": procs if name == "nginx" else (1 if name == "quill" else None)}
        try:
            time.sleep(0.5)
            pids = c.pids()
            row["anon_before_kib"], row["rss_before_kib"] = rss_anon_kib(pids), harness.rss_kib(pids)
            row["flows_before"] = udp_connected_to(ECHO_BACKENDS)
            active = 20
            cmd = [a.quill_bin, "bench", "--json", "--idle", str(n), "--active", str(active),
                   "--requests", str(active * 10), "--timeout", "1s", "--sources", SOURCES,
                   "udp://127.0.0.1:%d" % c.port]
            rc, out = harness.run_client(cmd, 300)
            row["cmd"], row["rc"] = " ".join(cmd), rc
            r = parse_bench(out)
            row.update({"idle_held": r.get("idle_held"), "bench_failed": r.get("failed"),
                        "bench_failures": r.get("failures")})
            time.sleep(2.0)  # settle
            pids = c.pids()
            row["anon_with_kib"], row["rss_with_kib"] = rss_anon_kib(pids), harness.rss_kib(pids)
            row["flows_held"] = udp_connected_to(ECHO_BACKENDS) - row["flows_before"]
            held = row["flows_held"]
            row["alive"] = c.alive()
            if held and held > 0 and row["alive"]:
                row["anon_kib_per_flow"] = (row["anon_with_kib"] - row["anon_before_kib"]) / held
                row["rss_kib_per_flow"] = (row["rss_with_kib"] - row["rss_before_kib"]) / held
            if rc != 0 or r.get("idle_held") is None or not row["alive"]:
                row["log_tail"] = c.log_tail(0 if c.nprocs > 1 else None)[-800:]
                row["output_tail"] = out[-1500:]
            log("  idle %-6s asked %d, answered %s, held at the backends %s  RssAnon %s -> %s KiB  %s KiB/flow" % (
                name, n, r.get("idle_held"), held, row["anon_before_kib"], row["anon_with_kib"],
                fmt(row.get("anon_kib_per_flow"), 3)))
        finally:
            c.stop()
        self.results["idle"].append(row)

    def run(self):
        t0 = time.monotonic()
        self.check_quill()
        self.start_backends()
        names = [n for n in self.args.only if n not in self.refused]
        for rnd in range(1, self.args.rounds + 1):
            k = (rnd - 1) % len(names)
            order = names[k:] + names[:k]
            log("round %d/%d: %s" % (rnd, self.args.rounds, " ".join(order)))
            self.round(rnd, order)
        if self.args.idle and self.args.quill_bin:
            log("idle: %d flows per candidate" % self.args.idle)
            for name in names:
                if name != "direct" and name not in self.refused:
                    self.idle_one(name)
        self.results["elapsed_s"] = round(time.monotonic() - t0, 1)


def parse_bench(out):
    """The last JSON line of `quill bench --json`."""
    for line in reversed(out.strip().splitlines()):
        if line.startswith("{"):
            try:
                v = json.loads(line)
            except ValueError:
                break
            lat = v.get("latency_us", {})
            return {"requests": v.get("complete"), "rps": v.get("requests_per_second"),
                    "sent": v.get("datagrams_sent"), "lost": v.get("lost"), "late": v.get("late"),
                    "failed": v.get("failed"), "failures": v.get("failures"),
                    "idle_held": v.get("idle_held"), "p50_ms": lat.get("p50", 0) / 1000,
                    "p99_ms": lat.get("p99", 0) / 1000}
    return {}


# ---------------------------------------------------------------- tables

def rows_of(results, cand, wl):
    return [r for r in results["runs"] if r["candidate"] == cand and r["workload"] == wl and r["valid"]]


def stat(results, cand, wl, key):
    vals = [r.get(key) for r in rows_of(results, cand, wl) if r.get(key) is not None]
    return (median(vals), min(vals), max(vals)) if vals else (None, None, None)


def ratio(results, cand, wl, key):
    """Median over rounds of cand's key / nginx's key in the same round."""
    ref = {r["round"]: r.get(key) for r in rows_of(results, REF, wl)}
    xs = [r[key] / ref[r["round"]] for r in rows_of(results, cand, wl)
          if r.get(key) and ref.get(r["round"])]
    return median(xs)


def rng(m, lo, hi, nd=0):
    if m is None:
        return "–"
    return "%s [%s–%s]" % (fmt(m, nd), fmt(lo, nd), fmt(hi, nd)) if lo != hi else fmt(m, nd)


def total(results, cand, wl, key):
    vals = [r.get(key) for r in rows_of(results, cand, wl) if r.get(key) is not None]
    return sum(vals) if vals else None


def last_line(text):
    lines = [l.strip() for l in (text or "").splitlines() if l.strip() and not l.startswith("=== ")]
    return lines[-1] if lines else "no output"


def render(results, cands, meta):
    out = ["# UDP: direct, Quill, nginx stream, Pen -U", "",
           "%s, `%s`; %s rounds of %s s runs; %s, %d CPUs (%s); load before %s." % (
               meta["date"], meta["command"], meta["rounds"], meta["duration"], meta["kernel"],
               meta["cpus"], meta["cpu_model"], meta["load_before"]), ""]
    for name, why in meta["refused"].items():
        out += ["**%s was NOT measured: %s**" % (name, why), ""]
    if meta.get("interrupted"):
        out += ["**The run was interrupted: the tables are partial.**", ""]
    out += ["Versions: " + "; ".join("%s %s" % kv for kv in meta["versions"].items()), ""]
    out += ["Medians over rounds [range]. ×nginx: median of the per-round ratios to nginx. CPU: the",
            "candidate's utime+stime (all processes and threads) during the run / answers; for",
            "`direct`, the first backend's own CPU. `direct` is one backend (one dnsmasq, one echo",
            "process), the proxies spread over two, so a proxy can pass more than `direct` does.", ""]
    out += ["## DNS, as fast as it goes (`dnsperf -c %d -q 100 -t 2`, dnsmasq backends)" % DNSPERF_CLIENTS, "",
            "| candidate | queries/s | ×nginx | CPU µs/query | CPU ×nginx | lost (sum) | avg latency ms |",
            "|---|---|---|---|---|---|---|"]
    for c in cands:
        q = stat(results, c, "dns", "rps")
        cpu = stat(results, c, "dns", "cpu_us_per_req")
        lat = stat(results, c, "dns", "latency_ms")
        out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
            c, rng(*q), fmt(ratio(results, c, "dns", "rps"), 2), rng(*cpu, nd=1),
            fmt(ratio(results, c, "dns", "cpu_us_per_req"), 2), fmt(total(results, c, "dns", "lost")),
            fmt(lat[0], 3)))
    out += ["", "## DNS at the rate nginx sustains (`dnsperf -Q R`, R = nginx's queries/s in that round)", "",
            "| candidate | rate asked | queries/s | CPU µs/query | sent (sum) | lost (sum) |",
            "|---|---|---|---|---|---|"]
    for c in cands:
        out.append("| %s | %s | %s | %s | %s | %s |" % (
            c, rng(*stat(results, c, "dns-rate", "rate_asked")), rng(*stat(results, c, "dns-rate", "rps")),
            rng(*stat(results, c, "dns-rate", "cpu_us_per_req"), nd=1),
            fmt(total(results, c, "dns-rate", "sent")), fmt(total(results, c, "dns-rate", "lost"))))
    out += ["", "## Raw UDP request/response (`quill bench udp://… --active %d --size %d --timeout 1s`, echo backends)"
            % (ECHO_FLOWS, ECHO_SIZE), "",
            "| candidate | requests/s | ×nginx | p50 ms | p99 ms | CPU µs/req | CPU ×nginx | lost (sum) | late (sum) |",
            "|---|---|---|---|---|---|---|---|---|"]
    for c in cands:
        out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            c, rng(*stat(results, c, "echo", "rps")), fmt(ratio(results, c, "echo", "rps"), 2),
            fmt(stat(results, c, "echo", "p50_ms")[0], 3), fmt(stat(results, c, "echo", "p99_ms")[0], 3),
            rng(*stat(results, c, "echo", "cpu_us_per_req"), nd=1),
            fmt(ratio(results, c, "echo", "cpu_us_per_req"), 2), fmt(total(results, c, "echo", "lost")),
            fmt(total(results, c, "echo", "late"))))
    if results["idle"]:
        out += ["", "## Idle flows (`quill bench --idle N --sources %s`), read after the client exits" % SOURCES, "",
                "| candidate | processes / workers | flows asked | answered | no answer | held (sockets to the backends) | RssAnon before → with KiB | KiB per flow | bytes per flow |",
                "|---|---|---|---|---|---|---|---|---|"]
        for r in results["idle"]:
            per = r.get("anon_kib_per_flow")
            shape = ("%d processes" % r["processes"]) if r["candidate"] == "quill" else (
                "%s workers" % r["workers"] if r.get("workers") else "1 process")
            out.append("| %s | %s | %s | %s | %s | %s | %s → %s | %s | %s |" % (
                r["candidate"] + ("" if r.get("alive") else " (**exited**: %s)" % last_line(r.get("log_tail"))),
                shape, fmt(r["asked"]), fmt(r.get("idle_held")),
                fmt((r.get("bench_failures") or {}).get("timeout")), fmt(r.get("flows_held")),
                fmt(r.get("anon_before_kib")), fmt(r.get("anon_with_kib")), fmt(per, 3),
                fmt(per * 1024 if per is not None else None)))
        out += ["", "Held = connected UDP sockets to the echo backends in /proc/net/udp (the %d active flows of the" % 20,
                "load generator included; the memory delta includes them too). RssAnon before includes what",
                "a candidate allocates at start: Pen its whole connection table (`-x`), nginx its",
                "`worker_connections` arrays. A connected UDP socket not bound first takes its port on the",
                "wildcard address, so all such sockets of the host (the client's included) share the 28,232",
                "ephemeral ports: nginx binds its server sockets over ten loopback addresses (`proxy_bind`",
                "by client port) to hold 100,000; a balancer that cannot stops near 28,000 flows minus the",
                "client's, and its missing flows show as \"no answer\"."]
    out += ["", "## Targets", ""] + targets(results, cands, meta)
    if results["failures"]:
        out += ["", "## Failures", ""]
        for f in results["failures"]:
            out.append("- %s" % json.dumps({k: v for k, v in f.items() if k != "log_tail"}))
    return "\n".join(out)


def targets(results, cands, meta):
    if "quill" not in cands:
        why = meta["refused"].get("quill", "not in --only")
        return ["Quill not measured (%s): every target is open." % why.split(";")[0]]
    lines = ["| target | figure | met |", "|---|---|---|"]
    q = ratio(results, "quill", "dns", "rps")
    cpu = ratio(results, "quill", "dns", "cpu_us_per_req")
    lines.append("| DNS queries/s ≥ 1.2× nginx | %s× | %s |" % (fmt(q, 2), "–" if q is None else ("yes" if q >= 1.2 else "NO")))
    lines.append("| DNS CPU per query ≤ nginx | %s× | %s |" % (fmt(cpu, 2), "–" if cpu is None else ("yes" if cpu <= 1.0 else "NO")))
    lost = total(results, "quill", "dns-rate", "lost")
    lines.append("| 0 lost queries at nginx's rate | %s | %s |" % (fmt(lost), "–" if lost is None else ("yes" if lost == 0 else "NO")))
    idle = [r for r in results["idle"] if r["candidate"] == "quill" and r.get("anon_kib_per_flow") is not None]
    per = idle[0]["anon_kib_per_flow"] if idle else None
    lines.append("| ≤ 0.5 KiB user-space per idle flow at %s flows | %s KiB | %s |" % (
        fmt(idle[0]["asked"]) if idle else "–", fmt(per, 3), "–" if per is None else ("yes" if per <= 0.5 else "NO")))
    return lines


def versions(quill_bin, cands):
    v = {}

    def first(cmd):
        try:
            cp = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            return next((l.strip() for l in (cp.stdout + cp.stderr).splitlines() if l.strip()), "?")
        except (OSError, subprocess.TimeoutExpired):
            return "?"
    if quill_bin:
        v["quill"] = first([quill_bin, "--version"]).replace("quill ", "")
    v["nginx"] = first(["nginx", "-v"]).replace("nginx version: ", "")
    try:
        cp = subprocess.run(["dnsperf", "-h"], capture_output=True, text=True, timeout=10)
        m = re.search(r"Version (\S+)", cp.stdout + cp.stderr)
        v["dnsperf"] = m.group(1) if m else "?"
    except (OSError, subprocess.TimeoutExpired):
        v["dnsperf"] = "?"
    v["dnsmasq"] = first(["dnsmasq", "--version"]).split("  ")[0].replace("Dnsmasq version ", "")
    try:
        v["pen"] = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", "pen"], capture_output=True,
                                  text=True, timeout=10).stdout.strip() or "?"
    except (OSError, subprocess.TimeoutExpired):
        v["pen"] = "?"
    return v


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--quill-bin", help="the quill binary: a candidate, and the load generator of the echo and idle tests")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=int, default=5, help="seconds of each dnsperf / quill bench run")
    p.add_argument("--idle", type=int, default=100000)
    p.add_argument("--procs", type=int, default=10, help="Quill processes / nginx workers in the idle test")
    p.add_argument("--only", default=",".join(ALL_CANDIDATES))
    p.add_argument("--results", default=os.path.join(os.path.dirname(HERE), "results"))
    p.add_argument("--command", default="bash bench/udp.sh")
    a = p.parse_args(argv)
    names = [n.strip() for n in a.only.split(",") if n.strip()]
    for n in names:
        if n not in ALL_CANDIDATES:
            p.error("unknown candidate %r (known: %s)" % (n, ", ".join(ALL_CANDIDATES)))
    refused = {}
    if not a.quill_bin:
        if "quill" in names:
            refused["quill"] = "no working quill binary (the build or `quill --version` failed)"
            names.remove("quill")
        log("no quill binary: the echo and idle tests (quill bench) are skipped")
    a.only = names
    if not 1 <= a.rounds <= 20:
        p.error("--rounds must be 1..20")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)

    bench = Bench(a)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": a.command, "rounds": a.rounds, "duration": a.duration, "idle": a.idle,
            "procs": a.procs, "kernel": "Linux " + platform.release(), "cpus": os.cpu_count(),
            "cpu_model": harness.cpu_model(), "load_before": " ".join(open("/proc/loadavg").read().split()[:3]),
            "versions": versions(a.quill_bin, names),
            "ports": {n: PORTS[n] for n in names if n in PORTS}}
    interrupted = harness.run_guarded(bench)
    refused.update(bench.refused)
    meta["refused"] = refused
    meta["interrupted"] = interrupted
    shown = [n for n in a.only if n not in refused]
    md = render(bench.results, shown, meta)
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "udp.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(a.results, "udp.json"), "w") as f:
        json.dump({"meta": meta, **bench.results}, f, indent=1, default=str)
    print(md)
    if interrupted:
        return 1
    return 3 if refused else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
