"""A reaper pass posts its plan's events as Kubernetes events, as the former daemon did. kopf
keeps its event queue in context variables it sets in each object's handling task only; the
passes run in the scheduler's tasks (a pass without them failed with ``LookupError:
event_queue_loop_var``, seen in the cluster tests)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import kopf
import pytest
from kopf._core.engines import posting

from sendgroup_operator import handlers
from tests.unit.test_handover import BODY, INITIAL, _memo, see


def _plan(events: list[Any]) -> Any:
    return SimpleNamespace(
        events=events, write_status=False, status=None, idle_wait=None, requeue_after=None
    )


def test_a_pass_posts_its_plans_events_to_kopfs_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[int] = []

    async def fake(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("API server said 500")
        return _plan([SimpleNamespace(type="Normal", reason="Dumped", message="5 jobs dumped")])

    monkeypatch.setattr(handlers, "_compute", fake)
    posted: list[tuple[str, str, str]] = []

    async def main() -> None:
        settings = kopf.OperatorSettings()
        settings.posting.level = 30  # WARNING, as configure_kopf sets it
        posting.settings_var.set(settings)  # kopf sets it for the whole operator
        memo = _memo(reaper_interval=0.1)
        memo.reaper.settings = settings
        queue: asyncio.Queue[Any] = asyncio.Queue()

        async def object_task() -> None:  # kopf's worker for one object, then its handlers
            posting.event_queue_loop_var.set(asyncio.get_running_loop())
            posting.event_queue_var.set(queue)
            await see(memo, BODY)

        memo.reaper.start()
        try:
            await asyncio.create_task(object_task())
            await asyncio.sleep(INITIAL + 0.3)  # a pass with an event, a failed one, another
        finally:
            await memo.runtime.scheduler.stop(1)
        while not queue.empty():
            event = queue.get_nowait()
            posted.append((event.type, event.reason, event.message))

    asyncio.run(asyncio.wait_for(main(), 10))
    assert len(calls) >= 3  # the failed pass did not stop the reaper
    assert ("Normal", "Dumped", "5 jobs dumped") in posted
