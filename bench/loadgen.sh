#!/usr/bin/env bash
# Is `quill bench` fast enough not to be the bottleneck? Drives one nginx (1 worker, a 1 KiB
# file) with `wrk -t1 -c50` and with `quill bench --active 50` for the same duration, keep-alive
# and a new connection per request, in interleaved rounds (the order alternating), and reports the
# medians. nginx is pinned to CPU 0 and the client to CPU 1 (taskset), so each has a core and the
# scheduler's placement is the same for both clients; nginx's CPU use is recorded for every run.
#
#   bash bench/loadgen.sh [--rounds N] [--seconds S]
#
# Env: QUILL_BIN=path     use this binary instead of building (cargo build --release)
#      MAX_LOAD_WAIT=sec  wait up to this long for the 1-minute load average to drop below 1.0
#                         (default 300); the load at the start is written to the results
#      RESULTS_DIR=dir    write loadgen.md there instead of bench/results
set -euo pipefail

ROUNDS=3
SECS=8
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --seconds) SECS="${2:?--seconds needs a number}"; shift 2 ;;
        -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "loadgen.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
case "$ROUNDS$SECS" in *[!0-9]*) echo "loadgen.sh: --rounds and --seconds take numbers" >&2; exit 2 ;; esac

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
RESULTS="${RESULTS_DIR:-$BENCH_DIR/results}"
say() { echo "loadgen: $*" >&2; }
. "$BENCH_DIR/lib.sh"

for tool in nginx wrk python3 taskset; do
    command -v "$tool" >/dev/null || { say "needs $tool (apt-get install nginx wrk python3 util-linux)"; exit 1; }
done
# One core for nginx, one for the client (on a 1-CPU machine both share it).
if [ "$(nproc)" -ge 2 ]; then SERVER_CPU=0; CLIENT_CPU=1; else SERVER_CPU=0; CLIENT_CPU=0; fi
quill_binary || { say "cannot build or run quill (${QUILL:-no binary})"; exit 1; }

