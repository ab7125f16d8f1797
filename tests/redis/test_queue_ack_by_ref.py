"""Acknowledgements by reference and reserve's cheap path (issue 19, no-op throughput).

An :class:`Ack` of a job reserved by ``reserve`` names its reservation by score and SHA-1
(``sg_by_ref`` in ``scripts/_lib.lua``) instead of sending the ~1.5 KB member back; reserve
answers each job's popped bytes as a patch of its reserved bytes and skips ``cjson.decode`` for
Laravel-shaped payloads (``sg_quick`` in ``scripts/reserve.lua``). What could lose or duplicate
a job there: an ack removing another reservation (a foreign member with the same score, the
same job reserved again after its reservation expired), an ack that misses its own (the job
would run again after ``retry_after``), popped bytes not restored exactly (``unreserve`` would
put other bytes back), a payload the cheap path lets through that the full check refused.
"""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest
import redis

from sendgroup_worker.queue import Ack, Queue, QueueKeys

pytestmark = pytest.mark.redis

NOW = 1_796_000_000.25


def payload(n: int = 0, **extra: object) -> bytes:
    body: dict[str, object] = {
        "uuid": str(uuidlib.uuid4()),
        "job": "sendgroups.SendMail",
        "data": {"to": f"user{n}@example.test", "text": "x" * 1400},
    }
    body.update(extra)
    body.setdefault("attempts", 0)
    return json.dumps(body, separators=(",", ":")).encode()


@pytest.fixture
def q(redis_client: redis.Redis) -> Queue:
    return Queue(redis_client, QueueKeys("mail-ref"), retry_after=60)


def test_a_batch_acknowledged_by_reference_removes_exactly_its_reservations(
    q: Queue, redis_client: redis.Redis
) -> None:
    q.push_many([payload(i) for i in range(40)])
    batch = q.reserve(count=32, now=NOW)
    assert all(j.until == NOW + 60 for j in batch)
    assert {redis_client.zscore(q.keys.reserved, j.reserved) for j in batch} == {NOW + 60}
    result = q.reserve_detailed(count=8, ack=[Ack.of(j) for j in batch], now=NOW + 1)
    assert result.lost_acks == []
    assert sorted(redis_client.zrange(q.keys.reserved, 0, -1)) == sorted(
        j.reserved for j in result.jobs
    )
    assert q.measure().delivered == 32
    # a second ack of the same jobs: lost, nothing else removed, nothing counted twice
    again = q.reserve_detailed(count=0, ack=[Ack.of(j) for j in batch[:3]], now=NOW + 2)
    assert again.lost_acks == [0, 1, 2]
    assert redis_client.zcard(q.keys.reserved) == 8
    assert q.measure().delivered == 32


def test_an_ack_by_reference_never_removes_a_foreign_member_with_the_same_score(
    q: Queue, redis_client: redis.Redis
) -> None:
    q.push_many([payload(0), payload(1)])
    a, b = q.reserve(count=2, now=NOW)
    assert a.until is not None
    # another worker's reservation at the very same score (a Laravel worker, a clock tie)
    foreign = payload(2, attempts=1)
    redis_client.zadd(q.keys.reserved, {foreign: a.until})
    # b's reservation disappears (acknowledged by someone else's done, a purge): its ack by
    # reference finds only a's and the foreign member at that score, and neither is b
    redis_client.zrem(q.keys.reserved, b.reserved)
    result = q.reserve_detailed(count=0, ack=[Ack.of(a), Ack.of(b)], now=NOW + 1)
    assert result.lost_acks == [1]
    assert redis_client.zrange(q.keys.reserved, 0, -1) == [foreign]


def test_a_job_reserved_again_after_its_reservation_expired_is_not_acknowledged_by_the_old_one(
    q: Queue, redis_client: redis.Redis
) -> None:
    q.push_many([payload(0)])
    [old] = q.reserve(now=NOW)
    # the worker froze past retry_after: the next reserve migrates it back and takes it again
    [new] = q.reserve(now=NOW + 61)
    assert new.attempts == 2 and new.until == NOW + 121
    result = q.reserve_detailed(count=0, ack=[Ack.of(old)], now=NOW + 62)
    assert result.lost_acks == [0]
    assert redis_client.zrange(q.keys.reserved, 0, -1) == [new.reserved]
    # the new reservation's own ack removes it
    assert q.reserve_detailed(count=0, ack=[Ack.of(new)], now=NOW + 63).lost_acks == []
    assert redis_client.zcard(q.keys.reserved) == 0


@pytest.mark.parametrize(
    "body",
    [
        # Laravel's layout: attempts last (reserve's cheap path)
        b'{"uuid":"u1","job":"j","data":{"t":"\\u00e9 /x"},"attempts":7}',
        # attempts as a string, not last (sg_set_attempts' second fast path)
        b'{"uuid":"u2","attempts":"4","job":"j","pushedAt":"1796000000.1234"}',
        # attempts written twice in the text (a nested one): the general path
        b'{"uuid":"u3","data":{"attempts":9},"attempts":  3 ,"pushedAt":1}',
        # spaces and a trailing newline around the last key
        b'{ "uuid" : "u4", "attempts" : 0 }\n',
    ],
)
def test_the_popped_bytes_come_back_exactly(q: Queue, body: bytes) -> None:
    q.push(body)
    [job] = q.reserve(now=NOW)
    assert job.raw == body
    assert q.unreserve([job]) == 1
    [again] = q.reserve(now=NOW + 1)
    assert again.raw == body and again.reserved == job.reserved


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        # only a nested "uuid": the cheap path lets it through, the worker's check refuses it
        (b'{"job":"j","data":{"uuid":"nested"},"attempts":0}', 'payload has no "uuid"'),
        (b'{"uuid":7,"data":{"uuid":"nested"},"attempts":0}', 'payload has no "uuid"'),
        # not JSON in the middle, Laravel's ending
        (b'{"uuid":"u5","data":{"to": oops},"attempts":0}', "payload is not JSON"),
    ],
)
def test_a_payload_the_cheap_path_lets_through_is_never_runnable(
    q: Queue, body: bytes, reason: str
) -> None:
    q.push(body)
    result = q.reserve_detailed(now=NOW)
    [job] = result.jobs
    assert job.payload is None and job.invalid.startswith(reason)
    assert job.raw == body
    # the worker fails it (worker._process -> fail): it ends in the failed structure
    assert q.fail(job, "InvalidPayload", job.invalid, now=NOW) is False
    assert q.failed_list().total == 1
    assert q.size() == 0
