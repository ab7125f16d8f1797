"""The worker's health endpoint: ``GET /livez`` and ``GET /readyz`` for the kubelet's probes.

- **Liveness** (``/livez``, 200 or 503): the process makes progress. Each probe asks the
  worker's event loop to answer (``call_soon_threadsafe``: one callback, which also wakes a loop
  asleep in ``select()``) and waits up to :data:`ANSWER_WAIT` seconds for it; the event loop is
  stalled when an ask has stayed unanswered for more than ``stall_after`` seconds (a blocking
  call, a deadlock; a process stopped with SIGSTOP answers nothing at all, which the probe also
  counts as a failure). A stall is seen by the first probe ``stall_after`` seconds after the one
  that found the loop stuck, so at most one probe period later than a clock the loop stamps
  itself, which a heartbeat task did every second until 2026-12: an idle worker's loop woke
  once a second for it (bench scenario 7: a worker kept running at rest cost 0.9 ms CPU/s,
  Laravel's ``queue:work`` 0.1-0.2). A lane is stalled when one job has held it longer than
  ``job_limit + stall_after`` seconds: every await in a job is bounded by the job's timeout, so
  a lane past that is hung.
  Waiting for work, for the rate limit or out a backpressure suspension is progress, not a stall.
- **Readiness** (``/readyz``, 200 or 503): live, not stopping, Redis answers ``PING`` and the
  SMTP relay answers its ``220`` greeting (then ``QUIT``; implicit TLS with the worker's CA
  file). The two checks run at most once per ``cache_for`` seconds, in the server's thread with
  their own connections and ``check_timeout`` each, so a probe never waits on the worker's pools.

The body is one line of text saying why (``ok``, ``event loop stalled for 42.0s``, ``redis:
ConnectionError: ...``); the Redis URL (password inside) is never echoed. The server is
:mod:`http.server` in a daemon thread that sleeps until a request comes, like the Prometheus one
(:mod:`sendgroup_worker.httpthread`, :mod:`sendgroup_worker.metrics`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Final

import redis

from sendgroup_worker import httpthread

log = logging.getLogger("sendgroup_worker.health")

#: Seconds a probe waits for the event loop to answer its ask (a busy loop answers within
#: milliseconds; the probe's own timeout is seconds).
ANSWER_WAIT: Final = 0.5

#: A check: returns None when the dependency answers, raises with the reason otherwise.
Check = Callable[[], None]


class WorkerHealth:
    """What ``/livez`` and ``/readyz`` answer. Thread-safe: the worker's event loop writes the
    heartbeat and lane states, the HTTP server's threads read them.

    ``stall_after``: seconds of an unanswered ask (or over a job's limit) that mean "hung".
    ``job_limit``: the longest a lane may legitimately hold one job (seconds).
    ``checks``: name -> check, run for readiness (e.g. ``{"redis": ..., "smtp": ...}``).
    ``cache_for``: seconds a readiness result is reused. ``clock``: monotonic seconds.
    """

    def __init__(
        self,
        *,
        stall_after: float,
        job_limit: float,
        checks: dict[str, Check],
        cache_for: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stall_after = stall_after
        self.job_limit = job_limit
        self.checks = checks
        self.cache_for = cache_for
        self.clock = clock
        self._lock = threading.Lock()
        self._beat = clock()
        #: when a probe asked the loop to answer, while that ask is unanswered (else None)
        self._asked: float | None = None
        self._answered = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.answer_wait = ANSWER_WAIT
        self._busy: dict[int, float] = {}
        self._stopping = False
        self._ready_cache: tuple[float, bool, str] | None = None
        self._server: tuple[ThreadingHTTPServer, threading.Thread] | None = None

    # --- written by the worker ---------------------------------------------------------------
    def beat(self) -> None:
        """The event loop ran: it answers a probe's ask (:meth:`liveness`) with this call."""
        with self._lock:
            self._beat = self.clock()
            self._asked = None
        self._answered.set()

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """Probes ask ``loop`` (the worker's event loop) to answer from now on."""
        self._loop = loop

    def job_started(self, lane: int) -> None:
        """Lane ``lane`` took a job."""
        with self._lock:
            self._busy[lane] = self.clock()

    def job_finished(self, lane: int) -> None:
        """Lane ``lane`` is done with its job (whatever the outcome)."""
        with self._lock:
            self._busy.pop(lane, None)

    def stopping(self) -> None:
        """The worker takes no more jobs: not ready from now on (still live)."""
        with self._lock:
            self._stopping = True

    # --- read by the probes ------------------------------------------------------------------
    def _ask(self) -> None:
        """Ask the attached loop to call :meth:`beat` (once: a later probe finds the same ask
        still open) and wait up to :attr:`answer_wait` seconds for it."""
        loop = self._loop
        if loop is None:
            return
        with self._lock:
            open_ask = self._asked is not None
            if not open_ask:
                self._asked = self.clock()
                self._answered.clear()
        if not open_ask:
            with contextlib.suppress(RuntimeError):  # the loop is closed: it never answers
                loop.call_soon_threadsafe(self.beat)
        self._answered.wait(self.answer_wait)

    def liveness(self) -> tuple[bool, str]:
        """``(live, reason)``. With a loop attached (:meth:`attach`), the loop is silent for as
        long as an ask stays unanswered; without one, since the last :meth:`beat`."""
        self._ask()
        now = self.clock()
        with self._lock:
            if self._loop is None:
                silent = now - self._beat
            else:
                silent = 0.0 if self._asked is None else now - self._asked
            busy = dict(self._busy)
        if silent > self.stall_after:
            return False, f"event loop stalled for {silent:.1f}s (limit {self.stall_after:g}s)"
        limit = self.job_limit + self.stall_after
        for lane, since in sorted(busy.items()):
            if now - since > limit:
                held = now - since
                return False, f"lane {lane} stuck in one job for {held:.1f}s (limit {limit:g}s)"
        return True, "ok"

    def readiness(self) -> tuple[bool, str]:
        """``(ready, reason)``: live, not stopping, every check passes (cached ``cache_for``)."""
        live, reason = self.liveness()
        if not live:
            return False, reason
        with self._lock:
            if self._stopping:
                return False, "stopping: finishing the jobs in flight"
            cached = self._ready_cache
        now = self.clock()
        if cached is not None and now - cached[0] < self.cache_for:
            return cached[1], cached[2]
        ok, why = True, "ok"
        for name, check in self.checks.items():
            try:
                check()
            except Exception as exc:  # any failure of a dependency is "not ready", with why
                ok, why = False, f"{name}: {type(exc).__name__}: {exc}"
                break
        with self._lock:
            self._ready_cache = (self.clock(), ok, why)
        return ok, why

    # --- the server --------------------------------------------------------------------------
    def serve(self, port: int, host: str = "0.0.0.0") -> int:
        """Serve ``/livez`` and ``/readyz`` on ``host:port`` in a daemon thread (port 0 = do
        not serve). Returns the bound port (0 when not serving)."""
        if not port:
            return 0
        health = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/livez":
                    ok, why = health.liveness()
                elif path == "/readyz":
                    ok, why = health.readiness()
                else:
                    self.send_error(404, "try /livez or /readyz")
                    return
                body = (why + "\n").encode()
                self.send_response(200 if ok else 503)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # the kubelet probes every few seconds: no access log

        class Server(ThreadingHTTPServer):
            address_family = httpthread.family(host)  # "::" or "::1" listen on IPv6

        try:
            server = Server((host, port), Handler)
        except OSError as exc:
            # the worker can still send mail; in a pod the probes then fail and say why
            log.error("health server: cannot listen on %s:%d: %s", host, port, exc)
            return 0
        server.daemon_threads = True
        self._server = (server, httpthread.serve(server, "health"))
        bound: int = server.server_address[1]
        return bound

    def close(self) -> None:
        """Stop the server (tests; the process exiting does it otherwise)."""
        served, self._server = self._server, None
        if served is not None:
            httpthread.stop(*served)

    def start(self, port: int, host: str = "0.0.0.0") -> int:
        """Attach the running event loop (:meth:`attach`) and serve (:meth:`serve`); returns
        the bound port (0 when not serving)."""
        self.attach(asyncio.get_running_loop())
        return self.serve(port, host)


def redis_check(url: str, timeout: float) -> Check:
    """A check that sends ``PING`` to the Redis at ``url`` (new connection, ``timeout`` s)."""

    def check() -> None:
        client = redis.Redis.from_url(url, socket_timeout=timeout, socket_connect_timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()

    return check


def smtp_check(
    host: str, port: int, *, implicit_tls: bool, ca_file: str | None, timeout: float
) -> Check:
    """A check that reads the SMTP relay's greeting: ``220`` (possibly multi-line ``220-``)
    is an answer; anything else (``421`` busy, ``554`` refused, silence) raises. Sends
    ``QUIT`` and closes. With ``implicit_tls`` the connection is TLS first (verified against
    ``ca_file`` or the system CAs, as the worker's own sends)."""

    def check() -> None:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            conn: socket.socket = raw
            if implicit_tls:
                context = ssl.create_default_context(cafile=ca_file)
                conn = context.wrap_socket(raw, server_hostname=host)
            with conn, conn.makefile("rb") as reply:
                while True:
                    line = reply.readline(1024)
                    if not line:
                        raise ConnectionError("the relay closed the connection without a greeting")
                    code = line[:3].decode(errors="replace")
                    if code != "220":
                        text = line.decode(errors="replace").strip()
                        raise ConnectionError(f"the relay answered {text!r}")
                    if line[3:4] != b"-":
                        break
                with contextlib.suppress(OSError):
                    conn.sendall(b"QUIT\r\n")

    return check
