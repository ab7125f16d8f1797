"""The mail worker as real processes against a real Redis and a real SMTP server: delivery,
exactly-once with several workers, the shared rate limit, 4xx/5xx handling, garbage payloads,
Laravel-shaped payloads kept byte for byte, backpressure, metrics, max jobs, idle cost."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import redis

from sendgroup_worker import backpressure
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.redis_server import free_port
from tests.support.smtp_sink import SmtpSink
from tests.support.turn_relay import TurnRelay
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

Q = "mail-test"


def test_thousand_jobs_four_workers_every_recipient_gets_exactly_one_mail(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q)
    recipients = [f"user{i}@gmail.example" for i in range(1000)]
    payloads = [mail_payload(r) for r in recipients]
    uuids = {json.loads(p)["uuid"] for p in payloads}
    workers = [WorkerProcess(worker_env(redis_url, Q, smtp_sink.port)) for _ in range(4)]
    try:
        q.push_many(payloads)
        wait_for(lambda: len(smtp_sink.snapshot()) >= 1000, 90, "1000 mails at the sink")
        wait_for(drained(q), 10, "queue drained")
        time.sleep(0.5)  # a duplicate would arrive now
    finally:
        codes = stop_all(workers)
    assert codes == [0, 0, 0, 0]
    per_rcpt = smtp_sink.per_recipient()
    assert set(per_rcpt) == set(recipients) and set(per_rcpt.values()) == {1}
    assert set(smtp_sink.per_job()) == uuids
    stats = q.measure()
    assert counts(stats) == (0, 0, 0, 0)
    assert (stats.delivered, stats.failed_total) == (1000, 0)
    # every worker took part (the notify list wakes them all)
    assert all("worker stopped" in w.log() for w in workers)


def test_three_workers_share_one_rate_limit(redis_url: str, smtp_sink: SmtpSink) -> None:
    q = sync_queue(redis_url, Q)
    q.push_many([mail_payload(f"r{i}@x.example") for i in range(400)])
    env = worker_env(redis_url, Q, smtp_sink.port, RATE_PER_MINUTE=600, RATE_BURST=10)
    port = free_port()
    workers = [WorkerProcess({**env, "METRICS_PORT": str(port if i == 0 else 0)}) for i in range(3)]
    try:
        wait_for(lambda: len(smtp_sink.snapshot()) >= 1, 15, "first mail")
        t0 = smtp_sink.snapshot()[0].at
        wait_for(lambda: time.time() > t0 + 10.5, 15, "10 s of sending")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        stop_all(workers)
    times = sorted(r.at for r in smtp_sink.snapshot() if r.at < t0 + 10)
    # 600/min = 10/s: in any window of w seconds at most 10*w + burst (10) slots are taken;
    # arrivals at the sink may lag their slot by a few ms, hence a slack of 2 mails
    for i, start in enumerate(times):
        in_window = [t for t in times[i:] if t < start + 5]
        assert len(in_window) <= 10 * 5 + 10 + 2, (start - t0, len(in_window))
    assert 10 * 10 - 10 <= len(times) <= 10 * 10 + 10 + 2, len(times)
    gauge = re.escape(f"sendgroup_worker_rate_limit_per_minute{{{LABELS}}} 600.0").encode()
    assert re.search(gauge, metrics)
    delivered = _metric(metrics, f'sendgroup_worker_jobs_total{{outcome="delivered",{LABELS}}}')
    replies = _metric(
        metrics,
        'sendgroup_worker_smtp_replies_total{queue="mail-test",reply_class="2xx",'
        'sendgroup="mail-test"}',
    )
    sends = _metric(metrics, f"sendgroup_worker_send_seconds_count{{{LABELS}}}")
    assert 10 <= delivered == replies == sends <= len(times)


def test_temporary_replies_are_retried_after_backoff_permanent_ones_fail_at_once(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q)
    smtp_sink.script("later@x.example", "451 4.7.1 greylisted", "452 4.2.2 full", "250 OK")
    smtp_sink.script("gone@x.example", "550 5.1.1 no such user")
    smtp_sink.script("never@x.example", "451 4.7.1 greylisted")
    payloads = {
        name: mail_payload(f"{name}@x.example") for name in ("later", "gone", "never", "fine")
    }
    uuid = {name: json.loads(p)["uuid"] for name, p in payloads.items()}
    w = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port, WORKER_BACKOFF="1,2"))
    try:
        q.push_many(payloads.values())
        wait_for(drained(q), 30, "all jobs settled")
    finally:
        assert stop_all([w]) == [0]
    assert smtp_sink.per_recipient() == Counter({"later@x.example": 1, "fine@x.example": 1})
    assert smtp_sink.attempts["later@x.example"] == 3
    assert smtp_sink.attempts["gone@x.example"] == 1  # 5xx: no retry
    assert smtp_sink.attempts["never@x.example"] == 3  # tries = 3
    later = [t for t, r in smtp_sink.rcpt_log if r == "later@x.example"]
    assert later[1] - later[0] >= 0.9 and later[2] - later[1] >= 1.9  # backoff 1 s, then 2 s
    gone = q.failed_get(uuid["gone"])
    assert gone is not None and gone.exception == "SmtpPermanentFailure"
    assert gone.message.startswith("550 5.1.1 no such user")
    never = q.failed_get(uuid["never"])
    assert never is not None and "451 4.7.1 greylisted" in never.message
    assert "attempt 3" in never.message
    stats = q.measure()
    assert (stats.delivered, stats.failed_total, stats.released) == (2, 2, 4)


def test_garbage_payloads_go_to_failed_and_good_ones_are_delivered(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q)
    garbage = [
        b"not json at all",
        b'{"displayName":"no uuid","job":"sendgroups.SendMail","attempts":0}',
        b"[1,2,3]",
        mail_payload("x@x.example", job="sendgroups.SendMial"),  # a typo: no such handler
        mail_payload("y@x.example", data={"to": "y@x.example"}),  # no from, no body
    ]
    good = [mail_payload(f"good{i}@x.example") for i in range(20)]
    mixed: list[bytes] = []
    for i, g in enumerate(good):
        mixed.append(g)
        if i < len(garbage):
            mixed.append(garbage[i])
    w = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port))
    try:
        q.push_many(mixed)
        wait_for(drained(q), 20, "queue drained")
        assert w.proc.poll() is None  # the worker kept going
    finally:
        assert stop_all([w]) == [0]
    assert sorted(smtp_sink.per_recipient()) == sorted(f"good{i}@x.example" for i in range(20))
    page = q.failed_list(limit=10)
    assert page.total == 5
    reasons = Counter(j.exception for j in page.jobs)
    assert reasons["UnknownHandler"] == 1 and reasons["InvalidMailData"] == 1
    assert reasons["InvalidPayload"] == 3
    assert {j.payload for j in page.jobs if j.exception == "InvalidPayload"} == set(garbage[:3])


def _with_attempts(raw: bytes, n: int) -> bytes:
    assert raw.count(b'"attempts":0') == 1
    return raw.replace(b'"attempts":0', f'"attempts":{n}'.encode())


def test_laravel_shaped_payloads_survive_release_failed_and_retry_byte_for_byte(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    # Laravel 11 key order, PHP's escaped slashes, a serialize() string, raw UTF-8, an empty
    # array and Horizon's string pushedAt: none of it may change on the way.
    raw = (
        '{"uuid":"9db158ec-1de5-42c6-9b0d-84a584a18274","displayName":"App\\\\Mail\\\\Promo",'
        '"job":"sendgroups.SendMail","maxTries":null,"maxExceptions":null,'
        '"failOnTimeout":false,"backoff":"1,1","timeout":null,"retryUntil":null,'
        '"data":{"commandName":"App\\\\Mail\\\\Promo","command":"O:15:\\"App\\\\Mail\\\\Promo'
        '\\":2:{s:4:\\"path\\";s:40:\\"podcasts\\/2024\\/Grüße-日本語-🎧.mp3\\";'
        's:7:\\"options\\";a:0:{}}","to":"laravel@x.example","from":"app@sender.example",'
        '"subject":"Grüße \\/ hello","text":"body with \\/ slash","tags":[]},'
        '"id":"9p1UmeQEYSP8QxJiU4eprbzZQ3E0j3gE","attempts":0,"type":"mail","tags":[],'
        '"silenced":false,"pushedAt":"1796002801.014"}'
    ).encode()
    json.loads(raw)  # valid JSON
    smtp_sink.script("laravel@x.example", "451 4.7.1 later", "550 5.7.1 refused", "250 OK")
    q = sync_queue(redis_url, Q)
    keys = QueueKeys(Q)
    client = redis.Redis.from_url(redis_url)
    w = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port, WORKER_BACKOFF="30"))
    try:
        q.push(raw)
        # attempt 1: 451 -> released with the payload's own backoff (1 s, not the worker's 30)
        wait_for(lambda: client.zcard(keys.delayed) == 1, 10, "release to delayed")
        assert client.zrange(keys.delayed, 0, -1) == [_with_attempts(raw, 1)]
        # attempt 2: 550 -> failed, the reserved bytes kept
        wait_for(lambda: q.measure().failed == 1, 10, "failed record")
        record = q.failed_get("9db158ec-1de5-42c6-9b0d-84a584a18274")
        assert record is not None and record.payload == _with_attempts(raw, 2)
        assert record.message.startswith("550 5.7.1 refused")
        # retry from failed: attempts reset, the rest unchanged, then delivered
        assert q.failed_retry("9db158ec-1de5-42c6-9b0d-84a584a18274").retried == 1
        wait_for(lambda: len(smtp_sink.snapshot()) == 1, 10, "delivery after retry")
        wait_for(drained(q), 5, "queue drained")
    finally:
        assert stop_all([w]) == [0]
    got = smtp_sink.snapshot()[0]
    assert got.job == "9db158ec-1de5-42c6-9b0d-84a584a18274"
    assert b"X-SendGroup-Job: 9db158ec-1de5-42c6-9b0d-84a584a18274" in got.data


def test_provider_deferral_pattern_suspends_the_group(redis_url: str, smtp_sink: SmtpSink) -> None:
    q = sync_queue(redis_url, Q)
    smtp_sink.script("busy@x.example", "421 4.7.28 too many messages, slow down", "250 OK")
    env = worker_env(
        redis_url,
        Q,
        smtp_sink.port,
        WORKER_BACKOFF="2",  # > CACHE_SECONDS: the retry cannot race a stale reading
        BACKPRESSURE_SUSPEND_FOR="3",
        BACKPRESSURE_PATTERNS='["4\\\\.7\\\\.28"]',
    )
    workers = [WorkerProcess(env), WorkerProcess(env)]
    try:
        q.push(mail_payload("busy@x.example"))
        wait_for(lambda: smtp_sink.attempts["busy@x.example"] >= 1, 10, "the deferral")
        deferred_at = smtp_sink.rcpt_log[0][0]
        # Push the rest once the suspension is in Redis and every worker's cached reading has
        # expired ("a suspension reaches every worker within CACHE_SECONDS"): a fixed 0.3 s
        # sleep let the other worker send at once with its reading from before the deferral.
        r = redis.Redis.from_url(redis_url)
        wait_for(
            lambda: r.hget(QueueKeys(Q).backpressure, "until") is not None,
            10,
            "the suspension in Redis",
        )
        time.sleep(backpressure.CACHE_SECONDS + 0.2)
        q.push_many([mail_payload(f"after{i}@x.example") for i in range(5)])
        wait_for(lambda: len(smtp_sink.snapshot()) == 6, 15, "all 6 delivered")
    finally:
        stop_all(workers)
    first_after = min(r.at for r in smtp_sink.snapshot())
    assert first_after - deferred_at >= 2.5  # nobody sent while the group was suspended
    assert smtp_sink.per_recipient()["busy@x.example"] == 1
    assert any("suspended by provider backpressure" in w.log() for w in workers)


def test_max_jobs_exits_cleanly(redis_url: str, smtp_sink: SmtpSink) -> None:
    q = sync_queue(redis_url, Q)
    q.push_many([mail_payload(f"m{i}@x.example") for i in range(10)])
    w = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port, WORKER_MAX_JOBS=4))
    try:
        assert w.wait(20) == 0
    finally:
        w.stop()
    assert len(smtp_sink.snapshot()) == 4
    stats = q.measure()
    assert (stats.ready, stats.reserved, stats.delivered) == (6, 0, 4)  # acks flushed at exit
    assert "max jobs reached" in w.log()


def test_max_time_exits_cleanly(redis_url: str, smtp_sink: SmtpSink) -> None:
    w = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port, WORKER_MAX_TIME="1.5"))
    started = time.monotonic()
    try:
        assert w.wait(15) == 0
    finally:
        w.stop()
    assert 1.4 <= time.monotonic() - started <= 10
    assert "max time reached" in w.log()


def test_idle_worker_costs_almost_nothing(redis_url: str, smtp_sink: SmtpSink) -> None:
    client = redis.Redis.from_url(redis_url)
    w = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port, WORKER_BLOCK_FOR="5"))
    try:
        wait_for(lambda: "worker started" in w.log(), 10, "worker start")
        time.sleep(1.0)
        calls_before = _total_calls(client)
        cpu_before = _cpu_seconds(w.pid)
        time.sleep(5.0)
        calls = _total_calls(client) - calls_before
        cpu = _cpu_seconds(w.pid) - cpu_before
        # a job pushed now is picked up at once (the BLPOP wakes), not after a poll interval
        sent_at = time.time()
        sync_queue(redis_url, Q).push(mail_payload("wake@x.example"))
        wait_for(lambda: len(smtp_sink.snapshot()) == 1, 5, "the mail")
    finally:
        stop_all([w])
    # one lane blocks; per 5 s block: backpressure read, reserve, 2 ZRANGE, BLPOP (+ INFO)
    assert calls <= 12, calls
    assert cpu < 0.25, cpu
    assert smtp_sink.snapshot()[0].at - sent_at < 1.0


def _total_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(v["calls"]) for v in stats.values())


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


#: The group labels of a worker's series (no SENDGROUP_NAME: sendgroup is the queue name).
LABELS = f'queue="{Q}",sendgroup="{Q}"'


def _metric(text: bytes, name: str) -> float:
    for line in text.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    raise AssertionError(f"metric {name} not exported")


def test_relay_unreachable_releases_with_backoff_then_fails(redis_url: str) -> None:
    q = sync_queue(redis_url, Q)
    payload = mail_payload("nobody@x.example")
    env = worker_env(redis_url, Q, free_port(), WORKER_TRIES=2, WORKER_BACKOFF="0.5")
    w = WorkerProcess(env)
    try:
        q.push(payload)
        wait_for(lambda: q.measure().failed == 1, 15, "the job in failed")
    finally:
        assert stop_all([w]) == [0]
    record = q.failed_get(json.loads(payload)["uuid"])
    assert record is not None and record.exception == "SmtpConnectionError"
    assert "attempt 2" in record.message
    stats = q.measure()
    assert (stats.released, stats.failed_total, stats.total) == (1, 1, 0)


def test_a_send_past_the_job_timeout_is_released_and_retried(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q)
    # first attempt only: each reply comes within the SMTP command timeout (0.9 x 1.5 s), the
    # two together pass the job timeout (1.5 s), which ends the attempt during DATA
    smtp_sink.script("stuck@x.example", "250 OK", rcpt_delay=1.0, data_delay=1.0)
    w = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port, WORKER_TIMEOUT=1.5))
    try:
        q.push(mail_payload("stuck@x.example"))
        wait_for(lambda: len(smtp_sink.snapshot()) == 1, 15, "delivery on the second try")
        wait_for(drained(q), 5, "queue drained")
    finally:
        assert stop_all([w]) == [0]
    assert smtp_sink.attempts["stuck@x.example"] == 2
    assert smtp_sink.aborted == ["stuck@x.example"]  # the first DATA never completed
    assert q.measure().released == 1  # released with backoff, not left to expire
    assert "attempt 1: sendgroups.SendMail has timed out after 1.5s" in w.log()


def test_a_stuck_smtp_command_hits_the_client_timeout_first(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q)
    smtp_sink.script("mute@x.example", "250 OK", rcpt_delay=3.0)  # first attempt only
    w = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port, WORKER_TIMEOUT=1.5))
    try:
        q.push(mail_payload("mute@x.example"))
        wait_for(lambda: len(smtp_sink.snapshot()) == 1, 15, "delivery on the second try")
        wait_for(drained(q), 5, "queue drained")
    finally:
        assert stop_all([w]) == [0]
    assert q.measure().released == 1
    assert "attempt 1: SMTPReadTimeoutError" in w.log()


def test_jobs_past_their_tries_or_retry_until_fail_without_a_send(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q)
    # reserved 3 times already (e.g. workers killed): this reservation is the 4th of 3
    worn = mail_payload("worn@x.example", maxTries=3, attempts=3)
    expired = mail_payload("expired@x.example", retryUntil=int(time.time()) - 60)
    fresh = mail_payload("fresh@x.example", retryUntil=int(time.time()) + 600, attempts=7)
    w = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port))
    try:
        q.push_many([worn, expired, fresh])
        wait_for(drained(q), 15, "queue drained")
    finally:
        assert stop_all([w]) == [0]
    assert set(smtp_sink.per_recipient()) == {"fresh@x.example"}  # retryUntil wins over tries
    for payload in (worn, expired):
        record = q.failed_get(json.loads(payload)["uuid"])
        assert record is not None and record.exception == "MaxAttemptsExceededException"


def test_warmup_ramp_lowers_the_shared_rate(redis_url: str, smtp_sink: SmtpSink) -> None:
    q = sync_queue(redis_url, Q)
    q.push_many([mail_payload(f"w{i}@x.example") for i in range(50)])
    since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 86400))
    # day 1 of a ramp starting at 1800/h doubling daily: 3600/h = 60/min = 1 per second
    env = worker_env(
        redis_url,
        Q,
        smtp_sink.port,
        RATE_PER_MINUTE=6000,
        WARMUP_START_PER_HOUR=1800,
        WARMUP_GROWTH_PER_DAY=2,
        WARMUP_SINCE=since,
    )
    port = free_port()
    workers = [WorkerProcess({**env, "METRICS_PORT": str(port)}), WorkerProcess(env)]
    try:
        wait_for(lambda: len(smtp_sink.snapshot()) >= 1, 15, "first mail")
        t0 = smtp_sink.snapshot()[0].at
        wait_for(lambda: time.time() > t0 + 4, 10, "4 s of sending")
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    finally:
        stop_all(workers)
    sent = [r for r in smtp_sink.snapshot() if r.at < t0 + 4]
    assert 3 <= len(sent) <= 6, len(sent)  # burst 1 + 1/s, not 100/s
    rate = _metric(metrics, f"sendgroup_worker_rate_limit_per_minute{{{LABELS}}}")
    assert 59.9 <= rate <= 60.1


def test_a_run_of_temporary_failures_suspends_the_group(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q)
    for i in range(3):
        smtp_sink.script(f"defer{i}@x.example", "451 4.7.1 try again later")
    env = worker_env(
        redis_url,
        Q,
        smtp_sink.port,
        WORKER_TRIES=1,
        BACKPRESSURE_SUSPEND_AFTER=3,
        BACKPRESSURE_SUSPEND_FOR="3",
    )
    w = WorkerProcess(env)
    try:
        q.push_many([mail_payload(f"defer{i}@x.example") for i in range(3)])
        wait_for(lambda: q.measure().failed == 3, 10, "three temporary failures")
        third_at = max(t for t, _ in smtp_sink.rcpt_log)
        q.push_many([mail_payload(f"ok{i}@x.example") for i in range(3)])
        wait_for(lambda: len(smtp_sink.snapshot()) == 3, 15, "delivery after the suspension")
    finally:
        assert stop_all([w]) == [0]
    assert min(r.at for r in smtp_sink.snapshot()) - third_at >= 2.5
    assert "suspended by provider backpressure" in w.log()
    assert "no longer suspended" in w.log()


def test_a_pipelining_relay_gets_every_mail_once_and_the_same_refusals(redis_url: str) -> None:
    """A relay that offers PIPELINING (RFC 2920): two workers, 300 mails, a recipient gone
    (5xx: failed at once), one greylisted once (4xx: retried), a job with one gone and one
    good recipient (delivered to the good one, not retried). Each send waits for the relay
    twice (a relay in front counts the workers' turns; without PIPELINING it is 4 per mail)."""
    q = sync_queue(redis_url, Q)
    plain = [f"user{i}@x.example" for i in range(300)]
    gone, later = mail_payload("gone@x.example"), mail_payload("later@x.example")
    mixed = mail_payload(["gone@x.example", "half@x.example"])
    with SmtpSink(pipelining=True) as sink, TurnRelay(sink.port) as relay:
        sink.script("gone@x.example", "550 5.1.1 no such user")
        sink.script("later@x.example", "451 4.7.1 greylisted", "250 OK")
        env = worker_env(redis_url, Q, relay.port, WORKER_BACKOFF="1")
        workers = [WorkerProcess(env) for _ in range(2)]
        try:
            q.push_many([*(mail_payload(r) for r in plain), gone, later, mixed])
            wait_for(drained(q), 60, "all jobs settled")
            time.sleep(0.3)  # a duplicate would arrive now
        finally:
            codes = stop_all(workers)
        per_rcpt, attempts, turns = sink.per_recipient(), sink.attempts, relay.turns
    assert codes == [0, 0]
    assert per_rcpt == Counter(
        {**dict.fromkeys(plain, 1), "later@x.example": 1, "half@x.example": 1}
    )
    assert (attempts["gone@x.example"], attempts["later@x.example"]) == (2, 2)
    failed = q.failed_get(json.loads(gone)["uuid"])
    assert failed is not None and failed.message.startswith("550 5.1.1 no such user")
    stats = q.measure()
    assert (stats.delivered, stats.failed_total, stats.released) == (302, 1, 1)
    sends = 300 + 1 + 2 + 1
    # 2 per send, plus per connection its EHLO and QUIT and an RSET after each refusal
    assert 2 * sends <= turns < 3 * sends, turns
