"""Every component on each way users run Redis: standalone, a 3-master Redis Cluster with one
replica per master, and a primary + replica under Sentinel, all real servers on loopback.

One group's life on each: the producer CLI pushes, two worker processes send through the real
SMTP sink (shared rate limit, a 5xx to the failed list), ``stats``/``failed`` commands, the
operator's measurement, then dump, restore and purge Jobs' commands. On the cluster the worker
is also pointed at a plain ``redis://`` URL of a node that does not own the queue's slot (the
URL form of a managed service's configuration endpoint): detected, MOVED followed."""

from __future__ import annotations

import asyncio
import csv
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from sendgroup_operator.queueio import QueueUnavailable, RedisQueues
from sendgroup_worker.cli import main
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.redis_cluster import RedisCluster
from tests.support.redis_sentinel import SentinelSetup
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import (
    WorkerProcess,
    counts,
    drained,
    sync_queue,
    wait_for,
    worker_env,
)

pytestmark = pytest.mark.redis

Q = "{mail-dep}"


class Deployment:
    """One running deployment: ``url`` for every component, ``worker_url`` for the workers."""

    def __init__(self, kind: str, url: str, worker_url: str, stop: object) -> None:
        self.kind = kind
        self.url = url
        self.worker_url = worker_url
        self.stop = stop


@pytest.fixture(scope="module", params=["standalone", "cluster", "sentinel"])
def deployment(request: pytest.FixtureRequest) -> Iterator[Deployment]:
    kind = request.param
    if kind == "standalone":
        server = RedisServer().start()
        yield Deployment(kind, server.url, server.url, server)
        server.cleanup()
    elif kind == "cluster":
        cluster = RedisCluster(replicas=1).start()
        owner = cluster.primary_for(QueueKeys(Q).ready)
        other = next(
            s for s in cluster.servers if s is not owner and s.client().info()["role"] == "master"
        )
        # workers: a plain redis:// URL of a node that does NOT own the slot (detected: cluster)
        yield Deployment(kind, cluster.seed_url, other.url, cluster)
        cluster.cleanup()
    else:
        setup = SentinelSetup().start()
        yield Deployment(kind, setup.url, setup.url, setup)
        setup.cleanup()


def cli(url: str, *args: str) -> tuple[int, str]:
    env = {"REDIS_URL": url, "SENDGROUP_QUEUE": Q}
    result = CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)
    return result.exit_code, result.stdout + result.stderr


def _csv(path: Path, recipients: list[str]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["to", "subject", "text"])
        for r in recipients:
            w.writerow([r, "hi", "body"])
    return path


def test_one_group_life_on_each_deployment(
    deployment: Deployment, smtp_sink: SmtpSink, tmp_path: Path
) -> None:
    url = deployment.url
    q = sync_queue(url, Q)
    q.clear()
    q.failed_flush()
    q.redis.delete(QueueKeys(Q).stats, QueueKeys(Q).sent)
    recipients = [f"user{i}@dep.example" for i in range(200)]
    smtp_sink.script("user7@dep.example", "550 5.1.1 no such user")
    code, out = cli(url, "push", str(_csv(tmp_path / "r.csv", recipients)), "--from", "a@b.c")
    assert code == 0, out
    assert q.measure().ready == 200

    env = worker_env(deployment.worker_url, Q, smtp_sink.port, RATE_PER_MINUTE=30000)
    workers = [WorkerProcess(env, name=f"w{i}") for i in range(2)]
    try:
        wait_for(lambda: len(smtp_sink.snapshot()) >= 199, 60, "199 mails at the sink")
        wait_for(drained(q), 15, "queue drained")
    finally:
        for w in workers:
            w.stop()
    per_rcpt = smtp_sink.per_recipient()
    assert set(per_rcpt) == set(recipients) - {"user7@dep.example"}
    assert set(per_rcpt.values()) == {1}
    logs = "".join(w.log() for w in workers)
    assert "Traceback" not in logs, logs[-3000:]
    stats = q.measure()
    assert counts(stats) == (0, 0, 0, 1)
    assert (stats.delivered, stats.failed_total) == (199, 1)

    code, out = cli(url, "stats", "--json")
    assert code == 0, out
    assert json.loads(out)["failed"] == 1
    code, out = cli(url, "failed", "list")
    assert code == 0 and "550" in out, out

    async def measure() -> tuple[int, int, int]:
        queues = RedisQueues()
        try:
            m = await queues.measure(url, Q)
            return m.ready + m.delayed + m.reserved, m.delivered, m.failed
        finally:
            await queues.close()

    assert asyncio.run(measure()) == (0, 199, 1)

    # pause -> dump -> restore -> purge, through the Jobs' commands
    code, out = cli(
        url, "push", str(_csv(tmp_path / "more.csv", ["late@dep.example"] * 50)), "--from", "a@b.c"
    )
    assert code == 0, out
    dumps = tmp_path / "dumps"
    dumps.mkdir()
    code, out = cli(url, "dump", "--dumps-dir", str(dumps))
    assert code == 0, out
    assert q.measure().total == 0
    assert any(p.is_file() for p in dumps.rglob("*")), "no segment file on the volume"
    code, out = cli(url, "restore", "--dumps-dir", str(dumps))
    assert code == 0, out
    assert q.measure().ready == 50
    code, out = cli(url, "purge", "--dumps-dir", str(dumps))
    assert code == 0, out
    assert q.measure().total == 0 and q.measure().failed == 0


