"""The loop back to a Laravel app, with real PHP (``examples/php/outcomes.php`` over
``SendGroupOutcomes``) on both ends of our real worker: the app suppresses an address after the
mail was queued, and the app reads what became of each message from the outcome stream."""

from __future__ import annotations

import asyncio
import json
import signal
from collections import defaultdict

import pytest
import redis
import redis.asyncio

from sendgroup_worker import loopback
from sendgroup_worker.queue.client import Queue
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.php import jsonl, run_php
from tests.support.ports import free_port
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess, drained, wait_for, worker_env

pytestmark = pytest.mark.redis

PREFIX = "laravel_database_"
NS = "shop"
Q = "mail-spring-gmail"


def _mail(to: str | list[str]) -> dict[str, object]:
    return {"to": to, "from": "news@shop.example", "subject": "Spring", "text": "Hello"}


def _read(redis_url: str, *args: str) -> list[dict[str, str]]:
    out = run_php("outcomes.php", redis_url, NS, *args, env_prefix=PREFIX).stdout
    return [json.loads(line) for line in out.splitlines()]


def test_suppressed_recipients_are_not_mailed_and_every_outcome_reaches_the_app(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    smtp_sink.script("grey@x.example", "451 4.7.1 greylisted", "250 OK")
    smtp_sink.script("bad@x.example", "550 5.1.1 no such user")
    rows = [
        _mail("ok@x.example"),
        _mail("Gone@X.example"),
        _mail("grey@x.example"),
        _mail("bad@x.example"),
        _mail(["ok2@x.example", "gone@x.example"]),
    ]
    ok, gone, grey, bad, pair = run_php(
        "push.php", redis_url, Q, PREFIX, stdin=jsonl(rows)
    ).stdout.split()
    # the recipient unsubscribes after the mail was queued (say, while the group was paused)
    assert run_php("outcomes.php", redis_url, NS, "suppress", "Gone <GONE@x.example>",
                   env_prefix=PREFIX).stdout.strip() == "1"  # fmt: skip

    q = Queue(redis_client, QueueKeys(Q, prefix=PREFIX), retry_after=3)
    env = worker_env(
        redis_url, Q, smtp_sink.port, SENDGROUP_KEY_PREFIX=PREFIX, SENDGROUP_NAMESPACE=NS,
        SENDGROUP_NAME="spring-gmail", WORKER_BACKOFF="0.5",
    )  # fmt: skip
    w = WorkerProcess(env)
    try:
        wait_for(drained(q), 30, "every job settled")
    finally:
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
        w.stop()

    # what the recipients got: the suppressed address nothing, everyone else one mail
    assert sorted(smtp_sink.per_recipient().items()) == [
        ("grey@x.example", 1), ("ok2@x.example", 1), ("ok@x.example", 1),
    ]  # fmt: skip
    assert "gone@x.example" not in smtp_sink.attempts

    # what the app reads, through phpredis
    entries = _read(redis_url, "read")
    by_uuid: dict[str, list[dict[str, str]]] = defaultdict(list)
    for e in entries:
        by_uuid[e["uuid"]].append(e)
    assert set(by_uuid) == {ok, gone, grey, bad, pair}
    assert [e["outcome"] for e in by_uuid[ok]] == ["delivered"]
    assert by_uuid[ok][0]["reply"].startswith("250")
    assert by_uuid[ok][0]["to"] == "ok@x.example" and by_uuid[ok][0]["attempt"] == "1"
    assert (by_uuid[ok][0]["queue"], by_uuid[ok][0]["group"]) == (Q, "spring-gmail")
    [suppressed] = by_uuid[gone]
    assert suppressed["outcome"] == "suppressed"
    assert suppressed["reply"] == "not sent: every recipient is in the suppression set"
    assert suppressed["suppressed"] == "Gone@X.example"
    assert [(e["outcome"], e["attempt"]) for e in by_uuid[grey]] == [
        ("deferred", "1"), ("delivered", "2"),
    ]  # fmt: skip
    assert by_uuid[grey][0]["reply"] == "451 4.7.1 greylisted"
    assert by_uuid[grey][0]["retryIn"] == "0.5"
    assert by_uuid[grey][0]["exception"] == "SmtpTemporaryFailure"
    [failed] = by_uuid[bad]
    assert failed["outcome"] == "failed" and failed["reply"].startswith("550 5.1.1 no such user")
    assert failed["exception"] == "SmtpPermanentFailure"
    [both] = by_uuid[pair]
    assert both["outcome"] == "delivered" and both["suppressed"] == "gone@x.example"

    # the job ends clearly: suppressed is neither delivered nor failed; only bad@ is in failed
    stats = q.measure()
    assert (stats.delivered, stats.failed) == (3, 1)
    assert q.failed_get(bad) is not None and q.failed_get(gone) is None

    # several app instances: a consumer group reads each entry once
    first = _read(redis_url, "follow", "app", "web-1")
    assert [e["id"] for e in first] == [e["id"] for e in entries]
    assert _read(redis_url, "follow", "app", "web-2") == []


def test_outcome_stream_is_bounded_and_can_be_turned_off(redis_url: str) -> None:
    async def go() -> tuple[int, bool]:
        client = redis.asyncio.Redis.from_url(redis_url)
        capped = loopback.Loopback(client, "s:capped", None, maxlen=100)
        off = loopback.Loopback(client, "s:off", None, maxlen=0)
        for i in range(1000):
            entry = loopback.Outcome(f"u{i}", loopback.DELIVERED, "250 ok", 1, 1.0, "q")
            await capped.record(entry)
            await off.record(entry)
        length, exists = await client.xlen("s:capped"), bool(await client.exists("s:off"))
        await client.aclose()
        return length, exists

    length, exists = asyncio.run(go())
    assert 100 <= length <= 200  # MAXLEN ~ trims whole macro nodes (100 entries each)
    assert not exists


def _drain_with_one_worker(env: dict[str, str], q: Queue) -> WorkerProcess:
    """Run one worker until ``q`` is drained (it must not exit on its own), then stop it
    cleanly (exit 0); the stopped worker, for its log."""
    w = WorkerProcess(env)
    try:
        wait_for(drained(q), 30, "the jobs settled")
        assert w.proc.poll() is None
    finally:
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
        w.stop()
    return w


def test_an_unreadable_suppression_set_sends_nothing(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    """Hostile input: the app wrote the suppression key as a string. The check fails, so no
    mail goes out unchecked: the job is retried, then failed with the Redis error as reason;
    the worker keeps going."""
    redis_client.set(loopback.suppression_set_key(NS), "ann@x.example")
    [uuid] = run_php(
        "push.php", redis_url, Q, "", stdin=jsonl([_mail("ann@x.example")])
    ).stdout.split()
    q = Queue(redis_client, QueueKeys(Q), retry_after=3)
    env = worker_env(redis_url, Q, smtp_sink.port, SENDGROUP_NAMESPACE=NS, WORKER_BACKOFF="0.2")
    _drain_with_one_worker(env, q)
    assert smtp_sink.snapshot() == [] and "ann@x.example" not in smtp_sink.attempts
    failed = q.failed_get(uuid)
    assert failed is not None and failed.exception == "ResponseError"
    assert "WRONGTYPE" in failed.message and "attempt 3, no tries left" in failed.message


def test_a_clobbered_outcome_stream_loses_no_mail_and_is_reported_once(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    """Hostile input: the app wrote the outcome stream's key as a string. The entry rides in
    the acknowledging script, which refuses only the entry: every mail goes out once, is
    acknowledged (not retried, not failed), the key is left as the app wrote it, and the worker
    says so in one line, not one per mail."""
    stream = loopback.outcome_stream_key(NS)
    redis_client.set(stream, "not a stream")
    mails = [_mail(f"user{i}@x.example") for i in range(20)]
    uuids = run_php("push.php", redis_url, Q, "", stdin=jsonl(mails)).stdout.split()
    q = Queue(redis_client, QueueKeys(Q), retry_after=3)
    env = worker_env(redis_url, Q, smtp_sink.port, SENDGROUP_NAMESPACE=NS)
    w = _drain_with_one_worker(env, q)
    assert sorted(smtp_sink.per_job()) == sorted(uuids)
    assert set(smtp_sink.per_job().values()) == {1}
    stats = q.measure()
    assert (stats.delivered, stats.failed_total) == (20, 0)
    assert redis_client.get(stream) == b"not a stream"
    assert w.log().count(f"outcome stream {stream} refused") == 1


@pytest.mark.parametrize("relay", ["up", "down"])
def test_an_already_sent_job_is_completed_not_mailed_again(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink, relay: str
) -> None:
    """A worker delivered these mails and died before acknowledging them (their idempotency
    markers are set). With the suppression set on, the worker's last check rides in the screen
    right before MAIL FROM; whether the relay answers or not, the jobs are completed once as
    already sent: no mail, no release, no failed record."""
    mails = [_mail(f"user{i}@x.example") for i in range(3)]
    uuids = run_php("push.php", redis_url, Q, "", stdin=jsonl(mails)).stdout.split()
    q = Queue(redis_client, QueueKeys(Q), retry_after=3)
    redis_client.zadd(q.keys.sent, {u: 1_796_000_000 for u in uuids})
    port = smtp_sink.port if relay == "up" else free_port()  # "down": nothing listens there
    env = worker_env(redis_url, Q, port, SENDGROUP_NAMESPACE=NS, WORKER_BACKOFF="0.2")
    w = _drain_with_one_worker(env, q)
    assert smtp_sink.snapshot() == []
    stats = q.measure()
    assert (stats.delivered, stats.released, stats.failed_total) == (0, 0, 0)
    assert w.log().count("already sent by an earlier reservation") == 3
