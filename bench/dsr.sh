#!/usr/bin/env bash
# bench/dsr.sh: Quill's CPU seconds per GiB downloaded, proxied in TCP mode against direct server
# return (the target of docs/benchmarks.md#direct-server-return: DSR at most a tenth of TCP mode's).
# Network namespaces joined by a bridge (private addresses 10.72.0.0/24 only): a client, Quill
# (10.72.0.1, eth0), two servers (10.72.0.11, .12) holding the virtual address 10.72.0.100 on their
# loopback with arp_ignore=1/arp_announce=2. Each server sends SIZE bytes of zeros per connection
# (socat). Rounds alternate TCP mode (quill 10.72.0.1:8001 -> servers) and DSR (quill -O "dsr_if
# eth0"
# 10.72.0.100:8000); Quill's CPU is utime+stime from /proc/PID/stat around each download, and
# Quill's interface counters show what crossed it. Everything started is stopped by PID and the
# namespaces are deleted on exit.
#
# With two CPUs or more (the default, --no-steer to turn it off) Quill is pinned to CPU 0 and
# every veth's receive processing is steered to CPU 1 (RPS, rps_cpus): a frame Quill sends into a
# veth is otherwise received, bridged and handled by the server's and the client's TCP stacks
# inside Quill's own send() (softirq on the sending CPU, charged to Quill), which a real NIC does
# on other hosts. Both modes run under the same steering.
#
# With --profile DIR, each download also runs `perf stat` (Quill's syscalls, context switches,
# CPU clock) and `perf record -g` (call graphs, CPU clock) attached to Quill, writing
# DIR/ROUND-MODE.stat and DIR/ROUND-MODE.data (read with `perf report -i FILE`); perf's sampling
# costs Quill a little CPU too, so profiled figures are not the benchmark's.
#
# Usage: bash bench/dsr.sh [--rounds N] [--size BYTES] [--no-steer] [--profile DIR]
#   (defaults: 3 rounds, 1 GiB). Writes bench/results/dsr.md (not with --profile). Needs root,
#   iproute2 and socat (and perf for --profile).
set -euo pipefail

REPO="$(cd "$(dirname "$0")/.." && pwd)"
say() { echo "dsr.sh: $*" >&2; }
# shellcheck source=bench/lib.sh
source "$REPO/bench/lib.sh"

ROUNDS=3
SIZE=$((1024 * 1024 * 1024))
STEER=1
PROFILE=
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --size) SIZE="$2"; shift 2 ;;
        --no-steer) STEER=0; shift ;;
        --profile) PROFILE="$2"; shift 2 ;;
        *) say "unknown option $1"; exit 2 ;;
    esac
done
command -v socat >/dev/null || { say "socat is needed (apt-get install socat)"; exit 2; }
quill_binary || { say "no quill binary"; exit 1; }

P="qb$$"
NSS=()
PIDS=()
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    sleep 0.3
    for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    for ns in "${NSS[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
    exit $rc
}
trap cleanup EXIT INT TERM

mkns() { ip netns add "$P$1"; NSS+=("$P$1"); ip -n "$P$1" link set lo up; }
for r in h c q s1 s2; do mkns "$r"; done
ip -n "${P}h" link add name br0 type bridge
ip -n "${P}h" link set br0 up
i=0
for m in c:10.72.0.2 q:10.72.0.1 s1:10.72.0.11 s2:10.72.0.12; do
    ns="$P${m%%:*}"; addr="${m#*:}"
    ip link add eth0 netns "$ns" type veth peer name "p$i" netns "${P}h"
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "${P}h" link set "p$i" master br0
    ip -n "${P}h" link set "p$i" up
    i=$((i + 1))
done
for s in s1 s2; do
    ip -n "$P$s" addr add 10.72.0.100/32 dev lo
    for scope in all eth0; do
        ip netns exec "$P$s" sysctl -qw "net.ipv4.conf.$scope.arp_ignore=1" "net.ipv4.conf.$scope.arp_announce=2"
    done
    ip netns exec "$P$s" socat -b 262144 TCP-LISTEN:8000,fork,reuseaddr \
        EXEC:"head -c $SIZE /dev/zero" 2>/dev/null &
    PIDS+=($!)
done

if [ "$STEER" = 1 ] && [ "$(nproc)" -lt 2 ]; then
    say "one CPU: no steering"; STEER=0
