"""A Redis URL from a Secret, its password written without percent-encoding (``/``, ``#``,
``?`` and ``@`` inside), works everywhere and never leaks (issue 16, item 5).

Real redis-server with ``requirepass``; the real worker process, the operator's measurement,
and the ``stats`` / ``purge`` console commands. Every error message and log line is searched
for any piece of the password.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Iterator

import pytest
import redis

from sendgroup_operator.queueio import QueueUnavailable, RedisQueues
from tests.support.redis_server import RedisServer, free_port
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import (
    WORKER_BIN,
    WorkerProcess,
    mail_payload,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.redis

PASSWORD = "s3/cr#t?pa@ss:w0rd"
#: pieces a wrong split would put into a host, a port, a path or a query
PIECES = ("s3/cr", "cr#t", "t?pa", "pa@ss", "ss:w0rd", "w0rd", "s3", "cr#", "?pa")


def _leaks(text: str) -> list[str]:
    return [p for p in PIECES if p in text]


@pytest.fixture(scope="module")
def locked_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    server.client().config_set("requirepass", PASSWORD)
    try:
        yield server
    finally:
        server.cleanup()


def _url(server: RedisServer, port: int | None = None) -> str:
    return f"redis://:{PASSWORD}@127.0.0.1:{port or server.port}/0"


def test_worker_delivers_with_the_password_and_logs_no_piece_of_it(
    locked_redis: RedisServer, smtp_sink: SmtpSink
) -> None:
    admin = redis.Redis(host="127.0.0.1", port=locked_redis.port, password=PASSWORD)
    admin.rpush("queues:mail-secret", mail_payload("secret@x.example", uuid="secret-1"))
    worker = WorkerProcess(worker_env(_url(locked_redis), "mail-secret", smtp_sink.port))
    try:
        wait_for(lambda: len(smtp_sink.snapshot()) >= 1, 20, "the mail")
    finally:
        worker.stop()
    assert smtp_sink.per_job() == {"secret-1": 1}
    assert not _leaks(worker.log())
    # a wrong port: the worker keeps retrying, and says where without the password
    worker = WorkerProcess(worker_env(_url(locked_redis, free_port()), "mail-secret", 1))
    try:
        wait_for(lambda: "unreachable" in worker.log(), 20, "the outage logged")
    finally:
        worker.stop()
    assert not _leaks(worker.log()), worker.log()[-2000:]


def test_operator_measurement_with_the_password(locked_redis: RedisServer) -> None:
    async def go() -> None:
        queues = RedisQueues()
        try:
            m = await queues.measure(_url(locked_redis), "mail-secret-m")
            assert m.total == 0
            with pytest.raises(QueueUnavailable) as err:
                await queues.measure(_url(locked_redis, free_port()), "mail-secret-m")
            assert "127.0.0.1" in str(err.value) and not _leaks(str(err.value))
            # an unusable URL: a message naming the part, never its value
            with pytest.raises(QueueUnavailable) as err:
                await queues.measure(f"redis://:{PASSWORD}@127.0.0.1:notaport/0", "q")
            assert "port" in str(err.value) and not _leaks(str(err.value))
        finally:
            await queues.close()

    asyncio.run(go())


@pytest.mark.parametrize("command", ["stats", "purge"])
def test_console_commands_with_the_password(locked_redis: RedisServer, command: str) -> None:
    env = {**os.environ, "REDIS_URL": _url(locked_redis)}
    ok = subprocess.run(
        [str(WORKER_BIN), command, "--queue", "mail-secret-c"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert not _leaks(ok.stdout + ok.stderr)
    bad = subprocess.run(
        [str(WORKER_BIN), command, "--queue", "mail-secret-c"],
        env={**env, "REDIS_URL": _url(locked_redis, free_port())},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode != 0
    assert not _leaks(bad.stdout + bad.stderr), bad.stdout + bad.stderr
