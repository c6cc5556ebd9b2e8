#!/usr/bin/env python3
"""Two Quill builds, or one build's two modes, measured at the same moment: a comparison the
machine's drift cannot skew.

On a shared virtual machine a build's CPU per request moves by tens of percent within minutes
(docs/benchmarks.md, the fourth cuts), more than most changes; interleaved rounds only spread that
drift over both builds. Here both sides run in every round, each with one worker in front of the
same nginx backend, each loaded by its own `wrk -t1` for the same seconds, so that whatever the
machine does in a round it does to both. Per round: each side's CPU per request (utime + stime of
all its threads from /proc, over the requests its wrk completed) and its user part, their ratio
and their difference; which side gets which port (and, in turn, goes first) alternates by round.
The backend and both wrk run under SCHED_BATCH (`chrt -b 0`), as floor.sh's --batch-peers.

With `--gap`, the two sides are one build's TCP mode and its HTTP mode (instead of `--base`):
per round, HTTP mode's CPU per request minus TCP mode's, the distance from the floor that the
HTTP issue's point 2 bounds (docs/benchmarks.md, the floor), taken where drift between rounds
cannot enter it.

  python3 bench/pair.py --quill target/release/quill --base /tmp/old/quill
      [--mode http|tcp] [--rounds 10] [--duration 5] [--connections 25] [--port 9161]
  python3 bench/pair.py --quill target/release/quill --gap [--rounds 10] ...

With `--in-turn`, each round loads one side and then the other (which goes first alternates):
they no longer share the cores with each other, and the drift within a round's seconds still
falls on both nearly alike.

Ports: PORT (the backend), PORT+1 and PORT+2 (the two sides). Loopback only; every process it
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


def one_round(r, a, sides, procs, work):
    """Both sides of `sides` ({name: (binary, mode)}) for one round, at once or in turn:
    {name: (CPU µs per request, user µs per request, requests)}."""
    names = list(sides) if r % 2 else list(sides)[::-1]
    ports = {n: a.port + 1 + i for i, n in enumerate(names)}
    started = {}
    try:
        for n in names:
            binary, mode = sides[n]
            args = [binary, "--workers", "1", "-r"] + (["-H"] if mode == "http" else [])
            started[n] = procs.start(f"{n}-round{r}", args + [f"127.0.0.1:{ports[n]}", f"127.0.0.1:{a.port}"])
            if not harness.wait_ready(ports[n], started[n]):
                sys.exit(f"pair.py: {n} did not listen on {ports[n]} (see {work}/{n}-round{r}.log)")
        for n in names:
            subprocess.run(wrk(ports[n], 1, a.connections), capture_output=True, timeout=30)
        before, after, outs = {}, {}, {}
        # At once (both loads running together), or one right after the other (`--in-turn`).
        groups = [[n] for n in names] if a.in_turn else [names]
        for group in groups:
            for n in group:
                before[n] = harness.cpu_ticks_split([started[n].pid])
            loads = {n: subprocess.Popen(BATCH + wrk(ports[n], a.duration, a.connections),
                                         stdout=subprocess.PIPE, text=True) for n in group}
            outs.update({n: loads[n].communicate(timeout=a.duration + 30)[0] for n in group})
            for n in group:
                after[n] = harness.cpu_ticks_split([started[n].pid])
    finally:
        for p in started.values():
            procs.stop(p)
    result = {}
    for n in names:
        w = harness.parse_wrk(outs[n])
        if not w["requests"] or w["errors"]:
            sys.exit(f"pair.py: round {r}, {n}: wrk gave {w['requests']} requests, {w['errors']} errors")
        user = after[n][0] - before[n][0]
        ticks = user + after[n][1] - before[n][1]
        per = 1e6 / harness.CLK_TCK / w["requests"]
        result[n] = (ticks * per, user * per, w["requests"])
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quill", required=True)
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--base", help="the build to compare with")
    what.add_argument("--gap", action="store_true", help="the build's HTTP mode against its TCP mode")
    ap.add_argument("--mode", choices=["http", "tcp"], default="http", help="both builds' mode (not with --gap)")
    ap.add_argument("--in-turn", action="store_true",
                    help="load one side right after the other in each round, not both at once")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--duration", type=int, default=5)
    ap.add_argument("--connections", type=int, default=25)
    ap.add_argument("--port", type=int, default=9161)
    a = ap.parse_args()
    quill = os.path.abspath(a.quill)
    # The first side is the one compared (numerator, minuend), the second its reference.
    if a.gap:
        sides = {"http": (quill, "http"), "tcp": (quill, "tcp")}
    else:
        sides = {"quill": (quill, a.mode), "quill-base": (os.path.abspath(a.base), a.mode)}
    first, second = sides
    ratios, gaps, user_gaps = [], [], []
    with tempfile.TemporaryDirectory(prefix="quill-pair.") as work:
        procs = harness.Procs(work)
        try:
            harness.write_backends(work, [a.port])
            harness.start_nginx_backends(procs, work, [a.port], prefix=BATCH)
            print(f"| round | {first} µs/req (user) | {second} µs/req (user) | {first} / {second} "
                  f"| {first} − {second} µs (user) | requests ({first}, {second}) |")
            print("|---:|---:|---:|---:|---:|---|")
            for r in range(1, a.rounds + 1):
                got = one_round(r, a, sides, procs, work)
                (new, new_u, new_n), (old, old_u, old_n) = got[first], got[second]
                ratios.append(new / old)
                gaps.append(new - old)
                user_gaps.append(new_u - old_u)
                print(f"| {r} | {new:.2f} ({new_u:.2f}) | {old:.2f} ({old_u:.2f}) | {new / old:.3f} "
                      f"| {new - old:+.2f} ({new_u - old_u:+.2f}) | {new_n:,}, {old_n:,} |", flush=True)
        finally:
            procs.stop_all()
    what = "http mode against tcp mode" if a.gap else a.mode
    print()
    print(f"{what}: {first} / {second}, median of {len(ratios)} rounds {statistics.median(ratios):.3f} "
          f"(lowest {min(ratios):.3f}, highest {max(ratios):.3f}); {first} − {second}, median "
          f"{statistics.median(gaps):+.2f} µs (lowest {min(gaps):+.2f}, highest {max(gaps):+.2f}), of it user "
          f"time {statistics.median(user_gaps):+.2f} µs (median)")


if __name__ == "__main__":
    main()
