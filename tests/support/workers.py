"""Mail worker processes for tests: the real console script (``sendgroup-worker work``) run as a
subprocess with environment variables, as the worker image runs it; and Laravel-shaped mail
payloads to push."""

from __future__ import annotations

import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid as uuidlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sendgroup_contract import jobs
from sendgroup_contract.measure import QueueMeasure
from sendgroup_worker import redisclient
from sendgroup_worker.queue.client import Queue
from sendgroup_worker.queue.keys import QueueKeys

WORKER_BIN = Path(sys.executable).with_name("sendgroup-worker")

_LOGS: list[Path] = []


@atexit.register
def _remove_logs() -> None:
    if not os.environ.get("KEEP_WORKER_LOGS"):
        for path in _LOGS:
            path.unlink(missing_ok=True)


def mail_payload(
    to: str | list[str],
    *,
    uuid: str | None = None,
    subject: str = "hello",
    job: str = "sendgroups.SendMail",
    **top: Any,
) -> bytes:
    """A job envelope (``sendgroup_worker.producer.envelope``, Laravel's key order, no
    ``pushedAt``) carrying a mail in ``data``, unchecked; ``top`` overrides/extends top-level
    fields."""
    job_id = uuid or str(uuidlib.uuid4())
    data = {"to": to, "from": "campaign@sender.example", "subject": subject, "text": f"Hello {to}"}
    payload = jobs.envelope(data, job=job, uuid=job_id, job_id=job_id.replace("-", "")[:32])
    payload.update(top)
    return json.dumps(payload, separators=(",", ":")).encode()


class WorkerProcess:
    """One ``sendgroup-worker work`` process; stdout+stderr go to a log file (removed when the
    test session ends unless ``KEEP_WORKER_LOGS`` is set)."""

    def __init__(self, env: Mapping[str, str], name: str = "worker") -> None:
        if not WORKER_BIN.exists():
            raise RuntimeError(f"{WORKER_BIN} missing: run hack/bootstrap")
        self.log_path = Path(tempfile.mkstemp(prefix=f"sg-{name}-", suffix=".log")[1])
        _LOGS.append(self.log_path)
        full_env = {**os.environ, **env}
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [str(WORKER_BIN), "work"], env=full_env, stdout=self._log, stderr=subprocess.STDOUT
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signal(self, sig: signal.Signals) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float) -> int:
        """Exit code; AssertionError with the log when it is still running after ``timeout``."""
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"worker {self.pid} still running after {timeout}s; log:\n{self.log()[-3000:]}"
            ) from None

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 10 s; always reaps the process."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()


def stop_all(workers: list[WorkerProcess], timeout: float = 20) -> list[int]:
    """SIGTERM every running worker, wait for each (at most ``timeout`` seconds), reap them
    all; their exit codes."""
    for w in workers:
        if w.proc.poll() is None:
            w.signal(signal.SIGTERM)
    try:
        return [w.wait(timeout) for w in workers]
    finally:
        for w in workers:
            w.stop()


def worker_env(redis_url: str, queue: str, smtp_port: int, **extra: Any) -> dict[str, str]:
    """Environment for a test worker: small timeouts (the ladder scaled down), metrics off."""
    env = {
        "SENDGROUP_QUEUE": queue,
        "REDIS_URL": redis_url,
        "SMTP_HOST": "127.0.0.1",
        "SMTP_PORT": str(smtp_port),
        "SMTP_TLS": "none",
        "SMTP_TIMEOUT": "5",
        "WORKER_TRIES": "3",
        "WORKER_BACKOFF": "1",
        "WORKER_TIMEOUT": "2",
        "WORKER_RETRY_AFTER": "3",
        "WORKER_CONCURRENCY": "4",
        "WORKER_BLOCK_FOR": "2",
        "METRICS_PORT": "0",
        "HEALTH_PORT": "0",
        "LOG_LEVEL": "INFO",
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


def sync_queue(redis_url: str, queue: str, retry_after: int = 3) -> Queue:
    """A sync queue client for pushing and measuring from the test."""
    return Queue(redisclient.connect(redis_url), QueueKeys(queue), retry_after=retry_after)


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``predicate`` every 50 ms; AssertionError naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    if not predicate():
        raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def drained(q: Queue) -> Callable[[], bool]:
    """Predicate: ready, delayed and reserved are all 0."""
    return lambda: q.measure().total == 0


def counts(stats: QueueMeasure) -> tuple[int, int, int, int]:
    """(ready, delayed, reserved, failed) for assertions."""
    return (stats.ready, stats.delayed, stats.reserved, stats.failed)
