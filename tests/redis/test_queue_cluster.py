"""The queue scripts on a real 3-master Redis Cluster: a hash-tagged queue name keeps every
key (Laravel's four and ours) in one slot, so each script runs on one node."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest
import redis.asyncio.cluster
import redis.cluster

from sendgroup_worker.producer import make_mail_payload
from sendgroup_worker.queue import Ack, AsyncQueue, Queue, QueueKeys
from tests.support.redis_cluster import RedisCluster

pytestmark = pytest.mark.redis


@pytest.fixture
def cluster(redis_cluster: RedisCluster) -> Iterator[RedisCluster]:
    """The session's cluster (one per server build, see tests/conftest.py), flushed."""
    redis_cluster.client().flushall(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
    yield redis_cluster


def test_every_operation_on_a_hash_tagged_queue(cluster: RedisCluster) -> None:
    client = cluster.client()
    try:
        q = Queue(client, QueueKeys("{mail-gmail}", prefix="laravel_database_"), 60)
        assert q.push_many([make_mail_payload(f"u{i}@example.test", text="x") for i in range(5)])
        q.later(make_mail_payload("later@example.test", text="x"), 10, now=1000)
        a, b, c = q.reserve(count=3, now=1000)
        assert q.begin_send(a) == "ok"
        [d] = q.reserve(ack=[Ack.of(a)], now=1001)
        assert q.release(b, 5, now=1001) is False
        assert q.fail(c, "X", "boom", now=1001) is False
        assert q.done(d, now=1002) is False
        stats = q.measure(now=1003)
        assert (stats.ready, stats.delayed, stats.reserved, stats.failed) == (1, 2, 0, 1)
        assert (stats.delivered, stats.released, stats.failed_total) == (2, 1, 1)
        assert q.failed_retry_all() == 1
        assert q.failed_list().total == 0
        assert q.size() == 4
        assert q.clear() == 4
        slots = {client.keyslot(k) for k in q.keys.all_keys}
        assert len(slots) == 1
    finally:
        client.close()


def test_untagged_queue_is_refused_on_a_cluster(cluster: RedisCluster) -> None:
    client = cluster.client()
    try:
        with pytest.raises(ValueError, match="hash tag"):
            Queue(client, QueueKeys("mail-gmail"), 60)
    finally:
        client.close()


def test_payload_bytes_identical_on_cluster(cluster: RedisCluster) -> None:
    client: redis.cluster.RedisCluster = cluster.client()
    try:
        q = Queue(client, QueueKeys("{mail-b}"), 60)
        raw = make_mail_payload("a@example.test", text="Grüße / hi")
        q.push(raw)
        [job] = q.reserve(now=1000)
        assert job.raw == raw
        assert json.loads(job.reserved)["attempts"] == 1
    finally:
        client.close()


def test_async_queue_on_a_cluster(cluster: RedisCluster) -> None:
    async def scenario() -> None:
        nodes = [redis.asyncio.cluster.ClusterNode("127.0.0.1", s.port) for s in cluster.servers]
        client = redis.asyncio.cluster.RedisCluster(startup_nodes=nodes)
        try:
            aq = AsyncQueue(client, QueueKeys("{mail-async}"), 60)
            await aq.push_many(
                [make_mail_payload(f"u{i}@example.test", text="x") for i in range(3)]
            )
            jobs = await aq.reserve(count=2, now=1000)
            [job] = await aq.reserve(ack=[Ack.of(j) for j in jobs], now=1001)
            assert await aq.begin_send(job) == "ok"
            assert await aq.done(job) is False
            stats = await aq.measure(now=1002)
            assert (stats.total, stats.delivered) == (0, 3)
        finally:
            await client.aclose()

    asyncio.run(scenario())
