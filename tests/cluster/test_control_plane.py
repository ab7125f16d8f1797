"""The local control plane is a real Kubernetes: controllers, garbage collection, CRD
validation with CEL, printer columns, RBAC for ServiceAccount tokens, and the version stamp."""

from __future__ import annotations

import json
import os
import secrets
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import KubeCluster, service_account_kubeconfig, wait_for

pytestmark = pytest.mark.cluster

PINNED_K8S = os.environ.get("K8S_VERSION") or next(
    line.split(":-", 1)[1].rstrip("}")
    for line in (Path(__file__).resolve().parents[2] / "hack/cluster/versions.env")
    .read_text()
    .splitlines()
    if line.startswith("K8S_VERSION=")
)


def get_json(cluster: KubeCluster, *args: str) -> Any:
    return json.loads(cluster.kubectl("get", "-o", "json", *args).stdout)


def owned_by(obj: dict[str, Any], kind: str, uid: str) -> bool:
    return any(
        ref["kind"] == kind and ref["uid"] == uid and ref.get("controller")
        for ref in obj["metadata"].get("ownerReferences", [])
    )


def test_kubectl_and_server_report_the_pinned_version(kube_cluster: KubeCluster) -> None:
    version = json.loads(kube_cluster.kubectl("version", "-o", "json").stdout)
    assert version["clientVersion"]["gitVersion"] == PINNED_K8S
    if kube_cluster.managed:
        assert version["serverVersion"]["gitVersion"] == PINNED_K8S


def test_deployment_gets_replicaset_and_pods_and_deletion_collects_them(
    kube_cluster: KubeCluster, namespace: str
) -> None:
    manifest = textwrap.dedent(
        """
        apiVersion: apps/v1
        kind: Deployment
        metadata: {name: web}
        spec:
          replicas: 2
          selector: {matchLabels: {app: web}}
          template:
            metadata: {labels: {app: web}}
            spec:
              containers: [{name: web, image: registry.invalid/web:1}]
        """
    )
    kube_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=manifest)
    deploy = get_json(kube_cluster, "-n", namespace, "deployment", "web")

    def replicaset() -> dict[str, Any] | None:
        items = get_json(kube_cluster, "-n", namespace, "replicasets")["items"]
        mine = [rs for rs in items if owned_by(rs, "Deployment", deploy["metadata"]["uid"])]
        return mine[0] if len(mine) == 1 and mine[0]["spec"]["replicas"] == 2 else None

    rs = wait_for(replicaset, 60, "a ReplicaSet with 2 replicas owned by Deployment web")

    def pods() -> list[dict[str, Any]] | None:
        items = get_json(kube_cluster, "-n", namespace, "pods", "-l", "app=web")["items"]
        mine = [p for p in items if owned_by(p, "ReplicaSet", rs["metadata"]["uid"])]
        return mine if len(mine) == 2 else None

    created = wait_for(pods, 60, "2 Pods owned by the ReplicaSet")
    assert {p["spec"]["containers"][0]["image"] for p in created} == {"registry.invalid/web:1"}

    nodes = get_json(kube_cluster, "nodes")["items"]
    if not nodes:
        # The scheduler is at work: it marks the Pods unschedulable (no node yet), Pending.
        def unschedulable() -> bool:
            current = pods() or []
            return len(current) == 2 and all(
                p["status"]["phase"] == "Pending"
                and any(
                    c["type"] == "PodScheduled"
                    and c["status"] == "False"
                    and c.get("reason") == "Unschedulable"
                    for c in p["status"].get("conditions", [])
                )
                for p in current
            )

        wait_for(unschedulable, 60, "both Pods Pending with PodScheduled=False/Unschedulable")

    # Default cascading deletion is "background": the garbage collector deletes the dependents
    # through their ownerReferences.
    kube_cluster.kubectl("delete", "-n", namespace, "deployment", "web", "--wait=true")

    def collected() -> bool:
        left = get_json(kube_cluster, "-n", namespace, "replicasets,pods")["items"]
        return not left

    wait_for(
        collected,
        90,
        "the garbage collector to delete the ReplicaSet and its Pods",
        describe=lambda: kube_cluster.kubectl("get", "-n", namespace, "all").stdout,
    )


