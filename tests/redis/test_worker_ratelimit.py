"""The group's shared rate limit (GCRA script) and backpressure state, against a real Redis."""

from __future__ import annotations

import asyncio
import random
import re
import time

import pytest
import redis.asyncio

from sendgroup_worker.backpressure import Backpressure
from sendgroup_worker.queue.keys import QueueKeys
from sendgroup_worker.ratelimit import RateLimiter, RateMark, RatePolicy

pytestmark = pytest.mark.redis

KEYS = QueueKeys("{mail-rl}")


def _limiter(client: redis.asyncio.Redis, policy: RatePolicy) -> RateLimiter:
    return RateLimiter(client, KEYS.ratelimit, policy, KEYS.ratelimit_ledger)


def _limiter(client: redis.asyncio.Redis, policy: RatePolicy) -> RateLimiter:
    return RateLimiter(client, KEYS.ratelimit, policy, KEYS.ratelimit_ledger)


def test_burst_then_steady_rate_shared_by_several_clients(redis_url: str) -> None:
    async def main() -> tuple[int, list[float]]:
        clients = [redis.asyncio.Redis.from_url(redis_url) for _ in range(3)]
        policy = RatePolicy(per_minute=1200, burst=5)  # 20/s, 5 at once
        limiters = [_limiter(c, policy) for c in clients]
        first = sum([(await lim.try_take(1)).granted for lim in limiters for _ in range(3)])
        stop = asyncio.Event()
        times: list[float] = []

        async def taker(lim: RateLimiter) -> None:
            while len(times) < 30:
                got = await lim.take(1, stop)
                times.extend([time.monotonic()] * got.granted)

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
        lim = _limiter(c, RatePolicy(per_minute=60, burst=2))
        first = await lim.try_take(5)
        out = [first.granted, (await lim.try_take(1)).granted]
        out.append(await lim.give_back(1, first.mark))
        out.append((await lim.try_take(1)).granted)
        granted, wait, _ = await lim.try_take(1)
        out.append(granted)
        assert 0.5 < wait <= 1.0  # the next slot is due within T = 1 s
        await c.connection_pool.disconnect()
        return out

    assert asyncio.run(main()) == [2, 0, 1, 1, 0]


def test_a_give_back_after_a_later_take_lets_no_second_message_through(redis_url: str) -> None:
    """A mail's precharged recipients given back after another lane waited out that debt and
    sent: the later message keeps its place (burst 1: nothing else may go at once)."""

    async def main() -> tuple[int, int, float]:
        a, b = (redis.asyncio.Redis.from_url(redis_url) for _ in range(2))
        policy = RatePolicy(per_minute=600, burst=1)  # one message per 100 ms, one at once
        lane_a, lane_b = _limiter(a, policy), _limiter(b, policy)
        mark = await lane_a.charge(5)  # a mail's 5 extra recipients: 0.5 s of debt
        took = await lane_b.take(1, asyncio.Event())  # waits out the debt, then sends
        back = await lane_a.give_back(5, mark)  # the mail went to none of them
        after = await lane_a.try_take(1)
        for c in (a, b):
            await c.connection_pool.disconnect()
        return took.granted, back + after.granted, after.wait

    took, second, wait = asyncio.run(main())
    assert took == 1
    assert second == 0, "a give-back let a message go in the interval the last one took"
    assert 0.05 < wait <= 0.1


def test_a_give_back_with_nothing_taken_since_returns_every_cell(redis_url: str) -> None:
    async def main() -> tuple[int, int]:
        c = redis.asyncio.Redis.from_url(redis_url)
        lim = _limiter(c, RatePolicy(per_minute=60, burst=8))
        first = await lim.try_take(6)
        back = await lim.give_back(4, first.mark)
        again = await lim.try_take(8)
        await c.connection_pool.disconnect()
        return back, again.granted

    assert asyncio.run(main()) == (4, 6)


def test_random_takes_and_give_backs_of_three_clients_stay_within_the_rate(
    redis_url: str,
) -> None:
    """Three clients take slots, use some and give the rest back at random later steps (the
    worker's partial batches, hand-backs and paused reserves); in every window of the
    messages really sent there are at most burst + window / T of them (T the emission
    interval). Each call's window is its start and end on this side, so the test's clock
    error only loosens the bound."""
    interval, burst = 0.01, 4  # 6,000 per minute
    rng = random.Random(19)

    async def main() -> list[tuple[float, float, int]]:
        clients = [redis.asyncio.Redis.from_url(redis_url) for _ in range(3)]
        lims = [_limiter(c, RatePolicy(per_minute=6000, burst=burst)) for c in clients]
        sends: list[tuple[float, float, int]] = []  # (call start, call end, messages sent)
        pending: list[tuple[int, int, RateLimiter, RateMark | None]] = []
        for step in range(300):
            for _, n, lim, mark in [p for p in pending if p[0] == step]:
                await lim.give_back(n, mark)
            pending = [p for p in pending if p[0] != step]
            lim = rng.choice(lims)
            start = time.monotonic()
            grant = await lim.try_take(rng.randint(1, 4))
            end = time.monotonic()
            used = rng.randint(0, grant.granted)
            sends.append((start, end, used))
            if grant.granted > used:
                pending.append((step + rng.randint(0, 6), grant.granted - used, lim, grant.mark))
            await asyncio.sleep(rng.choice([0, 0, 0.002, 0.005, 0.012, 0.03]))
        for c in clients:
            await c.connection_pool.disconnect()
        return sends

    sends = asyncio.run(main())
    assert sum(n for *_, n in sends) > 150  # the limit was busy, not idle
    worst = 0.0
    for i in range(len(sends)):
        count = 0
        for j in range(i, len(sends)):
            count += sends[j][2]
            allowed = burst + (sends[j][1] - sends[i][0]) / interval
            worst = max(worst, count - allowed)
    assert worst <= 1e-9, f"{worst:.2f} messages over the rate in some window"


def test_ratelimit_key_expires_on_its_own(redis_url: str) -> None:
    async def main() -> int:
        c = redis.asyncio.Redis.from_url(redis_url)
        lim = _limiter(c, RatePolicy(per_minute=600, burst=1))
        await lim.try_take(1)
        ttl = await c.pttl(KEYS.ratelimit)
        ledger_ttl = await c.pttl(KEYS.ratelimit_ledger)
        assert 3_600_000 < ledger_ttl <= 3_601_200  # the ledger outlives the TAT by an hour
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


def test_the_worker_clock_follows_redis(redis_url: str) -> None:
    from sendgroup_worker.worker import RedisClock

    async def main() -> tuple[float, float]:
        c = redis.asyncio.Redis.from_url(redis_url)
        clock = RedisClock(c)
        clock.offset = 3600.0  # as if this pod's clock were an hour behind
        await clock.refresh()
        seconds, micros = await c.time()
        await c.connection_pool.disconnect()
        return clock.now(), seconds + micros / 1e6

    mine, theirs = asyncio.run(main())
    assert abs(mine - theirs) < 0.05