WORK="$(mktemp -d /tmp/quill-loadgen.XXXXXX)"
NGINX_PID=
cleanup() {
    if [ -n "$NGINX_PID" ]; then kill -TERM "$NGINX_PID" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

# ---- nginx: one worker, so it and the client each have a core of this 2-core machine
PORT=9311
mkdir -p "$WORK/www"
head -c 1024 /dev/zero | tr '\0' 'q' > "$WORK/www/1k"
cat > "$WORK/nginx.conf" <<EOF
daemon off;
master_process off;
worker_processes 1;
worker_rlimit_nofile 20000;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err warn;
events { worker_connections 19900; }
http {
    access_log off;
    sendfile on;
    keepalive_timeout 600s;
    keepalive_requests 1000000;
    default_type application/octet-stream;
    server { listen 127.0.0.1:$PORT; root $WORK/www; location / { } }
}
EOF
taskset -c "$SERVER_CPU" nginx -p "$WORK/" -c "$WORK/nginx.conf" -e "$WORK/nginx.err" &
NGINX_PID=$!
for _ in $(seq 1 50); do
    (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break
    sleep 0.1
done
URL="http://127.0.0.1:$PORT/1k"

# ---- wait for a quiet machine
max_wait="${MAX_LOAD_WAIT:-300}"
for _ in $(seq 1 "$((max_wait / 5))"); do
    load=$(cut -d' ' -f1 /proc/loadavg)
    python3 -c "import sys; sys.exit(0 if $load < 1.0 else 1)" && break
    say "1-minute load $load, waiting for < 1.0"
    sleep 5
done
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# ---- one run: prints "REQ_PER_S CPU_SECONDS NGINX_CPU_SHARE" (CPU = the client's user + system
# time; the share = nginx's CPU time over the run's wall time, 1.0 = one core busy all along)
TIMEFORMAT='%U %S %R'
NGINX_TICKS=$(getconf CLK_TCK)
nginx_ticks() { awk '{print $14 + $15}' "/proc/$NGINX_PID/stat"; }
run_wrk() {  # $1 = keepalive | close
    local out t hdr=() n0 n1
    [ "$1" = close ] && hdr=(-H "Connection: close")
    n0=$(nginx_ticks)
    t=$( { time taskset -c "$CLIENT_CPU" wrk -t1 -c50 -d"${SECS}s" "${hdr[@]}" "$URL" > "$WORK/wrk.out" 2>&1; } 2>&1 )
    n1=$(nginx_ticks)
    out=$(awk '/^Requests\/sec:/ {print $2}' "$WORK/wrk.out")
    echo "$out $(echo "$t" | awk -v n=$((n1 - n0)) -v hz="$NGINX_TICKS" '{print $1 + $2, n / hz / $3}')"
}
run_quill() {  # $1 = keepalive | close
    local out t ka=() n0 n1
    [ "$1" = keepalive ] && ka=(--keepalive)
    n0=$(nginx_ticks)
    t=$( { time taskset -c "$CLIENT_CPU" "$QUILL" bench --active 50 --duration "${SECS}s" "${ka[@]}" --json "$URL" > "$WORK/q.out" 2>/dev/null; } 2>&1 )
    n1=$(nginx_ticks)
    out=$(python3 -c "import json; print('%.0f' % json.load(open('$WORK/q.out'))['requests_per_second'])")
    echo "$out $(echo "$t" | awk -v n=$((n1 - n0)) -v hz="$NGINX_TICKS" '{print $1 + $2, n / hz / $3}')"
}

say "warm-up"
wrk -t1 -c50 -d1s "$URL" >/dev/null 2>&1
"$QUILL" bench --active 50 --duration 1s --keepalive "$URL" >/dev/null 2>&1

ROWS="$WORK/rows"
: > "$ROWS"
one() {  # $1 = round, $2 = mode, $3 = wrk | quill
    set -- "$1" "$2" "$3" $(run_"$3" "$2")
    echo "$1 $2 $3 $4 $5 $6" >> "$ROWS"
    say "round $1 $2 $3: $4 req/s, nginx busy $6"
}
for r in $(seq 1 "$ROUNDS"); do
    for mode in keepalive close; do
        # The order alternates, so neither client always runs right after the other.
        if [ $((r % 2)) = 1 ]; then one "$r" "$mode" wrk; one "$r" "$mode" quill
        else one "$r" "$mode" quill; one "$r" "$mode" wrk; fi
    done
done

# ---- results
mkdir -p "$RESULTS"
python3 - "$ROWS" "$RESULTS/loadgen.md" "$SECS" "$ROUNDS" "$LOAD_START" "$(nproc)" "$(uname -r)" \
    "$(nginx -v 2>&1 | sed 's/.*: //')" "$(wrk -v 2>&1 | head -1 | awk '{print $2}')" <<'EOF'
import statistics, sys
rows_path, out, secs, rounds, load, cpus, kernel, nginx, wrk = sys.argv[1:]
rows = [l.split() for l in open(rows_path) if l.strip()]
def pick(mode, tool, col):
    return [float(r[col]) for r in rows if r[1] == mode and r[2] == tool]
lines = [
    "# quill bench vs wrk -t1: is the load generator the bottleneck?", "",
    "```", "bash bench/loadgen.sh --rounds %s --seconds %s" % (rounds, secs), "```", "",
    "One nginx %s (1 worker, `sendfile`, 1 KiB file, keep-alive allowed) on 127.0.0.1; each client "
    "runs %s s at concurrency 50, one thread, interleaved rounds (wrk first in odd rounds, quill bench "
    "first in even ones); nginx pinned to CPU 0, the client to CPU 1. `close` = a new connection per "
    "request (wrk: `-H 'Connection: close'`; quill bench: its default). Client CPU = user + system seconds "
    "of the client process, per request. nginx busy = nginx's CPU time over the run's wall time (1.00: "
    "its one core busy all along, so nginx is the limit). Machine: %s CPUs, Linux %s, wrk %s; load "
    "average at start: %s." % (nginx, secs, cpus, kernel, wrk, load), "",
    "| mode | client | req/s per round | median req/s | client CPU µs/request (median) | nginx busy (median) |",
    "|---|---|---|---|---|---|",
]
for mode in ("keepalive", "close"):
    for tool, cmd in (("wrk", "wrk -t1 -c50"), ("quill", "quill bench --active 50")):
        rps = pick(mode, tool, 3)
        cpu = [c / max(r * float(secs), 1) * 1e6 for r, c in zip(rps, pick(mode, tool, 4))]
        lines.append("| %s | `%s` | %s | **%.0f** | %.1f | %.2f |" % (
            mode, cmd, ", ".join("%.0f" % x for x in rps), statistics.median(rps),
            statistics.median(cpu), statistics.median(pick(mode, tool, 5))))
lines.append("")
for mode in ("keepalive", "close"):
    q, w = pick(mode, "quill", 3), pick(mode, "wrk", 3)
    paired = [a / b for a, b in zip(q, w)]
    lines.append("- %s: quill bench / wrk = **%.2f** (medians); per round %s, median %.2f" % (
        mode, statistics.median(q) / statistics.median(w), ", ".join("%.2f" % x for x in paired),
        statistics.median(paired)))
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
