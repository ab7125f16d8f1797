"""requirements.lock: the one lock file of every Python install (hack/bootstrap, both images),
and hack/lock/lockfile.py, which picks each image's part of it."""

from __future__ import annotations

import functools
import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
LOCK = ROOT / "requirements.lock"
PYPROJECT = ROOT / "pyproject.toml"
UPDATE = "hack/lock/update"


@functools.cache
def lockfile() -> ModuleType:
    """hack/lock/lockfile.py as a module (it is a script, not part of a package)."""
    path = ROOT / "hack" / "lock" / "lockfile.py"
    spec = importlib.util.spec_from_file_location("sendgroup_lockfile", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def pinned() -> dict[str, str]:
    """Normalized name -> pinned version, from the lock."""
    lf = lockfile()
    out = {}
    for name, entry in lf.parse(LOCK.read_text()).items():
        out[name] = entry.lines[0].split("==", 1)[1].split()[0].split(";")[0]
    return out


def all_requirements() -> list[str]:
    data = tomllib.loads(PYPROJECT.read_text())
    project = data["project"]
    reqs = list(project["dependencies"]) + list(data["build-system"]["requires"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    return reqs


@pytest.mark.parametrize("requirement", all_requirements())
def test_every_requirement_of_pyproject_is_pinned_within_its_range(requirement: str) -> None:
    req = Requirement(requirement)
    versions = pinned()
    name = lockfile().normalize(req.name)
    assert name in versions, f"{req.name} is not in requirements.lock: run {UPDATE}"
    assert req.specifier.contains(versions[name], prereleases=True), (
        f"requirements.lock pins {name}=={versions[name]}, pyproject.toml asks {requirement}: "
        f"run {UPDATE}"
    )


def test_every_entry_has_hashes() -> None:
    for name, entry in lockfile().parse(LOCK.read_text()).items():
        hashes = [line for line in entry.lines if "--hash=sha256:" in line]
        assert hashes, f"{name} has no --hash in requirements.lock"


def select(*args: str) -> set[str]:
    lf = lockfile()
    extras = [a for a in args if a != "--build"]
    chosen = lf.select(lf.parse(LOCK.read_text()), lf.roots(PYPROJECT, extras, "--build" in args))
    return {entry.name for entry in chosen}


def test_worker_image_part_has_its_dependencies_and_nothing_of_the_other_extras() -> None:
    worker = select("--build")
    assert {"redis", "hiredis", "pydantic", "pydantic-core", "click", "setuptools"} <= worker
    assert not {"kopf", "kubernetes", "pytest", "mypy", "ruff", "uv", "aiosmtpd"} & worker


def test_operator_image_part_adds_the_operator_extra_only() -> None:
    operator = select("operator", "--build")
    assert select("--build") < operator
    assert {"kopf", "kubernetes", "pyyaml", "aiohttp", "urllib3"} <= operator
    assert not {"pytest", "mypy", "ruff", "uv", "aiosmtpd", "types-redis"} & operator


def test_render_without_markers_keeps_hashes_and_drops_windows_only_entries() -> None:
    lf = lockfile()
    entries = lf.parse(LOCK.read_text())
    chosen = lf.select(entries, lf.roots(PYPROJECT, ["operator"], True))
    text = lf.render(chosen, markers=False)
    assert ";" not in "".join(line for line in text.splitlines() if "==" in line)
    assert "colorama" not in text
    assert text.count("==") == len([e for e in chosen if "win32" not in e.marker])
    assert text.count("--hash=sha256:") >= text.count("==")


def test_unknown_root_fails_naming_the_update_command() -> None:
    lf = lockfile()
    with pytest.raises(SystemExit, match="hack/lock/update"):
        lf.select(lf.parse(LOCK.read_text()), ["no-such-package"])
