#!/usr/bin/env python3
"""A UDP echo backend for bench/udp.sh: every datagram goes back, unchanged, to where it came from.

    python3 bench/udp/echo.py 127.0.0.1 9611

Measured here (dnsperf at it, one process): about 85,000 datagrams/s at 4.7 µs of CPU each, so at
the 20,000-40,000/s a balancer passes to each of two backends it uses a tenth of a core or less
and is not the bottleneck. Counts what it echoed and prints it as JSON on SIGTERM / SIGINT.
Python 3 standard library only; it binds only the address it is given.
"""

import json
import signal
import socket
import sys


def main(argv):
    host, port = argv[0], int(argv[1])
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    s.bind((host, port))
    counts = {"received": 0, "echoed": 0, "errors": 0}

    def done(_signum, _frame):
        print(json.dumps(counts), flush=True)
        sys.exit(0)

    signal.signal(signal.SIGTERM, done)
    signal.signal(signal.SIGINT, done)
    buf = bytearray(65536)
    view = memoryview(buf)
    recv, send = s.recvfrom_into, s.sendto
    while True:
        n, peer = recv(buf)
        counts["received"] += 1
        try:
            send(view[:n], peer)
            counts["echoed"] += 1
        except OSError:
            counts["errors"] += 1


if __name__ == "__main__":
    main(sys.argv[1:])
