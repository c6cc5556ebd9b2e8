#!/usr/bin/env bash
# The socket-activation bridge: what a proxy started with sockets from systemd adds to a small
# request. nginx serves a 1 KiB file on 127.0.0.1; ab fetches it directly, through
# systemd-socket-proxyd and through Quill in socket-proxyd's form (`quill 127.0.0.1:PORT`), both
# started by systemd-socket-activate as systemd would start them (sockets passed, SIGPIPE ignored).
#
#   bash bench/bridge.sh [--rounds N]        (default 5 rounds: ab -n 1000 -c 10, ab -n 10000 -c 10)
#
# Env: QUILL_BIN=path  use this binary instead of building (cargo build --release)
#      RESULTS_DIR=dir write bridge.md there instead of bench/results
#      KEEP_WORK=1     keep the temp work dir (configs, logs, raw ab output)
# Rounds interleave the candidates (the order rotates each round); every number reported is the
# median over rounds; "added" is the median of the per-round differences to `direct`.
# Ports: nginx 9011, systemd-socket-proxyd 9211, quill 9212 (all on 127.0.0.1).
set -euo pipefail

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

ROUNDS=5
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --rounds=*) ROUNDS="${1#*=}"; shift ;;
        -h|--help) usage 0 ;;
        *) echo "bridge.sh: unknown argument: $1" >&2; usage 2 ;;
    esac
done
case "$ROUNDS" in ''|*[!0-9]*|0) echo "bridge.sh: --rounds must be a positive number" >&2; exit 2 ;; esac

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
RESULTS="${RESULTS_DIR:-$BENCH_DIR/results}"
COMMAND="bash bench/bridge.sh --rounds $ROUNDS"
NGINX_PORT=9011
PROXYD_PORT=9211
QUILL_PORT=9212
PROXYD=/lib/systemd/systemd-socket-proxyd
WORKLOADS="1000 10000"   # ab -n, each with -c 10

say() { echo "[bridge.sh] $*" >&2; }
. "$BENCH_DIR/lib.sh"
# Load from other work on the machine, before anything of ours (build included) runs.
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"

# ---- tools
need=
for tool in nginx ab systemd-socket-activate python3; do
    command -v "$tool" >/dev/null 2>&1 || need=1
done
[ -x "$PROXYD" ] || need=1
if [ -n "$need" ]; then
    say "installing nginx apache2-utils systemd python3"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nginx apache2-utils systemd python3 >/dev/null
fi

# ---- quill
quill_binary || { say "cannot build or run quill (${QUILL:-no binary})"; exit 1; }

for port in $NGINX_PORT $PROXYD_PORT $QUILL_PORT; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "bridge.sh: port $port is in use" >&2
        exit 1
    fi
done

WORK="$(mktemp -d /tmp/quill-bridge.XXXXXX)"
PIDS=()
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do
        kill -TERM "$pid" 2>/dev/null || true
    done
    sleep 0.3
    for pid in "${PIDS[@]}"; do
        kill -KILL "$pid" 2>/dev/null || true
    done
    if [ -n "${KEEP_WORK:-}" ]; then say "work dir kept: $WORK"; else rm -rf "$WORK"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
# A private copy: a rebuild during the run cannot switch binaries half-way.
cp "$QUILL" "$WORK/quill" && QUILL="$WORK/quill"

wait_port() {
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "bridge.sh: nothing listens on $1" >&2
    return 1
}

# ---- nginx, one worker, serving www/1k
mkdir -p "$WORK/www"
head -c 1024 /dev/zero | tr '\0' x > "$WORK/www/1k"
chmod 755 "$WORK" "$WORK/www"; chmod 644 "$WORK/www/1k"
cat > "$WORK/nginx.conf" <<EOF
daemon off;
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err warn;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    default_type application/octet-stream;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        root $WORK/www;
        location / { }
    }
}
EOF
nginx -p "$WORK/" -c "$WORK/nginx.conf" -e "$WORK/nginx.err" &
PIDS+=($!)
wait_port $NGINX_PORT

# ---- the bridges, started the way systemd starts a socket-activated service
trap '' PIPE   # systemd's IgnoreSIGPIPE=yes: inherited through exec
systemd-socket-activate -l "127.0.0.1:$PROXYD_PORT" "$PROXYD" "127.0.0.1:$NGINX_PORT" \
    >"$WORK/proxyd.log" 2>&1 &
PIDS+=($!)
systemd-socket-activate -l "127.0.0.1:$QUILL_PORT" "$QUILL" "127.0.0.1:$NGINX_PORT" \
    >"$WORK/quill.log" 2>&1 &
PIDS+=($!)
trap - PIPE
wait_port $PROXYD_PORT
wait_port $QUILL_PORT
for port in $NGINX_PORT $PROXYD_PORT $QUILL_PORT; do
    ab -q -n 200 -c 10 "http://127.0.0.1:$port/1k" >/dev/null
done

