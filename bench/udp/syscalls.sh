#!/usr/bin/env bash
# Syscalls per DNS query of one Quill binary (docs/design.md#udp-flows: "many datagrams per
# syscall"): Quill (2 workers, `flow_responses = 1`) in front of two dnsmasq answering from local
# records, as in bench/udp/udp.py's dns run, under `dnsperf -c 8 -q 100 -t 2 -l S` (at -Q RATE when
# given), counted with `perf stat` on the syscall tracepoints of Quill's process (needs perf and
# tracefs access).
#
#   bash bench/udp/syscalls.sh QUILL_BIN [SECONDS] [RATE]
#
# Loopback only (ports 9281, 9601, 9602); every process it starts is stopped by PID. Take the bench
# lock around it when others share the machine: flock /work/notes/bench.lock bash bench/udp/syscalls.sh ...
set -euo pipefail
BIN="${1:?usage: syscalls.sh QUILL_BIN [SECONDS] [RATE]}"
DUR="${2:-5}"
RATE="${3:-}"
for tool in perf dnsperf dnsmasq; do
    command -v "$tool" >/dev/null || { echo "syscalls.sh: $tool is missing" >&2; exit 1; }
done
W="$(mktemp -d /tmp/quill-udp-syscalls.XXXXXX)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$W"
}
trap cleanup EXIT
records=()
for i in $(seq 0 19); do records+=("--host-record=h$i.bench.test,192.0.2.$((i + 1))"); done
for port in 9601 9602; do
    dnsmasq -k -C /dev/null --no-resolv --no-hosts --no-poll --bind-interfaces \
        --listen-address=127.0.0.1 --port=$port --user=root --pid-file= --local=/bench.test/ \
        --cache-size=1000 "${records[@]}" 2>/dev/null &
    pids+=($!)
done
cat > "$W/q.toml" <<T
workers = 2

[[listener]]
name = "udp"
listen = "127.0.0.1:9281"
protocol = "udp"
servers = ["127.0.0.1:9601", "127.0.0.1:9602"]
mode = ["roundrobin"]
udp = { flow_responses = 1 }
T
for _ in $(seq 50); do for i in $(seq 0 19); do echo "h$i.bench.test A"; done; done > "$W/queries.txt"
"$BIN" --config "$W/q.toml" 2> "$W/quill.err" &
qp=$!
pids+=("$qp")
sleep 1
ev=raw_syscalls:sys_enter
for n in epoll_wait sendmsg sendmmsg sendto recvfrom recvmmsg socket connect close epoll_ctl; do
    ev="$ev,syscalls:sys_enter_$n"
done
perf stat -x, -o "$W/perf.txt" -e "$ev" -e syscalls:sys_exit_recvfrom --filter 'ret == -11' -p "$qp" &
sp=$!
sleep 0.5
dnsperf -s 127.0.0.1 -p 9281 -d "$W/queries.txt" -l "$DUR" -c 8 -q 100 -t 2 ${RATE:+-Q "$RATE"} \
    > "$W/dnsperf.txt" 2>&1 || true
kill -INT "$sp"; wait "$sp" || true
grep -E "Queries (sent|completed|lost)|Queries per second" "$W/dnsperf.txt"
q=$(awk '/Queries completed/{print $3}' "$W/dnsperf.txt")
[ "${q:-0}" -gt 0 ] || { echo "syscalls.sh: no query completed" >&2; exit 1; }
awk -F, -v q="$q" '$3 ~ /sys_/ {
    n = $3; sub(/.*sys_(enter_)?/, "", n); if ($3 ~ /exit/) n = n " (EAGAIN)"; if (n == "enter") n = "all"
    printf "%-24s %10d calls %7.3f per query\n", n, $1, $1 / q }' "$W/perf.txt"
