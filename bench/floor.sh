#!/usr/bin/env bash
# The floor (issue 27 point 1; docs/benchmarks.md#the-floor-user-and-kernel-time-per-request): each
# mode's CPU per 1 KiB request split into user and kernel time (/proc/PID/stat), system calls per
# request (strace -f -c) and, for Quill, instructions per request (callgrind), next to Quill's TCP
# mode (the floor) and the same split for HAProxy, nginx and h2o. Modes: tcp (wrk through a byte
# pipe: Quill TCP, HAProxy mode tcp, nginx stream), http (wrk keep-alive), http-close (ab, a new
# client connection per request), tls (wrk over TLS 1.3, ECDSA P-256) and static (a 1 KiB file).
# All with 2 workers/threads over the same two nginx backends; interleaved rounds, medians.
#
#   bash bench/floor.sh [--rounds N] [--quick] [--duration S] [--ab-requests N]
#                       [--strace-duration S] [--callgrind-requests N] [--quiet-cores X]
#                       [--batch-peers] [--callgrind-head nginx|one]
#                       [--only quill,quill-base,haproxy,nginx,h2o]
#                       [--modes tcp,http,http-close,tls,static]
#
# --rounds N (3); --quick = 1 round, wrk 2 s, ab 10,000, strace 2 s, callgrind 100 and 400 requests;
# --duration S: each measured wrk run (5); --ab-requests N: each measured ab run (30000);
# --strace-duration S: the load window under strace (3; 0 skips); --callgrind-requests N: N2 - N1
# of the callgrind runs (1000, N1 = 300; 0 skips); --quiet-cores X: a run is quiet when other work
# on the machine took at most X cores during it (0.2); the tables use a candidate's quiet runs when
# it has any; --only: candidates; --modes: modes; --batch-peers: the backends and the load
# generator under SCHED_BATCH (chrt), so that waking them does not preempt the proxy (approximating,
# for wake-up preemption only, a machine where they have cores of their own); --callgrind-head:
# the head of the callgrind backend's responses, nginx's eight fields as the wall-clock runs'
# backends send them (the default) or one (Content-Length alone, as before 2026-12-06).
# Env: QUILL_BIN=path  use this binary instead of building (cargo build --release)
#      QUILL_BASE_BIN=path  the build before a change, measured as candidate quill-base in the
#                      same rounds (and callgrind runs) as quill; added to --only's default
#      KEEP_WORK=1     keep the temp work dir (certificate, configs, logs, pids)
#      RESULTS_DIR=dir write the results there instead of bench/results
# Writes bench/results/floor.md and bench/results/floor.json. About 8 minutes with the defaults
# (--quick: 3). Ports 9131, 9132 (backends), 9133-9146 and 9151-9154 (candidates), 9147, 9148
# (callgrind).
# Exit status: 0, 1 (interrupted or setup failed), 2 (usage), 3 (a candidate did not start or
# answered wrong: the tables are written, with that candidate marked NOT measured).
set -euo pipefail

usage() { sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

ROUNDS=3
QUICK=
DURATION=
AB_REQUESTS=
STRACE_DURATION=
CALLGRIND_REQUESTS=
QUIET_CORES=0.2
BATCH_PEERS=
CALLGRIND_HEAD=nginx
ONLY=quill,haproxy,nginx,h2o
[ -n "${QUILL_BASE_BIN:-}" ] && ONLY=quill,quill-base,haproxy,nginx,h2o
MODES=tcp,http,http-close,tls,static
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --duration) DURATION="${2:?--duration needs seconds}"; shift 2 ;;
        --ab-requests) AB_REQUESTS="${2:?--ab-requests needs a number}"; shift 2 ;;
        --strace-duration) STRACE_DURATION="${2:?--strace-duration needs seconds}"; shift 2 ;;
        --callgrind-requests) CALLGRIND_REQUESTS="${2:?--callgrind-requests needs a number}"; shift 2 ;;
        --quiet-cores) QUIET_CORES="${2:?--quiet-cores needs a number}"; shift 2 ;;
        --batch-peers) BATCH_PEERS=1; shift ;;
        --callgrind-head) CALLGRIND_HEAD="${2:?--callgrind-head needs nginx or one}"; shift 2 ;;
        --only) ONLY="${2:?--only needs a list}"; shift 2 ;;
        --modes) MODES="${2:?--modes needs a list}"; shift 2 ;;
        --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
        -h|--help) usage 0 ;;
        *) echo "floor.sh: unknown argument: $1" >&2; usage 2 ;;
    esac
done
DURATION="${DURATION%s}"
STRACE_DURATION="${STRACE_DURATION%s}"
for v in "$ROUNDS" ${DURATION:+"$DURATION"} ${AB_REQUESTS:+"$AB_REQUESTS"} \
         ${STRACE_DURATION:+"$STRACE_DURATION"} ${CALLGRIND_REQUESTS:+"$CALLGRIND_REQUESTS"}; do
    case "$v" in ''|*[!0-9]*) echo "floor.sh: '$v' is not a number" >&2; exit 2 ;; esac
done
case "$QUIET_CORES" in ''|.|*[!0-9.]*|*.*.*) echo "floor.sh: '$QUIET_CORES' is not a number" >&2; exit 2 ;; esac
CALLGRIND_N1=300
if [ -n "$QUICK" ]; then
    [ "$ROUNDS" = 3 ] && ROUNDS=1
    : "${DURATION:=2}" "${AB_REQUESTS:=10000}" "${STRACE_DURATION:=2}" "${CALLGRIND_REQUESTS:=300}"
    CALLGRIND_N1=100
