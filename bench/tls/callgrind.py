#!/usr/bin/env python3
"""Where Quill's CPU goes in TLS handshakes: Quill (tls.py's config, 2 workers) under
`valgrind --tool=callgrind`, counters zeroed once it is up, then `ab -n N -c 4` over https (a full
handshake and one proxied 1 KiB request per connection), then the instructions (Ir) split by who
executes them: aws-lc (the crypto: every aws-lc-sys symbol carries the `aws_lc_` prefix), rustls,
Quill's own code, the allocator, the rest of std/core, and everything else.

    python3 bench/tls/callgrind.py --quill-bin target/release/quill [--kind ecdsa|rsa] [-n 300]

Uses tls.py's ports (9051, 9052, 9261): do not run it together with bench/tls.sh. Prints a markdown
table on stdout (Ir per handshake by group and the top functions); --out FILE also writes it there.
Everything it starts is stopped by PID; the work dir is removed unless --keep.
"""

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import harness  # noqa: E402
import tls  # noqa: E402

def group_of(entry):
    """The group of a callgrind_annotate entry 'FILE:FUNCTION [OBJECT]': by the source file first
    (inlined code keeps its own file), then by the function's name."""
    file, _, fn = entry.partition(":")
    if "aws_lc" in entry or "aws-lc" in file:
        return "aws-lc (crypto, via aws-lc-rs)"
    m = re.search(r"registry/src/[^/]+/([A-Za-z0-9_\-]+?)-\d+\.\d+", file)
    if m:
        crate = m.group(1)
        return "rustls" if crate.startswith("rustls") else "crate " + crate
    if "quill" in fn or file.startswith(("src/", "crates/")) or "/src/" in file and "/rustc/" not in file \
            and "registry" not in file and file.startswith("/work"):
        return "quill"
    if "/malloc/" in file or re.search(r"\b(_int_malloc|_int_free|malloc|free|realloc|calloc|cfree|"
                                        r"malloc_consolidate|_int_realloc|unlink_chunk|tcache_\w+)\b", fn):
        return "allocator (glibc malloc/free)"
    if "/string/" in file or re.search(r"mem(cpy|set|move|cmp)", fn):
        return "memcpy/memset/memmove/memcmp"
    if "/rustc/" in file or re.search(r"\b(core|alloc|std|hashbrown)::", fn):
        return "std/core/alloc (inlined std code)"
    return "other (libc, ld.so, unknown)"


