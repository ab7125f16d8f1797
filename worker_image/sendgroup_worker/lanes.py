"""How many lanes a worker process runs with ``WORKER_CONCURRENCY=auto``: a pure controller.

A lane sends one mail at a time (:mod:`sendgroup_worker.worker`), so the lane count is the
number of mails in flight. The right count depends on the relay: on loopback a mail costs
~0.7 ms of CPU and about as much wall time, so 4 lanes keep the process busy; behind a 1 ms
link a mail waits several round trips, and 4 lanes leave the CPU idle (bench/README rows 1-2:
713 mails/s at 4 lanes, level with Dramatiq at 16).

Why lanes help, Little's law (J. D. C. Little, "A Proof for the Queuing Formula L = lambda W",
Operations Research 9(3), 1961): a process with ``L`` mails in flight, each taking ``W``
seconds of wall time, sends ``lam = L / W`` mails/s. One Python process (one core under the
GIL) spends ``c`` CPU seconds per mail, so it sends at most ``1 / c`` mails/s; its CPU
utilisation is ``u = lam · c`` (CPU seconds per wall second, measured as ``cpu / wall`` over
a window). While ``u`` is well under 1, more mails in flight send more (``W`` barely grows);
once it nears 1 they only queue for the CPU. Little's law would size the count in one step,
``L* = L · rho / u`` for a target utilisation ``rho``, if ``c`` did not depend on ``L``; it
does: more lanes do more work per event-loop turn, and the CPU per mail falls (scenario 2,
+1 ms link: 0.77 ms at 4 lanes, 0.61-0.69 at 16), so ``L*`` measured at 4 lanes undershoots.
The first controller followed ``L*`` (at most x2 a window) and stopped at 6-7 lanes in a
1,000-mail drain: 1,076 mails/s where fixed 16 lanes sent 1,543 (bench/lanes_round.py).

So the count climbs on measured throughput instead, as TCP's slow start climbs on delivered
segments (RFC 5681 3.1: the window doubles each round trip until loss) and Postfix's
scheduler raises a destination's concurrency while deliveries succeed (since 2.5,
``SCHEDULER_README``, "concurrency feedback"): it doubles while the CPU has room (``u <
cpu_hold``), and keeps doubling while the last doubling paid (the jobs/s rose by
:attr:`Tuning.min_gain`), whatever ``u`` says, because the payoff is the direct measure and
``u`` is not (a busy CPU still gains when the CPU per mail falls). A doubling that did not
pay while the CPU had room goes back and the count does not grow for
:attr:`Tuning.plateau_seconds` (something else than the lane count bounds the rate: the
relay's own capacity, the network, a busy node; a relay that slows down as it gets busier
would otherwise draw the count to the ceiling). Never past the ceiling
(``WORKER_CONCURRENCY_MAX``, and the provider's concurrency when one is set).

A doubling that did not pay while the CPU was busy (``u >= cpu_hold``) is not taken back on
that window's word: the window that judges a growth is short (tens of jobs, a few hundredths
of a second) and, at a busy CPU, a doubling costs little (the lanes only queue for the CPU,
whose cost per mail falls as the lanes grow) and the short window misjudges it. Scenario 2's
lane trace (``bench/results/2026-12-04-smtp/lane-trace.md``, 3 drains per link): with the
CPU at 86-100 %, 16 or 32 lanes "sent" 8-49 % less than the count before them in ~0.05 s
windows, so the count went back (16 -> 8, 32 -> 16) and stopped growing for 30 s, while fixed
16 lanes sent more than ``auto`` over whole drains on both links (2,138 vs 1,964 mails/s on
loopback, 2,453 vs 1,921 on the +1 ms link). So the count is kept for one more window of full
length (:data:`WINDOW_MIN`, :data:`WINDOW_JOBS`) and judged again: kept (no growth for the
plateau) unless that window lost more than :attr:`Tuning.max_loss` of the jobs/s before the
growth, or the CPU stopped being busy without a gain; then it goes back as above. A relay
that slows down as it gets busier shows there as a loss or as a CPU with room.

Where it starts: :data:`START_LANES`, 16 lanes (fewer under a lower ceiling), not the former
fixed 4. A near relay keeps the CPU busy from 4 lanes on, and at a busy CPU the count holds
(rule 11) although the CPU per mail still falls as lanes are added (scenario 2 on loopback,
``bench/results/2026-12-04-smtp-cpu19``: 0.43 ms at 4 lanes, 0.34 at 16; 2,238 against 2,989
mails/s): in ``bench.lanes_round`` runs on 2026-12-04, 4 of 6 loopback drains read the CPU at
>= 85 % in their first window and stayed at 4 lanes. Where the count did climb, the climb
(4 -> 8 -> 16, each step a window and the new lanes' warm-up) took 0.05-0.12 s of drains of
0.5-0.9 s, and auto sent 0.80x (loopback) and 0.84x (+1 ms link) of fixed 16. Started at 16,
a busy CPU holds there and a CPU with room doubles to 32 after the first window, judged as any
growth. That first window judges the start, not a climb, so it has the full length
(:data:`WINDOW_MIN`, :data:`WINDOW_JOBS`): in climb windows (0.01-0.03 s) 16 lanes read the
CPU at 66-82 % and doubled to 32 in 7 of 10 drains of a ``bench.lanes_round`` run
(2026-12-04 20:15; all 5 on the +1 ms link), where fixed 16 lanes kept it 87-98 % busy over
whole drains (CPU per mail x mails/s). What it costs: a worker that starts idle runs 16 lanes
that wait (one blocking Redis call for all of them; one Redis connection each), and a relay
that takes fewer connections answers the first sends with 421s, which halve the count
(rule 1).

``u`` counts the time the process waited for a CPU as busy time (``waited``: its event-loop
thread was runnable while other processes ran, Linux's run-queue wait,
``/proc/thread-self/schedstat``): on a machine whose cores other processes keep busy the
process gets less than a core, and its own CPU share reads as room that is not there. In a
``bench.lanes_round`` run on a loaded machine (2026-12-04 20:33, 5 rounds per link), 16 lanes
read the CPU at 62-84 % in their first window and doubled to 32 in 6 of 10 drains; 32 went
back for bringing no gain in 3 of them, and those 6 drains sent 0.55-1.02x (median 0.73x)
the mails/s of the fixed 16 lanes beside them, the 4 that stayed at 16 0.89-1.26x.

``u`` is taken of the CPU the process may use: one core, or less under a CPU limit (the
container's cgroup quota, ``cores``), so a pod limited to half a core is busy at 0.5 CPU
seconds per second and does not start climbing toward a CPU it will never get.

It holds instead of growing when more lanes cannot help: the lanes spent a noticeable share
of their time starved (waiting for work, for rate permits or provider leases, or
paused/suspended: the queue, the rate limit or the provider bounds the throughput, not the
lane count), or the CPU is busy and no growth is paying.

On pushback (an SMTP 4xx, 421 included, a connection failure or a time-out) it halves the
count (at least 1) and does not grow for :attr:`Tuning.calm_seconds` seconds: multiplicative
decrease, as mail transfer agents back off a destination that defers. Postfix's scheduler
(``postfix.org/queuing.html``: "the concurrency slowly increases ... concurrency is
decreased in the face of trouble", an analog of TCP's congestion control) and KumoMTA's
listener, which answers ``421 4.3.2`` to connections over its ``max_connections``, are the
models: a relay that defers is saying it has too many of ours.

The decision per window (:meth:`LaneController.next`; the first rule that applies; ``rate``
= ``finished / wall`` jobs/s, ``starved`` = ``starved / (lanes · wall)``, ``u`` = ``(cpu +
waited) / wall / cores``):

=====  ==========================================================  =========================
 rule  when                                                        next count
=====  ==========================================================  =========================
 1     ``pushback > 0``                                             ``max(1, lanes // 2)``,
                                                                    calm for ``calm_seconds``
 2     calm (seconds left after a pushback)                         ``lanes``
 3     nothing finished (``wall == 0`` or ``finished == 0``)        ``lanes``
 4     ``starved >= starved_hold`` (0.2)                            ``lanes``
 5     the last decision grew from ``n`` at ``r`` jobs/s,           ``lanes``, the next window
       ``rate < r · min_gain`` (1.05) and ``u >= cpu_hold``         full length, judged by 7
 6     the last decision grew from ``n`` at ``r`` jobs/s and        ``n``, plateau for
       ``rate < r · min_gain`` (the CPU had room)                   ``plateau_seconds`` (30)
 7     the last decision was rule 5's for ``n`` at ``r`` and        ``lanes`` if ``u >=
       ``rate < r · min_gain`` (if not, it paid: rule 10)           cpu_hold`` and ``rate >=
                                                                    r · (1 - max_loss)``
                                                                    (0.1), else ``n``; plateau
 8     plateau (seconds left)                                       ``lanes``
 9     ``lanes == ceiling``                                         ``lanes``
 10    the last decision grew, or was rule 5's, and it paid         ``min(2 · lanes, ceiling)``
 11    ``u >= cpu_hold`` (0.85)                                     ``lanes``
 12    otherwise (the CPU has room)                                 ``min(2 · lanes, ceiling)``
=====  ==========================================================  =========================

Windows: one closes after :data:`WINDOW_JOBS` jobs and :data:`WINDOW_MIN` seconds, or at
:data:`WINDOW_MAX` seconds; while the count is climbing (each window that judges a growth)
after ``max(CLIMB_JOBS, 2 x lanes)`` jobs and :data:`CLIMB_MIN` seconds, so a climb reaches
its count within ~0.1 s (a 1,000-mail drain behind a 1 ms link lasts 0.45-0.7 s). The first
window (the start) has the full length, see above. A window that judges a growth starts once
every new lane finished its first job (:attr:`LaneMeter.cold`, the worker's tuner): a new
lane's SMTP connection costs ~3 round trips and ~1 ms of CPU, and 16 of them in a 50 ms window
made 32 lanes look slower than 16 (bench/lanes_round.py, 2026-12-04). The same holds for the
first window: it starts once every lane finished its first job.

Nothing here does I/O or reads a clock except :class:`LaneMeter`, whose clocks are injected
(by default ``time.monotonic``, ``time.process_time`` and :func:`run_queue_wait`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Literal

#: Lanes at start with auto (within the ceiling, :attr:`WorkerConfig.start_lanes
#: <sendgroup_worker.config.WorkerConfig.start_lanes>`): of the fixed counts scenario 2
#: measures (1, 4, 16), the one that sent the most on both links (module docstring, "Where it
#: starts"). Was 4, the former fixed default.
START_LANES: Final = 16

#: A window (one decision) closes once it lasted :data:`WINDOW_MIN` seconds and saw
#: :data:`WINDOW_JOBS` jobs finish, or after :data:`WINDOW_MAX` seconds whatever it saw. 64
#: jobs give the CPU time per job within a few per cent (process_time counts nanoseconds;
#: a job costs ~0.7 ms) and the jobs/s within ~2 % (a lane's job in progress at either end
#: is the error: sd ~ sqrt(lanes / 6) jobs). A slow relay (under 64 jobs a second) gets 1 s
#: windows.
WINDOW_MIN: Final = 0.2
WINDOW_MAX: Final = 1.0
WINDOW_JOBS: Final = 64
#: While the count climbs (each window that judges a growth) a window may close after
#: :data:`CLIMB_MIN` seconds and ``max(CLIMB_JOBS, 2 x lanes)`` jobs: at ~900 mails/s (4
#: lanes, 1 ms link) 16 jobs take 18 ms, so 4 -> 8 -> 16 -> 32 lanes within ~0.1 s instead
#: of 0.6 s (a 1,000-mail drain there lasts 0.45-0.7 s). The jobs
#: of the lanes in progress at either end are the error (sd ~ sqrt(lanes / 6) jobs): ~5 % at
#: 16 jobs from 4 lanes and at two jobs a lane, against the 25-70 % a paying doubling gains
#: there; a relay at its own capacity passes a doubling's 5 % check by chance ~1 in 4 times,
#: so three chance passes in a row would draw the count to 32 (~1.5 % of the probes).
CLIMB_MIN: Final = 0.01
CLIMB_JOBS: Final = 16
#: Seconds between two looks at whether the window is full (:meth:`LaneMeter.full`); while
#: climbing :data:`CLIMB_POLL`, so a short window does not overrun by a long poll.
WINDOW_POLL: Final = 0.05
CLIMB_POLL: Final = 0.005


@dataclass(frozen=True, slots=True)
class Window:
    """What one window measured (every field >= 0).

    ``wall``: seconds; ``cpu``: the process' CPU seconds (user + system, all threads);
    ``finished``: jobs the lanes finished; ``starved``: lane-seconds spent waiting for work,
    rate permits, provider leases, or while paused or suspended; ``pushback``: temporary
    answers from the relay (4xx incl. 421, connection failures, time-outs); ``waited``:
    seconds the process' event-loop thread was runnable but waited for a CPU while other
    tasks ran (:func:`run_queue_wait`)."""

    wall: float
    cpu: float
    finished: int
    starved: float
    pushback: int
    waited: float = 0.0


@dataclass(frozen=True, slots=True)
class Decision:
    """The lane count for the next window and why (numbers included, for the log line)."""

    lanes: int
    reason: str


@dataclass(frozen=True, slots=True)
class Tuning:
    """The controller's constants (fractions are of 1; see the module docstring)."""

    #: CPU utilisation at or above which the count holds unless the last growth paid
    cpu_hold: float = 0.85
    #: share of the lanes' time spent starved at or above which the count holds
    starved_hold: float = 0.2
    #: seconds without growth after a pushback
    calm_seconds: float = 3.0
    #: growth per window, a factor (the count at least + 1)
    max_growth: float = 2.0
    #: jobs/s after a growth must be at least this times the jobs/s before it
    min_gain: float = 1.05
    #: seconds without growth after a growth that brought no gain (then it probes again)
    plateau_seconds: float = 30.0
    #: share of the jobs/s before a growth that a busy CPU may lose over a full window after
    #: it before the growth is taken back (rule 7)
    max_loss: float = 0.1


