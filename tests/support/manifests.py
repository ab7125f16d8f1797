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


def deployment(
    name: str,
    labels: Mapping[str, str],
    match: Mapping[str, str],
    namespace: str | None = None,
    image: str = "registry.invalid/w:1",
) -> dict[str, Any]:
    """A Deployment of 0 replicas that runs nothing: ``labels`` on the object, ``match`` its
    (immutable) pod selector and pod labels, one container of ``image``. For tests of what
    the operator makes of Deployments it finds (its own, orphans, someone else's)."""
    meta: dict[str, Any] = {"name": name, "labels": dict(labels)}
    if namespace is not None:
        meta["namespace"] = namespace
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": dict(match)},
            "template": {
                "metadata": {"labels": dict(match)},
                "spec": {"containers": [{"name": "w", "image": image}]},
            },
        },
    }
