#!/usr/bin/env bash
# bench/dsr_frames.sh: Quill's CPU per forwarded frame in DSR when forwarding a frame triggers no
# further work on the servers (UDP datagrams to a socket that discards them), beside bench/dsr.sh
# where each forwarded frame is a client's ACK that makes the server send more data. Namespaces
# as in bench/dsr.sh (10.72.0.0/24 only); 200,000 64-byte datagrams from 16 client sockets
# (python3), Quill's utime/stime from /proc around them, frames from Quill's eth0 counter.
# Stops what it started by PID and deletes its namespaces on exit.
#   bash bench/dsr_frames.sh        (QUILL_BIN, else the release build)

set -euo pipefail
QUILL="${QUILL_BIN:-$(cd "$(dirname "$0")/.." && pwd)/target/release/quill}"
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
ip netns exec ${P}q "$QUILL" -O "dsr_if eth0" 10.72.0.100:9000 10.72.0.11:9000 10.72.0.12:9000 2>/dev/null & QPID=$!; PIDS+=($QPID)
sleep 2
read -r u0 s0 < <(sed 's/^.*) //' /proc/$QPID/stat | awk '{print $12, $13}')
p0=$(ip netns exec ${P}q cat /sys/class/net/eth0/statistics/rx_packets)
ip netns exec ${P}c python3 - <<'PY'
import socket
socks=[socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(16)]
for s in socks: s.connect(("10.72.0.100", 9000))
msg=b"x"*64
for i in range(200000):
    socks[i % 16].send(msg)
PY
sleep 1
read -r u1 s1 < <(sed 's/^.*) //' /proc/$QPID/stat | awk '{print $12, $13}')
p1=$(ip netns exec ${P}q cat /sys/class/net/eth0/statistics/rx_packets)
echo "frames in: $((p1-p0)); quill user ticks $((u1-u0)) system ticks $((s1-s0)) (CLK_TCK $(getconf CLK_TCK))"