class LaneController:
    """The lane count, one decision per window (:meth:`next`, the module docstring's table).
    ``lanes``: the current count (1 <= lanes); ``ceiling``: the most it may reach (>= 1);
    ``cores``: the CPU the process may use, in cores (at most 1: one Python process; less
    under a cgroup CPU limit). The count always stays within ``[1, ceiling]``, grows at most
    ``max_growth`` times per window, and shrinks only on pushback (halved) or back to the
    count before a growth that brought no gain (at a busy CPU: a loss over a full window)."""

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
        #: the last decision held a growth that had not paid at a busy CPU (rule 5), to be
        #: judged again over a full window: (the count before the growth, its jobs/s)
        self._confirming: tuple[int, float] | None = None
        #: the next window judges a climb (one after a growth); the first judges the start at
        #: full length (module docstring, "Where it starts")
        self._climbing = False

    @property
    def climbing(self) -> bool:
        """Whether the next window judges a climb: after a growth (:meth:`window_min`,
        :meth:`window_jobs`); not the first window, which judges the start."""
        return self._climbing

    @property
    def window_min(self) -> float:
        """Seconds the next window lasts at least: :data:`CLIMB_MIN` while the count climbs,
        else :data:`WINDOW_MIN`."""
        return CLIMB_MIN if self._climbing else WINDOW_MIN

    @property
    def window_jobs(self) -> int:
        """Jobs the next window sees at least (unless it lasts :data:`WINDOW_MAX`):
        ``max(CLIMB_JOBS, 2 x lanes)`` while the count climbs, else :data:`WINDOW_JOBS`."""
        return max(CLIMB_JOBS, 2 * self.lanes) if self._climbing else WINDOW_JOBS

    @property
    def poll(self) -> float:
        """Seconds between two looks at whether the window is full."""
        return CLIMB_POLL if self._climbing else WINDOW_POLL

    def next(self, w: Window) -> Decision:
        """The count for the next window from what the last one measured (also kept as
        :attr:`lanes`)."""
        decision = self._decide(w)
        lanes = min(max(1, decision.lanes), self.ceiling)
        self._climbing = lanes > self.lanes
        self.lanes = lanes
        return Decision(self.lanes, decision.reason)

    def _decide(self, w: Window) -> Decision:
        t, lanes = self.tuning, self.lanes
        grew_from, self._grew_from = self._grew_from, None
        confirming, self._confirming = self._confirming, None
        if w.pushback > 0:  # rule 1
            self.calm = t.calm_seconds
            return Decision(
                max(1, lanes // 2),
                f"{w.pushback} temporary answer(s) from the relay (4xx/421/connection) in "
                f"{w.wall:.2f}s: halve, no growth for {t.calm_seconds:g}s",
            )
        if self.calm > 0:  # rule 2
            self.calm -= w.wall
            return Decision(lanes, "calm after pushback")
        if w.wall <= 0 or w.finished == 0:  # rule 3
            return Decision(lanes, "nothing finished: nothing to measure")
        starved = w.starved / (lanes * w.wall)
        if starved >= t.starved_hold:  # rule 4
            return Decision(
                lanes,
                f"lanes starved {starved:.0%} of the time (queue, rate limit or provider "
                "bound): more lanes cannot help",
            )
        rate = w.finished / w.wall
        util = (w.cpu + w.waited) / w.wall / self.cores
        measured = (
            f"{rate:.0f} jobs/s, CPU {util:.0%}"
            + (f" of {self.cores:g} core" if self.cores < 1 else "")
            + (f" (waited for a CPU {w.waited / w.wall:.0%})" if w.waited > 0 else "")
            + f", {1000 * w.cpu / w.finished:.2f} ms CPU/job"
        )
        busy = util >= t.cpu_hold
        if grew_from is not None and rate < grew_from[1] * t.min_gain:
            n, before = grew_from
            if busy:  # rule 5
                self._confirming = grew_from
                return Decision(
                    lanes,
                    f"{lanes} lanes sent {rate:.0f} jobs/s, {n} sent {before:.0f}: no gain yet "
                    f"at a busy CPU ({measured}); judged again over a full window",
                )
            self.plateau = t.plateau_seconds  # rule 6
            return Decision(
                n,
                f"{lanes} lanes sent {rate:.0f} jobs/s, {n} sent {before:.0f}: "
                f"no gain, back to {n}, no growth for {t.plateau_seconds:g}s",
            )
        if confirming is not None:
            n, before = confirming
            if rate >= before * t.min_gain:  # it paid after all: rule 10
                grew_from = confirming
            elif busy and rate >= before * (1 - t.max_loss):  # rule 7, kept
                self.plateau = t.plateau_seconds
                return Decision(
                    lanes,
                    f"{lanes} lanes sent {rate:.0f} jobs/s over a full window, {n} sent "
                    f"{before:.0f}: no gain and no loss over {t.max_loss:.0%} at a busy CPU "
                    f"({measured}): kept, no growth for {t.plateau_seconds:g}s",
                )
            else:  # rule 7, back
                self.plateau = t.plateau_seconds
                why = f"a loss over {t.max_loss:.0%}" if busy else f"the CPU has room: {measured}"
                return Decision(
                    n,
                    f"{lanes} lanes sent {rate:.0f} jobs/s over a full window, {n} sent "
                    f"{before:.0f}: no gain ({why}), back to {n}, no growth for "
                    f"{t.plateau_seconds:g}s",
                )
        if self.plateau > 0:  # rule 8
            self.plateau -= w.wall
            return Decision(lanes, f"plateau (the last growth brought no gain): {measured}")
        if lanes >= self.ceiling:  # rule 9
            return Decision(lanes, f"at the ceiling: {measured}")
        grown = min(max(lanes + 1, math.floor(lanes * t.max_growth)), self.ceiling)
        if grew_from is not None:  # rule 10: the growth paid
            self._grew_from = (lanes, rate)
            gain = rate / grew_from[1] - 1 if grew_from[1] > 0 else math.inf
            return Decision(
                grown,
                f"{measured}; {grew_from[0]} lanes sent {grew_from[1]:.0f} jobs/s: the growth "
                f"paid (+{gain:.0%}), grow again",
            )
        if busy:  # rule 11
            return Decision(lanes, f"CPU busy: {measured}")
        self._grew_from = (lanes, rate)  # rule 12
        return Decision(grown, f"{measured}: the CPU has room, grow")


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


#: The calling thread's scheduler statistics on Linux: CPU time, run-queue wait (both ns),
#: time slices (``Documentation/scheduler/sched-stats.rst``).
SCHEDSTAT: Final = "/proc/thread-self/schedstat"


def run_queue_wait(path: str = SCHEDSTAT) -> float:
    """Seconds the calling thread has spent runnable but waiting for a CPU while other tasks
    ran (the second field of :data:`SCHEDSTAT`, kept by the kernel's sched_info whatever
    ``kernel.sched_schedstats`` says); 0.0 where it cannot be read (not Linux)."""
    try:
        with open(path, "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class LaneMeter:
    """The counters of the current window, kept by the worker's lanes, read and reset by
    :meth:`take` once per window. ``clock``: monotonic seconds; ``cpu``: the process' CPU
    seconds (``time.process_time``); ``waited``: seconds the event-loop thread waited for a
    CPU (:func:`run_queue_wait`; built and read in that thread). A wait that spans windows is
    split between them."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        cpu: Callable[[], float] = time.process_time,
        waited: Callable[[], float] = run_queue_wait,
    ) -> None:
        self._clock = clock
        self._cpu = cpu
        self._waited = waited
        self._start = clock()
        self._cpu_start = cpu()
        self._waited_start = waited()
        self._finished_start = 0
        self._starved = 0.0
        self._pushback = 0
        #: waits in progress: token -> when they began (monotonic seconds)
        self._waiting: dict[int, float] = {}
        self._tokens = 0
        #: indexes of the lanes that have not finished a job since they started
        self._cold: set[int] = set()

    def starving(self) -> _Starving:
        """``with meter.starving(): await ...``: the lane is waiting for work, a permit, a
        lease, or out a pause/suspension; its time counts as starved."""
        return _Starving(self)

    def full(self, finished: int, least: float = WINDOW_MIN, jobs: int = WINDOW_JOBS) -> bool:
        """Whether the window may close: it lasted ``least`` seconds and saw ``jobs`` jobs
        finish (:data:`WINDOW_MIN`, :data:`WINDOW_JOBS`, or the controller's
        :attr:`LaneController.window_min`, :attr:`LaneController.window_jobs`), or it lasted
        :data:`WINDOW_MAX` seconds; ``finished`` as for :meth:`take`."""
        elapsed = self.age()
        seen = finished - self._finished_start
        return elapsed >= WINDOW_MAX or (elapsed >= least and seen >= jobs)

    def age(self) -> float:
        """Seconds since the window began."""
        return self._clock() - self._start

    def lane_started(self, index: int) -> None:
        """Lane ``index`` started: it is cold (:attr:`cold`) until it finishes a job or ends
        (:meth:`lane_warm`)."""
        self._cold.add(index)

    def lane_warm(self, index: int) -> None:
        """Lane ``index`` finished a job, or ended."""
        self._cold.discard(index)

    @property
    def cold(self) -> int:
        """Lanes started that have not finished a job yet: while any is, the window measures
        their warm-up (a Redis connection, a reserve, an SMTP connection: TCP, greeting and
        EHLO, ~3 round trips and ~1 ms of CPU each), not the count's throughput; the tuner
        waits it out before the window that judges a growth."""
        return len(self._cold)

    def pushback(self) -> None:
        """Count one temporary answer from the relay (4xx, connection failure, time-out)."""
        self._pushback += 1

    def take(self, finished: int) -> Window:
        """Close the window: ``finished`` is the process' count of finished jobs so far (the
        window's is the difference). Returns what it measured; the next window starts now."""
        now, cpu, waited = self._clock(), self._cpu(), self._waited()
        starved = self._starved + sum(now - max(s, self._start) for s in self._waiting.values())
        window = Window(
            wall=max(0.0, now - self._start),
            cpu=max(0.0, cpu - self._cpu_start),
            finished=max(0, finished - self._finished_start),
            starved=max(0.0, starved),
            pushback=self._pushback,
            waited=max(0.0, waited - self._waited_start),
        )
        self._start, self._cpu_start, self._finished_start = now, cpu, finished
        self._waited_start = waited
        self._starved, self._pushback = 0.0, 0
        return window

    def _begin(self) -> int:
        self._tokens += 1
        self._waiting[self._tokens] = self._clock()
        return self._tokens

    def _end(self, token: int) -> None:
        since = self._waiting.pop(token)
        self._starved += max(0.0, self._clock() - max(since, self._start))


#: What the tuner does at one look (:func:`step`).
Step = Literal["wait", "warm", "judge"]


def step(meter: LaneMeter, controller: LaneController, finished: int, warming: bool) -> Step:
    """What the tuner does at one look (every :attr:`LaneController.poll` seconds).
    ``warming``: the lanes were just started (at start, or by a growth) and the tuner has
    not yet waited out their warm-up; ``finished`` as for :meth:`LaneMeter.take`.

    ``"wait"``: look again later: while warming, some lane has not finished a job yet
    (:attr:`LaneMeter.cold`) and the window is younger than :data:`WINDOW_MAX`; else the
    window is not full. ``"warm"``: every new lane finished a job: close the window and leave
    it out (unless it saw pushback); the window that judges the count starts now.
    ``"judge"``: the window is full (:meth:`LaneMeter.full` with the controller's
    :attr:`~LaneController.window_min` and :attr:`~LaneController.window_jobs`): close it and
    hand it to :meth:`LaneController.next`."""
    if warming and meter.cold:
        return "judge" if meter.age() >= WINDOW_MAX else "wait"
    if warming:
        return "warm"
    if meter.full(finished, controller.window_min, controller.window_jobs):
        return "judge"
    return "wait"
