#!/usr/bin/env bash
# The file-serving shoot-out (docs/benchmarks.md#serving-files): `quill serve` against nginx 1.22
# (2 workers, sendfile, open_file_cache), h2o 2.2.5 (2 threads) and lighttpd 1.4 (1 process, a
# per-core reference), all serving one generated docroot on 127.0.0.1. Interleaved rounds, medians,
# the server's CPU per request, the load generator's own CPU, ratios to the best peer.
#
#   bash bench/static.sh [--rounds N] [--quick] [--duration S] [--idle N] [--only a,b,...]
#                        [--ab-requests N] [--h2load-requests N] [--strace-duration S]
#                        [--workloads wrk1k,h2load1k,wrk1m,many,ab1k]
#
# Candidates: quill nginx h2o lighttpd (the default), quill-base.
# --quick = 1 round, wrk 3 s, ab 5,000 and h2load 100,000 requests, 2,000 idle clients.
# --idle 0 skips the idle test; --strace-duration 0 skips the strace counts.
# Env: QUILL_BIN=path       use this binary instead of building (cargo build --release)
#      QUILL_BASE_BIN=path  the candidate quill-base: a second Quill, same arguments, same run
#      KEEP_WORK=1          keep the temp work dir (docroot, configs, logs, pids) after the run
#      RESULTS_DIR=dir      write the results there instead of bench/results
# Writes bench/results/static.md and bench/results/static.json. See bench/README.md.
# Exit status: 0, 1 (interrupted or setup failed), 2 (usage), 3 (a candidate refused to start or
# was left out: the tables are written, with that candidate marked NOT measured).
set -euo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

ROUNDS=3
QUICK=
DURATION=
IDLE=
AB_REQUESTS=
H2LOAD_REQUESTS=
STRACE_DURATION=3
ONLY=quill,nginx,h2o,lighttpd
WORKLOADS=
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --duration) DURATION="${2:?--duration needs seconds}"; shift 2 ;;
        --idle) IDLE="${2:?--idle needs a number}"; shift 2 ;;
        --ab-requests) AB_REQUESTS="${2:?}"; shift 2 ;;
        --h2load-requests) H2LOAD_REQUESTS="${2:?}"; shift 2 ;;
        --strace-duration) STRACE_DURATION="${2:?}"; shift 2 ;;
        --only) ONLY="${2:?--only needs a list}"; shift 2 ;;
        --workloads) WORKLOADS="${2:?--workloads needs a list}"; shift 2 ;;
        --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
        -h|--help) usage 0 ;;
        *) echo "static.sh: unknown argument: $1" >&2; usage 2 ;;
    esac
done
DURATION="${DURATION%s}"
for v in "$ROUNDS" "$STRACE_DURATION" ${DURATION:+"$DURATION"} ${IDLE:+"$IDLE"} \
    ${AB_REQUESTS:+"$AB_REQUESTS"} ${H2LOAD_REQUESTS:+"$H2LOAD_REQUESTS"}; do
    case "$v" in ''|*[!0-9]*) echo "static.sh: '$v' is not a number" >&2; exit 2 ;; esac
done
if [ -n "$QUICK" ]; then
    [ "$ROUNDS" = 3 ] && ROUNDS=1
    : "${DURATION:=3}" "${AB_REQUESTS:=5000}" "${H2LOAD_REQUESTS:=100000}" "${IDLE:=2000}"
fi
: "${DURATION:=8}" "${AB_REQUESTS:=20000}" "${H2LOAD_REQUESTS:=400000}" "${IDLE:=9000}"
for name in ${ONLY//,/ }; do
    case "$name" in
        quill|quill-base|nginx|h2o|lighttpd) ;;
        *) echo "static.sh: unknown candidate '$name' (quill quill-base nginx h2o lighttpd)" >&2; exit 2 ;;
    esac
done
WANT_QUILL=
case ",$ONLY," in *,quill,*) WANT_QUILL=1 ;; esac
WANT_BASE=
case ",$ONLY," in
    *,quill-base,*)
        WANT_BASE=1
        if [ -z "${QUILL_BASE_BIN:-}" ] || ! timeout 10 "$QUILL_BASE_BIN" --version >/dev/null 2>&1; then
            echo "static.sh: quill-base needs QUILL_BASE_BIN=/path/to/quill (a binary that answers --version)" >&2
            exit 2
        fi
        ;;