def test_untagged_queue_on_a_cluster_is_refused_clearly(
    deployment: Deployment, smtp_sink: SmtpSink
) -> None:
    if deployment.kind != "cluster":
        assert sync_queue(deployment.url, "mail-untagged").size() == 0  # fine elsewhere
        return
    message = "has no hash tag"
    worker = WorkerProcess(worker_env(deployment.worker_url, "mail-untagged", smtp_sink.port))
    try:
        assert worker.wait(30) != 0
    finally:
        worker.stop()
    log = worker.log()
    assert message in log and "Traceback" not in log, log
    env = {"REDIS_URL": deployment.url, "SENDGROUP_QUEUE": "mail-untagged"}
    result = CliRunner().invoke(main, ["stats"], env=env)
    assert result.exit_code != 0 and message in result.output

    async def measure() -> None:
        queues = RedisQueues()
        try:
            await queues.measure(deployment.url, "mail-untagged")
        finally:
            await queues.close()

    with pytest.raises(QueueUnavailable, match=message):
        asyncio.run(measure())


def test_wait_replicas_makes_acks_durable_and_costs_one_wait(
    deployment: Deployment, pytestconfig: pytest.Config
) -> None:
    """``WORKER_REDIS_WAIT_REPLICAS``: each reserve/done is followed by WAIT on the same
    connection. With a replica every WAIT is acknowledged; standalone (no replica) reports
    each one as short after the timeout. Reports the cost per job (reserve + done)."""
    from sendgroup_worker.queue.client import AsyncQueue
    from sendgroup_worker.redisclient import connect_async
    from tests.support.workers import mail_payload

    jobs = 200

    async def run(wait: int, timeout: float) -> tuple[float, int, int]:
        client = await connect_async(deployment.url)
        try:
            q = AsyncQueue(client, QueueKeys(Q), 30, wait_replicas=wait, wait_timeout=timeout)
            await q.clear()
            await q.push_many([mail_payload(f"w{i}@x.example") for i in range(jobs)])
            loop = asyncio.get_running_loop()
            start = loop.time()
            done = 0
            for _ in range(jobs):
                (job,) = await q.reserve(1)
                assert await q.done(job) is False
                done += 1
            elapsed = loop.time() - start
            assert await q.size() == 0
            return elapsed / jobs * 1000, q.wait_short, done
        finally:
            await client.aclose()  # type: ignore[attr-defined]

    if deployment.kind == "standalone":
        _, short, done = asyncio.run(run(1, 0.01))
        assert (short, done) == (2 * jobs, jobs)  # no replica: every WAIT timed out, all done
        return
    plain_ms, short0, _ = asyncio.run(run(0, 1.0))
    durable_ms, short1, done = asyncio.run(run(1, 1.0))
    # a replica answers WAIT within the timeout (a rare late one is counted, not hidden)
    assert (short0, done) == (0, jobs) and short1 <= 2 * jobs // 100
    from tests.support.reporting import report_line

    report_line(
        pytestconfig,
        f"WAIT cost on {deployment.kind}: reserve+done {plain_ms:.2f} ms/job asynchronous, "
        f"{durable_ms:.2f} ms/job with WORKER_REDIS_WAIT_REPLICAS=1 "
        f"(x{durable_ms / plain_ms:.1f}; {short1} of {2 * jobs} WAITs short)",
    )