STARTED="$(date -u '+%Y-%m-%d %H:%M UTC')"
T0=$(date +%s)
RAW="$WORK/raw.tsv"
: > "$RAW"
CANDS=(direct socket-proxyd quill)
port_of() { case "$1" in direct) echo $NGINX_PORT ;; socket-proxyd) echo $PROXYD_PORT ;; quill) echo $QUILL_PORT ;; esac; }
for round in $(seq 1 "$ROUNDS"); do
    for n in $WORKLOADS; do
        for k in 0 1 2; do
            cand="${CANDS[$(( (k + round) % 3 ))]}"
            out="$WORK/ab-$round-$n-$cand.txt"
            ab -n "$n" -c 10 "http://127.0.0.1:$(port_of "$cand")/1k" > "$out" 2>&1 || true
            rps="$(awk '/^Requests per second:/ {print $4}' "$out")"
            tpr="$(awk '/^Time per request:/ && /\(mean\)$/ {print $4}' "$out")"
            failed="$(awk '/^Failed requests:/ {print $3}' "$out")"
            printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$n" "$cand" "${tpr:-nan}" "${rps:-nan}" "${failed:-nan}" >> "$RAW"
            say "round $round ab -n $n: $cand ${tpr:-?} ms/req, ${rps:-?} req/s, failed ${failed:-?}"
        done
    done
done
ELAPSED=$(( $(date +%s) - T0 ))
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"
for pid in "${PIDS[@]:1}"; do
    kill -0 "$pid" 2>/dev/null || say "WARNING: a bridge (pid $pid) exited during the run"
done

mkdir -p "$RESULTS"
VERSIONS="$(dpkg-query -W -f='${Package} ${Version}; ' nginx apache2-utils systemd 2>/dev/null || true)"
python3 - "$RAW" "$RESULTS/bridge.md" <<EOF
import statistics, sys
raw, dest = sys.argv[1], sys.argv[2]
rows = [l.rstrip("\n").split("\t") for l in open(raw) if l.strip()]
data = {}
for rnd, n, cand, tpr, rps, failed in rows:
    data[(int(rnd), int(n), cand)] = (float(tpr), float(rps), failed)
rounds = sorted({k[0] for k in data})
works = sorted({k[1] for k in data})
cands = ["direct", "socket-proxyd", "quill"]
med = lambda xs: statistics.median(xs) if xs else float("nan")
out = []
out.append("# Socket-activation bridge: direct vs systemd-socket-proxyd vs Quill")
out.append("")
out.append("Command: \`$COMMAND\`  ")
out.append("Started $STARTED; $(nproc) CPUs; %d rounds in ${ELAPSED} s; load average before %s, after %s.  " % (len(rounds), "$LOAD_BEFORE", "$LOAD_AFTER"))
out.append("Versions: ${VERSIONS}quill $("$QUILL" --version 2>&1 | head -1 | cut -d' ' -f2).")
if float("$LOAD_BEFORE".split()[0]) >= 0.7:
    out.append("")
    out.append("**Ran with background load** (other builds and tests on this 2-CPU machine, see the load "
               "averages): absolute figures are noisy; compare within this run only, and rerun on an idle "
               "machine for the record.")
out.append("")
out.append("nginx (1 worker) serves a 1 KiB file on 127.0.0.1:$NGINX_PORT. Each bridge is started by "
           "\`systemd-socket-activate -l 127.0.0.1:PORT\` with SIGPIPE ignored: "
           "\`$PROXYD 127.0.0.1:$NGINX_PORT\` and \`quill 127.0.0.1:$NGINX_PORT\` "
           "(socket-proxyd's form: defaults, 2 workers). Client: \`ab -n N -c 10 URL\` "
           "(HTTP/1.0, a new connection per request). ms/req = ab's \"Time per request (mean)\"; "
           "added = median over rounds of (bridge − direct in the same round). Medians over rounds; "
           "candidates interleaved, order rotating each round.")
out.append("")
head = "| path |"
sep = "|---|"
for n in works:
    head += " ab -n%d ms/req | added ms | req/s |" % n
    sep += "---:|---:|---:|"
out.append(head)
out.append(sep)
for c in cands:
    line = "| %s |" % c
    for n in works:
        t = [data[(r, n, c)][0] for r in rounds if (r, n, c) in data]
        q = [data[(r, n, c)][1] for r in rounds if (r, n, c) in data]
        d = [data[(r, n, c)][0] - data[(r, n, "direct")][0] for r in rounds
             if (r, n, c) in data and (r, n, "direct") in data]
        added = "–" if c == "direct" else "%+.3f" % med(d)
        line += " %.3f | %s | %s |" % (med(t), added, format(round(med(q)), ","))
    out.append(line)
out.append("")
fails = [(r, n, c, f) for (r, n, c), (_, _, f) in sorted(data.items()) if f not in ("0",)]
out.append("Failed requests: " + ("none." if not fails else ", ".join("round %d -n%d %s: %s" % x for x in fails)))
out.append("")
out.append("Seed reference (docs/benchmarks.md#the-socket-proxyd-bridge): the seeds' socket-activation bridge added 0.57 ms to a 1.35 ms "
           "request (\`ab -n1000 -c10\`, nginx), on another host.")
out.append("")
out.append("## Every round")
out.append("")
out.append("| round | ab -n | path | ms/req | req/s | failed |")
out.append("|---:|---:|---|---:|---:|---:|")
for (r, n, c), (t, q, f) in sorted(data.items()):
    out.append("| %d | %d | %s | %.3f | %s | %s |" % (r, n, c, t, format(round(q), ","), f))
open(dest, "w").write("\n".join(out) + "\n")
print("\n".join(out[:20]))
EOF
say "written: $RESULTS/bridge.md"
