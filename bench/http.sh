#!/usr/bin/env bash
# The HTTP shoot-out (docs/benchmarks.md#http-mode): Quill's HTTP mode against HAProxy mode http and
# nginx http proxying, with Quill's TCP mode and a direct connection for reference, over the same
# two nginx backends as run.sh. Interleaved rounds, medians, ratios to the better of HAProxy and
# nginx.
#
#   bash bench/http.sh [--rounds N] [--quick] [--duration S] [--idle N] [--only a,b,...]
#                      [--ab-requests N] [--conn-requests N] [--strace-duration S] [--quill-toml]
#
# Candidates: quill-http haproxy-http nginx-http quill-tcp direct (the default), quill-base-http,
# quill-http-maglev and quill-tcp-maglev (-r --maglev: Maglev keyed by address and port).
# --quick = 1 round, wrk 3 s, ab 5,000 requests. --idle 0 skips the idle test.
# Env: QUILL_BIN=path       use this binary instead of building (cargo build --release)
#      QUILL_BASE_BIN=path  the candidate quill-base-http: a second Quill, same arguments, same run
#      KEEP_WORK=1          keep the temp work dir (configs, logs, pids) after the run
#      RESULTS_DIR=dir      write the results there instead of bench/results
# Writes bench/results/http.md and bench/results/http.json. See bench/README.md.
# Exit status: 0, 1 (interrupted or setup failed), 2 (usage), 3 (a candidate refused to start:
# the tables are written, with that candidate marked NOT measured).
set -euo pipefail

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

ROUNDS=3
QUICK=
DURATION=
IDLE=9000
AB_REQUESTS=
CONN_REQUESTS=100000
STRACE_DURATION=3
QUILL_TOML=
ONLY=quill-http,haproxy-http,nginx-http,quill-tcp,direct
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --duration) DURATION="${2:?--duration needs seconds}"; shift 2 ;;
        --idle) IDLE="${2:?--idle needs a number}"; shift 2 ;;
        --ab-requests) AB_REQUESTS="${2:?}"; shift 2 ;;
        --conn-requests) CONN_REQUESTS="${2:?}"; shift 2 ;;
        --strace-duration) STRACE_DURATION="${2:?}"; shift 2 ;;
        --quill-toml) QUILL_TOML=1; shift ;;
        --only) ONLY="${2:?--only needs a list}"; shift 2 ;;
        --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
        -h|--help) usage 0 ;;
        *) echo "http.sh: unknown argument: $1" >&2; usage 2 ;;
    esac
done
DURATION="${DURATION%s}"
for v in "$ROUNDS" "$IDLE" "$CONN_REQUESTS" "$STRACE_DURATION" ${DURATION:+"$DURATION"} ${AB_REQUESTS:+"$AB_REQUESTS"}; do
    case "$v" in ''|*[!0-9]*) echo "http.sh: '$v' is not a number" >&2; exit 2 ;; esac
done
if [ -n "$QUICK" ]; then
    [ "$ROUNDS" = 3 ] && ROUNDS=1
    : "${DURATION:=3}" "${AB_REQUESTS:=5000}"
fi
: "${DURATION:=8}" "${AB_REQUESTS:=20000}"
for name in ${ONLY//,/ }; do
    case "$name" in
        quill-http|quill|quill-base-http|quill-base|haproxy-http|haproxy|nginx-http|nginx|quill-tcp|direct|quill-http-maglev|quill-tcp-maglev) ;;
        *) echo "http.sh: unknown candidate '$name' (quill-http quill-base-http haproxy-http nginx-http quill-tcp direct quill-http-maglev quill-tcp-maglev)" >&2; exit 2 ;;
    esac
