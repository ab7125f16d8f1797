"""The start-up preflight asks its access reviews all at once (issue 15: 18 per watched scope,
one round trip each, were asked one after the other at every start) and still names exactly
what is missing, in the order of the permission list."""

from __future__ import annotations

import asyncio
from typing import Any

from sendgroup_operator.settings import Settings
from sendgroup_operator.startup import NAMESPACED_PERMISSIONS, missing_permissions


class _Reviews:
    """A Kube whose reviews answer after 50 ms each, refusing ``denied``."""

    def __init__(self, denied: set[tuple[str, str, str, str | None]]) -> None:
        self.denied = denied
        self.in_flight = 0
        self.most = 0

    async def can(self, verb: str, group: str, resource: str, namespace: str | None) -> bool:
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        await asyncio.sleep(0.05)
        self.in_flight -= 1
        return (verb, group, resource, namespace) not in self.denied


def test_the_reviews_are_asked_together_and_the_missing_ones_named() -> None:
    kube: Any = _Reviews({("watch", "sendgroups.io", "sendgroups", "b"), ("list", "", "pods", "a")})
    settings = Settings(watch_namespaces=("a", "b"))
    missing = asyncio.run(missing_permissions(kube, settings))
    assert missing == [
        "list core/pods in namespace a",
        "watch sendgroups.io/sendgroups in namespace b",
    ]
    assert kube.most == 2 * len(NAMESPACED_PERMISSIONS)
