# Shared by the bench scripts (sourced, not run). The caller defines REPO and say().

# Sets QUILL to $QUILL_BIN, else to this checkout's release build (built now, --locked when there
# is a Cargo.lock). Returns non-zero when the build or `quill --version` fails; the caller decides
# whether that ends the run.
quill_binary() {
    if [ -n "${QUILL_BIN:-}" ]; then
        QUILL="$QUILL_BIN"
    else
        say "building quill (cargo build --release)"
        local locked=
        [ -f "$REPO/Cargo.lock" ] && locked=--locked
        (cd "$REPO" && timeout 1500 cargo build --release $locked) >&2 || return 1
        QUILL="$REPO/target/release/quill"
    fi
    timeout 10 "$QUILL" --version >/dev/null 2>&1
}

# The EXIT trap of a script whose Python driver (pid in DRIVER) lists every process it starts in
# $WORK/pids ("pid starttime name"): stops the driver (TERM, then KILL after 15 s), then by PID
# whatever it started that is still alive (the start time guards against a recycled PID), then
# removes $WORK unless KEEP_WORK is set. Keeps the script's exit status.
cleanup_driver_and_work() {
    local rc=$?
    trap - EXIT INT TERM
    if [ -n "${DRIVER:-}" ] && kill -0 "$DRIVER" 2>/dev/null; then
        kill -TERM "$DRIVER" 2>/dev/null || true
        for _ in $(seq 1 150); do kill -0 "$DRIVER" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$DRIVER" 2>/dev/null || true
    fi
    if [ -f "$WORK/pids" ]; then
        local pid start name now
        while read -r pid start name; do
            [ -r "/proc/$pid/stat" ] || continue
            now="$(sed 's/^.*) //' "/proc/$pid/stat" | cut -d' ' -f20)"
            [ "$now" = "$start" ] || continue
            say "stopping leftover $name (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
            sleep 0.5
            kill -KILL "$pid" 2>/dev/null || true
        done < "$WORK/pids"
    fi
    if [ -n "${KEEP_WORK:-}" ]; then say "work dir kept: $WORK"; else rm -rf "$WORK"; fi
    exit "$rc"
}
