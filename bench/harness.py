#!/usr/bin/env python3
"""Benchmark driver for Quill and its peers (called by bench/run.sh).

Starts two nginx backends, then per round and per workload runs every
candidate interleaved (order rotated each round), samples the candidate's
CPU (utime+stime from /proc/PID/stat) and RSS (sum of VmRSS, every 100 ms),
then runs the idle-connection test and the syscall count, and writes
Markdown tables and raw JSON. Python 3 standard library only.

All traffic goes to 127.0.0.0/8. Every process it starts is recorded in
WORK/pids ("pid starttime name") so that run.sh's EXIT trap can stop it by
PID, and is stopped by PID here in `finally` blocks.
"""

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CLK_TCK = os.sysconf("SC_CLK_TCK")
BACKENDS = (9001, 9002)
PORTS = {"direct": 9001, "quill": 9201, "haproxy": 9202, "nginx-stream": 9203,
         "pen": 9204, "socket-proxyd": 9205, "quill-base": 9206}
# quill-base: a second Quill binary (--quill-base-bin, e.g. the build before a change), run with
# the same arguments as quill and measured in the same rounds, so that a before/after comparison
# is a same-run comparison (figures drift up to 2x between days on these machines).
ALL_CANDIDATES = ["quill", "quill-base", "haproxy", "nginx-stream", "pen", "socket-proxyd", "direct"]
QUILLS = {"quill": "quill_bin", "quill-base": "quill_base_bin"}
ALIASES = {"haproxy-tcp": "haproxy", "nginx": "nginx-stream", "proxyd": "socket-proxyd",
           "systemd-socket-proxyd": "socket-proxyd"}
# Which candidates take part in which test (socket-proxyd: 200k and ab rows only;
# it cannot hold 9,000 idle connections: 6 fds per connection).
WORKLOADS = ["wrk1k", "wrk200k", "ab1k"]
SKIP = {("socket-proxyd", "wrk1k"), ("socket-proxyd", "idle")}
MAXCONN = 9900
IDLE_N = 9000
REFERENCE = "haproxy"

_interrupted = False


def log(msg):
    print("[bench %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


# ---------------------------------------------------------------- /proc helpers

def proc_stat(pid):
    """Fields of /proc/PID/stat after the comm field, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(")") + 2:].split()


def start_time(pid):
    st = proc_stat(pid)
    return st[19] if st else None  # field 22: starttime


def descendants(root):
    """root and all its descendant PIDs (processes, not threads)."""
    children = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = proc_stat(int(name))
            if st:
                children.setdefault(int(st[1]), []).append(int(name))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        if os.path.exists("/proc/%d" % p):
            out.append(p)
        todo.extend(children.get(p, []))
    return sorted(set(out))


def cpu_ticks(pids):
    """utime+stime (clock ticks) summed over processes (includes all their threads)."""
    total = 0
    for p in pids:
        st = proc_stat(p)
        if st:
            total += int(st[11]) + int(st[12])  # fields 14, 15
    return total


def cpu_ticks_split(pids):
    """(utime, stime) clock ticks summed over processes: user space and kernel apart, so a cost can
    be placed on the proxy's own code or on the system calls every proxy pays."""
    user = kernel = 0
    for p in pids:
        st = proc_stat(p)
        if st:
            user += int(st[11])
            kernel += int(st[12])
    return user, kernel


def ctx_switches(pids):
    """Context switches (voluntary + involuntary) summed over every thread of `pids`: a server
    that sleeps and wakes per event pays the kernel for each (measured to dominate the CPU of a
    connection without keep-alive here)."""
    total = 0
    for p in pids:
        try:
            tasks = os.listdir("/proc/%d/task" % p)
        except OSError:
            continue
        for t in tasks:
            try:
                with open("/proc/%d/task/%s/status" % (p, t)) as f:
                    for line in f:
                        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                            total += int(line.split()[1])
            except (OSError, ValueError):
                pass
    return total


def status_kib(pids, field="VmRSS"):
    """The sum of one /proc/PID/status field (in KiB: VmRSS, RssAnon, ...) over `pids`."""
    total = 0
    for p in pids:
        try:
            with open("/proc/%d/status" % p) as f:
                for line in f:
                    if line.startswith(field + ":"):
                        total += int(line.split()[1])
                        break
        except OSError:
            pass
    return total


def rss_kib(pids):
    return status_kib(pids)


def thread_count(pids):
    n = 0
    for p in pids:
        try:
            n += len(os.listdir("/proc/%d/task" % p))
        except OSError:
            pass
    return n


def sockets_to(ports, paths=("/proc/net/tcp", "/proc/net/tcp6"), remote=False):
    """Sockets in state 01 (TCP ESTABLISHED; for /proc/net/udp*: connected) whose local port
    (`remote`: remote port) is one of `ports`."""
    want = {"%04X" % p for p in ports}
    field = 2 if remote else 1
    n = 0
    for path in paths:
        try:
            with open(path) as f:
                next(f)
                for line in f:
                    parts = line.split(None, 4)
                    if parts[3] == "01" and parts[field].rsplit(":", 1)[1] in want:
                        n += 1
        except OSError:
            pass
    return n


def established_to(ports):
    """Number of ESTABLISHED TCP sockets whose local port is one of `ports` (server side)."""
    return sockets_to(ports)


class RssSampler:
    """Samples the summed VmRSS of `pids` every 100 ms in a thread; keeps the peak."""

    def __init__(self, pids, interval=0.1):
        self.pids, self.interval = pids, interval
        self.peak, self.samples = 0, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_kib(self.pids))
            self.samples += 1
            self._stop.wait(self.interval)

    def __enter__(self):
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join(2)
        self.peak = max(self.peak, rss_kib(self.pids))


# ---------------------------------------------------------------- processes

