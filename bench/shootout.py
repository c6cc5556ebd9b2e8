#!/usr/bin/env python3
"""The load balancer shootout (called by bench/shootout.sh).

Starts the two nginx backends and every candidate of bench/harness.py (Quill, HAProxy mode tcp,
nginx stream, Pen), adds HAProxy `mode http` and nginx `http` proxying, then hands the measuring to
`quill bench`: one interleaved run over every candidate (`--target NAME=URL`), one measurement per
concurrency level (`--sweep`), with idle connections held during each (`--idle`), and the chart
(`--plot`). Python 3 standard library only; loopback only; every process it starts is stopped by
PID (WORK/pids for shootout.sh's EXIT trap, and `finally` here).
"""

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402  (same directory)

HTTP_PORTS = {"haproxy-http": 9206, "nginx-http": 9207}
ORDER = ["quill", "haproxy", "haproxy-http", "nginx-stream", "nginx-http", "pen", "direct"]
LABELS = {"quill": "quill", "haproxy": "haproxy-tcp", "haproxy-http": "haproxy-http",
          "nginx-stream": "nginx-stream", "nginx-http": "nginx-http", "pen": "pen",
          "direct": "direct"}


def write_http_configs(work):
    with open(os.path.join(work, "haproxy-http.cfg"), "w") as f:
        f.write("""global
    nbthread 2
    maxconn {mc}
defaults
    mode http
    maxconn {mc}
    option http-keep-alive
    timeout connect 5s
    timeout client 600s
    timeout server 600s
    timeout http-keep-alive 600s
frontend fe
    bind 127.0.0.1:{port}
    default_backend be
backend be
    balance roundrobin
    server s1 127.0.0.1:9001
    server s2 127.0.0.1:9002
""".format(mc=harness.MAXCONN, port=HTTP_PORTS["haproxy-http"]))
    with open(os.path.join(work, "nginx-http.conf"), "w") as f:
        f.write("""daemon off;
worker_processes 2;
worker_rlimit_nofile 20000;
pid {w}/nginx-http.pid;
error_log {w}/nginx-http.err warn;
events {{ worker_connections 19900; }}
http {{
    access_log off;
    keepalive_timeout 600s;
    keepalive_requests 1000000;
    client_header_timeout 600s;
    upstream be {{ server 127.0.0.1:9001; server 127.0.0.1:9002; keepalive 256; }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://be;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_read_timeout 600s;
        }}
    }}
}}
""".format(w=work, port=HTTP_PORTS["nginx-http"]))


def command(name, work, quill_bin):
    if name == "haproxy-http":
        return ["haproxy", "-db", "-f", os.path.join(work, "haproxy-http.cfg")]
    if name == "nginx-http":
        return ["nginx", "-p", work + "/", "-c", os.path.join(work, "nginx-http.conf"),
                "-e", os.path.join(work, "nginx-http.err")]
    return harness.candidate_cmd(name, work, quill_bin)


def count_connections(quill_bin, targets, requests=5000):
    """Per candidate, after the sweep: the connections it opened to the backends and the TCP
    segments sent (by every party on loopback) per request, from the kernel's counters (`nstat`)
    around a short run of its own (50 active, no idle, a new client connection per request)."""
    found = {}
    for t in targets:
        name, url = t.split("=", 1)
        subprocess.run(["nstat", "-n"], check=True)
        run = subprocess.run([quill_bin, "bench", "--json", "--active", "50", "--requests",
                              str(requests), url], stdout=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, timeout=300, check=True)
        st = subprocess.run(["nstat", "-z", "TcpActiveOpens", "TcpOutSegs"],
                            stdout=subprocess.PIPE, text=True, check=True).stdout
        counters = {l.split()[0]: int(l.split()[1]) for l in st.splitlines()
                    if l.startswith("Tcp")}
        summary = json.loads(run.stdout)
        done = summary["complete"]
        # Every connect on the machine: the bench's own (one per request, failed ones included),
        # then the proxy's.
        found[name] = {"requests": done,
                       "backend_connections": counters.get("TcpActiveOpens", 0) - done
                       - summary["failed"],
                       "segments": counters.get("TcpOutSegs", 0)}
        harness.log("%s: %d backend connections, %.1f segments per request" % (
            name, found[name]["backend_connections"], found[name]["segments"] / max(done, 1)))
    return found


