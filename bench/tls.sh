#!/usr/bin/env bash
# The TLS termination shoot-out (docs/benchmarks.md#tls-termination): Quill (`[listener.tls]`, 2
# workers) against HAProxy 2.6 (nbthread 2, OpenSSL 3) and nginx 1.22 (2 workers) terminating TLS in
# front of the same two nginx backends, ECDSA P-256 and RSA 2048 certificates made at bench time.
# Interleaved rounds, medians, the proxy's CPU per handshake / request from /proc, ratios to the
# peers and the issue's targets.
#
#   bash bench/tls.sh [--rounds N] [--quick] [--duration S] [--hs-secs S] [--idle N] [--only a,b,...]
#                     [--callgrind N]
#
# Candidates: quill haproxy nginx (the default: all three), and quill-base: a second Quill binary
# (QUILL_BASE_BIN, e.g. the build before a change) run with quill's configuration in the same rounds. --quick = 1 round, 3 s runs.
# --duration S: each wrk run (4); --hs-secs S: each ab / s_time run (4); --idle N: idle TLS
# connections held per candidate (9000; 0 skips the idle test). --callgrind N: then N handshakes
# through Quill under callgrind (bench/tls/callgrind.py, ECDSA; a few minutes), appended to tls.md.
# Env: QUILL_BIN=path  use this binary instead of building (cargo build --release)
#      QUILL_BASE_CIPHERS=A,B  quill-base offers only these suites (e.g. TLS_AES_256_GCM_SHA384, what
#                      the peers negotiate: quill-base = the same binary, for a like-for-like run)
#      QUILL_BASE_BIN=path  the candidate quill-base (needed when --only names it)
#      KEEP_WORK=1     keep the temp work dir (certificates, configs, logs)
#      RESULTS_DIR=dir write the results there instead of bench/results
# Writes bench/results/tls.md and bench/results/tls.json. About 8 minutes with the defaults.
# Exit status: 0, 1 (interrupted or setup failed), 2 (usage), 3 (a candidate refused to start or
# did not terminate TLS: the tables are written, with that candidate marked NOT measured).
set -euo pipefail

usage() { sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

ROUNDS=3
QUICK=
DURATION=
HS_SECS=
IDLE=9000
CALLGRIND=
ONLY=quill,haproxy,nginx
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --quick) QUICK=1; shift ;;
        --duration) DURATION="${2:?--duration needs seconds}"; shift 2 ;;
        --hs-secs) HS_SECS="${2:?--hs-secs needs seconds}"; shift 2 ;;
        --idle) IDLE="${2:?--idle needs a number}"; shift 2 ;;
        --callgrind) CALLGRIND="${2:?--callgrind needs a number of handshakes}"; shift 2 ;;
        --only) ONLY="${2:?--only needs a list}"; shift 2 ;;
        --*=*) set -- "${1%%=*}" "${1#*=}" "${@:2}" ;;
        -h|--help) usage 0 ;;
        *) echo "tls.sh: unknown argument: $1" >&2; usage 2 ;;
    esac
done
DURATION="${DURATION%s}"
HS_SECS="${HS_SECS%s}"
for v in "$ROUNDS" "$IDLE" ${CALLGRIND:+"$CALLGRIND"} ${DURATION:+"$DURATION"} ${HS_SECS:+"$HS_SECS"}; do
    case "$v" in ''|*[!0-9]*) echo "tls.sh: '$v' is not a number" >&2; exit 2 ;; esac
done
if [ -n "$QUICK" ]; then
    [ "$ROUNDS" = 3 ] && ROUNDS=1
    : "${DURATION:=3}" "${HS_SECS:=3}"
fi
: "${DURATION:=4}" "${HS_SECS:=4}"
for name in ${ONLY//,/ }; do
    case "$name" in
        quill|haproxy|nginx) ;;
        quill-base)
            if [ -z "${QUILL_BASE_BIN:-}" ] || ! timeout 10 "$QUILL_BASE_BIN" --version >/dev/null 2>&1; then
                echo "tls.sh: quill-base needs QUILL_BASE_BIN=/path/to/quill (a binary that answers --version)" >&2
                exit 2
            fi
            ;;
        *) echo "tls.sh: unknown candidate '$name' (quill quill-base haproxy nginx)" >&2; exit 2 ;;
    esac
done

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
RESULTS="${RESULTS_DIR:-$BENCH_DIR/results}"
COMMAND="bash bench/tls.sh --rounds $ROUNDS --duration $DURATION --hs-secs $HS_SECS --idle $IDLE --only $ONLY"
[ -n "$CALLGRIND" ] && COMMAND="$COMMAND --callgrind $CALLGRIND"
case ",$ONLY," in *,quill-base,*) COMMAND="QUILL_BASE_BIN=$QUILL_BASE_BIN${QUILL_BASE_CIPHERS:+ QUILL_BASE_CIPHERS=$QUILL_BASE_CIPHERS} $COMMAND" ;; esac

say() { echo "[tls.sh] $*" >&2; }
. "$BENCH_DIR/lib.sh"

# ---- 1. tools from Debian (skipped when already present)
need_install=
for tool in haproxy nginx wrk ab openssl python3 ${CALLGRIND:+valgrind}; do
    command -v "$tool" >/dev/null 2>&1 || need_install=1
done
if [ -n "$need_install" ]; then
    say "installing haproxy nginx wrk apache2-utils openssl python3 ${CALLGRIND:+valgrind}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends haproxy nginx wrk apache2-utils openssl python3 \
        ${CALLGRIND:+valgrind} >/dev/null
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
WORK="$(mktemp -d /tmp/quill-tls-bench.XXXXXX)"
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

say "work dir $WORK; candidates: $ONLY; rounds: $ROUNDS; wrk ${DURATION}s; ab/s_time ${HS_SECS}s; idle $IDLE"
set +e
python3 "$BENCH_DIR/tls/tls.py" --work "$WORK" ${QUILL:+--quill-bin "$QUILL"} \
    ${QUILL_BASE:+--quill-base-bin "$QUILL_BASE"} \
    --rounds "$ROUNDS" --duration "$DURATION" --hs-secs "$HS_SECS" --idle "$IDLE" --only "$ONLY" \
    --results "$RESULTS" --command "$COMMAND" >/dev/null &
DRIVER=$!
wait "$DRIVER"
rc=$?
set -e
DRIVER=
case "$rc" in
    0) say "tables written to $RESULTS/tls.md (raw: tls.json)" ;;
    1) say "interrupted or failed: partial tables in $RESULTS/tls.md" ;;
    3) say "ERROR: a candidate was NOT measured (see the top of $RESULTS/tls.md)" ;;
esac
if [ -n "$CALLGRIND" ] && [ -n "$QUILL" ] && [ "$rc" -ne 1 ]; then
    say "callgrind: $CALLGRIND handshakes through quill under valgrind (a few minutes)"
    set +e
    python3 "$BENCH_DIR/tls/callgrind.py" --quill-bin "$QUILL" -n "$CALLGRIND" --kind ecdsa \
        --out "$WORK/callgrind.md" >/dev/null &
    DRIVER=$!
    wait "$DRIVER"
    crc=$?
    set -e
    DRIVER=
    if [ "$crc" -eq 0 ]; then
        { echo; cat "$WORK/callgrind.md"; } >> "$RESULTS/tls.md"
        say "callgrind split appended to $RESULTS/tls.md"
    else
        say "WARNING: the callgrind run failed (status $crc)"
    fi
fi
exit "$rc"
