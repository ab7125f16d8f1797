"""Loopback listen ports for the tests' servers, taken from below the kernel's ephemeral range.

A port found by binding port 0 comes from ``net.ipv4.ip_local_port_range`` (32768-60999 by
default): the range the kernel also draws the source port of every outgoing connection from.
Between the pick and the server's own bind any client connection on the machine (a Redis
client, the API server's etcd client) may take that port as its source port; CI saw kopf's
health server fail with EADDRINUSE that way (``[Errno 98] ... ('127.0.0.1', 33003)``). Ports
below the range are never chosen as source ports, so only another listener can take one; this
module hands each port out at most once per process, which keeps the tests' own servers apart.
Two pytest processes at once (``hack/test``'s lanes) draw from disjoint residues:
``SENDGROUP_TEST_PORT_LANE=k/n`` hands out only ports ``p`` with ``p % n == k``.
"""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path

#: The lowest port handed out (below it: well-known and registered services people run).
LOWEST = 10000

_handed: set[int] = set()
_lock = threading.Lock()


def ephemeral_low() -> int:
    """First port of the ephemeral range (``ip_local_port_range``); 32768 if unreadable."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def lane() -> tuple[int, int]:
    """``(k, n)`` from ``SENDGROUP_TEST_PORT_LANE=k/n`` (``(0, 1)`` when unset or malformed)."""
    try:
        k, n = (int(x) for x in os.environ.get("SENDGROUP_TEST_PORT_LANE", "0/1").split("/"))
    except ValueError:
        return 0, 1
    return (k, n) if 0 <= k < n else (0, 1)


def _bindable(port: int, kind: socket.SocketKind, host: str) -> bool:
    with socket.socket(socket.AF_INET, kind) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1", *, udp: bool = False, gap: int = 0) -> int:
    """A port on ``host`` that was free a moment ago, below the ephemeral range and not handed
    out before in this process. ``gap`` > 0: ``port + gap`` is free and below the range too
    (a Redis Cluster node's bus port is its client port + 10000). Raises RuntimeError when 500
    random tries find none."""
    kind = socket.SOCK_DGRAM if udp else socket.SOCK_STREAM
    top = ephemeral_low() - 1 - gap
    if top <= LOWEST:
        raise RuntimeError(f"no room below the ephemeral range ({top + 1 + gap}) for gap {gap}")
    k, n = lane()
    with _lock:
        for _ in range(500):
            port = random.randint(LOWEST, top)
            port -= (port - k) % n  # this lane's residue (gap is a multiple of n: 10000 is)
            if port < LOWEST:
                continue
            wanted = (port, port + gap) if gap else (port,)
            if any(p in _handed for p in wanted):
                continue
            if all(_bindable(p, kind, host) for p in wanted):
                _handed.update(wanted)
                return port
    raise RuntimeError(f"no free port on {host} between {LOWEST} and {top}")


__all__ = ["LOWEST", "ephemeral_low", "free_port", "lane"]
