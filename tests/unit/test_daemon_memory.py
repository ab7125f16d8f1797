"""A group's reaper daemon holds no dict of the body it started with (issue 15): kopf hands a
daemon one ``Body`` for the group's lifetime and replaces the raw dict under it with every
watch event; a daemon that kept ``body["metadata"]`` held its first body's metadata
(managedFields included, ~15 KB parsed) beside kopf's current one, for good."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
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


def _kopf_stopped() -> tuple[Any, Any]:
    """kopf's own stop flag pair, as kopf builds it for a daemon (setter, ``stopped``)."""
    from kopf._core.intents import stoppers

    setter = stoppers.DaemonStopper()
    return setter, setter.async_waiter


async def _sleeper(stopped: Any, wakeup: asyncio.Event, delay: float) -> None:
    while not stopped:
        await handlers._sleep(stopped, wakeup, delay)


def test_a_resting_group_sleeps_in_under_4_5_kb() -> None:
    """2,000 daemons asleep with kopf's real stop flag: ~7.5 KB each with kopf's
    ``stopped.wait`` and a task per event, ~3.3 KB with one task (tracemalloc)."""

    async def scenario() -> float:
        n = 2000
        pairs = [_kopf_stopped() for _ in range(n)]
        events = [asyncio.Event() for _ in range(n)]
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            tasks = [
                asyncio.create_task(_sleeper(stopped, event, 60))
                for (_, stopped), event in zip(pairs, events, strict=True)
            ]
            for _ in range(5):
                await asyncio.sleep(0.01)
            per_group = (tracemalloc.get_traced_memory()[0] - before) / n
        finally:
            tracemalloc.stop()
        for setter, _ in pairs:
            setter.set()
        await asyncio.wait_for(asyncio.gather(*tasks), 5)
        return per_group

    per_group = asyncio.run(scenario())
    assert per_group < 4_500, per_group


def test_kopf_stop_ends_the_sleep_within_kopfs_instant_exit() -> None:
    """kopf gives a stopped daemon 10 zero-time loop cycles to exit before it cancels it
    (and logs a warning, posted as an event on the group): the sleep must end within them."""

    async def scenario() -> int:
        setter, stopped = _kopf_stopped()
        task = asyncio.create_task(_sleeper(stopped, asyncio.Event(), 60))
        await asyncio.sleep(0.05)
        setter.set()
        for cycle in range(1, 11):
            await asyncio.sleep(0)
            if task.done():
                return cycle
        task.cancel()
        return 0

    cycles = asyncio.run(scenario())
    assert 0 < cycles <= 10


def test_the_sleep_ends_on_wakeup_and_on_its_delay() -> None:
    async def scenario() -> tuple[float, float]:
        _, stopped = _kopf_stopped()
        wakeup = asyncio.Event()
        loop = asyncio.get_running_loop()
        started = loop.time()
        loop.call_later(0.1, wakeup.set)
        await handlers._sleep(stopped, wakeup, 60)
        woken = loop.time() - started
        assert not wakeup.is_set()  # cleared for the next sleep
        started = loop.time()
        await handlers._sleep(stopped, wakeup, 0.2)
        return woken, loop.time() - started

    woken, slept = asyncio.run(scenario())
    assert 0.09 <= woken < 0.5
    assert 0.19 <= slept < 0.6


class _Plan:
    """A plan as the reaper reads it (resting: next pass in 60 s), watchable by weakref."""

    events: tuple[Any, ...] = ()
    write_status = False
    status = None
    idle_wait = 60.0
    requeue_after = None


def test_a_resting_daemon_holds_no_plan_while_it_sleeps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan of a pass (its status copy: ~8-10 KB per group) is gone once the daemon
    sleeps; it was a local of the daemon's loop, held for the whole sleep."""
    plans: list[weakref.ref[_Plan]] = []

    async def one_pass(*args: Any, **kwargs: Any) -> _Plan:
        plan = _Plan()
        plans.append(weakref.ref(plan))
        return plan

    monkeypatch.setattr(handlers, "_compute", one_pass)

    async def scenario() -> bool:
        setter, stopped = _kopf_stopped()
        body = kopf.Body(_raw("1"))
        log = type("Log", (), {"info": print, "debug": print, "warning": print})()
        task = asyncio.create_task(
            handlers.reaper(body=body, memo=_memo(), logger=log, stopped=stopped)
        )
        await asyncio.sleep(0.1)
        gc.collect()
        alive = len(plans) == 1 and plans[0]() is not None
        setter.set()
        await asyncio.wait_for(task, 1)
        return alive

    assert not asyncio.run(scenario())
