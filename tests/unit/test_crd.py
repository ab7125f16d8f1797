"""The CRD is generated from the pydantic models: no drift, and the contract's names are there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import pytest
import yaml

from sendgroup_operator import crdgen, models

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "sendgroups.yaml"


def _crd() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(CRD_PATH.read_text())
    return data


def _rules(node: dict[str, Any]) -> list[str]:
    return [r["rule"] for r in node.get("x-kubernetes-validations", [])]


def test_committed_crd_is_what_the_models_generate() -> None:
    assert CRD_PATH.read_text() == crdgen.render(), (
        "crds/sendgroups.yaml is stale: run "
        "`.venv/bin/python -m sendgroup_operator.crdgen > crds/sendgroups.yaml`"
    )


def test_names_and_subresources_as_in_api_md() -> None:
    spec = _crd()["spec"]
    assert spec["group"] == "sendgroups.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["sg"]
    assert spec["names"]["categories"] == ["mail"]
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    columns = [
        (c["name"].upper(), c.get("priority", 0)) for c in version["additionalPrinterColumns"]
    ]
    assert columns == [
        ("CAMPAIGN", 0),
        ("HOST", 0),
        ("WORKERS", 0),
        ("PHASE", 0),
        ("QUEUE", 0),
        ("PROGRESS", 0),
        ("OLDEST", 0),
        ("AGE", 0),
        ("FAILED", 1),
        ("PAUSED", 1),
        ("DUMPED", 1),
    ]


def test_defaults_match_api_md() -> None:
    props = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
        "properties"
    ]
    assert props["workers"]["default"] == 1
    assert props["workers"]["maximum"] == models.MAX_WORKERS_PER_GROUP_DEFAULT
    assert props["paused"]["default"] is False
    assert props["state"]["default"] == "Active"
    assert props["state"]["enum"] == ["Active", "Completed", "Cancelled"]
    assert props["deletionPolicy"]["default"] == "Purge"
    worker = props["worker"]["properties"]
    assert (worker["tries"]["default"], worker["timeout"]["default"]) == (3, 60)
    assert worker["retryAfter"]["default"] == 90
    assert worker["backoff"]["default"] == [10, 60, 300]
    assert props["reaper"]["properties"]["idleAfter"]["default"] == "30m"
    assert props["reaper"]["properties"]["dumpAfter"]["default"] == "30m"
    assert props["backpressure"]["properties"]["suspendFor"]["default"] == "10m"
    assert props["worker"]["default"] == {
        "runtime": "python",
        "tries": 3,
        "backoff": [10, 60, 300],
        "timeout": 60,
        "retryAfter": 90,
    }
    assert props["reaper"]["default"] == {"idleAfter": "30m", "dumpAfter": "30m"}
    # The same defaults come out of the model for a minimal object.
    spec = models.SendGroupSpec.model_validate({"campaign": "c", "host": "gmail.com"})
    assert (spec.workers, spec.worker.timeout, spec.worker.retry_after) == (1, 60, 90)
    assert spec.reaper.idle_after == "30m" and spec.queue_name("g1") == "mail-g1"


def test_cel_rules_present() -> None:
    schema = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    props = schema["properties"]
    assert "self.timeout < self.retryAfter" in _rules(props["worker"])
    assert "self == oldSelf" in _rules(props["queue"])
    assert "oldSelf.state != 'Cancelled' || self.state == 'Cancelled'" in _rules(schema)
    assert any("matches" in r for r in _rules(props["reaper"]["properties"]["idleAfter"]))
    assert any("@" in r for r in _rules(props["redis"]["properties"]["url"]))
    messages = [
        m["message"] for m in props["redis"]["properties"]["url"]["x-kubernetes-validations"]
    ]
    assert any("redis.secretRef" in m for m in messages)


def test_structural_schema_has_no_refs_or_unions() -> None:
    text = CRD_PATH.read_text()
    assert "$ref" not in text and "$defs" not in text and "type: 'null'" not in text

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            if "properties" in node or "items" in node:
                assert "type" in node, f"untyped node at {path}"
            if "anyOf" in node:
                assert node.get("x-kubernetes-int-or-string"), f"union at {path}"
            for k, v in node.items():
                walk(v, f"{path}.{k}")
        elif isinstance(node, list):
            for i, v in enumerate(node):
                walk(v, f"{path}[{i}]")

    walk(_crd()["spec"]["versions"][0]["schema"], "schema")


def test_a_backpressure_pattern_that_does_not_compile_is_refused_by_the_model() -> None:
    """Kubernetes' CEL cannot check Python regex syntax, so the operator's model does: the
    group gets an InvalidSpec event instead of workers exiting on the pattern."""
    base = {"campaign": "c", "host": "gmail.com"}
    ok = models.SendGroupSpec.model_validate({**base, "backpressure": {"patterns": [r"^421 .*"]}})
    assert ok.backpressure is not None and ok.backpressure.patterns == [r"^421 .*"]
    with pytest.raises(
        pydantic.ValidationError, match=r"patterns\[1\]: '\(unclosed' is not an RE2"
    ):
        models.SendGroupSpec.model_validate(
            {**base, "backpressure": {"patterns": ["fine", "(unclosed"]}}
        )
