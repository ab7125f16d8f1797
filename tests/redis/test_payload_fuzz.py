"""Fuzz (issue 16, "Done when"): seeded, generated payloads of every hostile class mixed with
good ones, drained by real worker processes while the operator's measurement runs against the
same queue. Nothing is lost, nothing is sent to an address the job did not name, every bad
job is in failed exactly once, and the measurement never raises."""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from typing import Any

import pytest

from sendgroup_operator.queueio import RedisQueues
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

Q = "mail-fuzz"
SEED = 20261201


def _text(rng: random.Random, n: int) -> str:
    alphabet = "abc xyz\u00e9\u4e2d\U0001f600\t<>&\"'\\/{}[]$"
    return "".join(rng.choice(alphabet) for _ in range(n))


def _envelope(uuid: str, data: dict[str, Any], **top: Any) -> bytes:
    payload = json.loads(mail_payload("x@x.example", uuid=uuid))
    payload["data"] = data
    payload.update(top)
    return json.dumps(payload).encode()


def _generate(rng: random.Random, n: int) -> tuple[list[bytes], dict[str, str], dict[str, str]]:
    """(payloads, uuid -> expected failed exception, uuid -> the one address it may reach)."""
    payloads: list[bytes] = []
    bad: dict[str, str] = {}
    good: dict[str, str] = {}
    for i in range(n):
        uuid = f"fz-{i}"
        to = f"r{i}@fuzz.example"
        kind = rng.choice(
            ["good", "good", "good", "inject", "deep", "attempts", "garbage", "handler", "pushed"]
        )
        data: dict[str, Any] = {
            "to": to,
            "from": "s@fuzz.example",
            "subject": _text(rng, rng.randint(0, 40)).replace("\r", "").replace("\n", ""),
            "text": _text(rng, rng.randint(1, 400)),
        }
        if kind in ("good", "pushed"):
            extra = {"pushedAt": rng.choice([1e20, "nan", -5, [1], "9e99", None])}
            payloads.append(_envelope(uuid, data, **(extra if kind == "pushed" else {})))
            good[uuid] = to
        elif kind == "inject":
            field = rng.choice(["to", "cc", "bcc", "from"])
            data[field] = rng.choice(
                [
                    f"{to}\r\nRCPT TO:<evil{i}@evil.example>",
                    f"{to}, evil{i}@evil.example",
                    f"evil{i}@evil.example <{to}>",
                    {"address": to, "name": f"A\nBcc: evil{i}@evil.example"},
                    f"{to}\n",
                ]
            )
            payloads.append(_envelope(uuid, data))
            bad[uuid] = "InvalidMailData"
        elif kind == "deep":
            # up to cjson's own limit (1000) the queue script reads the uuid and the worker
            # refuses the job by name; deeper ones are refused by the script unnamed (garbage)
            depth = rng.randint(65, 990)
            data["nested"] = None
            raw = _envelope(uuid, data).decode()
            payloads.append(
                raw.replace('"nested": null', '"nested": ' + "[" * depth + "]" * depth).encode()
            )
            bad[uuid] = "InvalidPayload"
        elif kind == "attempts":
            value = rng.choice([-1, -1_000_000, "nan", "inf", "-inf", "1e999"])
            payloads.append(_envelope(uuid, data, attempts=value))
            bad[uuid] = "InvalidPayload"
        elif kind == "handler":
            payloads.append(_envelope(uuid, data, job=_text(rng, 8)))
            bad[uuid] = "UnknownHandler"
        else:  # garbage without a readable uuid: counted, not named
            deep = b'{"uuid":"x","attempts":0,"d":' + b"[" * 5000 + b"]" * 5000 + b"}"
            payloads.append(
                rng.choice([b"{", b"[1,2]", b"null", b'{"attempts":0}', b"\xff\xfe", deep])
            )
    return payloads, bad, good


def test_generated_payloads_nothing_lost_nothing_misdirected(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    rng = random.Random(SEED)
    payloads, bad, good = _generate(rng, 300)
    garbage = len(payloads) - len(bad) - len(good)
    q = sync_queue(redis_url, Q)
    q.push_many(payloads)

    errors: list[BaseException] = []
    stop = threading.Event()

    def measure_loop() -> None:
        async def go() -> None:
            queues = RedisQueues()
            try:
                while not stop.is_set():
                    try:
                        await queues.measure(redis_url, Q)
                    except BaseException as exc:  # any error fails the test
                        errors.append(exc)
                        return
                    await asyncio.sleep(0.02)
            finally:
                await queues.close()

        asyncio.run(go())

    measurer = threading.Thread(target=measure_loop, daemon=True)
    measurer.start()
    workers = [
        WorkerProcess(worker_env(redis_url, Q, smtp_sink.port, WORKER_CONCURRENCY=3))
        for _ in range(2)
    ]
    try:
        wait_for(drained(q), 60, "the fuzzed queue drained")
        time.sleep(1.0)
    finally:
        stop.set()
        for w in workers:
            w.stop()
        measurer.join(10)
    assert not errors, errors
    for w in workers:
        assert "Traceback" not in w.log() and "unexpected error" not in w.log(), w.log()[-3000:]

    stats = q.measure()
    page = q.failed_list(0, 10_000)
    failed_named = {j.uuid: j.exception for j in page.jobs if j.uuid.startswith("fz-")}
    assert set(failed_named) == set(bad)
    # an unknown job name that looks like a PHP class is named as such by the worker
    unknown = {"UnknownHandler", "LaravelJobNotSupported"}
    for uuid, exception in failed_named.items():
        assert exception == bad[uuid] or (bad[uuid] == "UnknownHandler" and exception in unknown)
    assert page.total == len(bad) + garbage == stats.failed_total
    # every good job delivered exactly once, to the one address it named
    per_job = smtp_sink.per_job()
    assert set(per_job) == set(good) and set(per_job.values()) == {1}
    by_job = {r.job: r.recipient for r in smtp_sink.snapshot()}
    assert by_job == good
    rcpts = {address for _, address in smtp_sink.rcpt_log}
    assert rcpts <= set(good.values()), sorted(rcpts - set(good.values()))[:5]
    assert stats.total == 0 and stats.delivered == len(good)
