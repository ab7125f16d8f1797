"""The worker's /livez and /readyz (sendgroup_worker.health): the decisions with a hand-driven
clock, then the real HTTP server in its thread answering while the event loop is blocked, and
the SMTP greeting check against real servers on loopback (aiosmtpd; a raw socket that answers
421 or nothing)."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from sendgroup_worker.health import WorkerHealth, smtp_check
from tests.support.ports import free_port
from tests.support.smtp_sink import SmtpSink


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock, **checks: object) -> WorkerHealth:
    return WorkerHealth(stall_after=30, job_limit=90, checks=checks, clock=clock)  # type: ignore[arg-type]


def test_liveness_follows_the_heartbeat_and_the_lanes() -> None:
    clock = Clock()
    health = make(clock)
    assert health.liveness() == (True, "ok")
    clock.now += 30
    assert health.liveness()[0] is True  # exactly at the limit: still live
    clock.now += 0.5
    assert health.liveness() == (False, "event loop stalled for 30.5s (limit 30s)")
    health.beat()
    assert health.liveness() == (True, "ok")
    # a lane holding one job past job_limit + stall_after is hung even with a beating loop
    health.job_started(2)
    clock.now += 100
    health.beat()
    assert health.liveness() == (True, "ok")
    clock.now += 21
    health.beat()
    assert health.liveness() == (False, "lane 2 stuck in one job for 121.0s (limit 120s)")
    health.job_finished(2)
    assert health.liveness() == (True, "ok")


def test_readiness_runs_each_check_caches_it_and_says_which_failed() -> None:
    clock = Clock()
    calls = {"redis": 0, "smtp": 0}
    smtp_down = True

    def redis_ok() -> None:
        calls["redis"] += 1

    def smtp() -> None:
        calls["smtp"] += 1
        if smtp_down:
            raise ConnectionError("the relay answered '421 busy'")

    health = WorkerHealth(
        stall_after=30, job_limit=90, checks={"redis": redis_ok, "smtp": smtp}, clock=clock
    )
    assert health.readiness() == (False, "smtp: ConnectionError: the relay answered '421 busy'")
    smtp_down = False
    assert health.readiness()[0] is False  # cached for cache_for (5 s)
    assert calls == {"redis": 1, "smtp": 1}
    clock.now += 5
    health.beat()
    assert health.readiness() == (True, "ok")
    assert calls == {"redis": 2, "smtp": 2}
    clock.now += 31  # a stalled loop is not ready either, whatever the cache says
    assert health.readiness()[0] is False
    health.beat()
    health.stopping()
    assert health.readiness() == (False, "stopping: finishing the jobs in flight")
    assert health.liveness() == (True, "ok")  # stopping is not dead


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_server_answers_while_the_event_loop_is_blocked() -> None:
    """The server lives in its own thread: a blocked event loop (a synchronous call that
    hangs) is reported as such instead of leaving the probe without an answer. The first probe
    that finds the loop stuck asks it to answer; one ``stall_after`` later the loop is stalled."""
    health = WorkerHealth(stall_after=1.5, job_limit=1, checks={})
    seen: list[tuple[int, str]] = []

    async def main() -> None:
        port = health.start(free_port(), "127.0.0.1")
        assert port
        seen.append(await asyncio.to_thread(get, port, "/livez"))
        seen.append(await asyncio.to_thread(get, port, "/readyz"))
        # probes from another thread while the loop is stuck in a synchronous call
        first = threading.Timer(0.3, lambda: seen.append(get(port, "/livez")))
        second = threading.Timer(2.3, lambda: seen.append(get(port, "/livez")))
        first.start()
        second.start()
        time.sleep(3.2)
        first.join()
        second.join()
        await asyncio.sleep(0.1)  # the loop runs again and answers the open ask
        seen.append(await asyncio.to_thread(get, port, "/livez"))
        assert get(port, "/metrics")[0] == 404

    try:
        asyncio.run(main())
        assert seen[0] == (200, "ok\n")
        assert seen[1] == (200, "ok\n")
        assert seen[2] == (200, "ok\n")  # stuck for 0.3 s: asked, not yet a stall
        assert seen[3][0] == 503 and seen[3][1].startswith("event loop stalled for 2.")
        assert seen[4] == (200, "ok\n")
    finally:
        health.close()


def test_a_probe_asks_the_loop_once_and_a_stall_counts_from_that_ask() -> None:
    """With the worker's loop attached, the loop is asked (one callback) by the first probe and
    answers by running it; probes meanwhile find the same ask open, and the silence counts from
    it, not from the loop's last answer (an idle loop is not woken between probes)."""
    clock = Clock()
    health = make(clock)
    health.answer_wait = 0
    asked: list[object] = []

    class Loop:
        def call_soon_threadsafe(self, callback: object) -> None:
            asked.append(callback)

    health.attach(Loop())  # type: ignore[arg-type]
    clock.now += 600  # idle for 10 min: no probe, nothing asked, nothing silent
    assert health.liveness() == (True, "ok")
    assert len(asked) == 1
    clock.now += 30
    assert health.liveness() == (True, "ok")  # the same ask, open for exactly the limit
    assert len(asked) == 1
    clock.now += 0.5
    assert health.liveness() == (False, "event loop stalled for 30.5s (limit 30s)")
    asked.pop()()  # type: ignore[operator]
    assert health.liveness() == (True, "ok")  # answered; the next ask is a new one
    assert len(asked) == 1


