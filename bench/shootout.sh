#!/usr/bin/env bash
# The load balancer shootout: Quill, HAProxy (mode tcp and mode http), nginx (stream and http), Pen
# and a direct connection over the same two nginx backends, measured by `quill bench` in one
# interleaved run: one measurement per concurrency level, with idle connections held open during
# each (Pen's author's shape: many idle, a few active), a new connection per request.
#
#   bash bench/shootout.sh [--sweep LEVELS] [--idle N] [--duration DUR] [--rounds N] [--only a,b,...]
#
# Defaults: --sweep 50,200,400,600,800,1000 --idle 5000 --duration 5s --rounds 3, every candidate;
# the tables and the chart show each candidate and level's median over the rounds.
# Env: QUILL_BIN=path (else cargo build --release), KEEP_WORK=1 (keep the work dir).
# Writes bench/results/shootout.md, bench/results/shootout.json and docs/shootout.svg.
# Ports: backends 9001/9002, quill 9201, haproxy-tcp 9202, nginx-stream 9203, pen 9204,
# haproxy-http 9206, nginx-http 9207 (all 127.0.0.1).
set -euo pipefail

SWEEP=50,200,400,600,800,1000
IDLE=5000
DURATION=5s
ROUNDS=3
ONLY=quill,haproxy,haproxy-http,nginx-stream,nginx-http,pen,direct
while [ $# -gt 0 ]; do
    case "$1" in
        --sweep) SWEEP="${2:?}"; shift 2 ;;
        --idle) IDLE="${2:?}"; shift 2 ;;
        --duration) DURATION="${2:?}"; shift 2 ;;
        --rounds) ROUNDS="${2:?}"; shift 2 ;;
        --only) ONLY="${2:?}"; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "shootout.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
COMMAND="bash bench/shootout.sh --sweep $SWEEP --idle $IDLE --duration $DURATION --rounds $ROUNDS --only $ONLY"
say() { echo "[shootout.sh] $*" >&2; }
. "$BENCH_DIR/lib.sh"
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"

need=
for tool in haproxy nginx pen python3; do command -v "$tool" >/dev/null 2>&1 || need=1; done
[ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || need=1
if [ -n "$need" ]; then
    say "installing haproxy nginx libnginx-mod-stream pen python3"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends haproxy nginx libnginx-mod-stream pen python3 >/dev/null
fi

quill_binary || { say "cannot build or run quill (${QUILL:-no binary})"; exit 1; }

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
WORK="$(mktemp -d /tmp/quill-shootout.XXXXXX)"
DRIVER=
trap cleanup_driver_and_work EXIT
trap 'exit 130' INT TERM

cp "$QUILL" "$WORK/quill" && QUILL="$WORK/quill"
mkdir -p "$REPO/docs" "$BENCH_DIR/results"
STARTED="$(date -u '+%Y-%m-%d %H:%M UTC')"
say "work dir $WORK; quill: $("$QUILL" --version)"
python3 "$BENCH_DIR/shootout.py" --work "$WORK" --quill-bin "$QUILL" --only "$ONLY" \
    --out-json "$BENCH_DIR/results/shootout.json" \
    --bench-args "--idle $IDLE --sweep $SWEEP --duration $DURATION --rounds $ROUNDS --plot $REPO/docs/shootout.svg" &
DRIVER=$!
set +e
wait "$DRIVER"
rc=$?
set -e
DRIVER=
[ "$rc" -eq 0 ] || { say "the run failed (exit $rc); see $WORK"; KEEP_WORK=1; exit "$rc"; }
python3 "$BENCH_DIR/shootout.py" --render "$BENCH_DIR/results/shootout.json" \
    --command "$COMMAND" --started "$STARTED" --load-before "$LOAD_BEFORE" \
    --load-after "$(cut -d' ' -f1-3 /proc/loadavg)" > "$BENCH_DIR/results/shootout.md"
say "written: bench/results/shootout.md, bench/results/shootout.json, docs/shootout.svg"
cat "$BENCH_DIR/results/shootout.md"
