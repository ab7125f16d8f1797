"""Paths of the tools the tests run that the project builds or fetches into its cache
(helm, promtool): an environment variable overrides; else the tool's ``hack/.../build --path``
prints the cached binary."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path


def cached_tool(name: str, env: str, build_script: Path, missing: str) -> Path:
    """``$env`` when set, else the path ``build_script --path`` prints (its last line).

    Raises AssertionError with ``missing`` (what to run), the override variable for ``name``
    and the script's stderr when the tool is not there: a test that needs it fails saying why.
    """
    if os.environ.get(env):
        return Path(os.environ[env])
    proc = subprocess.run(
        [str(build_script), "--path"], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0:
        raise AssertionError(f"{missing}, or set {env}=/path/to/{name}\n{proc.stderr}")
    return Path(proc.stdout.strip().splitlines()[-1])
