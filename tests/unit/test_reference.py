"""docs/reference.md is generated from the CRD and the settings: no drift, nothing undocumented."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from sendgroup_operator import crdgen, refgen, settings

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "reference.md"
CHART = ROOT / "helm" / "sendgroup-operator"


def test_committed_reference_is_what_the_generator_writes() -> None:
    assert REFERENCE.read_text() == refgen.render(), (
        f"docs/reference.md is stale: run `{refgen.REGENERATE}`"
    )


def _fields(node: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for name, child in node.get("properties", {}).items():
        yield f"{path}.{name}", child
        yield from _fields(child, f"{path}.{name}")
        items = child.get("items")
        if isinstance(items, dict):
            yield from _fields(items, f"{path}.{name}[]")


def test_every_spec_and_status_field_is_described_and_listed() -> None:
    schema = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    text = REFERENCE.read_text()
    fields = [*_fields(schema["spec"], "spec"), *_fields(schema["status"], "status")]
    assert len(fields) > 80, "the walk found too few fields: the CRD layout changed?"
    undescribed = [path for path, node in fields if not node.get("description")]
    assert not undescribed, (
        f"fields without a description (give the model attribute a docstring): {undescribed}"
    )
    missing = [path for path, _ in fields if f"| `{path}` |" not in text]
    assert not missing, f"fields missing from docs/reference.md: {missing}"
    # A value a user checks: the rule users break most often is there with its message.
    assert "`self.timeout < self.retryAfter`: worker.timeout must be less than" in text


#: A raw value per field type that differs from every default (and is valid).
_RAW: dict[str, str] = {
    "str": "x-test",
    "int": "7",
    "float": "7",
    "bool": "true",
    "int | None": "7",
    "str | None": "x-test",
    "tuple[str, ...]": "ns-a,ns-b",
    "models.PodTemplateSpec | None": '{"priorityClassName": "x-test"}',
    "models.ResourceRequirements | None": '{"limits": {"cpu": "1"}}',
}


def test_each_setting_is_read_from_the_variable_it_documents() -> None:
    """Setting the documented variable changes exactly that field (so the env names in
    docs/reference.md are the ones from_env reads)."""
    default = settings.Settings()
    for field in dataclasses.fields(settings.Settings):
        meta = field.metadata
        assert meta.get("env") and meta.get("doc"), f"Settings.{field.name}: no env/doc metadata"
        raw = {
            "default_smtp_tls": "tls",
            "default_redis_url": "redis+cluster://r1,r2/",
            "default_redis_secret": "redis-default/url",
            "dump_signing_secret": "dump-key/key",
            "queue_name_policy": "namespace",
            "redis_client_tracking": "false",  # true is the default
        }.get(field.name, _RAW[str(field.type)])
        read = settings.Settings.from_env({meta["env"]: raw})
        changed = [
            f.name
            for f in dataclasses.fields(settings.Settings)
            if getattr(read, f.name) != getattr(default, f.name)
        ]
        assert changed == [field.name], f"{meta['env']}={raw} changed {changed}"


def test_documented_helm_values_exist_and_set_the_variable() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    deployment = (CHART / "templates" / "deployment.yaml").read_text()
    documented = [
        (f.metadata["env"], f.metadata["value"]) for f in dataclasses.fields(settings.Settings)
    ]
    documented += [(env, value) for env, value, _, _ in settings.PROCESS_ENV]
    for env, value in documented:
        if not value:
            continue
        node: Any = values
        for part in value.removesuffix(".*").split("."):
            assert isinstance(node, dict) and part in node, f"{env}: no Helm value {value}"
            node = node[part]
        assert f"- name: {env}\n" in deployment, f"the chart does not set {env}"


def test_process_variables_are_read_by_the_operator() -> None:
    source = "".join(
        (ROOT / "operator" / "sendgroup_operator" / name).read_text()
        for name in ("__main__.py", "startup.py")
    )
    for env, _, default, _ in settings.PROCESS_ENV:
        assert f'"{env}"' in source, f"{env} is documented but not read"
        assert default in source or default == "false", f"{env}: default {default} not in code"


def test_api_md_names_every_spec_and_status_field() -> None:
    """The contract (docs/api.md) names every top-level field and its direct children, so a
    field added to the models without a word in the contract fails here. ``status.operation``'s
    children are the operator's bookkeeping, named there only as a whole."""
    api = (ROOT / "docs" / "api.md").read_text()
    schema = crdgen.crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    missing = []
    for part in ("spec", "status"):
        for name, node in schema[part]["properties"].items():
            children = [] if name == "operation" else list(node.get("properties", {}))
            for path in [name, *(f"{name}.{child}" for child in children)]:
                if f"`{path}" not in api:
                    missing.append(f"{part}.{path}")
    assert not missing, f"docs/api.md does not mention: {missing}"
