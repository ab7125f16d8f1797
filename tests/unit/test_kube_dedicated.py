"""The shard Leases' client (``Kube.dedicated``, issue 15) against a loopback HTTP server
standing in for an overloaded API server: a 429 with Retry-After is returned at once instead
of being slept through by urllib3's default retries, a refused connection or an unanswered
request is a ``KubeError`` with status 0 (never urllib3's own exception, which ended the poll
loop), and a backlog in the default executor does not delay its calls."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client as k8s

from sendgroup_operator import shardmember
from sendgroup_operator.kube import Kube, KubeError
from sendgroup_operator.settings import Settings

LOG = logging.getLogger("test")


class Server:
    """Answers every request by ``mode``: "429" (Retry-After: 1), "ok" (an empty LeaseList),
    "hang" (no answer for 5 s)."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.requests = 0
        server = self

        class Handler(BaseHTTPRequestHandler):
            def _reply(self) -> None:
                server.requests += 1
                if self.headers.get("Content-Length"):
                    self.rfile.read(int(self.headers["Content-Length"]))
                if server.mode == "hang":
                    time.sleep(5)
                    return
                status = 429 if server.mode == "429" else 200
                body = json.dumps(
                    {"kind": "Status", "code": 429, "message": "too many requests"}
                    if status == 429
                    else {"kind": "LeaseList", "items": []}
                ).encode()
                self.send_response(status)
                if status == 429:
                    self.send_header("Retry-After", "1")
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_PATCH = do_POST = do_DELETE = _reply

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def kube_at(url: str) -> Kube:
    config = k8s.Configuration()
    config.host = url
    return Kube(k8s.ApiClient(config))


def test_a_429_is_returned_at_once_not_slept_through(server: Server) -> None:
    server.mode = "429"
    shared = kube_at(server.url)
    started = time.monotonic()
    with pytest.raises(KubeError) as err:
        asyncio.run(shared.list_leases("ops", "a=b"))
    # the shared client: urllib3's default Retry sleeps Retry-After and asks again, 3 times
    assert err.value.status == 429 and server.requests == 4
    assert time.monotonic() - started >= 3
    server.requests = 0
    started = time.monotonic()
    with pytest.raises(KubeError) as err:
        asyncio.run(shared.dedicated().list_leases("ops", "a=b"))
    assert err.value.status == 429 and server.requests == 1
    assert time.monotonic() - started < 1


def test_an_unreachable_api_server_is_a_kube_error() -> None:
    with pytest.raises(KubeError) as err:
        asyncio.run(kube_at("http://127.0.0.1:9").dedicated().list_leases("ops", "a=b"))
    assert err.value.status == 0 and "HTTP 0:" in str(err.value)


def test_an_unanswered_lease_request_times_out(server: Server) -> None:
    server.mode = "hang"
    kube = kube_at(server.url).dedicated()
    started = time.monotonic()
    with pytest.raises(KubeError) as err:
        asyncio.run(kube.patch_lease("ops", "x", {"spec": {}}, timeout=0.5))
    assert err.value.status == 0
    assert time.monotonic() - started < 2


def test_a_poll_against_an_unreachable_api_server_fails_and_returns() -> None:
    """It used to raise urllib3's MaxRetryError out of the poll, ending the poll loop (the
    replica fenced for good)."""
    settings = Settings(namespace="ops", shard_set="sgo", shard_lease_duration=3.0)
    shard = shardmember.Shard(kube_at("http://127.0.0.1:9").dedicated(), settings, "a")

    async def poll() -> bool:
        return await shard.poll(LOG)

    assert asyncio.run(poll()) is False


def test_a_busy_default_executor_does_not_delay_the_dedicated_client(server: Server) -> None:
    shared = kube_at(server.url)
    dedicated = shared.dedicated()

    async def main() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        workers = 4
        loop.set_default_executor(ThreadPoolExecutor(workers))  # as busy as kopf's start
        backlog = [asyncio.to_thread(time.sleep, 1.0) for _ in range(workers * 2)]
        busy = asyncio.gather(*backlog)
        await asyncio.sleep(0.05)
        started = time.monotonic()
        await dedicated.list_leases("ops", "a=b")
        fast = time.monotonic() - started
        started = time.monotonic()
        await shared.list_leases("ops", "a=b")
        slow = time.monotonic() - started
        await busy
        return fast, slow

    fast, slow = asyncio.run(main())
    assert fast < 0.5, fast
    assert slow >= 0.9, slow  # the shared client waited behind the backlog
