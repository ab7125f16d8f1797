"""Compatibility of the queue core with Redis state written by Laravel 11 / Horizon 5 itself
(the byte-exact fixtures), against a real redis-server."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import redis

from sendgroup_worker.queue import Queue, QueueKeys
from tests.support import laravel_fixtures as lf

pytestmark = pytest.mark.redis

SCENARIOS = ("prefixed", "unprefixed")


def only_attempts_changed(raw: bytes, reserved: bytes, new_attempts: int) -> bool:
    """True when ``reserved`` is ``raw`` with just the value of its top-level ``attempts``
    replaced by ``new_attempts`` (every other byte identical)."""
    start = 0
    while start < min(len(raw), len(reserved)) and raw[start] == reserved[start]:
        start += 1
    end = 0
    while (
        end < min(len(raw), len(reserved)) - start
        and raw[len(raw) - 1 - end] == reserved[len(reserved) - 1 - end]
    ):
        end += 1
    # widen the changed span to whole number tokens on both sides
    head = raw[:start]
    m = re.search(rb'"attempts"\s*:\s*("?[0-9.eE+-]*)$', head)
    if m is None:
        return False
    span_start = m.start(1)
    new_token = reserved[span_start : len(reserved) - end]
    tail = raw[len(raw) - end :]
    tail_token = re.match(rb'[0-9.eE+-]*"?', tail)
    assert tail_token is not None
    new_token += tail[: tail_token.end()]
    return new_token == str(new_attempts).encode() and reserved[:span_start] == raw[:span_start]


def test_only_attempts_changed_helper_detects_other_changes() -> None:
    raw = b'{"a":"x/y","attempts":9,"b":[]}'
    assert only_attempts_changed(raw, b'{"a":"x/y","attempts":10,"b":[]}', 10)
    assert not only_attempts_changed(raw, b'{"a":"x\\/y","attempts":10,"b":[]}', 10)
    assert not only_attempts_changed(raw, b'{"a":"x/y","attempts":10,"b":{}}', 10)
    assert not only_attempts_changed(raw, b'{"a":"x/y","attempts":11,"b":[]}', 10)


def _queue(client: redis.Redis, scenario: dict[str, Any], name: str = "default") -> Queue:
    return Queue(client, QueueKeys(name, prefix=lf.prefix_of(scenario)), retry_after=90)


@pytest.mark.parametrize("file", ["02-pop-reserve.json", "05-horizon.json"])
@pytest.mark.parametrize("scenario_name", SCENARIOS)
def test_pop_of_a_laravel_pushed_payload(
    redis_client: redis.Redis, file: str, scenario_name: str
) -> None:
    scenario = lf.load(file)["scenarios"][scenario_name]
    pop = scenario["step2_pop"]
    raw = lf.raw(pop["RedisJob_getRawBody"])
    laravel_reserved = json.loads(lf.raw(pop["RedisJob_getReservedJob"]))
    now = pop["laravel_now_unix_at_pop"]
    q = _queue(redis_client, scenario)
    q.push(raw)

    [job] = q.reserve(now=now)

    assert job.raw == raw
    assert job.attempts == pop["RedisJob_attempts"] == 1
    assert job.uuid == laravel_reserved["uuid"]
    assert only_attempts_changed(raw, job.reserved, 1)
    assert job.payload is not None and job.payload["data"] == json.loads(raw)["data"]
    # same member/score layout as Laravel's :reserved, but with the exact bytes we returned
    assert redis_client.zrange(q.keys.reserved, 0, -1, withscores=True) == [
        (job.reserved, float(pop["reserved_zset_score"]))
    ]
    assert redis_client.llen(q.keys.notify) == redis_client.llen(q.keys.ready) == 0


@pytest.mark.parametrize("scenario_name", SCENARIOS)
def test_every_laravel_and_horizon_push_pops_with_bytes_kept(
    redis_client: redis.Redis, scenario_name: str
) -> None:
    """All payloads pushed by push/later/bulk/pushRaw (plain and Horizon) come out with only
    ``attempts`` changed: key order, ``\\/``, ``\\u`` escapes, ``[]`` and Horizon's string
    ``pushedAt`` survive (Laravel's own pop re-encodes them)."""
    for file in ("01-push.json", "05-horizon.json"):
        scenario = lf.load(file)["scenarios"][scenario_name]
        last = scenario["step1_push"][-1]["state"]
        redis_client.flushdb()
        lf.write_state(redis_client, last)
        q = _queue(redis_client, scenario)
        ready = lf.list_items(last, q.keys.ready)
        delayed = lf.zset_items(last, q.keys.delayed)
        assert ready and delayed, "fixture should hold ready and delayed jobs"
        latest = max(score for _, score in delayed)

        jobs = q.reserve(count=100, now=latest)

        assert [j.raw for j in jobs] == ready + [m for m, _ in delayed]
        for j in jobs:
            assert only_attempts_changed(j.raw, j.reserved, 1), j.raw
        assert q.size() == len(jobs)
        assert redis_client.llen(q.keys.notify) == 0


@pytest.mark.parametrize("file", ["03-release-delete.json", "05-horizon.json"])
@pytest.mark.parametrize("scenario_name", SCENARIOS)
def test_release_and_delete_use_exactly_the_reserved_string(
    redis_client: redis.Redis, file: str, scenario_name: str
) -> None:
    scenario = lf.load(file)["scenarios"][scenario_name]
    steps = scenario["step3_release_delete"]
    q = _queue(redis_client, scenario)
    release_delay = 30
    now = steps[0]["laravel_now_unix_before"]
    # Laravel's released member (a cjson re-encoded reserved string) sits in :delayed
    laravel_released = lf.raw(steps[0]["released_member"])
    [(member, score)] = [
        (m, s) for m, s in lf.zset_items(steps[0]["state"], q.keys.delayed) if m == laravel_released
    ]
    assert score == now + release_delay
    redis_client.zadd(q.keys.delayed, {member: score})

    assert q.reserve(now=score - 1) == []
    [job] = q.reserve(now=score)  # due at exactly now
    assert job.raw == laravel_released and job.attempts == 2
    assert only_attempts_changed(job.raw, job.reserved, 2)

    assert q.release(job, release_delay, now=score) is False
    assert redis_client.zrange(q.keys.delayed, 0, -1, withscores=True) == [
        (job.reserved, score + release_delay)
    ]
    assert redis_client.zcard(q.keys.reserved) == 0
    [again] = q.reserve(now=score + release_delay)
    assert again.raw == job.reserved and again.attempts == 3
    assert q.done(again) is False
    assert q.size() == 0
    assert redis_client.exists(q.keys.reserved, q.keys.delayed, q.keys.ready) == 0


@pytest.mark.parametrize("scenario_name", SCENARIOS)
def test_migration_timeline_matches_laravel(redis_client: redis.Redis, scenario_name: str) -> None:
    """06-migration: A delayed 10 s, B reserved for 90 s; each becomes available at exactly
    the second Laravel made it available, and B comes back as its reserved string."""
    scenario = lf.load("06-migration.json")["scenarios"][scenario_name]
    t0 = scenario["t0_unix"]
    ev = {e["action"].split(" ")[0] + e["t"]: e for e in scenario["events"]}
    q = _queue(redis_client, scenario)
    lf.write_state(redis_client, scenario["events"][0]["state"])
    a_raw = lf.raw(ev["pop()t0+10"]["A_raw"])
    b_raw = lf.raw(ev["pop()t0"]["B_raw"])

    [b] = q.reserve(now=t0)
    assert b.raw == b_raw
    assert q.reserve(now=t0 + 9) == []
    [a] = q.reserve(now=t0 + 10)
    assert a.raw == a_raw and a.attempts == 1
    assert q.done(a) is False
    assert q.reserve(now=t0 + 89) == []
    result = q.reserve_detailed(now=t0 + 90)
    [b2] = result.jobs
    assert result.migrated == 1
    assert b2.raw == b.reserved  # the reserved string went back to ready
    assert b2.attempts == ev["pop()t0+90"]["B2_attempts"] == 2
    assert redis_client.zrange(q.keys.reserved, 0, -1, withscores=True) == [
        (b2.reserved, float(t0 + 90 + 90))
    ]
    assert redis_client.llen(q.keys.notify) == 0


@pytest.mark.parametrize("file", ["03-release-delete.json", "05-horizon.json"])
def test_size_counts_ready_delayed_reserved_not_notify(
    redis_client: redis.Redis, file: str
) -> None:
    scenario = lf.load(file)["scenarios"]["prefixed"]
    q = _queue(redis_client, scenario)
    state = scenario["step3_release_delete"][-1]["state"]
    lf.write_state(redis_client, state)
    expected = (
        len(lf.list_items(state, q.keys.ready))
        + len(lf.zset_items(state, q.keys.delayed))
        + len(lf.zset_items(state, q.keys.reserved))
    )
    probes = lf.load("04-size.json")["scenarios"]["prefixed"]["step4_size"]["probes"]
    if file == "03-release-delete.json":
        assert expected == probes[0]["size()"]
    assert q.size() == expected
    stats = q.measure()
    assert (stats.ready, stats.delayed, stats.reserved) == (
        len(lf.list_items(state, q.keys.ready)),
        len(lf.zset_items(state, q.keys.delayed)),
        len(lf.zset_items(state, q.keys.reserved)),
    )
    assert stats.total == expected
    # one more reservation outstanding keeps size unchanged (04's second probe)
    q.reserve(now=state["laravel_now_unix"])
    assert q.size() == expected


def test_horizon_pushed_at_string_gives_the_oldest_job_age(redis_client: redis.Redis) -> None:
    scenario = lf.load("05-horizon.json")["scenarios"]["unprefixed"]
    state = scenario["step1_push"][0]["state"]
    lf.write_state(redis_client, state)
    q = _queue(redis_client, scenario)
    head = json.loads(lf.list_items(state, q.keys.ready)[0])
    assert isinstance(head["pushedAt"], str)
    stats = q.measure(now=float(head["pushedAt"]) + 12.5)
    assert stats.oldest_job_age_seconds == pytest.approx(12.5)
    assert stats.ready == 1


def test_hash_tag_queue_name_uses_laravel_key_names(redis_client: redis.Redis) -> None:
    case = lf.load("07-cjson-quirks.json")["cases"]["hash_tag_queue_name"]
    state = case["state_after_dispatch"]
    q = Queue(redis_client, QueueKeys("{mail-x}", prefix="laravel_database_"), 90)
    assert sorted(state["KEYS_*"]) == sorted([q.keys.ready, q.keys.notify])
    lf.write_state(redis_client, state)
    [job] = q.reserve(now=state["laravel_now_unix"])
    assert job.raw == lf.list_items(state, q.keys.ready)[0]
    assert q.done(job) is False
    assert sorted(redis_client.keys("*")) == sorted(k.encode() for k in (q.keys.sent, q.keys.stats))


def test_string_attempts_is_coerced_to_a_number_like_laravel(redis_client: redis.Redis) -> None:
    c = lf.load("07-cjson-quirks.json")["cases"]["attempts_as_string"]
    assert json.loads(lf.raw(c["reserved"]))["attempts"] == 5  # Laravel: "4" -> 5
    # the fixture payload has no uuid (so it goes to failed here); the same shape with one:
    pushed = b'{"uuid":"u-1","job":"App\\\\Jobs\\\\Raw@handle","data":[],"attempts":"4"}'
    q = Queue(redis_client, QueueKeys(c["queue"]), 90)
    q.push(pushed)
    [job] = q.reserve(now=1000)
    assert job.attempts == 5
    assert job.reserved == pushed.replace(b'"attempts":"4"', b'"attempts":5')
    q.push(lf.raw(c["pushed"]))
    assert q.reserve(now=1000) == [] and q.failed_list().total == 1


@pytest.mark.parametrize("case", ["numbers_arrays_escapes", "python_json_dumps_style"])
def test_cjson_quirk_payloads_keep_their_bytes(redis_client: redis.Redis, case: str) -> None:
    c = lf.load("07-cjson-quirks.json")["cases"][case]
    pushed = lf.raw(c["pushed"])
    laravel_reserved = lf.raw(c["reserved"])
    assert laravel_reserved != pushed  # Laravel's pop re-encoded it
    q = Queue(redis_client, QueueKeys(c["queue"]), 90)
    q.push(pushed)
    [job] = q.reserve(now=1_796_002_882)
    assert job.raw == pushed
    assert job.attempts == c["RedisJob_attempts"]
    assert only_attempts_changed(pushed, job.reserved, c["RedisJob_attempts"])
    # released and popped again: still the same bytes apart from attempts
    q.release(job, 0, now=1_796_002_882)
    [again] = q.reserve(now=1_796_002_882)
    assert again.raw == job.reserved
    assert only_attempts_changed(pushed, again.reserved, c["RedisJob_attempts"] + 1)


def test_payload_without_uuid_goes_to_failed(redis_client: redis.Redis) -> None:
    c = lf.load("07-cjson-quirks.json")["cases"]["minimal_no_uuid"]
    pushed = lf.raw(c["pushed"])
    q = Queue(redis_client, QueueKeys(c["queue"]), 90)
    q.push(pushed)
    result = q.reserve_detailed(now=1_796_002_882)
    assert result.jobs == [] and result.invalid == 1
    page = q.failed_list()
    assert page.total == 1
    assert page.jobs[0].payload == pushed
    assert page.jobs[0].exception == "InvalidPayload"
    assert "uuid" in page.jobs[0].message


@pytest.mark.parametrize("case", ["error_missing_attempts", "error_not_json"])
def test_garbage_that_laravel_loses_is_kept_in_failed(redis_client: redis.Redis, case: str) -> None:
    c = lf.load("07-cjson-quirks.json")["cases"][case]
    before, laravel_after = c["state_before_pop"], c["state_after_pop"]
    q = Queue(redis_client, QueueKeys(c["queue"], prefix="laravel_database_"), 90)
    # what Laravel did: payload gone, notify token left behind
    assert q.keys.ready not in laravel_after["keys"]
    assert lf.list_items(laravel_after, q.keys.notify) == [b"1"]
    lf.write_state(redis_client, before)

    result = q.reserve_detailed(now=before["laravel_now_unix"])

    assert result.jobs == [] and result.invalid == 1
    [failed] = q.failed_list().jobs
    assert failed.payload == lf.raw(c["pushed"])
    assert failed.exception == "InvalidPayload"
    assert failed.message  # the reason
    assert redis_client.llen(q.keys.notify) == redis_client.llen(q.keys.ready) == 0
    assert q.measure().failed_total == 1


def test_identical_payload_strings_collide_as_in_laravel(redis_client: redis.Redis) -> None:
    """Identical strings share one :reserved member (Laravel 07). We keep Laravel's layout, so
    the second done() of the pair reports the reservation lost instead of failing silently."""
    payload = b'{"uuid":"same-uuid","job":"sendgroups.SendMail","data":{},"attempts":0}'
    q = Queue(redis_client, QueueKeys("dup"), 90)
    q.push_many([payload, payload])
    first, second = q.reserve(count=2, now=1000)
    assert first.reserved == second.reserved
    assert redis_client.zcard(q.keys.reserved) == 1
    assert q.done(first) is False
    assert q.done(second, delivered=False) is True
    assert q.size() == 0


def test_identical_garbage_payloads_are_both_kept(redis_client: redis.Redis) -> None:
    c = lf.load("07-cjson-quirks.json")["cases"]["duplicate_payload_strings"]
    pushed = lf.raw(c["pushed_twice"])  # no uuid: invalid for us
    q = Queue(redis_client, QueueKeys(c["queue"]), 90)
    q.push_many([pushed, pushed])
    assert q.reserve(count=2, now=1000) == []
    page = q.failed_list()
    assert page.total == 2
    assert [j.payload for j in page.jobs] == [pushed, pushed]
    assert len({j.uuid for j in page.jobs}) == 2


def test_laravel_payload_bytes_survive_release_fail_and_retry(redis_client: redis.Redis) -> None:
    """A Laravel payload with ``data.command`` (PHP serialize, ``\\/``, ``a:0:{}``) goes
    reserve -> release -> reserve -> fail -> retry and comes back to ready as the very bytes
    Laravel pushed (attempts reset to its original 0)."""
    scenario = lf.load("01-push.json")["scenarios"]["unprefixed"]
    state = scenario["step1_push"][0]["state"]
    q = _queue(redis_client, scenario)
    [pushed] = lf.list_items(state, q.keys.ready)
    assert b"\\/" in pushed and b"a:0:{}" in pushed
    q.push(pushed)
    [job] = q.reserve(now=1000)
    q.release(job, 5, now=1000)
    [job2] = q.reserve(now=1005)
    assert job2.raw == job.reserved
    assert q.fail(job2, "App\\Exceptions\\Boom", "it broke: caf\u00e9 \u2603", now=1006) is False
    record = q.failed_get(job2.uuid)
    assert record is not None
    assert record.payload == job2.reserved
    assert record.exception == "App\\Exceptions\\Boom"
    assert record.message == "it broke: caf\u00e9 \u2603"
    assert record.failed_at == 1006
    assert q.failed_retry(job2.uuid).retried == 1
    assert redis_client.lrange(q.keys.ready, 0, -1) == [pushed]
    assert redis_client.llen(q.keys.notify) == 1
    assert q.failed_list().total == 0
    [job3] = q.reserve(now=1010)
    assert job3.reserved == job.reserved  # attempts 0 -> 1 again, same bytes as first time
