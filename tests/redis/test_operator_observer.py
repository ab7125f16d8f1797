"""The operator's observer against a real redis-server: many groups measured in a few round
trips (counted by the server's INFO commandstats), idle groups answered without Redis, and
a job pushed to an idle group wakes that group (and only that one) within a poll or two."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace

import pytest
import redis

from sendgroup_operator.observer import Observer
from sendgroup_operator.queueio import QueueUnavailable, RedisQueues
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.redis_sentinel import SentinelSetup
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis

GROUPS = 300


def _calls(client: redis.Redis) -> dict[str, int]:
    info = client.info("commandstats")
    return {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in info.items()}


def _delta(before: dict[str, int], after: dict[str, int], name: str) -> int:
    return after.get(name, 0) - before.get(name, 0)


def _job(uuid: str) -> str:
    return json.dumps({"uuid": uuid, "attempts": 0, "pushedAt": f"{time.time():.4f}"})


def test_batched_measurements_match_single_ones(redis_url: str, redis_client: redis.Redis) -> None:
    for i in range(0, GROUPS, 7):  # every 7th group holds i+1 jobs
        redis_client.rpush(QueueKeys(f"mail-{i}").ready, *(_job(f"{i}-{j}") for j in range(i + 1)))

    # the session's Redis may hold measure.lua from earlier tests: start with no scripts, as
    # the NOSCRIPT round trip counted below assumes (a fresh or restarted Redis)
    redis_client.script_flush()

    async def go() -> None:
        queues = RedisQueues()
        observer = Observer(queues, wake=lambda key: None)
        await queues.client(redis_url)
        before = _calls(redis_client)
        got = await asyncio.gather(
            *(observer.measure(f"ns/g{i}", redis_url, f"mail-{i}") for i in range(GROUPS))
        )
        after = _calls(redis_client)
        for i, m in enumerate(got):
            assert m.ready == (i + 1 if i % 7 == 0 else 0)
            single = await queues.measure(redis_url, f"mail-{i}")
            assert replace(m, measured_at=None) == replace(single, measured_at=None)
        # the first batch finds no script (NOSCRIPT) and sends it in full once per group: two
        # round trips for 300 groups; the next batch is EVALSHA only, one round trip
        assert _delta(before, after, "eval") == GROUPS
        assert observer.counts.round_trips == 2
        before = _calls(redis_client)
        await asyncio.gather(
            *(observer.measure(f"ns/g{i}", redis_url, f"mail-{i}") for i in range(GROUPS))
        )
        after = _calls(redis_client)
        assert _delta(before, after, "evalsha") == GROUPS and _delta(before, after, "eval") == 0
        assert observer.counts.round_trips == 3
        assert observer.counts.measured == 2 * GROUPS
        await observer.close()
        await queues.close()

    asyncio.run(go())


def test_idle_groups_cost_one_exists_per_poll_and_a_push_wakes_its_group(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Polled (client tracking off, as on Redis Cluster or where Redis refuses it)."""
    woken: list[tuple[str, float]] = []

    async def go() -> None:
        queues = RedisQueues()
        observer = Observer(
            queues,
            wake=lambda key: woken.append((key, time.monotonic())),
            poll_interval=0.2,
            track=False,
        )
        keys = [f"ns/g{i}" for i in range(GROUPS)]
        await asyncio.gather(*(observer.measure(k, redis_url, f"mail-{k[4:]}") for k in keys))
        for k in keys:
            observer.settle(k, idle=True)
        assert sorted(observer.idle_groups()) == sorted(keys)
        before = _calls(redis_client)
        await asyncio.sleep(2.0)
        # answered from the last measurement: no Redis command at all
        again = await asyncio.gather(
            *(observer.measure(k, redis_url, f"mail-{k[4:]}") for k in keys)
        )
        after = _calls(redis_client)
        assert all(m.total == 0 for m in again) and observer.counts.reused == GROUPS
        polls = _delta(before, after, "exists")
        assert 7 <= polls <= 11  # ~10 polls of 2 s / 0.2 s, one EXISTS each for 300 groups
        assert sum(after.values()) - sum(before.values()) - 1 <= polls  # +1: INFO itself
        assert not woken

        pushed = time.monotonic()
        redis_client.rpush(QueueKeys("mail-42").ready, _job("late"))
        redis_client.rpush(QueueKeys("mail-42").notify, "1")
        while not woken and time.monotonic() - pushed < 5:
            await asyncio.sleep(0.01)
        assert [k for k, _ in woken] == ["ns/g42"]
        assert woken[0][1] - pushed < 0.5
        assert "ns/g42" not in observer.idle_groups()
        m = await observer.measure("ns/g42", redis_url, "mail-42")
        assert m.ready == 1  # a full measurement now
        await observer.close()
        await queues.close()

    asyncio.run(go())


