"""The SendProvider / ClusterSendProvider CRDs are generated from the provider models: no drift,
the contract's names (providers.md), and rules whose messages name the rule."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from sendgroup_operator import crdgen, models, provider_models

ROOT = Path(__file__).resolve().parents[2]


def _crd(plural: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "crds" / f"{plural}.yaml").read_text())
    return data


def _spec_schema(plural: str) -> dict[str, Any]:
    version = _crd(plural)["spec"]["versions"][0]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


@pytest.mark.parametrize("plural", crdgen.CRDS)
def test_committed_crds_are_what_the_models_generate(plural: str) -> None:
    path = ROOT / "crds" / f"{plural}.yaml"
    assert path.read_text() == crdgen.render(plural), (
        f"crds/{plural}.yaml is stale: run "
        f"`.venv/bin/python -m sendgroup_operator.crdgen {plural} > crds/{plural}.yaml` "
        "and copy it to helm/sendgroup-operator/crds/"
    )


@pytest.mark.parametrize(
    ("plural", "kind", "scope", "short"),
    [
        ("sendproviders", "SendProvider", "Namespaced", ["sp"]),
        ("clustersendproviders", "ClusterSendProvider", "Cluster", ["csp"]),
    ],
)
def test_names_scope_and_status(plural: str, kind: str, scope: str, short: list[str]) -> None:
    spec = _crd(plural)["spec"]
    assert spec["group"] == "sendgroups.io"
    assert (spec["names"]["kind"], spec["scope"], spec["names"]["shortNames"]) == (
        kind,
        scope,
        short,
    )
    version = spec["versions"][0]
    assert version["subresources"] == {"status": {}}
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"groups", "effectiveRate", "shares", "activeRules", "conditions"} <= set(status)
    assert set(status["activeRules"]["items"]["properties"]) >= {
        "rule",
        "since",
        "until",
        "reply",
        "action",
    }
    props = _spec_schema(plural)["properties"]
    assert set(props) == {"match", "rate", "concurrency", "redis", "pushback", "shareBy"}
    assert props["shareBy"]["enum"] == ["Namespace", "Group"]
    assert props["shareBy"]["default"] == "Namespace"
    assert set(props["match"]["properties"]) == {"domains", "mxSuffixes"}


def test_rules_carry_messages_that_name_the_rule() -> None:
    rule = _spec_schema("clustersendproviders")["properties"]["pushback"]["properties"]["rules"]
    assert rule["x-kubernetes-list-type"] == "map"
    assert rule["x-kubernetes-list-map-keys"] == ["name"]
    item = rule["items"]
    messages = [v["message"] for v in item["x-kubernetes-validations"]]
    assert any("(rule: a rule matches replies)" in m for m in messages)
    trigger = [v["message"] for v in item["properties"]["trigger"]["x-kubernetes-validations"]]
    assert any("(rule: one trigger)" in m for m in trigger)
    assert any("(rule: count within window)" in m for m in trigger)
    action = [v["message"] for v in item["properties"]["action"]["x-kubernetes-validations"]]
    assert any("(rule: one action)" in m for m in action)
    assert item["properties"]["action"]["properties"]["scaleRate"]["maximum"] == 99


def test_sendgroup_spec_has_provider_priority_and_weight() -> None:
    props = yaml.safe_load((ROOT / "crds" / "sendgroups.yaml").read_text())["spec"]["versions"][0][
        "schema"
    ]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert props["provider"]["properties"]["kind"]["enum"] == [
        "SendProvider",
        "ClusterSendProvider",
    ]
    assert props["priority"]["enum"] == ["high", "normal"]
    assert props["priority"]["default"] == "normal"
    assert (props["weight"]["default"], props["weight"]["minimum"]) == (1, 1)
    spec = models.SendGroupSpec.model_validate(
        {"campaign": "c", "host": "gmail.com", "provider": {"name": "google"}}
    )
    assert spec.provider is not None and spec.provider.kind == "ClusterSendProvider"


def test_a_pattern_re2_refuses_is_refused_by_the_model_with_re2s_reason() -> None:
    """CEL cannot check RE2 syntax; the operator's model does, with the library the workers
    match with. A backreference is fine for Python's re but not RE2 (no backtracking)."""
    base = {
        "name": "r",
        "trigger": {"immediate": True},
        "action": {"suspend": True},
        "duration": "10m",
    }
    ok = provider_models.PushbackRule.model_validate({**base, "pattern": "(?i)unusual rate"})
    assert ok.pattern == "(?i)unusual rate"
    with pytest.raises(pydantic.ValidationError, match=r"is not an RE2 regular") as refused:
        provider_models.PushbackRule.model_validate({**base, "pattern": r"(a)\1"})
    assert "invalid escape sequence: \\1" in str(refused.value)  # RE2's text, not b'...'
    assert "b'" not in str(refused.value)
    assert provider_models.check_pattern("(?=lookahead)") is not None
    action = provider_models.PushbackAction.model_validate({"scaleRate": 20})
    assert action.describe() == "ScaleRate(20%)"


