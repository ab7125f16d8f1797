"""The Helm chart (``helm/sendgroup-operator``) and the helm binary for tests.

helm is built from its Go module by ``hack/helm/build`` (``hack/test`` runs it before pytest);
``SENDGROUP_HELM`` names another helm binary. Helpers:

- :func:`helm_bin`: the binary's path (AssertionError saying how to build it when missing).
- :func:`helm`: run it (text output; AssertionError with stdout/stderr on failure).
- :func:`render`: ``helm template`` with values, parsed into a list of objects.
- :func:`find`: the objects of one kind (and name) in a rendered list.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.support.tools import cached_tool

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "sendgroup-operator"
BUILD_SCRIPT = REPO / "hack" / "helm" / "build"
HELM_ENV = "SENDGROUP_HELM"


def helm_bin() -> Path:
    """Path of the helm binary: ``$SENDGROUP_HELM``, else the one ``hack/helm/build`` cached.

    Raises AssertionError naming the command that builds it when there is none.
    """
    return cached_tool(
        "helm",
        HELM_ENV,
        BUILD_SCRIPT,
        "helm is not built: run hack/helm/build (hack/test does it before pytest)",
    )


def helm(
    *args: str,
    kubeconfig: Path | None = None,
    check: bool = True,
    timeout: float = 120,
    input: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``helm ARGS`` (with ``KUBECONFIG=kubeconfig`` when given) and return the process.

    ``check``: raise AssertionError with stdout/stderr when the exit code is not 0.
    """
    env = dict(os.environ)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    # Helm's own state (repositories, cache) stays out of the user's home.
    for var, sub in (("HELM_CACHE_HOME", "cache"), ("HELM_CONFIG_HOME", "config")):
        env.setdefault(var, str(REPO / ".state" / "helm" / sub))
    env.setdefault("HELM_DATA_HOME", str(REPO / ".state" / "helm" / "data"))
    cmd = [str(helm_bin()), *args]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=env, input=input, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"helm {' '.join(args)} exited {proc.returncode}\n"
            f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
        )
    return proc


def values_args(values: dict[str, Any] | None) -> list[str]:
    """``--set-json key=value`` arguments for a dict of (dotted) value paths."""
    args: list[str] = []
    for key, value in (values or {}).items():
        args += ["--set-json", f"{key}={json.dumps(value)}"]
    return args


def render(
    values: dict[str, Any] | None = None,
    namespace: str = "mail",
    release: str = "sg",
    extra: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """``helm template RELEASE CHART -n NAMESPACE`` with ``values`` (dotted paths, e.g.
    ``{"networkPolicy.enabled": True}``); the rendered objects, without the CRDs."""
    proc = helm(
        "template", release, str(CHART), "--namespace", namespace, *values_args(values), *extra
    )
    return [doc for doc in yaml.safe_load_all(proc.stdout) if doc]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    """The objects of ``kind`` (and ``name``) in ``objects``."""
    return [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]


def env_of(deployment: dict[str, Any], namespace: str) -> dict[str, str]:
    """The operator container's environment as a dict (``valueFrom`` of the pod's namespace
    resolved to ``namespace``); AssertionError for any other ``valueFrom``."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for var in container["env"]:
        field = var.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if "valueFrom" not in var:  # the API server drops `value: ""`
            env[var["name"]] = var.get("value", "")
        elif field == "metadata.namespace" and len(var["valueFrom"]) == 1:
            env[var["name"]] = namespace
        else:
            raise AssertionError(f"unexpected env var {var}")
    return env
