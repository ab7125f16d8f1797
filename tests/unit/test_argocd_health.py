"""The ArgoCD health check of SendGroups (gitops/argocd/resource_customizations/sendgroups.io/
SendGroup/health.lua) run by Debian's Lua interpreters against the testdata, compared with
health_test.yaml (argo-cd's own layout and format for resource customizations). Most testdata
were captured from a real operator run (tests/cluster/test_argocd_health_capture.py); the few states
the cluster tier cannot reach say so in their first line. Every testdata object must fit the
CRD's schema, so the fixtures cannot drift from what the operator can write. Also: the argocd-cm
snippet is the script, and the sample Applications sync what they claim to."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sendgroup_operator import models
from tests.support.argocd import (
    CM_KEY,
    HEALTH_DIR,
    HEALTH_LUA,
    INTERPRETERS,
    OPEN_LIBS_KEY,
    run_health,
)

REPO = Path(__file__).resolve().parents[2]
TESTS: list[dict[str, Any]] = yaml.safe_load((HEALTH_DIR / "health_test.yaml").read_text())["tests"]
CRD = yaml.safe_load((REPO / "crds" / "sendgroups.yaml").read_text())
SCHEMA: dict[str, Any] = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
ARGO_HEALTH = {"Healthy", "Progressing", "Suspended", "Degraded", "Missing", "Unknown"}


def load(path: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((HEALTH_DIR / path).read_text())
    return data


@pytest.mark.parametrize("interpreter", INTERPRETERS)
@pytest.mark.parametrize("case", TESTS, ids=[Path(t["inputPath"]).stem for t in TESTS])
def test_health_of_each_testdata_object(case: dict[str, Any], interpreter: str) -> None:
    expected = case["healthStatus"]
    assert run_health(load(case["inputPath"]), interpreter) == (
        expected["status"],
        expected["message"],
    )


def test_every_testdata_file_has_an_expectation_and_every_outcome_is_covered() -> None:
    files = {f"testdata/{p.name}" for p in (HEALTH_DIR / "testdata").glob("*.yaml")}
    paths = [t["inputPath"] for t in TESTS]
    assert sorted(paths) == sorted(files)
    statuses = {t["healthStatus"]["status"] for t in TESTS}
    assert statuses <= ARGO_HEALTH
    assert statuses >= {"Healthy", "Progressing", "Suspended", "Degraded", "Unknown"}
    # The name says the expected status (argo-cd's convention), so a wrong expectation shows.
    for t in TESTS:
        assert Path(t["inputPath"]).stem.split("_")[0] == t["healthStatus"]["status"].lower()
    phases = {load(p).get("status", {}).get("phase") for p in paths}
    assert {p.value for p in models.Phase} <= phases, "a phase without testdata"


def test_most_testdata_were_captured_from_a_real_operator() -> None:
    first_lines = [(HEALTH_DIR / t["inputPath"]).read_text().splitlines()[0] for t in TESTS]
    captured = [line for line in first_lines if line.startswith("# Captured from a real operator")]
    derived = [line for line in first_lines if line.startswith("# Derived from testdata/")]
    assert len(captured) + len(derived) == len(TESTS), "each file says where it comes from"
    assert len(captured) >= 2 * len(derived)


def schema_errors(value: Any, schema: dict[str, Any], path: str = "") -> list[str]:
    """Where ``value`` breaks the CRD's structural schema: types, enums, required fields and
    fields the API server would prune (not declared). A subset of OpenAPI v3 validation,
    enough for objects the operator writes."""
    errors: list[str] = []
    if schema.get("x-kubernetes-int-or-string"):
        return [] if isinstance(value, int | str) else [f"{path}: int or string"]
    if "anyOf" in schema and "type" not in schema:
        return []
    kind = schema.get("type")
    checks = {
        "object": dict,
        "array": list,
        "string": str,
        "boolean": bool,
        "integer": int,
        "number": int | float,
    }
    if kind in checks and not isinstance(value, checks[kind]):
        return [f"{path}: expected {kind}, got {type(value).__name__}"]
    if kind == "integer" and isinstance(value, bool):
        return [f"{path}: expected integer, got bool"]
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if kind == "object":
        props = schema.get("properties")
        for req in schema.get("required", []):
            if req not in value:
                errors.append(f"{path}.{req}: required")
        for key, item in value.items():
            if props is not None and key in props:
                errors += schema_errors(item, props[key], f"{path}.{key}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += schema_errors(item, schema["additionalProperties"], f"{path}.{key}")
            elif props is not None and not schema.get("x-kubernetes-preserve-unknown-fields"):
                errors.append(f"{path}.{key}: not in the schema (pruned by the API server)")
    if kind == "array":
        for i, item in enumerate(value):
            errors += schema_errors(item, schema.get("items", {}), f"{path}[{i}]")
    return errors


def test_schema_checker_catches_what_the_api_server_would_refuse() -> None:
    good = load("testdata/suspended_paused.yaml")
    assert schema_errors(good, SCHEMA) == []
    bad = yaml.safe_load(yaml.safe_dump(good))
    bad["status"]["phase"] = "Sleeping"
    bad["status"]["queue"]["total"] = "many"
    bad["status"]["conditions"][0]["color"] = "red"
    del bad["spec"]["host"]
    assert len(schema_errors(bad, SCHEMA)) == 4


@pytest.mark.parametrize("case", TESTS, ids=[Path(t["inputPath"]).stem for t in TESTS])
def test_testdata_fit_the_crd_schema_and_the_models(case: dict[str, Any]) -> None:
    obj = load(case["inputPath"])
    assert (obj["apiVersion"], obj["kind"]) == (models.API_VERSION, models.KIND)
    status = obj.get("status") or {}
    if status.get("phase") not in (None, *(p.value for p in models.Phase)):
        status = {k: v for k, v in status.items() if k != "phase"}  # the "newer operator" case
        obj = {**obj, "status": status}
    assert schema_errors(obj, SCHEMA) == []
    models.SendGroup.model_validate(obj)


def test_the_argocd_cm_snippet_is_the_script() -> None:
    generated = subprocess.run(
        [str(REPO / "hack" / "argocd" / "render-argocd-cm")],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    committed = (REPO / "gitops" / "argocd" / "argocd-cm.yaml").read_text()
    assert committed == generated, (
        "gitops/argocd/argocd-cm.yaml is stale: "
        "hack/argocd/render-argocd-cm > gitops/argocd/argocd-cm.yaml"
    )
    cm = yaml.safe_load(committed)
    assert (cm["kind"], cm["metadata"]["name"]) == ("ConfigMap", "argocd-cm")
    assert cm["data"] == {CM_KEY: HEALTH_LUA.read_text(), OPEN_LIBS_KEY: "true"}


# --- the sample Applications --------------------------------------------------------------

APPS = {
    doc["metadata"]["name"]: doc
    for path in sorted((REPO / "examples" / "argocd").glob("*.yaml"))
    for doc in yaml.safe_load_all(path.read_text())
    if doc
}


def test_sample_applications_sync_the_chart_first_then_the_examples() -> None:
    operator, groups = APPS["sendgroup-operator"], APPS["sendgroups"]
    for app in (operator, groups):
        assert (app["apiVersion"], app["kind"]) == ("argoproj.io/v1alpha1", "Application")
        options = app["spec"]["syncPolicy"]["syncOptions"]
        assert "ServerSideApply=true" in options
        assert "ignoreDifferences" not in app["spec"], "the operator never writes spec"
    wave = "argocd.argoproj.io/sync-wave"
    assert int(operator["metadata"]["annotations"][wave]) < int(
        groups["metadata"]["annotations"][wave]
    )
    assert (REPO / operator["spec"]["source"]["path"] / "Chart.yaml").is_file()
    # The SendGroups Application takes examples/*.yaml (not demo/ or argocd/ below it).
    source = groups["spec"]["source"]
    directory = source["directory"]
    assert directory["recurse"] is False
    synced = sorted((REPO / source["path"]).glob(directory["include"]))
    assert [p.name for p in synced] == ["sendgroup-basic.yaml", "sendgroup-full.yaml"]
    assert "SkipDryRunOnMissingResource=true" in groups["spec"]["syncPolicy"]["syncOptions"]


def test_gitops_doc_names_the_files_the_key_and_every_health() -> None:
    doc = (REPO / "docs" / "gitops.md").read_text()
    for path in (
        "gitops/argocd/argocd-cm.yaml",
        "examples/argocd/sendgroup-operator.yaml",
        "examples/argocd/sendgroups.yaml",
        "hack/argocd/render-argocd-cm",
        "SENDGROUP_ARGOCD_CAPTURE",
    ):
        assert path in doc, path
    assert CM_KEY in doc
    table = [line for line in doc.splitlines() if line.startswith("| ")]
    documented = {line.split("|")[1].strip() for line in table}
    assert {t["healthStatus"]["status"] for t in TESTS} <= documented
