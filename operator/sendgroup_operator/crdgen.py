"""Generate the CRDs from the pydantic models: ``crds/sendgroups.yaml`` from
:mod:`sendgroup_operator.models`, ``crds/sendproviders.yaml`` and
``crds/clustersendproviders.yaml`` from :mod:`sendgroup_operator.provider_models`.

Usage: ``python -m sendgroup_operator.crdgen [PLURAL] > crds/PLURAL.yaml`` (PLURAL one of
:data:`CRDS`, default ``sendgroups``).

pydantic emits JSON Schema 2020-12; the API server wants a *structural* OpenAPI v3 schema
(apiextensions.k8s.io/v1, "Specifying a structural schema"): every node typed, no ``$ref``, no
``anyOf`` except under ``x-kubernetes-int-or-string``, no ``null`` types, ``exclusiveMinimum``
as a boolean next to ``minimum``. :func:`structural` performs exactly these rewrites.
"""

from __future__ import annotations

import sys
from typing import Any, Final

import yaml
from pydantic import BaseModel

from sendgroup_operator import models, provider_models

#: Printer columns of ``kubectl get sendgroups`` (api.md): priority 1 = only with ``-o wide``.
PRINTER_COLUMNS: Final[list[dict[str, Any]]] = [
    {"name": "Campaign", "type": "string", "jsonPath": ".spec.campaign"},
    {"name": "Host", "type": "string", "jsonPath": ".spec.host"},
    {
        "name": "Workers",
        "type": "string",
        "jsonPath": ".status.workers.summary",
        "description": "ready/desired worker pods",
    },
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {
        "name": "Queue",
        "type": "integer",
        "jsonPath": ".status.queue.total",
        "description": "jobs ready + delayed + reserved",
    },
    {
        "name": "Progress",
        "type": "number",
        "jsonPath": ".status.progress.percent",
        "description": "percent delivered",
    },
    {
        "name": "Oldest",
        "type": "date",
        "jsonPath": ".status.queue.oldestJobPushedAt",
        "description": "age of the oldest job in the queue",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Failed",
        "type": "integer",
        "jsonPath": ".status.queue.failed",
        "priority": 1,
        "description": "jobs in the failed list",
    },
    {"name": "Paused", "type": "boolean", "jsonPath": ".spec.paused", "priority": 1},
    {
        "name": "Dumped",
        "type": "integer",
        "jsonPath": ".status.dump.totalJobs",
        "priority": 1,
        "description": "jobs dumped to the volume",
    },
]

_DROP: Final = {"title", "$defs", "discriminator"}


