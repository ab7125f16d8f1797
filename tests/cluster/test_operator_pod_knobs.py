"""On the control plane, with the operator as a real process under the chart's RBAC: a group's
pod knobs reach its worker Deployment, its disruptionBudget becomes a PodDisruptionBudget over
the worker pods, a change of the budget alone reaches the PDB, and removing it deletes the PDB;
the API server accepts every field (CRD schema and CEL: exactly one of minAvailable or
maxUnavailable)."""

from __future__ import annotations

import pytest
import redis

from tests.cluster.conftest import Objects
from tests.cluster.test_operator import push, sendgroup
from tests.support.cluster import KubeCluster, wait_for
from tests.support.operator_proc import OperatorProcess

pytestmark = pytest.mark.cluster

TEMPLATE = {
    "metadata": {"labels": {"team": "mail"}},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [
        {"key": "dedicated", "operator": "Equal", "value": "mail", "effect": "NoSchedule"}
    ],
    "priorityClassName": "system-cluster-critical",
    "imagePullSecrets": [{"name": "regcred"}],
}


def test_pod_knobs_and_disruption_budget_follow_the_spec(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis
) -> None:
    push(redis_client, "mail-knobs", 3)
    objects.apply(
        sendgroup(
            "knobs",
            workers=2,
            podTemplate=TEMPLATE,
            jobs={"resources": {"limits": {"cpu": "500m", "memory": "256Mi"}}},
            disruptionBudget={"minAvailable": 1},
        )
    )
    dep = wait_for(lambda: objects.get("deployment", "sg-knobs"), 30, "Deployment sg-knobs")
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux"}
    assert pod["tolerations"][0]["value"] == "mail"
    assert pod["priorityClassName"] == "system-cluster-critical"
    assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    assert dep["spec"]["template"]["metadata"]["labels"]["team"] == "mail"
    pdb = wait_for(lambda: objects.get("pdb", "sg-knobs"), 30, "PodDisruptionBudget sg-knobs")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == {
        "sendgroups.io/group": "knobs",
        "app.kubernetes.io/component": "worker",
    }
    assert pdb["metadata"]["ownerReferences"][0]["kind"] == "SendGroup"
    # only the budget changes: the PDB follows (the Deployment's hash covers it)
    objects.patch_sg("knobs", {"disruptionBudget": {"minAvailable": None, "maxUnavailable": "50%"}})
    wait_for(
        lambda: (
            (objects.get("pdb", "sg-knobs") or {}).get("spec", {}).get("maxUnavailable") == "50%"
        ),
        30,
        "PDB maxUnavailable 50%",
    )
    objects.patch_sg("knobs", {"disruptionBudget": None})
    wait_for(lambda: objects.get("pdb", "sg-knobs") is None, 30, "PDB deleted with the field")


def test_a_budget_with_both_or_neither_field_is_refused(
    sendgroup_crd: str, objects: Objects, kube_cluster: KubeCluster
) -> None:
    for budget in ({"minAvailable": 1, "maxUnavailable": 1}, {}):
        proc = kube_cluster.kubectl(
            "apply", "-n", objects.namespace, "-f", "-",
            input=sendgroup("bad-budget", disruptionBudget=budget), check=False,
        )  # fmt: skip
        assert proc.returncode != 0
        assert "exactly one of minAvailable or maxUnavailable" in proc.stderr
