#!/usr/bin/env bash
# The seeds' own test shape on this machine: 80,000 idle + 2,000 active connections, zero failed
# requests, through several Quill processes sharing one port (--reuseport: one process may hold
# about 9,900 sessions here, since a process may open 20,000 files), backends on several ports and
# clients on several source addresses so that no address pair runs out of ports; then the same run
# through as many HAProxy processes (SO_REUSEPORT, maxconn 9,900 each) for comparison. `quill bench`
# prints the seed's table with --watch on every balancer process.
#
#   bash bench/seed-test.sh [--idle N] [--active M] [--requests R] [--procs K]
#
# Defaults: --idle 80000 --active 2000 --requests M (one request per active client, the seeds'
# shape) --procs 10. A larger --requests keeps the active clients busy longer, for steadier rates
# and CPU figures. Env: QUILL_BIN=path, KEEP_WORK=1. Ports: nginx 9041-9046, balancers 9240.
# Writes bench/results/seed-test.md (seed-test-R.md when --requests is not M).
set -euo pipefail

IDLE=80000
ACTIVE=2000
PROCS=10
REQUESTS=
while [ $# -gt 0 ]; do
    case "$1" in
        --idle) IDLE="${2:?}"; shift 2 ;;
        --active) ACTIVE="${2:?}"; shift 2 ;;
        --procs) PROCS="${2:?}"; shift 2 ;;
        --requests) REQUESTS="${2:?}"; shift 2 ;;
        -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "seed-test.sh: unknown argument: $1" >&2; exit 2 ;;
    esac
done
BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
REQUESTS="${REQUESTS:-$ACTIVE}"
OUT=seed-test.md
[ "$REQUESTS" = "$ACTIVE" ] || OUT="seed-test-$REQUESTS.md"
COMMAND="bash bench/seed-test.sh --idle $IDLE --active $ACTIVE --requests $REQUESTS --procs $PROCS"
PORT=9240
BACKENDS="9041 9042 9043 9044 9045 9046"
say() { echo "[seed-test.sh] $*" >&2; }
. "$BENCH_DIR/lib.sh"

