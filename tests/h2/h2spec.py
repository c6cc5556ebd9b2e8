#!/usr/bin/python3
"""HTTP/2 server conformance, case by case, after h2spec's 147 server cases.

Each case opens its own connection to the server under test, sends raw frames (many of them
deliberately wrong), and judges what comes back the way h2spec does (summerwind/h2spec at af83a65;
the list, with sections and requirements, is ../shared/research/h2spec-cases.md). The code is
written for Quill; it shares no code with h2spec.

    h2spec.py --port P [--host 127.0.0.1] [--tls] [--authority NAME] --case http2/4.2/2
    h2spec.py --port P --all        # every case, one line each, then a summary
    h2spec.py --list                # every case id and what it sends

A case exits 0 when it passes, 1 when it fails, with one line saying what was expected and what
was seen. Judging follows h2spec's leniency: a connection error passes on a GOAWAY with the
expected code or on the connection closing; a stream error also passes on a RST_STREAM with the
expected code. `--strict` also fails a GOAWAY or RST_STREAM that carries another code (but
RST_STREAM(NO_ERROR), which a server sends after a whole response, is no verdict).

Every wait is bounded: each read waits at most --timeout seconds (2 s, as h2spec), a case reads at
most MAX_EVENTS frames and lasts at most CASE_BUDGET seconds. Needs Debian's python3-h2 (hpack).
"""

import argparse
import socket
import ssl
import struct
import sys
import time

import hpack
import hpack.huffman
import hpack.huffman_constants

# ---------------------------------------------------------------------------------------------
# Protocol constants (RFC 9113 §6, §7, §11; RFC 7541)
# ---------------------------------------------------------------------------------------------

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
FRAME_NAMES = {
    DATA: "DATA", HEADERS: "HEADERS", PRIORITY: "PRIORITY", RST_STREAM: "RST_STREAM",
    SETTINGS: "SETTINGS", PUSH_PROMISE: "PUSH_PROMISE", PING: "PING", GOAWAY: "GOAWAY",
    WINDOW_UPDATE: "WINDOW_UPDATE", CONTINUATION: "CONTINUATION",
}
UNKNOWN_TYPE = 0x16  # no frame type has this number: an extension frame nobody defined

END_STREAM = ACK = 0x1
END_HEADERS = 0x4
PADDED = 0x8
PRIORITY_FLAG = 0x20

NO_ERROR, PROTOCOL_ERROR, INTERNAL_ERROR, FLOW_CONTROL_ERROR = 0x0, 0x1, 0x2, 0x3
SETTINGS_TIMEOUT, STREAM_CLOSED, FRAME_SIZE_ERROR, REFUSED_STREAM = 0x4, 0x5, 0x6, 0x7
CANCEL, COMPRESSION_ERROR, CONNECT_ERROR, ENHANCE_YOUR_CALM = 0x8, 0x9, 0xA, 0xB
INADEQUATE_SECURITY, HTTP_1_1_REQUIRED = 0xC, 0xD
ERROR_NAMES = {
    0x0: "NO_ERROR", 0x1: "PROTOCOL_ERROR", 0x2: "INTERNAL_ERROR", 0x3: "FLOW_CONTROL_ERROR",
    0x4: "SETTINGS_TIMEOUT", 0x5: "STREAM_CLOSED", 0x6: "FRAME_SIZE_ERROR",
    0x7: "REFUSED_STREAM", 0x8: "CANCEL", 0x9: "COMPRESSION_ERROR", 0xA: "CONNECT_ERROR",
    0xB: "ENHANCE_YOUR_CALM", 0xC: "INADEQUATE_SECURITY", 0xD: "HTTP_1_1_REQUIRED",
}

HEADER_TABLE_SIZE, ENABLE_PUSH, MAX_CONCURRENT_STREAMS = 0x1, 0x2, 0x3
INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE, MAX_HEADER_LIST_SIZE = 0x4, 0x5, 0x6

DEFAULT_WINDOW = 65535
DEFAULT_FRAME_SIZE = 16384
MAX_FRAME_LENGTH = 2**24 - 1  # what the 24-bit length field can say
MAX_WINDOW = 2**31 - 1
DUMMY_LEN = 4000  # h2spec's default --max-header-length: the value of each dummy field

MAX_EVENTS = 2000  # frames one wait may read before it gives up
CASE_BUDGET = 15.0  # seconds one case may take in all (the Rust wrapper kills us at 20 s)


def error_name(code):
    return ERROR_NAMES.get(code, "0x%x" % code)


class CaseFailed(Exception):
    """The case failed: the message says what was expected and what was seen."""


# ---------------------------------------------------------------------------------------------
# Frames: building (any bytes at all, legal or not) and reading
# ---------------------------------------------------------------------------------------------

def frame(ftype, flags, stream, payload):
    """A frame with any header fields: lengths, types and stream ids are not checked."""
    n = len(payload)
    return struct.pack(">BHBBI", n >> 16, n & 0xFFFF, ftype, flags, stream) + payload


def settings_payload(*pairs):
    return b"".join(struct.pack(">HI", ident, value) for ident, value in pairs)


def priority_payload(dep, weight, exclusive=False):
    """Stream dependency (E bit when exclusive) and the weight byte (weight 1..256 is byte+1)."""
    return struct.pack(">IB", dep | (0x80000000 if exclusive else 0), weight)


class Frame:
    """A frame the server sent."""

    def __init__(self, ftype, flags, stream, payload):
        self.type, self.flags, self.stream, self.payload = ftype, flags, stream, payload
        self.headers = None  # decoded fields, on the frame that ended a header block

    def code(self):
        """The error code of a GOAWAY or RST_STREAM (None when the payload is too short)."""
        if self.type == GOAWAY and len(self.payload) >= 8:
            return struct.unpack(">I", self.payload[4:8])[0]
        if self.type == RST_STREAM and len(self.payload) >= 4:
            return struct.unpack(">I", self.payload[:4])[0]
        return None

    def has(self, flag):
        return self.flags & flag == flag

    def __str__(self):
        name = FRAME_NAMES.get(self.type, "type 0x%x" % self.type)
        if self.type == GOAWAY:
            last = "?"
            if len(self.payload) >= 4:
                last = struct.unpack(">I", self.payload[:4])[0] & MAX_WINDOW
            debug = self.payload[8:60].decode("latin-1")
            return "GOAWAY(%s, last stream %s%s)" % (
                error_name(self.code()), last, ", %r" % debug if debug else "")
        if self.type == RST_STREAM:
            return "RST_STREAM(stream %d, %s)" % (self.stream, error_name(self.code()))
        if self.type in (SETTINGS, PING):
            return "%s(%s)" % (name, "ACK" if self.has(ACK) else "%d bytes" % len(self.payload))
        if self.type == DATA:
            return "DATA(stream %d, %d bytes%s)" % (
                self.stream, len(self.payload), ", END_STREAM" if self.has(END_STREAM) else "")
        if self.type == HEADERS:
            status = dict(self.headers or []).get(":status", "?")
            return "HEADERS(stream %d, :status %s%s)" % (
                self.stream, status, ", END_STREAM" if self.has(END_STREAM) else "")
        if self.type == WINDOW_UPDATE:
            inc = struct.unpack(">I", self.payload[:4])[0] if len(self.payload) >= 4 else "?"
            return "WINDOW_UPDATE(stream %d, +%s)" % (self.stream, inc)
        return "%s(stream %d, flags 0x%x, %d bytes)" % (
            name, self.stream, self.flags, len(self.payload))


class Closed:
    """The server closed the connection (EOF or reset) at a frame boundary."""

    def __init__(self, how):
        self.how = how

    def __str__(self):
        return "connection closed (%s)" % self.how


class Timeout:
    def __init__(self, seconds):
        self.seconds = seconds

    def __str__(self):
        return "nothing more within %.1f s" % self.seconds


class Garbage:
    """Bytes that are not HTTP/2 frames: an HTTP/1 answer, a cut frame, a TLS failure."""

    def __init__(self, what, http1_closed=False):
        self.what = what
        self.http1_closed = http1_closed

    def __str__(self):
        return self.what


