#!/usr/bin/env bash
# Benchmark Quill against HAProxy (mode tcp), nginx stream, Pen, systemd-socket-proxyd
# and a direct connection, all in front of the same two nginx backends on 127.0.0.1.
#
#   bash bench/run.sh [--rounds N] [--quick] [--only quill,quill-base,haproxy,nginx-stream,pen,socket-proxyd,direct]
#
# Env: QUILL_BIN=path       use this binary instead of building (cargo build --release)
#      QUILL_BASE_BIN=path  the candidate quill-base: a second Quill (e.g. before a change), same run
#      KEEP_WORK=1          keep the temp work dir (configs, logs, pids) after the run
#      RESULTS_DIR=dir      write the results there instead of bench/results
# Writes bench/results/latest.md and bench/results/latest.json. See bench/README.md.
set -euo pipefail

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

ROUNDS=3
QUICK=
ONLY=quill,haproxy,nginx-stream,pen,socket-proxyd,direct
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --rounds=*) ROUNDS="${1#*=}"; shift ;;
        --quick) QUICK=1; shift ;;
        --only) ONLY="${2:?--only needs a list}"; shift 2 ;;
        --only=*) ONLY="${1#*=}"; shift ;;
        -h|--help) usage 0 ;;
        *) echo "run.sh: unknown argument: $1" >&2; usage 2 ;;
    esac
done
case "$ROUNDS" in ''|*[!0-9]*) echo "run.sh: --rounds must be a number" >&2; exit 2 ;; esac
if [ -n "$QUICK" ] && [ "$ROUNDS" = 3 ]; then ROUNDS=1; fi
for name in ${ONLY//,/ }; do
    case "$name" in
        quill|quill-base|haproxy|haproxy-tcp|nginx-stream|nginx|pen|socket-proxyd|proxyd|systemd-socket-proxyd|direct) ;;
        *) echo "run.sh: unknown candidate '$name' (quill quill-base haproxy nginx-stream pen socket-proxyd direct)" >&2; exit 2 ;;
    esac
done
case ",$ONLY," in
    *,quill-base,*)
        if [ -z "${QUILL_BASE_BIN:-}" ] || ! timeout 10 "$QUILL_BASE_BIN" --version >/dev/null 2>&1; then
            echo "run.sh: quill-base needs QUILL_BASE_BIN=/path/to/quill (a binary that answers --version)" >&2
            exit 2
        fi
        ;;
esac

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
RESULTS="${RESULTS_DIR:-$BENCH_DIR/results}"
COMMAND="bash bench/run.sh --rounds $ROUNDS${QUICK:+ --quick} --only $ONLY"
case ",$ONLY," in *,quill-base,*) COMMAND="QUILL_BASE_BIN=$QUILL_BASE_BIN $COMMAND" ;; esac

say() { echo "[run.sh] $*" >&2; }
. "$BENCH_DIR/lib.sh"

# ---- 1. tools from Debian (skipped when already present)
need_install=
for tool in haproxy nginx pen wrk ab strace python3 systemd-socket-activate; do
    command -v "$tool" >/dev/null 2>&1 || need_install=1
done
[ -f /usr/lib/nginx/modules/ngx_stream_module.so ] || need_install=1
[ -x /lib/systemd/systemd-socket-proxyd ] || need_install=1
if [ -n "$need_install" ]; then
    say "installing haproxy nginx libnginx-mod-stream pen wrk apache2-utils strace python3 systemd"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends \
        haproxy nginx libnginx-mod-stream pen wrk apache2-utils strace python3 systemd >/dev/null
    # The packages may start their own services on install; we only use our own instances
    # on other ports, so nothing needs to be stopped here.
fi

# ---- 2. Quill
QUILL=
case ",$ONLY," in
    *,quill,*)
        if ! quill_binary; then
            say "WARNING: building quill or '${QUILL:-quill} --version' failed: benchmarking the peers without quill"
            QUILL=
        fi
        ;;
esac

# ---- 3. run the driver; everything it starts is listed in $WORK/pids
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
WORK="$(mktemp -d /tmp/quill-bench.XXXXXX)"
DRIVER=

trap cleanup_driver_and_work EXIT
trap 'exit 130' INT TERM

QUILL_SRC="$QUILL"
if [ -n "$QUILL" ]; then
    # Run a private copy, so that a rebuild during the run cannot switch binaries half-way.
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

ONLY_RUN="$ONLY"
[ -n "$QUILL" ] || ONLY_RUN="$(echo ",$ONLY," | sed 's/,quill,/,/; s/^,//; s/,$//')"
[ -n "$ONLY_RUN" ] || { say "nothing to run"; exit 1; }

say "work dir $WORK; candidates: $ONLY_RUN; rounds: $ROUNDS${QUICK:+ (quick)}"
python3 "$BENCH_DIR/harness.py" --work "$WORK" ${QUILL:+--quill-bin "$QUILL" --quill-src "$QUILL_SRC"} \
    ${QUILL_BASE:+--quill-base-bin "$QUILL_BASE" --quill-base-src "$QUILL_BASE_BIN"} \
    --rounds "$ROUNDS" ${QUICK:+--quick} --only "$ONLY_RUN" \
    --results "$RESULTS" --command "$COMMAND" &
DRIVER=$!
set +e
wait "$DRIVER"
rc=$?
set -e
DRIVER=
[ "$rc" -le 1 ] && say "tables written to $RESULTS/latest.md (raw: latest.json)"
exit "$rc"
