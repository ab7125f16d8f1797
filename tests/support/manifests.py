"""SendGroup manifests for the tests and benchmarks that apply them with kubectl: one builder,
so apiVersion and kind come from the models (the CRD's source) and nowhere else."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sendgroup_operator import models


def sendgroup(
    name: str, spec: Mapping[str, Any], namespace: str | None = None, **metadata: Any
) -> dict[str, Any]:
    """A SendGroup object: ``metadata.name`` (and ``namespace`` when given, plus any other
    ``metadata`` fields such as ``labels``), ``spec`` as given (camelCase, as in YAML)."""
    meta: dict[str, Any] = {"name": name, **metadata}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": models.API_VERSION,
        "kind": models.KIND,
        "metadata": meta,
        "spec": dict(spec),
    }


def stream(*docs: Mapping[str, Any]) -> str:
    """Objects as one multi-document stream for ``kubectl apply -f -`` (JSON documents)."""
    return "\n---\n".join(json.dumps(doc) for doc in docs)
