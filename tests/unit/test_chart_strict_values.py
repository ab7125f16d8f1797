"""The chart's values schema is strict: every object the chart defines refuses unknown keys,
pull secrets need a name, CIDRs and quantities have their format; the objects Kubernetes
defines (affinity, security contexts, a label selector, an env var's valueFrom) stay free.
Wrong values are refused by ``helm template`` and ``helm lint --strict``; right ones reach the
operator, which parses them back (operator settings podTemplate, jobResources)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sendgroup_operator import settings
from tests.support.helm import CHART, env_of, find, helm, render, values_args

pytestmark = pytest.mark.helm

SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
#: Objects whose shape Kubernetes owns: passed through as given.
FREE = {
    "/global",
    "/podSecurityContext",
    "/securityContext",
    "/affinity",
    "/extraEnv[]/valueFrom",
    "#podTemplate/affinity",
    "#topologySpreadConstraint/labelSelector",
}


def open_objects(node: dict[str, Any], path: str) -> list[str]:
    found = []
    if node.get("type") == "object" and "additionalProperties" not in node and path not in FREE:
        found.append(path)
    for key, child in node.get("properties", {}).items():
        found += open_objects(child, f"{path}/{key}")
    if isinstance(node.get("items"), dict):
        found += open_objects(node["items"], f"{path}[]")
    return found


def test_every_object_the_chart_defines_refuses_unknown_keys() -> None:
    assert open_objects(SCHEMA, "") == []
    for name, definition in SCHEMA["definitions"].items():
        assert open_objects(definition, f"#{name}") == [], name


GOOD_TEMPLATE = {
    "metadata": {"labels": {"team": "mail"}, "annotations": {"example.com/owner": "mail"}},
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "mail"}],
    "affinity": {"nodeAffinity": {}},
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
        }
    ],
    "priorityClassName": "mail-bulk",
    "imagePullSecrets": [{"name": "regcred"}],
}


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"resources": {"limit": {"cpu": "1"}}}, "limit"),
        ({"resources": {"limits": {"memory": "512"}}}, "/resources/limits/memory"),
        ({"resources": {"requests": {"cpu": "one"}}}, "/resources/requests/cpu"),
        ({"jobResources": {"requests": {"cpu": 0.5}}}, "/jobResources/requests/cpu"),
        ({"livenessProbe": {"periodSecond": 5}}, "periodSecond"),
        ({"startupProbe": {"failureThreshold": 0}}, "/startupProbe/failureThreshold"),
        ({"imagePullSecrets": ["regcred"]}, "/imagePullSecrets/0"),
        ({"imagePullSecrets": [{"secret": "regcred"}]}, "name"),
        ({"networkPolicy.redis.cidrs": ["10.0.0.0"]}, "/networkPolicy/redis/cidrs/0"),
        ({"networkPolicy.smtp.cidrs": ["10.0.0.0/33"]}, "/networkPolicy/smtp/cidrs/0"),
        ({"podTemplate": {"nodeSelecter": {"a": "b"}}}, "nodeSelecter"),
        ({"podTemplate": {"imagePullSecrets": ["regcred"]}}, "/podTemplate/imagePullSecrets/0"),
        ({"podTemplate": {"tolerations": [{"effect": "NoScheduling"}]}}, "effect"),
        ({"jobResources": {"limits": {"memory": "536870912"}}}, "/jobResources/limits/memory"),
        ({"extraEnv": [{"name": "A", "valu": "b"}]}, "valu"),
    ],
)
def test_wrong_values_are_refused(values: dict[str, Any], message: str) -> None:
    for command in (("template",), ("lint", "--strict")):
        args = [*command, "sg", str(CHART)] if command == ("template",) else [*command, str(CHART)]
        proc = helm(*args, *values_args(values), check=False)
        assert proc.returncode != 0, (command, values)
        assert message in proc.stdout + proc.stderr, (command, proc.stdout, proc.stderr)


def test_right_values_pass_lint_and_reach_the_operator() -> None:
    values = {
        "podTemplate": GOOD_TEMPLATE,
        "jobResources": {"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": 2}},
        "imagePullSecrets": [{"name": "regcred"}],
        "networkPolicy.redis.cidrs": ["10.0.0.0/8", "fd00::/8"],
        "resources": {"limits": {"memory": "256Mi", "cpu": "500m"}},
    }
    helm("lint", "--strict", str(CHART), *values_args(values))
    dep = find(render(values), "Deployment")[0]
    parsed = settings.Settings.from_env(env_of(dep, "mail"))
    assert parsed.pod_template is not None
    assert parsed.pod_template.model_dump(by_alias=True, exclude_none=True) == GOOD_TEMPLATE
    assert parsed.job_resources is not None
    assert parsed.job_resources.model_dump(by_alias=True, exclude_none=True) == {
        "requests": {"cpu": "50m", "memory": "64Mi"},
        # helm merges maps with the chart's defaults; the model holds quantities as strings
        "limits": {"cpu": "2", "memory": "512Mi"},
    }


def test_default_job_resources_have_a_cpu_limit() -> None:
    dep = find(render(), "Deployment")[0]
    parsed = settings.Settings.from_env(env_of(dep, "mail"))
    assert parsed.job_resources is not None and parsed.job_resources.limits is not None
    assert parsed.job_resources.limits["cpu"] == "1"
    assert parsed.pod_template is None