def structural(schema: dict[str, Any], defs: dict[str, Any] | None = None) -> dict[str, Any]:
    """Rewrite one pydantic JSON Schema node (and its children) into a structural schema.

    ``defs`` is the top-level ``$defs`` mapping used to inline ``$ref`` nodes.
    Raises ``ValueError`` on a construct the API server cannot accept (a union of two types).
    """
    defs = defs if defs is not None else schema.get("$defs", {})
    node = dict(schema)
    if "$ref" in node:
        ref = node.pop("$ref").rsplit("/", 1)[-1]
        merged = {**defs[ref], **node}
        return structural(merged, defs)
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        options = [o for o in node.pop("anyOf") if o.get("type") != "null"]
        if len(options) != 1:
            raise ValueError(f"cannot express a union in a structural schema: {options}")
        merged = {**structural(options[0], defs), **node}
        return structural(merged, defs)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP:
            continue
        if key == "default" and value is None:
            continue
        if key == "properties":
            out[key] = {k: structural(v, defs) for k, v in value.items()}
        elif key in ("items", "additionalProperties") and isinstance(value, dict):
            out[key] = structural(value, defs)
        elif key == "anyOf":
            out[key] = [{k: v for k, v in o.items() if k != "title"} for o in value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "description" and isinstance(value, str):
            out[key] = " ".join(value.replace("``", "`").split())
        else:
            out[key] = value
    if out.get("format") == "date-time":
        out["type"] = "string"
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if "properties" in out:
        out["type"] = "object"
    if out.get("type") == "object" and "properties" in out and "required" not in out:
        out.pop("required", None)
    return out


def _object_defaults(schema: dict[str, Any], model: type[BaseModel]) -> None:
    """Give nested objects built by a default factory their full default value (e.g.
    ``worker: {tries: 3, backoff: [...], timeout: 60, retryAfter: 90}``), so the API server
    fills them when the user leaves the whole object out (and CEL rules on them can run)."""
    for name, field in model.model_fields.items():
        alias = field.alias or name
        factory = field.default_factory
        ann = field.annotation
        if isinstance(ann, type) and issubclass(ann, BaseModel) and factory is not None:
            value = factory()  # type: ignore[call-arg]
            assert isinstance(value, BaseModel)
            schema["properties"][alias]["default"] = value.model_dump(
                by_alias=True, exclude_none=True, mode="json"
            )


def _spec_schema(model: type[BaseModel], description: str) -> dict[str, Any]:
    """Structural schema of a kind's ``spec``: validation mode, object defaults filled."""
    schema = structural(model.model_json_schema(by_alias=True, mode="validation"))
    _object_defaults(schema, model)
    schema["description"] = description
    return schema


def _status_schema(model: type[BaseModel]) -> dict[str, Any]:
    """Structural schema of a kind's ``status``: serialization mode, no defaults (status is
    written by the operator; defaults are for spec only)."""
    schema = structural(model.model_json_schema(by_alias=True, mode="serialization"))
    _strip_defaults(schema)
    schema["description"] = "Observed state, written only by the operator."
    # kopf's bookkeeping, not a field of the model: the operator's own status patches never
    # name it, so they never clear it (startup.StatusDiffBase, startup.StatusProgress)
    schema.setdefault("properties", {})[models.KOPF_STATUS_FIELD] = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
        "description": "kopf's bookkeeping, written by the operator: the spec, labels and "
        "annotations it last handled (last-handled-configuration, JSON; a change is a "
        "difference from it) and a handler's retries while one is retried (progress).",
    }
    return schema


def spec_schema() -> dict[str, Any]:
    """Structural schema of ``spec``."""
    return _spec_schema(
        models.SendGroupSpec, "Desired state of one send group: its queue and its workers."
    )


def status_schema() -> dict[str, Any]:
    """Structural schema of ``status``."""
    return _status_schema(models.SendGroupStatus)


def _strip_defaults(node: dict[str, Any]) -> None:
    node.pop("default", None)
    for child in node.get("properties", {}).values():
        _strip_defaults(child)
    if isinstance(node.get("items"), dict):
        _strip_defaults(node["items"])


