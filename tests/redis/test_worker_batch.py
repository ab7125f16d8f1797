"""Batched reserve (``WORKER_RESERVE_BATCH``): real worker processes, a real Redis, a real SMTP
sink. A lane reserves several jobs in one ``reserve`` call and runs them one after the other;
what a single reserve guaranteed still holds: every mail sent once with two workers racing, a
stop hands the unstarted jobs back at once with their attempts unchanged, ``WORKER_MAX_JOBS``
exact, the rate limit held, no job started too late in its reservation.

The reserve calls are counted on Redis' side (``MONITOR``): EVALSHA of the reserve script
asking for at least one job."""

from __future__ import annotations

import hashlib
import json
import re
import signal
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlparse

import pytest
import redis

from sendgroup_worker.queue import protocol as p
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import (
    WorkerProcess,
    counts,
    drained,
    mail_payload,
    stop_all,
    sync_queue,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.redis

Q = "mail-batch"

RESERVE_SHA = hashlib.sha1(p.script_source("reserve").encode()).hexdigest()
_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')


class ReserveCalls:
    """Counts the reserve script calls Redis receives (``MONITOR`` on its own connection) and
    the job count each asked for."""

    def __init__(self, redis_url: str) -> None:
        url = urlparse(redis_url)
        self.sock = socket.create_connection((url.hostname or "127.0.0.1", url.port or 6379))
        self.sock.sendall(b"MONITOR\r\n")
        self.sock.settimeout(0.2)
        self.counts: list[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        buf = b""
        while not self._stop.is_set():
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            if not chunk:
                return
            buf += chunk
            *lines, buf = buf.split(b"\r\n")
            for line in lines:
                args = _ARG.findall(line)
                if (
                    len(args) > 2
                    and args[0].upper() == b"EVALSHA"
                    and args[1] == RESERVE_SHA.encode()
                ):
                    numkeys = int(args[2])
                    count = int(args[3 + numkeys + 2])  # ARGV: now, retry_after, count, ...
                    if count > 0:
                        self.counts.append(count)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@contextmanager
def reserve_calls(redis_url: str) -> Iterator[ReserveCalls]:
    calls = ReserveCalls(redis_url)
    time.sleep(0.1)  # MONITOR is on before the workers start
    try:
        yield calls
    finally:
        calls.close()


def one_lane_env(
    redis_url: str,
    smtp_port: int,
    batch: int,
    timeout: int = 10,
    retry_after: int = 30,
    **extra: object,
) -> dict[str, str]:
    """Settings of a worker with one lane reserving ``batch`` jobs per call; ``timeout`` and
    ``retry_after`` in seconds; ``extra`` more settings."""
    return worker_env(
        redis_url,
        Q,
        smtp_port,
        WORKER_CONCURRENCY=1,
        WORKER_RESERVE_BATCH=batch,
        WORKER_TIMEOUT=timeout,
        WORKER_RETRY_AFTER=retry_after,
        **extra,
    )


def ready_attempts(client: redis.Redis) -> list[int]:
    return [json.loads(raw)["attempts"] for raw in client.lrange(QueueKeys(Q).ready, 0, -1)]


def test_a_lane_reserves_its_batch_in_one_call_and_a_stop_hands_the_rest_back_at_once(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q, retry_after=30)
    payloads = [mail_payload(f"b{i}@x.example") for i in range(25)]
    smtp_sink.script("b0@x.example", "250 OK", data_delay=1.5)
    env = one_lane_env(redis_url, smtp_sink.port, 10)
    q.push_many(payloads)
    with reserve_calls(redis_url) as calls:
        w = WorkerProcess(env, "batch")
        try:
            wait_for(lambda: smtp_sink.data_waiting["b0@x.example"] == 1, 15, "the first DATA")
            assert q.measure().reserved == 10  # one call reserved the whole batch
            assert calls.counts == [10]
            w.signal(signal.SIGTERM)
            signalled = time.monotonic()
            assert w.wait(10) == 0
            exited = time.monotonic() - signalled
        finally:
            w.stop()
    assert smtp_sink.per_recipient() == {"b0@x.example": 1}  # the job in flight finished
    stats = q.measure()
    # the 9 reserved but unstarted jobs are back at once (not after retry_after, 30 s), at the
    # head, in order, bytes as pushed: no attempt counted
    assert (stats.ready, stats.reserved, stats.delayed, stats.delivered) == (24, 0, 0, 1)
    assert exited < 5
    assert redis_client.lrange(QueueKeys(Q).ready, 0, -1) == payloads[1:]
    assert ready_attempts(redis_client) == [0] * 24
    assert "9 reserved job(s) handed back unstarted" in w.log()


def test_two_racing_workers_send_every_mail_once_and_start_no_job_too_late(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    """Each mail takes 0.4 s at the relay and a batch of 10 would need 4 s, longer than the
    3 s reservation: each lane starts a job only while the reservation still holds its whole
    time limit (1 s) and hands the rest back, so no job is fenced or lost on the way."""
    q = sync_queue(redis_url, Q, retry_after=3)
    recipients = [f"r{i}@x.example" for i in range(24)]
    for r in recipients:
        smtp_sink.script(r, "250 OK", data_delay=0.4)
    env = one_lane_env(redis_url, smtp_sink.port, 10, timeout=1, retry_after=3)
    q.push_many([mail_payload(r) for r in recipients])
    with reserve_calls(redis_url) as calls:
        workers = [WorkerProcess(env, f"racer{i}") for i in range(2)]
        try:
            wait_for(lambda: len(smtp_sink.snapshot()) >= 24, 60, "24 mails at the sink")
            wait_for(drained(q), 10, "queue drained")
            time.sleep(0.5)  # a duplicate would arrive now
        finally:
            codes = stop_all(workers)
    assert codes == [0, 0]
    assert smtp_sink.per_recipient() == dict.fromkeys(recipients, 1)
    stats = q.measure()
    assert counts(stats) == (0, 0, 0, 0)
    # every mail went out on its first attempt: none cut short, released or fenced
    assert (stats.delivered, stats.failed_total, stats.released) == (24, 0, 0)
    assert max(calls.counts) == 10  # batches were reserved
    logs = "".join(w.log() for w in workers)
    for burnt in ("reservation gone", "reservation expired", "timed out", "retry in"):
        assert burnt not in logs
    assert "too little of the reservation left" in logs


def test_max_jobs_is_exact_with_batches_on_several_lanes(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q)
    recipients = [f"m{i}@x.example" for i in range(30)]
    for r in recipients:
        smtp_sink.script(r, "250 OK", data_delay=0.2)
    q.push_many([mail_payload(r) for r in recipients])
    env = worker_env(
        redis_url,
        Q,
        smtp_sink.port,
        WORKER_MAX_JOBS=7,
        WORKER_CONCURRENCY=4,
        WORKER_RESERVE_BATCH=5,
        WORKER_TIMEOUT=5,  # a batch of 5 x 0.2 s fits in its reservation: nothing handed back
        WORKER_RETRY_AFTER=10,
    )
    with reserve_calls(redis_url) as calls:
        w = WorkerProcess(env, "max-jobs")
        try:
            assert w.wait(30) == 0
        finally:
            w.stop()
    assert len(smtp_sink.snapshot()) == 7
    stats = q.measure()
    assert (stats.ready, stats.reserved, stats.delivered) == (23, 0, 7)
    assert sorted(calls.counts) == [2, 5]  # the lanes claimed 5 + 2 of the 7, nobody more
    assert "max jobs reached" in w.log()


def test_the_rate_limit_holds_and_a_batch_takes_only_the_permits_granted(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    """1,200/min (20/s, burst 20), batches of 32 asked: the first call gets the 20 of the
    burst, then each call as many as the rate freed; 80 mails take >= 3 s and no 1 s window
    holds more than the burst plus a second of rate."""
    q = sync_queue(redis_url, Q)
    recipients = [f"t{i}@x.example" for i in range(80)]
    q.push_many([mail_payload(r) for r in recipients])
    env = worker_env(redis_url, Q, smtp_sink.port, RATE_PER_MINUTE=1200, WORKER_RESERVE_BATCH=32)
    with reserve_calls(redis_url) as calls:
        w = WorkerProcess(env, "rated")
        try:
            wait_for(lambda: len(smtp_sink.snapshot()) >= 80, 30, "80 mails at the sink")
            wait_for(drained(q), 10, "queue drained")
        finally:
            w.signal(signal.SIGTERM)
            assert w.wait(10) == 0
            w.stop()
    at = sorted(r.at for r in smtp_sink.snapshot())
    assert at[-1] - at[0] >= 2.8  # (80 - 20 burst) / 20 per second = 3 s
    assert max(sum(1 for t in at if s <= t < s + 1.0) for s in at) <= 41
    assert smtp_sink.per_recipient() == dict.fromkeys(recipients, 1)
    assert max(calls.counts) == 20 and len(calls.counts) < 80  # batches, sized by the permits
    assert q.measure().delivered == 80


def test_a_suspension_mid_batch_hands_the_rest_back_instead_of_sending_it(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    """The batch's first mail gets a deferral that suspends the group (a backpressure
    pattern, 3 s): the lane sends nothing more from its batch; the 9 others go back to the
    queue unstarted and are sent after the suspension."""
    q = sync_queue(redis_url, Q, retry_after=30)
    smtp_sink.script("busy@x.example", "421 4.7.28 too many messages, slow down", "250 OK")
    payloads = [mail_payload("busy@x.example")] + [
        mail_payload(f"s{i}@x.example") for i in range(9)
    ]
    env = one_lane_env(
        redis_url,
        smtp_sink.port,
        10,
        WORKER_BACKOFF="5",
        BACKPRESSURE_SUSPEND_FOR="3",
        BACKPRESSURE_PATTERNS='["4\\\\.7\\\\.28"]',
    )
    q.push_many(payloads)
    with reserve_calls(redis_url) as calls:
        w = WorkerProcess(env, "suspended")
        try:
            wait_for(lambda: smtp_sink.attempts["busy@x.example"] >= 1, 10, "the deferral")
            deferred_at = smtp_sink.rcpt_log[0][0]
            wait_for(lambda: len(smtp_sink.snapshot()) >= 10, 30, "all 10 delivered")
        finally:
            w.signal(signal.SIGTERM)
            assert w.wait(10) == 0
            w.stop()
    assert calls.counts[0] == 10
    first_after = min(r.at for r in smtp_sink.snapshot())
    assert first_after - deferred_at >= 2.5  # nothing of the batch went out while suspended
    assert smtp_sink.per_recipient() == {
        "busy@x.example": 1,
        **{f"s{i}@x.example": 1 for i in range(9)},
    }
    assert "9 reserved job(s) handed back unstarted (group suspended" in w.log()
    assert q.measure().released == 1  # only the deferred one counted an attempt


def test_each_delivered_mail_of_a_batch_is_marked_sent_before_the_next_mail_goes_out(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    """The lane's acknowledgements ride with the next mail's ``begin_send`` check: while the
    third mail of a batch is in DATA, the first two already carry their ``sent`` markers, so
    a SIGKILL then re-sends at most the mail in flight, as with one job per reserve."""
    q = sync_queue(redis_url, Q, retry_after=30)
    payloads = [mail_payload(f"k{i}@x.example") for i in range(5)]
    uuids = [json.loads(x)["uuid"] for x in payloads]
    smtp_sink.script("k2@x.example", "250 OK", data_delay=1.5)
    env = one_lane_env(redis_url, smtp_sink.port, 5)
    q.push_many(payloads)
    with reserve_calls(redis_url) as calls:
        w = WorkerProcess(env, "acks")
        try:
            wait_for(lambda: smtp_sink.data_waiting["k2@x.example"] == 1, 15, "the third DATA")
            stats = q.measure()
            sent = [redis_client.zscore(QueueKeys(Q).sent, u) is not None for u in uuids]
            w.signal(signal.SIGKILL)
            w.wait(10)
        finally:
            w.stop()
    assert calls.counts == [5]
    assert sent == [True, True, False, False, False]
    assert (stats.delivered, stats.reserved) == (2, 3)


def test_a_pause_mid_batch_hands_the_rest_back_within_a_look(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    """Mails of 0.3 s each, a batch of 10: the pause marker set after the second mail stops
    the batch at the next look (every 0.5 s) plus the mail in flight; the rest goes back
    unstarted, attempts unchanged, and nothing is sent while paused."""
    q = sync_queue(redis_url, Q, retry_after=30)
    payloads = [mail_payload(f"p{i}@x.example") for i in range(10)]
    for i in range(10):
        smtp_sink.script(f"p{i}@x.example", "250 OK", data_delay=0.3)
    env = one_lane_env(redis_url, smtp_sink.port, 10)
    q.push_many(payloads)
    with reserve_calls(redis_url) as calls:
        w = WorkerProcess(env, "paused-batch")
        try:
            wait_for(lambda: len(smtp_sink.snapshot()) >= 2, 15, "two mails")
            redis_client.set(QueueKeys(Q).paused, "1")
            paused_at = time.time()
            wait_for(lambda: q.measure().reserved == 0, 5, "the batch handed back")
            handed_back_after = time.time() - paused_at
            time.sleep(1.5)
            sent = smtp_sink.snapshot()
        finally:
            w.signal(signal.SIGTERM)
            assert w.wait(10) == 0
            w.stop()
    assert calls.counts[0] == 10  # then, paused, its looks reserve nothing
    assert handed_back_after < 0.5 + 0.3 + 0.5  # a look, the mail in flight, slack
    assert all(r.at <= paused_at + 0.5 + 0.3 + 0.2 for r in sent)
    n = len(sent)
    assert 2 <= n <= 5
    assert redis_client.lrange(QueueKeys(Q).ready, 0, -1) == payloads[n:]
    assert ready_attempts(redis_client) == [0] * (10 - n)
    assert "handed back unstarted (group paused)" in w.log()


def test_with_a_provider_a_lane_reserves_one_job_per_call(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    """A guard, not a change: the provider's permits, concurrency leases and recipient debt
    are per lane and per job, so with ``SENDGROUP_PROVIDER`` set the batch is 1 whatever
    ``WORKER_RESERVE_BATCH`` says, and the provider's 600/min (10/s) pace holds."""
    q = sync_queue(redis_url, Q)
    recipients = [f"v{i}@x.example" for i in range(30)]
    q.push_many([mail_payload(r) for r in recipients])
    provider = json.dumps({"id": "csp/batch", "group": "ns/batch", "perMinute": 600})
    env = worker_env(
        redis_url, Q, smtp_sink.port, SENDGROUP_PROVIDER=provider, WORKER_RESERVE_BATCH=32
    )
    with reserve_calls(redis_url) as calls:
        w = WorkerProcess(env, "provider")
        try:
            wait_for(lambda: len(smtp_sink.snapshot()) >= 30, 30, "30 mails at the sink")
        finally:
            w.signal(signal.SIGTERM)
            assert w.wait(10) == 0
            w.stop()
    assert set(calls.counts) == {1} and len(calls.counts) >= 30
    at = sorted(r.at for r in smtp_sink.snapshot())
    assert at[-1] - at[0] >= 1.5  # 30 mails at 10/s after the provider's burst
    assert smtp_sink.per_recipient() == dict.fromkeys(recipients, 1)
