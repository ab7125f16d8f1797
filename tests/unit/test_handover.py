"""A change handler's pass stands for the reaper daemon's next pass (issue 15): at an operator's
start kopf runs every group's resume handler and starts its daemon within a second, so each
group was passed twice. The daemon now waits the delay the change handler's plan asked for;
a wake-up (jobs arrived, a follow-up the plan asked for) still ends that wait at once."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from sendgroup_operator import handlers, reconcile
from sendgroup_operator.settings import Settings
from tests.unit.test_shard_gating import BODY, start_reaper

KEY = "mail/g"


def _plan(idle_wait: float | None = None, requeue_after: float | None = None) -> Any:
    return SimpleNamespace(
        events=[], write_status=False, status=None, idle_wait=idle_wait, requeue_after=requeue_after
    )


@pytest.fixture
def passes(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Replace the reconcile pass: record when each ran; its plan rests the group 60 s,
    except a plan the test queued in ``plans``."""
    calls: list[float] = []

    async def fake(*args: Any, **kwargs: Any) -> Any:
        calls.append(time.monotonic())
        return PLANS.pop(0) if PLANS else _plan(idle_wait=60)

    monkeypatch.setattr(handlers, "_compute", fake)
    PLANS.clear()
    return calls


PLANS: list[Any] = []


def _memo() -> SimpleNamespace:
    rt = reconcile.Runtime(settings=Settings(reaper_interval=30), kube=None)  # type: ignore[arg-type]
    return SimpleNamespace(runtime=rt)


def test_start_passes_each_group_once_not_twice(passes: list[float]) -> None:
    memo = _memo()

    async def scenario() -> None:
        await handlers.on_change(body=BODY, patch=kopf.Patch(), memo=memo, logger=None)
        stopped, task = start_reaper(memo)
        await asyncio.sleep(0.2)
        assert len(passes) == 1, "the daemon ran the resume handler's pass again at once"
        memo.runtime.wakeup(KEY).set()  # jobs arrived: the wait ends at once
        await asyncio.sleep(0.1)
        assert len(passes) == 2
        stopped.event.set()
        await asyncio.wait_for(task, 1)

    asyncio.run(scenario())


def test_a_follow_up_the_change_handler_asked_for_runs_when_asked(passes: list[float]) -> None:
    memo = _memo()
    PLANS.append(_plan(requeue_after=0.3))

    async def scenario() -> None:
        started = time.monotonic()
        await handlers.on_change(body=BODY, patch=kopf.Patch(), memo=memo, logger=None)
        stopped, task = start_reaper(memo)
        await asyncio.sleep(0.6)
        assert len(passes) == 2
        assert 0.25 <= passes[1] - started < 0.5
        stopped.event.set()
        await asyncio.wait_for(task, 1)

    asyncio.run(scenario())


def test_a_follow_up_kick_due_after_the_daemons_pass_does_not_pass_again(
    passes: list[float], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The change handler asks for a follow-up in 0.3 s twice over: its hand-over (the
    daemon's wait) and a kick (for a daemon already asleep). Both are due at the same moment;
    on a busy loop the daemon's wait ended first, it passed, and the kick then woke it for a
    second pass within milliseconds (CI). Here the wait ends 0.1 s before the kick: the
    daemon's pass answers the kick, which no longer wakes it."""
    memo = _memo()
    PLANS.append(_plan(requeue_after=0.3))
    handed = reconcile.Runtime.handed

    def early(self: reconcile.Runtime, key: str) -> float | None:
        left = handed(self, key)
        return None if left is None else max(left - 0.1, 0.01)

    monkeypatch.setattr(reconcile.Runtime, "handed", early)

    async def scenario() -> None:
        await handlers.on_change(body=BODY, patch=kopf.Patch(), memo=memo, logger=None)
        stopped, task = start_reaper(memo)
        await asyncio.sleep(0.3)
        assert len(passes) == 2, "the daemon did not pass when its handed-over wait ended"
        await asyncio.sleep(0.3)
        assert len(passes) == 2, "the change handler's kick woke the daemon after its pass"
        stopped.event.set()
        await asyncio.wait_for(task, 1)

    asyncio.run(scenario())


def test_a_kick_scheduled_during_a_pass_still_wakes_the_daemon(passes: list[float]) -> None:
    """Only kicks scheduled before a pass starts are answered by it: jobs that arrive while
    it runs (the observer's kick) still wake the daemon after it."""
    memo = _memo()

    async def scenario() -> None:
        stopped, task = start_reaper(memo)
        await asyncio.sleep(0.1)
        assert len(passes) == 1  # the first pass; its plan rests the group 60 s
        memo.runtime.kick(KEY, 0)
        await asyncio.sleep(0.1)
        assert len(passes) == 2
        stopped.event.set()
        await asyncio.wait_for(task, 1)

    asyncio.run(scenario())


def test_a_pass_that_did_not_say_when_to_look_next_is_not_handed_over(
    passes: list[float],
) -> None:
    """A new group's first pass writes its status, and its plan names no next pass (no idle
    wait, no follow-up): the daemon passes it at once, as without a change handler, so the
    group is settled (watched as idle) within its first second, not a reaperInterval later
    (test_operator_scale saw that deferred measurement land in its rest window)."""
    memo = _memo()
    PLANS.append(_plan())

    async def scenario() -> None:
        await handlers.on_change(body=BODY, patch=kopf.Patch(), memo=memo, logger=None)
        stopped, task = start_reaper(memo)
        await asyncio.sleep(0.2)
        assert len(passes) == 2, "the daemon waited a reaperInterval after a first pass"
        stopped.event.set()
        await asyncio.wait_for(task, 1)

    asyncio.run(scenario())


def test_without_a_change_handler_pass_the_daemon_passes_at_once(passes: list[float]) -> None:
    memo = _memo()

    async def scenario() -> None:
        stopped, task = start_reaper(memo)
        await asyncio.sleep(0.1)
        assert len(passes) == 1
        stopped.event.set()
        await asyncio.wait_for(task, 1)

    asyncio.run(scenario())


def test_the_hand_over_is_read_once_and_expires() -> None:
    rt = reconcile.Runtime(settings=Settings(), kube=None)  # type: ignore[arg-type]
    rt.hand_over(KEY, 5)
    left = rt.handed(KEY)
    assert left is not None and 4 < left <= 5
    assert rt.handed(KEY) is None
    rt.hand_over(KEY, 0)
    assert rt.handed(KEY) is None
    rt.hand_over(KEY, 5)
    rt.forget(KEY)
    assert rt.handed(KEY) is None
