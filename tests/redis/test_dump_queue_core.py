"""Dump and restore of a queue driven by the queue core (``sendgroup_worker.queue.Queue``):
after a restore the core sees the same counts, restored reservations expire into ready and
are handed out, failed records are readable and retryable, and blocking workers wake up."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis

from sendgroup_worker.producer import make_mail_payload
from sendgroup_worker.queue import Queue, QueueKeys
from tests.support.dumps import run_cli, summary

pytestmark = pytest.mark.redis


def test_a_restored_queue_works_with_the_queue_core(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    now = 1_800_000_000.0
    q = Queue(redis_client, QueueKeys("mail-core"), retry_after=90)
    q.push_many([make_mail_payload(f"u{i}@example.test", text="hi") for i in range(200)])
    q.later([make_mail_payload(f"later{i}@example.test", text="x") for i in range(7)], 600, now=now)
    reserved = q.reserve(count=5, now=now)  # their workers vanish: the group was paused
    assert q.fail(reserved[0], "SmtpPermanent", "550 no such user", now=now) is False
    before = q.measure(now=now)
    assert (before.ready, before.delayed, before.reserved, before.failed) == (195, 7, 4, 1)

    summary(run_cli("dump", "-q", "mail-core", "--dumps-dir", str(tmp_path), redis_url=redis_url))
    gone = q.measure(now=now)
    assert (gone.total, gone.failed) == (0, 0)
    assert q.wait_for_work(0.01) is False

    summary(
        run_cli("restore", "-q", "mail-core", "--dumps-dir", str(tmp_path), redis_url=redis_url)
    )
    after = q.measure(now=now)
    assert (after.ready, after.delayed, after.reserved, after.failed) == (195, 7, 4, 1)
    assert after.oldest_job_age_seconds == before.oldest_job_age_seconds
    assert q.wait_for_work(1) is True  # notify tokens are back: blocking workers wake up
    assert q.failed_list().jobs[0].uuid == reserved[0].uuid

    # Past retry_after and the delay, everything is handed out exactly once.
    later = now + 3600
    seen: list[str] = []
    while batch := q.reserve(count=50, now=later):
        seen += [j.uuid for j in batch]
        for j in batch:
            q.done(j, now=later)
    assert len(seen) == len(set(seen)) == 195 + 7 + 4
    assert {j.uuid for j in reserved[1:]} <= set(seen)
    assert q.failed_retry(reserved[0].uuid).retried == 1
    assert [j.uuid for j in q.reserve(count=5, now=later)] == [reserved[0].uuid]
