"""Prometheus metrics of one worker process (prometheus-client), labelled by group only
(counts and names, never addresses or secrets).

Every series carries ``sendgroup`` (the SendGroup's name, ``SENDGROUP_NAME``; the queue name
when the worker runs without one), the label the operator's metrics use for the group, and, for
one release, ``queue`` (the queue name, the worker's former group label; deprecated).

* ``sendgroup_worker_jobs_total{outcome}``: jobs finished by this process; outcome is
  ``delivered``, ``released``, ``failed``, ``lost`` (reservation gone, job left to its owner)
  or ``skipped`` (already sent by an earlier reservation).
* ``sendgroup_worker_send_seconds``: histogram, seconds per SMTP transaction.
* ``sendgroup_worker_smtp_replies_total{reply_class}``: ``2xx``, ``4xx``, ``5xx``,
  ``connection``, ``fenced``.
* ``sendgroup_worker_rate_limit_per_minute``: the group's current allowed rate (warm-up
  and slow-down applied); 0 = unlimited.
* ``sendgroup_worker_suspended``: 1 while the group is suspended by backpressure.
* ``sendgroup_worker_queue_reachable``: 1 while this worker reaches its Redis, 0 during an
  outage (the condition ``QueueReachable`` and the operator's ``sendgroup_queue_reachable``
  mean the same); ``sendgroup_worker_redis_up`` is the same value under its deprecated name.
* ``sendgroup_worker_jobs_in_flight``: jobs being handled now.
* ``sendgroup_worker_lanes``: lanes this process runs now (``WORKER_CONCURRENCY``; with
  ``auto``, the count the controller chose, see ``sendgroup_worker.lanes``).

Every ``outcome`` and ``reply_class`` series exists from the start with value 0 (Prometheus'
advice for labelled counters), so ``rate()`` and ratios over them are defined before the first
failure and dashboards/alerts never depend on a series that appears late. ``namespace`` and
``sendgroup`` are not exported by the worker: the chart's PodMonitor adds them (and
``campaign``) from the pod's namespace and ``sendgroups.io/*`` labels at scrape time
(docs/observability.md).
"""

from __future__ import annotations

import socketserver
import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app

from sendgroup_worker import httpthread

#: Values of ``sendgroup_worker_jobs_total{outcome}`` (see the module docstring).
OUTCOMES = ("delivered", "released", "failed", "lost", "skipped", "suppressed")
#: Values of ``sendgroup_worker_smtp_replies_total{reply_class}``: the first digit of the final
#: SMTP reply (RFC 5321 section 4.2.1), ``connection`` (no reply: connect/TLS/timeout error) or
#: ``fenced`` (not sent: the reservation was lost before DATA) or ``suppressed`` (not sent: every
#: recipient is in the namespace's suppression set).
REPLY_CLASSES = ("2xx", "4xx", "5xx", "connection", "fenced", "suppressed")

SEND_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


#: The group labels of every series: ``sendgroup``, then the deprecated ``queue``.
GROUP_LABELS = ("sendgroup", "queue")