def sweep_timeout(bench_args, targets):
    """A generous bound on the sweep's run time: per measurement its duration plus a minute
    (opening and closing the idle connections), times levels, targets and rounds."""
    args = bench_args.split()
    def opt(name, default):
        return args[args.index(name) + 1] if name in args[:-1] else default
    levels = len(opt("--sweep", "1").replace(":", ",").split(","))
    if ":" in opt("--sweep", ""):
        start, end, step = (int(x) for x in opt("--sweep", "").split(":"))
        levels = (end - start) // max(step, 1) + 2
    dur = opt("--duration", "10s")
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    unit = next((u for u in ("ms", "s", "m", "h") if dur.endswith(u)), "")
    seconds = float(dur[:len(dur) - len(unit)]) * units.get(unit, 1)
    return levels * targets * int(opt("--rounds", "1")) * (seconds + 60) + 300


def port_of(name):
    return HTTP_PORTS.get(name) or harness.PORTS[name]


def render(path, command, started, load_before, load_after):
    """The results as Markdown: requests/s per candidate and level (medians over the rounds, with
    the range), then p99 and failures."""
    with open(path) as f:
        rep = json.load(f)
    rows = rep["medians"]
    rounds = rep.get("rounds", 1)
    names = []
    for r in rows:
        if r["target"] not in names:
            names.append(r["target"])
    levels = rep["levels"]
    cell = {(r["target"], r["active"]): r for r in rows}
    out = ["# Load balancer shootout", "",
           "Command: `%s`  " % command,
           "Started %s; %d CPUs; load average before %s, after %s.  " % (
               started, os.cpu_count(), load_before, load_after),
           "Versions: %s." % "; ".join("%s %s" % kv for kv in sorted(
               harness.versions(None, []).items()) if kv[0] in ("haproxy", "nginx", "pen")),
           "",
           "Every candidate in front of the same two nginx backends (1 KiB file), measured by "
           "`quill bench` with %d idle connections held open during each measurement and a new "
           "connection per request (%s); at each level the candidates take turns, the order "
           "rotating, and the whole set is repeated %d times (rounds), the order rotating again. "
           "Figures are medians over the rounds. Chart: `docs/shootout.svg`." % (
               rep["idle"], "keep-alive" if rep["keepalive"] else "HTTP/1.1, Connection: close", rounds),
           "", "## Requests per second (median of %d rounds; lowest–highest below)" % rounds, ""]
    out.append("| candidate | " + " | ".join("%d active" % l for l in levels) + " |")
    out.append("|---|" + "---:|" * len(levels))
    for n in names:
        out.append("| %s | " % n + " | ".join(
            "{:,.0f}".format(cell[(n, l)]["requests_per_second"]) if (n, l) in cell else "–"
            for l in levels) + " |")
    out += ["", "Range over the rounds (lowest–highest requests per second):", ""]
    out.append("| candidate | " + " | ".join("%d active" % l for l in levels) + " |")
    out.append("|---|" + "---:|" * len(levels))
    for n in names:
        out.append("| %s | " % n + " | ".join(
            "{:,.0f}–{:,.0f}".format(cell[(n, l)]["requests_per_second_min"],
                                     cell[(n, l)]["requests_per_second_max"])
            if (n, l) in cell else "–" for l in levels) + " |")
    if len(names) > 1 and "quill" in names:
        out += ["", "Quill's median against each other candidate's, per level (ratio):", ""]
        out.append("| against | " + " | ".join("%d active" % l for l in levels) + " |")
        out.append("|---|" + "---:|" * len(levels))
        for n in names:
            if n == "quill":
                continue
            out.append("| %s | " % n + " | ".join(
                "%.2f" % (cell[("quill", l)]["requests_per_second"] / cell[(n, l)]["requests_per_second"])
                if ("quill", l) in cell and (n, l) in cell and cell[(n, l)]["requests_per_second"] > 0
                else "–" for l in levels) + " |")
    out += ["", "## p99 latency (ms, median of the rounds) and failed requests (all rounds)", ""]
    out.append("| candidate | " + " | ".join("%d active" % l for l in levels) + " |")
    out.append("|---|" + "---:|" * len(levels))
    for n in names:
        cells = []
        for l in levels:
            s = cell.get((n, l))
            cells.append("–" if s is None else "%.1f / %d" % (s["p99_us"] / 1000.0, s["failed"]))
        out.append("| %s | " % n + " | ".join(cells) + " |")
    conns = rep.get("connections")
    if conns:
        out += ["", "## Connections to the backends and TCP segments, per request", "",
                "After the sweep, each candidate alone: 5,000 requests at 50 active, no idle, a new "
                "client connection per request; counted by the kernel (`nstat TcpActiveOpens`, "
                "minus the client's own connects, and `TcpOutSegs`, every party on loopback).", "",
                "| candidate | backend connections per request | TCP segments per request |",
                "|---|---:|---:|"]
        for n in names:
            c = conns.get(n)
            if c and c["requests"] > 0:
                out.append("| %s | %s | %.1f |" % (
                    n, "–" if n == "direct" else "%.3f" % (c["backend_connections"] / c["requests"]),
                    c["segments"] / c["requests"]))
    idle_held = min((s["idle_held"] for s in cell.values()), default=0)
    complete = sum(s["complete"] for s in cell.values())
    out += ["", "Idle connections still open at the end of every measurement: at least %d of %d. "
            "Requests completed over the whole run: {:,}.".format(complete) % (idle_held, rep["idle"])]
    return "\n".join(out) + "\n"


