"""Shared pieces of the isolation, pause and memory scenarios (3, 4, 5).

* :class:`SmtpSink`: Postfix's ``smtp-sink`` (C, one event loop) on a free loopback port, or the
  project's aiosmtpd sink (``tests.support.smtp_sink``) when Postfix is not installed;
* :class:`PingProbe`: a separate process sending PING every 5 ms and reporting the worst round
  trip (a separate process, so the benchmark's own GIL never inflates the stall it reports);
* :func:`cpu_seconds`: user+system CPU seconds of a set of processes (psutil);
* :func:`redis_counters`: ``total_commands_processed`` and per-command call counts (INFO);
* :func:`worker_env` / :data:`WORKER_BIN`: the real ``sendgroup-worker work`` console script of
  the running interpreter's environment, configured by environment variables as in a pod.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psutil
import redis

from tests.support.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent
#: The console script next to the interpreter running the benchmark (.venv-bench's).
WORKER_BIN = Path(sys.executable).with_name("sendgroup-worker")


def child_env(**extra: str) -> dict[str, str]:
    """The current environment without any ``SENDGROUP_*``/``WORKER_*`` leftovers, with
    ``PYTHONPATH`` pointing at the checkout (so ``-m bench.*`` and ``tests.support`` import),
    plus ``extra``."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SENDGROUP_", "WORKER_", "SMTP_", "RATE_"))
    }
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def worker_env(redis_url: str, queue: str, smtp_port: int, concurrency: int = 4) -> dict[str, str]:
    """Environment of one ``sendgroup-worker work`` process: production timeouts (the CRD's
    defaults), no rate limit, metrics off, warnings only."""
    return child_env(
        SENDGROUP_QUEUE=queue,
        REDIS_URL=redis_url,
        SMTP_HOST="127.0.0.1",
        SMTP_PORT=str(smtp_port),
        SMTP_TLS="none",
        WORKER_CONCURRENCY=str(concurrency),
        WORKER_BLOCK_FOR="1",
        METRICS_PORT="0",
        HEALTH_PORT="0",
        LOG_LEVEL="WARNING",
    )


class SmtpSink:
    """An SMTP server on ``127.0.0.1:<port>`` that accepts and discards every mail.

    ``kind`` is ``"postfix smtp-sink"`` or ``"aiosmtpd (tests.support.smtp_sink)"``. Raises
    RuntimeError when it does not listen within 10 s."""

    def __init__(self, log_dir: Path) -> None:
        self.port = free_port()
        binary = shutil.which("smtp-sink") or (
            "/usr/sbin/smtp-sink" if Path("/usr/sbin/smtp-sink").exists() else None
        )
        self._log = (log_dir / "smtp-sink.log").open("wb")
        if binary:
            self.kind = "postfix smtp-sink"
            cmd = [binary]
            if os.geteuid() == 0:
                cmd += ["-u", "nobody"]  # required when started as root
            cmd += [f"127.0.0.1:{self.port}", "1024"]
            self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT)
        else:
            self.kind = "aiosmtpd (tests.support.smtp_sink)"
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.support.smtp_sink", "--port", str(self.port)],
                env=child_env(),
                stdout=self._log,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 10
        import socket

        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"{self.kind} did not listen on port {self.port}")

    def stop(self) -> None:
        """Terminate (then kill) the sink and reap it."""
        stop_process(self.proc)
        self._log.close()

    def __enter__(self) -> SmtpSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_process(proc: subprocess.Popen[Any], timeout: float = 10) -> None:
    """SIGTERM, SIGKILL after ``timeout`` seconds; always reaps."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class PingProbe:
    """``python -m bench.pingprobe``: PING every ``interval`` seconds in its own process; the
    worst round trip (seconds) and the number of pings are read when it stops.

    Usage: ``with PingProbe(port) as p: ...`` then ``p.worst`` (s) and ``p.pings``."""

    def __init__(self, port: int, interval: float = 0.005) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.pingprobe", str(port), str(interval)],
            env=child_env(),
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY"):
            stop_process(self.proc)
            raise RuntimeError(f"ping probe did not start: {line!r}")
        self.worst = 0.0
        self.pings = 0

    def stop(self) -> None:
        """Stop the probe and read its figures."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=10)
        data = json.loads(out.strip().splitlines()[-1])
        self.worst = float(data["worst"])
        self.pings = int(data["pings"])

    def __enter__(self) -> PingProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def cpu_seconds(pids: Iterable[int]) -> float:
    """Sum of user+system CPU seconds of ``pids`` (processes that are gone count 0)."""
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def redis_pid(client: redis.Redis[bytes]) -> int:
    """The redis-server's process id (INFO server)."""
    return int(client.info("server")["process_id"])


def redis_cpu_seconds(client: redis.Redis[bytes]) -> float:
    """redis-server's own user+system CPU seconds (INFO cpu, microsecond resolution)."""
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def redis_busy_seconds(client: redis.Redis[bytes]) -> float:
    """Seconds redis-server has spent executing commands so far (INFO commandstats ``usec``),
    leaving out the benchmark's own probes (PING, INFO, SLOWLOG)."""
    return (
        sum(
            int(v["usec"])
            for name, v in client.info("commandstats").items()
            if name not in ("cmdstat_ping", "cmdstat_info", "cmdstat_slowlog")
        )
        / 1e6
    )


def redis_counters(client: redis.Redis[bytes]) -> tuple[int, dict[str, int]]:
    """(``total_commands_processed``, calls per command name) from INFO. Commands run inside
    Lua scripts count in both, as their own command."""
    total = int(client.info("stats")["total_commands_processed"])
    calls = {
        name.removeprefix("cmdstat_"): int(v["calls"])
        for name, v in client.info("commandstats").items()
    }
    return total, calls


def slowest_command(client: redis.Redis[bytes]) -> tuple[float, str]:
    """The longest command in Redis' SLOWLOG since the last call, then SLOWLOG RESET:
    (seconds spent inside Redis, command name). (0.0, "") when none was logged. The server must
    run with a low ``slowlog-log-slower-than`` (see :data:`SLOWLOG_CONFIG`)."""
    entries = client.slowlog_get(1024)
    client.slowlog_reset()
    if not entries:
        return 0.0, ""
    worst = max(entries, key=lambda e: int(e["duration"]))
    command = worst.get("command", b"")
    name = command.decode(errors="replace") if isinstance(command, bytes) else str(command)
    return int(worst["duration"]) / 1e6, name.split(" ", 1)[0].upper()


#: redis-server settings that log every command slower than 1 ms (for :func:`slowest_command`).
SLOWLOG_CONFIG = {"slowlog-log-slower-than": "1000", "slowlog-max-len": "1024"}


def used_memory(client: redis.Redis[bytes]) -> tuple[int, int]:
    """(``used_memory``, ``used_memory_rss``) in bytes."""
    info = client.info("memory")
    return int(info["used_memory"]), int(info["used_memory_rss"])


__all__ = [
    "WORKER_BIN",
    "PingProbe",
    "SmtpSink",
    "child_env",
    "cpu_seconds",
    "redis_busy_seconds",
    "redis_counters",
    "redis_cpu_seconds",
    "redis_pid",
    "slowest_command",
    "stop_process",
    "used_memory",
    "worker_env",
]
