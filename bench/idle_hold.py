#!/usr/bin/env python3
"""Open N idle TCP connections to HOST:PORT, hold them, report how many survived.

Python 3 standard library only. Used by bench/run.sh for the idle-connection
test, but usable alone:

    python3 bench/idle_hold.py 127.0.0.1 9201 -n 9000 --hold 60 \
        --ready-file /tmp/ready --stop-file /tmp/stop

Connections come from source addresses 127.0.0.2, 127.0.0.3, ... (at most
--per-source connections each). Each socket sets IP_BIND_ADDRESS_NO_PORT
before bind((src, 0)) so the kernel picks the port at connect() time from the
whole 4-tuple space. The sockets are spread over several worker processes, at
most --per-process each (default 5000, hard cap 9000), so that no process
gets near the 20,000 open-file limit.

With --request PATH, each connection first sends one HTTP/1.1 keep-alive
request (GET PATH, Host: 127.0.0.1) and reads its complete response (framed by
Content-Length or chunked, status 2xx) before it counts as opened: an idle
keep-alive client, as an HTTP proxy sees it (bench/http.py uses this).

With --h2 PATH, each connection is HTTP/2 over TLS instead (bench/h2.py uses
this): a TLS handshake offering only ALPN "h2" (the certificate is not
verified: the bench's are self-signed; the server must select h2), then the
client preface, an empty SETTINGS frame and one GET PATH on stream 1 in one
write. It acknowledges the server's SETTINGS and PINGs, and counts as opened
once stream 1 has ended with a 2xx status (read from the first field of the
response's header block) before any GOAWAY or RST_STREAM. Then it is held
idle like the others; at the check, a connection on which the server sent
GOAWAY or closed (close_notify, FIN, RST) is not still open.

Phases:
  1. open: non-blocking connects, at most --inflight pending at once, until
     all are done or --open-timeout passes (with --request: until each has
     its response);
  2. ready: writes a JSON summary to --ready-file (if given) and to stderr;
  3. hold: until --hold seconds pass, --stop-file appears, or SIGTERM/SIGINT;
  4. check: a connection is "still open" if a non-blocking recv() raises
     EAGAIN (no data, no FIN, no RST); b'' or an error means it was closed;
  5. prints one JSON object on stdout and exits (0 if every requested
     connection opened and is still open, 1 otherwise).

Everything is bounded: the whole run ends by open-timeout + hold + 30 s.
Only loopback (127.0.0.0/8) targets are accepted.
"""

import argparse
import errno
import ipaddress
import json
import multiprocessing as mp
import os
import resource
import selectors
import signal
import socket
import ssl
import struct
import sys
import time

IP_BIND_ADDRESS_NO_PORT = 24
MAX_PER_PROCESS = 9000

_stop_requested = False


def _on_signal(_signum, _frame):
    global _stop_requested
    _stop_requested = True


def raise_nofile():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def source_address(index, per_source, first_host):
    """Source address for connection number `index`: 127.0.0.FIRST_HOST, then the next ones."""
    n = first_host + index // per_source
    if not 1 <= n < (1 << 24) - 1:
        raise ValueError("source address outside 127.0.0.0/8")
    return str(ipaddress.ip_address("127.0.0.0") + n)


def make_socket(src):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_IP, IP_BIND_ADDRESS_NO_PORT, 1)
    s.bind((src, 0))
    s.setblocking(False)
    return s


