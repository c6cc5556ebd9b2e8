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
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402  (bench/harness.py: processes by PID, /proc CPU, nginx backends, wrk)

BATCH = ["chrt", "-b", "0"]


def wrk(port, seconds, connections):
    return ["wrk", "-t1", f"-c{connections}", f"-d{seconds}", f"http://127.0.0.1:{port}/1k"]


def one_round(r, a, builds, procs, work):
    """Both builds side by side for one round: {build: (CPU µs per request, requests)}."""
    names = ["quill", "quill-base"] if r % 2 else ["quill-base", "quill"]
    ports = {n: a.port + 1 + i for i, n in enumerate(names)}
    started = {}
    try:
        for n in names:
            args = [builds[n], "--workers", "1", "-r"] + (["-H"] if a.mode == "http" else [])
            started[n] = procs.start(f"{n}-round{r}", args + [f"127.0.0.1:{ports[n]}", f"127.0.0.1:{a.port}"])
            if not harness.wait_ready(ports[n], started[n]):
                sys.exit(f"pair.py: {n} did not listen on {ports[n]} (see {work}/{n}-round{r}.log)")
        for n in names:
            subprocess.run(wrk(ports[n], 1, a.connections), capture_output=True, timeout=30)
        before = {n: harness.cpu_ticks([started[n].pid]) for n in names}
        loads = {n: subprocess.Popen(BATCH + wrk(ports[n], a.duration, a.connections),
                                     stdout=subprocess.PIPE, text=True) for n in names}
        outs = {n: loads[n].communicate(timeout=a.duration + 30)[0] for n in names}
        after = {n: harness.cpu_ticks([started[n].pid]) for n in names}
    finally:
        for p in started.values():
            procs.stop(p)
    result = {}
    for n in names:
        w = harness.parse_wrk(outs[n])
        if not w["requests"] or w["errors"]:
            sys.exit(f"pair.py: round {r}, {n}: wrk gave {w['requests']} requests, {w['errors']} errors")
        ticks = after[n] - before[n]
        result[n] = (ticks * 1e6 / harness.CLK_TCK / w["requests"], w["requests"])
    return result


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
    ratios = []
    with tempfile.TemporaryDirectory(prefix="quill-pair.") as work:
        procs = harness.Procs(work)
        try:
            harness.write_backends(work, [a.port])
            harness.start_nginx_backends(procs, work, [a.port], prefix=BATCH)
            print("| round | quill µs/req | quill-base µs/req | quill / quill-base | requests (quill, base) |")
            print("|---:|---:|---:|---:|---|")
            for r in range(1, a.rounds + 1):
                got = one_round(r, a, builds, procs, work)
                (new, new_n), (old, old_n) = got["quill"], got["quill-base"]
                ratios.append(new / old)
                print(f"| {r} | {new:.2f} | {old:.2f} | {new / old:.3f} | {new_n:,}, {old_n:,} |", flush=True)
        finally:
            procs.stop_all()
    print()
    print(f"{a.mode}: quill / quill-base, median of {len(ratios)} rounds {statistics.median(ratios):.3f} "
          f"(lowest {min(ratios):.3f}, highest {max(ratios):.3f})")


if __name__ == "__main__":
    main()
