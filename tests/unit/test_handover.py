"""A change handler's pass stands for the reaper's next pass (issue 15): at an operator's start
kopf runs every group's resume handler within a second of the watch's first event, which is
when the reaper's first pass falls due, so each group was passed twice. The reaper now waits
the delay the change handler's plan asked for; a wake-up (jobs arrived, a follow-up the plan
asked for) still ends that wait at once. The reaper here is the real one (``handlers.Reaper``
on ``rt.scheduler``), fed by the real watch event handler; only the pass itself is faked."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from sendgroup_operator import handlers, provider_handlers, reconcile, startup
from sendgroup_operator.scheduler import Scheduler
from sendgroup_operator.settings import Settings

KEY = "mail/g"
BODY: dict[str, Any] = {
    "apiVersion": "sendgroups.io/v1alpha1",
    "kind": "SendGroup",
    "metadata": {"namespace": "mail", "name": "g", "uid": "uid-g", "generation": 2},
}
#: The reaper's first pass after the watch first saw a group, in these tests (1 s in the
#: operator, ``scheduler.INITIAL_DELAY``).
INITIAL = 0.1
LOG = SimpleNamespace(info=print, debug=print, warning=print)


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


def _memo(reaper_interval: float = 30) -> SimpleNamespace:
    rt = reconcile.Runtime(settings=Settings(reaper_interval=reaper_interval), kube=None)  # type: ignore[arg-type]
    rt.scheduler = Scheduler(initial_delay=INITIAL)
    memo = SimpleNamespace(runtime=rt)
    memo.reaper = handlers.Reaper(memo, kopf.OperatorSettings(), LOG)  # type: ignore[arg-type]
    return memo


async def see(memo: SimpleNamespace, body: dict[str, Any], type: str | None = None) -> None:
    """A watch event of ``body``, through both SendGroup event handlers, as kopf runs them."""
    await provider_handlers.provider_groups(
        type=type, namespace="mail", name="g", body=body, memo=memo
    )
    await handlers.on_event(type=type, body=kopf.Body(body), memo=memo, logger=LOG)


def with_reaper(
    scenario: Callable[[SimpleNamespace], Awaitable[None]], memo: SimpleNamespace | None = None
) -> SimpleNamespace:
    """Run ``scenario(memo)`` with the reaper's scheduler running, stopped after it."""
    memo = memo or _memo()

    async def main() -> None:
        memo.reaper.start()
        try:
            await scenario(memo)
        finally:
            await memo.runtime.scheduler.stop(1)

    asyncio.run(asyncio.wait_for(main(), 10))
    return memo


def test_start_passes_each_group_once_not_twice(passes: list[float]) -> None:
    async def scenario(memo: SimpleNamespace) -> None:
        await see(memo, BODY)  # the watch's first event: the reaper's first pass in 0.1 s
        await handlers.on_change(body=BODY, patch=kopf.Patch(), memo=memo, logger=None)
        await asyncio.sleep(INITIAL + 0.2)
        assert len(passes) == 1, "the reaper ran the resume handler's pass again at once"
        memo.runtime.kick(KEY, 0)  # jobs arrived: the wait ends at once
        await asyncio.sleep(0.1)
        assert len(passes) == 2

    with_reaper(scenario)


def test_a_follow_up_the_change_handler_asked_for_runs_when_asked(passes: list[float]) -> None:
    PLANS.append(_plan(requeue_after=0.3))

    async def scenario(memo: SimpleNamespace) -> None:
        await see(memo, BODY)
        started = time.monotonic()
        await handlers.on_change(body=BODY, patch=kopf.Patch(), memo=memo, logger=None)
        await asyncio.sleep(0.6)
        assert len(passes) == 2
        assert 0.25 <= passes[1] - started < 0.5

    with_reaper(scenario)


def test_a_follow_up_kick_due_with_the_hand_over_passes_once(passes: list[float]) -> None:
    """The change handler asks for a follow-up in 0.3 s twice over: its hand-over (the
    reaper's next pass) and a kick. Both are due at the same moment: one pass answers both
    (the former daemons passed twice within milliseconds on a busy loop, CI)."""
    PLANS.append(_plan(requeue_after=0.3))

    async def scenario(memo: SimpleNamespace) -> None:
        await see(memo, BODY)
        await handlers.on_change(body=BODY, patch=kopf.Patch(), memo=memo, logger=None)
        await asyncio.sleep(0.45)
        assert len(passes) == 2, "the follow-up did not pass when its hand-over ended"
        await asyncio.sleep(0.3)
        assert len(passes) == 2, "the change handler's kick passed it a second time"

    with_reaper(scenario)


