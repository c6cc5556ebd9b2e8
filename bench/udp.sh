#!/usr/bin/env bash
# The UDP shoot-out (docs/benchmarks.md#udp): direct vs Quill (`protocol = "udp"`, 2 workers) vs
# nginx `stream` (`listen … udp reuseport`, 2 workers) vs Pen `-U`, in front of the same backends:
# DNS (dnsperf against two dnsmasq instances answering from local records; as fast as it goes, then
# at the rate nginx sustains, counting lost queries), raw UDP request/response (`quill bench
# udp://`, two echo backends), and idle flows (100,000 over K Quill processes sharing the port, K
# nginx workers; RssAnon per flow). Interleaved rounds, medians and ranges, ratios to nginx, the
# issue's targets.
#
#   bash bench/udp.sh [--rounds N] [--quick] [--duration S] [--idle N] [--procs K] [--only a,b,...]
#
# Candidates: direct quill nginx pen (the default: all four). --quick = 1 round, 3 s runs, 20,000
# idle flows. --duration S: each dnsperf / quill bench run (5); --idle N: idle flows (100000; 0
# skips the idle test; Pen gets at most 15,000: one process); --procs K: Quill processes and nginx
# workers in the idle test (10).
# Env: QUILL_BIN=path  use this binary instead of building (cargo build --release); it is also the
#                      load generator (`quill bench`) of the raw and idle tests
#      KEEP_WORK=1     keep the temp work dir (configs, logs)
#      RESULTS_DIR=dir write the results there instead of bench/results
# Writes bench/results/udp.md and bench/results/udp.json. About 4 minutes with the defaults.
# Exit status: 0, 1 (interrupted or setup failed), 2 (usage), 3 (a candidate was not measured, e.g.
# a Quill without UDP refuses `protocol = "udp"`: the tables are written with the peers).
set -euo pipefail

usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

ROUNDS=3
QUICK=
DURATION=
IDLE=
PROCS=10
ONLY=direct,quill,nginx,pen
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --duration) DURATION="${2:?--duration needs seconds}"; shift 2 ;;
        --idle) IDLE="${2:?--idle needs a number}"; shift 2 ;;
        --procs) PROCS="${2:?--procs needs a number}"; shift 2 ;;
        --only) ONLY="${2:?--only needs a list}"; shift 2 ;;
        --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
        -h|--help) usage 0 ;;
        *) echo "udp.sh: unknown argument: $1" >&2; usage 2 ;;
    esac
done
DURATION="${DURATION%s}"
if [ -n "$QUICK" ]; then
    [ "$ROUNDS" = 3 ] && ROUNDS=1
    : "${DURATION:=3}" "${IDLE:=20000}"
fi
: "${DURATION:=5}" "${IDLE:=100000}"
for v in "$ROUNDS" "$IDLE" "$PROCS" "$DURATION"; do
    case "$v" in ''|*[!0-9]*) echo "udp.sh: '$v' is not a number" >&2; exit 2 ;; esac
done
[ "$PROCS" -ge 1 ] || { echo "udp.sh: --procs must be at least 1" >&2; exit 2; }
for name in ${ONLY//,/ }; do
    case "$name" in
        direct|quill|nginx|pen) ;;
        *) echo "udp.sh: unknown candidate '$name' (direct quill nginx pen)" >&2; exit 2 ;;
    esac
done

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
RESULTS="${RESULTS_DIR:-$BENCH_DIR/results}"
COMMAND="bash bench/udp.sh --rounds $ROUNDS --duration $DURATION --idle $IDLE --procs $PROCS --only $ONLY"

say() { echo "[udp.sh] $*" >&2; }
. "$BENCH_DIR/lib.sh"

# ---- 1. tools from Debian (skipped when already present)
need_install=
for tool in nginx pen dnsperf dnsmasq python3; do
    command -v "$tool" >/dev/null 2>&1 || need_install=1
done
[ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || need_install=1
if [ -n "$need_install" ]; then
    say "installing nginx libnginx-mod-stream pen dnsperf dnsmasq-base python3"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nginx libnginx-mod-stream pen dnsperf dnsmasq-base \
        python3 >/dev/null
fi

# ---- 2. Quill: a candidate and the load generator of the raw and idle tests (a failed build
# leaves both out, loudly)
QUILL=
if ! quill_binary; then
    say "WARNING: building quill or '${QUILL:-quill} --version' failed: quill is NOT measured, and the raw and idle tests (quill bench) are skipped"
    QUILL=
fi

# ---- 3. run the driver; everything it starts is listed in $WORK/pids
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
WORK="$(mktemp -d /tmp/quill-udp-bench.XXXXXX)"
DRIVER=
trap cleanup_driver_and_work EXIT
trap 'exit 130' INT TERM

if [ -n "$QUILL" ]; then
    # A private copy, so that a rebuild during the run cannot switch binaries half-way.
    QUILL_SRC="$QUILL"
    cp "$QUILL" "$WORK/quill" && QUILL="$WORK/quill"
    say "quill: $("$QUILL" --version 2>&1 | head -1) ($QUILL_SRC)"
fi

say "work dir $WORK; candidates: $ONLY; rounds: $ROUNDS; runs ${DURATION}s; idle $IDLE over $PROCS processes"
set +e
python3 "$BENCH_DIR/udp/udp.py" --work "$WORK" ${QUILL:+--quill-bin "$QUILL"} \
    --rounds "$ROUNDS" --duration "$DURATION" --idle "$IDLE" --procs "$PROCS" --only "$ONLY" \
    --results "$RESULTS" --command "$COMMAND" >/dev/null &
DRIVER=$!
wait "$DRIVER"
rc=$?
set -e
DRIVER=
case "$rc" in
    0) say "tables written to $RESULTS/udp.md (raw: udp.json)" ;;
    1) say "interrupted or failed: partial tables in $RESULTS/udp.md" ;;
    3) say "ERROR: a candidate was NOT measured (see the top of $RESULTS/udp.md)" ;;
esac
exit "$rc"
