#!/usr/bin/env bash
# bench/dsr_frames.sh: Quill's CPU per forwarded frame in DSR when forwarding a frame triggers no
# further work on the servers (UDP datagrams to a socket that discards them), beside bench/dsr.sh
# where each forwarded frame is a client's ACK that makes the server send more data. Namespaces
# as in bench/dsr.sh (10.72.0.0/24; server addresses in 10.72.1.0/24 with --servers); 64-byte
# datagrams from 16 client sockets (python3), Quill's CPU from /proc around them (utime/stime in
# ticks, and the nanoseconds of /proc/PID/task/*/schedstat), frames from Quill's eth0 counter.
# Stops what it started by PID and deletes its namespaces on exit.
#
#   bash bench/dsr_frames.sh [--servers N] [--maglev] [--frames F] [--steer]
#     (QUILL_BIN, else the release build; default 2 servers, weighted rendezvous, 200,000 frames)
#
# --servers N: Quill balances over N servers. The two server namespaces hold them all: server k
# is 10.72.1.k, held by the first namespace for odd k and by the second for even k, both of which
# answer Quill's ARP probes for their addresses, so every server's MAC is known (weighted
# rendezvous scores all N for every frame; the Maglev table looks up one slot). Without it, the
# two servers are 10.72.0.11 and .12 as before. --maglev adds Quill's `--maglev` (the Maglev
# table and the flow tracking). --steer (two CPUs or more): Quill pinned to CPU 0, the client's
# sender and every veth's receive processing (RPS) on CPU 1, as bench/dsr.sh does: otherwise a
# frame Quill sends into a veth is bridged and received by the server's stack inside Quill's
# own sendmmsg, charged to Quill. The last line is machine-readable:
#   RESULT servers=N mode=M frames=IN forwarded=OUT ns_per_frame=X ns_per_forwarded=Y
# (CPU nanoseconds per frame received, and per frame sent; OUT includes Quill's ARP probes, N a
# second).

set -euo pipefail
QUILL="${QUILL_BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release/quill}"
SERVERS=0
MAGLEV=
FRAMES=200000
STEER=0
while [ $# -gt 0 ]; do
    case "$1" in
        --servers) SERVERS="$2"; shift 2 ;;
        --maglev) MAGLEV=--maglev; shift ;;
        --frames) FRAMES="$2"; shift 2 ;;
        --steer) STEER=1; shift ;;
        *) echo "dsr_frames.sh: unknown option $1" >&2; exit 2 ;;
    esac
done
case "$SERVERS" in ''|*[!0-9]*) echo "dsr_frames.sh: --servers needs a number" >&2; exit 2 ;; esac
[ "$SERVERS" -le 250 ] || { echo "dsr_frames.sh: at most 250 servers" >&2; exit 2; }
P="qx$$"; NSS=(); PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; for n in "${NSS[@]}"; do ip netns del "$n" 2>/dev/null || true; done; }
trap cleanup EXIT
mk() { ip netns add "$P$1"; NSS+=("$P$1"); ip -n "$P$1" link set lo up; }
for r in h c q s1 s2; do mk $r; done
ip -n ${P}h link add name br0 type bridge; ip -n ${P}h link set br0 up
i=0
for m in c:10.72.0.2 q:10.72.0.1 s1:10.72.0.11 s2:10.72.0.12; do
  ns="$P${m%%:*}"; a="${m#*:}"
  ip link add eth0 netns "$ns" type veth peer name p$i netns ${P}h
  ip -n "$ns" addr add $a/24 dev eth0; ip -n "$ns" link set eth0 up
  ip -n ${P}h link set p$i master br0; ip -n ${P}h link set p$i up; i=$((i+1))
done
for s in s1 s2; do ip -n $P$s addr add 10.72.0.100/32 dev lo
  ip netns exec $P$s sysctl -qw net.ipv4.conf.all.arp_ignore=1 net.ipv4.conf.all.arp_announce=2 net.ipv4.icmp_ratelimit=1000000
  # A UDP sink that reads and discards (so frames end in a socket, no reply).
  ip netns exec $P$s socat -u UDP-RECV:9000,bind=10.72.0.100 /dev/null & PIDS+=($!)
done
LIST=()
if [ "$SERVERS" -eq 0 ]; then
  LIST=(10.72.0.11:9000 10.72.0.12:9000); N=2
else
  for k in $(seq 1 "$SERVERS"); do
    if [ $((k % 2)) -eq 1 ]; then s=s1; else s=s2; fi
    ip -n $P$s addr add 10.72.1.$k/32 dev eth0
    LIST+=("10.72.1.$k:9000")
  done
  N=$SERVERS
fi
PIN=(); SEND_PIN=()
if [ "$STEER" = 1 ] && [ "$(nproc)" -ge 2 ]; then
  for ns in c q s1 s2; do ip netns exec "$P$ns" sh -c 'echo 2 > /sys/class/net/eth0/queues/rx-0/rps_cpus'; done
  for j in 0 1 2 3; do ip netns exec "${P}h" sh -c "echo 2 > /sys/class/net/p$j/queues/rx-0/rps_cpus"; done
  PIN=(taskset -c 0); SEND_PIN=(taskset -c 1)
fi
ip netns exec ${P}q "${PIN[@]}" "$QUILL" -O "dsr_if eth0" $MAGLEV 10.72.0.100:9000 "${LIST[@]}" 2>/dev/null & QPID=$!; PIDS+=($QPID)
# Two probe rounds (one a second): every server's MAC known.
sleep 2.5
cpu_ns() { local t=0 v; for f in /proc/$QPID/task/*/schedstat; do read -r v _ < "$f"; t=$((t + v)); done; echo $t; }
read -r u0 s0 < <(sed 's/^.*) //' /proc/$QPID/stat | awk '{print $12, $13}')
n0=$(cpu_ns)
p0=$(ip netns exec ${P}q cat /sys/class/net/eth0/statistics/rx_packets)
t0=$(ip netns exec ${P}q cat /sys/class/net/eth0/statistics/tx_packets)
ip netns exec ${P}c "${SEND_PIN[@]}" python3 - "$FRAMES" <<'PY'
import socket, sys
n = int(sys.argv[1])
socks=[socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(16)]
for s in socks: s.connect(("10.72.0.100", 9000))
msg=b"x"*64
for i in range(n):
    socks[i % 16].send(msg)
PY
sleep 1
read -r u1 s1 < <(sed 's/^.*) //' /proc/$QPID/stat | awk '{print $12, $13}')
n1=$(cpu_ns)
p1=$(ip netns exec ${P}q cat /sys/class/net/eth0/statistics/rx_packets)
t1=$(ip netns exec ${P}q cat /sys/class/net/eth0/statistics/tx_packets)
frames=$((p1-p0))
echo "frames in: $frames, out: $((t1-t0)); quill user ticks $((u1-u0)) system ticks $((s1-s0)) (CLK_TCK $(getconf CLK_TCK)); $(( (n1-n0) / 1000000 )) ms on CPU"
mode=rendezvous; [ -z "$MAGLEV" ] || mode=maglev
out=$((t1-t0))
echo "RESULT servers=$N mode=$mode frames=$frames forwarded=$out ns_per_frame=$(( (n1-n0) / (frames > 0 ? frames : 1) )) ns_per_forwarded=$(( (n1-n0) / (out > 0 ? out : 1) ))"
