#!/usr/bin/python3
"""The request-smuggling corpus with an HTTP/2 front: each case's method, target and header fields,
sent as they are (names and values byte for byte, no checks by the client) as one HTTP/2 request on
a connection of its own, with `x-case: N` added so the server's side can tell the requests apart.

  desync.py --port P --cases FILE

FILE: one case a line, space-separated tokens, each `h` and the hex of its bytes: METHOD TARGET
BODY_LEN then NAME VALUE pairs.
Prints one line a case: `case N status S`, `case N reset CODE`, `case N goaway CODE` or
`case N closed`. Bounded: 3 s a case."""

import argparse
import socket
import time

import hpack


def frame(kind, flags, sid, payload):
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + sid.to_bytes(4, "big") + payload


def run(port, n, method, target, body_len, fields):
    s = socket.create_connection(("127.0.0.1", port), timeout=3)
    enc = hpack.Encoder()
    headers = [(b":method", method), (b":scheme", b"http"), (b":path", target),
               (b":authority", b"corpus.test")] + fields + [(b"x-case", str(n).encode())]
    # Literal fields, never indexed, names as given (hpack's encoder would lowercase nothing,
    # but its table is not wanted here).
    block = b""
    for name, value in headers:
        block += b"\x00" + hpack_str(name) + hpack_str(value)
    out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0, b"")
    if body_len:
        out += frame(1, 4, 1, block) + frame(0, 1, 1, b"x" * body_len)
    else:
        out += frame(1, 5, 1, block)
    s.sendall(out)
    buf = b""
    deadline = time.time() + 3
    while time.time() < deadline:
        try:
            data = s.recv(65536)
        except (socket.timeout, ConnectionResetError):
            data = b""
        if not data:
            return "closed"
        buf += data
        while len(buf) >= 9:
            flen = int.from_bytes(buf[0:3], "big")
            if len(buf) < 9 + flen:
                break
            kind, sid, payload = buf[3], int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF, buf[9:9 + flen]
            buf = buf[9 + flen:]
            if kind == 1 and sid == 1:
                fields = hpack.Decoder().decode(payload, raw=True)
                return "status " + dict(fields)[b":status"].decode()
            if kind == 3 and sid == 1:
                return "reset %d" % int.from_bytes(payload[:4], "big")
            if kind == 7:
                return "goaway %d" % int.from_bytes(payload[4:8], "big")
    return "closed"


def hpack_str(b):
    n = len(b)
    if n < 127:
        return bytes([n]) + b
    out = bytes([127])
    n -= 127
    while n >= 128:
        out += bytes([(n % 128) | 128])
        n //= 128
    return out + bytes([n])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--cases", required=True)
    a = ap.parse_args()
    for n, line in enumerate(open(a.cases)):
        parts = [bytes.fromhex(p[1:]) for p in line.split()]
        method, target, body_len = parts[0], parts[1], int(parts[2].decode() or "0")
        fields = list(zip(parts[3::2], parts[4::2]))
        try:
            print("case %d %s" % (n, run(a.port, n, method, target, body_len, fields)), flush=True)
        except OSError as e:
            print("case %d closed (%s)" % (n, e), flush=True)


main()
