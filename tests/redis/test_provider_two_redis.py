"""A provider without ``spec.redis`` whose groups' queues live on two different Redis servers:
one budget for all of them. Review finding (issue 14): ``PROVIDER_REDIS_URL`` was only set on
the workers when the provider named a Redis, so each group's workers kept the provider's state
on their own group's Redis and each group got the whole budget (2.00/s measured against 1/s).
The workers here get exactly the env the operator builds (``provider_plan.worker_provider_env``
with the operator's settings): the provider's state lives on the operator's default Redis."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from sendgroup_operator import provider_plan
from sendgroup_operator.provider_models import SendProviderSpec
from sendgroup_operator.settings import Settings
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess, mail_payload, sync_queue, wait_for, worker_env

pytestmark = pytest.mark.redis


@pytest.fixture
def other_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.stop()


def test_groups_on_two_redis_servers_share_one_provider_budget(
    redis_url: str,
    other_redis: RedisServer,
    smtp_sink: SmtpSink,
    workers: list[WorkerProcess],
) -> None:
    """Provider 600/min (10/s), no spec.redis; the operator's defaultRedisUrl is the first
    server. Group a's queue is on it, group b's on the second server, two workers each: the
    provider receives 10/s together (+-10 % over 8 s), not 10/s per group."""
    settings = Settings.from_env({"SENDGROUP_DEFAULT_REDIS_URL": redis_url})
    spec = SendProviderSpec.model_validate({"rate": {"perMinute": 600, "burst": 2}})
    queues = {"a": redis_url, "b": other_redis.url}
    for group, url in queues.items():
        env = provider_plan.worker_provider_env(
            "ClusterSendProvider", "bigmail", None, spec, f"ns/{group}", settings
        )
        values = {e["name"]: e["value"] for e in env}
        assert values["PROVIDER_REDIS_URL"] == redis_url  # the operator's default, for both
        assert json.loads(values["SENDGROUP_PROVIDER"])["id"] == "csp/bigmail"
        sync_queue(url, f"mail-{group}").push_many(
            mail_payload(f"u{i}@{group}.example") for i in range(300)
        )
        for i in range(2):
            workers.append(
                WorkerProcess(
                    worker_env(
                        url, f"mail-{group}", smtp_sink.port, WORKER_CONCURRENCY="2", **values
                    ),
                    name=f"{group}-{i}",
                )
            )

    def arrivals(start: float, end: float, domain: str = "") -> int:
        with smtp_sink.lock:
            log = list(smtp_sink.rcpt_log)
        return sum(1 for t, rcpt in log if start <= t < end and rcpt.endswith(domain))

    for domain in ("@a.example", "@b.example"):
        wait_for(lambda d=domain: arrivals(0, time.time() + 1, d) > 0, 30, f"mail to {domain}")
    t0 = time.time() + 1.0
    wait_for(lambda: time.time() >= t0 + 8.0, 20, "the end of the 8 s window")
    total = arrivals(t0, t0 + 8.0)
    per_group = {g: arrivals(t0, t0 + 8.0, f"@{g}.example") for g in queues}
    print(f"provider budget 10/s over 8 s: {total} recipients, per group {per_group}")
    assert 72 <= total <= 88, (total, per_group)
    assert all(n > 10 for n in per_group.values()), per_group
