"""The worker's asyncio Redis connections against a real server: the direct write
(``redisclient._DirectWrite``) for commands the kernel takes at once, redis-py's timed drain for
one it does not (a 48 MiB value; a server that stopped reading: ``TimeoutError`` after the
socket timeout, as redis-py's own write), and a lane's held connection
(``redisclient.lane_client``) checked after an idle spell, as redis-py's pool checks every
connection it hands out, so a server closing it is met with a new connection."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
import redis.exceptions

from sendgroup_worker import redisclient
from sendgroup_worker.redisurl import parse
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis

BIG = 48 * 1024 * 1024  # bytes: far beyond a loopback socket's send buffer


def test_small_and_big_commands_arrive_intact(redis_url: str) -> None:
    async def run() -> None:
        client = redisclient.build_async(parse(redis_url), "standalone", socket_timeout=10)
        try:
            value = os.urandom(BIG)
            assert await client.set("big", value)
            for i in range(200):  # direct writes, interleaved with their replies
                await client.rpush("small", f"item-{i}")
            assert await client.get("big") == value
            assert await client.lrange("small", 0, -1) == [b"item-%d" % i for i in range(200)]
        finally:
            await redisclient.aclose(client)

    asyncio.run(run())


def test_a_write_the_server_does_not_read_times_out_like_redis_py() -> None:
    server = RedisServer().start()
    assert server.proc is not None
    try:

        async def run() -> float:
            client = redisclient.build_async(parse(server.url), "standalone", socket_timeout=1)
            try:
                await client.ping()
                os.kill(server.proc.pid, signal.SIGSTOP)  # type: ignore[union-attr]
                started = time.monotonic()
                with pytest.raises(redis.exceptions.TimeoutError):
                    await client.set("big", os.urandom(BIG))
                return time.monotonic() - started
            finally:
                os.kill(server.proc.pid, signal.SIGCONT)  # type: ignore[union-attr]
                await redisclient.aclose(client)

        took = asyncio.run(run())
        # redis-py retries a timeout (its default Retry: 3 more tries with backoff), each
        # bounded by the 1 s socket timeout: bounded, never a hang
        assert took < 10, took
    finally:
        server.cleanup()


def test_a_lane_s_held_connection_comes_back_after_the_server_closes_it(redis_url: str) -> None:
    async def run() -> None:
        client = redisclient.build_async(parse(redis_url), "standalone", socket_timeout=5)
        held = redisclient.lane_client(client)
        admin = redisclient.build_async(parse(redis_url), "standalone")
        try:
            assert held is not client
            first = await held.client_id()
            assert await held.client_id() == first  # one connection, held
            await admin.client_kill_filter(_id=first)
            # unused for longer than LANE_PROBE_IDLE: checked and replaced before the command
            await asyncio.sleep(redisclient.LANE_PROBE_IDLE + 0.2)
            second = await held.client_id()
            assert second != first
            assert await held.client_id() == second
            # killed while busy (no idle gap): that one command fails, the next reconnects
            await admin.client_kill_filter(_id=second)
            with pytest.raises(redis.exceptions.ConnectionError):
                await held.client_id()
            second = await held.client_id()
            await held.aclose()
            # the held connection went back to the pool: the client takes it from there
            assert await client.client_id() == second
        finally:
            await redisclient.aclose(admin)
            await redisclient.aclose(client)

    asyncio.run(run())


def test_on_a_cluster_a_lane_uses_the_cluster_client() -> None:
    cluster = redisclient.build_async(parse("redis://127.0.0.1:1/0"), "cluster")
    assert redisclient.lane_client(cluster) is cluster