def test_a_closed_loop_never_answers() -> None:
    clock = Clock()
    health = make(clock)
    health.answer_wait = 0
    loop = asyncio.new_event_loop()
    loop.close()
    health.attach(loop)
    assert health.liveness() == (True, "ok")
    clock.now += 31
    assert health.liveness()[0] is False


def test_an_idle_worker_loop_is_not_woken_between_probes() -> None:
    """The loop of a worker with nothing to do sleeps: no heartbeat timer runs in it (before,
    one woke it every second). Counted: the loop's callbacks over 1.5 s without a probe."""
    health = WorkerHealth(stall_after=30, job_limit=90, checks={})
    woken: list[float] = []

    async def main() -> None:
        health.start(0)
        loop = asyncio.get_running_loop()
        original = loop.call_soon

        def counting(callback: Any, *args: Any, **kwargs: Any) -> Any:
            woken.append(time.monotonic())
            return original(callback, *args, **kwargs)

        loop.call_soon = counting  # type: ignore[method-assign]
        try:
            await asyncio.sleep(1.5)
        finally:
            loop.call_soon = original  # type: ignore[method-assign]

    asyncio.run(main())
    assert len(woken) <= 1, f"the loop ran {len(woken)} callbacks while idle"


def test_a_port_in_use_is_logged_not_fatal(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        health = WorkerHealth(stall_after=1, job_limit=1, checks={})
        assert health.serve(port, "127.0.0.1") == 0
    assert "cannot listen" in caplog.text


@pytest.fixture
def greeter() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on loopback whose greeting the test chooses (b"" = say nothing)."""
    greeting: list[bytes] = [b"421 4.3.2 busy, try later\r\n"]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=answer, args=(conn, greeting[0]), daemon=True).start()

    def answer(conn: socket.socket, text: bytes) -> None:
        with conn:
            if text:
                conn.sendall(text)
            done.wait(1.5)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], greeting
    done.set()
    thread.join(5)
    listener.close()


def test_smtp_check_wants_a_220_greeting(greeter: tuple[int, list[bytes]]) -> None:
    port, greeting = greeter
    check = smtp_check("127.0.0.1", port, implicit_tls=False, ca_file=None, timeout=1)
    with pytest.raises(ConnectionError, match=r"421 4\.3\.2 busy"):
        check()
    greeting[0] = b""
    with pytest.raises(TimeoutError):
        check()
    greeting[0] = b"220-relay.example ESMTP\r\n220 ready\r\n"
    check()
    closed = smtp_check("127.0.0.1", free_port(), implicit_tls=False, ca_file=None, timeout=1)
    with pytest.raises(ConnectionRefusedError):
        closed()


def test_smtp_check_against_a_real_smtp_server() -> None:
    sink = SmtpSink().start()
    try:
        smtp_check("127.0.0.1", sink.port, implicit_tls=False, ca_file=None, timeout=5)()
    finally:
        sink.stop()
