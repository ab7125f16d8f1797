"""Prometheus metrics of one worker process (prometheus-client), labelled by queue only
(counts and names, never addresses or secrets).

* ``sendgroup_worker_jobs_total{queue, outcome}``: jobs finished by this process; outcome is
  ``delivered``, ``released``, ``failed``, ``lost`` (reservation gone, job left to its owner)
  or ``skipped`` (already sent by an earlier reservation).
* ``sendgroup_worker_send_seconds{queue}``: histogram, seconds per SMTP transaction.
* ``sendgroup_worker_smtp_replies_total{queue, reply_class}``: ``2xx``, ``4xx``, ``5xx``,
  ``connection``, ``fenced``.
* ``sendgroup_worker_rate_limit_per_minute{queue}``: the group's current allowed rate (warm-up
  and slow-down applied); 0 = unlimited.
* ``sendgroup_worker_suspended{queue}``: 1 while the group is suspended by backpressure.
* ``sendgroup_worker_redis_up{queue}``: 0 during a Redis outage.
* ``sendgroup_worker_jobs_in_flight{queue}``: jobs being handled now.

Every ``outcome`` and ``reply_class`` series exists from the start with value 0 (Prometheus'
advice for labelled counters), so ``rate()`` and ratios over them are defined before the first
failure and dashboards/alerts never depend on a series that appears late. ``namespace`` and
``sendgroup`` are not exported by the worker: the chart's PodMonitor adds them (and
``campaign``) from the pod's namespace and ``sendgroups.io/*`` labels at scrape time
(docs/observability.md).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

#: Values of ``sendgroup_worker_jobs_total{outcome}`` (see the module docstring).
OUTCOMES = ("delivered", "released", "failed", "lost", "skipped", "suppressed")
#: Values of ``sendgroup_worker_smtp_replies_total{reply_class}``: the first digit of the final
#: SMTP reply (RFC 5321 section 4.2.1), ``connection`` (no reply: connect/TLS/timeout error) or
#: ``fenced`` (not sent: the reservation was lost before DATA) or ``suppressed`` (not sent: every
#: recipient is in the namespace's suppression set).
REPLY_CLASSES = ("2xx", "4xx", "5xx", "connection", "fenced", "suppressed")

SEND_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class WorkerMetrics:
    """The collectors, registered in their own registry (so tests can build several)."""

    def __init__(self, queue: str, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.queue = queue
        self.jobs = Counter(
            "sendgroup_worker_jobs", "Jobs finished, by outcome", ["queue", "outcome"], registry=r
        )
        self.send_seconds = Histogram(
            "sendgroup_worker_send_seconds",
            "Seconds per SMTP transaction",
            ["queue"],
            buckets=SEND_BUCKETS,
            registry=r,
        )
        self.replies = Counter(
            "sendgroup_worker_smtp_replies",
            "SMTP outcomes by reply class",
            ["queue", "reply_class"],
            registry=r,
        )
        self.rate = Gauge(
            "sendgroup_worker_rate_limit_per_minute",
            "Current allowed messages per minute for the group (0 = unlimited)",
            ["queue"],
            registry=r,
        )
        self.suspended = Gauge(
            "sendgroup_worker_suspended", "1 while the group is suspended", ["queue"], registry=r
        )
        self.redis_up = Gauge(
            "sendgroup_worker_redis_up", "0 during a Redis outage", ["queue"], registry=r
        )
        self.in_flight = Gauge(
            "sendgroup_worker_jobs_in_flight", "Jobs being handled now", ["queue"], registry=r
        )
        self.redis_up.labels(queue).set(1)
        self.suspended.labels(queue).set(0)
        self.in_flight.labels(queue).set(0)
        for outcome in OUTCOMES:
            self.jobs.labels(queue, outcome)
        for reply_class in REPLY_CLASSES:
            self.replies.labels(queue, reply_class)

    def job(self, outcome: str) -> None:
        """Count one finished job with ``outcome``."""
        self.jobs.labels(self.queue, outcome).inc()

    def reply(self, reply_class: str, seconds: float) -> None:
        """Count one SMTP outcome and its duration in seconds."""
        self.replies.labels(self.queue, reply_class).inc()
        self.send_seconds.labels(self.queue).observe(seconds)

    def serve(self, port: int, host: str) -> None:
        """Serve /metrics on ``host:port`` in a daemon thread (port 0 = do not serve)."""
        if port:
            start_http_server(port, addr=host, registry=self.registry)
