"""The worker's HTTP servers (/metrics; /livez and /readyz) sleep between requests: their
threads wake for a request, not every 0.5 s as socketserver's default poll (counted with the
kernel's context switches of the thread), still answer, and stop at once when closed."""

from __future__ import annotations

import socket
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from sendgroup_worker.health import WorkerHealth
from sendgroup_worker.metrics import WorkerMetrics
from tests.support.ports import free_port


def _switches(thread: threading.Thread) -> int:
    """Voluntary context switches of ``thread`` so far (Linux, /proc)."""
    status = Path(f"/proc/self/task/{thread.native_id}/status").read_text()
    line = next(x for x in status.splitlines() if x.startswith("voluntary_ctxt_switches"))
    return int(line.split()[1])


def _get(port: int, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
        return resp.status, resp.read()


def _closed(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


def _seconds(call: Callable[[], None]) -> float:
    """How long ``call()`` took, in seconds."""
    started = time.monotonic()
    call()
    return time.monotonic() - started


def _serve(which: str, port: int, host: str) -> tuple[threading.Thread, Callable[[], None], str]:
    """Start the ``which`` server ("metrics" or "health") on ``host:port``: (its thread, the
    function that closes it, the path it answers)."""
    if which == "metrics":
        metrics = WorkerMetrics("q")
        metrics.serve(port, host)
        assert metrics._server is not None
        return metrics._server[1], metrics.close, "/metrics"
    health = WorkerHealth(stall_after=30, job_limit=90, checks={})
    assert health.serve(port, host) == port
    assert health._server is not None
    return health._server[1], health.close, "/livez"


@pytest.mark.parametrize("which", ["metrics", "health"])
def test_an_idle_server_thread_sleeps_answers_and_stops_at_once(which: str) -> None:
    port = free_port()
    thread, close, path = _serve(which, port, "127.0.0.1")
    try:
        status, body = _get(port, path)
        assert status == 200 and body
        before = _switches(thread)
        time.sleep(1.6)
        assert _switches(thread) - before == 0, "the server thread woke while no request came"
        assert _get(port, path)[0] == 200
    finally:
        took = _seconds(close)
    assert took < 0.5
    assert not thread.is_alive()
    assert _closed(port)


def test_metrics_keep_their_content() -> None:
    port = free_port()
    metrics = WorkerMetrics("q", sendgroup="g")
    metrics.job("delivered")
    metrics.serve(port, "127.0.0.1")
    try:
        status, body = _get(port, "/metrics")
    finally:
        metrics.close()
    assert status == 200
    assert b'sendgroup_worker_jobs_total{outcome="delivered",queue="q",sendgroup="g"} 1.0' in body


def _get6(port: int, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://[::1]:{port}{path}", timeout=5) as resp:
        return resp.status, resp.read()


@pytest.mark.parametrize("host", ["::1", "::"])
@pytest.mark.parametrize("which", ["metrics", "health"])
def test_both_servers_listen_on_an_ipv6_host(which: str, host: str) -> None:
    """``METRICS_HOST`` / ``HEALTH_HOST`` set to an IPv6 address (an IPv6-only pod network
    wants ``::``) listen on IPv6, answer there, and stop at once. Before, the health server
    tried an IPv4 socket on ``::`` and only logged that it could not listen."""
    port = free_port()
    thread, close, path = _serve(which, port, host)
    try:
        status, body = _get6(port, path)
        assert status == 200 and body
    finally:
        took = _seconds(close)
    assert took < 0.5
    assert not thread.is_alive()
