#!/usr/bin/env bash
# HTTP/2 to clients (issue 26; docs/benchmarks.md#http2): Quill (`[listener.tls]`, ALPN h2, 2 workers)
# against HAProxy 2.6 (nbthread 2), nginx 1.22 (2 workers) and h2o 2.2.5 (2 threads), each terminating
# TLS 1.3 with an ECDSA P-256 certificate made at bench time, ALPN h2, in front of the same two nginx
# backends (1 KiB and 1 MiB files). h2load: multiplexed 1 KiB (-c50 -m10), one stream per connection
# (-c200 -m1), 1 MiB downloads (-c10 -m1); interleaved rounds, medians, the proxy's, the backends' and
# h2load's CPU per request from /proc, ratios to the best peer; 9,000 idle HTTP/2 TLS connections
# after one request each (RssAnon per connection); sends and receives per multiplexed request on the
# proxy's client side (strace); the issue's targets.
#
#   bash bench/h2.sh [--rounds N] [--quick] [--duration S] [--threads T] [--idle N]
#                    [--strace-requests R] [--only a,b,...] [--loads mux1k,m1,dl1m]
#
# Candidates: quill haproxy nginx h2o (the default: all four), and quill-base: a second Quill binary
# (QUILL_BASE_BIN, e.g. the build before a change) run with quill's configuration in the same rounds.
# --rounds N (3); --quick = 1 round, 3 s runs, 5,000 requests under strace; --duration S: each
# measured h2load run (5); --threads T: h2load -t (1; use 2 when the tables mark h2load "sat");
# --idle N: idle connections held per candidate (9000; 0 skips the idle test); --strace-requests R:
# requests of the strace runs (20000; 0 skips them); --loads: which of the three loads (all).
# Env: QUILL_BIN=path  use this binary instead of building (cargo build --release)
#      QUILL_BASE_BIN=path  the candidate quill-base (needed when --only names it)
#      KEEP_WORK=1     keep the temp work dir (certificate, configs, logs)
#      RESULTS_DIR=dir write the results there instead of bench/results
# Writes bench/results/h2.md and bench/results/h2.json. About 10 minutes with the defaults (--quick: 4).
# Exit status: 0, 1 (interrupted or setup failed), 2 (usage), 3 (a candidate refused to start or
# did not speak HTTP/2 over TLS 1.3: the tables are written, with that candidate marked NOT measured;
# Quill until its HTTP/2 lands).
set -euo pipefail

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

ROUNDS=3
QUICK=
DURATION=
THREADS=1
IDLE=9000
STRACE_REQUESTS=
ONLY=quill,haproxy,nginx,h2o
LOADS=mux1k,m1,dl1m
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --duration) DURATION="${2:?--duration needs seconds}"; shift 2 ;;
        --threads) THREADS="${2:?--threads needs a number}"; shift 2 ;;
        --idle) IDLE="${2:?--idle needs a number}"; shift 2 ;;
        --strace-requests) STRACE_REQUESTS="${2:?--strace-requests needs a number}"; shift 2 ;;
        --only) ONLY="${2:?--only needs a list}"; shift 2 ;;
        --loads) LOADS="${2:?--loads needs a list}"; shift 2 ;;
        --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
        -h|--help) usage 0 ;;
        *) echo "h2.sh: unknown argument: $1" >&2; usage 2 ;;
    esac
done
DURATION="${DURATION%s}"
for v in "$ROUNDS" "$THREADS" "$IDLE" ${DURATION:+"$DURATION"} ${STRACE_REQUESTS:+"$STRACE_REQUESTS"}; do
    case "$v" in ''|*[!0-9]*) echo "h2.sh: '$v' is not a number" >&2; exit 2 ;; esac
done
if [ -n "$QUICK" ]; then
    [ "$ROUNDS" = 3 ] && ROUNDS=1
    : "${DURATION:=3}" "${STRACE_REQUESTS:=5000}"
fi
: "${DURATION:=5}" "${STRACE_REQUESTS:=20000}"
for name in ${ONLY//,/ }; do
    case "$name" in
        quill|haproxy|nginx|h2o) ;;
        quill-base)
            if [ -z "${QUILL_BASE_BIN:-}" ] || ! timeout 10 "$QUILL_BASE_BIN" --version >/dev/null 2>&1; then
                echo "h2.sh: quill-base needs QUILL_BASE_BIN=/path/to/quill (a binary that answers --version)" >&2
                exit 2
            fi
            ;;
        *) echo "h2.sh: unknown candidate '$name' (quill quill-base haproxy nginx h2o)" >&2; exit 2 ;;
    esac
done

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
RESULTS="${RESULTS_DIR:-$BENCH_DIR/results}"
COMMAND="bash bench/h2.sh --rounds $ROUNDS --duration $DURATION --threads $THREADS --idle $IDLE"
COMMAND="$COMMAND --strace-requests $STRACE_REQUESTS --only $ONLY --loads $LOADS"
case ",$ONLY," in *,quill-base,*) COMMAND="QUILL_BASE_BIN=$QUILL_BASE_BIN $COMMAND" ;; esac

say() { echo "[h2.sh] $*" >&2; }
# shellcheck source=bench/lib.sh
. "$BENCH_DIR/lib.sh"

# ---- 1. tools from Debian (skipped when already present)
need_install=
for tool in haproxy nginx h2o h2load openssl strace python3; do
    command -v "$tool" >/dev/null 2>&1 || need_install=1
done
if [ -n "$need_install" ]; then
    say "installing haproxy nginx h2o nghttp2-client openssl strace python3"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends haproxy nginx h2o nghttp2-client openssl strace \
        python3 >/dev/null
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
WORK="$(mktemp -d /tmp/quill-h2-bench.XXXXXX)"
DRIVER=
trap cleanup_driver_and_work EXIT
trap 'exit 130' INT TERM

if [ -n "$QUILL" ]; then
    # A private copy, so that a rebuild during the run cannot switch binaries half-way.
    QUILL_SRC="$QUILL"
    cp "$QUILL" "$WORK/quill" && QUILL="$WORK/quill"
    say "quill: $("$QUILL" --version 2>&1 | head -1) ($QUILL_SRC)"
fi
QUILL_BASE=
case ",$ONLY," in
    *,quill-base,*)
        cp "$QUILL_BASE_BIN" "$WORK/quill-base" && QUILL_BASE="$WORK/quill-base"
        say "quill-base: $("$QUILL_BASE" --version 2>&1 | head -1) ($QUILL_BASE_BIN)"
        ;;
esac

say "work dir $WORK; candidates: $ONLY; rounds: $ROUNDS; h2load ${DURATION}s -t$THREADS; idle $IDLE; strace $STRACE_REQUESTS requests"
set +e
python3 "$BENCH_DIR/h2.py" --work "$WORK" ${QUILL:+--quill-bin "$QUILL"} \
    ${QUILL_BASE:+--quill-base-bin "$QUILL_BASE"} \
    --rounds "$ROUNDS" --duration "$DURATION" --threads "$THREADS" --idle "$IDLE" \
    --strace-requests "$STRACE_REQUESTS" --only "$ONLY" --loads "$LOADS" \
    --results "$RESULTS" --command "$COMMAND" >/dev/null &
DRIVER=$!
wait "$DRIVER"
rc=$?
set -e
DRIVER=
case "$rc" in
    0) say "tables written to $RESULTS/h2.md (raw: h2.json)" ;;
    1) say "interrupted or failed: partial tables in $RESULTS/h2.md" ;;
    3) say "ERROR: a candidate was NOT measured (see the top of $RESULTS/h2.md)" ;;
esac
exit "$rc"
