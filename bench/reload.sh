#!/usr/bin/env bash
# Reloads and binary upgrades under load: what a client sees while the balancer is reconfigured
# and replaced. Quill (SIGHUP reloads and `--takeover` upgrades, alternating) against HAProxy's
# seamless reload (master-worker, listeners passed to the new worker), in the same run, in front of
# the same nginx backends. The load opens a new connection per request (wrk, Connection: close).
#
#   bash bench/reload.sh [--rounds N] [--duration S] [--interval S] [--wait-idle S]
#
# --rounds N     interleaved rounds (default 3); each round runs quill and haproxy, each without
#                events (baseline) and with events; the order rotates each round
# --duration S   seconds of load per run (default 13; 3 rounds take about 3 minutes)
# --interval S   seconds between events during an events run (default 1)
# --wait-idle S  before measuring, wait up to S seconds for the 1-min load average to drop
#                under 1.0 (default 0: do not wait)
# Env: QUILL_BIN=path  use this binary instead of building (cargo build --release)
#      RESULTS_DIR=dir write reload.md there instead of bench/results
#      KEEP_WORK=1     keep the temp work dir (configs, logs, raw wrk output, event logs)
# Ports (127.0.0.1): nginx backends 9021 and 9022, quill 9231, haproxy 9232.
set -euo pipefail

usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }

ROUNDS=3
DURATION=13
INTERVAL=1
WAIT_IDLE=0
while [ $# -gt 0 ]; do
    case "$1" in
        --rounds) ROUNDS="${2:?--rounds needs a number}"; shift 2 ;;
        --rounds=*) ROUNDS="${1#*=}"; shift ;;
        --duration) DURATION="${2:?--duration needs seconds}"; shift 2 ;;
        --duration=*) DURATION="${1#*=}"; shift ;;
        --interval) INTERVAL="${2:?--interval needs seconds}"; shift 2 ;;
        --interval=*) INTERVAL="${1#*=}"; shift ;;
        --wait-idle) WAIT_IDLE="${2:?--wait-idle needs seconds}"; shift 2 ;;
        --wait-idle=*) WAIT_IDLE="${1#*=}"; shift ;;
        -h|--help) usage 0 ;;
        *) echo "reload.sh: unknown argument: $1" >&2; usage 2 ;;
    esac
done
for v in "$ROUNDS" "$DURATION" "$INTERVAL"; do
    case "$v" in ''|*[!0-9]*|0) echo "reload.sh: --rounds, --duration and --interval must be positive whole numbers" >&2; exit 2 ;; esac
done
case "$WAIT_IDLE" in ''|*[!0-9]*) echo "reload.sh: --wait-idle must be a number of seconds" >&2; exit 2 ;; esac
[ "$DURATION" -gt "$INTERVAL" ] || { echo "reload.sh: --duration must be longer than --interval" >&2; exit 2; }

BENCH_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(dirname "$BENCH_DIR")"
RESULTS="${RESULTS_DIR:-$BENCH_DIR/results}"
COMMAND="bash bench/reload.sh --rounds $ROUNDS --duration $DURATION --interval $INTERVAL"
[ "$WAIT_IDLE" -gt 0 ] && COMMAND="$COMMAND --wait-idle $WAIT_IDLE"
BE1=9021
BE2=9022
QUILL_PORT=9231
HAPROXY_PORT=9232
CONC=50

say() { echo "[reload.sh] $*" >&2; }
. "$BENCH_DIR/lib.sh"
LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"

# ---- tools
need=
for tool in nginx haproxy wrk ab python3; do
    command -v "$tool" >/dev/null 2>&1 || need=1
done
if [ -n "$need" ]; then
    say "installing nginx haproxy wrk apache2-utils python3"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends nginx haproxy wrk apache2-utils python3 >/dev/null
fi

# ---- quill
quill_binary || { say "cannot build or run quill (${QUILL:-no binary})"; exit 1; }