class Procs:
    """Starts processes, records them in WORK/pids, stops them by PID."""

    def __init__(self, work):
        self.work = work
        self.pidfile = os.path.join(work, "pids")
        self.live = {}  # pid -> (Popen, name)

    def start(self, name, cmd, **kw):
        logf = open(os.path.join(self.work, name + ".log"), "ab")
        logf.write(("\n=== %s %s\n" % (time.strftime("%H:%M:%S"), " ".join(cmd))).encode())
        logf.flush()
        kw.setdefault("stdout", logf)
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=logf, cwd=self.work, **kw)
        logf.close()
        with open(self.pidfile, "a") as f:
            f.write("%d %s %s\n" % (p.pid, start_time(p.pid) or "?", name))
        self.live[p.pid] = (p, name)
        return p

    def stop(self, p, signals=(signal.SIGTERM,), wait=10.0):
        """Send each signal in turn (waiting up to `wait`/len between), then SIGKILL.
        Also kills (by PID) any descendant left behind."""
        if p.pid not in self.live:
            return
        kids = [k for k in descendants(p.pid) if k != p.pid]
        for sig in signals:
            if p.poll() is not None:
                break
            try:
                p.send_signal(sig)
            except ProcessLookupError:
                break
            try:
                p.wait(timeout=wait / len(signals))
            except subprocess.TimeoutExpired:
                pass
        if p.poll() is None:
            log("%s (pid %d) did not exit, SIGKILL" % (self.live[p.pid][1], p.pid))
            p.kill()
            p.wait(timeout=5)
        deadline = time.monotonic() + 5
        for k in kids:
            while os.path.exists("/proc/%d" % k) and time.monotonic() < deadline:
                time.sleep(0.05)
            if os.path.exists("/proc/%d" % k):
                st = proc_stat(k)
                if st and st[0] != "Z":
                    os.kill(k, signal.SIGKILL)
        del self.live[p.pid]

    def stop_all(self):
        for pid, (p, name) in list(self.live.items()):
            self.stop(p, (signal.SIGTERM, signal.SIGTERM), wait=6)