#: A valid pushback rule the duration tests change one field of.
_RULE: dict[str, Any] = {
    "name": "r",
    "codes": [421],
    "trigger": {"immediate": True},
    "action": {"suspend": True},
    "duration": "10m",
}


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"duration": "0s"}, "duration"),
        ({"duration": "00m0h"}, "duration"),
        ({"recovery": {"every": "0m"}}, "every"),
        ({"trigger": {"count": 3, "window": "0s"}}, "window"),
    ],
)
def test_a_zero_duration_is_refused_by_the_model_as_by_the_crd(
    change: dict[str, Any], field: str
) -> None:
    """Review finding: `0s` passed the CRD and the model, the worker refused it (gt 0) and every
    worker of the provider's groups exited. The CRD now refuses it (CEL, checked against the
    API server in tests/cluster/test_providers.py) and the model the same way."""
    base = dict(_RULE)
    with pytest.raises(pydantic.ValidationError, match=r"must be longer than 0s") as info:
        provider_models.PushbackRule.model_validate({**base, **change})
    assert field in str(info.value)
    kept = provider_models.PushbackRule.model_validate({**base, "duration": "0s1m"})
    assert kept.duration == "0s1m"  # a zero part is fine when the whole is not zero
    assert "(rule: duration above zero)" in _crd("sendproviders").__repr__()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"duration": "10000000d"}, "duration"),
        ({"duration": "36501d"}, "duration"),
        ({"recovery": {"every": "876001h"}}, "every"),
        ({"trigger": {"count": 3, "window": "99999999999m"}}, "window"),
    ],
)
def test_a_duration_above_36500_days_is_refused_by_the_model_as_by_the_crd(
    change: dict[str, Any], field: str
) -> None:
    """Review finding: `duration: 10000000d` passed the CRD, then the operator's status pass
    failed every second (year out of range). The CRD caps every duration at 36500 days (CEL rule
    `duration at most 36500d`, from sendgroup_contract.durations.CAP_CEL) and the model the
    same way; a SendGroup's durations too."""
    base = dict(_RULE)
    with pytest.raises(pydantic.ValidationError, match=r"at most 36500d") as info:
        provider_models.PushbackRule.model_validate({**base, **change})
    assert field in str(info.value)
    assert provider_models.PushbackRule.model_validate({**base, "duration": "36500d"})
    for plural in crdgen.CRDS:
        assert "(rule: duration at most 36500d)" in repr(_crd(plural))
    group = {"campaign": "c", "host": "gmail.com"}
    for spec in (
        {**group, "reaper": {"idleAfter": "10000000d"}},
        {**group, "reaper": {"dumpAfter": "36501d"}},
        {**group, "backpressure": {"suspendFor": "900000h"}},
    ):
        with pytest.raises(pydantic.ValidationError, match=r"at most 36500d"):
            models.SendGroupSpec.model_validate(spec)
