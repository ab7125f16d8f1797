"""A TCP relay that delays every chunk of data by a fixed time in each direction: added link
latency where the kernel has no netem qdisc (``CONFIG_NET_SCH_NETEM`` unset).

``python -m bench.delay_relay --listen HOST:PORT --to HOST:PORT --delay 0.0005``

One thread, ``select.select`` (microsecond timeouts, unlike epoll's milliseconds) and a heap of
due writes: a chunk read at time t is written at t + delay (a delay line, like netem: chunks in
flight do not wait for each other, so pipelined traffic and parallel connections are not
serialised). Prints ``READY`` once it listens; SIGTERM stops it. The benchmark measures the
round trip that results and reports it.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import itertools
import select
import signal
import socket
import sys
import time


def _addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def serve(listen: tuple[str, int], target: tuple[str, int], delay: float) -> None:
    """Relay forever (see the module docstring)."""
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(listen)
    server.listen(256)
    print("READY", flush=True)
    peer: dict[socket.socket, socket.socket] = {}
    # (when, seq, from, to, data | b"" = end of stream)
    due: list[tuple[float, int, socket.socket, socket.socket, bytes]] = []
    seq = itertools.count()
    while True:
        timeout = max(0.0, due[0][0] - time.monotonic()) if due else None
        readable, _, _ = select.select([server, *peer], [], [], timeout)
        now = time.monotonic()
        for sock in readable:
            if sock is server:
                client, _ = server.accept()
                try:
                    upstream = socket.create_connection(target)
                except OSError:
                    client.close()
                    continue
                for s in (client, upstream):
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                peer[client], peer[upstream] = upstream, client
                continue
            if sock not in peer:
                continue
            try:
                data = sock.recv(1 << 16)
            except OSError:
                data = b""
            heapq.heappush(due, (now + delay, next(seq), sock, peer[sock], data))
            if not data:  # EOF: stop reading this side; the close goes out after the delay
                del peer[sock]
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, src, to, data = heapq.heappop(due)
            try:
                if data:
                    to.sendall(data)
                else:
                    to.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            if not data and to not in peer:  # both directions ended
                for s in (src, to):
                    with contextlib.suppress(OSError):
                        s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True, type=_addr)
    ap.add_argument("--to", required=True, type=_addr)
    ap.add_argument("--delay", type=float, default=0.0005, help="seconds, each direction")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    serve(args.listen, args.to, args.delay)


if __name__ == "__main__":
    main()
