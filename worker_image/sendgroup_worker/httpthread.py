"""The worker's HTTP servers (``/metrics``; ``/livez`` and ``/readyz``), each in a daemon thread
that sleeps until a request comes.

:meth:`socketserver.BaseServer.serve_forever` wakes every ``poll_interval`` seconds (0.5 by
default, also in prometheus-client's ``start_http_server``) only to see whether
:meth:`~socketserver.BaseServer.shutdown` was called: with two servers, an idle worker's
threads woke four times a second for nothing (bench scenario 7 measures the CPU of a worker
kept running at rest). Here the thread waits in ``select()`` without a timeout
(``poll_interval=None``); :func:`stop` asks it to end and opens connections to its port until it
has, so the wait ends at once.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import socketserver
import threading


def family(host: str) -> socket.AddressFamily:
    """The address family to listen on ``host`` with: IPv6 for an IPv6 literal (``::``,
    ``::1``), else IPv4 (a name or an IPv4 address)."""
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(host).version == 6:
            return socket.AF_INET6
    return socket.AF_INET


def serve(server: socketserver.BaseServer, name: str) -> threading.Thread:
    """Run ``server`` in a daemon thread called ``name`` that wakes only for requests."""
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": None}, name=name, daemon=True
    )
    thread.start()
    return thread


def stop(server: socketserver.TCPServer, thread: threading.Thread, timeout: float = 5.0) -> None:
    """Stop a server started by :func:`serve` and close its socket (at most ``timeout`` seconds
    for the thread to end). ``shutdown()`` only sets a flag the serving loop reads once
    ``select()`` returns, so a connection to the listening port wakes it (again until the
    thread ended: a connection that arrived before the flag was set is served as a request)."""
    stopper = threading.Thread(target=server.shutdown, name=f"{thread.name}-stop", daemon=True)
    stopper.start()
    host, port = server.server_address[:2]
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    for _ in range(max(1, int(timeout / 0.05))):
        if not stopper.is_alive():
            break
        with contextlib.suppress(OSError):
            socket.create_connection((str(host), int(port)), timeout=0.2).close()
        stopper.join(0.05)
    thread.join(timeout)
    server.server_close()
