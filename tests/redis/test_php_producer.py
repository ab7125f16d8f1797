"""The PHP producer (``examples/php/SendGroupProducer.php``) run by real PHP (php-cli +
phpredis) against a real Redis, drained by our real worker to a real SMTP sink: what a Laravel
shop checks: every mail arrived once, under the uuid PHP returned, with its subject intact;
the envelope holds what both kinds of worker need (uuid, attempts 0, maxTries, pushedAt and
createdAt, one notify token per ready job); bad input writes nothing."""

from __future__ import annotations

import email
import email.policy
import json
import signal
import time

import pytest
import redis

from sendgroup_worker.queue.client import Queue
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.php import jsonl, run_php
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess, drained, wait_for, worker_env

pytestmark = pytest.mark.redis

PREFIX = "laravel_database_"
Q = "{mail-php}"


F = "Shop <news@shop.example>"


def _mail(to: str, **extra: object) -> dict[str, object]:
    return {"to": to, "from": "Shop <news@shop.example>", "text": f"Hello {to}", **extra}


def test_php_pushed_mail_is_delivered_once_by_our_worker(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    rows = [_mail(f"r{i}@x.example", subject=f"Grüße / Nº {i} 🎧") for i in range(40)]
    rows.append(_mail("later@x.example", subject="delayed", delay=1))
    rows.append(_mail("html@x.example", html="<p>hi</p>", maxTries=5))
    before = time.time()
    proc = run_php("push.php", redis_url, Q, PREFIX, stdin=jsonl(rows))
    uuids = proc.stdout.split()
    assert len(uuids) == len(set(uuids)) == 42

    keys = QueueKeys(Q, prefix=PREFIX)
    ready = [json.loads(p) for p in redis_client.lrange(keys.ready, 0, -1)]
    delayed = redis_client.zrange(keys.delayed, 0, -1, withscores=True)
    assert len(ready) == 41 and len(delayed) == 1
    assert redis_client.llen(keys.notify) == 41  # one token per ready job, none for delayed
    assert int(before) + 1 <= delayed[0][1] <= time.time() + 1  # now + 1 s
    for job in ready:
        assert job["job"] == "sendgroups.SendMail" and job["attempts"] == 0
        assert job["id"] == job["uuid"] and job["uuid"] in uuids
        assert isinstance(job["pushedAt"], str) and isinstance(job["createdAt"], int)
        assert before - 1 <= float(job["pushedAt"]) <= time.time() + 1
    assert {j["maxTries"] for j in ready} == {3, 5}  # always written; the row's own wins
    assert redis_client.keys("queues:*") == []  # nothing outside the prefix

    q = Queue(redis_client, keys, retry_after=3)
    assert q.measure().oldest_job_age_seconds is not None
    w = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port, SENDGROUP_KEY_PREFIX=PREFIX))
    try:
        wait_for(drained(q), 30, "the PHP-pushed queue drained")
    finally:
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
        w.stop()
    received = smtp_sink.snapshot()
    assert sorted(r.job for r in received) == sorted(uuids)  # each job exactly once
    assert sorted(smtp_sink.per_recipient().values()) == [1] * 42
    by_to = {r.recipient: email.message_from_bytes(r.data, policy=email.policy.default)
             for r in received}  # fmt: skip
    assert str(by_to["r7@x.example"]["Subject"]) == "Grüße / Nº 7 🎧"
    assert by_to["r7@x.example"]["From"] == "Shop <news@shop.example>"
    html = by_to["html@x.example"].get_body(preferencelist=("html",))
    assert html is not None and "<p>hi</p>" in html.get_content()
    assert q.measure().failed == 0


