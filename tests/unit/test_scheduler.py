"""The reaper's scheduler (issue 15): one task and a heap of per-group deadlines instead of a
kopf daemon per group. What a group sees: its passes come when due, a kick brings the next one
closer (never later), a pass answers the kicks due after it started, a hand-over moves it,
a dropped group never passes again, at most ``concurrency`` passes run at once, a pass that
raised is tried again, and stop ends it all within its timeout."""

from __future__ import annotations

import asyncio
import gc
import time
import tracemalloc
from collections.abc import Awaitable, Callable

import pytest

from sendgroup_operator.scheduler import Scheduler


class Passes:
    """A pass function that records (key, monotonic seconds) and returns ``delay``."""

    def __init__(self, delay: float | None = 60.0, takes: float = 0.0) -> None:
        self.delay = delay
        self.takes = takes
        self.calls: list[tuple[str, float]] = []
        self.running = 0
        self.most = 0

    async def __call__(self, key: str) -> float | None:
        self.calls.append((key, time.monotonic()))
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            if self.takes:
                await asyncio.sleep(self.takes)
        finally:
            self.running -= 1
        return self.delay

    def of(self, key: str) -> list[float]:
        return [t for k, t in self.calls if k == key]


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 10))


async def passed_once(passes: Passes, *keys: str) -> Scheduler:
    """A started scheduler (no initial delay) with ``keys`` added, 50 ms later: each key's
    first pass has run (or, with ``passes.takes``, is running)."""
    sched = Scheduler(initial_delay=0.0)
    sched.start(passes)
    for key in keys:
        sched.add(key)
    await asyncio.sleep(0.05)
    return sched


def test_a_new_group_passes_after_the_initial_delay_then_at_its_own_delay() -> None:
    passes = Passes(delay=0.2)

    async def scenario() -> None:
        sched = Scheduler(initial_delay=0.1)
        sched.start(passes)
        started = time.monotonic()
        assert sched.add("a/g")
        assert not sched.add("a/g")  # seen again: its deadline stays
        await asyncio.sleep(0.45)
        times = [t - started for t in passes.of("a/g")]
        assert len(times) == 2, times
        assert 0.08 <= times[0] < 0.2 and 0.28 <= times[1] < 0.4
        await sched.stop(1)

    run(scenario)


def test_a_kick_brings_the_next_pass_closer_never_later() -> None:
    passes = Passes(delay=60)

    async def scenario() -> None:
        sched = await passed_once(passes, "a/g")
        assert len(passes.calls) == 1  # resting for a minute now
        started = time.monotonic()
        sched.kick("a/g", 0.1)
        sched.kick("a/g", 5)  # later: no effect
        await asyncio.sleep(0.2)
        assert len(passes.calls) == 2
        assert 0.08 <= passes.calls[1][1] - started < 0.2
        left = sched.deadline("a/g")
        assert left is not None and left > 59
        sched.kick("nobody/x", 0)  # unknown group: nothing happens
        await sched.stop(1)

    run(scenario)


def test_a_pass_answers_the_kicks_due_after_it_started() -> None:
    """A follow-up asked for in 0.3 s, but a pass ran at 0.1 s (jobs arrived): that pass
    answered it; no second pass at 0.3 s (a second pass within milliseconds, seen in CI with
    the former daemons' timers)."""
    passes = Passes(delay=60)

    async def scenario() -> None:
        sched = await passed_once(passes, "a/g")
        sched.kick("a/g", 0.3)
        sched.kick("a/g", 0.1)
        await asyncio.sleep(0.5)
        assert len(passes.calls) == 2
        await sched.stop(1)

    run(scenario)


def test_a_kick_while_its_pass_runs_passes_again_after_it() -> None:
    passes = Passes(delay=60, takes=0.1)

    async def scenario() -> None:
        sched = await passed_once(passes, "a/g")  # the first pass runs
        sched.kick("a/g", 0)  # jobs arrived meanwhile
        await asyncio.sleep(0.3)
        assert len(passes.calls) == 2
        assert passes.most == 1  # never two passes of one group at once
        await sched.stop(1)

    run(scenario)


