"""Random operation sequences against a real redis-server: no job is ever lost or duplicated,
and the notify list always holds one token per ready job."""

from __future__ import annotations

import json
import random

import pytest
import redis

from sendgroup_worker.queue import Ack, Queue, QueueKeys, Reserved

pytestmark = pytest.mark.redis


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_operations_conserve_jobs(redis_client: redis.Redis, seed: int) -> None:
    rng = random.Random(seed)
    q = Queue(redis_client, QueueKeys("{inv}"), retry_after=30, migrate_limit=7)
    now = 1_796_000_000.0
    pushed: set[str] = set()
    delivered: set[str] = set()
    garbage = 0
    held: list[Reserved] = []  # jobs a "worker" holds (possibly past their reservation)
    serial = 0

    def new_payload() -> bytes:
        nonlocal serial
        serial += 1
        uid = f"job-{serial}"
        pushed.add(uid)
        body = {"uuid": uid, "data": {"n": serial, "e": []}, "attempts": 0}
        return json.dumps(body).encode()

    for _ in range(1500):
        now += rng.choice([0, 0, 0.5, 1, 3, 31])
        op = rng.random()
        if op < 0.20:
            q.push_many([new_payload() for _ in range(rng.randint(1, 5))])
        elif op < 0.25:
            q.later(new_payload(), rng.choice([0, 5, 40]), now=now)
        elif op < 0.27:
            garbage += 1
            q.push(rng.choice([b"garbage", b'{"no":"uuid","attempts":0}', b'{"uuid":"x"}']))
        elif op < 0.55:
            acks = []
            while held and rng.random() < 0.5:
                job = held.pop(rng.randrange(len(held)))
                if q.begin_send(job) == "ok":
                    delivered.add(job.uuid)
                    acks.append(Ack.of(job))
            held.extend(q.reserve(count=rng.randint(0, 4), ack=acks, now=now))
        elif op < 0.65 and held:
            q.release(held.pop(rng.randrange(len(held))), rng.choice([0, 2, 10]), now=now)
        elif op < 0.70 and held:
            q.fail(held.pop(rng.randrange(len(held))), "X", "boom", now=now)
        elif op < 0.72:
            q.failed_retry_all()
        elif op < 0.80 and held:
            job = held.pop(rng.randrange(len(held)))
            state = q.begin_send(job)
            if state == "ok":
                delivered.add(job.uuid)
                q.done(job, now=now)
            elif state == "already_sent":
                q.done(job, delivered=False, now=now)
        assert redis_client.llen(q.keys.notify) == redis_client.llen(q.keys.ready)

    # drain everything: let reservations expire, retry failures, deliver the rest
    held.clear()
    for _ in range(100):
        now += 31
        q.failed_retry_all()
        for job in q.reserve(count=50, now=now):
            if q.begin_send(job) == "ok":
                delivered.add(job.uuid)
                q.done(job, now=now)
            else:
                q.done(job, delivered=False, now=now)
        if q.size() == 0 and q.failed_list().total == garbage:
            break
    assert q.size() == 0
    assert delivered == pushed  # every job delivered, none lost
    failed = q.failed_list(limit=1000)
    assert failed.total == garbage  # only the garbage stays failed, with its bytes
    assert all(j.exception == "InvalidPayload" for j in failed.jobs)
    assert q.measure().delivered == len(pushed)  # each uuid counted once
