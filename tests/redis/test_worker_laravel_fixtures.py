"""The worker on Redis state written by Laravel 11 / Horizon 5 themselves (the shared fixtures):
prefixed keys, Horizon's payload shape, delayed jobs. Laravel's own job classes have no Python
handler, so each must land in failed with its bytes kept (only ``attempts`` rewritten), and
the worker must keep going."""

from __future__ import annotations

import re
import signal
from collections import Counter

import pytest
import redis

from sendgroup_worker.queue.client import Queue
from sendgroup_worker.queue.keys import QueueKeys
from tests.support import laravel_fixtures as lf
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess, mail_payload, wait_for, worker_env

pytestmark = pytest.mark.redis


def _bump_attempts(raw: bytes) -> bytes:
    found = re.findall(rb'"attempts":(\d+)', raw)
    assert len(found) == 1, raw[:200]
    n = int(found[0])
    return raw.replace(f'"attempts":{n}'.encode(), f'"attempts":{n + 1}'.encode())


def test_horizon_written_queue_is_drained_into_failed_byte_for_byte(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    scenario = lf.load("05-horizon.json")["scenarios"]["prefixed"]
    state = scenario["step1_push"][-1]["state"]
    prefix = lf.prefix_of(scenario)
    keys = QueueKeys("default", prefix=prefix)
    originals = lf.list_items(state, keys.ready) + [
        member for member, _ in lf.zset_items(state, keys.delayed)
    ]
    assert len(originals) == 6 and prefix == "laravel_database_"
    client = redis.Redis.from_url(redis_url)
    lf.write_state(client, state)  # delayed scores lie in the past: due at once
    q = Queue(client, keys, retry_after=3)
    good = mail_payload("after-laravel@x.example")
    q.push(good)
    env = worker_env(redis_url, "default", smtp_sink.port, SENDGROUP_KEY_PREFIX=prefix)
    w = WorkerProcess(env)
    try:
        wait_for(lambda: q.measure().total == 0, 20, "the Laravel queue drained")
        wait_for(lambda: len(smtp_sink.snapshot()) == 1, 5, "the good job delivered")
    finally:
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
        w.stop()
    page = q.failed_list(limit=50)
    assert page.total == 6
    assert sorted(j.payload for j in page.jobs) == sorted(_bump_attempts(r) for r in originals)
    assert Counter(j.exception for j in page.jobs) == Counter({"LaravelJobNotSupported": 6})
    messages = Counter(j.message.split(";")[0] for j in page.jobs)
    assert messages == Counter(
        {
            "App\\Jobs\\ProcessPodcast is a Laravel job class "
            "(Illuminate\\Queue\\CallQueuedHandler@call with a serialized PHP command)": 4,
            "App\\Jobs\\TaggedPodcast is a Laravel job class "
            "(Illuminate\\Queue\\CallQueuedHandler@call with a serialized PHP command)": 1,
            # the pushRaw payload
            "App\\Jobs\\RawHandler@handle is a Laravel string job (a PHP handler class)": 1,
        }
    )
    # every reason names the fix, with this queue's queue:work command line
    for j in page.jobs:
        assert (
            "fix: run this group with the Laravel runtime (spec.worker.runtime: laravel) or "
            "another Laravel worker on this queue (php artisan queue:work redis "
            "--queue=default --tries=N)" in j.message
        ), j.message
    assert client.keys("queues:*") == []  # nothing written outside the prefix
