"""spec.podTemplate refuses what the API server refuses in the worker Deployment's and the Jobs'
pod template (found by a new user: nodeSelector {'bad key!!': v} and a toleration with
operator Exists and a value passed, then every apply of the Deployment was refused). The CRD
side and the agreement with the API server: tests/cluster/test_spec_grammar_agreement.py."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from sendgroup_operator import models


def _refusal(template: dict[str, Any]) -> str | None:
    try:
        models.PodTemplateSpec.model_validate(template)
    except pydantic.ValidationError as exc:
        return str(exc)
    return None


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ({"nodeSelector": {"bad key!!": "v"}}, "podTemplate.nodeSelector: key 'bad key!!'"),
        ({"nodeSelector": {"disk": "a b"}}, "podTemplate.nodeSelector.disk: value 'a b'"),
        ({"nodeSelector": {"Example.com/disk": "ssd"}}, "qualified name"),
        ({"nodeSelector": {"p" * 254 + "/disk": "ssd"}}, "qualified name"),
        ({"metadata": {"labels": {"job-name": "x"}}}, "Job's own pod label"),
        ({"metadata": {"labels": {"k": "v" * 64}}}, "podTemplate.metadata.labels.k: value"),
        ({"metadata": {"annotations": {"a/b/c": "x"}}}, "podTemplate.metadata.annotations"),
        (
            {"metadata": {"annotations": {"controller.kubernetes.io/pod-deletion-cost": "1"}}},
            "is a pod setting",
        ),
        ({"tolerations": [{"operator": "Exists", "value": "x"}]}, "Exists must have no value"),
        ({"tolerations": [{"key": "", "operator": "Equal"}]}, "without key must have operator"),
        ({"tolerations": [{"value": "x"}]}, "without key must have operator Exists"),
        ({"tolerations": [{"key": "bad key", "operator": "Exists"}]}, "key 'bad key'"),
        ({"tolerations": [{"key": "k", "value": "a b"}]}, "tolerations.0.value"),
        ({"tolerations": [{"key": "k", "tolerationSeconds": 30}]}, "needs effect NoExecute"),
        (
            {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z"}] * 2},
            "at most one constraint per topologyKey and whenUnsatisfiable",
        ),
        (
            {
                "topologySpreadConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": "z",
                        "minDomains": 2,
                        "whenUnsatisfiable": "ScheduleAnyway",
                    }
                ]
            },
            "minDomains needs whenUnsatisfiable DoNotSchedule",
        ),
        (
            {
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "z", "matchLabelKeys": ["a b"]}
                ]
            },
            "matchLabelKeys 'a b'",
        ),
    ],
)
def test_refused_with_the_field_named(template: dict[str, Any], message: str) -> None:
    refusal = _refusal(template)
    assert refusal is not None and message in refusal, refusal


@pytest.mark.parametrize(
    "template",
    [
        {"nodeSelector": {"kubernetes.io/hostname": "node-1", "disk": ""}},
        {"nodeSelector": {"p" * 253 + "/" + "k" * 63: "v" * 63}},
        {"metadata": {"labels": {"example.com/tier": "bulk"}}},
        {"metadata": {"annotations": {"Example.com/Note": "any text\n"}}},
        {"tolerations": [{"operator": "Exists"}, {"operator": "Exists", "value": ""}]},
        {"tolerations": [{"key": "dedicated", "value": "mail", "effect": "NoSchedule"}]},
        {"tolerations": [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 300}]},
        {
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "zone", "minDomains": 2},
                {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"},
            ]
        },
        # the API server checks only that a topologyKey is set (v1.37.2)
        {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "not a label key"}]},
    ],
)
def test_accepted(template: dict[str, Any]) -> None:
    assert _refusal(template) is None


def test_qualified_name_is_read_as_re2_reads_it() -> None:
    """A trailing newline (Python's ``$``) and a non-ASCII letter are refused, as RE2 does."""
    assert models.is_qualified_name("kubernetes.io/hostname")
    assert not models.is_qualified_name("app\n")
    assert not models.is_qualified_name("\u212aey")  # KELVIN SIGN, lower-cases to "k"
    assert models.is_label_value("") and not models.is_label_value("v\n")
