#!/usr/bin/env python3
"""Open N idle TLS connections to HOST:PORT (handshake done, no request sent), hold them, report
how many survived.

Python 3 standard library only (the ssl module, i.e. the system OpenSSL). Used by bench/tls/tls.py
for the idle-memory test, usable alone:

    python3 bench/tls/idle_tls.py 127.0.0.1 9262 -n 9000 --hold 60 --ready-file /tmp/ready

One process holds every connection (9,000 sockets stay well under the 20,000 open-file limit).
Phases:
  1. open: non-blocking connect + TLS handshake (certificate not verified: the bench's certificates
     are self-signed), at most --inflight handshakes under way at once, until all are done or
     --open-timeout passes; nothing is sent after the handshake;
  2. ready: a JSON summary goes to --ready-file (if given) and to stderr;
  3. hold: until --hold seconds pass, --stop-file appears, or SIGTERM/SIGINT;
  4. check: a connection is "still open" if a non-blocking read gets no application data and no
     close (SSLWantReadError; session tickets the server sent after the handshake are consumed
     by OpenSSL on the way); b'', a close_notify or an error means it was closed;
  5. prints one JSON object on stdout and exits (0 if every connection opened and is still open).
Everything is bounded: the whole run ends by open-timeout + hold + 30 s. Loopback targets only.
"""

import argparse
import errno
import ipaddress
import json
import os
import selectors
import signal
import socket
import ssl
import sys
import time

_stop = False


def _on_signal(_signum, _frame):
    global _stop
    _stop = True


def open_all(host, port, n, inflight, timeout):
    """Returns (established SSLSockets, failure counts by kind, seconds taken)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    sel = selectors.DefaultSelector()
    done, failures = [], {}
    started = 0
    pending = 0
    t0 = time.monotonic()
    deadline = t0 + timeout

    def fail(kind, s):
        failures[kind] = failures.get(kind, 0) + 1
        try:
            sel.unregister(s)
        except (KeyError, ValueError):
            pass
        s.close()

    while (started < n or pending) and time.monotonic() < deadline and not _stop:
        while started < n and pending < inflight:
            raw = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            raw.setblocking(False)
            err = raw.connect_ex((host, port))
            started += 1
            if err not in (0, errno.EINPROGRESS):
                failures["connect"] = failures.get("connect", 0) + 1
                raw.close()
                continue
            s = ctx.wrap_socket(raw, do_handshake_on_connect=False)
            sel.register(s, selectors.EVENT_WRITE)
            pending += 1
        for key, _ in sel.select(0.5):
            s = key.fileobj
            try:
                s.do_handshake()
            except ssl.SSLWantReadError:
                sel.modify(s, selectors.EVENT_READ)
                continue
            except ssl.SSLWantWriteError:
                sel.modify(s, selectors.EVENT_WRITE)
                continue
            except (ssl.SSLError, OSError) as e:
                pending -= 1
                fail("handshake:" + type(e).__name__, s)
                continue
            sel.unregister(s)
            pending -= 1
            done.append(s)
    for key in list(sel.get_map().values()):
        fail("unfinished", key.fileobj)
    sel.close()
    return done, failures, time.monotonic() - t0


def still_open(socks):
    n = 0
    for s in socks:
        try:
            data = s.recv(1)
        except ssl.SSLWantReadError:
            n += 1
            continue
        except (ssl.SSLError, OSError):
            continue
        if data:
            n += 1  # unexpected data, but the connection is open
    return n


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("-n", type=int, default=9000)
    p.add_argument("--inflight", type=int, default=64)
    p.add_argument("--open-timeout", type=float, default=120.0)
    p.add_argument("--hold", type=float, default=60.0)
    p.add_argument("--ready-file")
    p.add_argument("--stop-file")
    a = p.parse_args(argv)
    if not ipaddress.ip_address(a.host).is_loopback:
        p.error("only loopback targets are accepted")
    if not 1 <= a.n <= 15000:
        p.error("-n must be 1..15000 (one process, 20,000 open files)")
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    socks, failures, secs = open_all(a.host, a.port, a.n, a.inflight, a.open_timeout)
    ready = {"requested": a.n, "opened": len(socks), "open_failures": failures, "open_s": round(secs, 2)}
    if a.ready_file:
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(ready, f)
        os.rename(tmp, a.ready_file)
    print(json.dumps(ready), file=sys.stderr, flush=True)
    end = time.monotonic() + a.hold
    while not _stop and time.monotonic() < end:
        if a.stop_file and os.path.exists(a.stop_file):
            break
        time.sleep(0.1)
    ready["still_open"] = still_open(socks)
    for s in socks:
        s.close()
    print(json.dumps(ready), flush=True)
    return 0 if ready["opened"] == a.n and ready["still_open"] == a.n else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