def main(argv):
    if argv and argv[0] == "--render":
        r = argparse.ArgumentParser()
        r.add_argument("--render", required=True)
        r.add_argument("--command", default="bash bench/shootout.sh")
        r.add_argument("--started", default="")
        r.add_argument("--load-before", default="")
        r.add_argument("--load-after", default="")
        a = r.parse_args(argv)
        sys.stdout.write(render(a.render, a.command, a.started, a.load_before, a.load_after))
        return 0
    p = argparse.ArgumentParser()
    p.add_argument("--work", required=True)
    p.add_argument("--quill-bin", required=True)
    p.add_argument("--only", default=",".join(ORDER))
    p.add_argument("--bench-args", default="", help="extra arguments for quill bench")
    p.add_argument("--out-json", required=True)
    a = p.parse_args(argv)
    names = [n for n in a.only.split(",") if n]
    for n in names:
        if n not in ORDER:
            p.error("unknown candidate %r (known: %s)" % (n, ", ".join(ORDER)))

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)

    procs = harness.Procs(a.work)
    rc = 1
    try:
        harness.write_configs(a.work)
        write_http_configs(a.work)
        for i, port in enumerate(harness.BACKENDS, 1):
            if harness.port_open(port):
                raise RuntimeError("port %d already in use" % port)
            bp = procs.start("backend%d" % i, [
                "nginx", "-p", a.work + "/", "-c", os.path.join(a.work, "backend%d.conf" % i),
                "-e", os.path.join(a.work, "backend%d.err" % i)])
            if not harness.wait_ready(port, bp):
                raise RuntimeError("backend on %d did not start" % port)
        targets = []
        for n in names:
            port = port_of(n)
            if n != "direct":
                if harness.port_open(port):
                    raise RuntimeError("port %d already in use before starting %s" % (port, n))
                cp = procs.start(n, command(n, a.work, a.quill_bin))
                if not harness.wait_ready(port, cp):
                    raise RuntimeError("%s did not become ready (see %s/%s.log)" % (n, a.work, n))
            got = harness.http_get(port, "/1k")
            if got != (200, 1024):
                raise RuntimeError("%s: GET /1k gave %s" % (n, got))
            targets.append("%s=http://127.0.0.1:%d/1k" % (LABELS[n], port))
        time.sleep(0.5)
        cmd = [a.quill_bin, "bench", "--json"] + a.bench_args.split()
        for t in targets:
            cmd += ["--target", t]
        harness.log("running: " + " ".join(cmd))
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                             timeout=sweep_timeout(a.bench_args, len(targets)))
        with open(a.out_json, "wb") as f:
            f.write(out.stdout)
        rep = json.loads(out.stdout or b"null")
        rc = out.returncode
        if rc == 0 and shutil.which("nstat"):
            # An extra: if it fails, the sweep's results above are kept as they are.
            try:
                rep["connections"] = count_connections(a.quill_bin, targets)
                with open(a.out_json, "w") as f:
                    json.dump(rep, f)
            except (subprocess.SubprocessError, ValueError, KeyError) as e:
                harness.log("connection count skipped: %s" % e)
    except (KeyboardInterrupt, RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
        harness.log("shootout stopped: %s" % e)
        rc = 1
    finally:
        procs.stop_all()
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