done
WANT_QUILL=
case ",$ONLY," in *,quill-http,*|*,quill,*|*,quill-tcp,*) WANT_QUILL=1 ;; esac
WANT_BASE=
case ",$ONLY," in
    *,quill-base-http,*|*,quill-base,*)
        WANT_BASE=1
        if [ -z "${QUILL_BASE_BIN:-}" ] || ! timeout 10 "$QUILL_BASE_BIN" --version >/dev/null 2>&1; then
            echo "http.sh: quill-base-http needs QUILL_BASE_BIN=/path/to/quill (a binary that answers --version)" >&2
            exit 2
        fi
        ;;
esac

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
RESULTS="${RESULTS_DIR:-$BENCH_DIR/results}"
COMMAND="bash bench/http.sh --rounds $ROUNDS --duration $DURATION --idle $IDLE --ab-requests $AB_REQUESTS"
COMMAND="$COMMAND --conn-requests $CONN_REQUESTS --strace-duration $STRACE_DURATION${QUILL_TOML:+ --quill-toml} --only $ONLY"
[ -n "$WANT_BASE" ] && COMMAND="QUILL_BASE_BIN=$QUILL_BASE_BIN $COMMAND"

say() { echo "[http.sh] $*" >&2; }
. "$BENCH_DIR/lib.sh"

# ---- 1. tools from Debian (skipped when already present)
need_install=
for tool in haproxy nginx wrk ab strace python3; do
    command -v "$tool" >/dev/null 2>&1 || need_install=1
done
if [ -n "$need_install" ]; then
    say "installing haproxy nginx wrk apache2-utils strace python3"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends haproxy nginx wrk apache2-utils strace python3 >/dev/null
fi

# ---- 2. Quill (a failed build leaves the Quill candidates out, loudly)
QUILL=
if [ -n "$WANT_QUILL" ]; then
    if ! quill_binary; then
        say "WARNING: building quill or '${QUILL:-quill} --version' failed: the Quill candidates are NOT measured"
        QUILL=
    fi
fi

# ---- 3. run the driver; everything it starts is listed in $WORK/pids
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
WORK="$(mktemp -d /tmp/quill-http-bench.XXXXXX)"
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
if [ -n "$WANT_BASE" ]; then
    cp "$QUILL_BASE_BIN" "$WORK/quill-base" && QUILL_BASE="$WORK/quill-base"
    say "quill-base: $("$QUILL_BASE" --version 2>&1 | head -1) ($QUILL_BASE_BIN)"
fi

ONLY_RUN="$ONLY"
if [ -z "$QUILL" ]; then
    ONLY_RUN="$(echo ",$ONLY," | sed 's/,quill-http,/,/; s/,quill,/,/; s/,quill-tcp,/,/; s/^,//; s/,$//')"
fi
[ -n "$ONLY_RUN" ] || { say "nothing to run"; exit 1; }

say "work dir $WORK; candidates: $ONLY_RUN; rounds: $ROUNDS; wrk ${DURATION}s; idle $IDLE"
set +e
python3 "$BENCH_DIR/http.py" --work "$WORK" ${QUILL:+--quill-bin "$QUILL"} \
    ${QUILL_BASE:+--quill-base-bin "$QUILL_BASE"} ${QUILL_TOML:+--quill-toml} \
    --rounds "$ROUNDS" --duration "$DURATION" --idle "$IDLE" --ab-requests "$AB_REQUESTS" \
    --conn-requests "$CONN_REQUESTS" --strace-duration "$STRACE_DURATION" --only "$ONLY_RUN" \
    --results "$RESULTS" --command "$COMMAND" &
DRIVER=$!
wait "$DRIVER"
rc=$?
set -e
DRIVER=
case "$rc" in
    0) say "tables written to $RESULTS/http.md (raw: http.json)" ;;
    1) say "interrupted or failed: partial tables in $RESULTS/http.md" ;;
    3) say "ERROR: a candidate refused to start and was NOT measured (see the top of $RESULTS/http.md)" ;;
esac
if [ -n "$WANT_QUILL" ] && [ -z "$QUILL" ]; then
    say "ERROR: the Quill candidates were NOT measured (no working quill binary)"
    [ "$rc" -eq 0 ] && rc=3
fi
exit "$rc"
