#!/usr/bin/env python3
"""Where a TLS keep-alive request's cost goes: Quill (one or more binaries) and nginx terminating
TLS in front of two nginx backends, with bench/tls/tls.py's configurations on ports of their own
(backends 9151, 9152; quill 9161, nginx 9163). Per candidate and round, after a 1 s warm-up:
`wrk -t1 -cC -dS --latency https://127.0.0.1:PORT/1k`, then per request the CPU of the proxy, of
wrk and of the backends, the share of the machine that was busy, the latency percentiles, how many
sockets each of the proxy's epoll sets held halfway through (a worker per set: are the clients
spread?), and with --perf the proxy's system calls, context switches and migrations
(`perf stat -e 'syscalls:sys_enter_*'`).

    python3 bench/tls/keepalive_probe.py --quill target/release/quill \\
        [--quill-base /tmp/old/quill] [--rounds 3] [--secs 4] [--perf] [--no-nginx]

Loopback only; every process it starts is stopped by PID. Take the bench lock around it
(`flock /work/notes/bench.lock ...` on the shared machines). Prints one block per run.
"""

import argparse
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import harness as H  # noqa: E402
import tls as T  # noqa: E402

T.BACKENDS = (9151, 9152)
T.PORTS = {"quill": 9161, "haproxy": 9162, "nginx": 9163, "quill-base": 9164}
SYSCALLS = ["recvfrom", "sendto", "read", "write", "writev", "readv", "sendmsg", "recvmsg",
            "epoll_wait", "epoll_pwait", "epoll_ctl", "accept4", "connect", "close", "futex"]


def epoll_sizes(pids):
    """Sockets registered in each epoll set of `pids` (a set listed under two fds shows twice)."""
    out = []
    for pid in pids:
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("/proc/%d/fd/%s" % (pid, fd)) == "anon_inode:[eventpoll]":
                    with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                        out.append(sum(1 for line in f if line.startswith("tfd:")))
            except OSError:
                pass
    return out


def cpu_line():
    with open("/proc/stat") as f:
        return [int(x) for x in f.readline().split()[1:]]


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quill", required=True, help="the quill binary")
    ap.add_argument("--quill-base", help="a second quill binary (the build before a change)")
    ap.add_argument("--no-nginx", action="store_true")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--secs", type=int, default=4)
    ap.add_argument("--conns", type=int, default=50)
    ap.add_argument("--perf", action="store_true", help="count system calls with perf stat")
    a = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix="quill-ka-probe.")
    certs = T.make_certs(work)
    T.write_configs(work, certs)
    procs = []

    def start(name, cmd):
        log = open(os.path.join(work, name + ".log"), "w")
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        procs.append(p)
        return p

    def stop(p):
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    cands = ["quill"] + (["quill-base"] if a.quill_base else []) + ([] if a.no_nginx else ["nginx"])
    try:
        backends = []
        for i, port in enumerate(T.BACKENDS, 1):
            backends.append(start("backend%d" % i, [
                "nginx", "-p", work + "/", "-c", os.path.join(work, "backend%d.conf" % i),
                "-e", os.path.join(work, "backend%d.err" % i)]))
            if not H.wait_ready(port):
                raise RuntimeError("backend %d did not start" % port)
        for rnd in range(1, a.rounds + 1):
            k = (rnd - 1) % len(cands)
            for name in cands[k:] + cands[:k]:
                cmd = T.candidate_cmd(name, "ecdsa", work, a.quill, a.quill_base)
                p = start(name, cmd)
                port = T.PORTS[name]
                if not H.wait_ready(port, p):
                    raise RuntimeError("%s did not listen on %d" % (name, port))
                time.sleep(0.3)
                url = "https://127.0.0.1:%d/1k" % port
                H.run_client(["wrk", "-t1", "-c%d" % a.conns, "-d1s", url], 30)
                pids = H.descendants(p.pid)
                bpids = [q for b in backends for q in H.descendants(b.pid)]
                perf = None
                if a.perf:
                    events = ["raw_syscalls:sys_enter", "context-switches", "cpu-migrations"] + [
                        "syscalls:sys_enter_" + s for s in SYSCALLS]
                    perf = subprocess.Popen(["perf", "stat", "-x,", "-e", ",".join(events), "-p",
                                             ",".join(map(str, pids))], stderr=subprocess.PIPE, text=True)
                    time.sleep(0.2)
                sizes = []
                sampler = threading.Thread(target=lambda: (time.sleep(a.secs / 2),
                                                           sizes.extend(epoll_sizes(pids))))
                b0, c0, s0 = H.cpu_ticks(bpids), H.cpu_ticks(pids), cpu_line()
                r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                sampler.start()
                _, out = H.run_client(["wrk", "-t1", "-c%d" % a.conns, "-d%ds" % a.secs, "--latency", url],
                                      a.secs + 30)
                sampler.join()
                r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                b1, c1, s1 = H.cpu_ticks(bpids), H.cpu_ticks(pids), cpu_line()
                counts = {}
                if perf:
                    perf.send_signal(signal.SIGINT)
                    for line in perf.communicate()[1].splitlines():
                        f = line.split(",")
                        if len(f) > 3 and f[0].strip().isdigit() and int(f[0]):
                            counts[f[2].replace("syscalls:sys_enter_", "")] = int(f[0])
                stop(p)
                time.sleep(0.3)
                res = H.parse_wrk(out)
                n = res.get("requests") or 0
                if not n:
                    print("%s round %d: no result: %s" % (name, rnd, out[-300:]), flush=True)
                    continue
                d = [y - x for x, y in zip(s0, s1)]
                wrk_s = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
                lat = " ".join("p%s %s" % m for m in re.findall(r"^\s+(50|90|99)%\s+(\S+)", out, re.M))
                print("%s round %d: %.0f req/s, %s; epoll sets %s" % (name, rnd, res["rps"], lat, sizes))
                print("  CPU us per request: proxy %.1f, wrk %.1f, backends %.1f; machine busy %.0f%%" % (
                    (c1 - c0) / H.CLK_TCK * 1e6 / n, wrk_s * 1e6 / n, (b1 - b0) / H.CLK_TCK * 1e6 / n,
                    100.0 * (sum(d) - d[3] - d[4]) / max(sum(d), 1)))
                if counts:
                    # perf's window is a little longer than wrk's: the figures are slightly high.
                    print("  per request: " + " ".join("%s %.2f" % (k, v / n) for k, v in counts.items()))
                sys.stdout.flush()
    finally:
        for p in procs:
            stop(p)
        subprocess.run(["rm", "-rf", work])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
