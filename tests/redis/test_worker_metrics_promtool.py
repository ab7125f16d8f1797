"""The real worker's /metrics (``sendgroup-worker work`` against a real redis-server and a real
SMTP server) after it delivered, retried and failed mail: ``promtool check metrics`` accepts
it, the counters say what happened, and every worker metric the shipped dashboard and alert
rules use is in it."""

from __future__ import annotations

import urllib.request

import pytest

from tests.support.observability import check_metrics, missing_from, promtool_bin
from tests.support.redis_server import free_port
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import (
    WorkerProcess,
    drained,
    mail_payload,
    sync_queue,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.redis

Q = "mail-metrics"


def _value(text: str, sample: str) -> float:
    for line in text.splitlines():
        if line.startswith(sample + " "):
            return float(line.split()[-1])
    raise AssertionError(f"{sample} not in /metrics:\n{text}")


def test_real_worker_metrics_pass_promtool_and_cover_dashboard_and_alerts(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    promtool_bin()  # fail first, with the reason, when promtool is missing
    q = sync_queue(redis_url, Q)
    smtp_sink.script("gone@x.example", "550 5.1.1 no such user")
    smtp_sink.script("later@x.example", "451 4.7.1 greylisted", "250 OK")
    q.push_many(
        [mail_payload(f"r{i}@x.example") for i in range(5)]
        + [mail_payload("gone@x.example"), mail_payload("later@x.example")]
    )
    port = free_port()
    worker = WorkerProcess(
        worker_env(
            redis_url,
            Q,
            smtp_sink.port,
            METRICS_PORT=port,
            METRICS_HOST="127.0.0.1",
            WORKER_BACKOFF="1",
            RATE_PER_MINUTE=6000,
            SENDGROUP_NAME="metrics",
        )
    )
    try:
        wait_for(drained(q), 30, "all jobs settled")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        worker.stop()
    check_metrics(text)
    group = 'queue="mail-metrics",sendgroup="metrics"'  # sendgroup: SENDGROUP_NAME
    jobs = 'sendgroup_worker_jobs_total{{outcome="{}",' + group + "}}"
    replies = (
        'sendgroup_worker_smtp_replies_total{{queue="mail-metrics",reply_class="{}",'
        'sendgroup="metrics"}}'
    )
    assert _value(text, jobs.format("delivered")) == 6
    assert _value(text, jobs.format("failed")) == 1
    assert _value(text, jobs.format("released")) == 1
    assert _value(text, jobs.format("lost")) == 0  # present at 0 from the start
    assert _value(text, replies.format("2xx")) == 6
    assert _value(text, replies.format("4xx")) == 1
    assert _value(text, replies.format("5xx")) == 1
    assert _value(text, replies.format("connection")) == 0
    assert _value(text, f"sendgroup_worker_send_seconds_count{{{group}}}") == 8
    assert _value(text, f"sendgroup_worker_rate_limit_per_minute{{{group}}}") == 6000
    assert _value(text, f"sendgroup_worker_queue_reachable{{{group}}}") == 1
    assert _value(text, f"sendgroup_worker_redis_up{{{group}}}") == 1  # deprecated name
    assert "redis://" not in text and "x.example" not in text
    missing = missing_from(text, "sendgroup_worker_")
    assert not missing, f"used by the dashboard/alerts but not in the worker's /metrics: {missing}"
