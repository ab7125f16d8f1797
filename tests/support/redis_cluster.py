"""A real three-master Redis Cluster on loopback ports, for the cluster cases of the Redis tier.

Three ``redis-server --cluster-enabled yes`` processes (each a :class:`RedisServer` with its own
data directory) joined by ``redis-cli --cluster create ... --cluster-replicas 0 --cluster-yes``.
Each node also needs its cluster bus port (port + 10000) free, so ports are drawn from
20000..45000 and both are checked.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time

import redis
import redis.cluster

from tests.support.redis_server import RedisServer


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def cluster_ports(n: int) -> list[int]:
    """``n`` ports p with p and p + 10000 (the cluster bus) free on 127.0.0.1."""
    rng = random.Random()
    out: list[int] = []
    for _ in range(1000):
        p = rng.randrange(20000, 45000)
        if p not in out and _port_free(p) and _port_free(p + 10000):
            out.append(p)
            if len(out) == n:
                return out
    raise RuntimeError("no free port pairs (p, p+10000) for a Redis Cluster on 127.0.0.1")


class RedisCluster:
    """Three masters on 127.0.0.1, slots spread by ``redis-cli --cluster create``.

    Raises RuntimeError with the redis-cli output when the cluster does not form (state ok on
    every node) within 30 s.
    """

    def __init__(self, masters: int = 3) -> None:
        if shutil.which("redis-cli") is None:
            raise RuntimeError("redis-cli not found: run hack/bootstrap (Debian redis-tools)")
        self.nodes = [
            RedisServer(
                config={
                    "cluster-enabled": "yes",
                    "cluster-config-file": "nodes.conf",
                    "cluster-node-timeout": "5000",
                },
                port=port,
            )
            for port in cluster_ports(masters)
        ]

    @property
    def url(self) -> str:
        """URL of the first node (clients discover the others)."""
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def client(self) -> redis.cluster.RedisCluster[bytes]:
        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.nodes[0].port)

    def start(self) -> RedisCluster:
        try:
            for node in self.nodes:
                node.start()
            addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
            out = subprocess.run(
                [
                    "redis-cli",
                    "--cluster",
                    "create",
                    *addrs,
                    "--cluster-replicas",
                    "0",
                    "--cluster-yes",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if out.returncode != 0:
                raise RuntimeError(f"redis-cli --cluster create failed:\n{out.stdout}{out.stderr}")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                states = [n.client().cluster("info").get("cluster_state") for n in self.nodes]
                if all(s == "ok" for s in states):
                    return self
                time.sleep(0.1)
            raise RuntimeError(f"Redis Cluster did not reach cluster_state:ok: {states}")
        except BaseException:
            self.cleanup()
            raise

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


__all__ = ["RedisCluster", "cluster_ports"]