for port in $BE1 $BE2 $QUILL_PORT $HAPROXY_PORT; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "reload.sh: port $port is in use" >&2
        exit 1
    fi
done

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
WORK="$(mktemp -d /tmp/quill-reload.XXXXXX)"
# Every process started here, as "PID START_TIME NAME": the start time (field 22 of
# /proc/PID/stat) guards the cleanup against a PID the kernel has reused since.
PIDFILE="$WORK/pids"
: > "$PIDFILE"
start_time() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; }
track() {   # track PID NAME
    local st
    st="$(start_time "$1")" || true
    [ -n "$st" ] && echo "$1 $st $2" >> "$PIDFILE"
    return 0
}
# Alive = exists and is not a zombie (an exited child is a zombie until it is waited for).
alive() {
    local state
    state="$(sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1)" || return 1
    [ -n "$state" ] && [ "$state" != Z ]
}
ours_alive() {   # the tracked PIDs that still run the process we started
    local pid st name
    while read -r pid st name; do
        alive "$pid" && [ "$(start_time "$pid")" = "$st" ] && echo "$pid $name"
    done < "$PIDFILE"
    return 0
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    local left
    left="$(ours_alive)"
    if [ -n "$left" ]; then
        while read -r pid name; do kill -TERM "$pid" 2>/dev/null || true; done <<< "$left"
        for _ in $(seq 1 30); do [ -z "$(ours_alive)" ] && break; sleep 0.1; done
        ours_alive | while read -r pid name; do
            say "killing $name (pid $pid)"
            kill -KILL "$pid" 2>/dev/null || true
        done
    fi
    if [ -n "${KEEP_WORK:-}" ]; then say "work dir kept: $WORK"; else rm -rf "$WORK"; fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
# A private copy: a rebuild during the run cannot switch binaries half-way.
cp "$QUILL" "$WORK/quill" && QUILL="$WORK/quill"
QUILL_VERSION="$("$QUILL" --version 2>&1 | head -1)"

wait_port() {
    for _ in $(seq 1 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "reload.sh: nothing listens on $1" >&2
    return 1
}
now_us() { local t="$EPOCHREALTIME"; echo $(( ${t%.*} * 1000000 + 10#${t#*.} )); }
sleep_until() {   # sleep_until T_US
    local d=$(( $1 - $(now_us) ))
    [ "$d" -gt 0 ] && sleep "$(printf '%d.%06d' $((d / 1000000)) $((d % 1000000)))"
    return 0
}
count() { grep -c -- "$1" "$2" 2>/dev/null || true; }

# ---- backends: one nginx, 2 workers, the same 1 KiB file on two ports
mkdir -p "$WORK/www"
head -c 1024 /dev/zero | tr '\0' x > "$WORK/www/1k"
chmod 755 "$WORK" "$WORK/www"; chmod 644 "$WORK/www/1k"
cat > "$WORK/nginx.conf" <<EOF
daemon off;
worker_processes 2;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err warn;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    default_type application/octet-stream;
    server { listen 127.0.0.1:$BE1; root $WORK/www; location / { } }
    server { listen 127.0.0.1:$BE2; root $WORK/www; location / { } }
}
EOF
nginx -p "$WORK/" -c "$WORK/nginx.conf" -e "$WORK/nginx.err" &
track $! nginx
wait_port $BE1
wait_port $BE2

# ---- quill: two configurations that differ for real (selection mode and a server's weight);
# each reload switches to the other one.
QCONF="$WORK/quill.toml"
QSOCK="$WORK/quill.sock"
QSTATE=0
write_quill_conf() {   # write_quill_conf 0|1 (written to a temp file, then renamed)
    local mode=roundrobin weight=1
    [ "$1" = 1 ] && { mode=leastconn; weight=2; }
    cat > "$QCONF.tmp" <<EOF
[[listener]]
name = "web"
listen = "127.0.0.1:$QUILL_PORT"
mode = ["$mode"]
servers = [
  { address = "127.0.0.1:$BE1", weight = 1 },
  { address = "127.0.0.1:$BE2", weight = $weight },
]
EOF
    mv "$QCONF.tmp" "$QCONF"
}
write_quill_conf 0
QN=0          # quill processes started so far; quill-$QN.log is the log of the last one
QCUR=         # the PID that serves now ("current")
QOLD=()       # earlier PIDs, handed over and draining (or gone)
QEXITS=""     # exit statuses of the old processes, collected as they are reaped
start_quill() {   # start_quill [--takeover SOCK]; sets QNEW and QNEWLOG
    QN=$((QN + 1))
    QNEWLOG="$WORK/quill-$QN.log"
    "$QUILL" --config "$QCONF" -C "$QSOCK" --workers 2 "$@" > "$QNEWLOG" 2>&1 &
    QNEW=$!
    track "$QNEW" quill
}
start_quill
QCUR=$QNEW
wait_port $QUILL_PORT

# ---- haproxy: master-worker, listeners passed to each new worker on reload
HCONF="$WORK/haproxy.cfg"
HSTATE=0
write_haproxy_conf() {   # write_haproxy_conf 0|1: roundrobin, or leastconn
    local balance=roundrobin
    [ "$1" = 1 ] && balance=leastconn
    cat > "$HCONF.tmp" <<EOF
global
    nbthread 2
    maxconn 4000
    hard-stop-after 3s
    stats socket $WORK/haproxy-stats.sock mode 600 level admin expose-fd listeners
defaults
    mode tcp
    maxconn 4000
    timeout connect 5s
    timeout client 30s
    timeout server 30s
frontend fe
    bind 127.0.0.1:$HAPROXY_PORT
    default_backend be
backend be
    balance $balance
    server s1 127.0.0.1:$BE1
    server s2 127.0.0.1:$BE2
EOF
    mv "$HCONF.tmp" "$HCONF"
}
write_haproxy_conf 0
HLOG="$WORK/haproxy.log"
haproxy -W -S "$WORK/haproxy-master.sock" -f "$HCONF" > "$HLOG" 2>&1 &
HMASTER=$!
track "$HMASTER" haproxy-master
wait_port $HAPROXY_PORT
track_haproxy_workers() {   # the master's children, so that the cleanup can reach them too
    local w
    for w in $(ps -o pid= --ppid "$HMASTER" 2>/dev/null); do
        grep -q "^$w " "$PIDFILE" || track "$w" haproxy-worker
    done
}
haproxy_workers() { ps -o pid= --ppid "$HMASTER" 2>/dev/null | wc -l; }
track_haproxy_workers

# Warm-up, and a first check that both answer.
for port in $QUILL_PORT $HAPROXY_PORT; do
    ab -q -n 2000 -c 10 "http://127.0.0.1:$port/1k" > "$WORK/warmup-$port.txt" 2>&1 \
        || { cat "$WORK/warmup-$port.txt" >&2; echo "reload.sh: no answer on port $port" >&2; exit 1; }
done

# ---- events
# Each event is one line in $EVLOG: ROUND CAND TIME_S KIND OK MS DETAIL
EVLOG="$WORK/events.tsv"
: > "$EVLOG"
ev() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$EVLOG"; }

quill_reload() {   # quill_reload ROUND T
    local before t0 ok=0 log="$WORK/quill-$QN.log"
    QSTATE=$((1 - QSTATE))
    write_quill_conf "$QSTATE"
    before="$(count 'SIGHUP: reload' "$log")"
    t0=$(now_us)
    kill -HUP "$QCUR"
    for _ in $(seq 1 200); do
        [ "$(count 'SIGHUP: reload' "$log")" -gt "$before" ] && break
        sleep 0.01
    done
    local ms=$(( ($(now_us) - t0) / 1000 )) want=roundrobin line
    [ "$QSTATE" = 1 ] && want=leastconn
    line="$(grep -- 'SIGHUP: reload' "$log" | tail -n 1 | sed 's/^.*SIGHUP: //')"
    # Done = a new "reloaded" line that names the new mode and the changed server.
    [ "$(count 'SIGHUP: reload' "$log")" -gt "$before" ] && case "$line" in
        reloaded:*"127.0.0.1:$BE2 changed"*"mode $want"*) ok=1 ;;
    esac
    ev "$1" quill "$2" reload "$ok" "$ms" "pid $QCUR: $line"
}
quill_takeover() {   # quill_takeover ROUND T
    local t0 ok=0 old=$QCUR
    t0=$(now_us)
    start_quill --takeover "$QSOCK"
    for _ in $(seq 1 500); do
        grep -q 'took over from the previous process' "$QNEWLOG" && { ok=1; break; }
        alive "$QNEW" || break
        sleep 0.01
    done
    if [ "$ok" = 1 ]; then
        QOLD+=("$old")
        QCUR=$QNEW
        ev "$1" quill "$2" takeover 1 $(( ($(now_us) - t0) / 1000 )) "pid $old -> $QNEW"
    else
        ev "$1" quill "$2" takeover 0 $(( ($(now_us) - t0) / 1000 )) \
            "pid $old -> $QNEW failed: $(tail -n 2 "$QNEWLOG" | tr '\t\n' '  ')"
        alive "$QNEW" && kill -TERM "$QNEW" 2>/dev/null || true
        QOLD+=("$QNEW")   # reaped with the others; its exit status is reported
    fi
}
haproxy_reload() {   # haproxy_reload ROUND T
    local before t0 ok=0
    HSTATE=$((1 - HSTATE))
    write_haproxy_conf "$HSTATE"
    before="$(count 'Loading ' "$HLOG")"
    t0=$(now_us)
    kill -USR2 "$HMASTER"
    for _ in $(seq 1 300); do
        [ "$(count 'Loading ' "$HLOG")" -gt "$before" ] && break
        sleep 0.01
    done
    [ "$(count 'Loading success' "$HLOG")" -gt "$before" ] && ok=1
    track_haproxy_workers
    ev "$1" haproxy "$2" reload "$ok" $(( ($(now_us) - t0) / 1000 )) "workers $(haproxy_workers)"
}

# Reap the old quill processes that have exited; QLEFT = how many still run.
# (Not in a subshell: `wait` only works on the shell's own children, and QOLD must change.)
QLEFT=0
reap_quill() {
    local keep=() pid rc
    for pid in "${QOLD[@]}"; do
        if alive "$pid"; then
            keep+=("$pid")
        else
            rc=0
            wait "$pid" 2>/dev/null || rc=$?
            QEXITS="$QEXITS $rc"
        fi
    done
    QOLD=("${keep[@]}")
    QLEFT=${#QOLD[@]}
}

# One run: wrk for $DURATION s; with events, one every $INTERVAL s from t = $INTERVAL to the
# last whole interval before the end.
RAW="$WORK/raw.tsv"
: > "$RAW"
run() {   # run ROUND CAND KIND
    local round=$1 cand=$2 kind=$3 port out t0 k=0 next wrk_pid
    local check="" extra=""
    port=$QUILL_PORT; [ "$cand" = haproxy ] && port=$HAPROXY_PORT
    out="$WORK/wrk-$round-$cand-$kind.txt"
    wrk -t1 -c$CONC -d${DURATION}s --latency -H "Connection: close" \
        "http://127.0.0.1:$port/1k" > "$out" 2>&1 &
    wrk_pid=$!
    track "$wrk_pid" wrk
    t0=$(now_us)
    if [ "$kind" = events ]; then
        while :; do
            k=$((k + 1))
            next=$(( t0 + k * INTERVAL * 1000000 ))
            [ $(( next - t0 )) -lt $(( DURATION * 1000000 )) ] || break
            sleep_until "$next"
            local t
            t="$(printf '%.2f' "$(( $(now_us) - t0 ))e-6")"
            if [ "$cand" = quill ]; then
                if [ $((k % 2)) = 1 ]; then quill_reload "$round" "$t"; else quill_takeover "$round" "$t"; fi
            else
                haproxy_reload "$round" "$t"
            fi
        done
    fi
    wait "$wrk_pid" || true
    # After the run: settle, then check what is left and that it serves.
    if [ "$cand" = quill ]; then
        for _ in $(seq 1 100); do
            reap_quill
            [ "$QLEFT" = 0 ] && break
            sleep 0.1
        done
        # Every live process running our private copy of the binary, found by /proc/PID/exe.
        local procs=0 p
        for p in /proc/[0-9]*; do
            [ "$(readlink "$p/exe" 2>/dev/null)" = "$QUILL" ] && alive "${p#/proc/}" && procs=$((procs + 1))
        done
        local ctlpid
        ctlpid="$("$QUILL" ctl --socket "$QSOCK" pid 2>/dev/null || echo '?')"
        local want=roundrobin wantw=1 weight
        [ "$QSTATE" = 1 ] && { want=leastconn; wantw=2; }
        weight="$("$QUILL" ctl --socket "$QSOCK" servers 2>/dev/null \
            | awk -v p=$BE2 '$5 == p { for (i = 1; i < NF; i++) if ($i == "weight") print $(i + 1) }')"
        extra="procs=$procs ctl_pid=$ctlpid current=$QCUR draining=$QLEFT mode=$("$QUILL" ctl --socket "$QSOCK" mode 2>/dev/null || echo '?') file_mode=$want weight2=${weight:-?} file_weight2=$wantw"
    else
        sleep 0.5
        track_haproxy_workers
        extra="workers=$(haproxy_workers)"
    fi
    check="$(ab -q -n 500 -c 10 "http://127.0.0.1:$port/1k" 2>&1 \
        | awk '/^Complete requests:/ {c=$3} /^Failed requests:/ {f=$3} END {printf "%s/%s", c-f, 500}')"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$cand" "$kind" "$out" "$check" "$extra" >> "$RAW"
    say "round $round $cand $kind: $(awk '/^Requests\/sec:/ {print $2}' "$out") req/s;" \
        "$(grep -E 'Socket errors|Non-2xx' "$out" | tr '\n' ' ')" \
        "after: $extra, serving $check"
    sleep 1
}

# ---- wait for an idle machine, if asked
if [ "$WAIT_IDLE" -gt 0 ]; then
    waited=0
    while [ "$(awk '{print ($1 < 1.0)}' /proc/loadavg)" != 1 ] && [ "$waited" -lt "$WAIT_IDLE" ]; do
        [ $((waited % 30)) = 0 ] && say "load average $(cut -d' ' -f1-3 /proc/loadavg): waiting for it to drop under 1.0"
        sleep 5; waited=$((waited + 5))
    done
fi

STARTED="$(date -u '+%Y-%m-%d %H:%M UTC')"
LOAD_BEFORE="$(cut -d' ' -f1-3 /proc/loadavg)"
T0=$(date +%s)
RUNS=("quill baseline" "quill events" "haproxy baseline" "haproxy events")
for round in $(seq 1 "$ROUNDS"); do
    for i in 0 1 2 3; do
        # shellcheck disable=SC2086
        run "$round" ${RUNS[$(( (i + round - 1) % 4 ))]}
    done
done
ELAPSED=$(( $(date +%s) - T0 ))
LOAD_AFTER="$(cut -d' ' -f1-3 /proc/loadavg)"

# The last quill process stops cleanly, and every earlier one has exited 0.
kill -TERM "$QCUR" 2>/dev/null || true
for _ in $(seq 1 50); do alive "$QCUR" || break; sleep 0.1; done
QOLD+=("$QCUR")
reap_quill
QSTARTED=$QN
for f in "$WORK"/quill-*.log; do
    grep -h 'stopped: sessions accepted' "$f" || true
done | sed 's/^.*stopped: //' > "$WORK/quill-stopped.txt"

mkdir -p "$RESULTS"
VERSIONS="$(dpkg-query -W -f='${Package} ${Version}; ' nginx haproxy wrk apache2-utils 2>/dev/null || true)"
python3 - "$WORK" "$RESULTS/reload.md" <<EOF
import re, statistics, sys
work, dest = sys.argv[1], sys.argv[2]

def seconds(v):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", v)
    n, u = float(m.group(1)), m.group(2)
    return n * {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[u]

def parse_wrk(path):
    t = open(path).read()
    r = {"rps": float("nan"), "requests": 0, "connect": 0, "read": 0, "write": 0, "timeout": 0,
         "non2xx": 0, "p99": float("nan"), "max": float("nan")}
    m = re.search(r"Requests/sec:\s+([\d.]+)", t)
    if m: r["rps"] = float(m.group(1))
    m = re.search(r"(\d+) requests in", t)
    if m: r["requests"] = int(m.group(1))
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", t)
    if m: r["connect"], r["read"], r["write"], r["timeout"] = map(int, m.groups())
    m = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    if m: r["non2xx"] = int(m.group(1))
    m = re.search(r"^\s+99%\s+(\S+)", t, re.M)
    if m: r["p99"] = seconds(m.group(1)) * 1000
    m = re.search(r"^\s+Latency\s+\S+\s+\S+\s+(\S+)", t, re.M)
    if m: r["max"] = seconds(m.group(1)) * 1000
    r["errors"] = r["connect"] + r["read"] + r["write"] + r["timeout"] + r["non2xx"]
    return r

runs = {}
for line in open(work + "/raw.tsv"):
    rnd, cand, kind, path, check, extra = line.rstrip("\n").split("\t")
    r = parse_wrk(path)
    r["check"], r["extra"] = check, extra
    st = dict(kv.split("=", 1) for kv in extra.split())
    if cand == "quill":
        r["ok"] = (st.get("procs") == "1" and st.get("ctl_pid") == st.get("current")
                   and st.get("draining") == "0" and st.get("mode") == st.get("file_mode")
                   and st.get("weight2") == st.get("file_weight2"))
    else:
        r["ok"] = st.get("workers") == "1"
    r["ok"] = r["ok"] and check == "500/500"
    runs[(int(rnd), cand, kind)] = r
events = []
for line in open(work + "/events.tsv"):
    rnd, cand, t, kind, ok, ms, detail = line.rstrip("\n").split("\t")
    events.append((int(rnd), cand, float(t), kind, ok == "1", int(ms), detail))
rounds = sorted({k[0] for k in runs})
cands = ["quill", "haproxy"]
med = lambda xs: statistics.median(xs) if xs else float("nan")
fmt = lambda x: format(round(x), ",") if x == x else "–"

def errs(r):
    parts = [("connect", r["connect"]), ("read", r["read"]), ("write", r["write"]),
             ("timeout", r["timeout"]), ("non-2xx", r["non2xx"])]
    total = sum(v for _, v in parts)
    if not total:
        return "0"
    return "%d (%s)" % (total, ", ".join("%s %d" % (k, v) for k, v in parts if v))

def sum_errs(cand, kind):
    tot = {"connect": 0, "read": 0, "write": 0, "timeout": 0, "non2xx": 0}
    reqs = 0
    for rnd in rounds:
        r = runs.get((rnd, cand, kind))
        if r:
            reqs += r["requests"]
            for k in tot: tot[k] += r[k]
    tot["requests"] = reqs
    return tot

out = []
w = out.append
w("# Reloads and binary upgrades under load: Quill vs HAProxy seamless reload")
w("")
w("Command: \`$COMMAND\`  ")
w("Started $STARTED; $(nproc) CPUs ($(uname -sr)); %d rounds in ${ELAPSED} s; load average at script start "
  "$LOAD_START, before the runs $LOAD_BEFORE, after $LOAD_AFTER.  " % len(rounds))
w("Versions: ${VERSIONS}$QUILL_VERSION.")
if float("$LOAD_BEFORE".split()[0]) >= 1.0:
    w("")
    w("**Ran with background load** (1-min load average ≥ 1.0 before the runs): compare within this run only.")
w("")
w("Backends: one nginx (2 workers) serving a 1 KiB file on 127.0.0.1:$BE1 and :$BE2. "
  "**Quill**: \`quill --config CONF -C WORK/quill.sock --workers 2\` on 127.0.0.1:$QUILL_PORT, round robin "
  "over both. **HAProxy**: \`haproxy -W -S WORK/master.sock -f CONF\` (master-worker), \`mode tcp\`, "
  "\`nbthread 2\`, \`balance roundrobin\`, \`hard-stop-after 3s\`, "
  "\`stats socket … expose-fd listeners\`, on 127.0.0.1:$HAPROXY_PORT. Both stay up for the whole run.")
w("")
w("Load: \`wrk -t1 -c$CONC -d${DURATION}s --latency -H 'Connection: close' URL/1k\`: a new TCP connection for "
  "every request. errors = wrk's socket errors (connect, read, write, timeout) + non-2xx responses.")
w("")
w("Events, one every ${INTERVAL} s from t = ${INTERVAL} s to the end of the run (none in a baseline run):")
w("- **Quill**, alternating: a **reload** (the TOML file is rewritten, switching between "
  "\`mode = [\"roundrobin\"]\` with weights 1/1 and \`mode = [\"leastconn\"]\` with weights 1/2, then "
  "\`kill -HUP\`; done = the process logged \`SIGHUP: reloaded\` naming the new mode and the changed server) and an **upgrade** (a new \`quill\` with "
  "the same arguments plus \`--takeover WORK/quill.sock\`, same binary; done = the new one logged that it "
  "took over; it becomes the current process, and the old one drains and exits).")
w("- **HAProxy**: a **reload** (the file is rewritten, switching \`balance\` between roundrobin and "
  "leastconn, then SIGUSR2 to the master, which re-executes and starts a new worker that receives the "
  "listening sockets from the old one, \`-x sockpair@\`; done = the master logged \`Loading success\`).")
w("")
w("Rounds interleave the four runs (quill baseline, quill events, haproxy baseline, haproxy events), "
  "the order rotating each round. req/s and p99 are medians over rounds; ratio = median of the "
  "per-round ratios (events / baseline of the same round); errors and events are summed over rounds.")
w("")
w("| candidate | req/s baseline | req/s with events | ratio | p99 ms baseline | p99 ms with events | errors baseline | errors with events | requests with events | events done | state after every run |")
w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
for c in cands:
    b = [runs[(r, c, "baseline")]["rps"] for r in rounds if (r, c, "baseline") in runs]
    e = [runs[(r, c, "events")]["rps"] for r in rounds if (r, c, "events") in runs]
    ratio = [runs[(r, c, "events")]["rps"] / runs[(r, c, "baseline")]["rps"] for r in rounds
             if (r, c, "events") in runs and (r, c, "baseline") in runs]
    pb = [runs[(r, c, "baseline")]["p99"] for r in rounds if (r, c, "baseline") in runs]
    pe = [runs[(r, c, "events")]["p99"] for r in rounds if (r, c, "events") in runs]
    eb, ee = sum_errs(c, "baseline"), sum_errs(c, "events")
    evs = [x for x in events if x[1] == c]
    done = []
    for kind in ("reload", "takeover"):
        k = [x for x in evs if x[3] == kind]
        if k:
            done.append("%d/%d %ss" % (sum(x[4] for x in k), len(k), kind))
    name = "**quill** (2 workers)" if c == "quill" else "haproxy (nbthread 2)"
    mine = [runs[k] for k in runs if k[1] == c]
    good = sum(1 for x in mine if x["ok"])
    state = ("1 process, the control socket's, mode and weight as in the file" if c == "quill"
             else "1 worker") + ", serving: %d/%d runs" % (good, len(mine))
    w("| %s | %s | %s | %.3f | %.2f | %.2f | %s | %s | %s | %s | %s |" % (
        name, fmt(med(b)), fmt(med(e)), med(ratio), med(pb), med(pe), errs(eb), errs(ee),
        format(ee["requests"], ","), ", ".join(done), state))
w("")

per_round = []
for c in cands:
    rs = ["%.3f" % (runs[(r, c, "events")]["rps"] / runs[(r, c, "baseline")]["rps"]) for r in rounds
          if (r, c, "events") in runs and (r, c, "baseline") in runs]
    per_round.append("%s %s" % (c, ", ".join(rs)))
w("Per-round ratios (events / baseline): " + "; ".join(per_round) + ".")
w("")

# Timing of the events themselves.
w("| event | count | done | median ms | max ms | what the time covers |")
w("|---|---:|---:|---:|---:|---|")
desc = {("quill", "reload"): "SIGHUP sent → \`SIGHUP: reloaded\` in the log (polled every 10 ms)",
        ("quill", "takeover"): "new process spawned → it logged that it took over (polled every 10 ms)",
        ("haproxy", "reload"): "SIGUSR2 sent → \`Loading success\` in the master's log (polled every 10 ms)"}
for c, kind in (("quill", "reload"), ("quill", "takeover"), ("haproxy", "reload")):
    k = [x for x in events if x[1] == c and x[3] == kind]
    if not k:
        continue
    ms = [x[5] for x in k if x[4]]
    w("| %s %s | %d | %d | %s | %s | %s |" % (c, kind, len(k), sum(x[4] for x in k),
      fmt(med(ms)), fmt(max(ms) if ms else float("nan")), desc[(c, kind)]))
w("")

# Final state after each events run.
w("## State after each run")
w("")
w("Checked once the run is over: quill's old processes are reaped (waiting up to 10 s for them to "
  "exit); procs = live processes running the benchmark's copy of the quill binary (found by "
  "\`/proc/PID/exe\`), which must be exactly 1; ctl pid = the PID answering on the control socket, which "
  "must be the current one; mode and weight2 (server :$BE2) as \`quill ctl\` reports them must match the file; haproxy workers = the master's children after 0.5 s. serving = 2xx "
  "answers to \`ab -n 500 -c 10\` right after.")
w("")
w("| round | candidate | run | req/s | requests | errors | p99 ms | max ms | state after | serving |")
w("|---:|---|---|---:|---:|---|---:|---:|---|---:|")
for (r, c, kind) in sorted(runs):
    x = runs[(r, c, kind)]
    w("| %d | %s | %s | %s | %s | %s | %.2f | %.1f | %s | %s |" % (
        r, c, kind, fmt(x["rps"]), format(x["requests"], ","), errs(x), x["p99"], x["max"],
        x["extra"].replace("=", " ") + ("" if x["ok"] else " **(not as expected)**"), x["check"]))
w("")
exits = "$QEXITS".split()
bad_exits = [e for e in exits if e != "0"]
totals = {}
for l in open(work + "/quill-stopped.txt"):
    for k, v in re.findall(r"([a-z_ ]+?) (\d+)(?:,|$)", l.strip()):
        totals[k.strip()] = totals.get(k.strip(), 0) + int(v)
w("Quill processes started: $QSTARTED (1 + one per upgrade); exit statuses: %d × 0%s. "
  "Summed over their \`stopped:\` log lines (whole run, warm-up and checks included): %s. "
  "(client_reset: wrk closes the connections it has in flight when a run ends, up to $CONC per run.)" % (
    exits.count("0"), (", others: " + " ".join(bad_exits)) if bad_exits else "",
    ", ".join("%s %s" % (k, format(v, ",")) for k, v in totals.items() if not k.startswith("bytes"))))
w("")
fails = [x for x in events if not x[4]]
if fails:
    w("Events that did not complete: " + "; ".join(
        "round %d %s t=%.2f s %s (%s)" % (x[0], x[1], x[2], x[3], x[6]) for x in fails) + ".")
    w("")
open(dest, "w").write("\n".join(out) + "\n")
print("\n".join(out))
EOF
say "written: $RESULTS/reload.md"