esac

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
RESULTS="${RESULTS_DIR:-$BENCH_DIR/results}"
COMMAND="bash bench/static.sh --rounds $ROUNDS --duration $DURATION --idle $IDLE --ab-requests $AB_REQUESTS"
COMMAND="$COMMAND --h2load-requests $H2LOAD_REQUESTS --strace-duration $STRACE_DURATION --only $ONLY"
[ -n "$WORKLOADS" ] && COMMAND="$COMMAND --workloads $WORKLOADS"
[ -n "$WANT_BASE" ] && COMMAND="QUILL_BASE_BIN=$QUILL_BASE_BIN $COMMAND"

say() { echo "[static.sh] $*" >&2; }
. "$BENCH_DIR/lib.sh"

# ---- 1. tools from Debian (skipped when already present)
need_install=
for tool in nginx h2o lighttpd wrk ab h2load strace python3; do
    command -v "$tool" >/dev/null 2>&1 || [ -x "/usr/sbin/$tool" ] || need_install=1
done
if [ -n "$need_install" ]; then
    say "installing nginx h2o lighttpd wrk apache2-utils nghttp2-client strace python3"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nginx h2o lighttpd wrk apache2-utils \
        nghttp2-client strace python3 >/dev/null
fi
export PATH="$PATH:/usr/sbin"

# ---- 2. Quill (a failed build, or a binary without `serve`, leaves quill out, loudly)
QUILL=
SKIPPED=
if [ -n "$WANT_QUILL" ]; then
    if ! quill_binary; then
        say "WARNING: building quill or '${QUILL:-quill} --version' failed: quill is NOT measured"
        SKIPPED="quill=no working quill binary (the build or --version failed)"
        QUILL=
    elif ! timeout 10 "$QUILL" --help 2>/dev/null | grep -qE '^  serve( |$)'; then
        # (not `quill serve --help`: without the subcommand, clap takes "serve" for an address)
        say "WARNING: '$QUILL --help' lists no 'serve' command: quill is NOT measured"
        SKIPPED="quill=this binary has no 'serve' command ('quill --help' does not list it)"
        QUILL=
    fi
fi

# ---- 3. run the driver; everything it starts is listed in $WORK/pids
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
WORK="$(mktemp -d /tmp/quill-static-bench.XXXXXX)"
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
    ONLY_RUN="$(echo ",$ONLY," | sed 's/,quill,/,/; s/^,//; s/,$//')"
fi
[ -n "$ONLY_RUN" ] || { say "nothing to run"; exit 1; }

say "work dir $WORK; candidates: $ONLY_RUN; rounds: $ROUNDS; wrk ${DURATION}s; idle $IDLE; load $(cut -d' ' -f1-3 /proc/loadavg)"
set +e
python3 "$BENCH_DIR/static.py" --work "$WORK" ${QUILL:+--quill-bin "$QUILL"} \
    ${QUILL_BASE:+--quill-base-bin "$QUILL_BASE"} --rounds "$ROUNDS" --duration "$DURATION" \
    --idle "$IDLE" --ab-requests "$AB_REQUESTS" --h2load-requests "$H2LOAD_REQUESTS" \
    --strace-duration "$STRACE_DURATION" --only "$ONLY_RUN" --skipped "$SKIPPED" \
    ${WORKLOADS:+--workloads "$WORKLOADS"} \
    --results "$RESULTS" --command "$COMMAND" &
DRIVER=$!
wait "$DRIVER"
rc=$?
set -e
DRIVER=
case "$rc" in
    0) say "tables written to $RESULTS/static.md (raw: static.json)" ;;
    1) say "interrupted or failed: partial tables in $RESULTS/static.md" ;;
    3) say "ERROR: a candidate refused to start and was NOT measured (see the top of $RESULTS/static.md)" ;;
esac
if [ -n "$SKIPPED" ]; then
    say "ERROR: quill was NOT measured: ${SKIPPED#quill=}"
    [ "$rc" -eq 0 ] && rc=3
fi
exit "$rc"
