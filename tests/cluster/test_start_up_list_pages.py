"""The operator's start-up LIST of SendGroups reads every group in pages of the API server's
``limit``/``continue`` chunking (one page held at a time, issue 15) and keeps each group as the
watch would: slimmed (no managedFields, short strings interned), kopf's ``status.kopf`` left out.
Against the real API server."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes import config as k8s_config

from sendgroup_operator import builders, reconcile
from sendgroup_operator.kube import Kube
from sendgroup_operator.settings import Settings
from tests.cluster.conftest import Objects
from tests.support import manifests
from tests.support.cluster import KubeCluster

pytestmark = pytest.mark.cluster

GROUPS = 7


async def _pages(it: AsyncIterator[list[dict[str, Any]]]) -> list[list[dict[str, Any]]]:
    return [page async for page in it]


def test_the_start_up_list_reads_every_group_in_pages_and_keeps_them_slim(
    kube_cluster: KubeCluster, sendgroup_crd: str, namespace: str, objects: Objects
) -> None:
    names = [f"g{i}" for i in range(GROUPS)]
    objects.apply(
        manifests.stream(
            *(
                manifests.sendgroup(n, {"campaign": "c", "host": f"{n}.example.com"}, namespace)
                for n in names
            )
        )
    )
    api = k8s_config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    kube = Kube(api)

    pages = asyncio.run(_pages(kube.list_groups(namespace, limit=3)))
    assert [len(p) for p in pages] == [3, 3, 1]
    assert sorted(g["metadata"]["name"] for p in pages for g in p) == names
    assert "managedFields" in pages[0][0]["metadata"]  # what the API server sends

    rt = reconcile.Runtime(settings=Settings(namespace=namespace), kube=kube)
    assert asyncio.run(reconcile.load_groups(rt)) == GROUPS
    assert sorted(name for _, name in rt.groups) == names
    entry = rt.groups[(namespace, "g3")]
    assert entry["parsed"] is not None and entry["parsed"].host == "g3.example.com"
    host = entry["spec"]["host"]
    assert host is sys.intern("g3.example.com")  # interned, as the watch's bodies are
    assert "kopf" not in entry["status"]


def test_worker_deployments_are_listed_in_pages_at_start_up_and_for_the_orphan_count(
    kube_cluster: KubeCluster, sendgroup_crd: str, namespace: str, objects: Objects
) -> None:
    """The start-up LIST of worker Deployments and the orphan count's (every ``orphanGrace``)
    read them page by page; only ours (``WORKER_SELECTOR``) are counted."""
    ours = [f"sg-w{i}" for i in range(5)]
    docs = [
        manifests.deployment(
            n, {**builders.WORKER_LABELS, builders.LABEL_GROUP: n[3:]}, {"app": n}, namespace
        )
        for n in ours
    ]
    docs.append(
        manifests.deployment(
            "not-ours", {"app.kubernetes.io/component": "worker"}, {"app": "x"}, namespace
        )
    )
    objects.apply(manifests.stream(*docs))
    api = k8s_config.new_client_from_config(config_file=str(kube_cluster.kubeconfig))
    kube = Kube(api)

    pages = asyncio.run(_pages(kube.list_deployments(namespace, builders.WORKER_SELECTOR, 2)))
    assert [len(p) for p in pages] == [2, 2, 1]
    assert sorted(d["metadata"]["name"] for p in pages for d in p) == ours

    rt = reconcile.Runtime(settings=Settings(namespace=namespace), kube=kube)
    assert asyncio.run(reconcile.load_deployments(rt)) == len(ours)
    assert sorted(name for _, name in rt.deployments) == ours
    # no SendGroup is known: every one of ours is an orphan, the foreign one is not counted
    assert asyncio.run(reconcile.count_orphan_deployments(rt)) == len(ours)
