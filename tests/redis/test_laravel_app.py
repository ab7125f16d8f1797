"""A Laravel app built from Debian's packages (php-laravel-framework 8.83, phpredis,
swiftmailer: ``examples/laravel-app``) on a SendGroup's queue: Laravel's own producer queues a
Mailable, a Notification and a job class per recipient; the queue is paused (no worker),
dumped to the volume by our dump command, grows while dumped, is restored by our restore
command; then Laravel's own ``queue:work`` drains it through a real SMTP server. What a
Laravel shop checks: every mail arrived exactly once, with its subject; a cancelled queue
(purge) sends nothing."""

from __future__ import annotations

import email
import email.policy
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import redis

from sendgroup_operator import builders, models
from sendgroup_operator.settings import Settings
from sendgroup_worker.queue.client import Queue
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.dumps import run_cli, summary
from tests.support.php import run_artisan, start_artisan
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess, drained, wait_for, worker_env

pytestmark = pytest.mark.redis

PREFIX = "laravel_database_"  # the app's database.redis.options.prefix (Laravel's default)
Q = "mail-spring-sale-gmail"
SUBJECTS = {"mailable": "Your order has shipped", "notification": "Invoice paid", "job": "Welcome"}


def _env(redis_url: str, smtp_port: int) -> dict[str, str]:
    port = urlsplit(redis_url).port
    return {"REDIS_PORT": str(port), "MAIL_PORT": str(smtp_port), "REDIS_PREFIX": PREFIX}


