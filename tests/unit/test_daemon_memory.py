"""A group's reaper daemon holds no dict of the body it started with (issue 15): kopf hands a
daemon one ``Body`` for the group's lifetime and replaces the raw dict under it with every
watch event; a daemon that kept ``body["metadata"]`` held its first body's metadata
(managedFields included, ~15 KB parsed) beside kopf's current one, for good."""

from __future__ import annotations

import asyncio
import gc
import weakref
from typing import Any

import kopf
import pytest

from sendgroup_operator import handlers
from tests.unit.test_handover import _memo, passes  # noqa: F401  (passes: the fake pass fixture)
from tests.unit.test_shard_gating import FakeShard, Stopped


class Meta(dict[str, Any]):
    """A metadata dict that can be watched by a weak reference."""


def _raw(rv: str) -> dict[str, Any]:
    meta = Meta(namespace="mail", name="g", uid="uid-g", generation=1, resourceVersion=rv)
    meta["managedFields"] = [{"manager": "kopf", "fieldsV1": {"f:status": {}}}]
    return {"metadata": meta, "spec": {}}


def _first_metadata_outlives_an_event(memo: Any) -> bool:
    """Run BODY's reaper over a kopf Body, replace the raw under it as kopf does on a watch
    event, and say whether the first raw's metadata is still alive."""
    first = _raw("1")
    gone = weakref.ref(first["metadata"])
    body = kopf.Body(first)
    del first

    async def scenario() -> bool:
        stopped = Stopped()
        log = type("Log", (), {"info": print, "debug": print, "warning": print})()
        task = asyncio.create_task(
            handlers.reaper(body=body, memo=memo, logger=log, stopped=stopped)
        )
        await asyncio.sleep(0.1)  # its first pass ran, it sleeps now
        body._replace_with(_raw("2"))  # kopf, on the next watch event
        gc.collect()
        alive = gone() is not None
        stopped.event.set()
        await asyncio.wait_for(task, 1)
        return alive

    return asyncio.run(scenario())


@pytest.mark.usefixtures("passes")
def test_unsharded_daemon_drops_its_first_body() -> None:
    assert not _first_metadata_outlives_an_event(_memo())


@pytest.mark.usefixtures("passes")
def test_sharded_daemon_drops_its_first_body() -> None:
    memo = _memo()
    memo.runtime.shard = FakeShard(mine=True)
    assert not _first_metadata_outlives_an_event(memo)
