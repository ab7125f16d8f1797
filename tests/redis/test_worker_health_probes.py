"""The worker's /livez and /readyz as the kubelet sees them, on a real worker process with a real
redis-server (its own, so the test can stop it) and the aiosmtpd sink: ready once both answer,
not ready (still live) while Redis is down, ready again when it is back; not ready while
stopping; no answer at all while frozen with SIGSTOP (the probe's timeout is the failure)."""

from __future__ import annotations

import signal
import urllib.error
import urllib.request

import pytest

from tests.support.redis_server import RedisServer, free_port
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess, mail_payload, sync_queue, wait_for, worker_env

pytestmark = pytest.mark.redis


def probe(port: int, path: str, timeout: float = 2) -> tuple[int, str]:
    """``(status, body)``; ``(0, reason)`` when nothing answers in ``timeout`` seconds."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as resp:
            return resp.status, resp.read().decode().strip()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode().strip()
    except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
        return 0, str(exc)


def test_readiness_follows_redis_and_liveness_the_process(smtp_sink: SmtpSink) -> None:
    server = RedisServer().start()
    port = free_port()
    worker = WorkerProcess(
        worker_env(
            server.url, "mail-probes", smtp_sink.port, HEALTH_PORT=port, HEALTH_HOST="127.0.0.1"
        )
    )
    try:
        wait_for(lambda: probe(port, "/readyz") == (200, "ok"), 15, "/readyz 200")
        assert probe(port, "/livez") == (200, "ok")
        # a job goes through while ready (the probes do not disturb the lanes)
        sync_queue(server.url, "mail-probes").push(mail_payload("probe@health.example"))
        wait_for(lambda: len(smtp_sink.snapshot()) >= 1, 20, "the mail at the sink")
        server.stop()
        wait_for(
            lambda: probe(port, "/readyz")[0] == 503 and "redis:" in probe(port, "/readyz")[1],
            20,
            "/readyz 503 naming redis while Redis is down",
        )
        status, body = probe(port, "/readyz")
        assert "ConnectionError" in body and "redis://" not in body  # no URL (password) echoed
        assert probe(port, "/livez") == (200, "ok")  # Redis down is not a reason to restart
        server.start()
        wait_for(lambda: probe(port, "/readyz") == (200, "ok"), 30, "/readyz 200 again")
        worker.signal(signal.SIGSTOP)
        try:
            status, _ = probe(port, "/livez", timeout=2)
            assert status == 0, "a frozen process must not answer its liveness probe"
        finally:
            worker.signal(signal.SIGCONT)
        wait_for(lambda: probe(port, "/livez") == (200, "ok"), 10, "/livez 200 after SIGCONT")
        worker.signal(signal.SIGTERM)
        assert worker.wait(20) == 0
    finally:
        worker.stop()
        server.cleanup()