def response_complete(data):
    """For --request: None while the response is incomplete, else "" (a complete 2xx response)
    or an error text. Framing: Content-Length, or chunked (ends with the last chunk and an empty
    trailer section)."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None if len(data) < 65536 else "response head over 64 KiB"
    head = data[:end].decode("latin-1").split("\r\n")
    parts = head[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
        return "bad status line"
    fields = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        fields[name.strip().lower()] = value.strip().lower()
    body = len(data) - end - 4
    if "content-length" in fields and fields["content-length"].isdigit():
        if body < int(fields["content-length"]):
            return None
    elif "chunked" in fields.get("transfer-encoding", ""):
        if not data.endswith(b"0\r\n\r\n"):
            return None
    else:
        return "response without Content-Length or chunked framing"
    if not parts[1].startswith("2"):
        return "HTTP status " + parts[1]
    return ""


def open_connections(host, port, indices, per_source, first_host, inflight, deadline, stop_event,
                     request=None):
    """Open connections for the given global indices (with `request`: each after its complete
    response). Returns (open sockets, error counts)."""
    sel = selectors.DefaultSelector()
    opened, errors = [], {}
    pending = 0
    todo = iter(indices)
    exhausted = False
    got = {}  # socket -> response bytes so far (request sent)

    def count(err):
        errors[err] = errors.get(err, 0) + 1

    def connected(s):
        """The connect is done: with a request, send it and wait for the response; else open."""
        if request is None:
            opened.append(s)
            return False
        try:
            s.send(request)
        except OSError as e:
            count(errno.errorcode.get(e.errno, str(e.errno)) + " (send)")
            s.close()
            return False
        got[s] = b""
        sel.register(s, selectors.EVENT_READ)
        return True

    while time.monotonic() < deadline and not _stop_requested and not stop_event.is_set():
        while not exhausted and pending < inflight:
            i = next(todo, None)
            if i is None:
                exhausted = True
                break
            try:
                s = make_socket(source_address(i, per_source, first_host))
            except OSError as e:
                count(errno.errorcode.get(e.errno, str(e.errno)) + " (socket/bind)")
                continue
            rc = s.connect_ex((host, port))
            if rc == 0:
                pending += connected(s)
            elif rc == errno.EINPROGRESS:
                sel.register(s, selectors.EVENT_WRITE)
                pending += 1
            else:
                count(errno.errorcode.get(rc, str(rc)))
                s.close()
        if exhausted and pending == 0:
            break
        for key, _ in sel.select(timeout=0.2):
            s = key.fileobj
            sel.unregister(s)
            pending -= 1
            if s in got:
                try:
                    chunk = s.recv(65536)
                except BlockingIOError:
                    sel.register(s, selectors.EVENT_READ)
                    pending += 1
                    continue
                except OSError as e:
                    count(errno.errorcode.get(e.errno, str(e.errno)) + " (recv)")
                    del got[s]
                    s.close()
                    continue
                if not chunk:
                    count("closed before a complete response")
                    del got[s]
                    s.close()
                    continue
                got[s] += chunk
                verdict = response_complete(got[s])
                if verdict is None:
                    sel.register(s, selectors.EVENT_READ)
                    pending += 1
                    continue
                del got[s]
                if verdict:
                    count(verdict)
                    s.close()
                else:
                    opened.append(s)
                continue
            rc = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if rc == 0:
                pending += connected(s)
            else:
                count(errno.errorcode.get(rc, str(rc)))
                s.close()
    for key in list(sel.get_map().values()):
        sel.unregister(key.fileobj)
        key.fileobj.close()
        count("pending at timeout or stop")
    sel.close()
    return opened, errors


def still_open(sockets):
    """Count sockets whose non-blocking recv() says 'nothing yet' (EAGAIN)."""
    alive = closed = got_data = 0
    for s in sockets:
        try:
            data = s.recv(1, socket.MSG_DONTWAIT | socket.MSG_PEEK)
        except BlockingIOError:
            alive += 1
            continue
        except OSError:
            closed += 1
            continue
        if data == b"":
            closed += 1
        else:
            got_data += 1  # open, but the peer sent something unexpected
            alive += 1
    return alive, closed, got_data


def request_bytes(path):
    """The keep-alive request sent on each connection with --request, or None."""
    if path is None:
        return None
    return ("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: idle_hold\r\n\r\n" % path).encode()


# ---------------------------------------------------------------- --h2: HTTP/2 over TLS

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
H2_DATA, H2_HEADERS, H2_RST_STREAM, H2_SETTINGS, H2_PING, H2_GOAWAY = 0, 1, 3, 4, 6, 7
FLAG_END_STREAM, FLAG_ACK, FLAG_END_HEADERS, FLAG_PADDED, FLAG_PRIORITY = 0x1, 0x1, 0x4, 0x8, 0x20
# The :status values of HPACK's static table (RFC 7541 Appendix A), by index.
STATIC_STATUS = {8: 200, 9: 204, 10: 206, 11: 304, 12: 400, 13: 404, 14: 500}


def h2_frame(ftype, flags, stream, payload=b""):
    """One HTTP/2 frame: 24-bit length, type, flags, 31-bit stream id, payload (RFC 9113 §4.1)."""
    return struct.pack(">I", len(payload))[1:] + struct.pack(">BBI", ftype, flags, stream) + payload


def h2_request_bytes(path, authority="127.0.0.1"):
    """The client preface, an empty SETTINGS frame and HEADERS (END_STREAM, END_HEADERS) with
    GET PATH on stream 1. HPACK by hand: :method GET and :scheme https are static entries 2
    and 7; :path and :authority are literals without indexing, names from static entries 4
    and 1, values as plain (not Huffman) strings of under 127 bytes."""
    def literal(name_index, value):
        v = value.encode()
        return bytes([name_index, len(v)]) + v
    block = b"\x82\x87" + literal(4, path) + literal(1, authority)
    return H2_PREFACE + h2_frame(H2_SETTINGS, 0, 0) + h2_frame(
        H2_HEADERS, FLAG_END_STREAM | FLAG_END_HEADERS, 1, block)


def hpack_int(block, i, prefix):
    """An HPACK integer with a `prefix`-bit prefix at block[i] (RFC 7541 §5.1): (value, next i)."""
    mask = (1 << prefix) - 1
    value = block[i] & mask
    i += 1
    if value < mask:
        return value, i
    shift = 0
    while i < len(block) and shift < 28:
        b = block[i]
        i += 1
        value += (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i
    raise ValueError("bad HPACK integer")


def huffman_digits(data):
    """Decodes a Huffman-coded string made of digits only (RFC 7541 Appendix B: '0'-'2' are the
    5-bit codes 00000-00010, '3'-'9' the 6-bit codes 011001-011111); '' for anything else."""
    bits = "".join(format(b, "08b") for b in data)
    out, i = [], 0
    while len(bits) - i >= 5:
        if bits[i:i + 5] in ("00000", "00001", "00010"):
            out.append(str(int(bits[i:i + 5], 2)))
            i += 5
        elif len(bits) - i >= 6 and "011001" <= bits[i:i + 6] <= "011111":
            out.append(str(int(bits[i:i + 6], 2) - 0b011001 + 3))
            i += 6
        else:
            break
    rest = bits[i:]
    return "".join(out) if len(rest) < 8 and set(rest) <= {"1"} else ""


def h2_status(block):
    """The :status of a response header block when it is the first field (as RFC 9113 §8.3
    requires): a static-table entry, or a literal with the static name :status. None if it
    cannot be read that way (the first response of a connection has an empty dynamic table)."""
    try:
        i = 0
        while i < len(block) and block[i] & 0xE0 == 0x20:  # dynamic table size updates
            _, i = hpack_int(block, i, 5)
        if i >= len(block):
            return None
        if block[i] & 0x80:
            index, _ = hpack_int(block, i, 7)
            return STATIC_STATUS.get(index)
        index, i = hpack_int(block, i, 6 if block[i] & 0x40 else 4)
        if index != 8:  # not a literal with the name :status
            return None
        huffman = bool(block[i] & 0x80)
        n, i = hpack_int(block, i, 7)
        raw = block[i:i + n]
        text = huffman_digits(raw) if huffman else raw.decode("latin-1")
        return int(text) if len(text) == 3 and text.isdigit() else None
    except (ValueError, IndexError):
        return None


class H2Conn:
    """One HTTP/2 client connection of the --h2 mode: its SSLSocket and what stream 1 got."""
    __slots__ = ("sock", "buf", "received", "status", "body", "done", "error")

    def __init__(self, sock):
        self.sock, self.buf, self.received = sock, b"", 0
        self.status, self.body, self.done, self.error = None, 0, False, None

    def feed(self, data):
        """Takes received bytes; returns the frames to send back (SETTINGS and PING ACKs)."""
        self.buf += data
        self.received += len(data)
        out = b""
        while len(self.buf) >= 9:
            length = int.from_bytes(self.buf[:3], "big")
            if len(self.buf) < 9 + length:
                break
            ftype, flags = self.buf[3], self.buf[4]
            stream = int.from_bytes(self.buf[5:9], "big") & 0x7FFFFFFF
            payload, self.buf = self.buf[9:9 + length], self.buf[9 + length:]
            if ftype == H2_SETTINGS and not flags & FLAG_ACK:
                out += h2_frame(H2_SETTINGS, FLAG_ACK, 0)
            elif ftype == H2_PING and not flags & FLAG_ACK:
                out += h2_frame(H2_PING, FLAG_ACK, 0, payload)
            elif ftype == H2_GOAWAY:
                self.error = self.error or "GOAWAY"
            elif ftype == H2_RST_STREAM and stream == 1 and not self.done:
                self.error = self.error or "RST_STREAM"
            elif ftype in (H2_HEADERS, H2_DATA) and stream == 1 and not self.done:
                padded = bool(flags & FLAG_PADDED and payload)
                pad = payload[0] if padded else 0  # the padding, after the Pad Length byte
                if ftype == H2_HEADERS:
                    block = payload[1 if padded else 0:len(payload) - pad]
                    if flags & FLAG_PRIORITY:
                        block = block[5:]
                    if self.status is None:
                        self.status = h2_status(block) or -1
                else:
                    self.body += length - (pad + 1 if padded else 0)
                if flags & FLAG_END_STREAM:
                    self.done = True
        return out

    def verdict(self):
        """None while stream 1 is under way; "" once it ended with a 2xx; else an error text."""
        if self.error:
            return self.error
        if not self.done:
            return None
        if self.status == -1:
            return "response :status not readable"
        if not 200 <= (self.status or 0) < 300:
            return "HTTP status %s" % self.status
        return ""

    def pump(self):
        """Reads what is there (non-blocking) into feed() and sends its replies. Returns False
        once the server has closed (close_notify, FIN, RST or a TLS error)."""
        for _ in range(1000):  # bounded: at most ~64 MiB per call
            try:
                data = self.sock.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return True
            except (ssl.SSLError, OSError):
                return False
            if not data:
                return False
            reply = self.feed(data)
            if reply:
                try:
                    self.sock.send(reply)
                except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
                    pass  # an ACK lost to a full buffer: harmless for one idle connection
                except (ssl.SSLError, OSError):
                    return False
        return True


def open_h2_connections(host, port, indices, per_source, first_host, inflight, deadline,
                        stop_event, path):
    """--h2: opens the connections for the given global indices, each TLS with ALPN h2 and one
    complete GET PATH. Returns (open H2Conns, error counts)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    request = h2_request_bytes(path)
    sel = selectors.DefaultSelector()
    opened, errors = [], {}
    pending = 0
    todo = iter(indices)
    exhausted = False

    def count(err):
        errors[err] = errors.get(err, 0) + 1

    def drop(obj, err):
        count(err)
        try:
            sel.unregister(obj)
        except (KeyError, ValueError):
            pass
        obj.close()

    def handshake(s):
        """Advances the handshake; once done, checks ALPN and sends the request. Returns the
        H2Conn waiting for its response, or None while the handshake goes on or on failure."""
        try:
            s.do_handshake()
        except ssl.SSLWantReadError:
            sel.modify(s, selectors.EVENT_READ, "tls")
            return None
        except ssl.SSLWantWriteError:
            sel.modify(s, selectors.EVENT_WRITE, "tls")
            return None
        except (ssl.SSLError, OSError) as e:
            drop(s, "TLS handshake: %s" % (getattr(e, "reason", None) or type(e).__name__))
            return False
        alpn = s.selected_alpn_protocol()
        if alpn != "h2":
            drop(s, "ALPN: %s instead of h2" % alpn)
            return False
        try:
            s.send(request)
        except (ssl.SSLError, OSError) as e:
            drop(s, "send: %s" % type(e).__name__)
            return False
        c = H2Conn(s)
        sel.modify(s, selectors.EVENT_READ, c)
        return c

    while time.monotonic() < deadline and not _stop_requested and not stop_event.is_set():
        while not exhausted and pending < inflight:
            i = next(todo, None)
            if i is None:
                exhausted = True
                break
            try:
                s = make_socket(source_address(i, per_source, first_host))
            except OSError as e:
                count(errno.errorcode.get(e.errno, str(e.errno)) + " (socket/bind)")
                continue
            rc = s.connect_ex((host, port))
            if rc not in (0, errno.EINPROGRESS):
                count(errno.errorcode.get(rc, str(rc)))
                s.close()
                continue
            sel.register(s, selectors.EVENT_WRITE, "connect")
            pending += 1
        if exhausted and pending == 0:
            break
        for key, _ in sel.select(timeout=0.2):
            s, state = key.fileobj, key.data
            if state == "connect":
                rc = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                sel.unregister(s)
                if rc != 0:
                    pending -= 1
                    count(errno.errorcode.get(rc, str(rc)))
                    s.close()
                    continue
                s = ctx.wrap_socket(s, do_handshake_on_connect=False)
                sel.register(s, selectors.EVENT_WRITE, "tls")
                if handshake(s) is False:
                    pending -= 1
            elif state == "tls":
                if handshake(s) is False:
                    pending -= 1
            else:
                c = state
                alive = c.pump()
                verdict = c.verdict()
                if verdict is None and alive:
                    continue
                pending -= 1
                sel.unregister(s)
                if verdict == "":
                    opened.append(c)
                else:
                    count(verdict if verdict else "closed before the response ended")
                    s.close()
    for key in list(sel.get_map().values()):
        sel.unregister(key.fileobj)
        key.fileobj.close()
        count("pending at timeout or stop")
    sel.close()
    return opened, errors