def test_php_max_tries_is_what_our_worker_allows(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    """The payload's maxTries (written by PHP) wins over the worker's WORKER_TRIES, as in
    Laravel: a job with maxTries 1 gets one attempt on a greylisting provider, one with 3
    gets three."""
    smtp_sink.script("one@x.example", "451 4.7.1 greylisted")
    smtp_sink.script("three@x.example", "451 4.7.1 greylisted")
    rows = [_mail("one@x.example", maxTries=1), _mail("three@x.example")]
    one, three = run_php("push.php", redis_url, Q, "", stdin=jsonl(rows)).stdout.split()
    q = Queue(redis_client, QueueKeys(Q), retry_after=3)
    env = worker_env(redis_url, Q, smtp_sink.port, WORKER_TRIES=10, WORKER_BACKOFF="0.2")
    w = WorkerProcess(env)
    try:
        wait_for(drained(q), 30, "both jobs failed")
    finally:
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
        w.stop()
    assert smtp_sink.attempts["one@x.example"] == 1
    assert smtp_sink.attempts["three@x.example"] == 3
    failed_one, failed_three = q.failed_get(one), q.failed_get(three)
    assert failed_one is not None and "attempt 1, no tries left" in failed_one.message
    assert failed_three is not None and "attempt 3, no tries left" in failed_three.message


@pytest.mark.parametrize(
    ("row", "reason"),
    [
        ({"to": "not-an-address", "text": "x"}, "line 2: to: 'not-an-address' is not an e-mail"),
        ({"to": "a@x.example", "from": F},
         "line 2: a mail needs a body: 'text', 'html' or 'template'"),
        ({"to": "a@x.example", "from": F, "text": "x", "subject": "a\r\nBcc: b@x.example"},
         "line 2: subject: a header value must be one line of text"),
        ({"to": "a@x.example", "text": "x", "colour": "red"},
         "line 2: unknown mail field(s): colour"),
        ({"to": "a@x.example", "from": F, "text": "x", "maxTries": 0},
         "line 2: maxTries must be an int >= 1"),
        # issue 18 review: what the worker refuses, the producer refuses before pushing
        ({"to": "a@x.example", "text": "x"}, "line 2: 'from': exactly one sender is required"),
        ({"to": "a@x.example", "from": [F, "b@x.example"], "text": "x"},
         "line 2: 'from': exactly one sender is required"),
        ({"to": "a@x.example", "from": F, "text": "x", "headers": {"From": "ceo@bank.example"}},
         "line 2: headers.From: the worker writes it"),
        ({"to": "a@x.example", "from": F, "text": "x", "headers": {"X-A": "1", "x-a": "2"}},
         "line 2: headers.x-a: given twice"),
        ({"to": "a@x.example", "from": F, "text": "x", "headers": {"X-A\r\nBcc": "1"}},
         "line 2: headers: 'X-A"),
        ({"to": "a@x.example", "from": F, "text": "x", "headers": {"X-A\n": "1"}},
         "line 2: headers: 'X-A"),
        ({"to": "a@x.example", "from": F, "text": "x", "headers": ["List-Unsubscribe: <x>"]},
         "line 2: headers must be an object"),
        ({"to": "a@x.example", "from": F, "text": "x", "delay": -5},
         "line 2: delay must be whole seconds >= 0, got -5"),
        ({"to": "a@x.example", "from": F, "text": "x", "delay": "abc"},
         "line 2: delay must be whole seconds >= 0, got 'abc'"),
    ],
)  # fmt: skip
def test_bad_rows_push_nothing(
    redis_url: str, redis_client: redis.Redis, row: dict[str, object], reason: str
) -> None:
    stdin = jsonl([_mail("good@x.example"), row])
    proc = run_php("push.php", redis_url, Q, PREFIX, stdin=stdin, check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith(f"push.php: {reason}")
    assert proc.stderr.rstrip().endswith("nothing was pushed")
    assert redis_client.keys("*") == []


def test_a_delayed_row_before_a_bad_one_pushes_nothing(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Review finding (issue 18): a row with a good delay, then one with a negative delay:
    push.php said "nothing was pushed" while the first was already in the delayed set (delays
    were checked only when pushing). A line that is not JSON names its line."""
    stdin = jsonl([_mail("a@x.example", delay=60), _mail("b@x.example", delay=-5)])
    proc = run_php("push.php", redis_url, Q, PREFIX, stdin=stdin, check=False)
    assert proc.returncode == 1 and "nothing was pushed" in proc.stderr
    assert redis_client.keys("*") == []
    proc = run_php(
        "push.php",
        redis_url,
        Q,
        PREFIX,
        stdin=jsonl([_mail("a@x.example")]) + "{oops\n",
        check=False,
    )
    assert proc.returncode == 1 and proc.stderr.startswith("push.php: line 2: not JSON")
    assert redis_client.keys("*") == []


def test_the_php_producer_and_the_worker_refuse_the_same_headers() -> None:
    """The producer's list of header fields the worker writes is the worker's."""
    import re
    from pathlib import Path

    from sendgroup_worker import smtp

    source = (Path(__file__).parents[2] / "examples/php/SendGroupProducer.php").read_text()
    block = re.search(r"OWN_HEADERS = \[(.*?)\];", source, re.S)
    assert block is not None
    assert set(re.findall(r"'([^']+)'", block[1])) == set(smtp._OWN_HEADERS)
