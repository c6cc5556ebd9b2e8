#!/usr/bin/env bash
# Ways of accepting (issue 27 point 3; docs/benchmarks.md, "Accepting: epoll or io_uring"):
# `quill -H --workers 2` in front of one nginx (1 KiB), a new client connection per request
# (`ab -c 50 -n N`, after 2,000 to warm up), the modes interleaved, their order rotating by round.
# Modes: epoll (`--accept epoll`, one shared listening socket: the default), io_uring
# (`--accept io_uring`), per-worker (`--listen-per-worker`: one SO_REUSEPORT socket per worker,
# epoll) and per-worker-io_uring (both). Per run: requests/s; the quill process's CPU per
# request from /proc/PID/stat (utime + stime) and from `perf stat`'s task-clock; and, counted by
# `perf stat` on the kernel's tracepoints, system calls, epoll_wait, accept4, getpeername and
# io_uring_enter calls and context switches per request. Then the medians per mode.
#
#   bash bench/accept.sh [--rounds N] [--requests N] [--modes "MODE ..."]
#
# --rounds N (6); --requests N: each measured ab run (20000); --modes (epoll io_uring per-worker).
# Needs nginx, ab, curl, perf, python3.
# Env: QUILL_BIN=path  use this binary instead of building (cargo build --release)
# Ports 9341 (nginx) and 9342 (quill). Prints one line per run, then the medians.
set -euo pipefail

ROUNDS=6
REQUESTS=20000
MODES="epoll io_uring per-worker"
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --requests) REQUESTS="${2:?--requests needs a number}"; shift 2 ;;
        --modes) MODES="${2:?--modes needs a list}"; shift 2 ;;
        -h|--help) sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "accept.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done

REPO="$(cd "$(dirname "$0")/.." && pwd)"
say() { echo "accept.sh: $*" >&2; }
# shellcheck source=bench/lib.sh
. "$REPO/bench/lib.sh"
quill_binary || { say "no quill binary"; exit 1; }
for tool in nginx ab curl perf python3; do
    command -v "$tool" >/dev/null || { say "needs $tool"; exit 1; }
done

WORK="$(mktemp -d /tmp/quill-accept-bench.XXXXXX)"
NGINX_PID=
QUILL_PID=
cleanup() {
    for pid in $QUILL_PID $NGINX_PID; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT

head -c 1024 /dev/zero | tr '\0' 'x' > "$WORK/1k"
cat > "$WORK/nginx.conf" <<EOF
worker_processes 1;
daemon off;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err;
events { worker_connections 4096; }
http {
    access_log off;
    server {
        listen 127.0.0.1:9341 backlog=4096;
        keepalive_requests 100000;
        location / { root $WORK; }
    }
}
EOF
nginx -c "$WORK/nginx.conf" -p "$WORK" &
NGINX_PID=$!
URL=http://127.0.0.1:9342/1k
EVENTS=raw_syscalls:sys_enter,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_accept4
EVENTS=$EVENTS,syscalls:sys_enter_getpeername,syscalls:sys_enter_io_uring_enter
EVENTS=$EVENTS,context-switches,task-clock
TICKS=$(getconf CLK_TCK)

flags_of() {
    case "$1" in
        epoll) echo "--accept epoll" ;;
        io_uring) echo "--accept io_uring" ;;
        per-worker) echo "--accept epoll --listen-per-worker" ;;
        per-worker-io_uring) echo "--accept io_uring --listen-per-worker" ;;
        *) say "unknown mode: $1"; exit 2 ;;
    esac
}
for mode in $MODES; do flags_of "$mode" > /dev/null; done

run() {
    local mode=$1 round=$2
    # shellcheck disable=SC2046
    "$QUILL" -H --workers 2 $(flags_of "$mode") 127.0.0.1:9342 127.0.0.1:9341 \
        > "$WORK/quill-$mode.log" 2>&1 &
    QUILL_PID=$!
    for _ in $(seq 1 100); do
        curl -s -o /dev/null "$URL" && break
        sleep 0.1
    done
    ab -q -n 2000 -c 50 "$URL" > /dev/null 2>&1
    local before after
    before=$(awk '{print $14 + $15}' "/proc/$QUILL_PID/stat")
    perf stat -x, -p "$QUILL_PID" -e "$EVENTS" -o "$WORK/perf.txt" &
    local perf_pid=$!
    sleep 0.2
    ab -q -n "$REQUESTS" -c 50 "$URL" > "$WORK/ab.txt" 2>&1
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
    after=$(awk '{print $14 + $15}' "/proc/$QUILL_PID/stat")
    kill -TERM "$QUILL_PID"
    wait "$QUILL_PID" || true
    QUILL_PID=
    python3 - "$mode" "$round" "$REQUESTS" "$TICKS" "$before" "$after" "$WORK/perf.txt" \
        "$WORK/ab.txt" <<'EOF'
import sys
mode, rnd, n, ticks, before, after, perf, ab = sys.argv[1:]
n, ticks = int(n), int(ticks)
v = {}
for line in open(perf):
    f = line.strip().split(",")
    if len(f) > 2 and f[0][:1].isdigit():
        v[f[2].split(":")[-1]] = float(f[0])
rps = failed = "?"
for line in open(ab):
    if line.startswith("Requests per second"):
        rps = line.split()[3]
    if line.startswith("Failed requests"):
        failed = line.split()[2]
per = lambda k: v.get(k, 0.0) / n
print(f"{mode} round={rnd} rps={rps} failed={failed}"
      f" cpu_us={(float(after) - float(before)) * 1e6 / ticks / n:.2f}"
      f" task_clock_us={v.get('task-clock', 0.0) * 1000 / n:.2f}"
      f" syscalls={per('sys_enter'):.3f} epoll_wait={per('sys_enter_epoll_wait'):.3f}"
      f" accept4={per('sys_enter_accept4'):.3f} getpeername={per('sys_enter_getpeername'):.3f}"
      f" io_uring_enter={per('sys_enter_io_uring_enter'):.3f} cs={per('context-switches'):.3f}")
EOF
}

read -r -a modes <<< "$MODES"
for round in $(seq 1 "$ROUNDS"); do
    n=${#modes[@]}
    order=()
    for i in $(seq 0 $((n - 1))); do order+=("${modes[$(((i + round - 1) % n))]}"); done
    for mode in "${order[@]}"; do
        run "$mode" "$round" | tee -a "$WORK/runs.txt"
    done
done
python3 - "$WORK/runs.txt" <<'EOF'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    mode, *fields = line.split()
    for f in fields:
        k, val = f.split("=")
        if k not in ("round", "failed"):
            runs.setdefault(mode, {}).setdefault(k, []).append(float(val))
print("medians (min-max):")
for mode, cols in runs.items():
    print(mode, " ".join(f"{k}={statistics.median(v):g} ({min(v):g}-{max(v):g})"
                         for k, v in cols.items()))
EOF