def test_a_kick_during_a_pass_still_wakes_the_group_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only kicks due after a pass started are answered by it: jobs that arrive while it
    runs (the observer's kick) still bring a pass after it."""
    calls: list[float] = []

    async def slow(*args: Any, **kwargs: Any) -> Any:
        calls.append(time.monotonic())
        await asyncio.sleep(0.1)
        return _plan(idle_wait=60)

    monkeypatch.setattr(handlers, "_compute", slow)

    async def scenario(memo: SimpleNamespace) -> None:
        await see(memo, BODY)
        await asyncio.sleep(INITIAL + 0.05)
        assert len(calls) == 1  # the first pass runs; its plan rests the group 60 s
        memo.runtime.kick(KEY, 0)
        await asyncio.sleep(0.25)
        assert len(calls) == 2

    with_reaper(scenario)


def test_a_pass_that_did_not_say_when_to_look_next_is_not_handed_over(
    passes: list[float],
) -> None:
    """A new group's first pass writes its status, and its plan names no next pass (no idle
    wait, no follow-up): the reaper passes it at its first due time, as without a change
    handler, so the group is settled (watched as idle) within its first second, not a
    reaperInterval later (test_operator_scale saw that deferred measurement land in its rest
    window)."""
    PLANS.append(_plan())

    async def scenario(memo: SimpleNamespace) -> None:
        await see(memo, BODY)
        await handlers.on_change(body=BODY, patch=kopf.Patch(), memo=memo, logger=None)
        await asyncio.sleep(INITIAL + 0.1)
        assert len(passes) == 2, "the reaper waited a reaperInterval after a first pass"

    with_reaper(scenario)


def test_without_a_change_handler_pass_the_reaper_passes_after_its_initial_delay(
    passes: list[float],
) -> None:
    async def scenario(memo: SimpleNamespace) -> None:
        started = time.monotonic()
        await see(memo, BODY)
        await asyncio.sleep(INITIAL + 0.1)
        assert len(passes) == 1 and INITIAL - 0.02 <= passes[0] - started < INITIAL + 0.1

    with_reaper(scenario)


def test_no_reaper_pass_after_the_deletion_starts_or_the_group_is_gone(
    passes: list[float],
) -> None:
    since = "2026-12-04T00:00:00Z"
    deleting = {**BODY, "metadata": {**BODY["metadata"], "deletionTimestamp": since}}

    async def scenario(memo: SimpleNamespace) -> None:
        await see(memo, BODY)
        await asyncio.sleep(INITIAL + 0.05)
        assert len(passes) == 1
        await see(memo, deleting)
        memo.runtime.kick(KEY, 0)  # e.g. the observer, before it forgot the group
        await asyncio.sleep(0.2)
        assert len(passes) == 1
        await see(memo, deleting, "DELETED")
        await asyncio.sleep(0.2)
        assert len(passes) == 1 and KEY not in memo.runtime.scheduler.due

    with_reaper(scenario)


def test_a_failed_pass_is_logged_and_tried_again_after_the_reaper_interval(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[float] = []

    async def failing(*args: Any, **kwargs: Any) -> Any:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("API server said 500")
        return _plan(idle_wait=60)

    monkeypatch.setattr(handlers, "_compute", failing)

    async def scenario(memo: SimpleNamespace) -> None:
        memo.runtime.heartbeat = 0.0
        await see(memo, BODY)
        await asyncio.sleep(INITIAL + 0.05)
        assert len(calls) == 1
        assert memo.runtime.heartbeat > 0  # a failed pass still counts as reaper progress
        await asyncio.sleep(0.3)
        assert len(calls) == 2 and 0.18 <= calls[1] - calls[0] < 0.35

    with_reaper(scenario, _memo(reaper_interval=0.2))
    assert "reaper pass failed: RuntimeError: API server said 500" in caplog.text


def test_a_pass_keeps_the_liveness_probe_healthy(passes: list[float]) -> None:
    async def scenario(memo: SimpleNamespace) -> None:
        rt = memo.runtime
        rt.settings = Settings(liveness_stall=30)
        rt.heartbeat = time.monotonic() - 60
        rt.demands[KEY] = 1  # a group exists
        with pytest.raises(RuntimeError, match="no progress"):
            startup.liveness(memo)
        await see(memo, BODY)
        await asyncio.sleep(INITIAL + 0.05)
        assert len(passes) == 1
        assert startup.liveness(memo)["reaper_seconds_since_pass"] < 1

    with_reaper(scenario)
