"""A real ``redis-server`` on a free loopback port, started and stopped by the tests.

No mocks: the queue core's Lua scripts run in the same Redis the product runs against.
The binary comes from Debian's ``redis-server`` package (``hack/bootstrap`` installs it).
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process on ``127.0.0.1:<port>`` with its own data directory.

    ``config`` holds extra ``--name value`` settings (e.g. ``{"proto-max-bulk-len": "1mb"}``).
    Raises RuntimeError with the server's log when it does not answer PING within 10 s.
    """

    def __init__(
        self, config: dict[str, str] | None = None, port: int | None = None, host: str = "127.0.0.1"
    ) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server not found: run hack/bootstrap (installs Debian's redis-server)"
            )
        self.binary = binary
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


__all__ = ["RedisServer", "free_port", "redis_version"]