class Conn:
    """One client connection: raw frame writes, event reads, HPACK state, receive windows.

    As in h2spec, DATA the server sends is paid back with WINDOW_UPDATE once a window is spent,
    and the first timeout or close ends the connection's life for the case (`done`).
    """

    def __init__(self, opts):
        self.opts = opts
        self.timeout = opts.timeout
        self.scheme = "https" if opts.tls else "http"
        self.authority = opts.authority or "%s:%d" % (opts.host, opts.port)
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder()
        self.decoder.max_header_list_size = 1 << 20
        self.server_settings = {}
        self.done = False
        self.seen = []
        self.rbuf = b""
        self.block = b""  # header block fragments of the server's HEADERS in progress
        self.windows = {0: DEFAULT_WINDOW}
        self.started = time.monotonic()
        raw = socket.create_connection((opts.host, opts.port), timeout=opts.timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if opts.tls:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            ctx.set_alpn_protocols(["h2"])
            name = self.authority.rsplit(":", 1)[0] if opts.authority else opts.host
            raw = ctx.wrap_socket(raw, server_hostname=name)
            if raw.selected_alpn_protocol() != "h2":
                raise CaseFailed("expected ALPN h2; the server selected %r"
                                 % raw.selected_alpn_protocol())
        self.sock = raw

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    # --- writing -----------------------------------------------------------------------------

    def send(self, data):
        """Writes bytes; a write the server no longer takes is not an error here (h2spec)."""
        try:
            self.sock.sendall(data)
        except (OSError, ssl.SSLError):
            pass

    def frame(self, ftype, flags, stream, payload=b""):
        self.send(frame(ftype, flags, stream, payload))

    def settings(self, *pairs):
        self.frame(SETTINGS, 0, 0, settings_payload(*pairs))

    def headers(self, stream, block, end_stream=True, end_headers=True, pad=None, priority=None):
        flags = (END_STREAM if end_stream else 0) | (END_HEADERS if end_headers else 0)
        payload = block
        if priority is not None:
            flags |= PRIORITY_FLAG
            payload = priority + payload
        if pad is not None:
            flags |= PADDED
            payload = bytes([len(pad)]) + payload + pad
        self.frame(HEADERS, flags, stream, payload)

    def continuation(self, stream, block, end_headers=True):
        self.frame(CONTINUATION, END_HEADERS if end_headers else 0, stream, block)

    def data(self, stream, payload, end_stream=True, pad=None):
        flags = END_STREAM if end_stream else 0
        if pad is not None:
            flags |= PADDED
            payload = bytes([len(pad)]) + payload + pad
        self.frame(DATA, flags, stream, payload)

    def priority(self, stream, dep=0, weight=255, exclusive=False):
        self.frame(PRIORITY, 0, stream, priority_payload(dep, weight, exclusive))

    def rst_stream(self, stream, code):
        self.frame(RST_STREAM, 0, stream, struct.pack(">I", code))

    def ping(self, data, ack=False):
        self.frame(PING, ACK if ack else 0, 0, data)

    def goaway(self, last, code, debug=b""):
        self.frame(GOAWAY, 0, 0, struct.pack(">II", last, code) + debug)

    def window_update(self, stream, increment):
        self.frame(WINDOW_UPDATE, 0, stream, struct.pack(">I", increment))

    def encode(self, fields):
        """A header block from the connection's HPACK encoder (dynamic table kept in step)."""
        return self.encoder.encode(fields)

    def request_fields(self, method="GET"):
        return [(":method", method), (":scheme", self.scheme), (":path", "/"),
                (":authority", self.authority)]

    def request(self, method="GET"):
        return self.encode(self.request_fields(method))

    def max_frame_size(self):
        return self.server_settings.get(MAX_FRAME_SIZE, DEFAULT_FRAME_SIZE)

    # --- reading -----------------------------------------------------------------------------

    def _fill(self, n, deadline):
        """Reads until rbuf holds n bytes: True, or False on EOF; raises socket.timeout."""
        while len(self.rbuf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout()
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                return False
            self.rbuf += chunk
        return True

    def next_event(self):
        """The next frame, or Closed / Timeout / Garbage (each of which ends the connection)."""
        if self.done:
            return Garbage("nothing: the connection had already ended")
        deadline = time.monotonic() + self.timeout
        try:
            if not self._fill(9, deadline):
                return self._end(Closed("EOF") if not self.rbuf
                                 else Garbage("EOF inside a frame header: %r" % self.rbuf[:9]))
            if not self.seen and self.rbuf.startswith(b"HTTP/"):
                return self._end(self._http1_answer(deadline))
            length = int.from_bytes(self.rbuf[:3], "big")
            if not self._fill(9 + length, deadline):
                return self._end(Garbage("EOF inside a %d-byte frame" % length))
        except socket.timeout:
            return self._end(Timeout(self.timeout))
        except (ConnectionResetError, BrokenPipeError):
            return self._end(Closed("reset"))
        except ssl.SSLError as e:
            return self._end(Closed("TLS: %s" % e.reason))
        except OSError as e:
            return self._end(Garbage("read error: %s" % e))
        head, self.rbuf = self.rbuf[:9 + length], self.rbuf[9 + length:]
        f = Frame(head[3], head[4], struct.unpack(">I", head[5:9])[0] & MAX_WINDOW, head[9:])
        self._track(f)
        self.seen.append(str(f))
        if self.opts.verbose:
            print("  recv %s" % f, file=sys.stderr)
        return f

    def _http1_answer(self, deadline):
        """The server answered in HTTP/1: its status line, and whether it closed after it."""
        line = self.rbuf.split(b"\r\n", 1)[0].decode("latin-1")
        closed = False
        try:
            for _ in range(64):  # an error page is a few KiB; give up past 64 reads
                if not self._fill(len(self.rbuf) + 1, deadline):
                    closed = True
                    break
        except socket.timeout:
            pass
        except (OSError, ssl.SSLError):
            closed = True
        return Garbage("an HTTP/1 answer %r%s" % (line, ", then the connection closed" if closed
                                                       else ""), http1_closed=closed)

    def _end(self, event):
        self.done = True
        self.seen.append(str(event))
        if self.opts.verbose:
            print("  recv %s" % event, file=sys.stderr)
        return event

    def _track(self, f):
        """Keeps HPACK decoding in step and pays back receive windows as h2spec does."""
        if f.type in (HEADERS, PUSH_PROMISE, CONTINUATION):
            self.block += header_fragment(f)
            if f.has(END_HEADERS):
                try:
                    f.headers = self.decoder.decode(self.block)
                except hpack.HPACKError:
                    f.headers = [(":status", "undecodable")]
                self.block = b""
        if f.type == DATA and f.payload:
            for sid in (f.stream, 0):
                left = self.windows.get(sid, DEFAULT_WINDOW) - len(f.payload)
                if left <= 0:
                    self.window_update(sid, DEFAULT_WINDOW - left)
                    left = DEFAULT_WINDOW
                self.windows[sid] = left

    def handshake(self):
        """Preface and SETTINGS both ways: the server's SETTINGS acknowledged, ours acknowledged."""
        self.send(PREFACE)
        self.settings((INITIAL_WINDOW_SIZE, DEFAULT_WINDOW))
        theirs = ours = False
        for _ in range(MAX_EVENTS):
            if theirs and ours:
                break
            ev = self.next_event()
            if not isinstance(ev, Frame):
                raise CaseFailed("expected the SETTINGS exchange of the connection preface; saw %s"
                                 % self.story())
            if ev.type == SETTINGS and ev.has(ACK):
                ours = True
            elif ev.type == SETTINGS:
                theirs = True
                for i in range(0, len(ev.payload) - 5, 6):
                    ident, value = struct.unpack(">HI", ev.payload[i:i + 6])
                    self.server_settings[ident] = value
                self.frame(SETTINGS, ACK, 0)
        table = self.server_settings.get(HEADER_TABLE_SIZE, 4096)
        if table < 4096:
            self.encoder.header_table_size = table  # the next block starts with the update

    def story(self):
        """What the server did, for a failure message (the last few events)."""
        events = self.seen[-6:]
        more = "... " if len(self.seen) > 6 else ""
        return more + (", ".join(events) if events else "nothing")


def header_fragment(f):
    """The header block fragment of a HEADERS, PUSH_PROMISE or CONTINUATION frame."""
    p = f.payload
    pad = 0
    if f.type in (HEADERS, PUSH_PROMISE) and f.has(PADDED) and p:
        pad, p = p[0], p[1:]
    if f.type == HEADERS and f.has(PRIORITY_FLAG):
        p = p[5:]
    if f.type == PUSH_PROMISE:
        p = p[4:]
    return p[:len(p) - pad] if pad else p


# ---------------------------------------------------------------------------------------------
# Judging what the server does (h2spec's verifiers, written again)
# ---------------------------------------------------------------------------------------------

PASS, FAIL = "pass", "fail"


def expect(c, expected, judge):
    """Reads events until `judge(event)` says PASS (return) or FAIL, or the connection ends."""
    deadline = c.started + CASE_BUDGET
    for _ in range(MAX_EVENTS):
        ev = c.next_event()
        verdict = judge(ev)
        if verdict == PASS:
            return ev
        if verdict == FAIL or c.done:
            break
        if time.monotonic() > deadline:
            c.seen.append("the case's %.0f s budget spent" % CASE_BUDGET)
            break
    raise CaseFailed("expected %s; saw %s" % (expected, c.story()))


def codes_text(codes):
    return " or ".join(error_name(x) for x in codes)


def connection_error(c, *codes):
    """GOAWAY with one of `codes`, or the connection closed (h2spec's VerifyConnectionError)."""
    def judge(ev):
        if isinstance(ev, Closed):
            return PASS
        if isinstance(ev, Frame) and ev.type == GOAWAY:
            if ev.code() in codes:
                return PASS
            return FAIL if c.opts.strict else None
        return None
    expect(c, "GOAWAY(%s) or the connection closed" % codes_text(codes), judge)


def stream_error(c, *codes):
    """RST_STREAM or GOAWAY with one of `codes`, or the connection closed (VerifyStreamError)."""
    def judge(ev):
        if isinstance(ev, Closed):
            return PASS
        if isinstance(ev, Frame) and ev.type in (GOAWAY, RST_STREAM):
            if ev.code() in codes:
                return PASS
            # RST_STREAM(NO_ERROR) after a whole response only says "stop sending the body":
            # not a verdict on the frame under test, even when strict.
            neutral = ev.type == RST_STREAM and ev.code() == NO_ERROR
            return FAIL if c.opts.strict and not neutral else None
        return None
    expect(c, "RST_STREAM(%s), GOAWAY(%s) or the connection closed"
           % (codes_text(codes), codes_text(codes)), judge)


def connection_closed(c):
    expect(c, "the connection closed", lambda ev: PASS if isinstance(ev, Closed) else None)


def first_of(ftype, test):
    """A judge on the first frame of `ftype`: PASS when `test(frame)` holds, FAIL otherwise."""
    def judge(ev):
        if isinstance(ev, Frame) and ev.type == ftype:
            return PASS if test(ev) else FAIL
        return None
    return judge


def response_headers(c, stream=1):
    """The first HEADERS frame the server sends is on `stream` (h2spec's VerifyHeadersFrame)."""
    expect(c, "HEADERS on stream %d (a response)" % stream,
           first_of(HEADERS, lambda f: f.stream == stream))


def settings_ack(c):
    expect(c, "SETTINGS with ACK", first_of(SETTINGS, lambda f: f.has(ACK)))


def ping_ack(c, data):
    expect(c, "PING with ACK and the payload %r" % data,
           first_of(PING, lambda f: f.has(ACK) and f.payload == data))


def ping_ack_or_closed(c, data):
    def judge(ev):
        if isinstance(ev, Closed):
            return PASS
        if isinstance(ev, Frame) and ev.type == PING and ev.has(ACK) and ev.payload == data:
            return PASS
        return None
    expect(c, "PING with ACK and the payload %r, or the connection closed" % data, judge)


def any_frame(c, ftype):
    expect(c, "a %s frame" % FRAME_NAMES[ftype], first_of(ftype, lambda f: True))


def data_of_length(c, n, stream=1):
    expect(c, "DATA of %d byte(s) on stream %d (the window allows no more)" % (n, stream),
           first_of(DATA, lambda f: len(f.payload) == n and f.stream == stream))


def stream_closed(c, stream=1):
    """The response on `stream` is complete (END_STREAM) or it was reset with NO_ERROR."""
    def judge(ev):
        if isinstance(ev, Frame) and ev.stream == stream:
            if ev.type in (DATA, HEADERS) and ev.has(END_STREAM):
                return PASS
            if ev.type == RST_STREAM and ev.code() == NO_ERROR:
                return PASS
        return None
    expect(c, "the response on stream %d ending (END_STREAM)" % stream, judge)


def response_body_length(opts):
    """The body length of GET / on a connection of its own (h2spec's ServerDataLength)."""
    c = Conn(opts)
    try:
        c.handshake()
        c.headers(1, c.request())
        total = 0
        for _ in range(MAX_EVENTS):
            ev = c.next_event()
            if not isinstance(ev, Frame):
                break
            if ev.stream == 1 and ev.type == DATA:
                total += len(ev.payload)
            if ev.stream == 1 and ev.type in (DATA, HEADERS) and ev.has(END_STREAM):
                return total
        raise CaseFailed("expected a whole response to GET / to measure its body; saw %s"
                         % c.story())
    finally:
        c.close()


def need_body(c, n):
    """h2spec skips a flow-control case when the body is shorter: here that is a failure."""
    got = response_body_length(c.opts)
    if got < n:
        raise CaseFailed("cannot run: the case needs a response body of at least %d bytes to "
                         "GET /, the server sent %d (h2spec would skip it)" % (n, got))


# ---------------------------------------------------------------------------------------------
# HPACK by hand (RFC 7541 §5, §6): blocks a well-behaved encoder would never write
# ---------------------------------------------------------------------------------------------

_HUFFMAN = hpack.huffman.HuffmanEncoder(hpack.huffman_constants.REQUEST_CODES,
                                        hpack.huffman_constants.REQUEST_CODES_LENGTH)
EOS = 256


def hpack_int(value, prefix_bits, first=0):
    """An HPACK integer with an N-bit prefix; `first` holds the representation's high bits."""
    limit = (1 << prefix_bits) - 1
    if value < limit:
        return bytes([first | value])
    out = [first | limit]
    value -= limit
    while value >= 128:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    out.append(value)
    return bytes(out)


def hpack_str(s, huffman=False):
    raw = s.encode() if isinstance(s, str) else s
    if huffman:
        raw = _HUFFMAN.encode(raw)
    return hpack_int(len(raw), 7, 0x80 if huffman else 0) + raw


def huffman_bits(symbols):
    """The Huffman codes of `symbols` (byte values, or EOS) as (int, bit count), unpadded."""
    acc, nbits = 0, 0
    for sym in symbols:
        n = hpack.huffman_constants.REQUEST_CODES_LENGTH[sym]
        acc = (acc << n) | hpack.huffman_constants.REQUEST_CODES[sym]
        nbits += n
    return acc, nbits


def huffman_literal(symbols, pad_bit, extra_pad_bits=0):
    """A Huffman string literal padded to a byte with `pad_bit` (1 is legal), plus extra bits."""
    acc, nbits = huffman_bits(symbols)
    pad = (-nbits) % 8 + extra_pad_bits
    acc = (acc << pad) | (((1 << pad) - 1) if pad_bit else 0)
    raw = acc.to_bytes((nbits + pad) // 8, "big")
    return hpack_int(len(raw), 7, 0x80) + raw


def literal(name, value, kind, huffman=False):
    """A literal field: kind 'indexed' (0x40, 6-bit), 'plain' (0x00, 4-bit) or 'never' (0x10).

    `name` is a static-table index (int) or a new name (str).
    """
    first, bits = {"indexed": (0x40, 6), "plain": (0x00, 4), "never": (0x10, 4)}[kind]
    if isinstance(name, int):
        head = hpack_int(name, bits, first)
    else:
        head = bytes([first]) + hpack_str(name, huffman)
    return head + hpack_str(value, huffman)


USER_AGENT = 58  # static table: user-agent (no value)
ACCEPT_ENCODING_GZIP = 16  # static table: accept-encoding: gzip, deflate


def table_size_update(size):
    return hpack_int(size, 5, 0x20)


def past_the_table(c):
    """The first index past the static table and the dynamic entries the encoder has made."""
    return 62 + len(c.encoder.header_table.dynamic_entries)


def dummy_fields(n, length=DUMMY_LEN):
    return [("x-dummy%d" % i, "x" * length) for i in range(n)]


def post_open(c, stream=1, extra=()):
    """HEADERS of a POST on `stream`, body to follow."""
    c.headers(stream, c.encode(c.request_fields("POST") + list(extra)), end_stream=False)


def get_with(c, extra=(), replace=None, order=None):
    """HEADERS of a GET on stream 1 with extra fields; `replace` maps names to new values."""
    fields = c.request_fields()
    if replace:
        fields = [(k, replace.get(k, v)) for k, v in fields]
    fields += list(extra)
    c.headers(1, c.encode(order(fields) if order else fields))


PING_DATA = b"h2spec\x00\x00"
ZEROS = bytes(8)


# ---------------------------------------------------------------------------------------------
# The cases. Each takes a fresh connection (not yet handshaken) and raises CaseFailed to fail.
# ---------------------------------------------------------------------------------------------

# --- http2/3.5 HTTP/2 Connection Preface ---

def preface_first_frame_is_settings(c):
    c.send(PREFACE)
    c.settings((INITIAL_WINDOW_SIZE, DEFAULT_WINDOW))
    ev = c.next_event()
    if not (isinstance(ev, Frame) and ev.type == SETTINGS and not ev.has(ACK)):
        raise CaseFailed("expected SETTINGS (no ACK) as the server's first frame; saw %s" % ev)


def invalid_preface(c):
    """A deliberate difference from h2spec (which cannot parse an HTTP/1 answer and fails it): on
    cleartext, an HTTP/1 answer followed by the close passes unless --strict. A port that serves
    HTTP/1.1 and prior-knowledge HTTP/2 alike takes these bytes for an HTTP/1 request, and closing
    the connection is what the case asks for. Over TLS with ALPN h2 it does not pass."""
    c.send(b"INVALID CONNECTION PREFACE\r\n\r\n")

    def judge(ev):
        if isinstance(ev, Closed):
            return PASS
        if isinstance(ev, Frame) and ev.type == GOAWAY:
            return PASS if ev.code() == PROTOCOL_ERROR else (FAIL if c.opts.strict else None)
        if isinstance(ev, Garbage) and ev.http1_closed and not c.opts.tls and not c.opts.strict:
            return PASS
        return None
    expect(c, "GOAWAY(PROTOCOL_ERROR) or the connection closed", judge)


# --- http2/4.1 Frame Format ---

def unknown_frame_type(c):
    c.handshake()
    c.frame(UNKNOWN_TYPE, 0, 0, ZEROS)
    c.ping(PING_DATA)
    ping_ack(c, PING_DATA)


def undefined_flags(c):
    c.handshake()
    c.frame(PING, 0x16, 0, PING_DATA)  # 0x2, 0x4, 0x10: no meaning on PING, no ACK
    ping_ack(c, PING_DATA)


def reserved_bit(c):
    c.handshake()
    c.send(frame(PING, 0, 0, PING_DATA)[:5] + b"\x80\x00\x00\x00" + PING_DATA)
    ping_ack(c, PING_DATA)


# --- http2/4.2 Frame Size ---

def data_of_max_frame_size(c):
    c.handshake()
    post_open(c)
    c.data(1, b"x" * DEFAULT_FRAME_SIZE)
    response_headers(c)


def data_over_max_frame_size(c):
    c.handshake()
    size = c.max_frame_size() + 1
    if size > MAX_FRAME_LENGTH:
        raise CaseFailed("cannot run: the server takes frames of up to %d bytes, and no frame is "
                         "longer" % (size - 1))
    post_open(c)
    c.data(1, b"x" * size)
    stream_error(c, FRAME_SIZE_ERROR)


def headers_over_max_frame_size(c):
    c.handshake()
    limit = c.max_frame_size()
    n = limit // (DUMMY_LEN // 2) + 2  # each dummy field is at least DUMMY_LEN / 2 bytes
    block = c.encode(c.request_fields() + dummy_fields(n))
    if len(block) > MAX_FRAME_LENGTH:
        raise CaseFailed("cannot run: the server takes frames of up to %d bytes, and no frame is "
                         "longer" % limit)
    c.headers(1, block)
    connection_error(c, FRAME_SIZE_ERROR)


# --- http2/4.3 Header Compression and Decompression ---

def invalid_header_block(c):
    c.handshake()
    c.headers(1, b"\x40")  # a literal with a new name, cut before the name's length
    connection_error(c, COMPRESSION_ERROR)


def priority_inside_header_block(c):
    c.handshake()
    c.headers(1, c.request(), end_stream=False, end_headers=False)
    c.priority(1)
    c.continuation(1, c.encode(dummy_fields(1)))
    connection_error(c, PROTOCOL_ERROR)


def headers_to_other_stream_inside_header_block(c):
    c.handshake()
    c.headers(1, c.request(), end_stream=False, end_headers=False)
    c.headers(3, c.request())
    c.continuation(1, c.encode(dummy_fields(1)))
    connection_error(c, PROTOCOL_ERROR)


# --- http2/5.1.1 Stream Identifiers ---

def even_stream_id(c):
    c.handshake()
    c.headers(2, c.request())
    connection_error(c, PROTOCOL_ERROR)


def stream_id_smaller_than_previous(c):
    c.handshake()
    c.headers(5, c.request())
    c.headers(3, c.request())
    connection_error(c, PROTOCOL_ERROR)


# --- http2/5.1.2 Stream Concurrency ---

def over_max_concurrent_streams(c):
    c.handshake()
    limit = c.server_settings.get(MAX_CONCURRENT_STREAMS)
    if limit is None:
        raise CaseFailed("cannot run: the server advertised no SETTINGS_MAX_CONCURRENT_STREAMS "
                         "(h2spec would skip it)")
    if limit > 10000:
        raise CaseFailed("cannot run: SETTINGS_MAX_CONCURRENT_STREAMS %d is too many to open"
                         % limit)
    c.settings((INITIAL_WINDOW_SIZE, 0))  # responses stall: every stream stays open
    block = c.request()
    c.send(b"".join(frame(HEADERS, END_STREAM | END_HEADERS, 1 + 2 * i, block)
                    for i in range(limit + 1)))
    stream_error(c, PROTOCOL_ERROR, REFUSED_STREAM)


# --- http2/5.1 Stream States ---

def idle_data(c):
    c.handshake()
    c.data(1, b"test")
    stream_error(c, PROTOCOL_ERROR, STREAM_CLOSED)  # h2spec takes either, as a stream error


def idle_rst_stream(c):
    c.handshake()
    c.rst_stream(1, CANCEL)
    connection_error(c, PROTOCOL_ERROR)


def idle_window_update(c):
    c.handshake()
    c.window_update(1, 100)
    connection_error(c, PROTOCOL_ERROR)


def idle_continuation(c):
    c.handshake()
    c.continuation(1, c.request())
    connection_error(c, PROTOCOL_ERROR)


def half_closed_data(c):
    c.handshake()
    c.headers(1, c.request())
    c.data(1, b"test")
    stream_error(c, STREAM_CLOSED)


def half_closed_headers(c):
    c.handshake()
    c.headers(1, c.request())
    c.headers(1, c.request())
    stream_error(c, STREAM_CLOSED)


def half_closed_continuation(c):
    c.handshake()
    block = c.request()
    c.headers(1, block)
    c.continuation(1, block)
    stream_error(c, STREAM_CLOSED, PROTOCOL_ERROR)


def reset_then_data(c):
    c.handshake()
    c.headers(1, c.request(), end_stream=False)
    c.rst_stream(1, CANCEL)
    c.data(1, b"test")
    stream_error(c, STREAM_CLOSED)


def reset_then_headers(c):
    c.handshake()
    c.headers(1, c.request(), end_stream=False)
    c.rst_stream(1, CANCEL)
    c.headers(1, c.request())
    stream_error(c, STREAM_CLOSED)


def reset_then_continuation(c):
    c.handshake()
    c.headers(1, c.request(), end_stream=False)
    c.rst_stream(1, CANCEL)
    c.continuation(1, c.encode(dummy_fields(1)))
    stream_error(c, STREAM_CLOSED, PROTOCOL_ERROR)


def closed_data(c):
    c.handshake()
    c.headers(1, c.request())
    stream_closed(c)
    c.data(1, b"test")
    stream_error(c, STREAM_CLOSED)


def closed_headers(c):
    c.handshake()
    block = c.request()
    c.headers(1, block)
    stream_closed(c)
    c.headers(1, block)
    connection_error(c, STREAM_CLOSED)


def closed_continuation(c):
    c.handshake()
    c.headers(1, c.request())
    stream_closed(c)
    c.continuation(1, c.encode(dummy_fields(1)))
    connection_error(c, STREAM_CLOSED, PROTOCOL_ERROR)


# --- http2/5.3.1 Stream Dependencies ---

def headers_depending_on_itself(c):
    c.handshake()
    c.headers(1, c.request(), priority=priority_payload(1, 255))
    stream_error(c, PROTOCOL_ERROR)


def priority_depending_on_itself(c):
    c.handshake()
    c.priority(1, dep=1)
    stream_error(c, PROTOCOL_ERROR)


# --- http2/5.4.1 Connection Error Handling ---

def bad_ping_closes_connection(c):
    c.handshake()
    c.frame(PING, 0, 3, ZEROS)
    connection_closed(c)


def bad_ping_gets_goaway(c):
    """h2spec runs this one only with --strict: a connection error SHOULD send GOAWAY first."""
    c.handshake()
    c.frame(PING, 0, 3, ZEROS)
    expect(c, "GOAWAY before the close", first_of(GOAWAY, lambda f: True))


# --- http2/5.5 Extending HTTP/2 ---

def unknown_extension_frame(c):
    c.handshake()
    c.frame(UNKNOWN_TYPE, 0, 0, ZEROS)
    c.ping(PING_DATA)
    ping_ack(c, PING_DATA)


def unknown_extension_frame_inside_header_block(c):
    c.handshake()
    c.headers(1, c.request(), end_headers=False)
    c.frame(UNKNOWN_TYPE, 0, 0, ZEROS)
    connection_error(c, PROTOCOL_ERROR)


# --- http2/6.1 DATA ---

def data_on_stream_zero(c):
    c.handshake()
    c.data(0, b"test")
    connection_error(c, PROTOCOL_ERROR)


def data_on_half_closed_stream(c):
    c.handshake()
    c.headers(1, c.request("POST"))
    c.data(1, b"test")
    stream_error(c, STREAM_CLOSED)


def data_with_bad_pad_length(c):
    c.handshake()
    post_open(c, extra=[("content-length", "4")])
    c.frame(DATA, PADDED | END_STREAM, 1, b"\x06Test")  # 6 bytes of padding in a 5-byte frame
    connection_error(c, PROTOCOL_ERROR)


# --- http2/6.2 HEADERS ---

def headers_with_bad_pad_length(c):
    c.handshake()
    block = c.request()
    c.frame(HEADERS, PADDED | END_HEADERS | END_STREAM, 1, bytes([len(block) + 2]) + block)
    stream_error(c, PROTOCOL_ERROR)  # as h2spec judges it; §6.2 makes it a connection error


def headers_on_stream_zero(c):
    c.handshake()
    c.headers(0, c.request())
    connection_error(c, PROTOCOL_ERROR)


# --- http2/6.3 PRIORITY ---

def priority_on_stream_zero(c):
    c.handshake()
    c.priority(0)
    connection_error(c, PROTOCOL_ERROR)


def priority_of_wrong_length(c):
    c.handshake()
    c.headers(1, c.request())
    c.frame(PRIORITY, 0, 1, b"\x80\x00\x00\x01")
    stream_error(c, FRAME_SIZE_ERROR)


# --- http2/6.4 RST_STREAM ---

def rst_stream_on_stream_zero(c):
    c.handshake()
    c.rst_stream(0, CANCEL)
    connection_error(c, PROTOCOL_ERROR)


def rst_stream_on_idle_stream(c):
    c.handshake()
    c.rst_stream(1, CANCEL)
    connection_error(c, PROTOCOL_ERROR)


def rst_stream_of_wrong_length(c):
    c.handshake()
    c.headers(1, c.request())
    c.frame(RST_STREAM, 0, 1, b"\x00\x00\x00")
    stream_error(c, FRAME_SIZE_ERROR)  # as h2spec judges it; §6.4 makes it a connection error


# --- http2/6.5.2 Defined SETTINGS Parameters ---

def enable_push_of_two(c):
    c.handshake()
    c.settings((ENABLE_PUSH, 2))
    connection_error(c, PROTOCOL_ERROR)


def initial_window_over_max(c):
    c.handshake()
    c.settings((INITIAL_WINDOW_SIZE, 2**31))
    connection_error(c, FLOW_CONTROL_ERROR)


def max_frame_size_below_initial(c):
    c.handshake()
    c.settings((MAX_FRAME_SIZE, 16383))
    connection_error(c, PROTOCOL_ERROR)


def max_frame_size_over_max(c):
    c.handshake()
    c.settings((MAX_FRAME_SIZE, 2**24))
    connection_error(c, PROTOCOL_ERROR)


def unknown_setting(c):
    c.handshake()
    c.settings((0xFF, 1))
    c.ping(PING_DATA)
    ping_ack(c, PING_DATA)


# --- http2/6.5.3 Settings Synchronization ---

def settings_applied_in_order(c):
    need_body(c, 1)
    c.handshake()
    c.settings((INITIAL_WINDOW_SIZE, 100), (INITIAL_WINDOW_SIZE, 1))
    settings_ack(c)
    c.headers(1, c.request())
    data_of_length(c, 1)


def settings_acknowledged(c):
    c.handshake()
    c.settings((ENABLE_PUSH, 0))
    settings_ack(c)


# --- http2/6.5 SETTINGS ---

def settings_ack_with_payload(c):
    c.handshake()
    c.frame(SETTINGS, ACK, 0, b"\x00")
    connection_error(c, FRAME_SIZE_ERROR)


def settings_on_a_stream(c):
    c.handshake()
    c.frame(SETTINGS, 0, 1, settings_payload((MAX_CONCURRENT_STREAMS, 100)))
    connection_error(c, PROTOCOL_ERROR)


def settings_of_wrong_length(c):
    c.handshake()
    c.frame(SETTINGS, 0, 0, b"\x00\x03\x00")
    stream_error(c, PROTOCOL_ERROR, FRAME_SIZE_ERROR)  # h2spec's leniency


# --- http2/6.7 PING ---

def ping_answered(c):
    c.handshake()
    c.ping(PING_DATA)
    ping_ack(c, PING_DATA)


def ping_ack_not_answered(c):
    c.handshake()
    c.ping(b"invalid\x00", ack=True)
    c.ping(PING_DATA)
    ping_ack(c, PING_DATA)


def ping_on_a_stream(c):
    c.handshake()
    c.frame(PING, 0, 1, ZEROS)
    connection_error(c, PROTOCOL_ERROR)


def ping_of_wrong_length(c):
    c.handshake()
    c.frame(PING, 0, 0, bytes(6))
    connection_error(c, FRAME_SIZE_ERROR)


# --- http2/6.8 GOAWAY ---

def goaway_on_a_stream(c):
    c.handshake()
    c.frame(GOAWAY, 0, 1, bytes(8))
    connection_error(c, PROTOCOL_ERROR)


# --- http2/6.9.1 The Flow-Control Window ---

def window_of_one_byte(c):
    need_body(c, 1)
    c.handshake()
    c.settings((INITIAL_WINDOW_SIZE, 1))
    settings_ack(c)
    c.headers(1, c.request())
    data_of_length(c, 1)


def connection_window_overflow(c):
    c.handshake()
    c.window_update(0, MAX_WINDOW)
    c.window_update(0, MAX_WINDOW)
    expect(c, "GOAWAY(FLOW_CONTROL_ERROR)",
           first_of(GOAWAY, lambda f: f.code() == FLOW_CONTROL_ERROR))


def stream_window_overflow(c):
    c.handshake()
    c.headers(1, c.request(), end_stream=False)
    c.window_update(1, MAX_WINDOW)
    c.window_update(1, MAX_WINDOW)
    expect(c, "RST_STREAM(FLOW_CONTROL_ERROR) on stream 1",
           first_of(RST_STREAM, lambda f: f.stream == 1 and f.code() == FLOW_CONTROL_ERROR))


# --- http2/6.9.2 Initial Flow-Control Window Size ---

def initial_window_change_applies_to_open_streams(c):
    need_body(c, 1)
    c.handshake()
    c.settings((INITIAL_WINDOW_SIZE, 0))
    settings_ack(c)
    c.headers(1, c.request())
    c.settings((INITIAL_WINDOW_SIZE, 1))
    data_of_length(c, 1)


def negative_window(c):
    need_body(c, 5)
    c.handshake()
    c.settings((INITIAL_WINDOW_SIZE, 3))
    settings_ack(c)
    c.headers(1, c.request())
    any_frame(c, DATA)  # the 3 bytes the window allows: the window is now 0
    c.settings((INITIAL_WINDOW_SIZE, 2))  # ... and now -1
    settings_ack(c)
    c.window_update(1, 2)  # ... and now 1
    data_of_length(c, 1)


def initial_window_over_max_raw(c):
    c.handshake()
    c.frame(SETTINGS, 0, 0, b"\x00\x04\x80\x00\x00\x00")
    connection_error(c, FLOW_CONTROL_ERROR)


# --- http2/6.9 WINDOW_UPDATE ---

def window_update_of_zero(c):
    c.handshake()
    c.window_update(0, 0)
    connection_error(c, PROTOCOL_ERROR)


def window_update_of_zero_on_stream(c):
    c.handshake()
    c.headers(1, c.request(), end_stream=False)
    c.window_update(1, 0)
    stream_error(c, PROTOCOL_ERROR)


def window_update_of_wrong_length(c):
    c.handshake()
    c.frame(WINDOW_UPDATE, 0, 0, b"\x00\x00\x01")
    connection_error(c, FRAME_SIZE_ERROR)


# --- http2/6.10 CONTINUATION ---

def continuations_accepted(c):
    c.handshake()
    c.headers(1, c.request(), end_headers=False)
    c.continuation(1, c.encode(dummy_fields(1)), end_headers=False)
    c.continuation(1, c.encode(dummy_fields(1)))
    response_headers(c)


def continuation_then_data(c):
    c.handshake()
    c.headers(1, c.request("POST"), end_stream=False, end_headers=False)
    c.continuation(1, c.encode(dummy_fields(1)), end_headers=False)
    c.data(1, b"test")
    connection_error(c, PROTOCOL_ERROR)


def continuation_on_stream_zero(c):
    c.handshake()
    c.headers(1, c.request(), end_headers=False)
    c.continuation(0, c.encode(dummy_fields(1)))
    connection_error(c, PROTOCOL_ERROR)


def continuation_after_end_headers(c):
    c.handshake()
    c.headers(1, c.request())
    c.continuation(1, c.encode(dummy_fields(1)))
    connection_error(c, PROTOCOL_ERROR)


def continuation_after_ended_continuation(c):
    c.handshake()
    c.headers(1, c.request(), end_headers=False)
    c.continuation(1, c.encode(dummy_fields(1)))
    c.continuation(1, c.encode(dummy_fields(1)))
    connection_error(c, PROTOCOL_ERROR)


def continuation_after_data(c):
    c.handshake()
    c.headers(1, c.request("POST"), end_stream=False, end_headers=False)
    c.data(1, b"test")
    c.continuation(1, c.encode(dummy_fields(1)), end_headers=False)
    c.continuation(0, c.encode(dummy_fields(1)))
    connection_error(c, PROTOCOL_ERROR)


# --- http2/7 Error Codes ---

def goaway_with_unknown_code(c):
    c.handshake()
    c.goaway(0, 0xFF)
    c.ping(PING_DATA)
    ping_ack_or_closed(c, PING_DATA)


def rst_stream_with_unknown_code(c):
    c.handshake()
    post_open(c)
    c.rst_stream(1, 0xFF)
    c.ping(ZEROS)
    ping_ack_or_closed(c, ZEROS)


# --- http2/8.1.2.1 Pseudo-Header Fields ---

def unknown_pseudo_header(c):
    c.handshake()
    get_with(c, extra=[(":test", "ok")])
    stream_error(c, PROTOCOL_ERROR)


def response_pseudo_header_in_request(c):
    c.handshake()
    get_with(c, extra=[(":status", "200")])
    stream_error(c, PROTOCOL_ERROR)


def pseudo_header_in_trailers(c):
    c.handshake()
    post_open(c)
    c.data(1, b"test", end_stream=False)
    # h2spec leaves END_STREAM off these trailers, which breaks §8.1 too; with it on, only the
    # pseudo-header is wrong.
    c.headers(1, c.encode([(":method", "POST")]))
    stream_error(c, PROTOCOL_ERROR)


def pseudo_header_after_regular_field(c):
    c.handshake()
    get_with(c, extra=[("x-test", "ok")], order=lambda f: f[-1:] + f[:-1])
    stream_error(c, PROTOCOL_ERROR)


# --- http2/8.1.2.2 Connection-Specific Header Fields ---

def connection_specific_field(c):
    c.handshake()
    get_with(c, extra=[("connection", "keep-alive")])
    stream_error(c, PROTOCOL_ERROR)


def te_other_than_trailers(c):
    c.handshake()
    get_with(c, extra=[("te", "trailers, deflate")])
    stream_error(c, PROTOCOL_ERROR)


# --- http2/8.1.2.3 Request Pseudo-Header Fields ---

def without(name):
    return lambda fields: [f for f in fields if f[0] != name]


def empty_path(c):
    c.handshake()
    get_with(c, replace={":path": ""})
    stream_error(c, PROTOCOL_ERROR)


def omits_method(c):
    c.handshake()
    get_with(c, order=without(":method"))
    stream_error(c, PROTOCOL_ERROR)


def omits_scheme(c):
    c.handshake()
    get_with(c, order=without(":scheme"))
    stream_error(c, PROTOCOL_ERROR)


def omits_path(c):
    c.handshake()
    get_with(c, order=without(":path"))
    stream_error(c, PROTOCOL_ERROR)


def duplicated_method(c):
    c.handshake()
    get_with(c, extra=[(":method", "GET")])
    stream_error(c, PROTOCOL_ERROR)


def duplicated_scheme(c):
    c.handshake()
    get_with(c, extra=[(":scheme", c.scheme)])
    stream_error(c, PROTOCOL_ERROR)


def duplicated_path(c):
    c.handshake()
    get_with(c, extra=[(":path", "/")])
    stream_error(c, PROTOCOL_ERROR)


# --- http2/8.1.2.6 Malformed Requests and Responses ---

def content_length_unlike_data(c):
    c.handshake()
    post_open(c, extra=[("content-length", "1")])
    c.data(1, b"test")
    stream_error(c, PROTOCOL_ERROR)


def content_length_unlike_sum_of_data(c):
    c.handshake()
    post_open(c, extra=[("content-length", "1")])
    c.data(1, b"test", end_stream=False)
    c.data(1, b"test")
    stream_error(c, PROTOCOL_ERROR)


# --- http2/8.1.2 HTTP Header Fields ---

def uppercase_field_name(c):
    c.handshake()
    get_with(c, extra=[("X-TEST", "ok")])
    stream_error(c, PROTOCOL_ERROR)


# --- http2/8.1 HTTP Request/Response Exchange ---

def second_headers_without_end_stream(c):
    c.handshake()
    post_open(c)
    c.data(1, b"test", end_stream=False)
    c.headers(1, c.encode([("x-test", "ok")]), end_stream=False)
    stream_error(c, PROTOCOL_ERROR)


# --- http2/8.2 Server Push ---

def push_promise_from_client(c):
    c.handshake()
    c.frame(PUSH_PROMISE, END_HEADERS, 1, struct.pack(">I", 3) + c.request())
    connection_error(c, PROTOCOL_ERROR)


# --- hpack ---

def get_then(c, rep, before=False):
    """GET on stream 1 whose header block has the bytes `rep` after (or before) the fields."""
    block = c.request()
    c.headers(1, rep + block if before else block + rep)


def indexed_past_the_table(c):
    c.handshake()
    block = c.request()
    c.headers(1, block + hpack_int(past_the_table(c), 7, 0x80))
    connection_error(c, COMPRESSION_ERROR)


def literal_name_past_the_table(c):
    c.handshake()
    block = c.request()
    c.headers(1, block + hpack_int(past_the_table(c), 6, 0x40) + hpack_str("x"))
    connection_error(c, COMPRESSION_ERROR)


def table_size_update_at_end(c):
    c.handshake()
    get_then(c, table_size_update(1))
    connection_error(c, COMPRESSION_ERROR)


def huffman_padding_over_7_bits(c):
    c.handshake()
    get_then(c, b"\x00" + hpack_str("x-test", True)
             + huffman_literal(b"h2spec", pad_bit=1, extra_pad_bits=8))
    connection_error(c, COMPRESSION_ERROR)


def huffman_padded_with_zeros(c):
    c.handshake()
    # "test" ends 4 bits short of a byte. Padded with 4 zero bits, which decode to no symbol
    # (the shortest codes are 5 bits): only a decoder that checks the padding sees the error.
    value = b"test"
    assert 1 <= (-huffman_bits(value)[1]) % 8 <= 4
    get_then(c, b"\x00" + hpack_str("x-test", True) + huffman_literal(value, pad_bit=0))
    connection_error(c, COMPRESSION_ERROR)


def huffman_with_eos(c):
    c.handshake()
    get_then(c, b"\x00" + hpack_str("x-test", True)
             + huffman_literal([ord("h"), EOS, ord("2")], pad_bit=1))
    connection_error(c, COMPRESSION_ERROR)


def indexed_zero(c):
    c.handshake()
    get_then(c, b"\x80")
    connection_error(c, COMPRESSION_ERROR)


def table_size_update_over_setting(c):
    c.handshake()
    limit = c.server_settings.get(HEADER_TABLE_SIZE, 4096)
    get_then(c, table_size_update(limit + 1), before=True)
    connection_error(c, COMPRESSION_ERROR)


# --- generic/1 and generic/2 ---

def priority_on_idle_stream(c):
    c.handshake()
    c.priority(1)
    c.ping(ZEROS)
    ping_ack(c, ZEROS)


def window_update_on_half_closed(c):
    c.handshake()
    c.settings((INITIAL_WINDOW_SIZE, 0))
    c.headers(1, c.request())
    c.window_update(1, 1)
    any_frame(c, DATA)


def priority_on_half_closed(c):
    c.handshake()
    c.settings((INITIAL_WINDOW_SIZE, 0))
    c.headers(1, c.request())
    c.priority(1)
    c.window_update(1, 1)
    any_frame(c, DATA)


def rst_stream_on_half_closed(c):
    c.handshake()
    c.headers(1, c.request())
    c.rst_stream(1, CANCEL)
    c.ping(ZEROS)
    ping_ack_or_closed(c, ZEROS)


def priority_on_closed(c):
    c.handshake()
    c.headers(1, c.request())
    stream_closed(c)
    c.priority(1)
    c.ping(ZEROS)
    ping_ack(c, ZEROS)


# --- generic/3 Frame Definitions ---

def post_with_data(c):
    c.handshake()
    post_open(c)
    c.data(1, b"test")
    response_headers(c)


def post_with_two_data(c):
    c.handshake()
    post_open(c)
    c.data(1, b"test", end_stream=False)
    c.data(1, b"test")
    response_headers(c)


def post_with_padded_data(c):
    c.handshake()
    post_open(c)
    c.data(1, b"test", pad=bytes(5))
    response_headers(c)


def plain_get(c):
    c.handshake()
    c.headers(1, c.request())
    response_headers(c)


def get_with_padding(c):
    c.handshake()
    c.headers(1, c.request(), pad=bytes(8))
    response_headers(c)


def get_with_priority(c):
    c.handshake()
    c.headers(1, c.request(), priority=priority_payload(0, 255))
    response_headers(c)


def priority_then_get(stream, dep, weight, exclusive=False):
    def case(c):
        c.handshake()
        c.priority(stream, dep=dep, weight=weight, exclusive=exclusive)
        c.headers(1, c.request())
        response_headers(c)
    return case


def rst_stream_on_open(c):
    c.handshake()
    c.headers(1, c.request(), end_stream=False)
    c.rst_stream(1, CANCEL)
    c.ping(ZEROS)
    ping_ack_or_closed(c, ZEROS)


def every_setting(c):
    c.handshake()
    c.settings((HEADER_TABLE_SIZE, 4096), (ENABLE_PUSH, 1), (MAX_CONCURRENT_STREAMS, 100),
               (INITIAL_WINDOW_SIZE, DEFAULT_WINDOW), (MAX_FRAME_SIZE, 16384),
               (MAX_HEADER_LIST_SIZE, 100))
    settings_ack(c)


def goaway_then_ping(c):
    c.handshake()
    c.goaway(0, NO_ERROR, b"h2spec")
    c.ping(PING_DATA)
    ping_ack_or_closed(c, PING_DATA)


def connection_window_update(c):
    c.handshake()
    c.window_update(0, 1)
    c.ping(ZEROS)
    ping_ack(c, ZEROS)


def stream_window_update(c):
    c.handshake()
    c.headers(1, c.request())
    c.window_update(1, 1)
    response_headers(c)


def split_header_block(*cuts):
    def case(c):
        c.handshake()
        block = c.request()
        bounds = [0] + [min(cut, len(block) - 1) for cut in cuts] + [len(block)]
        parts = [block[a:b] for a, b in zip(bounds, bounds[1:])]
        c.headers(1, parts[0], end_headers=False)
        for i, part in enumerate(parts[1:], 1):
            c.continuation(1, part, end_headers=i == len(parts) - 1)
        response_headers(c)
    return case


# --- generic/4 HTTP Message Exchanges ---

def head_request(c):
    c.handshake()
    c.headers(1, c.request("HEAD"))
    response_headers(c)


def post_with_trailers(c):
    c.handshake()
    post_open(c, extra=[("trailer", "x-test")])
    c.data(1, b"test", end_stream=False)
    c.headers(1, c.encode([("x-test", "ok")]))
    response_headers(c)


# --- generic/5 HPACK ---

def get_with_rep(rep_of):
    """GET on stream 1 with one hand-made representation after the usual fields."""
    def case(c):
        c.handshake()
        get_then(c, rep_of())
        response_headers(c)
    return case


def get_after_table_size_update(c):
    c.handshake()
    c.encoder.header_table_size = 128  # the encoder writes the update, then fits in it
    c.headers(1, c.request())
    response_headers(c)


def get_after_two_table_size_updates(c):
    c.handshake()
    # 128 then back to 4096: the encoder's table (4096, empty) is what the decoder ends with.
    get_then(c, table_size_update(128) + table_size_update(4096), before=True)
    response_headers(c)


# ---------------------------------------------------------------------------------------------
# The table: id (group/section/index, index in the order of h2spec-cases.md), description, case
# ---------------------------------------------------------------------------------------------

CASES = [
    ("http2/3.5/1", "Sends client connection preface", preface_first_frame_is_settings),
    ("http2/3.5/2", "Sends invalid connection preface", invalid_preface),
    ("http2/4.1/1", "Sends a frame with unknown type", unknown_frame_type),
    ("http2/4.1/2", "Sends a frame with undefined flag", undefined_flags),
    ("http2/4.1/3", "Sends a frame with reserved field bit", reserved_bit),
    ("http2/4.2/1", "Sends a DATA frame with 2^14 octets in length", data_of_max_frame_size),
    ("http2/4.2/2", "Sends a large size DATA frame that exceeds the SETTINGS_MAX_FRAME_SIZE",
     data_over_max_frame_size),
    ("http2/4.2/3", "Sends a large size HEADERS frame that exceeds the SETTINGS_MAX_FRAME_SIZE",
     headers_over_max_frame_size),
    ("http2/4.3/1", "Sends invalid header block fragment", invalid_header_block),
    ("http2/4.3/2", "Sends a PRIORITY frame while sending the header blocks",
     priority_inside_header_block),
    ("http2/4.3/3", "Sends a HEADERS frame to another stream while sending the header blocks",
     headers_to_other_stream_inside_header_block),
    ("http2/5.1.1/1", "Sends even-numbered stream identifier", even_stream_id),
    ("http2/5.1.1/2", "Sends stream identifier that is numerically smaller than previous",
     stream_id_smaller_than_previous),
    ("http2/5.1.2/1", "Sends HEADERS frames that causes their advertised concurrent stream "
     "limit to be exceeded", over_max_concurrent_streams),
    ("http2/5.1/1", "idle: Sends a DATA frame", idle_data),
    ("http2/5.1/2", "idle: Sends a RST_STREAM frame", idle_rst_stream),
    ("http2/5.1/3", "idle: Sends a WINDOW_UPDATE frame", idle_window_update),
    ("http2/5.1/4", "idle: Sends a CONTINUATION frame", idle_continuation),
    ("http2/5.1/5", "half closed (remote): Sends a DATA frame", half_closed_data),
    ("http2/5.1/6", "half closed (remote): Sends a HEADERS frame", half_closed_headers),
    ("http2/5.1/7", "half closed (remote): Sends a CONTINUATION frame", half_closed_continuation),
    ("http2/5.1/8", "closed: Sends a DATA frame after sending RST_STREAM frame", reset_then_data),
    ("http2/5.1/9", "closed: Sends a HEADERS frame after sending RST_STREAM frame",
     reset_then_headers),
    ("http2/5.1/10", "closed: Sends a CONTINUATION frame after sending RST_STREAM frame",
     reset_then_continuation),
    ("http2/5.1/11", "closed: Sends a DATA frame", closed_data),
    ("http2/5.1/12", "closed: Sends a HEADERS frame", closed_headers),
    ("http2/5.1/13", "closed: Sends a CONTINUATION frame", closed_continuation),
    ("http2/5.3.1/1", "Sends HEADERS frame that depends on itself", headers_depending_on_itself),
    ("http2/5.3.1/2", "Sends PRIORITY frame that depend on itself", priority_depending_on_itself),
    ("http2/5.4.1/1", "Sends an invalid PING frame for connection close",
     bad_ping_closes_connection),
    ("http2/5.4.1/2", "Sends an invalid PING frame to receive GOAWAY frame",
     bad_ping_gets_goaway),
    ("http2/5.5/1", "Sends an unknown extension frame", unknown_extension_frame),
    ("http2/5.5/2", "Sends an unknown extension frame in the middle of a header block",
     unknown_extension_frame_inside_header_block),
    ("http2/6.1/1", "Sends a DATA frame with 0x0 stream identifier", data_on_stream_zero),
    ("http2/6.1/2", "Sends a DATA frame on the stream that is not in \"open\" or "
     "\"half-closed (local)\" state", data_on_half_closed_stream),
    ("http2/6.1/3", "Sends a DATA frame with invalid pad length", data_with_bad_pad_length),
    ("http2/6.2/1", "Sends a HEADERS frame without the END_HEADERS flag, and a PRIORITY frame",
     priority_inside_header_block),
    ("http2/6.2/2", "Sends a HEADERS frame to another stream while sending a HEADERS frame",
     headers_to_other_stream_inside_header_block),
    ("http2/6.2/3", "Sends a HEADERS frame with 0x0 stream identifier", headers_on_stream_zero),
    ("http2/6.2/4", "Sends a HEADERS frame with invalid pad length", headers_with_bad_pad_length),
    ("http2/6.3/1", "Sends a PRIORITY frame with 0x0 stream identifier", priority_on_stream_zero),
    ("http2/6.3/2", "Sends a PRIORITY frame with a length other than 5 octets",
     priority_of_wrong_length),
    ("http2/6.4/1", "Sends a RST_STREAM frame with 0x0 stream identifier",
     rst_stream_on_stream_zero),
    ("http2/6.4/2", "Sends a RST_STREAM frame on a idle stream", rst_stream_on_idle_stream),
    ("http2/6.4/3", "Sends a RST_STREAM frame with a length other than 4 octets",
     rst_stream_of_wrong_length),
    ("http2/6.5.2/1", "SETTINGS_ENABLE_PUSH (0x2): Sends the value other than 0 or 1",
     enable_push_of_two),
    ("http2/6.5.2/2", "SETTINGS_INITIAL_WINDOW_SIZE (0x4): Sends the value above the maximum "
     "flow control window size", initial_window_over_max),
    ("http2/6.5.2/3", "SETTINGS_MAX_FRAME_SIZE (0x5): Sends the value below the initial value",
     max_frame_size_below_initial),
    ("http2/6.5.2/4", "SETTINGS_MAX_FRAME_SIZE (0x5): Sends the value above the maximum allowed "
     "frame size", max_frame_size_over_max),
    ("http2/6.5.2/5", "Sends a SETTINGS frame with unknown identifier", unknown_setting),
    ("http2/6.5.3/1", "Sends multiple values of SETTINGS_INITIAL_WINDOW_SIZE",
     settings_applied_in_order),
    ("http2/6.5.3/2", "Sends a SETTINGS frame without ACK flag", settings_acknowledged),
    ("http2/6.5/1", "Sends a SETTINGS frame with ACK flag and payload", settings_ack_with_payload),
    ("http2/6.5/2", "Sends a SETTINGS frame with a stream identifier other than 0x0",
     settings_on_a_stream),
    ("http2/6.5/3", "Sends a SETTINGS frame with a length other than a multiple of 6 octets",
     settings_of_wrong_length),
    ("http2/6.7/1", "Sends a PING frame", ping_answered),
    ("http2/6.7/2", "Sends a PING frame with ACK", ping_ack_not_answered),
    ("http2/6.7/3", "Sends a PING frame with a stream identifier field value other than 0x0",
     ping_on_a_stream),
    ("http2/6.7/4", "Sends a PING frame with a length field value other than 8",
     ping_of_wrong_length),
    ("http2/6.8/1", "Sends a GOAWAY frame with a stream identifier other than 0x0",
     goaway_on_a_stream),
    ("http2/6.9.1/1", "Sends SETTINGS frame to set the initial window size to 1 and sends "
     "HEADERS frame", window_of_one_byte),
    ("http2/6.9.1/2", "Sends multiple WINDOW_UPDATE frames increasing the flow control window "
     "to above 2^31-1", connection_window_overflow),
    ("http2/6.9.1/3", "Sends multiple WINDOW_UPDATE frames increasing the flow control window "
     "to above 2^31-1 on a stream", stream_window_overflow),
    ("http2/6.9.2/1", "Changes SETTINGS_INITIAL_WINDOW_SIZE after sending HEADERS frame",
     initial_window_change_applies_to_open_streams),
    ("http2/6.9.2/2", "Sends a SETTINGS frame for window size to be negative", negative_window),
    ("http2/6.9.2/3", "Sends a SETTINGS_INITIAL_WINDOW_SIZE settings with an exceeded maximum "
     "window size value", initial_window_over_max_raw),
    ("http2/6.9/1", "Sends a WINDOW_UPDATE frame with a flow control window increment of 0",
     window_update_of_zero),
    ("http2/6.9/2", "Sends a WINDOW_UPDATE frame with a flow control window increment of 0 on "
     "a stream", window_update_of_zero_on_stream),
    ("http2/6.9/3", "Sends a WINDOW_UPDATE frame with a length other than 4 octets",
     window_update_of_wrong_length),
    ("http2/6.10/1", "Sends multiple CONTINUATION frames preceded by a HEADERS frame",
     continuations_accepted),
    ("http2/6.10/2", "Sends a CONTINUATION frame followed by any frame other than CONTINUATION",
     continuation_then_data),
    ("http2/6.10/3", "Sends a CONTINUATION frame with 0x0 stream identifier",
     continuation_on_stream_zero),
    ("http2/6.10/4", "Sends a CONTINUATION frame preceded by a HEADERS frame with END_HEADERS "
     "flag", continuation_after_end_headers),
    ("http2/6.10/5", "Sends a CONTINUATION frame preceded by a CONTINUATION frame with "
     "END_HEADERS flag", continuation_after_ended_continuation),
    ("http2/6.10/6", "Sends a CONTINUATION frame preceded by a DATA frame",
     continuation_after_data),
    ("http2/7/1", "Sends a GOAWAY frame with unknown error code", goaway_with_unknown_code),
    ("http2/7/2", "Sends a RST_STREAM frame with unknown error code",
     rst_stream_with_unknown_code),
    ("http2/8.1.2.1/1", "Sends a HEADERS frame that contains a unknown pseudo-header field",
     unknown_pseudo_header),
    ("http2/8.1.2.1/2", "Sends a HEADERS frame that contains the pseudo-header field defined "
     "for response", response_pseudo_header_in_request),
    ("http2/8.1.2.1/3", "Sends a HEADERS frame that contains a pseudo-header field as trailers",
     pseudo_header_in_trailers),
    ("http2/8.1.2.1/4", "Sends a HEADERS frame that contains a pseudo-header field that appears "
     "in a header block after a regular header field", pseudo_header_after_regular_field),
    ("http2/8.1.2.2/1", "Sends a HEADERS frame that contains the connection-specific header "
     "field", connection_specific_field),
    ("http2/8.1.2.2/2", "Sends a HEADERS frame that contains the TE header field with any value "
     "other than \"trailers\"", te_other_than_trailers),
    ("http2/8.1.2.3/1", "Sends a HEADERS frame with empty \":path\" pseudo-header field",
     empty_path),
    ("http2/8.1.2.3/2", "Sends a HEADERS frame that omits \":method\" pseudo-header field",
     omits_method),
    ("http2/8.1.2.3/3", "Sends a HEADERS frame that omits \":scheme\" pseudo-header field",
     omits_scheme),
    ("http2/8.1.2.3/4", "Sends a HEADERS frame that omits \":path\" pseudo-header field",
     omits_path),
    ("http2/8.1.2.3/5", "Sends a HEADERS frame with duplicated \":method\" pseudo-header field",
     duplicated_method),
    ("http2/8.1.2.3/6", "Sends a HEADERS frame with duplicated \":scheme\" pseudo-header field",
     duplicated_scheme),
    ("http2/8.1.2.3/7", "Sends a HEADERS frame with duplicated \":path\" pseudo-header field",
     duplicated_path),
    ("http2/8.1.2.6/1", "Sends a HEADERS frame with the \"content-length\" header field which "
     "does not equal the DATA frame payload length", content_length_unlike_data),
    ("http2/8.1.2.6/2", "Sends a HEADERS frame with the \"content-length\" header field which "
     "does not equal the sum of the multiple DATA frames payload length",
     content_length_unlike_sum_of_data),
    ("http2/8.1.2/1", "Sends a HEADERS frame that contains the header field name in uppercase "
     "letters", uppercase_field_name),
    ("http2/8.1/1", "Sends a second HEADERS frame without the END_STREAM flag",
     second_headers_without_end_stream),
    ("http2/8.2/1", "Sends a PUSH_PROMISE frame", push_promise_from_client),
    ("hpack/2.3.3/1", "Sends a indexed header field representation with invalid index",
     indexed_past_the_table),
    ("hpack/2.3.3/2", "Sends a literal header field representation with invalid index",
     literal_name_past_the_table),
    ("hpack/4.2/1", "Sends a dynamic table size update at the end of header block",
     table_size_update_at_end),
    ("hpack/5.2/1", "Sends a Huffman-encoded string literal representation with padding longer "
     "than 7 bits", huffman_padding_over_7_bits),
    ("hpack/5.2/2", "Sends a Huffman-encoded string literal representation padded by zero",
     huffman_padded_with_zeros),
    ("hpack/5.2/3", "Sends a Huffman-encoded string literal representation containing the EOS "
     "symbol", huffman_with_eos),
    ("hpack/6.1/1", "Sends a indexed header field representation with index 0", indexed_zero),
    ("hpack/6.3/1", "Sends a dynamic table size update larger than the value of "
     "SETTINGS_HEADER_TABLE_SIZE", table_size_update_over_setting),
    ("generic/1/1", "Sends a client connection preface", preface_first_frame_is_settings),
    ("generic/2/1", "Sends a PRIORITY frame on idle stream", priority_on_idle_stream),
    ("generic/2/2", "Sends a WINDOW_UPDATE frame on half-closed (remote) stream",
     window_update_on_half_closed),
    ("generic/2/3", "Sends a PRIORITY frame on half-closed (remote) stream",
     priority_on_half_closed),
    ("generic/2/4", "Sends a RST_STREAM frame on half-closed (remote) stream",
     rst_stream_on_half_closed),
    ("generic/2/5", "Sends a PRIORITY frame on closed stream", priority_on_closed),
    ("generic/3.1/1", "Sends a DATA frame", post_with_data),
    ("generic/3.1/2", "Sends multiple DATA frames", post_with_two_data),
    ("generic/3.1/3", "Sends a DATA frame with padding", post_with_padded_data),
    ("generic/3.2/1", "Sends a HEADERS frame", plain_get),
    ("generic/3.2/2", "Sends a HEADERS frame with padding", get_with_padding),
    ("generic/3.2/3", "Sends a HEADERS frame with priority", get_with_priority),
    ("generic/3.3/1", "Sends a PRIORITY frame with priority 1", priority_then_get(1, 0, 0)),
    ("generic/3.3/2", "Sends a PRIORITY frame with priority 256", priority_then_get(1, 0, 255)),
    ("generic/3.3/3", "Sends a PRIORITY frame with stream dependency",
     priority_then_get(3, 1, 0)),
    ("generic/3.3/4", "Sends a PRIORITY frame with exclusive", priority_then_get(1, 0, 0, True)),
    ("generic/3.3/5", "Sends a PRIORITY frame for an idle stream, then send a HEADER frame for a "
     "lower stream ID", priority_then_get(3, 0, 255)),
    ("generic/3.4/1", "Sends a RST_STREAM frame", rst_stream_on_open),
    ("generic/3.5/1", "Sends a SETTINGS frame", every_setting),
    ("generic/3.7/1", "Sends a PING frame", ping_answered),
    ("generic/3.8/1", "Sends a GOAWAY frame", goaway_then_ping),
    ("generic/3.9/1", "Sends a WINDOW_UPDATE frame with stream ID 0", connection_window_update),
    ("generic/3.9/2", "Sends a WINDOW_UPDATE frame with stream ID 1", stream_window_update),
    ("generic/3.10/1", "Sends a CONTINUATION frame", split_header_block(5)),
    ("generic/3.10/2", "Sends multiple CONTINUATION frames", split_header_block(5, 10)),
    ("generic/4/1", "Sends a GET request", plain_get),
    ("generic/4/2", "Sends a HEAD request", head_request),
    ("generic/4/3", "Sends a POST request", post_with_data),
    ("generic/4/4", "Sends a POST request with trailers", post_with_trailers),
    ("generic/5/1", "Sends a indexed header field representation",
     get_with_rep(lambda: hpack_int(ACCEPT_ENCODING_GZIP, 7, 0x80))),
    ("generic/5/2", "Sends a literal header field with incremental indexing - indexed name",
     get_with_rep(lambda: literal(USER_AGENT, "h2spec", "indexed"))),
    ("generic/5/3", "Sends a literal header field with incremental indexing - indexed name "
     "(with Huffman coding)", get_with_rep(lambda: literal(USER_AGENT, "h2spec", "indexed", True))),
    ("generic/5/4", "Sends a literal header field with incremental indexing - new name",
     get_with_rep(lambda: literal("x-test", "h2spec", "indexed"))),
    ("generic/5/5", "Sends a literal header field with incremental indexing - new name (with "
     "Huffman coding)", get_with_rep(lambda: literal("x-test", "h2spec", "indexed", True))),
    ("generic/5/6", "Sends a literal header field without indexing - indexed name",
     get_with_rep(lambda: literal(USER_AGENT, "h2spec", "plain"))),
    ("generic/5/7", "Sends a literal header field without indexing - indexed name (with Huffman "
     "coding)", get_with_rep(lambda: literal(USER_AGENT, "h2spec", "plain", True))),
    ("generic/5/8", "Sends a literal header field without indexing - new name",
     get_with_rep(lambda: literal("x-test", "h2spec", "plain"))),
    ("generic/5/9", "Sends a literal header field without indexing - new name (huffman "
     "encoded)", get_with_rep(lambda: literal("x-test", "h2spec", "plain", True))),
    ("generic/5/10", "Sends a literal header field never indexed - indexed name",
     get_with_rep(lambda: literal(USER_AGENT, "h2spec", "never"))),
    ("generic/5/11", "Sends a literal header field never indexed - indexed name (huffman "
     "encoded)", get_with_rep(lambda: literal(USER_AGENT, "h2spec", "never", True))),
    ("generic/5/12", "Sends a literal header field never indexed - new name",
     get_with_rep(lambda: literal("x-test", "h2spec", "never"))),
    ("generic/5/13", "Sends a literal header field never indexed - new name (huffman encoded)",
     get_with_rep(lambda: literal("x-test", "h2spec", "never", True))),
    ("generic/5/14", "Sends a dynamic table size update", get_after_table_size_update),
    ("generic/5/15", "Sends multiple dynamic table size update", get_after_two_table_size_updates),
]


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------

def run_case(opts, ident):
    """(passed, message) of one case on a connection of its own."""
    fn = dict((i, f) for i, _, f in CASES)[ident]
    c = None
    try:
        c = Conn(opts)
        fn(c)
        return True, "passed"
    except CaseFailed as e:
        return False, str(e)
    except (OSError, ssl.SSLError) as e:
        return False, "could not talk to %s:%d: %s" % (opts.host, opts.port, e)
    finally:
        if c is not None:
            c.close()


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int)
    p.add_argument("--tls", action="store_true", help="TLS with ALPN h2, certificate unchecked")
    p.add_argument("--authority", help=":authority of requests (default HOST:PORT)")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds one read waits (2)")
    p.add_argument("--strict", action="store_true",
                   help="fail a GOAWAY or RST_STREAM that carries an unexpected code")
    p.add_argument("-v", "--verbose", action="store_true", help="print the frames received")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--case", help="one case id, as --list prints them")
    what.add_argument("--all", action="store_true", help="every case, then a summary")
    what.add_argument("--list", action="store_true", help="print every case id")
    opts = p.parse_args(argv)
    if opts.list:
        for ident, desc, _ in CASES:
            print("%-18s %s" % (ident, desc))
        return 0
    if opts.port is None:
        p.error("--port is needed to run cases")
    if opts.case:
        if opts.case not in {i for i, _, _ in CASES}:
            p.error("no case %r (see --list)" % opts.case)
        passed, message = run_case(opts, opts.case)
        print("%s %s: %s" % ("PASS" if passed else "FAIL", opts.case, message))
        return 0 if passed else 1
    failed = []
    for ident, desc, _ in CASES:
        passed, message = run_case(opts, ident)
        print("%s %-18s %s%s" % ("PASS" if passed else "FAIL", ident, desc,
                                 "" if passed else "\n     " + message), flush=True)
        if not passed:
            failed.append(ident)
    print("%d/%d passed%s" % (len(CASES) - len(failed), len(CASES),
                              "; failed: " + " ".join(failed) if failed else ""))
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
