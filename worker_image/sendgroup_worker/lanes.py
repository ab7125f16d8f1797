"""How many lanes a worker process runs with ``WORKER_CONCURRENCY=auto``: a pure controller.

A lane sends one mail at a time (:mod:`sendgroup_worker.worker`), so the lane count is the
number of mails in flight. The right count depends on the relay: on loopback a mail costs
~0.7 ms of CPU and about as much wall time, so 4 lanes keep the process busy; behind a 1 ms
link a mail waits several round trips, and 4 lanes leave the CPU idle (bench/README rows 1-2:
713 mails/s at 4 lanes, level with Dramatiq at 16).

The formula, Little's law (J. D. C. Little, "A Proof for the Queuing Formula L = lambda W",
Operations Research 9(3), 1961): a process with ``L`` mails in flight, each taking ``W``
seconds of wall time, sends ``lam = L / W`` mails/s. One Python process (one core under the
GIL) spends ``c`` CPU seconds per mail, so it sends at most ``1 / c`` mails/s; to run its CPU
at a target utilisation ``rho`` it needs ``lam = rho / c``, that is ``L = rho · W / c`` lanes.
Measured over one window of ``wall`` seconds in which ``finished`` mails ended with ``lanes``
lanes busy and the process used ``cpu`` CPU seconds (``time.process_time``):
``W = lanes · wall / finished`` (lane-seconds per mail) and ``c = cpu / finished``, so

    L* = rho · (lanes · wall / finished) / (cpu / finished) = lanes · rho / u,   u = cpu / wall

(``u``: the process' CPU utilisation, CPU seconds per wall second). The controller moves
toward ``L*`` at most :attr:`Tuning.max_growth` times the current count per window, never past
the ceiling (``WORKER_CONCURRENCY_MAX``, and the provider's concurrency when one is set).

``u`` is taken of the CPU the process may use: one core, or less under a CPU limit (the
container's cgroup quota, ``cores``), so a pod limited to half a core is busy at 0.5 CPU
seconds per second and does not grow toward a CPU it will never get.

It holds instead of growing when more lanes cannot help: the CPU is already busy
(``u >= cpu_hold``), or the lanes spent a noticeable share of their time starved (waiting
for work, for rate permits or provider leases, or paused/suspended: the queue, the rate
limit or the provider bounds the throughput, not the lane count).

Every growth is checked by the window after it: when the jobs/s did not rise by
:attr:`Tuning.min_gain`, the count goes back and does not grow for
:attr:`Tuning.plateau_seconds` (something else than our CPU bounds the rate: the relay's own
capacity, the network, a busy node). Without that check a relay that slows down as it gets
busier (wall time per mail up, our CPU share down) would draw the count to the ceiling.

On pushback (an SMTP 4xx, 421 included, a connection failure or a time-out) it halves the
count (at least 1) and does not grow for :attr:`Tuning.calm_seconds` seconds: multiplicative
decrease, as mail transfer agents back off a destination that defers. Postfix's scheduler
(since 2.5, ``SCHEDULER_README``, "concurrency feedback"; ``postfix.org/queuing.html``: "the
concurrency slowly increases ... concurrency is decreased in the face of trouble", an analog
of TCP's congestion control) and KumoMTA's listener, which answers ``421 4.3.2`` to
connections over its ``max_connections``, are the models: a relay that defers is saying it
has too many of ours.

Nothing here does I/O or reads a clock except :class:`LaneMeter`, whose clocks are injected.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

#: Lanes at start with auto: the former fixed default, so nothing changes until measured.
START_LANES: Final = 4

#: A window (one decision) closes once it lasted :data:`WINDOW_MIN` seconds and saw
#: :data:`WINDOW_JOBS` jobs finish, or after :data:`WINDOW_MAX` seconds whatever it saw. 64
#: jobs give the CPU time per job within a few per cent (process_time counts nanoseconds;
#: a job costs ~0.7 ms); at ~700 mails/s (4 lanes, 1 ms link) a window is 0.2 s, so the
#: count goes from 4 to 32 in ~0.6 s, within a short burst, not after it. A slow relay
#: (under 64 jobs a second) gets 1 s windows.
WINDOW_MIN: Final = 0.2
WINDOW_MAX: Final = 1.0
WINDOW_JOBS: Final = 64
#: Seconds between two looks at whether the window is full (:meth:`LaneMeter.full`).
WINDOW_POLL: Final = 0.05


@dataclass(frozen=True, slots=True)
class Window:
    """What one window measured (every field >= 0).

    ``wall``: seconds; ``cpu``: the process' CPU seconds (user + system, all threads);
    ``finished``: jobs the lanes finished; ``starved``: lane-seconds spent waiting for work,
    rate permits, provider leases, or while paused or suspended; ``pushback``: temporary
    answers from the relay (4xx incl. 421, connection failures, time-outs)."""

    wall: float
    cpu: float
    finished: int
    starved: float
    pushback: int


@dataclass(frozen=True, slots=True)
class Decision:
    """The lane count for the next window and why (numbers included, for the log line)."""

    lanes: int
    reason: str


@dataclass(frozen=True, slots=True)
class Tuning:
    """The controller's constants (fractions are of 1; see the module docstring)."""

    #: rho, the CPU utilisation growth aims for: above :attr:`cpu_hold`, so the count
    #: settles between the two. The CPU per mail falls as lanes are added (more work per
    #: event-loop turn: scenario 2, +1 ms link, 0.77 ms at 4 lanes, 0.61-0.69 at 16), so
    #: Little's law with the last window's CPU per mail undershoots; with rho = 0.8 auto
    #: stopped at 7 lanes, 877 mails/s, where 16 lanes sent 1,394 (bench/lanes_round.py)
    target_util: float = 0.9
    #: CPU utilisation at or above which the count holds
    cpu_hold: float = 0.85
    #: share of the lanes' time spent starved at or above which the count holds
    starved_hold: float = 0.2
    #: seconds without growth after a pushback
    calm_seconds: float = 3.0
    #: most growth per window, a factor
    max_growth: float = 2.0
    #: jobs/s after a growth must be at least this times the jobs/s before it
    min_gain: float = 1.05
    #: seconds without growth after a growth that brought no gain (then it probes again)
    plateau_seconds: float = 30.0


