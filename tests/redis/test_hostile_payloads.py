"""Producer data never wedges the worker or the operator's measurement (issue 16, item 3).

Real redis-server, real worker processes, real SMTP sink. Each hostile payload class (deep JSON
nesting, negative or non-finite ``attempts``, ``pushedAt`` out of range or not a number) must
end in the failed structure once, with a reason, while the good jobs around it are delivered;
and the operator's measurement must return a usable value with such a job at the head.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

from sendgroup_operator.queueio import RedisQueues
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import (
    WORKER_BIN,
    WorkerProcess,
    counts,
    drained,
    mail_payload,
    sync_queue,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.redis

Q = "mail-hostile"


def _deep(depth: int) -> str:
    """A JSON value nested ``depth`` arrays deep (cjson decodes up to 1000 levels, Python's
    json module raises RecursionError well before that in a running program)."""
    return "[" * depth + "]" * depth


def _deep_job(uuid: str, depth: int) -> bytes:
    body = mail_payload(f"{uuid}@x.example", uuid=uuid).decode()
    return body.replace('"data":{', f'"data":{{"nested":{_deep(depth)},', 1).encode()


HOSTILE: dict[str, bytes] = {
    "deep-990": _deep_job("deep-990", 990),
    "deep-200": _deep_job("deep-200", 200),
    "neg-attempts": mail_payload("neg@x.example", uuid="neg-attempts", attempts=-1_000_000),
    "nan-attempts": mail_payload("nan@x.example", uuid="nan-attempts", attempts="nan"),
    "inf-attempts": mail_payload("inf@x.example", uuid="inf-attempts", attempts="inf"),
    "huge-attempts": mail_payload("huge@x.example", uuid="huge-attempts", attempts=1e300),
}


def test_hostile_payloads_fail_once_and_good_ones_are_delivered(
    redis_url: str, smtp_sink: SmtpSink
) -> None:
    q = sync_queue(redis_url, Q)
    good = [mail_payload(f"good{i}@x.example", uuid=f"good-{i}") for i in range(20)]
    mixed: list[bytes] = []
    for i, payload in enumerate(HOSTILE.values()):
        mixed += [payload, *good[i * 3 : i * 3 + 3]]
    mixed += good[len(HOSTILE) * 3 :]
    # the negative-attempts job must also be refused when its first try fails temporarily
    smtp_sink.script("neg@x.example", "451 4.7.1 later")
    q.push_many(mixed)
    worker = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port, WORKER_CONCURRENCY=2))
    try:
        wait_for(drained(q), 30, "the queue drained")
        time.sleep(1.0)  # a job coming back from an expired reservation would show now
        stats = q.measure()
        page = q.failed_list(0, 100)
    finally:
        worker.stop()
    log = worker.log()
    assert "unexpected error" not in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]
    assert counts(stats) == (0, 0, 0, len(HOSTILE)), log[-3000:]
    failed = {j.uuid: j for j in page.jobs}
    assert set(failed) == set(HOSTILE), sorted(failed)
    for uuid, job in failed.items():
        # a finite, huge attempts is a valid count: past every tries limit, failed as such
        want = "MaxAttemptsExceededException" if uuid == "huge-attempts" else "InvalidPayload"
        assert job.exception == want, (uuid, job.exception, job.message)
        assert job.message, uuid
    assert stats.failed_total == len(HOSTILE)
    assert set(smtp_sink.per_job()) == {f"good-{i}" for i in range(20)}
    assert set(smtp_sink.per_job().values()) == {1}


BAD_HEADS: dict[str, str] = {
    "pushedAt far future": json.dumps({"uuid": "a", "attempts": 0, "pushedAt": 1e20}),
    "pushedAt huge string": json.dumps({"uuid": "a", "attempts": 0, "pushedAt": "9e99"}),
    "pushedAt 1e999": '{"uuid":"a","attempts":0,"pushedAt":1e999}',
    "pushedAt NaN": '{"uuid":"a","attempts":0,"pushedAt":NaN}',
    "pushedAt nan string": json.dumps({"uuid": "a", "attempts": 0, "pushedAt": "nan"}),
    "pushedAt negative": json.dumps({"uuid": "a", "attempts": 0, "pushedAt": -1e15}),
    "pushedAt list": json.dumps({"uuid": "a", "attempts": 0, "pushedAt": [1]}),
    "pushedAt object": json.dumps({"uuid": "a", "attempts": 0, "pushedAt": {"x": 1}}),
    "deep nesting": '{"uuid":"a","attempts":0,"pushedAt":1,"d":' + _deep(100_000) + "}",
    "not UTF-8": '{"uuid":"a","pushedAt":"\xff"}',
    "not JSON": "garbage",
}


@pytest.mark.parametrize("case", sorted(BAD_HEADS))
def test_measurement_survives_a_bad_head_job(
    case: str, redis_url: str, redis_client: redis.Redis
) -> None:
    keys = QueueKeys("mail-badhead")
    raw = BAD_HEADS[case]
    redis_client.rpush(keys.ready, raw.encode("latin-1") if case == "not UTF-8" else raw)
    redis_client.rpush(keys.ready, json.dumps({"uuid": "b", "attempts": 0, "pushedAt": 5}))

    async def go() -> None:
        queues = RedisQueues()
        try:
            m = await queues.measure(redis_url, "mail-badhead")
        finally:
            await queues.close()
        assert m.ready == 2
        # what the planner does with it (status.queue.oldestJobPushedAt) must work
        if m.oldest_pushed_at is not None:
            datetime.fromtimestamp(m.oldest_pushed_at, tz=UTC)
            assert m.oldest_pushed_at >= 0

    asyncio.run(go())


def _cli(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(WORKER_BIN), *args, "--queue", "mail-badfailed"],
        env={**os.environ, "REDIS_URL": redis_url},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_failed_list_survives_malformed_records(redis_url: str, redis_client: redis.Redis) -> None:
    """Issue 16 item 5: one malformed record in the failed hash crashed ``failed list``."""
    q = sync_queue(redis_url, "mail-badfailed")
    keys = q.keys
    good = json.dumps(
        {
            "uuid": "good",
            "payload": mail_payload("a@x.example", uuid="good").decode(),
            "exception": "SmtpPermanentFailure",
            "message": "550 no",
            "failedAt": 1796000000,
        }
    )
    records = {
        "good": good,
        "not-json": "{{{",
        "a-list": "[1, 2]",
        "deep": "[" * 100_000 + "]" * 100_000,
        "bad-time": json.dumps({"uuid": "bad-time", "payload": "{}", "failedAt": 1e300}),
        "odd-data": json.dumps(
            {"uuid": "odd-data", "payload": '{"uuid":"odd-data","data":"text"}', "failedAt": 5}
        ),
    }
    for i, (rid, rec) in enumerate(records.items()):
        redis_client.hset(keys.failed_jobs, rid, rec)
        redis_client.zadd(keys.failed, {rid: 1796000000 + i})
    listed = _cli(redis_url, "failed", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {json.loads(line)["uuid"]: json.loads(line) for line in listed.stdout.splitlines()}
    assert set(rows) == set(records)
    assert rows["good"]["to"] == "a@x.example"
    assert rows["not-json"]["exception"] == "UnreadableRecord"
    assert rows["deep"]["exception"] == "UnreadableRecord"
    plain = _cli(redis_url, "failed", "list")
    assert plain.returncode == 0 and "6 of 6 failed jobs" in plain.stderr, plain.stderr
    shown = _cli(redis_url, "failed", "show", "not-json")
    assert shown.returncode == 0 and "UnreadableRecord" in shown.stdout, shown.stderr
    forgot = _cli(redis_url, "failed", "forget", "--all")
    assert forgot.returncode == 0, forgot.stderr
    assert q.failed_list().total == 0


def test_redis_out_of_memory_is_logged_once_and_nothing_is_lost(smtp_sink: SmtpSink) -> None:
    """Issue 16 item 5: a Redis at maxmemory made every lane log a traceback every second."""
    server = RedisServer().start()
    try:
        client = server.client()
        q = sync_queue(server.url, "mail-oom")
        q.push_many([mail_payload(f"oom{i}@x.example", uuid=f"oom-{i}") for i in range(20)])
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory-policy", "noeviction")
        client.config_set("maxmemory", str(max(1, used // 2)))
        worker = WorkerProcess(
            # the shared rate limit's script writes first thing: Redis refuses it at maxmemory
            worker_env(
                server.url, "mail-oom", smtp_sink.port, WORKER_CONCURRENCY=4, RATE_PER_MINUTE=6000
            )
        )
        try:
            wait_for(lambda: "out of memory" in worker.log(), 20, "the OOM logged")
            time.sleep(4)  # four lanes, several retries each
            assert smtp_sink.snapshot() == []
            client.config_set("maxmemory", "0")
            wait_for(drained(q), 30, "the queue drained once Redis has room")
        finally:
            worker.stop()
        log = worker.log()
        assert log.count("out of memory") == 1, log[-3000:]
        assert "Traceback" not in log and "unexpected error" not in log, log[-3000:]
        assert set(smtp_sink.per_job()) == {f"oom-{i}" for i in range(20)}
        assert set(smtp_sink.per_job().values()) == {1}
    finally:
        server.cleanup()


def test_push_interrupted_by_redis_oom_says_how_far_it_got_and_resumes(tmp_path: Path) -> None:
    """Issue 16 item 5: ``push`` stopped by a full Redis must say how many rows are queued
    and resume from there with nothing lost and nothing twice."""
    server = RedisServer().start()
    try:
        client = server.client()
        rows = 3000
        csv = tmp_path / "rows.csv"
        body = "x" * 1000
        csv.write_text(
            "to,from,subject,text\n"
            + "".join(f"r{i}@x.example,s@x.example,hi,{body}\n" for i in range(rows))
        )
        used = int(client.info("memory")["used_memory"])
        client.config_set("maxmemory", str(used + 1_500_000))  # room for ~1000 rows
        env = {**os.environ, "REDIS_URL": server.url}
        args = [str(WORKER_BIN), "push", str(csv), "--queue", "mail-push", "--batch-size", "250"]
        first = subprocess.run(args, env=env, capture_output=True, text=True, timeout=120)
        assert first.returncode == 1, first.stdout + first.stderr
        assert "Traceback" not in first.stderr and "out of memory" in first.stderr, first.stderr
        match = re.search(r"resume with --skip (\d+)", first.stderr)
        assert match, first.stderr
        done = int(match.group(1))
        keys = QueueKeys("mail-push")
        assert 0 < done < rows and client.llen(keys.ready) == done
        client.config_set("maxmemory", "0")
        second = subprocess.run(
            [*args, "--skip", str(done)], env=env, capture_output=True, text=True, timeout=120
        )
        assert second.returncode == 0, second.stderr
        assert client.llen(keys.ready) == rows
        recipients = [json.loads(p)["data"]["to"] for p in client.lrange(keys.ready, 0, -1)]
        assert recipients == [f"r{i}@x.example" for i in range(rows)]
    finally:
        server.cleanup()


def test_a_huge_head_job_is_measured_without_decoding_it(
    redis_url: str, redis_client: redis.Redis
) -> None:
    """Review finding (issue 16): the measurement decoded the ready list's head job as JSON
    inside Redis on every pass, with no size limit: a 30 MB job pushed by one tenant's producer
    held the shared Redis for every tenant at each of its group's passes (363 ms of script per
    pass measured here; 135 ms without the decode, of which Redis' own copy of the element
    into Lua is most). A head over 64 KiB is now read from its last 4 KiB, where Laravel's
    payload ends with pushedAt/createdAt. The head below is not JSON at all up front: a
    decode would find no pushedAt."""
    keys = QueueKeys("mail-hugehead")
    raw = "not json " + "x" * 30_000_000 + ', "pushedAt": "1700000000.25"}'
    redis_client.rpush(keys.ready, raw)
    redis_client.rpush(keys.ready, "y" * 70_000)  # big, nothing to read: no pushedAt

    async def go() -> tuple[int, float | None]:
        queues = RedisQueues()
        try:
            m = await queues.measure(redis_url, "mail-hugehead")
        finally:
            await queues.close()
        return m.ready, m.oldest_pushed_at

    try:
        assert asyncio.run(go()) == (2, 1700000000.25)
        redis_client.lpop(keys.ready)
        assert asyncio.run(go()) == (1, None)
    finally:
        redis_client.delete(keys.ready)
