"""Mail data is validated, never rewritten (issue 16, item 4): real worker processes, real
Redis, a real SMTP sink that records every envelope recipient.

A line break or a second address inside ``to``/``from``/``cc``/``bcc`` or a display name makes
the job fail as ``InvalidMailData`` and nothing reaches any address; the caps on message size
and recipients per job hold; the group's rate limit counts recipients, not jobs.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

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

Q = "mail-validate"


def _job(uuid: str, **data: Any) -> bytes:
    payload = json.loads(mail_payload("placeholder@x.example", uuid=uuid))
    payload["data"].update(data)
    return json.dumps(payload).encode()


#: uuid -> data fields; every one must fail as InvalidMailData and send nothing.
HOSTILE: dict[str, dict[str, Any]] = {
    "crlf-rcpt": {"to": "victim@x.example\r\nRCPT TO:<evil@y.example>"},
    "lf-rcpt": {"to": "victim@x.example\nRCPT TO:<evil@y.example>"},
    "trailing-crlf": {"to": "victim@x.example\r\n"},
    "two-in-to": {"to": "victim@x.example, evil@y.example"},
    "two-in-list-item": {"to": ["ok@x.example", "a@x.example,evil@y.example"]},
    "angle-second": {"to": "victim@x.example <evil@y.example>"},
    "name-has-address": {"to": "evil@y.example <victim@x.example>"},
    "cc-crlf": {"to": "ok@x.example", "cc": "c@x.example\r\nBcc: evil@y.example"},
    "bcc-two": {"to": "ok@x.example", "bcc": "b@x.example;evil@y.example"},
    "from-crlf": {"to": "ok@x.example", "from": "s@x.example\r\nRCPT TO:<evil@y.example>"},
    "from-two": {"to": "ok@x.example", "from": "s@x.example, evil@y.example"},
    "name-crlf": {
        "to": {"address": "ok@x.example", "name": "Ann\r\nBcc: evil@y.example"},
    },
    "name-angle": {"to": {"address": "ok@x.example", "name": "Ann <evil@y.example>"}},
    "unquoted-comma-name": {"to": "Doe, John <john@x.example>"},
    "too-many-recipients": {"to": [f"r{i}@x.example" for i in range(11)]},
    "too-big": {"to": "big@x.example", "text": "x" * 200_000},
}

#: uuid -> (data fields, the envelope recipients the sink must see, exactly).
GOOD: dict[str, tuple[dict[str, Any], set[str]]] = {
    "plain": ({"to": "ann@x.example"}, {"ann@x.example"}),
    "named": ({"to": "Ann Example <ann2@x.example>"}, {"ann2@x.example"}),
    "quoted-comma": ({"to": '"Doe, Jane" <jane@x.example>'}, {"jane@x.example"}),
    "object-comma": (
        {"to": {"address": "john@x.example", "name": "Doe, John"}},
        {"john@x.example"},
    ),
    "cc-bcc": (
        {"to": "t@x.example", "cc": ["c@x.example"], "bcc": "b@x.example"},
        {"t@x.example", "c@x.example", "b@x.example"},
    ),
    "ten": (
        {"to": [f"ten{i}@x.example" for i in range(10)]},
        {f"ten{i}@x.example" for i in range(10)},
    ),
}


def test_bad_addresses_fail_as_invalid_mail_data_and_reach_no_one(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q)
    q.push_many(
        [_job(u, **d) for u, d in HOSTILE.items()] + [_job(u, **d) for u, (d, _) in GOOD.items()]
    )
    env = worker_env(redis_url, Q, smtp_sink.port, MAIL_MAX_RECIPIENTS=10, MAIL_MAX_BYTES=100_000)
    worker = WorkerProcess(env)
    try:
        wait_for(drained(q), 30, "the queue drained")
        page = q.failed_list(0, 100)
    finally:
        worker.stop()
    failed = {j.uuid: j for j in page.jobs}
    assert set(failed) == set(HOSTILE), worker.log()[-3000:]
    for uuid, job in failed.items():
        assert job.exception == "InvalidMailData", (uuid, job.exception, job.message)
    received = smtp_sink.snapshot()
    per_job: dict[str, set[str]] = {}
    for r in received:
        per_job.setdefault(r.job, set()).add(r.recipient)
    assert per_job == {u: want for u, (_, want) in GOOD.items()}
    rcpts = {address for _, address in smtp_sink.rcpt_log}
    assert not any("evil" in a for a in rcpts), rcpts


@pytest.mark.parametrize("data_delay", [0.0, 0.5], ids=["fast-relay", "slow-relay"])
def test_the_rate_limit_counts_recipients(
    redis_url: str, smtp_sink: SmtpSink, data_delay: float
) -> None:
    """600/min (10/s), burst 10: 5 jobs of 20 recipients are 100 recipients, at least ~9 s;
    counting jobs, they would all go within the first burst.

    With the relay slow to answer DATA (0.5 s), each mail is in flight long enough for the
    other lanes to ask for slots meanwhile: they must already see its recipients (charged
    before the send). With the charge after the send, mails went in pairs and the fifth
    ~5 s after the first."""
    q = sync_queue(redis_url, Q)
    recipients = [[f"m{j}-{i}@x.example" for i in range(20)] for j in range(5)]
    if data_delay:
        for rcpt in (r for mail in recipients for r in mail):
            smtp_sink.script(rcpt, data_delay=data_delay)
    q.push_many([_job(f"many-{j}", to=to) for j, to in enumerate(recipients)])
    env = worker_env(redis_url, Q, smtp_sink.port, RATE_PER_MINUTE=600, RATE_BURST=10)
    worker = WorkerProcess(env)
    try:
        wait_for(lambda: len(smtp_sink.snapshot()) >= 1, 15, "the first mail")
        wait_for(lambda: len(smtp_sink.snapshot()) >= 100, 30, "100 recipients served")
    finally:
        worker.stop()
    times = sorted(r.at for r in smtp_sink.snapshot())
    # job 1 takes the burst and leaves a debt of 19 slots; jobs 2..5 each wait ~2 s: the last
    # job starts about 8 s (4 x 20 slots at 10/s, minus the burst) after the first
    assert times[-1] - times[0] >= 6.5, times[-1] - times[0]
    # and the burst holds with 4 lanes: the first second carries one mail (its 20 recipients,
    # the burst and its debt), not one per lane (80 when each lane's permit came before any
    # recipients were charged)
    first_second = sum(1 for t in times if t - times[0] < 1.0)
    assert first_second <= 20, first_second
    assert time.time() - times[0] < 30


def test_suppressed_recipients_give_their_rate_slots_back(
    redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    """60/min (1/s), burst 1: a mail to 20 recipients, 19 of them suppressed, goes to one;
    its other 19 slots, charged before the send, come back after it, so the next two mails
    follow at the rate's pace (~1 s each), not 19 s later."""
    to = [f"s{i}@x.example" for i in range(20)]
    redis_client.sadd("sendgroups:default:suppressed", *to[1:])
    q = sync_queue(redis_url, Q)
    q.push_many(
        [_job("mostly-suppressed", to=to), _job("next-1", to="n1@x.example"),
         _job("next-2", to="n2@x.example")]
    )  # fmt: skip
    env = worker_env(
        redis_url, Q, smtp_sink.port, RATE_PER_MINUTE=60, RATE_BURST=1, WORKER_CONCURRENCY=1
    )
    worker = WorkerProcess(env)
    try:
        wait_for(lambda: len(smtp_sink.snapshot()) >= 3, 30, "three recipients served")
    finally:
        worker.stop()
    got = smtp_sink.snapshot()
    assert sorted(r.recipient for r in got) == ["n1@x.example", "n2@x.example", "s0@x.example"]
    times = sorted(r.at for r in got)
    assert times[-1] - times[0] < 4.0, times[-1] - times[0]  # 19 slots of debt: >= 19 s
    assert times[-1] - times[0] >= 1.5, times[-1] - times[0]  # still the rate's pace
