"""The chart's default ClusterSendProviders: valid against the API models, every value
commented with its source, no overlapping claims among them; rendered by the chart and turned
off by its values switch."""

from __future__ import annotations

import re
from typing import Any

import yaml

from sendgroup_operator import provider_plan
from sendgroup_operator.provider_models import SendProvider, SendProviderSpec, check_pattern
from tests.support.helm import CHART, find, render

FILE = CHART / "files" / "default-providers.yaml"


def _providers() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(FILE.read_text())["providers"]
    return data


def test_defaults_are_valid_specs_with_re2_patterns_and_no_overlaps() -> None:
    providers = _providers()
    assert {"google", "microsoft-consumer", "microsoft-365", "yahoo-aol", "apple"} <= set(providers)
    objs = []
    for name, raw in providers.items():
        spec = SendProviderSpec.model_validate(raw)  # RE2 syntax checked by the model too
        assert spec.rate is not None and spec.concurrency is not None, name
        for rule in spec.pushback.rules:
            assert rule.pattern is None or check_pattern(rule.pattern) is None
        objs.append(
            SendProvider.model_validate(
                {"kind": "ClusterSendProvider", "metadata": {"name": name}, "spec": raw}
            )
        )
    assert provider_plan.overlapping_claims(objs) == {}


def test_every_value_is_commented_with_its_source_or_marked_ours() -> None:
    """Each domains/mxSuffixes/rate/concurrency line and each rule is preceded by a comment
    that says where the value comes from ("Source: ...") or that it is ours ("Ours: ...")."""
    lines = FILE.read_text().splitlines()
    keyed = re.compile(r"^\s+(domains|mxSuffixes|rate|concurrency|- name):")
    missing = []
    for i, line in enumerate(lines):
        if not keyed.match(line):
            continue
        j = i - 1
        comment: list[str] = []
        while j >= 0 and lines[j].strip().startswith("#"):
            comment.insert(0, lines[j].strip())
            j -= 1
        text = " ".join(comment)
        if "Source:" not in text and "Ours" not in text:
            missing.append(f"line {i + 1}: {line.strip()}")
    assert not missing, "values without a source comment:\n" + "\n".join(missing)


def test_the_chart_renders_them_and_the_switch_turns_them_off() -> None:
    objs = find(render(), "ClusterSendProvider")
    assert sorted(o["metadata"]["name"] for o in objs) == sorted(_providers())
    google = next(o for o in objs if o["metadata"]["name"] == "google")
    assert google["spec"] == _providers()["google"]
    assert google["metadata"]["labels"]["app.kubernetes.io/component"] == "provider"
    assert find(render({"defaultProviders.enabled": False}), "ClusterSendProvider") == []
    left = find(render({"defaultProviders.exclude": ["yandex", "mailru"]}), "ClusterSendProvider")
    assert {"yandex", "mailru"}.isdisjoint(o["metadata"]["name"] for o in left)