need=
for tool in haproxy nginx; do command -v "$tool" >/dev/null 2>&1 || need=1; done
if [ -n "$need" ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends haproxy nginx >/dev/null
fi
quill_binary || { say "cannot build or run quill (${QUILL:-no binary})"; exit 1; }
ulimit -n "$(ulimit -Hn)"
WORK="$(mktemp -d /tmp/quill-seed.XXXXXX)"
chmod 755 "$WORK"   # nginx workers (www-data) read the page
PIDS=()
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    sleep 1
    for pid in "${PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
    if [ -n "${KEEP_WORK:-}" ]; then say "work dir kept: $WORK"; else rm -rf "$WORK"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
cp "$QUILL" "$WORK/quill"; QUILL="$WORK/quill"
for p in $PORT $BACKENDS; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "seed-test.sh: port $p in use" >&2; exit 1; fi
done

# Backends: one nginx, enough workers for every proxied connection (19,900 each).
WORKERS=$(( (IDLE + ACTIVE) / 12000 + 1 ))   # with room: accepts are not spread evenly
mkdir -p "$WORK/www"
mkdir -p "$WORK/www"; chmod 755 "$WORK/www"
head -c 177 /dev/zero | tr '\0' 'x' > "$WORK/www/page"   # the seed's body: 354000 bytes / 2000
LISTENS=""; for p in $BACKENDS; do LISTENS="$LISTENS listen 127.0.0.1:$p backlog=4096 reuseport;"; done
cat > "$WORK/nginx.conf" <<CONF
daemon off;
worker_processes $WORKERS;
worker_rlimit_nofile 20000;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err warn;
events { worker_connections 19900; }
http {
    access_log off;
    keepalive_timeout 600s;
    client_header_timeout 600s;
    server { $LISTENS root $WORK/www; location / { } }
}
CONF
nginx -p "$WORK/" -c "$WORK/nginx.conf" -e "$WORK/nginx.err" &
PIDS+=($!)
SERVERS=""; for p in $BACKENDS; do SERVERS="$SERVERS 127.0.0.1:$p"; done
wait_port() { for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
wait_port 9041 || { say "nginx did not start"; exit 1; }

# Sources: enough addresses that each carries at most ~5,000 client connections.
NSRC=$(( (IDLE + ACTIVE) / 5000 + 1 ))
SOURCES="127.0.0.1-127.0.0.$NSRC"

run_bench() {  # name, pids...
    local name="$1"; shift
    local watch=(); for pid in "$@"; do watch+=(--watch "$pid"); done
    say "$name: quill bench --idle $IDLE --active $ACTIVE --requests $REQUESTS --sources $SOURCES ${watch[*]}"
    "$QUILL" bench --idle "$IDLE" --active "$ACTIVE" --requests "$REQUESTS" --sources "$SOURCES" \
        --timeout 60s "${watch[@]}" "http://127.0.0.1:$PORT/page" > "$WORK/$name.txt" 2> "$WORK/$name.err" || true
    cat "$WORK/$name.txt"
}

# Quill: PROCS processes sharing the port.
QPIDS=()
for i in $(seq 1 "$PROCS"); do
    "$QUILL" --reuseport -r -x 9900 --workers 1 -q 4096 "127.0.0.1:$PORT" $SERVERS 2> "$WORK/quill$i.log" &
    QPIDS+=($!); PIDS+=($!)
done
wait_port $PORT || { say "quill did not start"; exit 1; }
sleep 1
STARTED="$(date -u '+%Y-%m-%d %H:%M UTC')"
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
run_bench quill "${QPIDS[@]}"
for pid in "${QPIDS[@]}"; do kill -TERM "$pid"; kill -TERM "$pid" 2>/dev/null || true; done
sleep 2

# HAProxy: as many processes, each bound with SO_REUSEPORT (its default on Linux), maxconn 9,900.
HPIDS=()
BES=""; n=0; for p in $BACKENDS; do n=$((n+1)); BES="$BES
    server s$n 127.0.0.1:$p"; done
cat > "$WORK/haproxy.cfg" <<CONF
global
    nbthread 1
    maxconn 9900
defaults
    mode tcp
    maxconn 9900
    timeout connect 5s
    timeout client 600s
    timeout server 600s
frontend fe
    bind 127.0.0.1:$PORT backlog 4096
    default_backend be
backend be
    balance roundrobin$BES
CONF
for i in $(seq 1 "$PROCS"); do
    haproxy -db -f "$WORK/haproxy.cfg" 2> "$WORK/haproxy$i.log" &
    HPIDS+=($!); PIDS+=($!)
done
wait_port $PORT || { say "haproxy did not start"; exit 1; }
sleep 1
run_bench haproxy "${HPIDS[@]}"

{
    echo "# The seeds' test shape: $IDLE idle + $ACTIVE active connections, $REQUESTS requests"
    echo
    echo "Command: \`$COMMAND\`  "
    echo "Started $STARTED; $(nproc) CPUs; load average before $LOAD_BEFORE, after $(cut -d' ' -f1-3 /proc/loadavg).  "
    echo "Versions: quill $("$QUILL" --version | cut -d' ' -f2); $(dpkg-query -W -f '${Package} ${Version}' haproxy); $(dpkg-query -W -f '${Package} ${Version}' nginx)."
    echo
    echo "$PROCS balancer processes share 127.0.0.1:$PORT (Quill \`--reuseport -r -x 9900 --workers 1\`;"
    echo "HAProxy \`nbthread 1\`, \`maxconn 9900\`, SO_REUSEPORT), in front of one nginx ($WORKERS workers)"
    echo "listening on $(echo $BACKENDS | tr ' ' ','), serving a 177-byte page (the seed's body size)."
    echo "Clients from $SOURCES (\`--sources\`); \`quill bench\` spreads its connections over child"
    echo "processes; \`--watch\` on every balancer process."
    echo
    echo "## Quill"
    echo; echo '```'; cat "$WORK/quill.txt"; echo '```'
    echo; echo "## HAProxy"
    echo; echo '```'; cat "$WORK/haproxy.txt"; echo '```'
} > "$BENCH_DIR/results/$OUT"
say "written: bench/results/$OUT"
