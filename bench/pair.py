#!/usr/bin/env python3
"""Two Quill builds measured at the same moment: a comparison the machine's drift cannot skew.

On a shared virtual machine a build's CPU per request moves by tens of percent within minutes
(docs/benchmarks.md, the fourth cuts), more than most changes; interleaved rounds only spread that
drift over both builds. Here both builds run side by side in every round, each with one worker in
front of the same nginx backend, each loaded by its own `wrk -t1` for the same seconds, so that
whatever the machine does in a round it does to both. Per round: each build's CPU per request
(utime + stime of all its threads from /proc, over the requests its wrk completed) and their
ratio; which build gets which port alternates by round. The backend and both wrk run under
SCHED_BATCH (`chrt -b 0`), as floor.sh's --batch-peers.

  python3 bench/pair.py --quill target/release/quill --base /tmp/old/quill
      [--mode http|tcp] [--rounds 10] [--duration 5] [--connections 25] [--port 9161]

Ports: PORT (the backend), PORT+1 and PORT+2 (the two builds). Loopback only; every process it
starts is stopped by its PID. Needs nginx, wrk and chrt (util-linux).
"""

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

CLK_TCK = os.sysconf("SC_CLK_TCK")
BATCH = ["chrt", "-b", "0"]


def cpu_seconds(pid):
    """utime + stime of every thread of `pid`, in seconds."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def stop(p, within=10):
    """Stops process `p` by its PID: SIGTERM, then SIGKILL after `within` seconds."""
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(within)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def wait_listening(port, proc, within=10):
    """Waits until something listens on 127.0.0.1:`port` (from /proc/net/tcp); False if `proc`
    exited or `within` seconds passed."""
    want = ":%04X" % port
    end = time.time() + within
    while time.time() < end and proc.poll() is None:
        with open("/proc/net/tcp") as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[1].endswith(want) and cols[3] == "0A":
                    return True
        time.sleep(0.1)
    return False


def wrk(port, seconds, connections):
    return ["wrk", "-t1", f"-c{connections}", f"-d{seconds}", f"http://127.0.0.1:{port}/1k"]


def requests_of(output):
    m = re.search(r"(\d+) requests in", output)
    if not m:
        raise RuntimeError("wrk printed no request count:\n" + output)
    return int(m.group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quill", required=True)
    ap.add_argument("--base", required=True)
    ap.add_argument("--mode", choices=["http", "tcp"], default="http")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--connections", type=int, default=25)
    ap.add_argument("--port", type=int, default=9161)
    a = ap.parse_args()
    builds = {"quill": os.path.abspath(a.quill), "quill-base": os.path.abspath(a.base)}
    backend = a.port
    with tempfile.TemporaryDirectory(prefix="quill-pair.") as work:
        with open(os.path.join(work, "1k"), "wb") as f:
            f.write(b"x" * 1024)
        with open(os.path.join(work, "nginx.conf"), "w") as f:
            f.write(f"""worker_processes 1;
daemon off;
pid {work}/nginx.pid;
error_log {work}/nginx.err;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  server {{ listen 127.0.0.1:{backend}; root {work}; location / {{ }} }}
}}
""")
        nginx = subprocess.Popen(BATCH + ["nginx", "-p", work + "/", "-c", os.path.join(work, "nginx.conf")],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ratios = []
        try:
            if not wait_listening(backend, nginx):
                sys.exit(f"pair.py: the nginx backend did not listen on {backend}")
            print(f"| round | quill µs/req | quill-base µs/req | quill / quill-base | requests (quill, base) |")
            print("|---:|---:|---:|---:|---|")
            for r in range(1, a.rounds + 1):
                names = ["quill", "quill-base"] if r % 2 else ["quill-base", "quill"]
                ports = {n: a.port + 1 + i for i, n in enumerate(names)}
                procs = {}
                try:
                    for n in names:
                        args = [builds[n], "--workers", "1", "-r"] + (["-H"] if a.mode == "http" else [])
                        args += [f"127.0.0.1:{ports[n]}", f"127.0.0.1:{backend}"]
                        procs[n] = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    for n in names:
                        if not wait_listening(ports[n], procs[n]):
                            sys.exit(f"pair.py: {n} did not listen on {ports[n]}")
                    for n in names:
                        subprocess.run(wrk(ports[n], 1, a.connections), capture_output=True, timeout=30)
                    before = {n: cpu_seconds(procs[n].pid) for n in names}
                    loads = {n: subprocess.Popen(BATCH + wrk(ports[n], a.duration, a.connections),
                                                 stdout=subprocess.PIPE, text=True) for n in names}
                    outs = {n: loads[n].communicate(timeout=a.duration + 30)[0] for n in names}
                    after = {n: cpu_seconds(procs[n].pid) for n in names}
                finally:
                    for p in procs.values():
                        stop(p)
                reqs = {n: requests_of(outs[n]) for n in names}
                us = {n: (after[n] - before[n]) * 1e6 / reqs[n] for n in names}
                ratio = us["quill"] / us["quill-base"]
                ratios.append(ratio)
                print(f"| {r} | {us['quill']:.2f} | {us['quill-base']:.2f} | {ratio:.3f} | "
                      f"{reqs['quill']:,}, {reqs['quill-base']:,} |", flush=True)
        finally:
            stop(nginx)
        print()
        print(f"{a.mode}: quill / quill-base, median of {len(ratios)} rounds {statistics.median(ratios):.3f} "
              f"(lowest {min(ratios):.3f}, highest {max(ratios):.3f})")


if __name__ == "__main__":
    main()