def port_open(port, host="127.0.0.1", timeout=0.5):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def http_get(port, path, timeout=5.0):
    """Minimal HTTP/1.0 GET; returns (status, body length) or (None, error text)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(("GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" % path).encode())
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split()[1]), len(body)
    except (OSError, ValueError, IndexError) as e:
        return None, str(e)


def wait_ready(port, proc=None, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        if port_open(port):
            return True
        time.sleep(0.1)
    return False


def file_tail(path, limit=1500):
    """The last `limit` bytes of a log file, as text ("" when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def start_nginx_backends(procs, work, ports, prefix=()):
    """Starts the nginx backends WORK/backendI.conf (I from 1, one per port of `ports`) through
    `procs` (each command after `prefix`, such as `chrt -b 0`, which execs it) and waits until each
    listens; raises RuntimeError when a port is taken or a backend does not start. Returns their
    processes."""
    started = []
    for i, port in enumerate(ports, 1):
        if port_open(port):
            raise RuntimeError("port %d already in use" % port)
        p = procs.start("backend%d" % i, list(prefix) + [
            "nginx", "-p", work + "/", "-c", os.path.join(work, "backend%d.conf" % i),
            "-e", os.path.join(work, "backend%d.err" % i)])
        if not wait_ready(port, p):
            raise RuntimeError("backend on %d did not start (see %s/backend%d.log)" % (port, work, i))
        started.append(p)
    return started


# ---------------------------------------------------------------- configs

def write_backends(work, ports=None):
    """WORK/www with the 1k and 200k files, and one nginx backend config WORK/backendI.conf per
    port of `ports` (BACKENDS by default): the backends every bench script puts behind the
    candidates."""
    www = os.path.join(work, "www")
    os.makedirs(www, exist_ok=True)
    with open(os.path.join(www, "1k"), "wb") as f:
        f.write(b"x" * 1024)
    with open(os.path.join(www, "200k"), "wb") as f:
        f.write(b"y" * 204800)
    for p in (work, www):
        os.chmod(p, 0o755)
    for n in ("1k", "200k"):
        os.chmod(os.path.join(www, n), 0o644)
    for i, port in enumerate(ports or BACKENDS, 1):
        with open(os.path.join(work, "backend%d.conf" % i), "w") as f:
            f.write("""daemon off;
worker_processes 1;
worker_rlimit_nofile 20000;
pid {w}/backend{i}.pid;
error_log {w}/backend{i}.err warn;
events {{ worker_connections 19900; }}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    keepalive_timeout 600s;
    keepalive_requests 1000000;
    client_header_timeout 600s;
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        root {w}/www;
        location / {{ }}
    }}
}}
""".format(w=work, i=i, port=port))


def _haproxy(mode, options, workers, maxconn, port, servers, bind_extra="", timeouts=""):
    """HAProxy 2.6 in `mode`, round robin, `nbthread workers`, listening on 127.0.0.1:port
    (`bind_extra` after it) in front of `servers` (HOST:PORT strings); `options` and `timeouts`
    are lines added to `defaults`."""
    lines = "".join("    server s%d %s\n" % (i, a) for i, a in enumerate(servers, 1))
    return """global
    nbthread {workers}
    maxconn {mc}
defaults
    mode {mode}
    maxconn {mc}
{options}    timeout connect 5s
    timeout client 600s
    timeout server 600s
{timeouts}frontend fe
    bind 127.0.0.1:{port}{extra}
    default_backend be
backend be
    balance roundrobin
{lines}""".format(workers=workers, mc=maxconn, mode=mode, options=options, timeouts=timeouts,
                  port=port, extra=bind_extra, lines=lines)


def haproxy_tcp(workers, maxconn, port, servers):
    """HAProxy 2.6 `mode tcp` (see `_haproxy`)."""
    return _haproxy("tcp", "", workers, maxconn, port, servers)


def haproxy_http(workers, maxconn, port, servers, bind_extra=""):
    """HAProxy 2.6 `mode http` with keep-alive both ways, X-Forwarded-For and connection reuse
    (see `_haproxy`; `bind_extra`: `ssl crt ...`)."""
    return _haproxy("http",
                    "    option http-keep-alive\n    option forwardfor\n    http-reuse always\n",
                    workers, maxconn, port, servers, bind_extra,
                    "    timeout http-keep-alive 600s\n    timeout http-request 600s\n")


def write_configs(work):
    write_backends(work)
    with open(os.path.join(work, "nginx-stream.conf"), "w") as f:
        f.write("""daemon off;
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 2;
worker_rlimit_nofile 20000;
pid {w}/nginx-stream.pid;
error_log {w}/nginx-stream.err warn;
events {{ worker_connections 19900; }}
stream {{
    upstream be {{ server 127.0.0.1:9001; server 127.0.0.1:9002; }}
    server {{ listen 127.0.0.1:{port}; proxy_pass be; proxy_timeout 600s; }}
}}
""".format(w=work, port=PORTS["nginx-stream"]))
    with open(os.path.join(work, "haproxy.cfg"), "w") as f:
        f.write(haproxy_tcp(2, MAXCONN, PORTS["haproxy"], ["127.0.0.1:9001", "127.0.0.1:9002"]))


def candidate_cmd(name, work, quill_bin):
    """The command line of `name`; `quill_bin` is the binary of quill or quill-base."""
    port = PORTS[name]
    listen = "127.0.0.1:%d" % port
    be = ["127.0.0.1:9001", "127.0.0.1:9002"]
    if name in QUILLS:
        return [quill_bin, "-r", "-x", str(MAXCONN), "--workers", "2", listen] + be
    if name == "haproxy":
        return ["haproxy", "-db", "-f", os.path.join(work, "haproxy.cfg")]
    if name == "nginx-stream":
        return ["nginx", "-p", work + "/", "-c", os.path.join(work, "nginx-stream.conf"),
                "-e", os.path.join(work, "nginx-stream.err")]
    if name == "pen":
        return ["pen", "-f", "-r", "-x", str(MAXCONN), "-c", "4096", listen] + be
    if name == "socket-proxyd":
        return ["systemd-socket-activate", "-l", listen, "/lib/systemd/systemd-socket-proxyd",
                "--connections-max=%d" % MAXCONN, "127.0.0.1:9001"]
    raise ValueError(name)


class Candidate:
    """A running candidate (or `direct`, which is backend 1 itself)."""

    def __init__(self, name, bench):
        self.name, self.bench = name, bench
        self.port = PORTS[name]
        self.proc = None

    def start(self):
        if self.name == "direct":
            return True
        if port_open(self.port):
            raise RuntimeError("port %d already in use before starting %s" % (self.port, self.name))
        quill_bin = getattr(self.bench.args, QUILLS.get(self.name, "quill_bin"))
        cmd = candidate_cmd(self.name, self.bench.work, quill_bin)
        kw = {}
        if self.name == "socket-proxyd":
            # systemd starts services with SIGPIPE ignored (IgnoreSIGPIPE=yes); socket-proxyd
            # relies on that and dies of SIGPIPE when a client closes mid-response otherwise.
            # Python ignores SIGPIPE, and restore_signals=False passes that on through exec.
            kw["restore_signals"] = False
        self.proc = self.bench.procs.start(self.name, cmd, **kw)
        if not wait_ready(self.port, self.proc):
            log("%s did not become ready (see %s/%s.log)" % (self.name, self.bench.work, self.name))
            self.stop()
            return False
        status, size = http_get(self.port, "/1k")
        if status != 200 or size != 1024:
            log("%s: GET /1k through it gave %s %s" % (self.name, status, size))
            self.stop()
            return False
        time.sleep(0.2)
        return True

    def alive(self):
        return self.name == "direct" or (self.proc is not None and self.proc.poll() is None)

    def exit_info(self):
        """Exit status and the end of the candidate's log, for the failure record."""
        rc = self.proc.poll() if self.proc is not None else None
        try:
            with open(os.path.join(self.bench.work, self.name + ".log"), "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - 1500))
                tail = f.read().decode(errors="replace")
        except OSError:
            tail = ""
        return {"exit": rc, "log_tail": tail}

    def pids(self):
        if self.name == "direct":
            return self.bench.backend_pids[0]
        return descendants(self.proc.pid) if self.proc else []

    def stop(self):
        if self.proc is not None:
            # Quill drains on the first SIGTERM and exits at once on the second.
            self.bench.procs.stop(self.proc, (signal.SIGTERM, signal.SIGTERM), wait=6)
            self.proc = None


# ---------------------------------------------------------------- client output parsing

def to_ms(value):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", value)
    if not m:
        return None
    v = float(m.group(1))
    return {"us": v / 1000, "ms": v, "s": v * 1000, "m": v * 60000}[m.group(2)]


def parse_wrk(out):
    r = {"rps": None, "requests": None, "p50_ms": None, "p99_ms": None, "errors": 0}
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"(\d+) requests in ([\d.]+\w+)", out)
    if m:
        r["requests"] = int(m.group(1))
    for pct, key in (("50", "p50_ms"), ("99", "p99_ms")):
        m = re.search(r"^\s+%s%%\s+(\S+)" % pct, out, re.M)
        if m:
            r[key] = to_ms(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        r["socket_errors"] = {k: int(v) for k, v in zip(("connect", "read", "write", "timeout"), m.groups())}
        r["errors"] += sum(r["socket_errors"].values())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    if m:
        r["non2xx"] = int(m.group(1))
        r["errors"] += int(m.group(1))
    return r


def parse_ab(out):
    r = {"rps": None, "requests": None, "p50_ms": None, "p99_ms": None, "errors": 0}
    m = re.search(r"Requests per second:\s+([\d.]+)", out)
    if m:
        r["rps"] = float(m.group(1))
    m = re.search(r"Complete requests:\s+(\d+)", out)
    if m:
        r["requests"] = int(m.group(1))
    m = re.search(r"Failed requests:\s+(\d+)", out)
    if m:
        r["errors"] += int(m.group(1))
    m = re.search(r"Non-2xx responses:\s+(\d+)", out)
    if m:
        r["errors"] += int(m.group(1))
    for pct, key in (("50", "p50_ms"), ("99", "p99_ms")):
        m = re.search(r"^\s+%s%%\s+(\d+)" % pct, out, re.M)
        if m:
            r[key] = float(m.group(1))
    return r


def parse_strace_c(text):
    """strace -c summary -> ({syscall: calls}, total calls)."""
    calls, total = {}, None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 5 or not re.match(r"^[\d.]+$", parts[0]):
            continue
        name = parts[-1]
        n = int(parts[3])
        if name == "total":
            total = n
        else:
            calls[name] = calls.get(name, 0) + n
    if total is None:
        total = sum(calls.values())
    return calls, total


def run_client(cmd, timeout):
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return cp.returncode, cp.stdout + cp.stderr
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        return None, out + "\n[harness: client timed out after %ss]" % timeout


# ---------------------------------------------------------------- the benchmark

def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


class Bench:
    def __init__(self, args):
        self.args = args
        self.work = args.work
        self.quill_bin = args.quill_bin
        self.procs = Procs(self.work)
        self.candidates = args.only
        self.wrk_secs = 3 if args.quick else 8
        self.idle_wrk_secs = 3 if args.quick else 5
        self.ab_n = 5000 if args.quick else 20000
        self.backend_pids = []
        self.results = {"runs": [], "idle": [], "syscalls": [], "failures": []}

    # -- backends
    def start_backends(self):
        write_configs(self.work)
        for i, port in enumerate(BACKENDS, 1):
            if port_open(port):
                raise RuntimeError("port %d already in use" % port)
            p = self.procs.start("backend%d" % i, [
                "nginx", "-p", self.work + "/", "-c", os.path.join(self.work, "backend%d.conf" % i),
                "-e", os.path.join(self.work, "backend%d.err" % i)])
            if not wait_ready(port, p):
                raise RuntimeError("backend on %d did not start (see %s/backend%d.log)" % (port, self.work, i))
            self.backend_procs = getattr(self, "backend_procs", []) + [p]
        time.sleep(0.3)
        self.backend_pids = [descendants(p.pid) for p in self.backend_procs]
        for port in BACKENDS:
            for path, size in (("/1k", 1024), ("/200k", 204800)):
                got = http_get(port, path)
                if got != (200, size):
                    raise RuntimeError("backend %d %s returned %s" % (port, path, got))
        log("backends up: %s" % self.backend_pids)

    def all_backend_pids(self):
        return [p for ps in self.backend_pids for p in ps]

    # -- one load measurement
    def measure(self, cand, workload, rnd):
        url = "http://127.0.0.1:%d/%s" % (cand.port, "200k" if workload == "wrk200k" else "1k")
        if workload.startswith("wrk"):
            run_client(["wrk", "-t1", "-c50", "-d1s", url], 30)  # warm-up
            cmd = ["wrk", "-t1", "-c50", "-d%ds" % self.wrk_secs, "--latency", url]
            timeout, parse = self.wrk_secs + 30, parse_wrk
        else:
            cmd = ["ab", "-r", "-s", "10", "-n", str(self.ab_n), "-c", "50", url]
            timeout, parse = 180, parse_ab
        pids = cand.pids()
        bpids = self.all_backend_pids()
        c0, b0, t0 = cpu_ticks(pids), cpu_ticks(bpids), time.monotonic()
        with RssSampler(pids) as rs:
            rc, out = run_client(cmd, timeout)
        c1, b1, t1 = cpu_ticks(pids), cpu_ticks(bpids), time.monotonic()
        r = parse(out)
        req = r["requests"] or 0
        alive = cand.alive()
        row = {"round": rnd, "workload": workload, "candidate": cand.name, "cmd": " ".join(cmd),
               "exit": rc, "wall_s": round(t1 - t0, 3),
               "cpu_s": (c1 - c0) / CLK_TCK, "backend_cpu_s": (b1 - b0) / CLK_TCK,
               "cpu_us_per_req": (c1 - c0) / CLK_TCK * 1e6 / req if req else None,
               "backend_cpu_us_per_req": (b1 - b0) / CLK_TCK * 1e6 / req if req else None,
               "peak_rss_kib": rs.peak, "pids": pids, **r}
        # A run counts in the medians only if it served, the candidate survived it, and
        # at most 1% of the requests failed (ab -r counts refused connections as done).
        row["valid"] = bool(r["rps"] and alive and r["errors"] <= 0.01 * req)
        if not alive:
            row["candidate_died"] = cand.exit_info()
            self.results["failures"].append({"round": rnd, "candidate": cand.name, "phase": workload,
                                             "error": "candidate exited during the run",
                                             **row["candidate_died"]})
            log("  %s exited during %s: %s" % (cand.name, workload, row["candidate_died"]))
        if r["rps"] is None:
            row["output_tail"] = out[-2000:]
            log("  %s %s: no result (exit %s): %s" % (cand.name, workload, rc, out[-300:].strip()))
        else:
            log("  %-13s %-7s %10.0f req/s  p99 %s ms  cpu %s us/req  rss %.1f MiB  errors %d" % (
                cand.name, workload, r["rps"], r["p99_ms"],
                None if row["cpu_us_per_req"] is None else round(row["cpu_us_per_req"], 1),
                rs.peak / 1024, r["errors"]))
        self.results["runs"].append(row)

    def load_round(self, rnd, order):
        cands = {}
        try:
            for name in order:
                c = Candidate(name, self)
                if c.start():
                    cands[name] = c
                else:
                    self.results["failures"].append({"round": rnd, "candidate": name, "phase": "start"})
            for wl in WORKLOADS:
                for name in order:
                    if name not in cands or (name, wl) in SKIP:
                        continue
                    c = cands[name]
                    if not c.alive():
                        info = c.exit_info()
                        log("  %s is not running before %s (exit %s): restarting it" % (name, wl, info["exit"]))
                        self.results["failures"].append({"round": rnd, "candidate": name, "phase": "before " + wl,
                                                         "error": "candidate had exited", **info})
                        c.stop()
                        if not c.start():
                            del cands[name]
                            continue
                    self.measure(c, wl, rnd)
        finally:
            for c in cands.values():
                c.stop()

    # -- idle connections
    def idle_one(self, name, rnd):
        c = Candidate(name, self)
        if not c.start():
            self.results["failures"].append({"round": rnd, "candidate": name, "phase": "idle start"})
            return
        hold = None
        ready = os.path.join(self.work, "idle.ready")
        stop = os.path.join(self.work, "idle.stop")
        for f in (ready, stop):
            if os.path.exists(f):
                os.unlink(f)
        try:
            pids = c.pids()
            time.sleep(0.3)
            samples = []
            for _ in range(3):
                samples.append(rss_kib(pids))
                time.sleep(0.1)
            rss_before = median(samples)
            be_before = established_to(BACKENDS)
            hold = self.procs.start("idle_hold", [
                sys.executable, os.path.join(HERE, "idle_hold.py"), "127.0.0.1", str(c.port),
                "-n", str(IDLE_N), "--hold", "150", "--open-timeout", "60",
                "--ready-file", ready, "--stop-file", stop], stdout=subprocess.PIPE)
            deadline = time.monotonic() + 75
            while not os.path.exists(ready) and hold.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
            opened = json.load(open(ready)) if os.path.exists(ready) else {"opened": 0, "errors": {"no ready file": 1}}
            # Let the proxy finish its backend connects, then wait for RSS to settle.
            time.sleep(1.0)
            prev, rss_idle = -1, rss_kib(pids)
            settle = time.monotonic() + 5
            while rss_idle != prev and time.monotonic() < settle:
                time.sleep(0.3)
                prev, rss_idle = rss_idle, rss_kib(pids)
            be_idle = established_to(BACKENDS)
            url = "http://127.0.0.1:%d/1k" % c.port
            cmd = ["wrk", "-t1", "-c50", "-d%ds" % self.idle_wrk_secs, "--latency", url]
            c0 = cpu_ticks(pids)
            with RssSampler(pids) as rs:
                rc, out = run_client(cmd, self.idle_wrk_secs + 30)
            c1 = cpu_ticks(pids)
            w = parse_wrk(out)
            open(stop, "w").close()
            try:
                hold_out, _ = hold.communicate(timeout=45)
                final = json.loads(hold_out.strip().splitlines()[-1])
            except (subprocess.TimeoutExpired, ValueError, IndexError):
                final = {"still_open": None}
            still = final.get("still_open")
            row = {"round": rnd, "candidate": name, "requested": IDLE_N,
                   "opened": opened.get("opened"), "open_errors": opened.get("errors"),
                   "open_seconds": opened.get("open_seconds"),
                   "still_open": still, "closed": final.get("closed"),
                   "rss_before_kib": rss_before, "rss_idle_kib": rss_idle,
                   "kib_per_conn": (rss_idle - rss_before) / still if still else None,
                   "backend_conns_before": be_before, "backend_conns_idle": be_idle,
                   "wrk_cmd": " ".join(cmd), "wrk_rps": w["rps"], "wrk_p99_ms": w["p99_ms"],
                   "wrk_errors": w["errors"], "wrk_requests": w["requests"],
                   "wrk_cpu_us_per_req": (c1 - c0) / CLK_TCK * 1e6 / w["requests"] if w["requests"] else None,
                   "peak_rss_kib": rs.peak,
                   "errors": (IDLE_N - (opened.get("opened") or 0)) + (IDLE_N - (still or 0)) + w["errors"]}
            if w["rps"] is None:
                row["wrk_output_tail"] = out[-1500:]
            self.results["idle"].append(row)
            log("  %-13s idle: opened %s still %s  rss %.1f -> %.1f MiB (%s KiB/conn)  be %d  wrk %s req/s  errors %d" % (
                name, row["opened"], still, rss_before / 1024, rss_idle / 1024,
                None if row["kib_per_conn"] is None else round(row["kib_per_conn"], 2),
                be_idle, w["rps"], row["errors"]))
        finally:
            if hold is not None and hold.poll() is None:
                open(stop, "w").close()
                self.procs.stop(hold, (signal.SIGTERM,), wait=20)
            elif hold is not None:
                self.procs.live.pop(hold.pid, None)
            c.stop()
        # Let the proxy-side sockets finish closing before the next candidate.
        time.sleep(1.0)

    # -- syscalls per request
    def strace_window(self, pids, seconds=None, load_cmd=None, trace=None):
        """Attach strace -f -c to pids; run load_cmd (or sleep `seconds`); detach. `trace`
        (e.g. "openat,openat2") counts only those syscalls (strace -e trace=...).
        Returns (calls dict, total, window seconds, client output)."""
        out_file = os.path.join(self.work, "strace.out")
        if os.path.exists(out_file):
            os.unlink(out_file)
        cmd = ["strace", "-f", "-c", "-o", out_file]
        if trace:
            cmd += ["-e", "trace=" + trace]
        for p in pids:
            cmd += ["-p", str(p)]
        nthreads = thread_count(pids)
        err_path = os.path.join(self.work, "strace.err")
        with open(err_path, "w") as err:
            t0 = time.monotonic()
            st = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
        with open(self.procs.pidfile, "a") as f:
            f.write("%d %s strace\n" % (st.pid, start_time(st.pid) or "?"))
        client_out = ""
        try:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and st.poll() is None:
                # "Process N attached" per thread, or one "attached with N threads" line.
                attached = sum(int(m.group(1) or 1) for m in re.finditer(
                    r"attached(?: with (\d+) threads)?", open(err_path).read()))
                if attached >= nthreads:
                    break
                time.sleep(0.05)
            time.sleep(0.3)
            if load_cmd:
                _, client_out = run_client(load_cmd, 120)
            else:
                time.sleep(max(0.0, seconds - (time.monotonic() - t0) - 0.3))
            time.sleep(0.3)
        finally:
            if st.poll() is None:
                st.send_signal(signal.SIGINT)
            try:
                st.wait(timeout=20)
            except subprocess.TimeoutExpired:
                st.kill()
                st.wait(timeout=5)
        window = time.monotonic() - t0
        text = open(out_file).read() if os.path.exists(out_file) else ""
        err_text = open(err_path).read()
        if not text and (st.returncode not in (0, -signal.SIGINT) or "detached" not in err_text):
            raise RuntimeError("strace failed (exit %s): %s" % (st.returncode, err_text[-500:]))
        # An empty summary after a clean detach means no syscalls at all in the window.
        calls, total = parse_strace_c(text)
        return calls, total, window, client_out

    def syscalls_one(self, name):
        c = Candidate(name, self)
        if not c.start():
            self.results["failures"].append({"candidate": name, "phase": "syscalls start"})
            return
        try:
            url = "http://127.0.0.1:%d/1k" % c.port
            run_client(["ab", "-n", "500", "-c", "10", url], 60)  # warm-up
            time.sleep(0.3)
            pids = c.pids()
            n = 1000
            load_cmd = ["ab", "-s", "10", "-n", str(n), "-c", "10", url]
            lc, lt, window, out = self.strace_window(pids, load_cmd=load_cmd)
            ab = parse_ab(out)
            ic, it, iwindow, _ = self.strace_window(pids, seconds=window)
            per = {k: (lc.get(k, 0) - ic.get(k, 0)) / n for k in set(lc) | set(ic)}
            top = sorted(per.items(), key=lambda kv: -kv[1])[:8]
            row = {"candidate": name, "requests": n, "ab_cmd": " ".join(load_cmd),
                   "ab_complete": ab["requests"], "ab_errors": ab["errors"], "ab_rps_traced": ab["rps"],
                   "load_window_s": round(window, 3), "idle_window_s": round(iwindow, 3),
                   "load_calls": lt, "idle_calls": it, "per_request": (lt - it) / n,
                   "top": [[k, round(v, 2)] for k, v in top if v > 0.005],
                   "load_by_syscall": lc, "idle_by_syscall": ic, "pids": pids}
            self.results["syscalls"].append(row)
            log("  %-13s syscalls/req %.2f  (load %d, idle %d, %.1fs)  top %s" % (
                name, row["per_request"], lt, it, window, row["top"][:5]))
        except RuntimeError as e:
            log("  %s syscalls: %s" % (name, e))
            self.results["failures"].append({"candidate": name, "phase": "syscalls", "error": str(e)})
        finally:
            c.stop()
            time.sleep(0.5)

    # -- main
    def run(self):
        t_start = time.monotonic()
        self.start_backends()
        base = list(self.candidates)
        for rnd in range(self.args.rounds):
            k = rnd % len(base)
            order = base[k:] + base[:k]
            log("round %d/%d, order: %s" % (rnd + 1, self.args.rounds, " ".join(order)))
            self.load_round(rnd, order)
            log("round %d: idle connections (%d)" % (rnd + 1, IDLE_N))
            for name in order:
                if (name, "idle") not in SKIP:
                    self.idle_one(name, rnd)
        log("syscalls per request (strace -f -c, ab -n 1000 -c 10)")
        for name in base:
            self.syscalls_one(name)
        self.results["elapsed_s"] = round(time.monotonic() - t_start, 1)


# ---------------------------------------------------------------- report

def fmt(v, nd=0, thousands=True):
    if v is None:
        return "–"
    if nd == 0 and thousands:
        return "{:,.0f}".format(v)
    return "{:.{}f}".format(v, nd)


def summarize(results, cands):
    runs = results["runs"]
    rounds = sorted({r["round"] for r in runs} | {r["round"] for r in results["idle"]})

    def get(cand, wl, key, rnd=None, valid_only=True):
        vals = [r[key] for r in runs if r["candidate"] == cand and r["workload"] == wl
                and (rnd is None or r["round"] == rnd) and (r.get("valid", True) or not valid_only)]
        return vals

    def ratio(cand, wl, key="rps", ref=REFERENCE):
        per_round = []
        for rnd in rounds:
            a, b = get(cand, wl, key, rnd), get(ref, wl, key, rnd)
            if a and b and a[0] and b[0]:
                per_round.append(a[0] / b[0])
        return median(per_round)

    load = {}
    for c in cands:
        row = {}
        for wl in WORKLOADS:
            row[wl] = {"rps": median(get(c, wl, "rps")), "p99_ms": median(get(c, wl, "p99_ms")),
                       "cpu_us_per_req": median(get(c, wl, "cpu_us_per_req")),
                       "backend_cpu_us_per_req": median(get(c, wl, "backend_cpu_us_per_req")),
                       "x_haproxy": ratio(c, wl), "errors": sum(get(c, wl, "errors", valid_only=False)),
                       "invalid_runs": len(get(c, wl, "errors", valid_only=False)) - len(get(c, wl, "errors")),
                       "runs": len([v for v in get(c, wl, "rps") if v is not None])}
        peaks = []
        for rnd in rounds:
            p = [r["peak_rss_kib"] for r in runs if r["candidate"] == c and r["round"] == rnd
                 and r.get("valid", True)]
            if p:
                peaks.append(max(p))
        row["peak_rss_mib"] = median(peaks) / 1024 if peaks else None
        load[c] = row

    idle = {}
    for c in cands:
        rows = [r for r in results["idle"] if r["candidate"] == c]
        if not rows:
            continue
        ref = {r["round"]: r["wrk_rps"] for r in results["idle"] if r["candidate"] == REFERENCE}
        ratios = [r["wrk_rps"] / ref[r["round"]] for r in rows
                  if r["wrk_rps"] and ref.get(r["round"])]
        m = lambda k: median([r[k] for r in rows])
        idle[c] = {"opened": min(r["opened"] or 0 for r in rows), "still_open": min(r["still_open"] or 0 for r in rows),
                   "rss_before_mib": m("rss_before_kib") / 1024 if m("rss_before_kib") is not None else None,
                   "rss_idle_mib": m("rss_idle_kib") / 1024 if m("rss_idle_kib") is not None else None,
                   "kib_per_conn": m("kib_per_conn"), "backend_conns": m("backend_conns_idle"),
                   "wrk_rps": m("wrk_rps"), "x_haproxy": median(ratios), "wrk_p99_ms": m("wrk_p99_ms"),
                   "errors": sum(r["errors"] for r in rows), "runs": len(rows)}
    syscalls = {r["candidate"]: {"per_request": r["per_request"], "top": r["top"],
                                 "ab_errors": r["ab_errors"]} for r in results["syscalls"]}
    summary = {"load": load, "idle": idle, "syscalls": syscalls}
    if "quill" in cands and "quill-base" in cands:
        summary["quill_vs_base"] = quill_vs_base(results, rounds)
    return summary


def quill_vs_base(results, rounds):
    """quill against quill-base, figure by figure: both medians and the median of the per-round
    ratios quill / quill-base (both were measured in the same round, one after the other)."""
    out = []

    def pair(label, rows, key, better, nd):
        a_all, b_all, ratios = [], [], []
        for rnd in rounds:
            a = [r[key] for r in rows if r["candidate"] == "quill" and r.get("round", rnd) == rnd
                 and r.get("valid", True) and r.get(key) is not None]
            b = [r[key] for r in rows if r["candidate"] == "quill-base" and r.get("round", rnd) == rnd
                 and r.get("valid", True) and r.get(key) is not None]
            a_all += a
            b_all += b
            if a and b and b[0]:
                ratios.append(a[0] / b[0])
        out.append({"figure": label, "quill": median(a_all), "quill_base": median(b_all),
                    "ratio": median(ratios), "better": better, "nd": nd})

    runs = results["runs"]
    for wl, name in (("wrk1k", "wrk 1 KiB keep-alive"), ("wrk200k", "wrk 200 KiB keep-alive"),
                     ("ab1k", "ab 1 KiB, a connection per request")):
        rows = [r for r in runs if r["workload"] == wl]
        pair("%s: req/s" % name, rows, "rps", "higher", 0)
        pair("%s: CPU µs/req" % name, rows, "cpu_us_per_req", "lower", 1)
        pair("%s: p99 ms" % name, rows, "p99_ms", "lower", 2)
    idle = [dict(r, rss_before_mib=r["rss_before_kib"] / 1024 if r.get("rss_before_kib") is not None else None,
                 rss_idle_mib=r["rss_idle_kib"] / 1024 if r.get("rss_idle_kib") is not None else None)
            for r in results["idle"]]
    pair("RSS before the idle connections, MiB", idle, "rss_before_mib", "lower", 1)
    pair("RSS with %s idle connections, MiB" % fmt(IDLE_N), idle, "rss_idle_mib", "lower", 1)
    pair("user-space KiB per idle connection", idle, "kib_per_conn", "lower", 2)
    pair("wrk 1 KiB req/s with the idle connections held", idle, "wrk_rps", "higher", 0)
    # One syscall count per candidate (not per round): the ratio is of the two counts.
    pair("syscalls per non-keep-alive request", results["syscalls"], "per_request", "lower", 2)
    return out


def targets(summary, cands):
    """Quill against the issue's targets. Returns list of (target, value, PASS/FAIL/n.a.)."""
    if "quill" not in cands:
        return []
    L, I, S = summary["load"], summary["idle"], summary["syscalls"]
    q = L.get("quill", {})
    out = []

    def check(desc, value, ok, shown):
        out.append((desc, shown, "n/a" if ok is None else ("PASS" if ok else "FAIL")))

    for wl, label in (("wrk1k", "wrk 1 KiB keep-alive req/s ≥ HAProxy"), ("ab1k", "ab 1 KiB no keep-alive req/s ≥ HAProxy")):
        x = q.get(wl, {}).get("x_haproxy")
        check(label, x, None if x is None else x >= 1.0, "×%s" % fmt(x, 2))
    a = q.get("wrk200k", {}).get("rps")
    b = L.get("socket-proxyd", {}).get("wrk200k", {}).get("rps")
    check("wrk 200 KiB req/s ≥ socket-proxyd", a, None if not (a and b) else a >= b,
          "%s vs %s" % (fmt(a), fmt(b)))
    for wl in WORKLOADS:
        a = q.get(wl, {}).get("cpu_us_per_req")
        b = L.get(REFERENCE, {}).get(wl, {}).get("cpu_us_per_req")
        check("CPU µs/req ≤ HAProxy (%s)" % wl, a, None if not (a and b) else a <= b,
              "%s vs %s" % (fmt(a, 1), fmt(b, 1)))
    qi = I.get("quill", {})
    k = qi.get("kib_per_conn")
    check("≤ 1 KiB user-space RSS per idle connection", k, None if k is None else k <= 1.0, "%s KiB" % fmt(k, 2))
    a, b = qi.get("rss_idle_mib"), I.get("pen", {}).get("rss_idle_mib")
    check("total RSS at %d idle ≤ Pen's" % IDLE_N, a, None if not (a and b) else a <= b,
          "%s vs %s MiB" % (fmt(a, 1), fmt(b, 1)))
    if qi:
        ok = qi["opened"] == IDLE_N and qi["still_open"] == IDLE_N and qi["errors"] == 0
        check("%d concurrent connections, zero failures" % IDLE_N, None, ok,
              "opened %d, still open %d, errors %d" % (qi["opened"], qi["still_open"], qi["errors"]))
    else:
        check("%d concurrent connections, zero failures" % IDLE_N, None, None, "not measured")
    s = S.get("quill", {}).get("per_request")
    check("≤ 16 syscalls per non-keep-alive request", s, None if s is None else s <= 16, fmt(s, 2))
    return out


def render(results, cands, meta):
    summ = summarize(results, cands)
    L, I, S = summ["load"], summ["idle"], summ["syscalls"]
    lines = []
    w = lines.append
    w("# Quill benchmark — %s" % meta["date"])
    w("")
    if meta.get("interrupted"):
        w("**Interrupted or failed: partial results.**")
        w("")
    w("Command: `%s`  " % meta["command"])
    w("Rounds: %d%s; machine: %s, %d CPUs; elapsed %s s." % (
        meta["rounds"], " (quick)" if meta["quick"] else "", meta["kernel"], meta["cpus"],
        results.get("elapsed_s", "–")))
    w("Versions: %s" % "; ".join("%s %s" % kv for kv in meta["versions"].items()))
    w("")
    w("## Load (medians over rounds; ×HAProxy = median of per-round ratios to haproxy mode tcp, nbthread 2)")
    w("")
    w("| candidate | wrk 1k req/s | ×HAProxy | p99 ms | CPU µs/req | wrk 200k req/s | ×HAProxy | p99 ms | CPU µs/req | ab 1k req/s | ×HAProxy | CPU µs/req | peak RSS MiB | errors |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in cands:
        r = L[c]
        cells = [c]
        for wl in WORKLOADS:
            d = r[wl]
            cells += [fmt(d["rps"]), fmt(d["x_haproxy"], 2)]
            if wl != "ab1k":
                cells.append(fmt(d["p99_ms"], 2))
            cells.append(fmt(d["cpu_us_per_req"], 1))
        cells.append(fmt(r["peak_rss_mib"], 1))
        cells.append(str(sum(r[wl]["errors"] for wl in WORKLOADS)))
        w("| " + " | ".join(cells) + " |")
    w("")
    w("wrk: `wrk -t1 -c50 -d%s --latency URL` after a 1 s warm-up; ab: `ab -r -s 10 -n %d -c 50 URL` "
      "(HTTP/1.0, a new connection per request). CPU µs/req = utime+stime of the candidate's processes "
      "(all threads) / requests; `direct` = the backend nginx itself. Peak RSS = sum of VmRSS over the "
      "candidate's processes, sampled every 100 ms, max per round, median over rounds. "
      "socket-proxyd (systemd-socket-proxyd, splice, backend 9001 only) runs only the 200k and ab rows. "
      "errors = wrk socket errors + non-2xx, ab failed requests, summed over rounds; a run where "
      "more than 1%% of requests failed or the candidate exited is left out of the medians (see Failures)." % (
          meta["wrk_duration"], meta["ab_n"]))
    w("")
    if I:
        w("## Idle connections (%d held through the candidate, then wrk while they are held)" % IDLE_N)
        w("")
        w("| candidate | RSS before MiB | RSS with idle MiB | KiB/conn | opened | still open | backend conns | wrk req/s while idle | ×HAProxy | p99 ms | errors |")
        w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for c in cands:
            if c in I:
                r = I[c]
                w("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                    c, fmt(r["rss_before_mib"], 1), fmt(r["rss_idle_mib"], 1), fmt(r["kib_per_conn"], 2),
                    r["opened"], r["still_open"], fmt(r["backend_conns"]), fmt(r["wrk_rps"]),
                    fmt(r["x_haproxy"], 2), fmt(r["wrk_p99_ms"], 2), r["errors"]))
        w("")
        w("Idle client: `bench/idle_hold.py` (%d connections from 127.0.0.2+, nothing sent). RSS is the "
          "candidate's (for `direct`: backend nginx 9001); KiB/conn = (RSS with idle − RSS before) / "
          "connections still open. opened / still open = worst round; still open is checked after the "
          "wrk run (non-blocking recv gives EAGAIN). backend conns = ESTABLISHED sockets on :9001/:9002 "
          "while held. wrk: `wrk -t1 -c50 -d%ss --latency …/1k`. errors = not opened + not still open + "
          "wrk errors, summed over rounds. socket-proxyd is skipped (6 fds per connection: it tops out "
          "near 3,300)." % (IDLE_N, meta["idle_wrk_duration"]))
        w("")
    if S:
        w("## Syscalls per non-keep-alive request")
        w("")
        w("| candidate | syscalls/req | load window calls | idle window calls | window s | top syscalls per request | ab failed |")
        w("|---|---:|---:|---:|---:|---|---:|")
        for c in cands:
            rows = [r for r in results["syscalls"] if r["candidate"] == c]
            if rows:
                r = rows[0]
                top = ", ".join("%s %.2f" % (k, v) for k, v in r["top"][:6])
                w("| %s | %s | %s | %s | %s | %s | %s |" % (
                    c, fmt(r["per_request"], 2), fmt(r["load_calls"]), fmt(r["idle_calls"]),
                    fmt(r["load_window_s"], 1), top, r["ab_errors"]))
        w("")
        w("`strace -f -c -p PID…` attached to all the candidate's processes (and, with -f, their threads) "
          "while `ab -n 1000 -c 10 …/1k` runs, minus the calls counted by an equal-length attach with no "
          "load (start-up/attach/timers), / 1000. `direct` = the backend nginx's own syscalls.")
        w("")
    if summ.get("quill_vs_base"):
        w("## quill against quill-base (same run; ratio = median of per-round quill / quill-base)")
        w("")
        w("quill: `%s`; quill-base: `%s`." % (meta.get("quill_src", "?"), meta.get("quill_base_src", "?")))
        w("")
        w("| figure | quill | quill-base | quill / base | better when |")
        w("|---|---:|---:|---:|---|")
        for f in summ["quill_vs_base"]:
            w("| %s | %s | %s | %s | %s |" % (f["figure"], fmt(f["quill"], f["nd"]),
                                            fmt(f["quill_base"], f["nd"]), fmt(f["ratio"], 3), f["better"]))
        w("")
        w("Both binaries run with the same arguments, each started fresh per round and workload, in the "
          "round's rotating order. Only a same-run comparison counts: figures drift up to 2x between "
          "runs on this machine; within one run, a few % either way is noise on a single round.")
        w("")
    t = targets(summ, cands)
    if t:
        w("## Quill against the targets")
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


VERSION_PACKAGES = ("haproxy", "nginx", "libnginx-mod-stream", "pen", "wrk", "apache2-utils", "strace",
                    "systemd")


def versions(quill_bin, cands, quill_base_bin=None, pkgs=VERSION_PACKAGES):
    """The versions of the Debian packages `pkgs` (those installed), of the Quill binaries among
    `cands` (`quill --version`) and of Python, for a results file."""
    v = {}
    pkgs = list(pkgs)
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Package} ${Version}\\n"] + pkgs,
                             capture_output=True, text=True, timeout=20).stdout
        for line in out.splitlines():
            k, _, ver = line.partition(" ")
            if ver:
                v[k] = ver
    except (OSError, subprocess.TimeoutExpired):
        pass
    for name, path in (("quill", quill_bin), ("quill-base", quill_base_bin)):
        if name not in cands or not path:
            continue
        try:
            v[name] = subprocess.run([path, "--version"], capture_output=True, text=True,
                                     timeout=10).stdout.strip() or "?"
        except (OSError, subprocess.TimeoutExpired):
            v[name] = "?"
    v["python"] = platform.python_version()
    return v


