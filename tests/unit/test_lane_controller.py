"""The lane count's controller (``sendgroup_worker.lanes``, ``WORKER_CONCURRENCY=auto``): its
decisions as a table, its bounds as properties, the meter's window arithmetic with injected
clocks, and the two settings as the worker reads them."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sendgroup_contract import worker_settings as ws
from sendgroup_worker import cgroup
from sendgroup_worker.config import ConfigError, WorkerConfig
from sendgroup_worker.lanes import (
    START_LANES,
    WINDOW_JOBS,
    LaneController,
    LaneMeter,
    Tuning,
    Window,
)


def w(
    wall: float = 1.0, cpu: float = 0.2, finished: int = 500, starved: float = 0.0, push: int = 0
) -> Window:
    return Window(wall=wall, cpu=cpu, finished=finished, starved=starved, pushback=push)


@pytest.mark.parametrize(
    ("lanes", "ceiling", "window", "expected", "why"),
    [
        # relay behind a link: 20 % CPU at 4 lanes -> Little wants 18, at most x2 per window
        (4, 32, w(cpu=0.2), 8, "Little's law wants 18"),
        (8, 32, w(cpu=0.4), 16, "Little's law wants 18"),
        (16, 32, w(cpu=0.7), 21, "Little's law wants 21"),  # ceil(16 * 0.9 / 0.7)
        (16, 32, w(cpu=0.84), 18, "Little's law wants 18"),  # just under the hold
        (16, 18, w(cpu=0.2), 18, "Little's law wants 72"),  # the ceiling
        (32, 32, w(cpu=0.2), 32, "at the ceiling"),
        (4, 32, w(cpu=0.9), 4, "CPU busy"),
        # loopback: the CPU is busy, more lanes only queue for it
        (4, 32, w(cpu=0.95), 4, "CPU busy"),
        (4, 32, w(cpu=0.85), 4, "CPU busy"),
        # starved: waiting for work / permits / leases a noticeable share of the lane-seconds
        (4, 32, w(cpu=0.05, starved=0.8), 4, "starved 20%"),
        (4, 32, w(cpu=0.05, starved=3.9), 4, "starved 98%"),
        (4, 32, w(cpu=0.05, starved=0.7), 8, "Little's law"),  # 17 %: grows
        # pushback: halve, at least 1
        (16, 32, w(push=1), 8, "1 temporary answer"),
        (5, 32, w(push=3, cpu=0.01), 2, "3 temporary answer"),
        (1, 32, w(push=9), 1, "halve"),
        # nothing measured
        (4, 32, w(finished=0, cpu=0.0), 4, "nothing finished"),
        (4, 32, w(wall=0.0), 4, "nothing finished"),
    ],
)
def test_one_decision(lanes: int, ceiling: int, window: Window, expected: int, why: str) -> None:
    decision = LaneController(lanes, ceiling).next(window)
    assert decision.lanes == expected
    assert why in decision.reason


def test_pushback_stops_growth_for_the_calm_seconds_then_growth_resumes() -> None:
    c = LaneController(16, 32, Tuning(calm_seconds=3.0))
    assert c.next(w(push=2)).lanes == 8
    slow_relay = w(cpu=0.1)  # would double the count
    for _ in range(3):
        d = c.next(slow_relay)
        assert (d.lanes, d.reason) == (8, "calm after pushback")
    assert c.next(slow_relay).lanes == 16
    # another pushback during the calm restarts it; short windows count their seconds
    c = LaneController(16, 32, Tuning(calm_seconds=3.0))
    c.next(w(push=1))
    c.next(slow_relay)
    assert c.next(w(push=1)).lanes == 4
    quick = w(wall=0.25, cpu=0.025, finished=100)
    assert [c.next(quick).lanes for _ in range(13)] == [4] * 12 + [8]


def test_a_slow_relay_is_followed_up_to_the_ceiling_in_doublings() -> None:
    """Each lane spends 10 ms per mail of which 0.7 ms CPU: the CPU utilisation grows with the
    lanes until the ceiling (a simulated process, Little's law run forward)."""
    c = LaneController(START_LANES, 32)
    seen = [c.lanes]
    for _ in range(8):
        mails = c.lanes * 100  # one second, 10 ms per mail per lane
        c.next(w(cpu=min(1.0, mails * 0.0007), finished=mails))
        seen.append(c.lanes)
    # 4 lanes: 28 % CPU; 8: 56 %; 13 (0.9/0.56*8 = 12.9 -> 13): 91 %, held (>= 0.85)
    assert seen[:4] == [4, 8, 13, 13]
    assert seen[-1] == 13


windows = st.builds(
    Window,
    wall=st.floats(0, 10, allow_nan=False),
    cpu=st.floats(0, 20, allow_nan=False),
    finished=st.integers(0, 100_000),
    starved=st.floats(0, 5000, allow_nan=False),
    pushback=st.integers(0, 50),
)


@given(
    lanes=st.integers(-3, 300),
    ceiling=st.integers(1, 256),
    history=st.lists(windows, min_size=1, max_size=30),
)
def test_the_count_stays_within_its_bounds(lanes: int, ceiling: int, history: list[Window]) -> None:
    """Whatever it measures: 1 <= lanes <= ceiling; growth at most x2 per window; a pushback
    never grows the count, and the next windows of its calm do not either."""
    c = LaneController(lanes, ceiling)
    assert 1 <= c.lanes <= ceiling
    calm = 0.0
    for window in history:
        before = c.lanes
        d = c.next(window)
        assert d.lanes == c.lanes
        assert 1 <= d.lanes <= ceiling
        assert d.lanes <= 2 * before
        assert d.reason
        if window.pushback:
            assert d.lanes == max(1, before // 2)
            calm = c.tuning.calm_seconds
        elif calm > 0:
            assert d.lanes == before
            calm -= window.wall
        else:
            assert d.lanes >= before  # only a pushback shrinks


@given(
    lanes=st.integers(1, 256),
    ceiling=st.integers(1, 256),
    util=st.floats(0.0, 2.0, allow_nan=False),
)
def test_growth_aims_at_the_target_utilisation(lanes: int, ceiling: int, util: float) -> None:
    """Without pushback or starvation the new count is ``min(ceil(lanes * 0.9 / u), 2 x lanes,
    ceiling)`` while the CPU is under 85 %, and unchanged above."""
    c = LaneController(lanes, ceiling)
    start = c.lanes
    d = c.next(w(cpu=util, finished=100))
    if util >= 0.85:
        assert d.lanes == start
    else:
        want = math.ceil(start * 0.9 / max(util, 1e-6) - 1e-9)
        assert d.lanes == max(start, min(want, 2 * start, ceiling))


class FakeClocks:
    def __init__(self) -> None:
        self.now = 100.0
        self.cpu = 5.0


def test_the_meter_splits_waits_between_windows() -> None:
    t = FakeClocks()
    meter = LaneMeter(clock=lambda: t.now, cpu=lambda: t.cpu)
    one = meter.starving()
    one.__enter__()  # a lane starts waiting at 100.0
    t.now = 100.5
    with meter.starving():  # another waits 0.25 s
        t.now = 100.75
    meter.pushback()
    t.now, t.cpu = 101.0, 5.3
    first = meter.take(finished=40)
    assert first == Window(wall=1.0, cpu=pytest.approx(0.3), finished=40, starved=1.25, pushback=1)
    t.now, t.cpu = 101.5, 5.4
    one.__exit__(None, None, None)  # its wait ends half-way into the second window
    t.now = 102.0
    second = meter.take(finished=100)
    assert second == Window(wall=1.0, cpu=pytest.approx(0.1), finished=60, starved=0.5, pushback=0)


def test_a_window_closes_after_enough_jobs_or_at_most_a_second() -> None:
    t = FakeClocks()
    meter = LaneMeter(clock=lambda: t.now, cpu=lambda: t.cpu)
    t.now = 100.125
    assert not meter.full(finished=1000)  # too short, whatever it saw
    t.now = 100.25
    assert not meter.full(finished=WINDOW_JOBS - 1)
    assert meter.full(finished=WINDOW_JOBS)
    meter.take(finished=WINDOW_JOBS)
    t.now = 101.125
    assert not meter.full(finished=WINDOW_JOBS + 3)  # a slow relay: a full second
    t.now = 101.25
    assert meter.full(finished=WINDOW_JOBS + 3)


def _config(**env: str) -> WorkerConfig:
    return WorkerConfig.from_env({"SENDGROUP_QUEUE": "q", **env})


def test_auto_is_the_default_and_starts_at_four() -> None:
    c = _config()
    assert ws.CONCURRENCY.default == "auto" and ws.CONCURRENCY_MAX.default == "32"
    assert (c.auto_lanes, c.start_lanes, c.max_lanes) == (True, START_LANES, 32)


@pytest.mark.parametrize(
    ("env", "auto", "start", "ceiling"),
    [
        ({"WORKER_CONCURRENCY": "4"}, False, 4, 4),
        ({"WORKER_CONCURRENCY": "1"}, False, 1, 1),
        ({"WORKER_CONCURRENCY": "256"}, False, 256, 256),
        ({"WORKER_CONCURRENCY": " Auto "}, True, 4, 32),
        ({"WORKER_CONCURRENCY_MAX": "64"}, True, 4, 64),
        ({"WORKER_CONCURRENCY_MAX": "2"}, True, 2, 2),
        ({"WORKER_CONCURRENCY": "8", "WORKER_CONCURRENCY_MAX": "2"}, False, 8, 8),
        (
            {"SENDGROUP_PROVIDER": '{"id": "csp/relay", "group": "ns/g", "concurrency": 6}'},
            True,
            4,
            6,
        ),
        (
            {"SENDGROUP_PROVIDER": '{"id": "csp/relay", "group": "ns/g", "concurrency": 3}'},
            True,
            3,
            3,
        ),
    ],
)
def test_lane_settings(env: dict[str, str], auto: bool, start: int, ceiling: int) -> None:
    c = _config(**env)
    assert (c.auto_lanes, c.start_lanes, c.max_lanes) == (auto, start, ceiling)


@pytest.mark.parametrize(
    "env",
    [
        {"WORKER_CONCURRENCY": "0"},
        {"WORKER_CONCURRENCY": "257"},
        {"WORKER_CONCURRENCY": "many"},
        {"WORKER_CONCURRENCY": "4.5"},
        {"WORKER_CONCURRENCY_MAX": "0"},
        {"WORKER_CONCURRENCY_MAX": "300"},
    ],
)
def test_bad_lane_settings_name_their_variable(env: dict[str, str]) -> None:
    (name,) = env
    with pytest.raises(ConfigError, match=name):
        _config(**env)


def test_a_growth_without_gain_is_taken_back_and_growth_waits_for_the_plateau() -> None:
    """A relay that takes ~500 jobs/s however many lanes send to it (its own capacity): our
    CPU stays low, so Little's law asks for more lanes; the window after the growth shows
    no gain, the count goes back and does not grow again for the plateau's seconds."""
    c = LaneController(4, 32, Tuning(plateau_seconds=3.0))
    capped = w(cpu=0.2, finished=500)
    assert c.next(capped).lanes == 8  # growth
    d = c.next(capped)  # 8 lanes: still 500 jobs/s
    assert d.lanes == 4 and "no gain, back to 4" in d.reason
    assert [c.next(capped).lanes for _ in range(4)] == [4, 4, 4, 8]  # 3 s, then a new probe
    # a growth that pays is kept and followed
    c = LaneController(4, 32)
    assert c.next(w(cpu=0.2, finished=500)).lanes == 8
    assert c.next(w(cpu=0.4, finished=1000)).lanes == 16


def test_a_cpu_limit_below_a_core_is_the_ceiling_of_utilisation() -> None:
    """0.45 CPU seconds per second: busy for a pod limited to half a core, idle for a core."""
    window = w(cpu=0.45, finished=500)
    assert LaneController(4, 32, cores=0.5).next(window).lanes == 4
    assert "of 0.5 core" in LaneController(4, 32, cores=0.5).next(window).reason
    assert LaneController(4, 32).next(window).lanes == 8
    assert LaneController(4, 32, cores=4.0).cores == 1.0  # one process: one core at most


@pytest.mark.parametrize(
    ("files", "cores"),
    [
        ({"cpu.max": "50000 100000\n"}, 0.5),
        ({"cpu.max": "max 100000\n"}, None),
        ({"cpu.max": "150000 100000\n"}, 1.5),
        ({"cpu/cpu.cfs_quota_us": "25000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 0.25),
        ({"cpu,cpuacct/cpu.cfs_quota_us": "-1\n", "cpu,cpuacct/cpu.cfs_period_us": "100000"}, None),
        ({"cpu.max": "garbage\n"}, None),
        ({}, None),
    ],
)
def test_the_cgroup_cpu_limit(tmp_path: Path, files: dict[str, str], cores: float | None) -> None:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert cgroup.cpu_limit(tmp_path) == cores
