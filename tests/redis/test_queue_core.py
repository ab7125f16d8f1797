"""Queue core behaviour beyond Laravel's: fused reserve, lost reservations, idempotency
markers, failed structure and retention, notify consistency, the asyncio twin."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid as uuidlib

import pytest
import redis
import redis.asyncio

from sendgroup_worker.producer import make_mail_payload
from sendgroup_worker.queue import Ack, AsyncQueue, Queue, QueueKeys
from sendgroup_worker.queue import protocol as p
from sendgroup_worker.queue.protocol import PUSH_CHUNK

pytestmark = pytest.mark.redis

NOW = 1_796_000_000.0


def payload(n: int = 0, **extra: object) -> bytes:
    body: dict[str, object] = {
        "uuid": str(uuidlib.uuid4()),
        "displayName": "sendgroups.SendMail",
        "job": "sendgroups.SendMail",
        "data": {"to": f"user{n}@example.test", "tags": []},
        "attempts": 0,
        "pushedAt": NOW,
    }
    body.update(extra)
    return json.dumps(body, separators=(",", ":")).encode()


@pytest.fixture
def q(redis_client: redis.Redis) -> Queue:
    return Queue(redis_client, QueueKeys("mail-core"), retry_after=60)


def notify_consistent(r: redis.Redis, q: Queue) -> bool:
    return r.llen(q.keys.notify) == r.llen(q.keys.ready)


def test_push_many_is_fifo_and_counts(q: Queue, redis_client: redis.Redis) -> None:
    items = [payload(i) for i in range(PUSH_CHUNK + 7)]
    assert q.push_many(items) == len(items)
    assert redis_client.lrange(q.keys.ready, 0, -1) == items
    assert notify_consistent(redis_client, q)
    jobs = q.reserve(count=5, now=NOW)
    assert [j.raw for j in jobs] == items[:5]
    assert [j.attempts for j in jobs] == [1] * 5
    assert q.size() == len(items)
    assert notify_consistent(redis_client, q)


def test_reserve_acks_previous_jobs_in_the_same_call(q: Queue, redis_client: redis.Redis) -> None:
    q.push_many([payload(i) for i in range(3)])
    [a] = q.reserve(now=NOW)
    result = q.reserve_detailed(ack=[Ack.of(a)], now=NOW + 1)
    [b] = result.jobs
    assert result.lost_acks == []
    assert redis_client.zrange(q.keys.reserved, 0, -1) == [b.reserved]
    assert redis_client.zscore(q.keys.sent, a.uuid) == NOW + 1
    assert q.begin_send(b) == "ok"
    # ack with delivered=False (e.g. already sent): removed, not counted
    result = q.reserve_detailed(
        ack=[Ack.of(b, delivered=False), Ack.of(a, delivered=False)], now=NOW + 2
    )
    assert result.lost_acks == [1]  # a's reservation was already acknowledged
    assert len(result.jobs) == 1
    assert q.measure().delivered == 1
    assert redis_client.zcard(q.keys.reserved) == 1


def test_reservation_expiry_makes_late_worker_lost(q: Queue, redis_client: redis.Redis) -> None:
    """Worker A freezes past retry_after; the job is handed to B. A's release/fail/done
    change nothing and report lost; B's begin_send sees A's delivery only if A delivered."""
    q.push(payload())
    [a] = q.reserve(now=NOW)
    [b] = q.reserve(now=NOW + 60)  # exactly retry_after later: expired, migrated, re-popped
    assert b.raw == a.reserved and b.attempts == 2
    assert q.begin_send(a) == "lost"
    assert q.release(a, 10, now=NOW + 61) is True
    assert q.fail(a, "Boom", "late", now=NOW + 61) is True
    assert redis_client.zcard(q.keys.delayed) == 0
    assert q.failed_list().total == 0
    assert redis_client.zrange(q.keys.reserved, 0, -1) == [b.reserved]
    assert q.begin_send(b) == "ok"
    # A had in fact sent before freezing: its done records the marker though lost
    assert q.done(a, now=NOW + 62) is True
    assert q.begin_send(b) == "already_sent"
    assert q.done(b, delivered=False) is False
    stats = q.measure()
    assert (stats.total, stats.delivered, stats.released, stats.failed_total) == (0, 1, 0, 0)


def test_release_counts_and_delays(q: Queue, redis_client: redis.Redis) -> None:
    q.push(payload())
    [job] = q.reserve(now=NOW)
    assert q.release(job, 30, now=NOW) is False
    assert redis_client.zscore(q.keys.delayed, job.reserved) == NOW + 30
    assert q.reserve(now=NOW + 29.5) == []
    [again] = q.reserve(now=NOW + 30)
    assert again.attempts == 2
    assert q.measure().released == 1
    assert notify_consistent(redis_client, q)


def test_invalid_payloads_between_valid_ones(q: Queue, redis_client: redis.Redis) -> None:
    good = [payload(i) for i in range(3)]
    bad = [b"not json", b"[1,2]", b'{"uuid":"x"}', b'{"attempts":0}', b'"str"', b"\xff\xfe{"]
    q.push_many([good[0], *bad[:3], good[1], *bad[3:], good[2]])
    result = q.reserve_detailed(count=3, now=NOW)
    assert [j.raw for j in result.jobs] == good
    assert result.invalid == len(bad)
    page = q.failed_list(limit=100)
    assert page.total == len(bad)
    assert sorted(j.payload for j in page.jobs) == sorted(bad)  # bytes kept, even non-UTF-8
    assert {j.exception for j in page.jobs} == {"InvalidPayload"}
    assert q.measure().failed_total == len(bad)
    assert notify_consistent(redis_client, q)


def test_failed_structure_list_retry_forget(q: Queue, redis_client: redis.Redis) -> None:
    q.push_many([payload(i) for i in range(5)])
    jobs = q.reserve(count=5, now=NOW)
    for i, j in enumerate(jobs):
        assert q.fail(j, "SmtpPermanent", f"550 no such user {i}", now=NOW + i) is False
    page = q.failed_list(offset=1, limit=2)
    assert page.total == 5
    assert [j.uuid for j in page.jobs] == [jobs[3].uuid, jobs[2].uuid]  # newest first
    assert q.failed_get(jobs[0].uuid) is not None
    assert q.failed_get("nope") is None
    assert q.failed_forget(jobs[0].uuid, "nope") == 1
    r = q.failed_retry(jobs[1].uuid, "missing-uuid")
    assert (r.retried, r.missing) == (1, ["missing-uuid"])
    [back] = q.reserve(now=NOW + 10)
    assert back.uuid == jobs[1].uuid and back.attempts == 1
    assert back.raw == jobs[1].raw  # attempts reset to 0: the pushed bytes again
    assert q.failed_retry_all() == 3
    assert q.failed_list().total == 0
    assert redis_client.llen(q.keys.ready) == 3
    assert notify_consistent(redis_client, q)
    for j in q.reserve(count=3, now=NOW + 11):
        q.fail(j, "X", "again", now=NOW + 12)
    assert q.failed_flush() == 3
    assert redis_client.exists(q.keys.failed, q.keys.failed_jobs) == 0


def test_failed_retention_by_count_and_age(redis_client: redis.Redis) -> None:
    q = Queue(redis_client, QueueKeys("mail-ret"), 60, failed_max_count=3, failed_max_age=100)
    q.push_many([payload(i) for i in range(6)])
    jobs = q.reserve(count=6, now=NOW)
    for i, j in enumerate(jobs[:5]):
        q.fail(j, "X", str(i), now=NOW + i)
    page = q.failed_list()
    assert [j.message for j in page.jobs] == ["4", "3", "2"]  # only the newest 3 kept
    assert redis_client.hlen(q.keys.failed_jobs) == 3
    q.fail(jobs[5], "X", "late", now=NOW + 104)  # "3" is 101 s old, "4" exactly 100
    assert [j.message for j in q.failed_list().jobs] == ["late", "4"]
    assert redis_client.hlen(q.keys.failed_jobs) == 2


def test_sent_markers_expire_after_ttl(redis_client: redis.Redis) -> None:
    q = Queue(redis_client, QueueKeys("mail-ttl"), 60, sent_ttl=50)
    q.push_many([payload(i) for i in range(2)])
    a, b = q.reserve(count=2, now=NOW)
    q.done(a, now=NOW)
    q.done(b, now=NOW + 51)
    assert redis_client.zrange(q.keys.sent, 0, -1) == [b.uuid.encode()]


def test_migration_is_bounded_per_call(redis_client: redis.Redis) -> None:
    q = Queue(redis_client, QueueKeys("mail-mig"), 60, migrate_limit=10)
    q.later([payload(i) for i in range(25)], 5, now=NOW)
    assert redis_client.zcard(q.keys.delayed) == 25 and redis_client.llen(q.keys.notify) == 0
    r = q.reserve_detailed(count=0, now=NOW + 5)
    assert (r.migrated, redis_client.llen(q.keys.ready)) == (10, 10)
    assert notify_consistent(redis_client, q)
    jobs = q.reserve(count=100, now=NOW + 5)
    assert len(jobs) == 20  # 10 ready + 10 more migrated by this call
    assert redis_client.zcard(q.keys.delayed) == 5


def test_measure_and_clear(q: Queue, redis_client: redis.Redis) -> None:
    assert q.measure(now=NOW).oldest_job_age_seconds is None
    q.push_many([payload(0, pushedAt="1796000000.25"), payload(1)])
    q.later(payload(2), 60, now=NOW)
    q.reserve(count=1, now=NOW)  # pops the first: head is now payload(1), pushedAt NOW
    stats = q.measure(now=NOW + 7)
    assert (stats.ready, stats.delayed, stats.reserved, stats.failed) == (1, 1, 1, 0)
    assert stats.oldest_job_age_seconds == 7
    server = q.measure()
    assert abs(server.measured_at - time.time()) < 5  # Redis server clock
    assert q.clear() == 3
    assert redis_client.exists(*q.keys.laravel_keys) == 0


def test_wait_for_work_wakes_on_push_and_keeps_tokens(q: Queue, redis_url: str) -> None:
    assert q.wait_for_work(0.1) is False
    other = Queue(redis.Redis.from_url(redis_url), q.keys, 60)
    timer = threading.Timer(0.2, lambda: other.push(payload()))
    timer.start()
    started = time.monotonic()
    try:
        assert q.wait_for_work(10) is True
    finally:
        timer.join()
    assert time.monotonic() - started < 5
    assert q.redis.llen(q.keys.notify) == 1
    assert len(q.reserve(now=NOW)) == 1
    assert q.redis.llen(q.keys.notify) == 0


def test_decode_responses_client_is_refused(redis_url: str) -> None:
    with pytest.raises(ValueError, match="decode_responses"):
        Queue(redis.Redis.from_url(redis_url, decode_responses=True), QueueKeys("x"))


def test_scripts_reload_after_script_flush(q: Queue, redis_client: redis.Redis) -> None:
    q.push(payload())
    redis_client.script_flush()
    assert len(q.reserve(now=NOW)) == 1


def test_begin_screen_checks_the_reservation_the_marker_and_the_set_in_one_call(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """The worker's last check before MAIL FROM (suppression set on, one server): lost and
    already-sent jobs answer as ``begin_send`` does, a job still ours gets one answer per
    recipient; a set an app overwrote with a string is an error, as a SISMEMBER of its own
    would be (no mail goes out unchecked)."""
    keys = QueueKeys("mail-screen")
    suppressed = "sendgroups:t:suppressed"
    redis_client.sadd(suppressed, "gone@example.test", "bounced@example.test")
    rcpts = ["ok@example.test", "gone@example.test", "bounced@example.test"]

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            aq = AsyncQueue(client, keys, retry_after=60)
            await aq.push(payload(1))
            [a] = await aq.reserve(now=NOW)
            assert await aq.begin_screen(a, suppressed, rcpts) == p.Screened(
                "ok", (False, True, True)
            )
            assert await aq.begin_screen(a, suppressed, []) == p.Screened("ok", ())
            [b] = await aq.reserve(now=NOW + 60)  # a expired and was handed out again
            assert await aq.begin_screen(a, suppressed, rcpts) == p.Screened("lost")
            assert await aq.done(a, now=NOW + 61) is True  # a had in fact sent
            assert await aq.begin_screen(b, suppressed, rcpts) == p.Screened("already_sent")
            redis_client.delete(suppressed)
            redis_client.set(suppressed, "not a set")
            await aq.push(payload(2))
            [d] = await aq.reserve(now=NOW + 62)
            with pytest.raises(redis.exceptions.ResponseError, match="WRONGTYPE"):
                await aq.begin_screen(d, suppressed, ["x@example.test"])
        finally:
            await client.aclose()

    asyncio.run(scenario())


def test_async_queue_same_protocol(redis_url: str, redis_client: redis.Redis) -> None:
    keys = QueueKeys("{mail-async}", prefix="p_")

    async def scenario() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            aq = AsyncQueue(client, keys, retry_after=60)
            assert await aq.push_many([payload(i) for i in range(4)]) == 4
            a, b = await aq.reserve(count=2, now=NOW)
            assert await aq.begin_send(a) == "ok"
            [c] = await aq.reserve(ack=[Ack.of(a)], now=NOW + 1)
            assert await aq.release(b, 5, now=NOW + 1) is False
            assert await aq.fail(c, "X", "boom", now=NOW + 1) is False
            stats = await aq.measure(now=NOW + 2)
            assert (stats.ready, stats.delayed, stats.reserved, stats.failed) == (1, 1, 0, 1)
            assert (stats.delivered, stats.released, stats.failed_total) == (1, 1, 1)
            assert (await aq.failed_list()).jobs[0].uuid == c.uuid
            assert await aq.failed_retry_all() == 1
            assert await aq.size() == 3
            assert await aq.wait_for_work(0.1) is True
            assert await aq.clear() == 3
        finally:
            await client.aclose()

    asyncio.run(scenario())
    assert redis_client.exists(*keys.laravel_keys) == 0


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # last key (fast path), with Python-style spaces
        (b'{"uuid": "u1", "data": {"attempts": 7}, "attempts": 0}',
         b'{"uuid": "u1", "data": {"attempts": 7}, "attempts": 1}'),
        # first key; a nested "attempts" after it and one inside a string
        (b'{"attempts":2,"uuid":"u2","data":{"attempts":9,"s":"\\"attempts\\":5"}}',
         b'{"attempts":3,"uuid":"u2","data":{"attempts":9,"s":"\\"attempts\\":5"}}'),
        # nested one first, top-level one in the middle
        (b'{"data":{"attempts":1},"attempts":4,"uuid":"u3"}',
         b'{"data":{"attempts":1},"attempts":5,"uuid":"u3"}'),
        # a string value containing the key text, then the real key last
        (b'{"uuid":"u4","note":",\\"attempts\\":3}","attempts":"8"}',
         b'{"uuid":"u4","note":",\\"attempts\\":3}","attempts":9}'),
        # big numbers elsewhere keep their digits (cjson would print 1e+15)
        (b'{"uuid":"u5","n":999999999999999,"f":3.141592653589793,"attempts":0}',
         b'{"uuid":"u5","n":999999999999999,"f":3.141592653589793,"attempts":1}'),
    ],
)  # fmt: skip
def test_attempts_rewrite_touches_only_the_top_level_value(
    q: Queue, raw: bytes, expected: bytes
) -> None:
    q.push(raw)
    [job] = q.reserve(now=NOW)
    assert job.reserved == expected


def test_escaped_attempts_key_falls_back_to_reencoding(q: Queue) -> None:
    raw = b'{"uuid":"u6","attempt\\u0073":1,"data":{"x":1}}'
    q.push(raw)
    [job] = q.reserve(now=NOW)
    assert job.attempts == 2
    assert job.payload == {"uuid": "u6", "attempts": 2, "data": {"x": 1}}


def test_failed_records_are_never_overwritten(q: Queue) -> None:
    a = b'{"uuid":"dup","n":1,"attempts":0}'
    b = b'{"uuid":"dup","n":2,"attempts":0}'
    q.push_many([a, b])
    ja, jb = q.reserve(count=2, now=NOW)
    q.fail(ja, "X", "first", now=NOW)
    q.fail(jb, "X", "second", now=NOW + 1)
    page = q.failed_list()
    assert [(j.uuid, j.message) for j in page.jobs] == [("dup#2", "second"), ("dup", "first")]
    assert q.failed_retry("dup", "dup#2").retried == 2
    assert sorted(j.raw for j in q.reserve(count=2, now=NOW + 2)) == [a, b]


def test_done_retried_after_a_dropped_reply_counts_once(q: Queue) -> None:
    q.push_many([payload(0), payload(1)])
    a, b = q.reserve(count=2, now=NOW)
    assert q.done(a, now=NOW) is False
    assert q.done(a, now=NOW + 1) is True  # the retry: lost, and not counted again
    q.reserve(count=0, ack=[Ack.of(b), Ack.of(b)], now=NOW + 2)
    assert q.measure().delivered == 2


def test_failed_list_pages_of_thousands(q: Queue) -> None:
    # invalid payloads (no attempts) are the cheapest way to fill the failed structure
    q.push_many([b'{"uuid":"bad-%d"}' % i for i in range(9000)])
    for _ in range(100):
        if q.reserve_detailed(count=100, now=NOW).invalid == 0:
            break
    page = q.failed_list(limit=9000)
    assert page.total == 9000 and len(page.jobs) == 9000
    assert {j.uuid for j in page.jobs} == {f"bad-{i}" for i in range(9000)}


def test_escaped_top_level_key_with_a_literal_nested_one(q: Queue) -> None:
    raw = b'{"uuid":"u7","data":{"attempts":5},"attempt\\u0073":1,"x":2}'
    q.push(raw)
    [job] = q.reserve(now=NOW)
    assert job.payload == {"uuid": "u7", "data": {"attempts": 5}, "attempts": 2, "x": 2}


def test_producer_payload_takes_a_fast_path_and_keeps_bytes(q: Queue) -> None:
    raw = make_mail_payload("a@example.test", text="Grüße", pushed_at=1796000000.5)
    q.push(raw)
    [job] = q.reserve(now=NOW)
    assert job.reserved == raw.replace(b'"attempts":0', b'"attempts":1')


def test_oldest_job_age_reads_laravel_12_created_at(q: Queue) -> None:
    """Laravel 12 writes ``createdAt`` (integer unix seconds) and no ``pushedAt``: OLDEST must
    not stay empty for plain Laravel payloads; ``pushedAt`` wins when both are present."""
    laravel_12 = json.dumps({"uuid": "l12", "attempts": 0, "createdAt": int(NOW) - 30})
    q.push(laravel_12.encode())
    assert q.measure(now=NOW).oldest_job_age_seconds == 30
    q.clear()
    both = {"uuid": "b", "attempts": 0, "pushedAt": f"{NOW - 5}", "createdAt": int(NOW) - 30}
    q.push(json.dumps(both).encode())
    assert q.measure(now=NOW).oldest_job_age_seconds == pytest.approx(5)


def test_an_ack_s_outcome_entry_lands_with_it_and_a_clobbered_stream_refuses_only_the_entry(
    q: Queue, redis_client: redis.Redis
) -> None:
    """The worker's outcome entry rides in the acknowledging script (``StreamEntry``): one
    XADD per ack, capped; the ack counts even when its reservation was lost; a stream key an
    app overwrote with a string refuses the entry (counted in the reply) and nothing else."""
    stream = "sendgroups:core:outcomes"

    def entry(uuid: str) -> p.StreamEntry:
        return p.StreamEntry(stream, 1000, ("uuid", uuid, "outcome", "delivered"))

    q.push_many([payload(i) for i in range(4)])
    first, second, third = q.reserve(count=3, now=NOW)
    res = q.reserve_detailed(count=0, ack=[Ack.of(first, entry=entry(first.uuid))], now=NOW)
    assert res.lost_acks == [] and res.refused_entries == 0
    entries = redis_client.xrange(stream)
    assert [e[1] for e in entries] == [{b"uuid": first.uuid.encode(), b"outcome": b"delivered"}]
    assert redis_client.zscore(q.keys.sent, first.uuid) is not None
    assert q.measure().delivered == 1
    # the reservation is gone (expired, taken back): the entry is still written, the mail
    # did go out
    redis_client.zrem(q.keys.reserved, second.reserved)
    done = q.run(p.done_detailed_call(q.keys, q.settings, Ack.of(second, entry=entry(second.uuid))))
    assert done == p.DoneResult(lost=True, entry_refused=False)
    assert len(redis_client.xrange(stream)) == 2
    # an app overwrote the stream key: the entry is refused, the acknowledgement is not
    redis_client.set(stream, "not a stream")
    res = q.reserve_detailed(count=1, ack=[Ack.of(third, entry=entry(third.uuid))], now=NOW)
    assert res.refused_entries == 1 and res.lost_acks == [] and len(res.jobs) == 1
    assert redis_client.get(stream) == b"not a stream"
    assert redis_client.zscore(q.keys.sent, third.uuid) is not None
    fourth = res.jobs[0]
    done = q.run(p.done_detailed_call(q.keys, q.settings, Ack.of(fourth, entry=entry(fourth.uuid))))
    assert done == p.DoneResult(lost=False, entry_refused=True)
    assert q.measure().delivered == 4 and q.size() == 0


def test_unreserve_hands_unstarted_jobs_back_in_order_without_an_attempt(
    q: Queue, redis_client: redis.Redis
) -> None:
    items = [payload(i) for i in range(6)]
    q.push_many(items)
    batch = q.reserve(count=5, now=NOW)
    assert len(batch) == 5 and q.measure(now=NOW).reserved == 5
    # the first job ran; the others were never started: back to the head, as popped
    q.done(batch[0], now=NOW)
    assert q.unreserve(batch[1:]) == 4
    assert redis_client.lrange(q.keys.ready, 0, -1) == items[1:]  # order kept, bytes as pushed
    assert [json.loads(i)["attempts"] for i in items[1:]] == [0] * 5  # no attempt counted
    assert redis_client.zcard(q.keys.reserved) == 0
    assert notify_consistent(redis_client, q)
    # a job whose reservation is gone (expired, taken by another worker) is left alone
    again = q.reserve(count=2, now=NOW + 1)
    q.reserve(count=0, now=NOW + 100)  # both reservations expired and migrated to ready
    assert q.unreserve(again) == 0
    assert redis_client.llen(q.keys.ready) == 5 and notify_consistent(redis_client, q)
    assert q.unreserve([]) == 0


def test_ack_begin_acknowledges_then_checks_the_next_job_in_one_call(
    q: Queue, redis_client: redis.Redis
) -> None:
    q.push_many([payload(i) for i in range(4)])
    a, b, c, d = q.reserve(count=4, now=NOW)
    redis_client.sadd("suppressed", "blocked@example.test")
    entry = p.StreamEntry("outcomes", 100, ("uuid", a.uuid, "outcome", "delivered"))
    got = q.ack_begin(c, [Ack.of(a, entry=entry), Ack.of(b)], now=NOW + 1)
    assert (got.lost_acks, got.refused_entries, got.screened) == ([], 0, p.Screened("ok"))
    assert redis_client.zscore(q.keys.sent, a.uuid) == NOW + 1
    assert redis_client.zscore(q.keys.sent, b.uuid) == NOW + 1
    assert q.measure(now=NOW + 1).delivered == 2 and q.measure(now=NOW + 1).reserved == 2
    assert redis_client.xlen("outcomes") == 1
    # again (a retried call after a dropped reply): acks lost, counted once, c still ours
    again = q.ack_begin(
        c, [Ack.of(b)], now=NOW + 2, suppressed="suppressed",
        recipients=["blocked@example.test", "ok@example.test"],
    )  # fmt: skip
    assert again.lost_acks == [0] and again.screened == p.Screened("ok", (True, False))
    assert q.measure(now=NOW + 2).delivered == 2
    # the job to begin was already sent by an earlier reservation / is no longer ours
    assert q.ack_begin(a, [], now=NOW + 3).screened.state == "lost"
    q.done(d, now=NOW + 3)
    redis_client.zadd(q.keys.reserved, {d.reserved: NOW + 60})
    assert q.ack_begin(d, [Ack.of(c)], now=NOW + 3).screened.state == "already_sent"
    assert redis_client.zscore(q.keys.sent, c.uuid) == NOW + 3
