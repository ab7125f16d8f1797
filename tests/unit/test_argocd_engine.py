"""The SendGroup health check through ArgoCD itself: argo-cd v3.6.1's settings manager reads
``gitops/argocd/argocd-cm.yaml`` as the application controller reads its argocd-cm, and the
controller's health entry point (gitops-engine ``health.GetResourceHealth`` with
``lua.ResourceHealthOverrides``) evaluates every testdata object. The harness is a small Go
program (``hack/argocd/harness``) built and cached by ``hack/argocd/build`` (``hack/test`` runs
it before pytest); ``SENDGROUP_ARGOCD_HEALTH`` names another build.

Unlike ``test_argocd_health.py`` (Debian's Lua with its full standard library) this sees what
ArgoCD really gives a script: no ``string``/``math`` unless argocd-cm opens them, and its own
answer for an object being deleted unless the script returns ``deletionMessage``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.argocd import HEALTH_DIR, OPEN_LIBS_KEY
from tests.support.tools import cached_tool

REPO = Path(__file__).resolve().parents[2]
ARGOCD_CM = REPO / "gitops" / "argocd" / "argocd-cm.yaml"
TESTS: list[dict[str, Any]] = yaml.safe_load((HEALTH_DIR / "health_test.yaml").read_text())["tests"]


def harness() -> Path:
    return cached_tool(
        "argocd-health",
        "SENDGROUP_ARGOCD_HEALTH",
        REPO / "hack" / "argocd" / "build",
        "the ArgoCD health harness is not built: run hack/argocd/build (hack/test does it)",
    )


def evaluate(cm: Path) -> dict[str, dict[str, str]]:
    """``{inputPath: {status, message, error}}`` of every testdata object, as ArgoCD sees it."""
    paths = [str(HEALTH_DIR / t["inputPath"]) for t in TESTS]
    proc = subprocess.run(
        [str(harness()), "-cm", str(cm), *paths],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, f"argocd-health failed ({proc.returncode}):\n{proc.stderr}"
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["path"] for r in results] == paths
    return {t["inputPath"]: r for t, r in zip(TESTS, results, strict=True)}


@pytest.fixture(scope="module")
def shipped() -> dict[str, dict[str, str]]:
    return evaluate(ARGOCD_CM)


@pytest.mark.parametrize("case", TESTS, ids=[Path(t["inputPath"]).stem for t in TESTS])
def test_argocd_gives_each_testdata_object_its_expected_health(
    case: dict[str, Any], shipped: dict[str, dict[str, str]]
) -> None:
    got = shipped[case["inputPath"]]
    assert got["error"] == "", f"ArgoCD could not run the script: {got['error']}"
    assert (got["status"], got["message"]) == (
        case["healthStatus"]["status"],
        case["healthStatus"]["message"],
    )


def test_without_open_libs_argocd_shows_what_to_set(tmp_path: Path) -> None:
    """An argocd-cm that drops the useOpenLibs key (as main's did) gets, on every object, an
    Unknown health that names the key, not a Lua error; a deleting object gets ArgoCD's own
    answer (the script stops before it sets deletionMessage)."""
    cm = yaml.safe_load(ARGOCD_CM.read_text())
    del cm["data"][OPEN_LIBS_KEY]
    stripped = tmp_path / "argocd-cm.yaml"
    stripped.write_text(yaml.safe_dump(cm))
    for path, got in evaluate(stripped).items():
        assert got["error"] == "", path
        if path.endswith("progressing_deleting.yaml"):
            assert (got["status"], got["message"]) == (
                "Progressing",
                "Pending deletion; blocked by finalizers: sendgroups.io/finalizer",
            )
        else:
            assert got["status"] == "Unknown", path
            assert OPEN_LIBS_KEY in got["message"], path


def test_argocd_refuses_a_bad_open_libs_value(tmp_path: Path) -> None:
    """The harness goes through ArgoCD's settings parser: a value it refuses fails the load."""
    cm = yaml.safe_load(ARGOCD_CM.read_text())
    cm["data"][OPEN_LIBS_KEY] = "yes please"
    bad = tmp_path / "argocd-cm.yaml"
    bad.write_text(yaml.safe_dump(cm))
    proc = subprocess.run(
        [str(harness()), "-cm", str(bad), str(HEALTH_DIR / TESTS[0]["inputPath"])],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1
    assert "ArgoCD refuses the ConfigMap" in proc.stderr
    assert "invalid syntax" in proc.stderr
