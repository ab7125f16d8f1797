"""The layer contracts of ``.importlinter`` hold, and they catch a transitive violation.

``lint-imports`` also runs in ``.ci/run``; this test makes ``hack/test`` fail on a broken
contract too, and shows that the contracts can fail at all: it injects one import into a copy
of the packages and expects the contracts it breaks to be reported BROKEN.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
PACKAGES = {
    "sendgroup_contract": ROOT / "contract" / "sendgroup_contract",
    "sendgroup_worker": ROOT / "worker_image" / "sendgroup_worker",
    "sendgroup_operator": ROOT / "operator" / "sendgroup_operator",
}


def _lint(env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    assert LINT_IMPORTS.exists(), f"{LINT_IMPORTS} missing: run hack/bootstrap (import-linter)"
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(ROOT / ".importlinter")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_every_layer_contract_is_kept() -> None:
    result = _lint()
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_a_transitive_redis_import_breaks_the_planner_and_contract_layers(tmp_path: Path) -> None:
    for name, folder in PACKAGES.items():
        shutil.copytree(folder, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    # plan -> sendgroup_contract.measure -> timestamps -> (injected) the worker's queue client
    # -> redis: two modules away from the planner, and out of the contract package.
    victim = tmp_path / "sendgroup_contract" / "timestamps.py"
    victim.write_text(victim.read_text() + "\nimport sendgroup_worker.queue.client  # noqa\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}

    result = _lint(env)

    out = result.stdout
    assert result.returncode != 0, out
    assert "redis BROKEN" in out.replace("\n", " ")  # the planner contract's name ends so
    assert "The contract imports no I/O library and nothing else of ours BROKEN" in out
    assert "sendgroup_operator.plan.types -> sendgroup_contract.measure" in out
    assert "2 broken" in out


# --- the same contracts, checked on a real interpreter ---------------------------------------
#
# import-linter reads import statements; it does not see that importing ``a.b.c`` first runs
# the package ``a.b``'s ``__init__``. That is how the planner used to load redis (plan ->
# models -> sendgroup_worker.queue.keys, whose package __init__ imported the client). So each
# forbidden contract of .importlinter is also checked by importing every source module (and its
# submodules) in a fresh interpreter and looking at ``sys.modules``.

_PROBE = """
import importlib, json, pkgutil, sys
sources, forbidden = json.loads(sys.argv[1])
names = []
for name in sources:
    module = importlib.import_module(name)
    names.append(name)
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), name + "."):
        if info.name.endswith("__main__"):
            continue
        importlib.import_module(info.name)
        names.append(info.name)
loaded = [f for f in forbidden if any(m == f or m.startswith(f + ".") for m in sys.modules)]
print(json.dumps({"imported": names, "loaded": loaded}))
"""


def _forbidden_contracts() -> list[tuple[str, list[str], list[str]]]:
    parser = configparser.ConfigParser()
    parser.read(ROOT / ".importlinter")
    out = []
    for section in parser.sections():
        if parser.get(section, "type", fallback="") != "forbidden":
            continue
        sources = parser.get(section, "source_modules").split()
        forbidden = parser.get(section, "forbidden_modules").split()
        out.append((parser.get(section, "name"), sources, forbidden))
    return out


@pytest.mark.parametrize(
    ("name", "sources", "forbidden"), _forbidden_contracts(), ids=lambda v: str(v)[:40]
)
def test_forbidden_contracts_hold_at_run_time(
    name: str, sources: list[str], forbidden: list[str]
) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, json.dumps([sources, forbidden])],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["imported"], f"{name}: no module imported"
    assert not report["loaded"], f"{name}: importing {sources} loads {report['loaded']}"
