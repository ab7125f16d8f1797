"""The operator's Redis adapter against a real redis-server: one atomic measurement, purge
by explicit key names, and a safe error when Redis is down."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis

from sendgroup_operator.queueio import QueueUnavailable, RedisQueues
from sendgroup_worker.queue.keys import QueueKeys

pytestmark = pytest.mark.redis


def _job(uuid: str, pushed_at: float) -> str:
    return json.dumps({"uuid": uuid, "attempts": 0, "pushedAt": f"{pushed_at:.4f}"})


def test_measure_counts_every_state(redis_url: str, redis_client: redis.Redis) -> None:
    keys = QueueKeys("mail-a")
    redis_client.rpush(keys.ready, _job("1", 1700000000.5), _job("2", 1700000100))
    redis_client.zadd(keys.delayed, {_job("3", 1): 2e9})
    redis_client.zadd(keys.reserved, {_job("4", 1): 2e9, _job("5", 1): 2e9})
    redis_client.zadd(keys.failed, {"6": 1})
    redis_client.hset(keys.stats, mapping={"delivered": 7, "failed": 1})
    # A neighbour queue with a longer name must not be counted.
    redis_client.rpush(QueueKeys("mail-a1").ready, _job("x", 1))

    async def go() -> None:
        queues = RedisQueues()
        m = await queues.measure(redis_url, "mail-a")
        assert (m.ready, m.delayed, m.reserved, m.failed) == (2, 1, 2, 1)
        assert m.total == 5 and (m.delivered, m.failed_total) == (7, 1)
        assert m.oldest_pushed_at == pytest.approx(1700000000.5)
        assert m.staging == 0
        deleted = await queues.purge(redis_url, "mail-a")
        assert deleted == 5
        after = await queues.measure(redis_url, "mail-a")
        assert after.total == 0 and after.failed == 0 and after.delivered == 0
        assert (await queues.measure(redis_url, "mail-a1")).ready == 1
        await queues.close()

    asyncio.run(go())


def test_unreachable_redis_gives_a_safe_message() -> None:
    async def go() -> None:
        queues = RedisQueues()
        with pytest.raises(QueueUnavailable) as err:
            await queues.measure("redis://:s3cret@127.0.0.1:1/0", "mail-a")
        assert "s3cret" not in str(err.value) and "127.0.0.1:1" in str(err.value)
        await queues.close()

    asyncio.run(go())


def test_backpressure_suspension_is_measured(redis_url: str, redis_client: redis.Redis) -> None:
    keys = QueueKeys("mail-b")
    server_ms = int(redis_client.time()[0]) * 1000
    redis_client.hset(keys.backpressure, mapping={"run": 0, "until": server_ms + 120_000})

    async def go() -> None:
        queues = RedisQueues()
        m = await queues.measure(redis_url, "mail-b")
        assert 100 < m.suspended_seconds <= 121
        redis_client.hset(keys.backpressure, "until", server_ms - 1000)
        assert (await queues.measure(redis_url, "mail-b")).suspended_seconds == 0
        await queues.close()

    asyncio.run(go())


def test_key_prefix_of_the_producers(redis_url: str, redis_client: redis.Redis) -> None:
    redis_client.rpush("laravel_database_queues:mail-l", _job("1", 1), _job("2", 2))
    redis_client.rpush("queues:mail-l", _job("3", 3))

    async def go() -> None:
        prefixed = RedisQueues("laravel_database_")
        assert (await prefixed.measure(redis_url, "mail-l")).ready == 2
        assert await prefixed.purge(redis_url, "mail-l") == 1
        assert redis_client.llen("queues:mail-l") == 1  # the unprefixed queue is another one
        await prefixed.close()

    asyncio.run(go())


def test_oldest_job_from_laravel_12_created_at(redis_url: str, redis_client: redis.Redis) -> None:
    """A plain Laravel 12 payload has ``createdAt`` (int) and no ``pushedAt``."""
    keys = QueueKeys("mail-c")
    laravel_12 = {"uuid": "1", "attempts": 0, "createdAt": 1700000042}
    redis_client.rpush(keys.ready, json.dumps(laravel_12))

    async def go() -> None:
        queues = RedisQueues()
        assert (await queues.measure(redis_url, "mail-c")).oldest_pushed_at == 1700000042
        await queues.close()

    asyncio.run(go())


def test_markers_measured_alike_by_the_operator_and_the_worker(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """One script, two clients: the operator's adapter and the worker's ``stats`` read the
    dump's staging keys, the purge and pause markers and the lock through the contract's
    measurement and get the same numbers."""
    from sendgroup_worker.queue.client import Queue

    keys = QueueKeys("mail-m")
    redis_client.rpush(keys.ready, _job("1", 1700000000))
    redis_client.rpush(keys.staging("ready"), _job("2", 1))
    redis_client.hset(keys.staging_meta, mapping={"segment": "s1", "createdAt": "x"})
    redis_client.set(keys.purge_requested, "1")
    redis_client.set(keys.paused, "1")
    redis_client.set(keys.lock, "owner")

    async def operator_side() -> object:
        queues = RedisQueues()
        try:
            return await queues.measure(redis_url, "mail-m")
        finally:
            await queues.close()

    op = asyncio.run(operator_side())
    worker = Queue(redis_client, keys, 90).measure()
    for m in (op, worker):
        assert (m.ready, m.staging, m.purge_requested, m.paused, m.busy) == (1, 2, True, True, True)
    redis_client.delete(keys.lock, keys.paused)
    later = Queue(redis_client, keys, 90).measure()
    assert (later.busy, later.paused) == (False, False)


def test_a_url_nobody_names_any_more_holds_no_connection(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Review finding (issue 16): one client per distinct ``spec.redis.url``, never closed; a
    tenant editing the URL 40 times (``?client_name=c1`` ... ``c40``) left 40 connections open
    until the operator restarted. Now the least recently used beyond ``max_clients`` and
    those idle for ``idle_close`` seconds are closed, and a URL still in use keeps its pool."""

    def named(prefix: str) -> set[str]:
        clients = redis_client.client_list()
        return {c["name"] for c in clients if c["name"].startswith(prefix)}

    async def gone(prefix: str) -> set[str]:
        """``named(prefix)`` once Redis has seen the closes: a client's close sends no command,
        Redis notices the closed socket in a later turn of its event loop, so a CLIENT LIST
        right after may still list it (seen once in CI, under load)."""
        deadline = time.monotonic() + 2
        while named(prefix) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        return named(prefix)

    async def go() -> None:
        queues = RedisQueues(max_clients=4, idle_close=1.0, close_grace=0.0)
        for i in range(40):
            await queues.measure(f"{redis_url}?client_name=edit{i}", "mail-a")
        assert queues.open_clients == 4
        await asyncio.sleep(0.2)  # the closes run (grace 0 here, 10 s by default)
        assert named("edit") == {f"edit{i}" for i in range(36, 40)}
        # the group's own URL, used at every pass, is kept while the idle ones go
        kept = f"{redis_url}?client_name=kept"
        for _ in range(3):
            await queues.measure(kept, "mail-a")
            await asyncio.sleep(0.6)
        await asyncio.sleep(0.2)
        assert named("edit") == set() and named("kept") == {"kept"}
        assert queues.open_clients == 1
        await queues.close()
        assert await gone("kept") == set()
        # ten callers asking for a new URL at once share one client: closing the operator's
        # clients leaves none of its connections (a second client made by a caller that lost
        # the race was never closed)
        burst = RedisQueues()
        await asyncio.gather(
            *(burst.measure(f"{redis_url}?client_name=burst", "mail-a") for _ in range(10))
        )
        assert burst.open_clients == 1 and named("burst")
        await burst.close()
        assert await gone("burst") == set()

    asyncio.run(go())