@pytest.fixture
def widget_crd(kube_cluster: KubeCluster) -> Iterator[str]:
    """A namespaced CRD `widgets.<random>.sendgroup.test` with a CEL rule and printer columns."""
    group = f"g{secrets.token_hex(3)}.sendgroup.test"
    crd = textwrap.dedent(
        f"""
        apiVersion: apiextensions.k8s.io/v1
        kind: CustomResourceDefinition
        metadata: {{name: widgets.{group}}}
        spec:
          group: {group}
          scope: Namespaced
          names: {{plural: widgets, singular: widget, kind: Widget}}
          versions:
          - name: v1
            served: true
            storage: true
            additionalPrinterColumns:
            - {{name: Min, type: integer, jsonPath: .spec.minReplicas}}
            - {{name: Max, type: integer, jsonPath: .spec.maxReplicas}}
            schema:
              openAPIV3Schema:
                type: object
                properties:
                  spec:
                    type: object
                    required: [minReplicas, maxReplicas]
                    properties:
                      minReplicas: {{type: integer, minimum: 0}}
                      maxReplicas: {{type: integer, minimum: 0}}
                    x-kubernetes-validations:
                    - rule: self.minReplicas <= self.maxReplicas
                      message: minReplicas must not exceed maxReplicas
        """
    )
    kube_cluster.kubectl("apply", "-f", "-", input=crd)
    kube_cluster.kubectl(
        "wait", "--for=condition=Established", f"crd/widgets.{group}", "--timeout=60s", timeout=90
    )
    yield group
    kube_cluster.kubectl("delete", "crd", f"widgets.{group}", "--wait=false")


def test_crd_cel_rule_rejects_with_its_message_and_get_shows_printer_columns(
    kube_cluster: KubeCluster, namespace: str, widget_crd: str
) -> None:
    def widget(name: str, lo: int, hi: int) -> str:
        return (
            f"apiVersion: {widget_crd}/v1\nkind: Widget\nmetadata: {{name: {name}}}\n"
            f"spec: {{minReplicas: {lo}, maxReplicas: {hi}}}\n"
        )

    # Right after Established, discovery in kubectl may lag: poll until the kind resolves.
    wait_for(
        lambda: (
            kube_cluster.kubectl(
                "get", f"widgets.{widget_crd}", "-n", namespace, check=False
            ).returncode
            == 0
        ),
        60,
        "the Widget resource to be served",
    )
    bad = kube_cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", input=widget("bad", 5, 2), check=False
    )
    assert bad.returncode != 0
    assert "minReplicas must not exceed maxReplicas" in bad.stderr
    assert "Invalid value" in bad.stderr

    kube_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=widget("good", 1, 3))
    table = kube_cluster.kubectl("get", f"widgets.{widget_crd}", "-n", namespace).stdout
    header, *rows = table.strip().splitlines()
    assert header.split() == ["NAME", "MIN", "MAX"]
    assert [r.split()[:3] for r in rows] == [["good", "1", "3"]]


def test_service_account_kubeconfig_is_refused_what_its_role_does_not_grant(
    kube_cluster: KubeCluster, namespace: str, tmp_path: Path
) -> None:
    rbac = textwrap.dedent(
        """
        apiVersion: v1
        kind: ServiceAccount
        metadata: {name: reader}
        ---
        apiVersion: rbac.authorization.k8s.io/v1
        kind: Role
        metadata: {name: configmap-reader}
        rules:
        - {apiGroups: [""], resources: [configmaps], verbs: [get, list, watch]}
        ---
        apiVersion: rbac.authorization.k8s.io/v1
        kind: RoleBinding
        metadata: {name: reader}
        roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: configmap-reader}
        subjects: [{kind: ServiceAccount, name: reader}]
        """
    )
    kube_cluster.kubectl("apply", "-n", namespace, "-f", "-", input=rbac)
    kube_cluster.kubectl(
        "create", "configmap", "settings", "-n", namespace, "--from-literal=colour=blue"
    )
    kc = service_account_kubeconfig(
        kube_cluster, namespace, "reader", tmp_path / "reader.kubeconfig"
    )

    def as_reader(*args: str) -> Any:
        return kube_cluster.kubectl(*args, kubeconfig=kc, check=False)

    who = json.loads(as_reader("auth", "whoami", "-o", "json").stdout)
    assert who["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:reader"

    def can_i(*args: str) -> str:
        return str(as_reader("auth", "can-i", *args, "-n", namespace).stdout.strip())

    assert can_i("list", "configmaps") == "yes"
    assert can_i("get", "configmaps") == "yes"
    assert can_i("create", "configmaps") == "no"
    assert can_i("delete", "configmaps") == "no"
    assert can_i("list", "secrets") == "no"
    assert as_reader("auth", "can-i", "list", "configmaps", "-n", "default").stdout.strip() == "no"

    got = as_reader(
        "get", "configmap", "settings", "-n", namespace, "-o", "jsonpath={.data.colour}"
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout == "blue"

    created = as_reader("create", "configmap", "other", "-n", namespace)
    assert created.returncode != 0
    assert "is forbidden" in created.stderr
    assert (
        f'"system:serviceaccount:{namespace}:reader" cannot create resource "configmaps"'
        in created.stderr
    )
    secrets_ = as_reader("get", "secrets", "-n", namespace)
    assert secrets_.returncode != 0
    assert 'cannot list resource "secrets"' in secrets_.stderr
    # The refused create really did nothing.
    assert (
        kube_cluster.kubectl("get", "configmap", "other", "-n", namespace, check=False).returncode
        != 0
    )