def test_an_acl_user_in_the_url_works_on_each_deployment(deployment: Deployment) -> None:
    """An ACL user limited to the queue's keys (``~*{mail-dep}*``), named in the URL: the
    producer, the worker's queue client and the operator's measurement all log in as it; a
    wrong password is an authentication error that never shows the password."""
    from sendgroup_worker import redisclient
    from sendgroup_worker.redisurl import parse

    target = parse(deployment.url)
    servers: list[RedisServer] = list(getattr(deployment.stop, "servers", [deployment.stop]))
    for s in servers:
        s.client().execute_command(
            "ACL", "SETUSER", "mailer", "reset", "on", ">s3cr3t-pw", "~*{mail-dep}*",
            "+@all", "-@dangerous", "+info", "+cluster|slots", "+cluster|shards",
        )  # fmt: skip
    scheme = deployment.url.split("://", 1)[0]
    hosts = ",".join(f"{h}:{p}" for h, p in target.nodes)
    path = "/mymaster/0?sentinel_auth=none" if target.kind == "sentinel" else "/0"
    url = f"{scheme}://mailer:s3cr3t-pw@{hosts}{path}"
    q = sync_queue(url, Q)
    q.clear()
    q.push_many([b'{"uuid":"a1","job":"x","attempts":0,"data":{}}'])
    assert q.measure().ready == 1
    (job,) = q.reserve(1)
    assert q.done(job) is False and q.size() == 0

    async def measure() -> int:
        queues = RedisQueues()
        try:
            return (await queues.measure(url, Q)).delivered
        finally:
            await queues.close()

    assert asyncio.run(measure()) >= 1
    bad = url.replace("s3cr3t-pw", "wrong-pw")
    with pytest.raises(redisclient.REDIS_ERRORS) as caught:
        sync_queue(bad, Q).size()
    assert "wrong-pw" not in str(caught.value)
    assert redisclient.is_cluster(q.redis) is (deployment.kind == "cluster")


def test_rediss_url_with_a_ca_file_worker_cli_and_operator(
    smtp_sink: SmtpSink, tmp_path: Path
) -> None:
    """``rediss://...?ssl_ca_certs=...``: the server's certificate checked against the CA file
    (a self-signed one made here with openssl), for the worker, the CLI and the operator."""
    import shutil
    import subprocess

    from tests.support.redis_server import free_port

    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.fail("openssl not found: apt-get install openssl (makes the test certificate)")
    cert, key = tmp_path / "redis.pem", tmp_path / "redis.key"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    tls_port = free_port()
    server = RedisServer(
        config={
            "tls-port": str(tls_port),
            "tls-cert-file": str(cert),
            "tls-key-file": str(key),
            "tls-ca-cert-file": str(cert),
            "tls-auth-clients": "no",
        }
    ).start()
    try:
        url = f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={cert}"
        q = sync_queue(url, Q)
        code, out = cli(
            url,
            "push",
            str(_csv(tmp_path / "r.csv", [f"t{i}@tls.example" for i in range(20)])),
            "--from",
            "a@b.c",
        )
        assert code == 0, out
        worker = WorkerProcess(worker_env(url, Q, smtp_sink.port), name="tls")
        try:
            wait_for(lambda: len(smtp_sink.snapshot()) >= 20, 30, "20 mails over TLS Redis")
            wait_for(drained(q), 10, "queue drained")
        finally:
            worker.stop()
        assert "Traceback" not in worker.log()

        async def delivered() -> int:
            queues = RedisQueues()
            try:
                return (await queues.measure(url, Q)).delivered
            finally:
                await queues.close()

        assert asyncio.run(delivered()) == 20
        # a server certificate the CA file does not vouch for: a clear error, no traceback
        other = tmp_path / "other.pem"
        subprocess.run(
            [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=x", "-keyout", str(tmp_path / "o.key"), "-out", str(other)],
            check=True, capture_output=True,
        )  # fmt: skip
        code, out = cli(f"rediss://127.0.0.1:{tls_port}/0?ssl_ca_certs={other}", "stats")
        assert code == 1 and "cannot reach Redis at 127.0.0.1" in out and "certificate" in out
    finally:
        server.cleanup()
