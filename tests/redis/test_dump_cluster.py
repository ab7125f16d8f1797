"""Dump, restore and purge on a real three-master Redis Cluster (loopback ports).

A queue named with a hash tag (``{mail-x}``) keeps all of its keys, the staging keys, the lock
and the restore progress in one slot, so every script works; a queue without a hash tag is
refused with a message that names the rule, instead of failing later with CROSSSLOT.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import redis.cluster

from sendgroup_worker.queue.keys import QueueKeys
from tests.support.dumps import assert_merged, fill_queue, payload, push, run_cli, snapshot, summary
from tests.support.redis_cluster import RedisCluster

pytestmark = pytest.mark.redis


@pytest.fixture
def cluster_client(redis_cluster: RedisCluster) -> redis.cluster.RedisCluster[bytes]:
    c = redis_cluster.client()
    c.flushall(target_nodes=redis.cluster.RedisCluster.PRIMARIES)
    return c


def _present(client: redis.cluster.RedisCluster[bytes], keys: QueueKeys) -> list[str]:
    return [k for k in (*keys.all_keys, keys.lock) if client.exists(k)]


def test_hash_tagged_queue_dumps_restores_and_purges_on_a_cluster(
    redis_cluster: RedisCluster, cluster_client: redis.cluster.RedisCluster[bytes], tmp_path: Path
) -> None:
    keys, other = QueueKeys("{mail-x}"), QueueKeys("{mail-y}")
    assert cluster_client.keyslot(keys.ready) != cluster_client.keyslot(other.ready)
    fill_queue(cluster_client, keys, ready=5_000, delayed=300, reserved=100, failed=10, size=500)
    fill_queue(cluster_client, other, ready=50, tag="other")
    before, other_before = snapshot(cluster_client, keys), snapshot(cluster_client, other)

    dumped = summary(
        run_cli("dump", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_cluster.url)
    )
    assert dumped["jobs"] == 5_400 and dumped["failed"] == 10
    assert _present(cluster_client, keys) == []
    pushed = [payload(i, "while-dumped", 300) for i in range(123)]
    push(cluster_client, keys, pushed)

    restored = summary(
        run_cli(
            "restore", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_cluster.url
        )
    )
    assert restored["jobs"] == 5_400
    assert_merged(snapshot(cluster_client, keys), before, pushed)

    purged = summary(run_cli("purge", "-q", keys.queue, redis_url=redis_cluster.url))
    assert purged["jobs"] == 5_400 + 123 and purged["failed"] == 10
    assert _present(cluster_client, keys) == []
    assert snapshot(cluster_client, other) == other_before


@pytest.mark.parametrize("command", ["dump", "restore", "purge"])
def test_queue_without_hash_tag_is_refused_on_a_cluster(
    redis_cluster: RedisCluster,
    cluster_client: redis.cluster.RedisCluster[bytes],
    tmp_path: Path,
    command: str,
) -> None:
    keys = QueueKeys("mail-plain")
    cluster_client.rpush(keys.ready, b"job")
    args = [command, "-q", keys.queue]
    if command != "purge":
        args += ["--dumps-dir", str(tmp_path)]
    proc = run_cli(*args, redis_url=redis_cluster.url)
    assert proc.returncode == 5, proc.stderr
    msg = proc.stderr.strip()
    assert "CROSSSLOT" not in msg and "has no hash tag" in msg and "'{mail-plain}'" in msg, msg
    assert cluster_client.lrange(keys.ready, 0, -1) == [b"job"]
    assert cluster_client.exists(keys.lock) == 0
