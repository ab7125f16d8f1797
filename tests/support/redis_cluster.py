"""A real 3-master Redis Cluster on loopback (optionally one replica per master), for hash-tag,
CROSSSLOT, failover and resharding tests; or on another local address (the local node's pod
gateway) where pods reach it, for the end-to-end tier.

Each node is a :class:`RedisServer` started with ``cluster-enabled yes``; the slots are
assigned with ``redis-cli --cluster create`` (Debian's ``redis-tools``, installed with
``redis-server``). Raises RuntimeError with the tool's output if the cluster does not form.
"""

from __future__ import annotations

import shutil
import subprocess
import time

import redis
import redis.cluster

from tests.support.ports import free_port
from tests.support.redis_server import RedisServer


def _cluster_ports(host: str = "127.0.0.1") -> tuple[int, int]:
    """(client port, cluster bus port = client port + 10000), both free on ``host`` a moment ago
    and below the kernel's ephemeral range (:mod:`tests.support.ports`)."""
    port = free_port(host, gap=10000)
    return port, port + 10000


class RedisCluster:
    """``masters`` ``redis-server`` cluster nodes on free loopback ports, plus ``replicas``
    replicas per master. ``node_timeout``: ``cluster-node-timeout`` in ms (a dead primary is
    replaced by its replica about that long after it died). ``build``: the server build
    (:func:`tests.support.redis_server.server_binary`). ``host``: the address every node binds
    and announces (``cluster-announce-ip``, so ``CLUSTER SLOTS`` and ``MOVED`` name it): loopback,
    or the local node's pod gateway so pods reach the nodes the slot map names."""

    def __init__(
        self,
        nodes: int = 3,
        replicas: int = 0,
        node_timeout: int = 5000,
        build: str | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.replicas = replicas
        self.host = host
        self.servers = []
        for _ in range(nodes * (1 + replicas)):
            port, bus = _cluster_ports(host)
            config = {
                "cluster-enabled": "yes",
                "cluster-config-file": "nodes.conf",
                "cluster-node-timeout": str(node_timeout),
                "cluster-port": str(bus),
            }
            if host != "127.0.0.1":
                config["cluster-announce-ip"] = host
            self.servers.append(RedisServer(config=config, port=port, build=build, host=host))

    @property
    def url(self) -> str:
        """URL of the first node (cluster clients discover the others from it)."""
        return f"redis://{self.host}:{self.servers[0].port}/0"

    @property
    def seed_url(self) -> str:
        """``redis+cluster://`` URL naming every node as a seed."""
        return "redis+cluster://" + ",".join(f"{self.host}:{s.port}" for s in self.servers) + "/"

    def primary_for(self, key: str) -> RedisServer:
        """The server that owns ``key``'s slot now."""
        for s in self.servers:
            if s.proc is None:
                continue
            try:
                slot = int(s.client().cluster("keyslot", key))
                for start, end, primary, *_ in s.client().execute_command("CLUSTER", "SLOTS"):
                    if start <= slot <= end:
                        port = int(primary[1])
                        return next(x for x in self.servers if x.port == port)
            except redis.RedisError:
                continue
        raise RuntimeError(f"no live node knows the owner of {key!r}")

    @property
    def startup_nodes(self) -> list[redis.cluster.ClusterNode]:
        return [redis.cluster.ClusterNode(self.host, s.port) for s in self.servers]

    @property
    def nodes(self) -> list[RedisServer]:
        """The node servers (the dump tests' name for ``servers``)."""
        return self.servers

    def client(self) -> redis.cluster.RedisCluster:
        """A bytes-returning cluster client."""
        return redis.cluster.RedisCluster(startup_nodes=self.startup_nodes)

    def start(self) -> RedisCluster:
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RuntimeError("redis-cli not found: install Debian's redis-tools")
        try:
            for s in self.servers:
                s.start()
        except RuntimeError:
            self.cleanup()
            raise
        addrs = [f"{self.host}:{s.port}" for s in self.servers]
        out = subprocess.run(
            [cli, "--cluster", "create", *addrs, "--cluster-yes",
             "--cluster-replicas", str(self.replicas)],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        if out.returncode != 0:
            self.cleanup()
            raise RuntimeError(f"redis-cli --cluster create failed:\n{out.stdout}\n{out.stderr}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            states = [s.client().cluster("info") for s in self.servers]
            if all(st.get("cluster_state") == "ok" for st in states) and self._replicas_synced():
                return self
            time.sleep(0.1)
        self.cleanup()
        raise RuntimeError("Redis Cluster did not reach cluster_state:ok within 30 s")

    def _replicas_synced(self) -> bool:
        if not self.replicas:
            return True
        links = 0
        for s in self.servers:
            info = s.client().info("replication")
            if info.get("role") == "slave" and info.get("master_link_status") == "up":
                links += 1
        return links == len(self.servers) // (1 + self.replicas) * self.replicas

    def cleanup(self) -> None:
        for s in self.servers:
            s.cleanup()

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


__all__ = ["RedisCluster"]