class WorkerMetrics:
    """The collectors, registered in their own registry (so tests can build several).

    ``group`` holds the values of :data:`GROUP_LABELS`: ``(sendgroup or queue, queue)``.
    """

    def __init__(
        self, queue: str, registry: CollectorRegistry | None = None, sendgroup: str | None = None
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self._server: tuple[WSGIServer, threading.Thread] | None = None
        r = self.registry
        self.queue = queue
        self.group = (sendgroup or queue, queue)
        g = list(GROUP_LABELS)
        self.jobs = Counter(
            "sendgroup_worker_jobs", "Jobs finished, by outcome", [*g, "outcome"], registry=r
        )
        self.send_seconds = Histogram(
            "sendgroup_worker_send_seconds",
            "Seconds per SMTP transaction",
            g,
            buckets=SEND_BUCKETS,
            registry=r,
        )
        self.replies = Counter(
            "sendgroup_worker_smtp_replies",
            "SMTP outcomes by reply class",
            [*g, "reply_class"],
            registry=r,
        )
        self.rate = Gauge(
            "sendgroup_worker_rate_limit_per_minute",
            "Current allowed messages per minute for the group (0 = unlimited)",
            g,
            registry=r,
        )
        self.suspended = Gauge(
            "sendgroup_worker_suspended", "1 while the group is suspended", g, registry=r
        )
        self.queue_reachable = Gauge(
            "sendgroup_worker_queue_reachable",
            "1 while this worker reaches its Redis, 0 during an outage",
            g,
            registry=r,
        )
        self.redis_up = Gauge(
            "sendgroup_worker_redis_up",
            "Deprecated, removed in the next release: sendgroup_worker_queue_reachable",
            g,
            registry=r,
        )
        self.in_flight = Gauge(
            "sendgroup_worker_jobs_in_flight", "Jobs being handled now", g, registry=r
        )
        self.lanes = Gauge(
            "sendgroup_worker_lanes",
            "Lanes (sends in flight at most) this process runs now",
            g,
            registry=r,
        )
        # this group's series, looked up once: ``labels()`` costs ~5 us a call (a lock and a
        # dict lookup), and the job path touched four per job
        self.in_flight_group = self.in_flight.labels(*self.group)
        self.suspended_group = self.suspended.labels(*self.group)
        self.lanes_group = self.lanes.labels(*self.group)
        self._send_seconds_group = self.send_seconds.labels(*self.group)
        self._jobs_by = {o: self.jobs.labels(*self.group, o) for o in OUTCOMES}
        self._replies_by = {c: self.replies.labels(*self.group, c) for c in REPLY_CLASSES}
        self.reachable(True)
        self.suspended_group.set(0)
        #: jobs being handled now; the gauge reads it at scrape time (a Gauge.inc/dec pair per
        #: job cost ~1 us of the no-op job's CPU: two locks and an observability check)
        self.in_flight_now = 0
        self.in_flight_group.set_function(lambda: self.in_flight_now)

    def reachable(self, up: bool) -> None:
        """Record whether Redis answers (both the current and the deprecated gauge)."""
        self.queue_reachable.labels(*self.group).set(1 if up else 0)
        self.redis_up.labels(*self.group).set(1 if up else 0)

    def job(self, outcome: str) -> None:
        """Count one finished job with ``outcome``."""
        child = self._jobs_by.get(outcome)
        (child or self.jobs.labels(*self.group, outcome)).inc()

    def reply(self, reply_class: str, seconds: float) -> None:
        """Count one SMTP outcome and its duration in seconds."""
        child = self._replies_by.get(reply_class)
        (child or self.replies.labels(*self.group, reply_class)).inc()
        self._send_seconds_group.observe(seconds)

    def serve(self, port: int, host: str) -> None:
        """Serve /metrics on ``host:port`` in a daemon thread (port 0 = do not serve): what
        prometheus-client's ``start_http_server`` does (its WSGI app, ``make_wsgi_app``, in a
        threading :mod:`wsgiref` server, no access log), with a thread that sleeps until a
        request comes (:mod:`sendgroup_worker.httpthread`). Raises OSError when the port
        cannot be bound, as ``start_http_server`` did."""
        if not port:
            return

        class Server(_ThreadingWSGIServer):
            address_family = httpthread.family(host)

        server = make_server(
            host, port, make_wsgi_app(self.registry), Server, handler_class=_QuietHandler
        )
        self._server = (server, httpthread.serve(server, "metrics"))

    def close(self) -> None:
        """Stop serving /metrics (tests; the process exiting does it otherwise)."""
        served, self._server = self._server, None
        if served is not None:
            httpthread.stop(*served)


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    """A WSGI server answering each request in its own daemon thread (a slow scrape does not
    hold the next one), as prometheus-client's own."""

    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    """No access log line per scrape."""

    def log_message(self, format: str, *args: Any) -> None:
        return