fi
PIN=()
if [ "$STEER" = 1 ]; then
    # Every veth end's receive work to CPU 1 (mask 2); Quill on CPU 0.
    for ns in c q s1 s2; do
        ip netns exec "$P$ns" sh -c 'echo 2 > /sys/class/net/eth0/queues/rx-0/rps_cpus'
    done
    for j in 0 1 2 3; do
        ip netns exec "${P}h" sh -c "echo 2 > /sys/class/net/p$j/queues/rx-0/rps_cpus"
    done
    PIN=(taskset -c 0)
fi

TCK="$(getconf CLK_TCK)"
# "user system" clock ticks of a process.
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12, $13}'; }
# Nanoseconds on a CPU of a process's threads (the scheduler's own count, /proc/PID/task/*/schedstat;
# finer than the ticks above; the threads live as long as the process).
cpu_ns() { cat /proc/"$1"/task/*/schedstat | awk '{n += $1} END {printf "%d", n}'; }
counter() { ip netns exec "${P}q" cat "/sys/class/net/eth0/statistics/$1"; }

start_quill() {
    ip netns exec "${P}q" "${PIN[@]}" "$QUILL" "$@" 2>"$WORKLOG" &
    QPID=$!
    PIDS+=("$QPID")
}

# One download through ADDR:PORT; prints "bytes cpu_seconds wall_seconds rx tx user_s sys_s
# rx_frames cpu_ns".
measure() {
    local addr="$1" u0 s0 u1 s1 t0 t1 rx0 tx0 p0 got n0 n1
    read -r u0 s0 < <(cpu_ticks "$QPID")
    n0="$(cpu_ns "$QPID")"
    rx0="$(counter rx_bytes)"; tx0="$(counter tx_bytes)"; p0="$(counter rx_packets)"
    local perfs=()
    if [ -n "$PROFILE" ]; then
        perf stat -e raw_syscalls:sys_enter,context-switches,cpu-clock -p "$QPID" \
            -o "$PROFILE/$TAG.stat" 2>/dev/null &
        perfs+=($!)
        perf record -q -e cpu-clock -g -p "$QPID" -o "$PROFILE/$TAG.data" 2>/dev/null &
        perfs+=($!)
        sleep 0.5
    fi
    t0="$(date +%s.%N)"
    got="$(ip netns exec "${P}c" timeout 300 socat -b 262144 -u "TCP:$addr" - | wc -c)"
    t1="$(date +%s.%N)"
    read -r u1 s1 < <(cpu_ticks "$QPID")
    n1="$(cpu_ns "$QPID")"
    for p in "${perfs[@]}"; do kill -INT "$p" 2>/dev/null || true; done
    for p in "${perfs[@]}"; do wait "$p" 2>/dev/null || true; done
    echo "$got $(echo "($u1 + $s1 - $u0 - $s0) / $TCK" | bc -l) $(echo "$t1 - $t0" | bc -l) \
$(( $(counter rx_bytes) - rx0 )) $(( $(counter tx_bytes) - tx0 )) \
$(echo "($u1 - $u0) / $TCK" | bc -l) $(echo "($s1 - $s0) / $TCK" | bc -l) $(( $(counter rx_packets) - p0 )) \
$((n1 - n0))"
}

wait_up() {
    for _ in $(seq 1 100); do
        if [ "$(ip netns exec "${P}c" timeout 2 socat -u "TCP:$1,connect-timeout=1" - 2>/dev/null | head -c 1 | wc -c)" = 1 ]; then
            return 0
        fi
        sleep 0.1
    done
    say "nothing answers on $1"; cat "$WORKLOG" >&2; return 1
}

WORKLOG="$(mktemp)"
RESULTS=()
for round in $(seq 1 "$ROUNDS"); do
    for mode in tcp dsr; do
        if [ "$mode" = tcp ]; then
            start_quill 10.72.0.1:8001 10.72.0.11:8000 10.72.0.12:8000
            target=10.72.0.1:8001
        else
            start_quill -O "dsr_if eth0" 10.72.0.100:8000 10.72.0.11:8000 10.72.0.12:8000
            target=10.72.0.100:8000
        fi
        wait_up "$target"
        sleep 1.5
        TAG="$round-$mode"
        line="$(measure "$target")"
        say "round $round $mode: $line"
        RESULTS+=("$round $mode $line")
        kill -TERM "$QPID"; wait "$QPID" 2>/dev/null || true
    done
done
rm -f "$WORKLOG"
if [ -n "$PROFILE" ]; then
    printf '%s\n' "${RESULTS[@]}" > "$PROFILE/rows.txt"
    say "profiles in $PROFILE (rows: round mode bytes cpu wall rx tx user sys rx_frames)"
    exit 0
fi

OUT="$REPO/bench/results/dsr.md"
{
    echo "# DSR against TCP mode: Quill's CPU per GiB downloaded"
    echo
    echo "\`bash bench/dsr.sh --rounds $ROUNDS --size $SIZE$([ "$STEER" = 1 ] || echo ' --no-steer')\`, $(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -r), $(nproc) CPUs."
    if [ "$STEER" = 1 ]; then
        echo "Quill pinned to CPU 0; every veth's receive processing steered to CPU 1 (RPS), so the"
        echo "bridge's, the servers' and the client's packet work is not run inside Quill's send()."
    else
        echo "No steering: veth runs the receivers' packet work inside the sender's send() (charged to Quill)."
    fi
    echo "Namespaces joined by a bridge (veth); servers send zeros with socat; one download per row;"
    echo "CPU = Quill's utime+stime around the download (user and system apart; 10 ms ticks);"
    echo "sched ms = the same from the scheduler's nanosecond count (/proc/PID/task/*/schedstat);"
    echo "rx/tx = bytes (and frames in) on Quill's eth0 meanwhile; µs/frame = sched ms per frame in."
    echo
    echo "| round | mode | bytes | Quill CPU s | user s | system s | CPU s per GiB | sched ms | wall s | MiB/s | eth0 rx bytes | eth0 tx bytes | eth0 rx frames | µs/frame |"
    echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    for r in "${RESULTS[@]}"; do
        set -- $r
        perg="$(echo "$4 / ($3 / 1073741824)" | bc -l)"
        mibs="$(echo "$3 / 1048576 / $5" | bc -l)"
        printf '| %s | %s | %s | %.2f | %.2f | %.2f | %.3f | %.1f | %.2f | %.0f | %s | %s | %s | %.1f |\n' \
            "$1" "$2" "$3" "$4" "$8" "$9" "$perg" "$(echo "${11} / 1000000" | bc -l)" "$5" "$mibs" \
            "$6" "$7" "${10}" "$(awk -v n="${11}" -v f="${10}" 'BEGIN {printf "%f", n / 1000 / (f > 0 ? f : 1)}')"
    done
    tcp="$(printf '%s\n' "${RESULTS[@]}" | awk '$2=="tcp"{c+=$4; b+=$3} END{printf "%.4f", c/(b/1073741824)}')"
    dsr="$(printf '%s\n' "${RESULTS[@]}" | awk '$2=="dsr"{c+=$4; b+=$3} END{printf "%.4f", c/(b/1073741824)}')"
    echo
    tcpu="$(printf '%s\n' "${RESULTS[@]}" | awk '$2=="tcp"{c+=$8; b+=$3} END{printf "%.4f", c/(b/1073741824)}')"
    dsru="$(printf '%s\n' "${RESULTS[@]}" | awk '$2=="dsr"{c+=$8; b+=$3} END{printf "%.4f", c/(b/1073741824)}')"
    echo "Over all rounds: TCP mode $tcp CPU s/GiB, DSR $dsr CPU s/GiB (ratio $(echo "$dsr / $tcp" | bc -l | cut -c1-6); target <= 0.1)."
    echo "User CPU alone: TCP mode $tcpu s/GiB, DSR $dsru s/GiB."
    tcpn="$(printf '%s\n' "${RESULTS[@]}" | awk '$2=="tcp"{c+=$11; b+=$3} END{printf "%.4f", c/1e9/(b/1073741824)}')"
    dsrn="$(printf '%s\n' "${RESULTS[@]}" | awk '$2=="dsr"{c+=$11; b+=$3} END{printf "%.4f", c/1e9/(b/1073741824)}')"
    echo "By the scheduler's count: TCP mode $tcpn s/GiB, DSR $dsrn s/GiB (ratio $(echo "$dsrn / $tcpn" | bc -l | cut -c1-6))."

} > "$OUT"
cat "$OUT"
