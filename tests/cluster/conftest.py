"""Fixtures for the operator's cluster tests: the CRDs, the operator as a real process under
its ServiceAccount in a fresh namespace, and helpers to read SendGroups and their children."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import KubeCluster, apply_crds
from tests.support.operator_proc import OperatorProcess, install_rbac

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def sendgroup_crd(kube_cluster: KubeCluster) -> str:
    """The SendGroup and provider CRDs (and kopf's peering CRDs) applied and Established."""
    apply_crds(kube_cluster)
    return "sendgroups.sendgroups.io"


@pytest.fixture
def operator_factory(
    kube_cluster: KubeCluster, namespace: str, sendgroup_crd: str, redis_url: str, tmp_path: Path
) -> Iterator[Callable[..., OperatorProcess]]:
    """Start operators (``factory(**env)``) in the test's namespace under the ServiceAccount
    and RBAC of helm/sendgroup-operator/files/rbac-rules.yaml; all are stopped after the test.
    The log is printed when the test fails."""
    kubeconfig = install_rbac(kube_cluster, namespace, tmp_path / "operator.kubeconfig")
    started: list[OperatorProcess] = []

    def factory(wait: bool = True, **env: str) -> OperatorProcess:
        log = tmp_path / f"operator-{len(started)}.log"
        proc = OperatorProcess(kubeconfig, namespace, redis_url, log, **env).start()
        started.append(proc)
        if wait:
            proc.wait_started()
        return proc

    yield factory
    for proc in started:
        proc.stop()
        print(f"--- {proc.log_path}\n{proc.log()[-6000:]}")


@pytest.fixture
def operator(operator_factory: Callable[..., OperatorProcess]) -> OperatorProcess:
    """One running operator with the default test settings."""
    return operator_factory()


class Objects:
    """Read/write helpers bound to the test's namespace."""

    def __init__(self, cluster: KubeCluster, namespace: str) -> None:
        self.cluster = cluster
        self.namespace = namespace

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        proc = self.cluster.kubectl(
            "get", kind, name, "-n", self.namespace, "-o", "json", check=False
        )
        if proc.returncode != 0:
            if "NotFound" in proc.stderr:
                return None
            raise AssertionError(proc.stderr)
        data: dict[str, Any] = json.loads(proc.stdout)
        return data

    def list(self, kind: str, selector: str | None = None) -> list[dict[str, Any]]:
        args = ["get", kind, "-n", self.namespace, "-o", "json"]
        if selector:
            args += ["-l", selector]
        items: list[dict[str, Any]] = json.loads(self.cluster.kubectl(*args).stdout)["items"]
        return items

    def apply(self, manifest: str) -> None:
        self.cluster.kubectl("apply", "-n", self.namespace, "-f", "-", input=manifest)

    def patch_sg(self, name: str, spec: dict[str, Any]) -> None:
        self.cluster.kubectl(
            "patch",
            "sendgroup",
            name,
            "-n",
            self.namespace,
            "--type=merge",
            "-p",
            json.dumps({"spec": spec}),
        )

    def status(self, name: str) -> dict[str, Any]:
        sg = self.get("sendgroup", name) or {}
        status: dict[str, Any] = sg.get("status") or {}
        return status

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        for cond in self.status(name).get("conditions", []):
            if cond["type"] == type_:
                return dict(cond)
        return None

    def events(self, name: str) -> list[dict[str, Any]]:
        return [
            e
            for e in self.list("events")
            if e["involvedObject"].get("kind") == "SendGroup"
            and e["involvedObject"].get("name") == name
        ]


@pytest.fixture
def objects(kube_cluster: KubeCluster, namespace: str) -> Objects:
    """Helpers for the test's namespace."""
    return Objects(kube_cluster, namespace)
