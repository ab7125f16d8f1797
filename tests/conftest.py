"""Shared fixtures. Importing this needs no infrastructure: servers start only when a test
asks for their fixture, so the unit tier runs anywhere."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import RedisServer
from tests.support.smtp_sink import SmtpSink


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port for the whole session."""
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """URL of the session's Redis, flushed before the test."""
    redis_server.client().flushall()
    return redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url)
    yield client
    client.close()


@pytest.fixture(scope="session")
def smtp_sink_server() -> Iterator[SmtpSink]:
    """A real SMTP server (aiosmtpd) on a free loopback port for the whole session."""
    sink = SmtpSink().start()
    yield sink
    sink.stop()


@pytest.fixture
def smtp_sink(smtp_sink_server: SmtpSink) -> SmtpSink:
    """The session's SMTP sink with its scripts and records cleared."""
    smtp_sink_server.reset()
    return smtp_sink_server


# --- Kubernetes control plane (tests/support/cluster.py, hack/cluster/cluster) ---------------
from tests.support.cluster import (  # noqa: E402
    ClusterError,
    KubeCluster,
    session_cluster,
)
from tests.support.reporting import report_line  # noqa: E402


@pytest.fixture(scope="session")
def kube_cluster(pytestconfig: pytest.Config) -> Iterator[KubeCluster]:
    """The session's Kubernetes control plane: a local one started by hack/cluster/cluster
    (etcd, kube-apiserver, kube-controller-manager, kube-scheduler on free loopback ports),
    or the cluster KUBECONFIG names when SENDGROUP_TEST_USE_EXISTING_CLUSTER=1. A cluster that
    cannot be built or started fails the test with the reason."""
    try:
        cluster, release = session_cluster()
    except ClusterError as exc:
        pytest.fail(f"Kubernetes control plane unavailable: {exc}", pytrace=False)
    if cluster.managed:
        report_line(
            pytestconfig,
            f"kube_cluster: up in {cluster.startup_seconds:.1f}s ({cluster.state_dir})",
        )
    yield cluster
    if cluster.managed:
        rss = cluster.rss_mib()
        parts = ", ".join(f"{name} {mib:.0f}" for name, mib in rss.items())
        report_line(
            pytestconfig,
            f"kube_cluster: RSS MiB at the end: {parts}; total {sum(rss.values()):.0f}",
        )
    release()


@pytest.fixture
def namespace(kube_cluster: KubeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test (name from the test's name), deleted afterwards."""
    import re
    import secrets

    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{base}-{secrets.token_hex(3)}"
    kube_cluster.kubectl("create", "namespace", name)
    kube_cluster.kubectl("label", "namespace", name, "sendgroup.test/temporary=true")
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A real three-master Redis Cluster on loopback ports for the whole session."""
    cluster = RedisCluster().start()
    yield cluster
    cluster.cleanup()
