"""The group's shared rate limit (GCRA script) and backpressure state, against a real Redis."""

from __future__ import annotations

import asyncio
import re
import time

import pytest
import redis.asyncio

from sendgroup_worker.backpressure import Backpressure
from sendgroup_worker.queue.keys import QueueKeys
from sendgroup_worker.ratelimit import RateLimiter, RatePolicy

pytestmark = pytest.mark.redis

KEYS = QueueKeys("{mail-rl}")


def test_burst_then_steady_rate_shared_by_several_clients(redis_url: str) -> None:
    async def main() -> tuple[int, list[float]]:
        clients = [redis.asyncio.Redis.from_url(redis_url) for _ in range(3)]
        policy = RatePolicy(per_minute=1200, burst=5)  # 20/s, 5 at once
        limiters = [RateLimiter(c, KEYS.ratelimit, policy) for c in clients]
        first = sum([(await lim.try_take(1))[0] for lim in limiters for _ in range(3)])
        stop = asyncio.Event()
        times: list[float] = []

        async def taker(lim: RateLimiter) -> None:
            while len(times) < 30:
                got = await lim.take(1, stop)
                times.extend([time.monotonic()] * got)

        await asyncio.gather(*(taker(lim) for lim in limiters))
        for c in clients:
            await c.connection_pool.disconnect()
        return first, times

    first, times = asyncio.run(main())
    assert first == 5  # the burst, whichever client asks
    span = times[29] - times[0]
    # 30 more slots at 20/s after the burst is spent: ~1.5 s, never faster
    assert 1.35 <= span <= 3.0, span


def test_a_slot_given_back_is_available_again(redis_url: str) -> None:
    async def main() -> list[int]:
        c = redis.asyncio.Redis.from_url(redis_url)
        lim = RateLimiter(c, KEYS.ratelimit, RatePolicy(per_minute=60, burst=2))
        out = [(await lim.try_take(5))[0], (await lim.try_take(1))[0]]
        await lim.give_back(1)
        out.append((await lim.try_take(1))[0])
        granted, wait = await lim.try_take(1)
        out.append(granted)
        assert 0.5 < wait <= 1.0  # the next slot is due within T = 1 s
        await c.connection_pool.disconnect()
        return out

    assert asyncio.run(main()) == [2, 0, 1, 0]


def test_ratelimit_key_expires_on_its_own(redis_url: str) -> None:
    async def main() -> int:
        c = redis.asyncio.Redis.from_url(redis_url)
        lim = RateLimiter(c, KEYS.ratelimit, RatePolicy(per_minute=600, burst=1))
        await lim.try_take(1)
        ttl = await c.pttl(KEYS.ratelimit)
        await c.connection_pool.disconnect()
        return int(ttl)

    assert 0 < asyncio.run(main()) <= 1200


def test_run_of_temporary_failures_suspends_the_group_and_a_success_resets(
    redis_url: str,
) -> None:
    async def main() -> None:
        a = redis.asyncio.Redis.from_url(redis_url)
        b = redis.asyncio.Redis.from_url(redis_url)
        bp_a = Backpressure(a, KEYS.backpressure, suspend_after=3, suspend_for=30)
        bp_b = Backpressure(b, KEYS.backpressure, suspend_after=3, suspend_for=30)
        assert await bp_a.record_temporary("451 later") == 0
        assert await bp_b.record_temporary("451 later") == 0
        assert bp_b.run == 2
        await bp_a.record_success()  # a's cached run is 1: resets the group's run
        assert (await a.hget(KEYS.backpressure, "run")) == b"0"
        for _ in range(2):
            assert await bp_b.record_temporary("451") == 0
        suspended = await bp_a.record_temporary("451")  # third in a row, from another worker
        assert 29 <= suspended <= 30
        bp_b._read_at = -1e9  # drop b's cache: it sees the suspension
        assert 29 <= await bp_b.suspended_for() <= 30
        for c in (a, b):
            await c.connection_pool.disconnect()

    asyncio.run(main())


def test_a_reply_matching_a_pattern_suspends_at_once(redis_url: str) -> None:
    async def main() -> float:
        c = redis.asyncio.Redis.from_url(redis_url)
        bp = Backpressure(c, KEYS.backpressure, 20, 5, [re.compile(r"4\.7\.28", re.IGNORECASE)])
        assert await bp.record_temporary("451 4.7.1 greylisted") == 0
        got = await bp.record_temporary("421 4.7.28 too many messages from your IP")
        await c.connection_pool.disconnect()
        return got

    assert 4.5 <= asyncio.run(main()) <= 5
