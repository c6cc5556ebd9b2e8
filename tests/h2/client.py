#!/usr/bin/python3
"""A small HTTP/2 client for Quill's tests (Debian's python3-h2): sends the requests it is given
on one connection, all at once (multiplexed), and prints what came back, one fact a line (for the Rust tests to read without a JSON parser):

  stream 1 interim 100
  stream 1 status 200
  stream 1 header NAME: VALUE
  stream 1 body_len N
  stream 1 body_sha256 HEX
  stream 1 body_hex HEX          (the first 4 KiB)
  stream 1 trailer NAME: VALUE
  stream 1 reset CODE
  stream 1 ended
  goaway CODE LAST_STREAM
  closed
  error TEXT

  client.py --port P [--host H] [--tls] [--sni NAME] [--authority A] [--timeout S] [--linger S]
            --request 'METHOD PATH [AUTHORITY]' [--header 'name: value']... [--body-bytes N] [--no-length]
            [--request ...]... [--then-after FILE --then 'METHOD PATH'...]

Headers are sent as given (upper case, connection fields and all: the client does not check
them, so a test can send what a conformant client never would). --linger S: after every
response ended, keep reading S seconds more (to see a GOAWAY or the close). --body-bytes N sends N pattern
bytes as DATA in 16 KiB frames (with content-length unless --no-length). --then: requests sent on
the same connection once every earlier response ended and FILE exists (a test makes it after
changing something, such as a reload). Bounded: every wait has the --timeout (default 10 s)."""

import argparse
import hashlib
import os
import socket
import ssl
import sys
import time

import h2.config
import h2.connection
import h2.events