def test_unreachable_redis_fails_each_waiting_measurement_safely() -> None:
    async def go() -> None:
        observer = Observer(RedisQueues(), wake=lambda key: None)
        url = "redis://:s3cret@127.0.0.1:1/0"
        results = await asyncio.gather(
            *(observer.measure(f"ns/g{i}", url, "mail-a") for i in range(5)),
            return_exceptions=True,
        )
        assert all(isinstance(r, QueueUnavailable) for r in results)
        assert all("s3cret" not in str(r) and "127.0.0.1" in str(r) for r in results)
        await observer.close()

    asyncio.run(go())


def test_an_idle_check_that_fails_sends_the_groups_back_to_full_measurements() -> None:
    """Redis gone while groups are idle: their next passes measure in full, so each reports
    the outage (QueueUnavailable) instead of a stale empty queue."""
    server = RedisServer().start()

    async def go() -> None:
        observer = Observer(RedisQueues(), wake=lambda key: None, poll_interval=0.1)
        await observer.measure("ns/a", server.url, "mail-a")
        observer.settle("ns/a", idle=True)
        assert observer.idle_groups() == ["ns/a"]
        server.cleanup()
        await asyncio.sleep(0.5)
        assert observer.idle_groups() == []
        with pytest.raises(QueueUnavailable):
            await observer.measure("ns/a", server.url, "mail-a")
        await observer.close()

    try:
        asyncio.run(go())
    finally:
        server.cleanup()


def test_an_unexpected_error_still_answers_every_waiting_group(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A measurement batch that fails with an error no Redis client should raise (a client
    library's bug: redis-py's cluster pipeline raised TypeError on a reply callback) answers
    every waiting group with QueueUnavailable instead of leaving its daemon waiting forever;
    the next batch measures normally."""

    async def go() -> None:
        queues = RedisQueues()
        observer = Observer(queues, wake=lambda key: None)
        real = observer._measure_batch
        calls = 0

        async def flaky(*args: object) -> object:
            nonlocal calls
            calls += 1
            if calls == 1:
                raise TypeError("<lambda>() got an unexpected keyword argument 'keys'")
            return await real(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(observer, "_measure_batch", flaky)
        first = await asyncio.wait_for(
            asyncio.gather(
                *(observer.measure(f"ns/g{i}", redis_url, f"mail-u{i}") for i in range(3)),
                return_exceptions=True,
            ),
            10,
        )
        assert all(isinstance(r, QueueUnavailable) for r in first), first
        again = await asyncio.wait_for(observer.measure("ns/g0", redis_url, "mail-u0"), 10)
        assert again.total == 0
        await observer.close()
        await queues.close()

    asyncio.run(go())


def test_the_idle_set_follows_settle_wake_forget_and_a_move(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The idle check's set is kept as groups settle, wake, go and move to another Redis (issue
    15: no scan of every group per poll); a push to any idle group still wakes it, and only
    groups still idle are checked."""
    other = RedisServer().start()
    woken: list[str] = []

    async def go() -> None:
        observer = Observer(RedisQueues(), wake=woken.append, poll_interval=0.05, batch=4)
        names = [f"ns/m{i}" for i in range(10)]
        for i, key in enumerate(names):
            await observer.measure(key, redis_url, f"mail-move-{i}")
            observer.settle(key, idle=True)
        assert sorted(observer.idle_groups()) == sorted(names)
        observer.forget("ns/m0")
        observer.invalidate("ns/m1")
        observer.settle("ns/m2", idle=False)
        await observer.measure("ns/m3", other.url, "mail-move-3")  # moved to another Redis
        observer.settle("ns/m3", idle=True)
        left = {"ns/m3", *names[4:]}
        assert sorted(observer.idle_groups()) == sorted(left)
        checks = observer.counts.idle_checks
        await asyncio.sleep(0.2)  # a few polls of each Redis
        assert observer.counts.idle_checks > checks
        # a push to a group that is no longer idle wakes nothing; one to an idle group does,
        # on either Redis
        redis_client.rpush(QueueKeys("mail-move-1").ready, _job("x1"))
        redis_client.rpush(QueueKeys("mail-move-7").ready, _job("x7"))
        other.client().rpush(QueueKeys("mail-move-3").ready, _job("x3"))
        deadline = time.monotonic() + 5
        while len(woken) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.2)
        assert sorted(woken) == ["ns/m3", "ns/m7"]
        assert sorted(observer.idle_groups()) == sorted(left - {"ns/m3", "ns/m7"})
        await observer.close()

    try:
        asyncio.run(go())
    finally:
        other.cleanup()


