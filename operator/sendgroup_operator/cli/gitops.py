"""Is a SendGroup managed by ArgoCD? Pure: reads only the object's metadata.

ArgoCD marks what it syncs in one of three ways (argo-cd docs, "Resource Tracking"):
annotation ``argocd.argoproj.io/tracking-id`` (annotation tracking, default since 3.0), the
label ``app.kubernetes.io/instance`` (label tracking, the default before 3.0; Helm sets the
same label, together with ``app.kubernetes.io/managed-by: Helm``), and with server-side apply
its field manager ``argocd-controller`` in ``managedFields``. A change made with the plugin
stays only until ArgoCD's next sync with selfHeal when the manifest in Git sets the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

TRACKING_ANNOTATION: Final = "argocd.argoproj.io/tracking-id"
INSTANCE_LABEL: Final = "app.kubernetes.io/instance"
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGER_PREFIX: Final = "argocd"


def argocd_evidence(obj: Mapping[str, Any]) -> str | None:
    """Why ``obj`` looks ArgoCD-managed (e.g. ``annotation argocd.argoproj.io/tracking-id=
    app:sendgroups.io/SendGroup:ns/x``), or None when nothing says so."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    if TRACKING_ANNOTATION in annotations:
        return f"annotation {TRACKING_ANNOTATION}={annotations[TRACKING_ANNOTATION]}"
    for entry in meta.get("managedFields") or []:
        manager = str(entry.get("manager", ""))
        if manager.startswith(MANAGER_PREFIX):
            return f"field manager {manager}"
    if INSTANCE_LABEL in labels and labels.get(MANAGED_BY_LABEL) != "Helm":
        return f"label {INSTANCE_LABEL}={labels[INSTANCE_LABEL]}"
    return None


def warning(kind_name: str, field: str, evidence: str) -> str:
    """The warning printed before changing ``field`` of an ArgoCD-managed object."""
    return (
        f"warning: {kind_name} is managed by ArgoCD ({evidence}): if its manifest in Git sets "
        f"spec.{field}, an Application with selfHeal reverts this change on its next sync. "
        f"Commit the change to Git to make it stick."
    )