def still_open_h2(conns):
    """--h2: reads what each connection got while idle; one the server closed or sent GOAWAY on
    is not still open. Returns (alive, closed, got_data) as still_open() does."""
    alive = closed = got_data = 0
    for c in conns:
        before = c.received
        ok = c.pump()
        if not ok or c.error:
            closed += 1
            continue
        alive += 1
        if c.received != before:
            got_data += 1  # open, but the server sent something while it was idle
    return alive, closed, got_data


def worker(args, indices, conn, stop_event):
    """Child process: open its share, report, hold, check, report again."""
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    raise_nofile()
    t0 = time.monotonic()
    if args.h2:
        conns, errors = open_h2_connections(
            args.host, args.port, indices, args.per_source, args.first_host,
            args.inflight, t0 + args.open_timeout, stop_event, args.h2)
        socks = [c.sock for c in conns]
    else:
        socks, errors = open_connections(
            args.host, args.port, indices, args.per_source, args.first_host,
            args.inflight, t0 + args.open_timeout, stop_event, request_bytes(args.request))
    conn.send({"opened": len(socks), "errors": errors,
               "open_seconds": round(time.monotonic() - t0, 3)})
    hard_deadline = t0 + args.open_timeout + args.hold + 20
    # Hold until the parent says stop (or our own hard deadline).
    while not stop_event.is_set() and not _stop_requested and time.monotonic() < hard_deadline:
        stop_event.wait(0.2)
    alive, closed, got_data = still_open_h2(conns) if args.h2 else still_open(socks)
    for s in socks:
        s.close()
    conn.send({"still_open": alive, "closed": closed, "got_data": got_data})
    conn.close()


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("-n", "--connections", type=int, default=9000)
    p.add_argument("--hold", type=float, default=60.0,
                   help="max seconds to hold after opening (default 60)")
    p.add_argument("--open-timeout", type=float, default=60.0,
                   help="max seconds for the opening phase (default 60)")
    p.add_argument("--stop-file", help="stop holding as soon as this file exists")
    p.add_argument("--ready-file", help="write the open summary (JSON) here when done opening")
    p.add_argument("--per-process", type=int, default=5000,
                   help="sockets per worker process (max %d)" % MAX_PER_PROCESS)
    p.add_argument("--per-source", type=int, default=1000,
                   help="connections per source address (default 1000)")
    p.add_argument("--first-host", type=int, default=2,
                   help="first source address is 127.0.0.FIRST_HOST (default 2)")
    p.add_argument("--inflight", type=int, default=256,
                   help="max connects pending at once per process")
    p.add_argument("--request", metavar="PATH",
                   help="first send GET PATH (HTTP/1.1 keep-alive) and read its complete 2xx "
                        "response on each connection, then hold it idle")
    p.add_argument("--h2", metavar="PATH",
                   help="HTTP/2 over TLS (ALPN h2): the preface, SETTINGS and one GET PATH, "
                        "whose complete 2xx response is read, then hold it idle")
    a = p.parse_args(argv)
    if not ipaddress.ip_address(a.host) in ipaddress.ip_network("127.0.0.0/8"):
        p.error("only loopback (127.0.0.0/8) targets are allowed")
    if not 1 <= a.per_process <= MAX_PER_PROCESS:
        p.error("--per-process must be 1..%d" % MAX_PER_PROCESS)
    if a.request is not None and (not a.request.startswith("/") or any(
            c in a.request for c in " \r\n")):
        p.error("--request must be a path starting with / (no spaces or line breaks)")
    if a.h2 is not None and (not a.h2.startswith("/") or len(a.h2) > 100 or any(
            c in a.h2 for c in " \r\n")):
        p.error("--h2 must be a path starting with / of at most 100 characters (no spaces or line breaks)")
    if a.h2 is not None and a.request is not None:
        p.error("--h2 and --request exclude each other")
    if a.connections < 1 or a.connections > 200000:
        p.error("--connections must be 1..200000")
    if a.hold < 0 or a.hold > 3600 or a.open_timeout <= 0 or a.open_timeout > 600:
        p.error("--hold must be 0..3600 and --open-timeout 0..600")
    return a


