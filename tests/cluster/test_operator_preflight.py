"""Started before its CRD exists, the operator says what is missing and waits, then starts
when the CRD appears. Needs a cluster without the CRD: this test starts its own local control
plane (the session's has the CRD installed by other tests)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cluster import ClusterError, KubeCluster, start_cluster, stop_cluster, wait_for
from tests.support.operator_proc import OperatorProcess, install_rbac
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bare_cluster() -> Iterator[KubeCluster]:
    """A second, empty local control plane for this test only."""
    state = Path(tempfile.mkdtemp(prefix="sg-bare-")) / "state"
    try:
        cluster = start_cluster(state)
    except ClusterError as exc:
        pytest.fail(f"second local control plane unavailable: {exc}", pytrace=False)
    yield cluster
    stop_cluster(state)
    shutil.rmtree(state.parent, ignore_errors=True)


def test_operator_waits_for_its_crd(
    bare_cluster: KubeCluster, redis_server: RedisServer, tmp_path: Path
) -> None:
    bare_cluster.kubectl("create", "namespace", "ops")
    kubeconfig = install_rbac(bare_cluster, "ops", tmp_path / "sa.kubeconfig")
    op = OperatorProcess(kubeconfig, "ops", redis_server.url, tmp_path / "op.log").start()
    try:
        wait_for(
            lambda: "CRD sendgroups.sendgroups.io is not installed" in op.log(),
            30,
            "the missing CRD named in the log",
            describe=lambda: op.log()[-2000:],
        )
        assert op.running(), "waits instead of crash-looping"
        bare_cluster.kubectl("apply", "-f", str(REPO / "crds" / "sendgroups.yaml"))
        op.wait_started(60)
        bare_cluster.kubectl(
            "apply",
            "-n",
            "ops",
            "-f",
            "-",
            input="apiVersion: sendgroups.io/v1alpha1\nkind: SendGroup\nmetadata: {name: late}\n"
            "spec: {campaign: c, host: gmail.com}\n",
        )
        wait_for(
            lambda: "Pending" in bare_cluster.kubectl("get", "sg", "late", "-n", "ops").stdout,
            30,
            "the group reconciled after the CRD arrived",
        )
    finally:
        op.stop()
        print(op.log()[-3000:])
