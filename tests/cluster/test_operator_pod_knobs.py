"""On the control plane, with the operator as a real process under the chart's RBAC: a group's
pod knobs reach its worker Deployment, its disruptionBudget becomes a PodDisruptionBudget over
the worker pods, a change of the budget alone reaches the PDB, and removing it deletes the PDB;
the API server accepts every field (CRD schema and CEL: exactly one of minAvailable or
maxUnavailable)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from tests.cluster.conftest import Objects
from tests.cluster.test_operator import push, replicas, sendgroup
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


def _refusing_policy(namespace: str) -> str:
    """A ValidatingAdmissionPolicy (and its binding) under which the API server refuses
    (422) PodDisruptionBudget ``sg-refused`` in ``namespace``: a PDB the SendGroup's CRD let
    through but the API server refuses at run time (as an object stored before the CRD's rule
    was, or an admission policy of the cluster)."""
    name = f"refuse-pdb-{namespace}"
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": ["policy"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["poddisruptionbudgets"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": "object.metadata.name != 'sg-refused'",
                    "message": "test policy: no budget for sg-refused",
                }
            ],
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {
            "policyName": name,
            "validationActions": ["Deny"],
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            },
        },
    }
    return "\n---\n".join(json.dumps(o) for o in (policy, binding))


def test_a_refused_budget_is_said_retried_and_never_stops_the_workers(
    operator: OperatorProcess, objects: Objects, redis_client: redis.Redis
) -> None:
    """The API server refuses the group's PodDisruptionBudget at run time. Before, the
    Deployment was written, the PDB apply failed once (ApplyFailed), the next pass found the
    Deployment up to date (its hash covers the budget), cleared the condition and never tried
    the PDB again: Running, no PDB, nothing said. Now the workers still run, the group says
    Degraded=True reason DisruptionBudgetRefused (one Warning event), keeps saying it pass
    after pass, tries again every pass, and once the API server takes the PDB, it is there and
    the condition is gone."""
    cluster, ns = objects.cluster, objects.namespace
    name = f"refuse-pdb-{ns}"
    cluster.kubectl("apply", "-f", "-", input=_refusing_policy(ns))
    probe = json.dumps(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "sg-refused"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"probe": "x"}}},
        }
    )

    def refused_now() -> bool:
        proc = cluster.kubectl(
            "create", "--dry-run=server", "-n", ns, "-f", "-", input=probe, check=False
        )
        return proc.returncode != 0 and "no budget for sg-refused" in proc.stderr

    try:
        wait_for(refused_now, 30, "the admission policy in force")
        push(redis_client, "mail-refused", 3)
        objects.apply(sendgroup("refused", workers=1, disruptionBudget={"minAvailable": 1}))
        wait_for(lambda: replicas(objects, "refused") == 1, 30, "workers despite the refused PDB")

        def degraded() -> dict[str, Any] | None:
            cond = objects.condition("refused", "Degraded")
            return cond if cond and cond["reason"] == "DisruptionBudgetRefused" else None

        cond = wait_for(degraded, 30, "Degraded=True reason DisruptionBudgetRefused")
        assert cond["status"] == "True"
        assert "PodDisruptionBudget sg-refused" in cond["message"]
        assert "no budget for sg-refused" in cond["message"]

        def errors() -> float:
            for line in operator.metrics().splitlines():
                if line.startswith("sendgroup_reconcile_errors_total{"):
                    return float(line.split()[-1])
            return 0.0

        # later passes try again (each refusal counted) and the condition stays; the
        # Deployment is written with the same body each time: no new generation (no rollout)
        generation = objects.get("deployment", "sg-refused")["metadata"]["generation"]
        first = errors()
        wait_for(lambda: errors() >= first + 3, 30, "the PDB tried again on later passes")
        after = objects.get("deployment", "sg-refused")["metadata"]
        assert after["generation"] == generation
        assert degraded() is not None
        assert objects.get("pdb", "sg-refused") is None
        warnings = [
            e for e in objects.events("refused") if e["reason"] == "DisruptionBudgetRefused"
        ]
        assert len(warnings) == 1 and warnings[0]["type"] == "Warning", warnings
        assert sum(int(e.get("count") or 1) for e in warnings) == 1, warnings
    finally:
        cluster.kubectl(
            "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name,
            "--ignore-not-found", check=False,
        )  # fmt: skip
    # the obstacle gone: the next passes apply the PDB and the degradation ends
    pdb = wait_for(lambda: objects.get("pdb", "sg-refused"), 30, "PodDisruptionBudget applied")
    assert pdb["spec"]["minAvailable"] == 1
    wait_for(lambda: objects.condition("refused", "Degraded") is None, 30, "Degraded cleared")