def run_guarded(bench):
    """bench.run(), then every process it started stopped. True when it was interrupted or its
    set-up failed (the failure recorded in bench.results): the results are partial."""
    try:
        bench.run()
    except KeyboardInterrupt as e:
        log("interrupted (%s): writing partial results" % e)
        return True
    except RuntimeError as e:
        log("error: %s" % e)
        bench.results["failures"].append({"phase": "setup", "error": str(e)})
        return True
    finally:
        bench.procs.stop_all()
    return False


def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "?"


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--quill-bin")
    p.add_argument("--quill-base-bin", help="a second Quill binary, the candidate quill-base")
    p.add_argument("--quill-src", default="", help="where --quill-bin was copied from (for the report)")
    p.add_argument("--quill-base-src", default="", help="where --quill-base-bin was copied from")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default=",".join(ALL_CANDIDATES))
    p.add_argument("--results", default=os.path.join(HERE, "results"))
    p.add_argument("--command", default="bench/run.sh")
    a = p.parse_args(argv)
    names = []
    for n in a.only.split(","):
        n = ALIASES.get(n.strip(), n.strip())
        if n and n not in ALL_CANDIDATES:
            p.error("unknown candidate %r (known: %s)" % (n, ", ".join(ALL_CANDIDATES)))
        if n and n not in names:
            names.append(n)
    if "quill" in names and not a.quill_bin:
        log("no Quill binary: leaving quill out")
        names.remove("quill")
    if "quill-base" in names and not a.quill_base_bin:
        p.error("quill-base needs --quill-base-bin (run.sh: QUILL_BASE_BIN=/path/to/quill)")
    a.only = names
    if not 1 <= a.rounds <= 20:
        p.error("--rounds must be 1..20")

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)

    bench = Bench(a)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "command": a.command, "rounds": a.rounds, "quick": a.quick, "candidates": names,
            "kernel": "Linux " + platform.release(), "cpus": os.cpu_count(),
            "wrk_duration": "%ds" % bench.wrk_secs, "idle_wrk_duration": bench.idle_wrk_secs,
            "ab_n": bench.ab_n, "idle_connections": IDLE_N, "maxconn": MAXCONN,
            "versions": versions(a.quill_bin, names, a.quill_base_bin), "ports": {n: PORTS[n] for n in names},
            "quill_src": a.quill_src or a.quill_bin, "quill_base_src": a.quill_base_src or a.quill_base_bin}
    interrupted = run_guarded(bench)
    meta["interrupted"] = interrupted
    md, summ = render(bench.results, names, meta)
    os.makedirs(a.results, exist_ok=True)
    with open(os.path.join(a.results, "latest.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(a.results, "latest.json"), "w") as f:
        json.dump({"meta": meta, "summary": summ, **bench.results}, f, indent=1, default=str)
    print(md)
    return 1 if interrupted else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