def test_a_hand_over_moves_the_next_pass_and_a_kick_still_ends_it() -> None:
    passes = Passes(delay=60)

    async def scenario() -> None:
        sched = Scheduler(initial_delay=0.05)
        sched.start(passes)
        sched.add("a/g")
        sched.defer("a/g", 30)  # a change handler passed it: the reaper waits
        await asyncio.sleep(0.2)
        assert passes.calls == []
        sched.defer("a/g", 0.05)  # a follow-up sooner
        await asyncio.sleep(0.15)
        assert len(passes.calls) == 1
        sched.defer("a/g", 30)
        sched.kick("a/g", 0)
        await asyncio.sleep(0.05)
        assert len(passes.calls) == 2
        await sched.stop(1)

    run(scenario)


def test_a_dropped_group_never_passes_again() -> None:
    passes = Passes(delay=0.05, takes=0.1)

    async def scenario() -> None:
        sched = await passed_once(passes, "a/g", "a/h")  # both passes run
        assert sched.drop("a/g")
        sched.kick("a/g", 0)
        await asyncio.sleep(0.4)
        assert len(passes.of("a/g")) == 1  # its pass in flight finished, nothing after
        assert len(passes.of("a/h")) >= 2
        assert not sched.drop("a/g")
        assert "a/g" not in sched.due and "a/g" not in sched.running
        await sched.stop(1)

    run(scenario)


def test_at_most_concurrency_passes_run_at_once_and_all_pass() -> None:
    passes = Passes(delay=60, takes=0.05)

    async def scenario() -> None:
        sched = Scheduler(concurrency=3, initial_delay=0.0)
        sched.start(passes)
        for i in range(10):
            sched.add(f"a/g{i}")
        await asyncio.sleep(0.5)
        assert len(passes.calls) == 10
        assert passes.most == 3
        await sched.stop(1)

    run(scenario)


def test_a_pass_that_raised_is_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[float] = []

    async def failing(key: str) -> float:
        calls.append(time.monotonic())
        if len(calls) == 1:
            raise RuntimeError("boom")
        return 60

    async def scenario() -> None:
        sched = Scheduler(initial_delay=0.0, retry=0.1)
        sched.start(failing)
        sched.add("a/g")
        await asyncio.sleep(0.3)
        assert len(calls) == 2 and 0.08 <= calls[1] - calls[0] < 0.25
        assert sched.failures == 1
        await sched.stop(1)

    run(scenario)
    assert "reaper pass of a/g raised" in caplog.text


def test_a_gated_group_is_parked_until_woken() -> None:
    passes = Passes(delay=60)
    mine = {"a/g": False}

    async def scenario() -> None:
        sched = Scheduler(initial_delay=0.0)
        sched.start(passes, gate=lambda key: mine[key])
        sched.add("a/g")
        await asyncio.sleep(0.1)
        assert passes.calls == [] and sched.deadline("a/g") is None  # parked
        mine["a/g"] = True
        sched.wake_all()  # the assignment changed
        await asyncio.sleep(0.05)
        assert len(passes.calls) == 1
        await sched.stop(1)

    run(scenario)


def test_stop_waits_for_passes_in_flight_then_cancels_them() -> None:
    async def scenario() -> None:
        quick, slow = Passes(takes=0.05), Passes(takes=30)
        for passes in (quick, slow):
            sched = Scheduler(initial_delay=0.0)
            sched.start(passes)
            sched.add("a/g")
            await asyncio.sleep(0.02)
            assert passes.running == 1
            started = time.monotonic()
            await sched.stop(0.2)
            took = time.monotonic() - started
            assert passes.running == 0
            if passes is quick:
                assert took < 0.15  # finished on its own
            else:
                assert 0.18 <= took < 0.5  # cancelled at the timeout
            sched.kick("a/g", 0)
            await asyncio.sleep(0.05)
            assert len(passes.calls) == 1  # the loop is gone

    run(scenario)


def test_ten_thousand_resting_groups_cost_under_400_bytes_each() -> None:
    """What the schedule holds per resting group (its ``due`` entry and one heap entry): the
    former kopf daemon held ~15-20 KB per group (bench/results/2026-12-04-mem/note.md)."""
    keys = [f"scale-{i % 10:02d}/group-{i:05d}" for i in range(10_000)]  # the watch's strings
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        sched = Scheduler(initial_delay=0.0)
        for key in keys:
            sched.add(key)
            sched.defer(key, 60)  # rested: each defer left a stale heap entry behind
        per_group = (tracemalloc.get_traced_memory()[0] - before) / len(keys)
    finally:
        tracemalloc.stop()
    assert len(sched.due) == 10_000
    assert per_group < 400, per_group