def pattern(n):
    unit = bytes(range(256))
    return (unit * (n // 256 + 1))[:n]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--authority")
    ap.add_argument("--sni")
    ap.add_argument("--linger", type=float, default=0.0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--request", action="append", default=[])
    ap.add_argument("--header", action="append", default=[])
    ap.add_argument("--body-bytes", type=int, default=0)
    ap.add_argument("--no-length", action="store_true")
    ap.add_argument("--trailer", action="append", default=[])
    ap.add_argument("--then", action="append", default=[])
    ap.add_argument("--then-after")
    a = ap.parse_args()

    sock = socket.create_connection((a.host, a.port), timeout=a.timeout)
    if a.tls:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.set_alpn_protocols(["h2"])
        sni = a.sni or (a.authority.split(":")[0] if a.authority else "localhost")
        sock = ctx.wrap_socket(sock, server_hostname=sni)
        if sock.selected_alpn_protocol() != "h2":
            print("error ALPN chose %r" % sock.selected_alpn_protocol())
            return 2
    cfg = h2.config.H2Configuration(
        client_side=True,
        header_encoding=None,
        validate_outbound_headers=False,
        normalize_outbound_headers=False,
        validate_inbound_headers=False,
    )
    conn = h2.connection.H2Connection(config=cfg)
    conn.initiate_connection()
    conn.increment_flow_control_window(16 * 1024 * 1024)
    sock.sendall(conn.data_to_send())

    authority = a.authority or "%s:%d" % (a.host, a.port)
    scheme = "https" if a.tls else "http"
    extra = []
    for h in a.header:
        n, v = h.split(":", 1)
        extra.append((n.strip().encode(), v.strip().encode("latin-1")))
    body = pattern(a.body_bytes)
    out = {"responses": {}, "goaway": None, "closed": False}
    pending_body = {}
    def send_request(req):
        parts = req.split(" ")
        method, path = parts[0], parts[1]
        req_authority = parts[2] if len(parts) > 2 else authority
        sid = conn.get_next_available_stream_id()
        headers = [(b":method", method.encode()), (b":scheme", scheme.encode()),
                   (b":path", path.encode()), (b":authority", req_authority.encode())]
        if body and not a.no_length:
            headers.append((b"content-length", str(len(body)).encode()))
        headers += extra
        end = not body and not a.trailer
        conn.send_headers(sid, headers, end_stream=end)
        out["responses"][str(sid)] = {"status": None, "headers": [], "body_len": 0,
                                      "body": b"", "trailers": [], "reset": None, "ended": False}
        if body or a.trailer:
            pending_body[sid] = 0

    for req in a.request or ["GET /"]:
        send_request(req)
    sock.sendall(conn.data_to_send())

    def push_bodies():
        for sid, at in list(pending_body.items()):
            while at < len(body):
                window = min(conn.local_flow_control_window(sid), conn.max_outbound_frame_size)
                if window <= 0:
                    break
                chunk = body[at:at + window]
                at += len(chunk)
                last = at >= len(body) and not a.trailer
                conn.send_data(sid, chunk, end_stream=last)
            pending_body[sid] = at
            if at >= len(body):
                if a.trailer:
                    tr = []
                    for t in a.trailer:
                        n, v = t.split(":", 1)
                        tr.append((n.strip().encode(), v.strip().encode()))
                    conn.send_headers(sid, tr, end_stream=True)
                del pending_body[sid]
        data = conn.data_to_send()
        if data:
            sock.sendall(data)

    push_bodies()
    deadline = time.time() + a.timeout
    hashes = {}
    linger_until = None
    rx = b""
    then = list(a.then)
    while time.time() < deadline:
        if then and all(r["ended"] for r in out["responses"].values()):
            while not os.path.exists(a.then_after) and time.time() < deadline:
                time.sleep(0.05)
            for req in then:
                send_request(req)
            then = []
            push_bodies()
        if all(r["ended"] for r in out["responses"].values()):
            if a.linger <= 0:
                break
            if linger_until is None:
                linger_until = time.time() + a.linger
                deadline = min(deadline, linger_until)
        try:
            sock.settimeout(max(0.05, deadline - time.time()))
            data = sock.recv(65536)
        except socket.timeout:
            break
        except (ConnectionResetError, ssl.SSLError):
            out["closed"] = True
            break
        if not data:
            out["closed"] = True
            break
        # GOAWAY frames are taken out before the library sees them: python3-h2 4.1 takes any
        # GOAWAY as the end and refuses the responses of the streams it let finish.
        rx += data
        passed = b""
        while len(rx) >= 9:
            flen = int.from_bytes(rx[0:3], "big")
            if len(rx) < 9 + flen:
                break
            if rx[3] == 7 and flen >= 8:
                out["goaway"] = {"code": int.from_bytes(rx[13:17], "big"),
                                 "last_stream": int.from_bytes(rx[9:13], "big") & 0x7FFFFFFF}
            else:
                passed += rx[:9 + flen]
            rx = rx[9 + flen:]
        data = passed
        try:
            events = conn.receive_data(data)
        except Exception as e:  # a frame the library refuses: say so
            out["error"] = str(e)
            break
        for ev in events:
            r = out["responses"].get(str(getattr(ev, "stream_id", 0)))
            if isinstance(ev, h2.events.ResponseReceived) or isinstance(ev, h2.events.InformationalResponseReceived):
                hs = [[n.decode("latin-1"), v.decode("latin-1")] for n, v in ev.headers]
                status = int(dict(hs)[":status"])
                if isinstance(ev, h2.events.InformationalResponseReceived):
                    r.setdefault("interim", []).append(status)
                else:
                    r["status"] = status
                    r["headers"] = hs
            elif isinstance(ev, h2.events.DataReceived):
                r["body_len"] += len(ev.data)
                if len(r["body"]) < 65536:
                    r["body"] += ev.data[: 65536 - len(r["body"])]
                hashes.setdefault(ev.stream_id, hashlib.sha256()).update(ev.data)
                conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
            elif isinstance(ev, h2.events.TrailersReceived):
                r["trailers"] = [[n.decode("latin-1"), v.decode("latin-1")] for n, v in ev.headers]
            elif isinstance(ev, h2.events.StreamEnded):
                r["ended"] = True
            elif isinstance(ev, h2.events.StreamReset):
                if r is not None:
                    r["reset"] = int(ev.error_code)
                    r["ended"] = True
            elif isinstance(ev, h2.events.ConnectionTerminated):
                out["goaway"] = {"code": int(ev.error_code), "last_stream": ev.last_stream_id}
            elif isinstance(ev, h2.events.WindowUpdated):
                pass
        push_bodies()
        data = conn.data_to_send()
        if data:
            sock.sendall(data)
        if out["goaway"] is not None and out["goaway"]["code"] != 0:
            break
    for sid, h in hashes.items():
        out["responses"][str(sid)]["body_sha256"] = h.hexdigest()
    lines = []
    for sid, r in out["responses"].items():
        for code in r.get("interim", []):
            lines.append("stream %s interim %d" % (sid, code))
        if r["status"] is not None:
            lines.append("stream %s status %d" % (sid, r["status"]))
        for n, v in r["headers"]:
            lines.append("stream %s header %s: %s" % (sid, n, v))
        lines.append("stream %s body_len %d" % (sid, r["body_len"]))
        if "body_sha256" in r:
            lines.append("stream %s body_sha256 %s" % (sid, r["body_sha256"]))
        lines.append("stream %s body_hex %s" % (sid, r["body"][:4096].hex()))
        for n, v in r["trailers"]:
            lines.append("stream %s trailer %s: %s" % (sid, n, v))
        if r["reset"] is not None:
            lines.append("stream %s reset %d" % (sid, r["reset"]))
        if r["ended"]:
            lines.append("stream %s ended" % sid)
    if out["goaway"] is not None:
        lines.append("goaway %d %d" % (out["goaway"]["code"], out["goaway"]["last_stream"]))
    if out["closed"]:
        lines.append("closed")
    if "error" in out:
        lines.append("error %s" % out["error"])
    print("\n".join(lines))
    sock.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
