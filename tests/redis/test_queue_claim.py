"""Queue ownership primitives (issue 16, item 1): a queue belongs to exactly one SendGroup,
claimed atomically in the queue's own Redis; a purge keeps the claim, only the owner can
release it. Real redis-server, claims racing from many connections."""

from __future__ import annotations

import asyncio
import threading

import pytest
import redis

from sendgroup_operator.queueio import QueueUnavailable, RedisQueues
from sendgroup_worker.queue import protocol as p
from sendgroup_worker.queue.client import Queue
from sendgroup_worker.queue.keys import QueueKeys

pytestmark = pytest.mark.redis


def test_exactly_one_of_many_racing_claims_wins(redis_url: str) -> None:
    keys = QueueKeys("{mail-newsletter}")
    owners = [p.owner_id(f"team-{i}", "newsletter", f"uid-{i}") for i in range(24)]
    results: dict[str, p.Claim] = {}
    barrier = threading.Barrier(len(owners))

    def claim(owner: str) -> None:
        q = Queue(redis.Redis.from_url(redis_url), keys)
        barrier.wait()
        results[owner] = q.run(p.claim_call(keys, owner))

    threads = [threading.Thread(target=claim, args=(o,)) for o in owners]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    winners = [o for o, r in results.items() if r.held]
    assert len(results) == len(owners) and len(winners) == 1
    [winner] = winners
    assert {r.owner for r in results.values()} == {winner}


def test_claim_is_idempotent_survives_a_purge_and_only_the_owner_releases(
    redis_url: str, redis_client: redis.Redis
) -> None:
    keys = QueueKeys("mail-owned")
    q = Queue(redis_client, keys)
    a = p.owner_id("team-a", "g", "uid-a")
    b = p.owner_id("team-b", "g", "uid-b")
    assert q.run(p.claim_call(keys, a)) == p.Claim(True, a)
    assert q.run(p.claim_call(keys, a)) == p.Claim(True, a)  # the owner again: no-op
    assert q.run(p.claim_call(keys, b)) == p.Claim(False, a)
    redis_client.delete(*keys.all_keys)  # what a purge (cancel) deletes
    assert q.run(p.claim_call(keys, b)) == p.Claim(False, a)
    assert q.run(p.claim_call(keys, b, release=True)) == p.Claim(False, a)
    assert redis_client.get(keys.owner) == a.encode()
    assert q.run(p.claim_call(keys, a, release=True)) == p.Claim(True, "")
    assert q.run(p.claim_call(keys, b)) == p.Claim(True, b)
    with pytest.raises(ValueError):
        p.owner_id("team/a", "g", "u")


def test_replace_takes_over_only_from_the_named_stale_owner(redis_client: redis.Redis) -> None:
    """A group deleted while its Redis was down never released its claim; the same group
    re-created (same namespace and name, new uid) takes it over, nobody else does."""
    keys = QueueKeys("team-a.newsletter")
    q = Queue(redis_client, keys)
    old = p.owner_id("team-a", "newsletter", "uid-old")
    new = p.owner_id("team-a", "newsletter", "uid-new")
    thief = p.owner_id("team-b", "newsletter", "uid-b")
    assert q.run(p.claim_call(keys, old)).held
    assert q.run(p.claim_call(keys, thief, replace=new)) == p.Claim(False, old)
    assert q.run(p.claim_call(keys, new)) == p.Claim(False, old)
    assert q.run(p.claim_call(keys, new, replace=old)) == p.Claim(True, new)
    assert q.run(p.claim_call(keys, thief, replace=old)) == p.Claim(False, new)
    assert redis_client.get(keys.owner) == new.encode()
    with pytest.raises(ValueError):
        p.claim_call(keys, new, release=True, replace=old)


def test_the_operators_claims_at_a_start_share_one_round_trip_each_with_its_own_answer(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """At an operator's start every group confirms its claim at once (issue 15): 300 claims
    asked together take one pipeline and one connection, and each gets the answer a claim of
    its own would (held; refused, naming the holder; a replacement and a release stay single
    calls). A Redis that is not there fails each claim with QueueUnavailable."""
    taken = p.owner_id("team-x", "other", "uid-x")
    redis_client.set(QueueKeys("mail-7").owner, taken)
    owners = {f"mail-{i}": p.owner_id("team-a", f"g{i}", f"uid-{i}") for i in range(300)}

    def connected() -> int:
        return int(redis_client.info("clients")["connected_clients"])

    async def go() -> tuple[list[p.Claim], int, int, p.Claim, p.Claim]:
        queues = RedisQueues()
        before = connected()
        try:
            claims = await asyncio.gather(
                *(queues.claim(redis_url, q, o) for q, o in owners.items())
            )
            trips = queues.claim_round_trips
            clients = connected() - before
            replaced = await queues.claim(redis_url, "mail-7", owners["mail-7"], replace=taken)
            released = await queues.claim(redis_url, "mail-3", owners["mail-3"], release=True)
            return list(claims), trips, clients, replaced, released
        finally:
            await queues.close()

    claims, trips, clients, replaced, released = asyncio.run(go())
    for (queue, owner), claim in zip(owners.items(), claims, strict=True):
        assert claim == (p.Claim(False, taken) if queue == "mail-7" else p.Claim(True, owner))
    assert trips == 1
    assert clients == 1  # the operator's one connection
    assert replaced == p.Claim(True, owners["mail-7"])
    assert released == p.Claim(True, "")
    assert redis_client.get(QueueKeys("mail-5").owner) == owners["mail-5"].encode()

    async def unreachable() -> list[BaseException | p.Claim]:
        queues = RedisQueues()
        try:
            return await asyncio.gather(
                *(queues.claim("redis://127.0.0.1:1", f"q{i}", "a/b/c") for i in range(3)),
                return_exceptions=True,
            )
        finally:
            await queues.close()

    failed = asyncio.run(unreachable())
    assert all(isinstance(f, QueueUnavailable) for f in failed), failed
