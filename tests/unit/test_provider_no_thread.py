"""Issue 15: a group's pass resolves its provider in a thread only when an MX query may be
sent. Before, every pass of every group (no provider at all, a domain match, a fresh MX
answer) went through ``asyncio.to_thread``: a thread hop per pass, ~7 % of an idle pass's
CPU, 1,000 groups in-process. The executor here counts what it is given."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pytest

from sendgroup_operator import models, provider_handlers
from sendgroup_operator.provider_dns import MxCache
from sendgroup_operator.settings import Settings

GOOGLE = {
    "kind": "ClusterSendProvider",
    "metadata": {"name": "google", "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {"match": {"domains": ["gmail.com"], "mxSuffixes": [".google.com"]}},
}


class CountingExecutor(ThreadPoolExecutor):
    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted = 0

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted += 1
        return super().submit(fn, *args, **kwargs)


def _spec(host: str) -> models.SendGroupSpec:
    return models.SendGroupSpec.model_validate({"campaign": "c", "host": host})


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _resolve(host: str, providers: list[dict[str, Any]]) -> tuple[int, Any]:
    indexes = {"namespaced_providers": {}, "cluster_providers": {"": providers}}

    async def go() -> tuple[int, Any]:
        executor = CountingExecutor()
        asyncio.get_running_loop().set_default_executor(executor)
        chosen = await provider_handlers.group_provider(
            "mail", "g", _spec(host), indexes, Settings()
        )
        return executor.submitted, chosen

    return asyncio.run(go())


def test_a_thread_only_when_an_mx_query_may_be_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    # a loopback port nobody listens on: the one query below fails at once, never leaves
    cache = MxCache(nameservers=["127.0.0.1"], port=_closed_port(), timeout=0.5)
    cache.clock = lambda: now[0]
    monkeypatch.setattr(provider_handlers, "_MX", cache)

    submitted, chosen = _resolve("yahoo.com", [])  # no provider at all
    assert submitted == 0 and chosen.resolution.reason == "NoProviderMatched"
    submitted, chosen = _resolve("gmail.com", [GOOGLE])  # a domain match
    assert submitted == 0 and chosen.resolution.reason == "DomainMatched"

    # MX suffixes and nothing cached: the lookup runs in a thread (it may block)
    submitted, chosen = _resolve("workspace.example", [GOOGLE])
    assert submitted == 1 and cache.queries == 1
    # its outcome is cached: the next passes resolve without a thread and without a query
    submitted, _ = _resolve("workspace.example", [GOOGLE])
    assert submitted == 0 and cache.queries == 1
    now[0] += 3600  # expired: a thread again
    submitted, _ = _resolve("workspace.example", [GOOGLE])
    assert submitted == 1 and cache.queries == 2