class LaneController:
    """The lane count, one decision per window (:meth:`next`). ``lanes``: the current count
    (1 <= lanes); ``ceiling``: the most it may reach (>= 1); ``cores``: the CPU the process
    may use, in cores (at most 1: one Python process; less under a cgroup CPU limit). The
    count always stays within ``[1, ceiling]`` and grows at most ``max_growth`` times per
    window."""

    def __init__(
        self, lanes: int, ceiling: int, tuning: Tuning | None = None, cores: float = 1.0
    ) -> None:
        self.ceiling = max(1, ceiling)
        self.lanes = min(max(1, lanes), self.ceiling)
        self.tuning = tuning or Tuning()
        self.cores = min(1.0, cores) if cores > 0 else 1.0
        #: seconds left without growth (after a pushback)
        self.calm = 0.0
        #: seconds left without growth (after a growth that brought no gain)
        self.plateau = 0.0
        #: the last decision grew the count: (the count before, its jobs/s)
        self._grew_from: tuple[int, float] | None = None

    def next(self, w: Window) -> Decision:
        """The count for the next window from what the last one measured (also kept as
        :attr:`lanes`)."""
        decision = self._decide(w)
        self.lanes = min(max(1, decision.lanes), self.ceiling)
        return Decision(self.lanes, decision.reason)

    def _decide(self, w: Window) -> Decision:
        t, lanes = self.tuning, self.lanes
        grew_from, self._grew_from = self._grew_from, None
        if w.pushback > 0:
            self.calm = t.calm_seconds
            return Decision(
                max(1, lanes // 2),
                f"{w.pushback} temporary answer(s) from the relay (4xx/421/connection) in "
                f"{w.wall:.2f}s: halve, no growth for {t.calm_seconds:g}s",
            )
        if self.calm > 0:
            self.calm -= w.wall
            return Decision(lanes, "calm after pushback")
        if w.wall <= 0 or w.finished == 0:
            return Decision(lanes, "nothing finished: nothing to measure")
        starved = w.starved / (lanes * w.wall)
        if starved >= t.starved_hold:
            return Decision(
                lanes,
                f"lanes starved {starved:.0%} of the time (queue, rate limit or provider "
                "bound): more lanes cannot help",
            )
        rate = w.finished / w.wall
        if grew_from is not None and rate < grew_from[1] * t.min_gain:
            self.plateau = t.plateau_seconds
            return Decision(
                grew_from[0],
                f"{lanes} lanes sent {rate:.0f} jobs/s, {grew_from[0]} sent {grew_from[1]:.0f}: "
                f"no gain, back to {grew_from[0]}, no growth for {t.plateau_seconds:g}s",
            )
        util = w.cpu / w.wall / self.cores
        measured = (
            f"{rate:.0f} jobs/s, CPU {util:.0%}"
            + (f" of {self.cores:g} core" if self.cores < 1 else "")
            + f", {1000 * w.cpu / w.finished:.2f} ms CPU/job"
        )
        if self.plateau > 0:
            self.plateau -= w.wall
            return Decision(lanes, f"plateau (the last growth brought no gain): {measured}")
        if util >= t.cpu_hold:
            return Decision(lanes, f"CPU busy: {measured}")
        # Little's law (module docstring); less 1e-9: no lane more for a rounding error
        want = math.ceil(lanes * t.target_util / max(util, 1e-6) - 1e-9)
        grown = min(want, math.floor(lanes * t.max_growth), self.ceiling)
        if grown <= lanes:
            why = "at the ceiling" if lanes >= self.ceiling else "at the CPU target"
            return Decision(lanes, f"{why}: {measured}")
        self._grew_from = (lanes, rate)
        return Decision(
            grown, f"{measured}: Little's law wants {want} lanes for {t.target_util:.0%} CPU"
        )


class _Starving:
    """Context manager of :meth:`LaneMeter.starving`."""

    __slots__ = ("_meter", "_token")

    def __init__(self, meter: LaneMeter) -> None:
        self._meter = meter
        self._token = 0

    def __enter__(self) -> None:
        self._token = self._meter._begin()

    def __exit__(self, *_: object) -> None:
        self._meter._end(self._token)


class LaneMeter:
    """The counters of the current window, kept by the worker's lanes, read and reset by
    :meth:`take` once per window. ``clock``: monotonic seconds; ``cpu``: the process' CPU
    seconds (``time.process_time``). A wait that spans windows is split between them."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
    ) -> None:
        self._clock = clock
        self._cpu = cpu
        self._start = clock()
        self._cpu_start = cpu()
        self._finished_start = 0
        self._starved = 0.0
        self._pushback = 0
        #: waits in progress: token -> when they began (monotonic seconds)
        self._waiting: dict[int, float] = {}
        self._tokens = 0

    def starving(self) -> _Starving:
        """``with meter.starving(): await ...``: the lane is waiting for work, a permit, a
        lease, or out a pause/suspension; its time counts as starved."""
        return _Starving(self)

    def full(self, finished: int) -> bool:
        """Whether the window may close (see :data:`WINDOW_MIN`); ``finished`` as for
        :meth:`take`."""
        elapsed = self._clock() - self._start
        jobs = finished - self._finished_start
        return elapsed >= WINDOW_MAX or (elapsed >= WINDOW_MIN and jobs >= WINDOW_JOBS)

    def pushback(self) -> None:
        """Count one temporary answer from the relay (4xx, connection failure, time-out)."""
        self._pushback += 1

    def take(self, finished: int) -> Window:
        """Close the window: ``finished`` is the process' count of finished jobs so far (the
        window's is the difference). Returns what it measured; the next window starts now."""
        now, cpu = self._clock(), self._cpu()
        starved = self._starved + sum(now - max(s, self._start) for s in self._waiting.values())
        window = Window(
            wall=max(0.0, now - self._start),
            cpu=max(0.0, cpu - self._cpu_start),
            finished=max(0, finished - self._finished_start),
            starved=max(0.0, starved),
            pushback=self._pushback,
        )
        self._start, self._cpu_start, self._finished_start = now, cpu, finished
        self._starved, self._pushback = 0.0, 0
        return window

    def _begin(self) -> int:
        self._tokens += 1
        self._waiting[self._tokens] = self._clock()
        return self._tokens

    def _end(self, token: int) -> None:
        since = self._waiting.pop(token)
        self._starved += max(0.0, self._clock() - max(since, self._start))