def main(argv):
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    ctx = mp.get_context("fork")
    stop_event = ctx.Event()
    shares = [range(i, min(i + args.per_process, args.connections))
              for i in range(0, args.connections, args.per_process)]
    procs = []
    t0 = time.monotonic()
    for share in shares:
        parent_end, child_end = ctx.Pipe(duplex=False)
        pr = ctx.Process(target=worker, args=(args, share, child_end, stop_event), daemon=True)
        pr.start()
        child_end.close()
        procs.append((pr, parent_end))
    result = {"target": "%s:%d" % (args.host, args.port), "requested": args.connections,
              "processes": len(procs), "opened": 0, "failed": 0, "errors": {},
              "still_open": 0, "closed": 0, "got_data": 0}
    hard_deadline = t0 + args.open_timeout + args.hold + 30

    def recv(pipe, until):
        while time.monotonic() < until:
            if _stop_requested:
                stop_event.set()  # workers stop opening and report at once
            if pipe.poll(0.2):
                try:
                    return pipe.recv()
                except EOFError:
                    return None
        return None

    # 1+2: wait for every worker's open summary.
    for pr, pipe in procs:
        msg = recv(pipe, t0 + args.open_timeout + 10) or {"opened": 0, "errors": {"worker lost": 1}}
        result["opened"] += msg["opened"]
        for k, v in msg["errors"].items():
            result["errors"][k] = result["errors"].get(k, 0) + v
    result["failed"] = args.connections - result["opened"]
    result["open_seconds"] = round(time.monotonic() - t0, 3)
    ready = {k: result[k] for k in ("target", "requested", "opened", "failed", "errors", "open_seconds")}
    if args.ready_file:
        tmp = args.ready_file + ".tmp"
        with open(tmp, "w") as f:
            json.dump(ready, f)
        os.rename(tmp, args.ready_file)
    print("idle_hold: ready " + json.dumps(ready), file=sys.stderr, flush=True)

    # 3: hold.
    t_hold = time.monotonic()
    while (not _stop_requested and time.monotonic() - t_hold < args.hold
           and not (args.stop_file and os.path.exists(args.stop_file))):
        time.sleep(0.1)
    result["held_seconds"] = round(time.monotonic() - t_hold, 3)

    # 4: check and close.
    stop_event.set()
    for pr, pipe in procs:
        msg = recv(pipe, min(hard_deadline, time.monotonic() + 30)) or {"still_open": 0, "closed": 0, "got_data": 0}
        for k in ("still_open", "closed", "got_data"):
            result[k] += msg[k]
    for pr, _ in procs:
        pr.join(timeout=5)
        if pr.is_alive():
            os.kill(pr.pid, signal.SIGKILL)
            pr.join(timeout=2)
    print(json.dumps(result), flush=True)
    ok = result["opened"] == args.connections and result["still_open"] == args.connections
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