async def _wait_for(what: object, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not what() and time.monotonic() < deadline:  # type: ignore[operator]
        await asyncio.sleep(0.005)


def test_tracked_idle_groups_cost_no_command_at_rest_and_a_push_wakes_its_group_at_once(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Client tracking (standalone Redis >= 6): after the first check of the idle groups,
    Redis sees no command at all from the observer (INFO commandstats), yet a job pushed to
    one of them wakes that group, and only it, within milliseconds: long before a poll could
    (the poll interval here is 30 s). The group is tracked again once it settles idle."""
    woken: list[tuple[str, float]] = []

    async def go() -> None:
        queues = RedisQueues()
        observer = Observer(
            queues, wake=lambda key: woken.append((key, time.monotonic())), poll_interval=0.05
        )
        keys = [f"ns/t{i}" for i in range(GROUPS)]
        await asyncio.gather(*(observer.measure(k, redis_url, f"mail-{k[3:]}") for k in keys))
        for k in keys:
            observer.settle(k, idle=True)
        await _wait_for(lambda: observer.counts.idle_checks >= GROUPS, 5)
        assert observer.counts.idle_checks == GROUPS  # each group read once, now tracked
        observer.poll_interval = 30.0  # a poll cannot explain what follows
        before = _calls(redis_client)
        await asyncio.sleep(2.0)
        after = _calls(redis_client)
        assert sum(after.values()) - sum(before.values()) == 1  # INFO itself, nothing else
        assert not woken

        for round_ in range(2):  # the second time: tracked again after it settled idle
            pushed = time.monotonic()
            redis_client.rpush(QueueKeys("mail-t42").ready, _job(f"late{round_}"))
            await _wait_for(lambda: woken, 5)
            assert [k for k, _ in woken] == ["ns/t42"]
            assert woken[0][1] - pushed < 0.2, woken[0][1] - pushed
            assert "ns/t42" not in observer.idle_groups()
            m = await observer.measure("ns/t42", redis_url, "mail-t42")
            assert m.ready == 1  # a full measurement now
            redis_client.delete(QueueKeys("mail-t42").ready)  # as if a worker took it
            m = await observer.measure("ns/t42", redis_url, "mail-t42")
            assert m.total == 0
            checks = observer.counts.idle_checks
            observer.poll_interval = 0.05  # how soon a group that became idle is read
            observer.settle("ns/t42", idle=True)  # read (so tracked) within that
            await _wait_for(lambda n=checks: observer.counts.idle_checks > n, 2)
            assert observer.counts.idle_checks == checks + 1
            observer.poll_interval = 30.0
            woken.clear()
        assert observer.counts.invalidations >= 2
        await observer.close()
        await queues.close()

    asyncio.run(go())


def test_tracking_survives_a_flush_and_a_killed_connection(
    redis_client: redis.Redis,
) -> None:
    """A ``FLUSHALL`` (Redis reports "any key may have changed") and a killed invalidation
    connection (``CLIENT KILL TYPE pubsub``) each lead to every idle group being read again,
    so a later push still wakes its group; nothing is woken by the flush itself (the queues
    are still empty)."""
    server = RedisServer().start()
    woken: list[str] = []

    async def go() -> None:
        queues = RedisQueues()
        observer = Observer(queues, wake=woken.append, poll_interval=0.05)
        client = server.client()
        for i in range(3):
            await observer.measure(f"ns/f{i}", server.url, f"mail-f{i}")
            observer.settle(f"ns/f{i}", idle=True)
        await _wait_for(lambda: observer.counts.idle_checks >= 3, 5)
        client.flushall()
        await asyncio.sleep(0.3)
        assert not woken and len(observer.idle_groups()) == 3
        client.rpush(QueueKeys("mail-f1").ready, _job("after-flush"))
        await _wait_for(lambda: woken, 5)
        assert woken == ["ns/f1"]

        assert int(client.execute_command("CLIENT", "KILL", "TYPE", "pubsub")) == 1
        await asyncio.sleep(0.5)  # the loss is seen, the round polls, tracking reopens
        client.rpush(QueueKeys("mail-f2").ready, _job("after-kill"))
        await _wait_for(lambda: len(woken) == 2, 5)
        assert woken == ["ns/f1", "ns/f2"]
        assert int(client.execute_command("CLIENT", "KILL", "TYPE", "pubsub")) == 1  # reopened
        await observer.close()
        await queues.close()

    try:
        asyncio.run(go())
    finally:
        server.cleanup()


def test_a_redis_that_refuses_tracking_is_polled_and_says_so_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An ACL user without the ``client`` command (a tenant's restricted Redis user) cannot
    turn tracking on: the observer logs it once and polls that Redis, and a push still wakes
    its group within a poll."""
    server = RedisServer().start()
    woken: list[str] = []
    admin = server.client()
    admin.execute_command("ACL", "SETUSER", "tenant", "on", ">pw", "~*", "&*", "+@all", "-client")
    url = server.url.replace("redis://", "redis://tenant:pw@", 1)

    async def go() -> None:
        queues = RedisQueues()
        observer = Observer(queues, wake=woken.append, poll_interval=0.1)
        await observer.measure("ns/r", url, "mail-r")
        observer.settle("ns/r", idle=True)
        await asyncio.sleep(0.5)
        admin.rpush(QueueKeys("mail-r").ready, _job("polled"))
        await _wait_for(lambda: woken, 5)
        assert woken == ["ns/r"]
        await observer.close()
        await queues.close()

    try:
        with caplog.at_level("INFO", logger="sendgroup_operator.observer"):
            asyncio.run(go())
    finally:
        server.cleanup()
    refused = [r for r in caplog.records if "no client tracking" in r.getMessage()]
    assert len(refused) == 1, [r.getMessage() for r in caplog.records]
    assert "no permissions" in refused[0].getMessage() and "pw" not in refused[0].getMessage()


def test_tracking_through_sentinel_follows_a_failover() -> None:
    """On Sentinel the tracking connections go to the primary Sentinel names; when that
    primary dies the watch loses them, polls, and opens them again on the promoted replica:
    a push there still wakes the idle group, and the next one as fast as before."""
    woken: list[tuple[str, float]] = []

    async def go(sentinel: SentinelSetup) -> None:
        queues = RedisQueues()
        observer = Observer(
            queues, wake=lambda key: woken.append((key, time.monotonic())), poll_interval=0.1
        )
        url = sentinel.url
        await observer.measure("ns/s", url, "mail-s")
        observer.settle("ns/s", idle=True)
        await _wait_for(lambda: observer.counts.idle_checks >= 1, 5)
        before = sentinel.primary
        pushed = time.monotonic()
        before.client().rpush(QueueKeys("mail-s").ready, _job("one"))
        await _wait_for(lambda: woken, 5)
        assert [k for k, _ in woken] == ["ns/s"] and woken[0][1] - pushed < 0.2
        before.client().delete(QueueKeys("mail-s").ready)

        before.cleanup()  # the primary dies; Sentinel promotes the replica
        await _wait_for(lambda: sentinel.current_primary() is not before, 30)
        after = sentinel.current_primary()
        assert after is not before
        for round_ in range(2):
            deadline = time.monotonic() + 15
            while True:  # as the group's next passes: the first ones may find no primary yet
                try:
                    assert (await observer.measure("ns/s", url, "mail-s")).total == 0
                    break
                except QueueUnavailable:
                    assert time.monotonic() < deadline
                    await asyncio.sleep(0.2)
            observer.settle("ns/s", idle=True)
            await asyncio.sleep(1.0)  # the lost connections seen, tracking reopened
            woken.clear()
            invalidations = observer.counts.invalidations
            pushed = time.monotonic()
            after.client().rpush(QueueKeys("mail-s").ready, _job(f"after-{round_}"))
            await _wait_for(lambda: woken, 10)
            assert [k for k, _ in woken] == ["ns/s"]
            assert woken[0][1] - pushed < 0.2
            assert observer.counts.invalidations == invalidations + 1  # tracked, not polled
            after.client().delete(QueueKeys("mail-s").ready)
        await observer.close()
        await queues.close()

    with SentinelSetup(down_after=1000) as sentinel:
        asyncio.run(go(sentinel))
