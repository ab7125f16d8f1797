"""A paused group leaves its provider's budget alone (issue 14, review finding): the pause
marker ``queues:<q>:paused`` is read before a provider permit is taken, so a paused group's
worker lanes neither take and give back permits nor add and remove concurrency leases once a
second. Real worker processes, a real Redis watched with ``MONITOR`` (every command that names
a provider key is seen), a real SMTP sink."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator

import pytest
import redis

from sendgroup_worker.provider import ProviderKeys
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.redis_monitor import Monitor
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import (
    WorkerProcess,
    drained,
    mail_payload,
    sync_queue,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.redis

Q = "mail-provider-pause"
PROVIDER_ID = "csp/bigmail"
PROVIDER = {"id": PROVIDER_ID, "group": "ns/paused", "perMinute": 6000, "concurrency": 10}
TAG = "{csp/bigmail}"


@pytest.fixture
def monitor(redis_url: str) -> Iterator[Monitor]:
    m = Monitor(redis_url, TAG)
    yield m
    m.close()


def _worker(redis_url: str, port: int, name: str) -> WorkerProcess:
    env = worker_env(
        redis_url, Q, port, SENDGROUP_PROVIDER=json.dumps(PROVIDER), WORKER_CONCURRENCY=4
    )
    return WorkerProcess(env, name)


def test_a_worker_started_paused_never_touches_the_provider(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink, monitor: Monitor
) -> None:
    q = sync_queue(redis_url, Q)
    redis_client.set(QueueKeys(Q).paused, "1")
    q.push_many([mail_payload(f"p{i}@x.example") for i in range(20)])
    start = time.time()
    worker = _worker(redis_url, smtp_sink.port, "provider-paused")
    try:
        wait_for(lambda: "group paused" in worker.log(), 15, "the worker notices the pause")
        time.sleep(3.0)  # three more looks at the marker by each of the 4 lanes
        assert smtp_sink.snapshot() == []
        assert monitor.since(start) == [], "a paused group touched the provider's keys"
        keys = ProviderKeys(PROVIDER_ID)
        assert redis_client.exists(keys.tat, keys.leases, keys.group("ns/paused")) == 0
        # the same watch sees the permits once the group resumes (the check can fail)
        resumed = time.time()
        redis_client.delete(QueueKeys(Q).paused)
        wait_for(drained(q), 20, "the resumed worker drains the queue")
        assert len(smtp_sink.snapshot()) == 20
        permits = [c for c in monitor.since(resumed) if keys.tat in c]
        assert len(permits) >= 20, permits[:3]
        assert "no longer paused" in worker.log()
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(10) == 0
        worker.stop()


def test_a_pause_mid_drain_stops_provider_calls_and_leaves_no_lease(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink, monitor: Monitor
) -> None:
    q = sync_queue(redis_url, Q)
    q.push_many([mail_payload(f"d{i}@x.example") for i in range(2000)])
    worker = _worker(redis_url, smtp_sink.port, "provider-pause-mid")
    keys = ProviderKeys(PROVIDER_ID)
    try:
        wait_for(lambda: len(smtp_sink.snapshot()) >= 20, 20, "the worker is sending")
        assert monitor.since(0), "MONITOR sees the permits while sending"
        redis_client.set(QueueKeys(Q).paused, "1")
        wait_for(lambda: "group paused" in worker.log(), 10, "the worker notices the pause")
        time.sleep(1.0)  # lanes that held a permit at the pause give it back once
        tat = redis_client.get(keys.tat)
        quiet = time.time()  # after this test's own GET
        time.sleep(3.0)
        touched = monitor.since(quiet)
        assert touched == [], f"{len(touched)} provider calls while paused: {touched[:2]}"
        assert redis_client.get(keys.tat) in (tat, None)
        assert redis_client.zcard(keys.leases) == 0, "a paused group holds provider leases"
        sent = len(smtp_sink.snapshot())
        redis_client.delete(QueueKeys(Q).paused)
        wait_for(lambda: len(smtp_sink.snapshot()) > sent, 10, "sending again after resume")
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(10) == 0
        worker.stop()
