"""Golden manifests (tests/data/kubernetes/{input,output}): every object the builders make for
each input SendGroup must equal the committed output byte for byte; a deliberate change is
regenerated with the command the failure names (tests/support/golden.py). Plus what a reader of
those files should be able to rely on: the pod knobs reach worker AND Job pods, merged group
over operator default, and the operator's own labels cannot be overridden."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from sendgroup_operator import models
from tests.support import golden

CASES = golden.cases()


def objects(case: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((golden.OUTPUT / f"{case}.yaml").read_text()))


def pods(case: str) -> dict[str, dict[str, Any]]:
    """``{object name: pod template}`` of the Deployment and the Jobs of ``case``."""
    return {
        o["metadata"]["name"]: o["spec"]["template"]
        for o in objects(case)
        if o["kind"] in ("Deployment", "Job")
    }


def test_there_are_cases_and_every_output_has_an_input() -> None:
    assert {"basic", "full", "operator-defaults"} <= set(CASES)
    outputs = {p.stem for p in golden.OUTPUT.glob("*.yaml")}
    assert outputs == set(CASES), f"stale or missing outputs: run {golden.COMMAND}"


@pytest.mark.parametrize("case", CASES)
def test_builders_match_the_golden_manifest(case: str) -> None:
    committed = golden.OUTPUT / f"{case}.yaml"
    assert committed.exists(), f"no golden manifest for {case}: run {golden.COMMAND}"
    assert golden.render(case) == committed.read_text(), (
        f"the builders' output for input/{case}.yaml changed; if that is intended, run "
        f"{golden.COMMAND} and review the diff of tests/data/kubernetes/output/"
    )


@pytest.mark.parametrize("case", CASES)
def test_inputs_are_valid_sendgroups(case: str) -> None:
    obj = yaml.safe_load((golden.INPUT / f"{case}.yaml").read_text())
    assert (obj["apiVersion"], obj["kind"]) == (models.API_VERSION, models.KIND)
    models.SendGroup.model_validate(obj)


def test_group_knobs_reach_worker_and_job_pods() -> None:
    kinds = [o["kind"] for o in objects("full")]
    assert kinds == ["Deployment", "PodDisruptionBudget", "Job", "Job", "Job"]
    for name, template in pods("full").items():
        pod = template["spec"]
        assert pod["nodeSelector"] == {"node-role.example.com/mail": "true"}, name
        assert pod["tolerations"][0]["key"] == "dedicated", name
        assert pod["priorityClassName"] == "mail-bulk", name
        assert pod["imagePullSecrets"] == [{"name": "regcred"}], name
        assert "nodeAffinity" in pod["affinity"], name
        assert template["metadata"]["labels"]["team"] == "growth", name
        spread = pod["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"]
        component = template["metadata"]["labels"]["app.kubernetes.io/component"]
        assert spread["app.kubernetes.io/component"] == component, name
    job = next(o for o in objects("full") if o["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "cpu": "2",
        "memory": "1Gi",
    }


def test_every_job_has_a_cpu_limit_by_default() -> None:
    for case in CASES:
        for o in objects(case):
            if o["kind"] == "Job":
                limits = o["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
                assert "cpu" in limits, (case, o["metadata"]["name"])


def test_group_over_operator_default() -> None:
    dep = pods("operator-defaults")["sg-password-reset"]
    pod = dep["spec"]
    # maps merge key by key, the group's value winning
    assert pod["nodeSelector"] == {"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64"}
    labels = dep["metadata"]["labels"]
    assert (labels["cost-center"], labels["team"]) == ("transactional", "platform")
    # the operator's own labels always win (selectors rely on them)
    assert labels["app.kubernetes.io/component"] == "worker"
    assert dep["metadata"]["annotations"] == {"example.com/owner": "platform"}
    # single values and lists: the group's when set, else the default
    assert pod["priorityClassName"] == "mail-urgent"
    assert pod["imagePullSecrets"] == [{"name": "platform-registry"}]
    assert pod["tolerations"][0]["value"] == "mail"
    budget = next(o for o in objects("operator-defaults") if o["kind"] == "PodDisruptionBudget")
    assert budget["spec"]["minAvailable"] == "50%"
    assert budget["spec"]["selector"]["matchLabels"] == {
        "sendgroups.io/group": "password-reset",
        "app.kubernetes.io/component": "worker",
    }
    job = pods("operator-defaults")["sg-password-reset-dump-1"]
    assert job["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "500m", "memory": "256Mi"}


def test_no_knob_no_field() -> None:
    for name, template in pods("basic").items():
        pod = template["spec"]
        for field in (
            "nodeSelector",
            "tolerations",
            "affinity",
            "topologySpreadConstraints",
            "priorityClassName",
            "imagePullSecrets",
        ):
            assert field not in pod, (name, field)
    assert "PodDisruptionBudget" not in [o["kind"] for o in objects("basic")]
