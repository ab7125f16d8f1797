"""The asyncio cluster client's connection race (redis-py 7.4.1) on a real Redis Cluster: after a
failed call, ``ClusterNode.disconnect_free_connections`` closes connections that stay in the free
list meanwhile; a task that takes one in that window writes to ``_writer = None``. CI saw it once
in the failover test (``AttributeError: 'NoneType' object has no attribute 'writelines'``, a
traceback in a worker lane). The worker's cluster clients make that a ``ConnectionError``, which
the cluster client retries and the worker logs as one outage line.

The window is one event-loop turn (``asyncio.wait_for`` runs the write in a new task), so the
tests open it on purpose: a write is started, and the connection is closed from this task, as
the cluster client's own clean-up task does, before the write task runs. The worker's
connections now write directly (``redisclient._DirectWrite``: no task, no window) and keep the
guard for the drain redis-py still runs when the kernel does not take a write at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio.connection
import redis.exceptions

from sendgroup_worker import redisclient
from sendgroup_worker.redisurl import parse
from tests.support.redis_cluster import RedisCluster

pytestmark = pytest.mark.redis


async def _write_while_closed(conn: Any) -> BaseException | None:
    """Start a PING on ``conn``, close ``conn`` (as another task would) before the write task
    runs; what the PING raised, or None."""
    await conn.connect()
    send = asyncio.create_task(conn.send_packed_command(conn.pack_command("PING"), False))
    await asyncio.sleep(0)  # send is now inside asyncio.wait_for; the write task is queued
    await conn.disconnect(nowait=True)
    try:
        await send
    except BaseException as exc:  # what it raised is the result
        return exc
    return None


def test_the_race_is_real_for_redis_py_and_a_connection_error_for_ours(
    redis_cluster: RedisCluster,
) -> None:
    async def run() -> tuple[BaseException | None, BaseException | None, list[str], bytes]:
        client: Any = redisclient.build_async(parse(redis_cluster.url), "cluster", socket_timeout=5)
        try:
            await client.set("{race}k", "v")
            node = client.get_node_from_key("{race}k")
            ours = node.acquire_connection()
            node.release(ours)
            plain = redis.asyncio.connection.Connection(
                **{k: v for k, v in node.connection_kwargs.items()}
            )
            guard_only = redisclient._with(
                redis.asyncio.connection.Connection, redisclient._WriteGuard
            )(**{k: v for k, v in node.connection_kwargs.items() if k != "connection_class"})
            got_plain = await _write_while_closed(plain)
            got_guard = await _write_while_closed(guard_only)
            got_ours = await _write_while_closed(ours)
            await plain.disconnect()
            await guard_only.disconnect()
            # every node the client learnt from the slot map opens guarded connections
            classes = sorted(
                {
                    "guarded"
                    if issubclass(n.connection_class, redisclient._WriteGuard)
                    else n.connection_class.__name__
                    for n in client.get_nodes()
                }
            )
            # and the client goes on over the closed connection
            value = await client.get("{race}k")
            return got_plain, got_guard, got_ours, classes, value
        finally:
            await client.aclose()

    got_plain, got_guard, got_ours, classes, value = asyncio.run(run())
    assert isinstance(got_plain, AttributeError), (
        f"redis-py's own connection no longer fails in this race ({got_plain!r}): the guard in "
        "sendgroup_worker.redisclient may go"
    )
    assert isinstance(got_guard, redis.exceptions.ConnectionError), repr(got_guard)
    assert "closed by another task" in str(got_guard)
    # the worker's connection wrote the PING at once, before the close: no window to fall in
    assert got_ours is None
    assert classes == ["guarded"]
    assert value == b"v"