def self_costs(out_file):
    """The self cost (Ir) of each function, read from the callgrind output file itself:
    ([(Ir, 'file:function')], total Ir). callgrind_annotate 3.19 is not used: after
    `callgrind_control -z` the calls in flight are written as `calls=0` with their whole inclusive
    cost, which it books as the self cost of `clone`. Here the cost line that follows a `calls=`
    line (a call's inclusive cost) is skipped; inlined code (fi=/fe=) is booked to its own file."""
    names = {}

    def name(space, value):
        m = re.match(r"\((\d+)\)(?:\s+(.*))?$", value)
        if not m:
            return value
        if m.group(2) is not None:
            names[(space, m.group(1))] = m.group(2)
        return names.get((space, m.group(1)), "?")

    costs, total = {}, None
    fl = fi = fn = "?"
    after_call = False
    with open(out_file, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            c = line[0]
            if c.isdigit() or c in "+-*":
                if after_call:
                    after_call = False
                    continue
                parts = line.split()
                if len(parts) >= 2 and parts[1].isdigit():
                    costs[(fi, fn)] = costs.get((fi, fn), 0) + int(parts[1])
                continue
            key, _, value = line.partition("=")
            if key == "fl":
                fl = fi = name("fl", value)
            elif key in ("fi", "fe"):
                fi = name("fl", value)
            elif key == "fn":
                fn = name("fn", value)
                fi = fl
            elif key in ("cfi", "cfl"):
                name("fl", value)
            elif key == "cfn":
                name("fn", value)
            elif key in ("ob", "cob"):
                name("ob", value)
            elif key == "calls":
                after_call = True
            elif line.startswith(("totals:", "summary:")) and total is None:
                total = int(line.split()[1])
    rows = [(ir, "%s:%s" % (file, fn)) for (file, fn), ir in costs.items() if ir]
    return rows, total or sum(ir for ir, _ in rows)


def main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--quill-bin", required=True)
    p.add_argument("--kind", choices=tls.KINDS, default="ecdsa")
    p.add_argument("-n", type=int, default=300)
    p.add_argument("--out")
    p.add_argument("--keep", action="store_true")
    a = p.parse_args(argv)

    def on_signal(signum, _frame):
        raise KeyboardInterrupt("signal %d" % signum)
    signal.signal(signal.SIGTERM, on_signal)
    work = tempfile.mkdtemp(prefix="quill-tls-callgrind.")
    procs = harness.Procs(work)
    try:
        certs = tls.make_certs(work)
        tls.write_configs(work, certs)
        for i, port in enumerate(tls.BACKENDS, 1):
            if harness.port_open(port):
                raise RuntimeError("port %d already in use" % port)
            b = procs.start("backend%d" % i, ["nginx", "-p", work + "/", "-c",
                                              os.path.join(work, "backend%d.conf" % i),
                                              "-e", os.path.join(work, "backend%d.err" % i)])
            if not harness.wait_ready(port, b):
                raise RuntimeError("backend %d did not start" % port)
        port = tls.PORTS["quill"]
        if harness.port_open(port):
            raise RuntimeError("port %d already in use" % port)
        out = os.path.join(work, "callgrind.out")
        q = procs.start("quill", ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
                                  "--dump-instr=no"] +
                        tls.candidate_cmd("quill", a.kind, work, os.path.abspath(a.quill_bin)))
        if not harness.wait_ready(port, q, timeout=120):
            raise RuntimeError("quill under callgrind did not listen (see %s/quill.log)" % work)
        status, size, negotiated = tls.tls_get(port, timeout=30)
        if status != 200:
            raise RuntimeError("TLS GET through quill gave %s %s" % (status, size))
        # Zero the counters (startup, config and certificate loading, the first GET); callgrind
        # reacts to the request when the process next runs, so a second GET wakes it.
        z = subprocess.Popen(["callgrind_control", "-z", str(q.pid)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(1)
        tls.tls_get(port, timeout=30)
        try:
            z.wait(timeout=30)
            zeroed = z.returncode == 0
        except subprocess.TimeoutExpired:
            z.kill()
            z.wait()
            zeroed = False
        cmd = ["ab", "-r", "-s", "60", "-n", str(a.n), "-c", "4", "https://127.0.0.1:%d/1k" % port]
        t0 = time.monotonic()
        rc, about = harness.run_client(cmd, 900)
        secs = time.monotonic() - t0
        r = harness.parse_ab(about)
        procs.stop(q, (signal.SIGTERM,), wait=60)
        rows, program_total = self_costs(out)
        total = sum(ir for ir, _ in rows)
        n = (r["requests"] or a.n) + (0 if zeroed else 2)
        groups = {}
        for ir, fn in rows:
            g = group_of(fn)
            groups[g] = groups.get(g, 0) + ir
        lines = ["## Where Quill's instructions go (callgrind, %s, %d handshakes)" % (tls.KIND_NAMES[a.kind], n), "",
                 "`python3 bench/tls/callgrind.py --quill-bin QUILL --kind %s -n %d`: `%s` against Quill under "
                 "`valgrind --tool=callgrind` (2 workers; counters %s); negotiated %s; ab: %s requests, %s failed, "
                 "%.0f s under valgrind. Self cost (Ir) of each function (read from callgrind's output, "
                 "inlined code booked to its own source file), grouped by source: %s%% of all Ir is accounted for." % (
                     a.kind, a.n, " ".join(cmd),
                     "zeroed after start-up and one GET" if zeroed else "NOT zeroed: start-up included",
                     negotiated, r["requests"], r["errors"], secs,
                     "%.1f" % (100.0 * total / program_total) if program_total else "?"),
                 "", "| group | Ir per handshake | share |", "|---|---:|---:|"]
        for g, ir in sorted(groups.items(), key=lambda kv: -kv[1]):
            lines.append("| %s | %s | %.1f%% |" % (g, "{:,.0f}".format(ir / n), 100.0 * ir / program_total))
        lines.append("| total (PROGRAM TOTALS) | %s | 100%% |" % "{:,.0f}".format(program_total / n))
        lines += ["", "Top functions (self Ir per handshake):", "", "| function | Ir per handshake | group |",
                  "|---|---:|---|"]
        for ir, fn in sorted(rows, reverse=True)[:20]:
            short = fn.split(":", 1)[1] if ":" in fn else fn
            if len(short) > 110:
                short = short[:107] + "..."
            lines.append("| `%s` | %s | %s |" % (short.replace("|", "\\|"), "{:,.0f}".format(ir / n), group_of(fn)))
        md = "\n".join(lines)
        print(md)
        if a.out:
            with open(a.out, "w") as f:
                f.write(md + "\n")
        return 0
    except (RuntimeError, KeyboardInterrupt) as e:
        print("callgrind.py: %s" % e, file=sys.stderr)
        return 1
    finally:
        procs.stop_all()
        if a.keep:
            print("work dir kept: %s" % work, file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
