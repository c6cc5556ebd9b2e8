#!/usr/bin/env bash
# The FastCGI shoot-out (docs/benchmarks.md#fastcgi): nginx 1.22 (2 workers, `fastcgi_pass` to an
# upstream with `keepalive 8`, `fastcgi_keep_conn on`) against Quill's `fastcgi` route action, in
# front of the same php-fpm 8.2 (`pm = static`, 2 children; one pool on a Unix socket, one on
# 127.0.0.1:9420), serving hello.php and 20k.php. Interleaved rounds, medians, the proxy's CPU per
# request, php-fpm's, the load generator's own, and php-fpm connections opened per 10,000 requests.
#
#   bash bench/fastcgi.sh [--rounds N] [--quick] [--duration S] [--concurrency C] [--only a,b,...]
#                         [--conn-requests N] [--fpm-children N] [--no-strace]
#
# Candidates: quill nginx (the default), quill-base. --quick = 1 round, wrk 3 s, 2,000 requests for
# the connection count. --concurrency: wrk's and h2load's connections (10). --fpm-children: each
# pool's pm.max_children (2; nginx needs more than its workers x keepalive not to stall, see
# docs/benchmarks.md#fastcgi).
# Env: QUILL_BIN, QUILL_BASE_BIN, KEEP_WORK, RESULTS_DIR: as for bench/static.sh.
# Writes bench/results/fastcgi.md and bench/results/fastcgi.json. See bench/README.md.
# Exit status: 0, 1 (interrupted or setup failed), 2 (usage), 3 (a candidate refused to start or
# to serve the scripts: the tables are written, with that candidate marked NOT measured).
set -euo pipefail

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

ROUNDS=3
QUICK=
DURATION=
CONCURRENCY=10
CONN_REQUESTS=
FPM_CHILDREN=2
NO_STRACE=
ONLY=quill,nginx
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --duration) DURATION="${2:?--duration needs seconds}"; shift 2 ;;
        --concurrency) CONCURRENCY="${2:?}"; shift 2 ;;
        --conn-requests) CONN_REQUESTS="${2:?}"; shift 2 ;;
        --fpm-children) FPM_CHILDREN="${2:?}"; shift 2 ;;
        --no-strace) NO_STRACE=--no-strace; shift ;;
        --only) ONLY="${2:?--only needs a list}"; shift 2 ;;
        --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
        -h|--help) usage 0 ;;
        *) echo "fastcgi.sh: unknown argument: $1" >&2; usage 2 ;;
    esac
done
DURATION="${DURATION%s}"
for v in "$ROUNDS" "$CONCURRENCY" "$FPM_CHILDREN" ${DURATION:+"$DURATION"} ${CONN_REQUESTS:+"$CONN_REQUESTS"}; do
    case "$v" in ''|*[!0-9]*) echo "fastcgi.sh: '$v' is not a number" >&2; exit 2 ;; esac
done
if [ -n "$QUICK" ]; then
    [ "$ROUNDS" = 3 ] && ROUNDS=1
    : "${DURATION:=3}" "${CONN_REQUESTS:=2000}"
fi
: "${DURATION:=8}" "${CONN_REQUESTS:=10000}"
for name in ${ONLY//,/ }; do
    case "$name" in
        quill|quill-base|nginx) ;;
        *) echo "fastcgi.sh: unknown candidate '$name' (quill quill-base nginx)" >&2; exit 2 ;;
    esac
done
WANT_QUILL=
case ",$ONLY," in *,quill,*) WANT_QUILL=1 ;; esac
WANT_BASE=
case ",$ONLY," in
    *,quill-base,*)
        WANT_BASE=1
        if [ -z "${QUILL_BASE_BIN:-}" ] || ! timeout 10 "$QUILL_BASE_BIN" --version >/dev/null 2>&1; then
            echo "fastcgi.sh: quill-base needs QUILL_BASE_BIN=/path/to/quill (a binary that answers --version)" >&2
            exit 2
        fi
        ;;
