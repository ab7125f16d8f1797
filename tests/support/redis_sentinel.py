"""A real Sentinel deployment on loopback: a primary, one replica and Sentinels watching them
(``redis-server --sentinel``), the shape of the common Helm charts (master set ``mymaster``).

``down_after`` (ms) is Sentinel's ``down-after-milliseconds``: a killed primary is replaced by
its replica a little after that. Raises RuntimeError with the logs if the setup does not form.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import redis

from tests.support.redis_server import RedisServer, free_port, server_binary

MASTER = "mymaster"


class Sentinel:
    """One ``redis-server --sentinel`` process."""

    def __init__(self, dir: Path, primary_port: int, down_after: int, build: str | None) -> None:
        self.port = free_port()
        self.dir = dir
        self.conf = dir / f"sentinel-{self.port}.conf"
        self.conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndaemonize no\n"
            f"logfile {dir / f'sentinel-{self.port}.log'}\n"
            f"sentinel monitor {MASTER} 127.0.0.1 {primary_port} 1\n"
            f"sentinel down-after-milliseconds {MASTER} {down_after}\n"
            f"sentinel failover-timeout {MASTER} 10000\n"
            f"sentinel parallel-syncs {MASTER} 1\n"
        )
        self.binary = server_binary(build)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, str(self.conf), "--sentinel"], stdin=subprocess.DEVNULL
        )

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, decode_responses=True)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class SentinelSetup:
    """A primary, ``replicas`` replicas and ``sentinels`` Sentinels on free loopback ports."""

    def __init__(
        self,
        replicas: int = 1,
        sentinels: int = 1,
        down_after: int = 1000,
        build: str | None = None,
    ) -> None:
        self.primary = RedisServer(build=build)
        self.replicas = [
            RedisServer(config={"replicaof": f"127.0.0.1 {self.primary.port}"}, build=build)
            for _ in range(replicas)
        ]
        self.sentinels = [
            Sentinel(self.primary.dir, self.primary.port, down_after, build)
            for _ in range(sentinels)
        ]

    @property
    def url(self) -> str:
        """``redis+sentinel://`` URL of the master set, through every Sentinel."""
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        return f"redis+sentinel://{hosts}/{MASTER}/0"

    @property
    def servers(self) -> list[RedisServer]:
        return [self.primary, *self.replicas]

    def current_primary(self) -> RedisServer:
        """The data server the Sentinels name as primary now."""
        _host, port = self.sentinels[0].client().sentinel_get_master_addr_by_name(MASTER)
        return next(s for s in self.servers if s.port == int(port))

    def rejoin(self, server: RedisServer) -> None:
        """Start a stopped or killed data server again as a replica of the primary the Sentinels
        name now, as the common Helm charts' start scripts do (they ask Sentinel first). Started
        without it, a server without persistence comes back as an empty primary, and a Sentinel
        that still counts it as the master during the failover may keep it and turn the
        promoted replica into its replica: every job gone (Redis' replication docs, "Safety of
        replication when master has persistence turned off")."""
        primary = self.current_primary()
        if primary is server:
            raise RuntimeError(f"the Sentinels still name :{server.port} as the primary")
        server.config["replicaof"] = f"127.0.0.1 {primary.port}"
        server.start()

    def start(self) -> SentinelSetup:
        try:
            for s in self.servers:
                s.start()
            for sentinel in self.sentinels:
                sentinel.start()
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                if self._ready():
                    return self
                time.sleep(0.1)
        except Exception:
            self.cleanup()
            raise
        logs = "\n".join(p.read_text()[-1500:] for p in self.primary.dir.glob("sentinel-*.log"))
        self.cleanup()
        raise RuntimeError(f"Sentinel setup did not form within 30 s:\n{logs}")

    def _ready(self) -> bool:
        """Every replica has finished its initial sync (``master_link_status:up``: the primary's
        ``connected_slaves`` counts a replica still in ``wait_bgsave``, and with Redis' default
        ``repl-diskless-sync-delay`` of 5 s that lasts seconds: a primary killed then has an
        empty replica to promote) and every Sentinel knows every replica."""
        try:
            info = self.primary.client().info("replication")
            if int(info.get("connected_slaves", 0)) < len(self.replicas):
                return False
            for replica in self.replicas:
                if replica.client().info("replication").get("master_link_status") != "up":
                    return False
            for sentinel in self.sentinels:
                master = sentinel.client().sentinel_master(MASTER)
                if int(master.get("num-slaves", 0)) < len(self.replicas):
                    return False
        except redis.RedisError:
            return False
        return True

    def cleanup(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for s in self.servers:
            s.cleanup()

    def __enter__(self) -> SentinelSetup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


__all__ = ["MASTER", "Sentinel", "SentinelSetup"]