#: Printer columns of ``kubectl get sendproviders`` / ``clustersendproviders``.
PROVIDER_PRINTER_COLUMNS: Final[list[dict[str, Any]]] = [
    {
        "name": "Rate",
        "type": "integer",
        "jsonPath": ".spec.rate.perMinute",
        "description": "budget, recipients per minute",
    },
    {
        "name": "Effective",
        "type": "number",
        "jsonPath": ".status.effectiveRate.perMinute",
        "description": "allowed rate now, after pushback rules",
    },
    {"name": "Concurrency", "type": "integer", "jsonPath": ".spec.concurrency"},
    {
        "name": "Groups",
        "type": "integer",
        "jsonPath": ".status.groups",
        "description": "groups sending to this provider",
    },
    {
        "name": "Throttled",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Throttled")].status',
    },
    {
        "name": "Suspended",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Suspended")].status',
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
    {
        "name": "Domains",
        "type": "string",
        "jsonPath": ".spec.match.domains",
        "priority": 1,
    },
]


def provider_spec_schema() -> dict[str, Any]:
    """Structural schema of a provider's ``spec`` (both kinds)."""
    return _spec_schema(
        provider_models.SendProviderSpec,
        "A receiving provider: which domains are its, and the budget every group resolved to "
        "it shares.",
    )


def provider_status_schema() -> dict[str, Any]:
    """Structural schema of a provider's ``status``."""
    return _status_schema(provider_models.SendProviderStatus)


def provider_crd(cluster: bool) -> dict[str, Any]:
    """The CustomResourceDefinition of ClusterSendProvider (``cluster``) or SendProvider."""
    pm = provider_models
    kind = pm.CLUSTER_KIND if cluster else pm.KIND
    plural = pm.CLUSTER_PLURAL if cluster else pm.PLURAL
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{models.GROUP}",
            "labels": {"app.kubernetes.io/part-of": "sendgroup-operator"},
        },
        "spec": {
            "group": models.GROUP,
            "scope": "Cluster" if cluster else "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": pm.CLUSTER_SINGULAR if cluster else pm.SINGULAR,
                "shortNames": list(pm.CLUSTER_SHORT_NAMES if cluster else pm.SHORT_NAMES),
                "categories": list(pm.CATEGORIES),
            },
            "versions": [
                {
                    "name": models.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PROVIDER_PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": (
                                "A receiving provider for every namespace (see docs/providers.md)."
                                if cluster
                                else "A receiving provider for the groups of this namespace; "
                                "wins over ClusterSendProviders (see docs/providers.md)."
                            ),
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": provider_spec_schema(),
                                "status": provider_status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


def crd() -> dict[str, Any]:
    """The CustomResourceDefinition object."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{models.PLURAL}.{models.GROUP}",
            "labels": {"app.kubernetes.io/part-of": "sendgroup-operator"},
        },
        "spec": {
            "group": models.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": models.KIND,
                "listKind": f"{models.KIND}List",
                "plural": models.PLURAL,
                "singular": models.SINGULAR,
                "shortNames": list(models.SHORT_NAMES),
                "categories": list(models.CATEGORIES),
            },
            "versions": [
                {
                    "name": models.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": "One isolated mail queue and the workers that "
                            "drain it (see docs/api.md).",
                            "required": ["spec"],
                            "properties": {
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": spec_schema(),
                                "status": status_schema(),
                            },
                        }
                    },
                }
            ],
        },
    }


HEADER: Final = (
    "# GENERATED by `python -m sendgroup_operator.crdgen` from "
    "operator/sendgroup_operator/models.py.\n# Do not edit by hand: change the models and "
    "regenerate (tests/unit/test_crd.py checks for drift).\n"
)


class _NoAliasDumper(yaml.SafeDumper):
    """A YAML dumper that writes shared sub-objects in full (no ``&id001`` anchors)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


#: Every generated CRD by plural: ``crds/<plural>.yaml``.
CRDS: Final = ("sendgroups", "sendproviders", "clustersendproviders")


def render(plural: str = "sendgroups") -> str:
    """The YAML text of ``crds/<plural>.yaml`` (``plural`` one of :data:`CRDS`)."""
    if plural == "sendgroups":
        obj, source = crd(), "models.py"
    elif plural in ("sendproviders", "clustersendproviders"):
        obj, source = provider_crd(plural == "clustersendproviders"), "provider_models.py"
    else:
        raise ValueError(f"unknown CRD {plural!r}; one of {', '.join(CRDS)}")
    header = HEADER.replace("models.py", source).replace(
        "`python -m sendgroup_operator.crdgen`",
        "`python -m sendgroup_operator.crdgen`"
        if plural == "sendgroups"
        else f"`python -m sendgroup_operator.crdgen {plural}`",
    )
    return header + yaml.dump(obj, Dumper=_NoAliasDumper, sort_keys=False, width=100)


def main() -> None:
    """Write the CRD YAML named by the first argument (default sendgroups) to stdout."""
    sys.stdout.write(render(sys.argv[1] if len(sys.argv) > 1 else "sendgroups"))


if __name__ == "__main__":
    main()