fi
: "${DURATION:=5}" "${AB_REQUESTS:=30000}" "${STRACE_DURATION:=3}" "${CALLGRIND_REQUESTS:=1000}"
for name in ${ONLY//,/ }; do
    case "$name" in
        quill|quill-base|haproxy|nginx|h2o) ;;
        *) echo "floor.sh: unknown candidate '$name' (quill quill-base haproxy nginx h2o)" >&2; exit 2 ;;
    esac
done
for mode in ${MODES//,/ }; do
    case "$mode" in
        tcp|http|http-close|tls|static) ;;
        *) echo "floor.sh: unknown mode '$mode' (tcp http http-close tls static)" >&2; exit 2 ;;
    esac
done
case "$CALLGRIND_HEAD" in
    nginx|one) ;;
    *) echo "floor.sh: --callgrind-head is nginx or one, not '$CALLGRIND_HEAD'" >&2; exit 2 ;;
esac
[ -n "${ONLY//,/}" ] && [ -n "${MODES//,/}" ] || { echo "floor.sh: --only and --modes need a name" >&2; exit 2; }

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
RESULTS="${RESULTS_DIR:-$BENCH_DIR/results}"
COMMAND="bash bench/floor.sh --rounds $ROUNDS --duration $DURATION --ab-requests $AB_REQUESTS"
COMMAND="$COMMAND --strace-duration $STRACE_DURATION --callgrind-requests $CALLGRIND_REQUESTS"
COMMAND="$COMMAND --quiet-cores $QUIET_CORES --only $ONLY --modes $MODES"
[ -n "$BATCH_PEERS" ] && COMMAND="$COMMAND --batch-peers"
COMMAND="$COMMAND --callgrind-head $CALLGRIND_HEAD"

say() { echo "[floor.sh] $*" >&2; }
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"

# ---- 1. tools from Debian: only the missing ones, and nothing already installed upgraded (an
# install of a package that is present would pull its newer version, and its libraries', into a
# shared machine)
missing=
for pair in haproxy:haproxy nginx:nginx h2o:h2o wrk:wrk ab:apache2-utils openssl:openssl strace:strace \
            valgrind:valgrind python3:python3; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || missing="$missing ${pair#*:}"
done
[ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || missing="$missing libnginx-mod-stream"
if [ -n "$BATCH_PEERS" ] && ! command -v chrt >/dev/null 2>&1; then
    missing="$missing util-linux"
fi
if [ -n "$missing" ]; then
    say "installing$missing"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends --no-upgrade $missing >/dev/null
fi

# ---- 2. Quill (a failed build leaves Quill out, loudly)
QUILL=
case ",$ONLY," in
    *,quill,*)
        if ! quill_binary; then
            say "WARNING: building quill or '${QUILL:-quill} --version' failed: quill is NOT measured"
            QUILL=
        fi
        ;;
esac

# ---- 3. run the driver; everything it starts is listed in $WORK/pids
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
WORK="$(mktemp -d /tmp/quill-floor-bench.XXXXXX)"
DRIVER=
trap cleanup_driver_and_work EXIT
trap 'exit 130' INT TERM

QUILL_SRC=
if [ -n "$QUILL" ]; then
    # A private copy, so that a rebuild during the run cannot switch binaries half-way.
    QUILL_SRC="$QUILL"
    cp "$QUILL" "$WORK/quill" && QUILL="$WORK/quill"
    say "quill: $("$QUILL" --version 2>&1 | head -1) ($QUILL_SRC)"
fi
QUILL_BASE=
QUILL_BASE_SRC=
case ",$ONLY," in
    *,quill-base,*)
        if [ -n "${QUILL_BASE_BIN:-}" ] && "$QUILL_BASE_BIN" --version >/dev/null 2>&1; then
            QUILL_BASE_SRC="$QUILL_BASE_BIN"
            cp "$QUILL_BASE_BIN" "$WORK/quill-base" && QUILL_BASE="$WORK/quill-base"
            say "quill-base: $("$QUILL_BASE" --version 2>&1 | head -1) ($QUILL_BASE_SRC)"
        else
            say "WARNING: QUILL_BASE_BIN is not set or does not run: quill-base is NOT measured"
        fi
        ;;
esac

say "work dir $WORK; candidates: $ONLY; modes: $MODES; rounds: $ROUNDS; wrk ${DURATION}s; ab $AB_REQUESTS"
set +e
python3 "$BENCH_DIR/floor.py" --work "$WORK" ${QUILL:+--quill-bin "$QUILL"} ${QUILL_SRC:+--quill-src "$QUILL_SRC"} \
    ${QUILL_BASE:+--quill-base-bin "$QUILL_BASE"} ${QUILL_BASE_SRC:+--quill-base-src "$QUILL_BASE_SRC"} \
    --rounds "$ROUNDS" --duration "$DURATION" --ab-requests "$AB_REQUESTS" \
    --strace-duration "$STRACE_DURATION" --callgrind-requests "$CALLGRIND_REQUESTS" \
    --callgrind-n1 "$CALLGRIND_N1" --quiet-cores "$QUIET_CORES" --only "$ONLY" --modes "$MODES" \
    ${BATCH_PEERS:+--batch-peers} --callgrind-head "$CALLGRIND_HEAD" \
    --results "$RESULTS" --command "$COMMAND" >/dev/null &
DRIVER=$!
wait "$DRIVER"
rc=$?
set -e
DRIVER=
case "$rc" in
    0) say "tables written to $RESULTS/floor.md (raw: floor.json)" ;;
    1) say "interrupted or failed: partial tables in $RESULTS/floor.md" ;;
    3) say "ERROR: a candidate was NOT measured (see the top of $RESULTS/floor.md)" ;;
esac
exit "$rc"
