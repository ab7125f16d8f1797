"""Fixtures of the end-to-end tier: a cluster whose pods run (the local node, or the cluster
``KUBECONFIG`` names with ``SENDGROUP_TEST_USE_EXISTING_CLUSTER=1``), and Redis and the SMTP sink
listening where its pods reach them (``NodeCluster.host_address``)."""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator

import pytest

from tests.support.cluster import ClusterError
from tests.support.node import NodeCluster, session_node
from tests.support.redis_server import RedisServer
from tests.support.reporting import report_line
from tests.support.smtp_sink import SmtpSink


@pytest.fixture(scope="session")
def node_cluster(pytestconfig: pytest.Config) -> Iterator[NodeCluster]:
    """The session's cluster with a node (see tests/support/node.py)."""
    try:
        node, release = session_node()
    except ClusterError as exc:
        pytest.fail(f"no cluster that runs pods: {exc}", pytrace=False)
    if node.managed:
        report_line(
            pytestconfig,
            f"node_cluster: control plane + node up in {node.startup_seconds:.1f}s "
            f"(node part {node.node_startup_seconds or 0:.1f}s, images included; {node.state_dir})",
        )
    yield node
    release()


@pytest.fixture
def e2e_namespace(node_cluster: NodeCluster, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (without waiting)."""
    base = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"e2e-{base}-{secrets.token_hex(3)}"
    # The volumes earlier tests' (deleted) namespaces released: free again for this one.
    recycled = node_cluster.recycle_released_volumes()
    if recycled:
        print(f"\nrecycled volumes released by deleted test namespaces: {', '.join(recycled)}")
    node_cluster.kube.kubectl("create", "namespace", name)
    node_cluster.kube.kubectl("label", "namespace", name, "sendgroup.test/temporary=true")
    yield name
    node_cluster.kube.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found")


@pytest.fixture(scope="session")
def pod_redis_server(node_cluster: NodeCluster) -> Iterator[RedisServer]:
    """redis-server bound to the address pods reach (the node's gateway), for the session."""
    # appendonly: a test restarts Redis and expects the queues of other groups to survive
    server = RedisServer(host=node_cluster.host_address, config={"appendonly": "yes"}).start()
    yield server
    server.cleanup()


@pytest.fixture
def pod_redis(pod_redis_server: RedisServer) -> RedisServer:
    """The session's pod-reachable Redis, flushed before the test."""
    pod_redis_server.client().flushall()
    return pod_redis_server


@pytest.fixture(scope="session")
def pod_smtp_server(node_cluster: NodeCluster) -> Iterator[SmtpSink]:
    """The SMTP sink bound to the address pods reach, for the session."""
    sink = SmtpSink(host=node_cluster.host_address, keep_data=False).start()
    yield sink
    sink.stop()


@pytest.fixture
def pod_smtp(pod_smtp_server: SmtpSink) -> SmtpSink:
    """The session's pod-reachable SMTP sink, its records cleared."""
    pod_smtp_server.reset()
    return pod_smtp_server
