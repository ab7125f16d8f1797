"""A group's pass and the watch handler of the provider passes share one validated spec per
version of the group (issue 15: two SendGroupSpec models per group before, ~2.4 KB each)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
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


def test_the_watch_handler_keeps_the_entry_of_a_version_it_already_holds() -> None:
    """kopf's first listing after a start repeats every group the start-up LIST entered: the
    same version is not validated again (issue 15); a new version, or the same version of
    another object (a group deleted and created again), is."""
    rt = reconcile.Runtime(settings=Settings(), kube=Kube(k8s.ApiClient()))  # never called
    memo = SimpleNamespace(runtime=rt)
    rt.groups[("mail", "g")] = loaded = provider_handlers.group_entry(_body("7"))

    def see(body: dict[str, Any]) -> dict[str, Any]:
        asyncio.run(
            provider_handlers.provider_groups(
                type=None, namespace="mail", name="g", body=body, memo=memo
            )
        )
        return rt.groups[("mail", "g")]

    assert see(_body("7")) is loaded
    newer = see(_body("8", host="outlook.com"))
    assert newer is not loaded and newer["parsed"].host == "outlook.com"
    again = _body("8")
    again["metadata"]["uid"] = "uid-2"
    assert see(again)["metadata"]["uid"] == "uid-2"
