"""The reaper keeps nothing of a group between its passes but its deadline (issue 15): no body
(kopf kept one per group with a daemon, ``live_fresh_body``; a daemon that kept
``body["metadata"]`` held its first body's metadata, managedFields included, for good), no plan
(its status copy: ~8-10 KB per group)."""

from __future__ import annotations

import asyncio
import gc
import weakref
from types import SimpleNamespace
from typing import Any

import pytest

from sendgroup_operator import handlers
from tests.unit.test_handover import INITIAL, see, with_reaper


class Meta(dict[str, Any]):
    """A metadata dict that can be watched by a weak reference."""


def _raw(rv: str) -> dict[str, Any]:
    meta = Meta(namespace="mail", name="g", uid="uid-g", generation=1, resourceVersion=rv)
    meta["managedFields"] = [{"manager": "kopf", "fieldsV1": {"f:status": {}}}]
    return {"metadata": meta, "spec": {}, "status": {}}


class _Plan:
    """A plan as the reaper reads it (resting: next pass in 60 s), watchable by weakref."""

    events: tuple[Any, ...] = ()
    write_status = False
    status = None
    idle_wait = 60.0
    requeue_after = None


def test_between_passes_the_reaper_holds_no_body_and_no_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    plans: list[weakref.ref[_Plan]] = []
    bodies: list[weakref.ref[Any]] = []

    async def one_pass(body: Any, *args: Any, **kwargs: Any) -> _Plan:
        plan = _Plan()
        plans.append(weakref.ref(plan))
        bodies.append(weakref.ref(body))
        return plan

    monkeypatch.setattr(handlers, "_compute", one_pass)
    alive: dict[str, bool] = {}

    async def scenario(memo: SimpleNamespace) -> None:
        first = _raw("1")
        gone = weakref.ref(first["metadata"])
        await see(memo, first)
        del first
        await asyncio.sleep(INITIAL + 0.05)  # its first pass ran, it rests now
        await see(memo, _raw("2"))  # the next watch event
        gc.collect()
        alive["first metadata"] = gone() is not None
        alive["plan"] = len(plans) == 1 and plans[0]() is not None
        alive["body"] = len(bodies) == 1 and bodies[0]() is not None

    with_reaper(scenario)
    assert alive == {"first metadata": False, "plan": False, "body": False}
