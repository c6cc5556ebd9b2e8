#!/usr/bin/env bash
# DSR's per-frame server choice with N servers (docs/benchmarks.md#dsr-on-a-maglev-table):
#   1. the choice alone, pure CPU (crates/quill-core/examples/dsr_choice_cost.rs in release):
#      weighted rendezvous against the Maglev table with the flow tracking, N = 2, 10, 100, 1,000;
#   2. with --frames (first): Quill's whole CPU per forwarded frame (bench/dsr_frames.sh,
#      namespaces, root), N = 2 and 100, each mode, ROUNDS rounds alternating; prints every run's
#      ns_per_forwarded (CPU per frame sent on: when Quill falls behind, the ring drops frames
#      it never spends anything on) and the median per case.
# Run it on a quiet machine.
#   bash bench/dsr_choice.sh [--frames F] [--rounds R] [--steer]   (--steer: see bench/dsr_frames.sh)   (QUILL_BIN for step 2, else the release build)
set -euo pipefail
cd "$(dirname "$0")/.."
FRAMES=
ROUNDS=3
STEER=
while [ $# -gt 0 ]; do
    case "$1" in
        --frames) FRAMES="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --steer) STEER=--steer; shift ;;
        *) echo "dsr_choice.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
micro() { cargo run --quiet --release -p quill-core --example dsr_choice_cost -- 5000000; }
[ -n "$FRAMES" ] || { micro; exit 0; }
declare -A RUNS
for r in $(seq 1 "$ROUNDS"); do
    for n in 2 100; do
        for mode in "" --maglev; do
            line=$(bash bench/dsr_frames.sh --servers "$n" $mode --frames "$FRAMES" $STEER | grep '^RESULT')
            echo "round $r: $line"
            ns=${line##*ns_per_forwarded=}
            key="$n ${mode:---rendezvous}"
            RUNS[$key]="${RUNS[$key]:-} $ns"
        done
    done
done
echo "| servers | mode | Quill CPU ns per forwarded frame, each round | median |"
echo "|---:|---|---|---:|"
for key in "2 --rendezvous" "100 --rendezvous" "2 --maglev" "100 --maglev"; do
    vals=${RUNS[$key]}
    med=$(echo $vals | tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "| ${key%% *} | ${key#* --} | $vals | $med |"
done
micro
