"""A worker waiting for its provider's budget polls it with one lane at a time (issue 14,
bench/providers finding: every refused lane polled on its own, ~17 script calls per mail for
12 lanes sharing a few permits a second). Real worker process, real Redis watched with
``MONITOR`` (every script call that names the provider's keys), real SMTP sink. What a user
checks: the provider's rate still holds, and the Redis calls per mail it costs."""

from __future__ import annotations

import json
import signal
import time

import pytest

from tests.support.redis_monitor import Monitor
from tests.support.reporting import report_line
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess, mail_payload, sync_queue, wait_for, worker_env

pytestmark = pytest.mark.redis

Q = "mail-provider-polling"
TAG = "{csp/slowmail}"
PER_SECOND = 2
LANES = 8
WINDOW = 10.0


def test_eight_lanes_waiting_on_a_slow_provider_make_few_script_calls_per_mail(
    redis_url: str, smtp_sink: SmtpSink, pytestconfig: pytest.Config
) -> None:
    """Provider at 120/min (2/s, burst 2), one worker of 8 lanes, 200 jobs: over 10 s the
    provider sees 2/s +- 3 mails, and the worker makes at most 5 provider script calls per
    mail (each of 8 lanes polling on its own made ~10)."""
    sync_queue(redis_url, Q).push_many(mail_payload(f"s{i}@slow.example") for i in range(200))
    provider = {"id": "csp/slowmail", "group": "ns/slow", "perMinute": PER_SECOND * 60}
    env = worker_env(
        redis_url,
        Q,
        smtp_sink.port,
        SENDGROUP_PROVIDER=json.dumps(provider),
        WORKER_CONCURRENCY=LANES,
    )
    monitor = Monitor(redis_url, TAG)
    worker = WorkerProcess(env, "provider-polling")
    try:
        wait_for(lambda: len(smtp_sink.snapshot()) > 0, 30, "the first mail")
        time.sleep(2.0)  # past the start-up burst; every lane is waiting now
        t0 = time.time()
        time.sleep(WINDOW)
        with smtp_sink.lock:
            mails = sum(1 for t, _ in smtp_sink.rcpt_log if t0 <= t < t0 + WINDOW)
        calls = [c for c in monitor.since(t0, t0 + WINDOW) if "EVAL" in c.upper()]
    finally:
        worker.signal(signal.SIGTERM)
        code = worker.wait(15)
        worker.stop()
        monitor.close()
    per_mail = len(calls) / max(mails, 1)
    report_line(
        pytestconfig,
        f"provider polling: {LANES} lanes at {PER_SECOND}/s: {mails} mails in {WINDOW:.0f}s, "
        f"{len(calls)} provider script calls ({per_mail:.1f} per mail)",
    )
    assert code == 0, worker.log()[-2000:]
    assert abs(mails - PER_SECOND * WINDOW) <= 3, mails
    assert per_mail <= 5, (per_mail, calls[:5])
