"""Queue ownership primitives (issue 16, item 1): a queue belongs to exactly one SendGroup,
claimed atomically in the queue's own Redis; a purge keeps the claim, only the owner can
release it. Real redis-server, claims racing from many connections."""

from __future__ import annotations

import threading

import pytest
import redis

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
