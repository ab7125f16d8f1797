"""The pause marker (``queues:<q>:paused``, set by the operator before it scales a paused,
cancelled or deleted group down): real worker processes, real Redis, a real SMTP sink.

On the node a pod can start after its group was paused (the ReplicaSet made it a moment
before the scale-down) or keep running for seconds until its SIGTERM arrives; the marker is
what makes the pause hold from the first millisecond: ``reserve`` hands out nothing while it
exists, whatever the Deployment does."""

from __future__ import annotations

import signal
import time

import pytest
import redis

from sendgroup_worker.queue.keys import QueueKeys
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

Q = "mail-pause-marker"


def test_a_worker_started_after_the_pause_takes_nothing_until_resumed(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q)
    redis_client.set(QueueKeys(Q).paused, "1")
    q.push_many([mail_payload(f"p{i}@x.example") for i in range(20)])
    worker = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port), "paused")
    try:
        wait_for(lambda: "group paused" in worker.log(), 15, "the worker notices the pause")
        time.sleep(2.0)  # two more looks at the marker
        assert smtp_sink.snapshot() == [], "a paused group sent mail"
        stats = q.measure()
        assert (stats.ready, stats.reserved, stats.delivered) == (20, 0, 0)
        redis_client.delete(QueueKeys(Q).paused)
        wait_for(drained(q), 20, "the resumed worker drains the queue")
        assert sorted(smtp_sink.per_recipient()) == sorted(f"p{i}@x.example" for i in range(20))
        assert "no longer paused" in worker.log()
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(10) == 0
        worker.stop()


def test_a_pause_mid_drain_stops_new_sends_within_a_second(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q)
    q.push_many([mail_payload(f"d{i}@x.example") for i in range(400)])
    env = worker_env(redis_url, Q, smtp_sink.port, RATE_PER_MINUTE=1200, WORKER_CONCURRENCY=4)
    worker = WorkerProcess(env, "draining")
    try:
        wait_for(lambda: len(smtp_sink.snapshot()) >= 20, 20, "the worker is sending")
        redis_client.set(QueueKeys(Q).paused, "1")
        paused_at = time.time()
        time.sleep(3.0)
        late = [r for r in smtp_sink.snapshot() if r.at > paused_at + 1.0]
        # jobs already reserved by the 4 lanes may finish; nothing new is taken
        assert late == [], f"{len(late)} mails sent more than 1 s after the pause"
        assert q.measure().reserved == 0
    finally:
        worker.signal(signal.SIGTERM)
        assert worker.wait(10) == 0
        worker.stop()
    assert max(smtp_sink.per_recipient().values()) == 1
