"""reserve's cheap reading of Laravel-shaped payloads (issue 19, no-op throughput).

``sg_quick`` in ``scripts/reserve.lua`` reserves a payload that opens with ``{``, holds a
``"uuid"`` string and ends with an integer ``"attempts"`` without ``cjson.decode`` (~6 us of
Redis CPU for 1.5 KB); everything else gets the full check as before. What could go wrong
there: bytes not kept exactly (the worker acknowledges and ``unreserve`` puts back the exact
bytes), or a payload the cheap path lets through that the full check refused being run
(``protocol._reserved_from`` refuses it, the worker fails it).
"""

from __future__ import annotations

import json
import uuid as uuidlib

import pytest
import redis

from sendgroup_worker.queue import Queue, QueueKeys

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
    return Queue(redis_client, QueueKeys("mail-cheap"), retry_after=60)


@pytest.mark.parametrize(
    "body",
    [
        # Laravel's layout: attempts last (reserve's cheap path)
        b'{"uuid":"u1","job":"j","data":{"t":"\\u00e9 /x"},"attempts":7}',
        b'{"uuid":"u0","data":{"text":"' + b"x" * 1400 + b'"},"attempts":123456789012345}',
        # not the cheap path: a leading zero, a fraction, too many digits (the full check)
        b'{"uuid":"u5","attempts":1.5}',
        b'{"uuid":"u6","attempts":1234567890123456}',
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
    before, after = json.loads(body), json.loads(job.reserved)
    assert after.pop("attempts") == float(before.pop("attempts")) + 1
    assert after == before
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