def _operator_command(
    redis_url: str, smtp_port: int, storage: Path, laravel: dict[str, int], queue: str = Q
) -> tuple[list[str], dict[str, str]]:
    """The container command and environment the operator gives a ``runtime: laravel`` group's
    pods (``laravel``: the spec's worker.laravel), storage paths moved under ``storage``."""
    spec = models.SendGroupSpec.model_validate(
        {"campaign": "spring-sale", "host": "gmail.com", "queue": queue,
         "worker": {"runtime": "laravel", "image": "shop/app:1", "tries": 3, "timeout": 30,
                    "retryAfter": 60, "laravel": laravel}}
    )  # fmt: skip
    settings = Settings(
        default_image="sendgroup-worker:1", default_redis_url=redis_url, key_prefix=PREFIX,
        allow_image_override=True, default_smtp_host="127.0.0.1", default_smtp_port=smtp_port,
    )  # fmt: skip
    ref = builders.GroupRef("shop", "spring-sale-gmail", "uid", "spring-sale", "gmail.com")
    dep = builders.deployment(ref, spec, settings, replicas=1)
    container = dep["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert container["command"][4:6] == ["php", "artisan"]
    writable = ("LARAVEL_STORAGE_PATH", "VIEW_COMPILED_PATH", "APP_SERVICES_CACHE",
                "APP_PACKAGES_CACHE")  # fmt: skip
    for name in writable:
        env[name] = str(storage / Path(env[name]).relative_to("/tmp"))
    return list(container["command"]), env


def _operator_queue_work(
    redis_url: str, smtp_port: int, storage: Path
) -> subprocess.CompletedProcess[str]:
    command, env = _operator_command(redis_url, smtp_port, storage, {"maxTime": 60})
    return run_artisan("queue:work", env=env, storage=storage, timeout=120,
                       command=[*command, "--stop-when-empty"])  # fmt: skip


def _push(
    env: dict[str, str], storage: Path, recipients: list[str], queue: str = Q
) -> Counter[str]:
    out = run_artisan("sendgroups:push", queue, *recipients, env=env, storage=storage).stdout
    return Counter(line.split()[0] for line in out.splitlines())


def test_laravel_mail_survives_pause_dump_restore_and_is_sent_once_by_queue_work(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    env, storage, dumps = _env(redis_url, smtp_sink.port), tmp_path / "storage", tmp_path / "dumps"
    first = [f"r{i}@x.example" for i in range(30)]
    assert _push(env, storage, first) == {"mailable": 10, "notification": 10, "job": 10}
    q = Queue(redis_client, QueueKeys(Q, prefix=PREFIX), retry_after=90)
    assert q.measure().ready == 30

    # paused (no worker runs), then dumped: the jobs leave Redis for a segment file
    dumped = summary(run_cli("dump", "-q", Q, "--prefix", PREFIX, "--dumps-dir", str(dumps),
                             redis_url=redis_url))  # fmt: skip
    assert dumped["jobs"] == 30 and q.measure().total == 0
    assert redis_client.exists(f"{PREFIX}queues:{Q}") == 0
    # the app keeps queueing while the group is dumped
    later = [f"late{i}@x.example" for i in range(6)]
    _push(env, storage, later)
    restored = summary(run_cli("restore", "-q", Q, "--prefix", PREFIX, "--dumps-dir", str(dumps),
                               redis_url=redis_url))  # fmt: skip
    assert restored["jobs"] == 30
    stats = q.measure()
    assert stats.ready == 36 and redis_client.llen(f"{PREFIX}queues:{Q}:notify") == 36

    # resumed: Laravel's own worker drains the queue, started with exactly the command line and
    # environment the operator gives a `runtime: laravel` group's pods (storage paths moved to
    # this test's directory, artisan to the example app's)
    proc = _operator_queue_work(redis_url, smtp_sink.port, storage)
    assert proc.stdout.count("Processed:") == 36, proc.stdout[-2000:]
    assert "Failed:" not in proc.stdout
    assert q.measure().total == 0

    received = smtp_sink.snapshot()
    assert Counter(r.recipient for r in received) == Counter({r: 1 for r in first + later})
    subjects = Counter(
        str(email.message_from_bytes(r.data, policy=email.policy.default)["Subject"])
        for r in received
    )
    assert subjects == Counter({SUBJECTS["mailable"]: 12, SUBJECTS["notification"]: 12,
                                SUBJECTS["job"]: 12})  # fmt: skip
    shipped = next(r for r in received if r.recipient == "r0@x.example")
    body = email.message_from_bytes(shipped.data, policy=email.policy.default)
    assert "Hello r0@x.example, your order is on its way." in body.get_body().get_content()


def test_a_cancelled_laravel_queue_sends_nothing(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    env, storage = _env(redis_url, smtp_sink.port), tmp_path / "storage"
    _push(env, storage, [f"c{i}@x.example" for i in range(6)])
    purged = summary(run_cli("purge", "-q", Q, "--prefix", PREFIX, redis_url=redis_url))
    assert purged["jobs"] == 6
    proc = run_artisan("queue:work", "redis", f"--queue={Q}", "--stop-when-empty",
                       env=env, storage=storage)  # fmt: skip
    assert "Processed:" not in proc.stdout
    assert smtp_sink.snapshot() == []
    assert [k for k in redis_client.keys("*") if Q.encode() in k] == []


def test_laravel_push_raw_of_our_envelope_is_sent_once_by_our_worker(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    """Way A from inside a Laravel app: Queue::connection('redis')->pushRaw() of the envelope
    SendGroupProducer::payload() builds (Laravel's prefix and Lua push script), drained by our
    Python worker: one mail per recipient, under the uuid the app got, the Blade body intact."""
    env, storage = _env(redis_url, smtp_sink.port), tmp_path / "storage"
    recipients = [f"a{i}@x.example" for i in range(5)]
    out = run_artisan("sendgroups:push-sendmail", Q, *recipients, env=env, storage=storage)
    uuids = out.stdout.split()
    assert len(set(uuids)) == 5
    q = Queue(redis_client, QueueKeys(Q, prefix=PREFIX), retry_after=3)
    assert q.measure().ready == 5
    assert redis_client.llen(f"{PREFIX}queues:{Q}:notify") == 5  # Laravel's push script
    w = WorkerProcess(worker_env(redis_url, Q, smtp_sink.port, SENDGROUP_KEY_PREFIX=PREFIX))
    try:
        wait_for(drained(q), 30, "drained by our worker")
    finally:
        w.signal(signal.SIGTERM)
        assert w.wait(10) == 0
        w.stop()
    received = smtp_sink.snapshot()
    assert sorted(r.job for r in received) == sorted(uuids)
    assert Counter(r.recipient for r in received) == Counter({r: 1 for r in recipients})
    body = email.message_from_bytes(received[0].data, policy=email.policy.default)
    assert "your order is on its way." in body.get_body().get_content()


def _calls(client: redis.Redis, command: str) -> int:
    """How many times the server ran ``command`` (INFO commandstats)."""
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_paused_group_s_queue_work_takes_no_job_until_the_marker_is_gone(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis, smtp_sink: SmtpSink
) -> None:
    """The pause marker the operator sets (``<prefix>queues:<queue>:paused``) stops Laravel's
    own worker, through the example app's SendGroupPauseServiceProvider: a queue:work started
    on a paused group's queue (a pod started, or not yet stopped, after the pause) sends
    nothing and idles (one EXISTS per --sleep, no CPU); once the marker is deleted (resume) it
    sends every mail once. The queue name carries a hash tag, as on a Redis Cluster."""
    queue = "{mail-spring-sale-gmail}"
    env, storage = _env(redis_url, smtp_sink.port), tmp_path / "storage"
    recipients = [f"p{i}@x.example" for i in range(12)]
    _push(env, storage, recipients, queue)
    keys = QueueKeys(queue, prefix=PREFIX)
    q = Queue(redis_client, keys, retry_after=90)
    assert q.measure().ready == 12
    redis_client.set(keys.paused, "1")  # what the operator does while the group is paused
    assert keys.paused == f"{PREFIX}queues:{{mail-spring-sale-gmail}}:paused"

    command, work_env = _operator_command(redis_url, smtp_sink.port, storage, {"sleep": 1}, queue)
    redis_client.config_resetstat()
    log = tmp_path / "queue-work.log"
    proc = start_artisan(command, env=work_env, storage=storage, output=log)
    try:
        # in its loop: the listener's first EXISTS (or, without the listener, a first mail)
        wait_for(lambda: _calls(redis_client, "exists") > 0 or bool(smtp_sink.snapshot()),
                 30, "queue:work's first loop")  # fmt: skip
        cpu0, exists0, t0 = _cpu_seconds(proc.pid), _calls(redis_client, "exists"), time.monotonic()
        time.sleep(6)
        cpu = _cpu_seconds(proc.pid) - cpu0
        checks = _calls(redis_client, "exists") - exists0
        elapsed = time.monotonic() - t0
        assert smtp_sink.snapshot() == [], "queue:work sent mail while the group was paused"
        stats = q.measure()
        assert (stats.ready, stats.reserved) == (12, 0)
        assert proc.poll() is None, log.read_text()[-2000:]
        # idle, not busy-looping: one EXISTS per --sleep=1 loop, a few ms of CPU per second
        assert 3 <= checks <= elapsed + 1, (checks, elapsed)
        assert cpu < 0.3, cpu

        redis_client.delete(keys.paused)  # resumed
        wait_for(lambda: len(smtp_sink.snapshot()) >= 12, 60, "12 mails after the resume")
        wait_for(drained(q), 10, "the queue drained")
        time.sleep(1.5)  # a doubled mail would arrive now
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
    assert code == 0, log.read_text()[-2000:]
    assert Counter(r.recipient for r in smtp_sink.snapshot()) == Counter({r: 1 for r in recipients})
    out = log.read_text()
    assert out.count("Processed:") == 12 and "Failed:" not in out, out[-2000:]
