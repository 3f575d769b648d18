"""A UDP flood from a process of its own, for the tests that a flood at a worker's socket freezes nothing.

Run as ``python -m tests.udp_flood SOURCE_IP TARGET_IP TARGET_PORT RATE [--datagram krpc|tiny] [--most SECONDS]``:
binds ``SOURCE_IP`` (a loopback address), prints ``flooding`` once the
first burst is out, then sends ``RATE`` datagrams a second (in bursts
every 5 ms; ``0``: as fast as it can) to the target until its stdin closes
or ``--most`` seconds passed, and prints how many it sent. A process of its
own, so the flood does not share the gevent hub (nor the GIL) it is meant
to hold up.

Datagrams: ``krpc`` (default) is a valid bencoded KRPC reply of 3,959 bytes
listing 1,300 one-byte values, the dearest datagram to decode that
``krpc_codec`` accepts whole (about 2 ms of Python); ``query`` is a KRPC
``get_peers`` query (for a DHT node); ``tiny`` is 8 bytes.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import threading
import time

KRPC = b"d1:rd2:id20:" + b"x" * 20 + b"6:valuesl" + b"1:a" * 1300 + b"ee1:t4:abcd1:y1:re"
QUERY = (b"d1:ad2:id20:" + b"x" * 20 + b"9:info_hash20:" + b"y" * 20
         + b"e1:q9:get_peers1:t2:aa1:y1:qe")
TINY = b"\x00" * 8
DATAGRAMS = {"krpc": KRPC, "query": QUERY, "tiny": TINY}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("source")
    ap.add_argument("target")
    ap.add_argument("port", type=int)
    ap.add_argument("rate", type=float)
    ap.add_argument("--datagram", choices=sorted(DATAGRAMS), default="krpc")
    ap.add_argument("--most", type=float, default=10.0)
    a = ap.parse_args()
    data = DATAGRAMS[a.datagram]
    family = socket.AF_INET6 if ":" in a.target else socket.AF_INET
    s = socket.socket(family, socket.SOCK_DGRAM)
    s.bind((a.source, 0))
    stop = threading.Event()

    def watch_stdin() -> None:
        sys.stdin.buffer.read()
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    burst = 50 if a.rate <= 0 else max(1, round(a.rate * 0.005))
    start = time.monotonic()
    end = start + a.most
    sent = 0
    told = False
    while not stop.is_set() and time.monotonic() < end:
        for _ in range(burst):
            try:
                s.sendto(data, (a.target, a.port))
                sent += 1
            except OSError:
                pass  # e.g. ECONNREFUSED from an ICMP error: keep sending
        if not told:
            print("flooding", flush=True)
            told = True
        if a.rate > 0:
            ahead = start + sent / a.rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    print(sent, flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
