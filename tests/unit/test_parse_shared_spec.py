"""A group's pass and the watch handler of the provider passes share one validated spec per
version of the group (issue 15: two SendGroupSpec models per group before, ~2.4 KB each)."""

from __future__ import annotations

from typing import Any

import kubernetes.client as k8s

from sendgroup_operator import provider_handlers, reconcile
from sendgroup_operator.kube import Kube
from sendgroup_operator.settings import Settings


def _body(version: str, host: str = "gmail.com") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "mail",
            "name": "g",
            "uid": "uid-1",
            "generation": 1,
            "resourceVersion": version,
            "creationTimestamp": "2026-12-03T10:00:00Z",
        },
        "spec": {"campaign": "c", "host": host},
        "status": {"phase": "Idle"},
    }


def test_the_pass_reuses_the_watch_handlers_spec_of_the_same_version() -> None:
    rt = reconcile.Runtime(settings=Settings(), kube=Kube(k8s.ApiClient()))  # never called
    body = _body("7")
    rt.groups[("mail", "g")] = provider_handlers.group_entry(body)
    _group, spec, _status = rt.parse(body)
    assert spec is rt.groups[("mail", "g")]["parsed"]

    # a newer version the handler has not seen yet: validated on its own
    newer = _body("8", host="outlook.com")
    _group, spec, _status = rt.parse(newer)
    assert spec is not rt.groups[("mail", "g")]["parsed"] and spec.host == "outlook.com"