esac

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
RESULTS="${RESULTS_DIR:-$BENCH_DIR/results}"
COMMAND="bash bench/fastcgi.sh --rounds $ROUNDS --duration $DURATION --concurrency $CONCURRENCY"
COMMAND="$COMMAND --conn-requests $CONN_REQUESTS --fpm-children $FPM_CHILDREN${NO_STRACE:+ $NO_STRACE} --only $ONLY"
[ -n "$WANT_BASE" ] && COMMAND="QUILL_BASE_BIN=$QUILL_BASE_BIN $COMMAND"

say() { echo "[fastcgi.sh] $*" >&2; }
. "$BENCH_DIR/lib.sh"

# ---- 1. tools from Debian (skipped when already present)
export PATH="$PATH:/usr/sbin"
need_install=
for tool in nginx php-fpm8.2 wrk h2load strace python3; do
    command -v "$tool" >/dev/null 2>&1 || need_install=1
done
if [ -n "$need_install" ]; then
    say "installing nginx php8.2-fpm wrk nghttp2-client strace python3"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nginx php8.2-fpm wrk nghttp2-client strace python3 >/dev/null
fi

# ---- 2. Quill (a failed build leaves quill out, loudly; one that refuses the FastCGI route is
# reported NOT measured by the driver with its own message)
QUILL=
SKIPPED=
if [ -n "$WANT_QUILL" ] && ! quill_binary; then
    say "WARNING: building quill or '${QUILL:-quill} --version' failed: quill is NOT measured"
    SKIPPED="quill=no working quill binary (the build or --version failed)"
    QUILL=
fi

# ---- 3. run the driver; everything it starts is listed in $WORK/pids
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
WORK="$(mktemp -d /tmp/quill-fastcgi-bench.XXXXXX)"
DRIVER=
trap cleanup_driver_and_work EXIT
trap 'exit 130' INT TERM

if [ -n "$QUILL" ]; then
    QUILL_SRC="$QUILL"
    cp "$QUILL" "$WORK/quill" && QUILL="$WORK/quill"
    say "quill: $("$QUILL" --version 2>&1 | head -1) ($QUILL_SRC)"
fi
QUILL_BASE=
if [ -n "$WANT_BASE" ]; then
    cp "$QUILL_BASE_BIN" "$WORK/quill-base" && QUILL_BASE="$WORK/quill-base"
fi
ONLY_RUN="$ONLY"
[ -z "$QUILL" ] && ONLY_RUN="$(echo ",$ONLY," | sed 's/,quill,/,/; s/^,//; s/,$//')"
[ -n "$ONLY_RUN" ] || { say "nothing to run"; exit 1; }

say "work dir $WORK; candidates: $ONLY_RUN; rounds: $ROUNDS; wrk ${DURATION}s -c$CONCURRENCY; load $(cut -d' ' -f1-3 /proc/loadavg)"
set +e
python3 "$BENCH_DIR/fastcgi.py" --work "$WORK" ${QUILL:+--quill-bin "$QUILL"} \
    ${QUILL_BASE:+--quill-base-bin "$QUILL_BASE"} --rounds "$ROUNDS" --duration "$DURATION" \
    --concurrency "$CONCURRENCY" --conn-requests "$CONN_REQUESTS" --fpm-children "$FPM_CHILDREN" $NO_STRACE \
    --only "$ONLY_RUN" --skipped "$SKIPPED" --results "$RESULTS" --command "$COMMAND" &
DRIVER=$!
wait "$DRIVER"
rc=$?
set -e
DRIVER=
case "$rc" in
    0) say "tables written to $RESULTS/fastcgi.md (raw: fastcgi.json)" ;;
    1) say "interrupted or failed: partial tables in $RESULTS/fastcgi.md" ;;
    3) say "ERROR: a candidate was NOT measured (see the top of $RESULTS/fastcgi.md)" ;;
esac
exit "$rc"
