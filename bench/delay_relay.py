"""A TCP relay that delays every chunk of data by a fixed time in each direction: added link
latency where the kernel has no netem qdisc (``CONFIG_NET_SCH_NETEM`` unset).

``python -m bench.delay_relay --listen HOST:PORT --to HOST:PORT --delay 0.0005``

Per connection and direction one thread reads and one thread writes: a chunk read at time t is
written at t + delay (a delay line, like netem: chunks in flight do not wait for each other, so
pipelined traffic is not serialised). Sleeps use ``time.sleep`` (nanosleep, ~50-100 us late on
Linux); the benchmark measures the RTT that results and reports it. Prints ``READY`` once it
listens; SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import signal
import socket
import sys
import threading
import time


def _pump(src: socket.socket, dst: socket.socket, delay: float) -> None:
    line: collections.deque[tuple[float, bytes]] = collections.deque()
    ready = threading.Condition()
    done = False

    def writer() -> None:
        while True:
            with ready:
                while not line and not done:
                    ready.wait()
                if not line:
                    break
                due, data = line.popleft()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                dst.sendall(data)
            except OSError:
                break
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    while True:
        try:
            data = src.recv(1 << 16)
        except OSError:
            data = b""
        with ready:
            if data:
                line.append((time.monotonic() + delay, data))
            else:
                done = True
            ready.notify()
        if not data:
            break
    thread.join()


def _serve(client: socket.socket, target: tuple[str, int], delay: float) -> None:
    try:
        upstream = socket.create_connection(target)
    except OSError:
        client.close()
        return
    for s in (client, upstream):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    back = threading.Thread(target=_pump, args=(upstream, client, delay), daemon=True)
    back.start()
    _pump(client, upstream, delay)
    back.join()
    client.close()
    upstream.close()


def _addr(text: str) -> tuple[str, int]:
    host, port = text.rsplit(":", 1)
    return host, int(port)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--listen", required=True, type=_addr)
    ap.add_argument("--to", required=True, type=_addr)
    ap.add_argument("--delay", type=float, default=0.0005, help="seconds, each direction")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(args.listen)
    server.listen(256)
    print("READY", flush=True)
    while True:
        client, _ = server.accept()
        threading.Thread(target=_serve, args=(client, args.to, args.delay), daemon=True).start()


if __name__ == "__main__":
    main()
