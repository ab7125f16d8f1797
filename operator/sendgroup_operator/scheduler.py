"""One task runs every group's reaper passes: a heap of per-group deadlines (issue 15).

It replaces a kopf daemon per SendGroup (a runner task and its frames, invocation kwargs, cause,
patch, loggers, a stop flag with a ``threading.Event``, and kopf's ``live_fresh_body`` copy,
which kopf keeps only for objects with daemons: ~15-20 KB per group plus the body, tracemalloc,
bench/results/2026-12-04-mem/note.md). Here a group costs one entry in :attr:`Scheduler.due`
and, while it waits, one heap entry (a few hundred bytes in all).

What a group's deadline is and what moves it (``key`` is ``namespace/name``):

* :meth:`add`: the watch saw the group (not being deleted); a new member is due after
  :data:`INITIAL_DELAY` seconds (the daemon's ``initial_delay``), an old one is left alone.
* a pass returns the seconds until its next one; kicks that came while it ran bring that
  closer (:meth:`kick`), kicks due after the pass started were answered by it and are gone
  (the deadline is one number, the earliest of what was asked: a pass consumes it).
* :meth:`kick`: due within ``after`` seconds (the observer when jobs arrive, a change
  handler's follow-up, a resting group's Deployment changed): earlier only, never later.
* :meth:`defer`: a change handler's pass stands for the next reaper pass, which is due after
  ``delay`` seconds (later or earlier than before; a kick after it brings it closer again).
* :meth:`park`/``gate``: a group this replica may not act on (sharding) has no deadline until
  something wakes it (:meth:`wake_all`, when the shard assignment changes; a kick).
* :meth:`drop`: the group is gone or being deleted: no pass starts for it any more (a pass in
  flight finishes; its result schedules nothing).

At most ``concurrency`` passes run at once; a due group waits for a free slot. A pass that
raises is logged and retried after ``retry`` seconds. :meth:`stop` ends the loop and gives the
passes in flight ``timeout`` seconds before it cancels them.

No kopf, Kubernetes or Redis here (``.importlinter``): the pass itself is the caller's
(``handlers.Reaper``).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Final

#: Seconds from a group's first sighting to its first pass (kopf's daemon had
#: ``initial_delay=1.0``): the change handler's pass at an operator's start usually lands in
#: between and hands its next pass over (:meth:`Scheduler.defer`).
INITIAL_DELAY: Final = 1.0
#: Passes running at once. A resting group's pass answers from the observer's last
#: measurement without Redis or the API (~1 ms of CPU); a busy one awaits one batched Redis
#: round trip (up to 500 groups per batch, observer.py) and its API calls, so this many in flight
#: keep the batches full while a restart or a wave of wake-ups is bounded.
CONCURRENCY: Final = 256
#: Seconds before a pass that raised is tried again (the daemon's ``reaperInterval`` applies
#: when the pass itself catches its failure; this is the scheduler's own safety net).
RETRY: Final = 30.0

#: A pass of one group: returns the seconds until its next pass, or None for none (parked).
PassFn = Callable[[str], Awaitable[float | None]]
#: Whether a due group's pass may run now (sharding: its owner only); False parks it.
GateFn = Callable[[str], bool]

log = logging.getLogger(__name__)

_NEVER: Final = math.inf


class Scheduler:
    """Deadlines of every group this process watches, and the loop that runs their passes
    (one per process: ``Runtime.scheduler``; the loop is started by :meth:`start`)."""

    def __init__(
        self,
        concurrency: int = CONCURRENCY,
        initial_delay: float = INITIAL_DELAY,
        retry: float = RETRY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.concurrency = concurrency
        self.initial_delay = initial_delay
        self.retry = retry
        self.clock = clock
        #: Every member (a group seen by the watch, not being deleted) -> its deadline in
        #: ``clock`` seconds (``inf``: none, i.e. parked or its pass is running).
        self.due: dict[str, float] = {}
        #: Members whose pass runs now -> the earliest kick that came meanwhile (``inf``: none).
        self.running: dict[str, float] = {}
        #: (deadline, sequence, key); an entry whose deadline is no longer ``due[key]`` is stale
        #: and skipped when it comes up.
        self._heap: list[tuple[float, int, str]] = []
        self._seq = 0
        self._poke = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._run: PassFn | None = None
        self._gate: GateFn | None = None
        self._stopping = False
        #: Passes started, and passes that raised (for tests and the logs).
        self.passes = 0
        self.failures = 0

    # --- what moves a deadline ------------------------------------------------------------
    def add(self, key: str) -> bool:
        """The watch saw group ``key`` (not being deleted): a new member is due after
        ``initial_delay``. True when it was new."""
        if key in self.due:
            return False
        self._set(key, self.clock() + self.initial_delay)
        return True

    def drop(self, key: str) -> bool:
        """Group ``key`` is gone or being deleted: no pass of it starts any more. True when
        it was a member."""
        return self.due.pop(key, None) is not None

    def kick(self, key: str, after: float) -> None:
        """Pass ``key`` within ``after`` seconds, unless a pass of it starts before then (that
        pass answers the kick). While its pass runs: the next pass comes at most ``after``
        seconds after the kick, even if the pass asked for a later one. Unknown keys: no-op."""
        if key not in self.due:
            return
        at = self.clock() + max(0.0, after)
        if key in self.running:
            if at < self.running[key]:
                self.running[key] = at
        elif at < self.due[key]:
            self._set(key, at)

    def defer(self, key: str, delay: float) -> None:
        """A change handler just passed ``key`` and its plan wants the next pass in ``delay``
        seconds: the next reaper pass waits until then instead of running the same pass again
        (at an operator's start every group gets kopf's resume handler and its first reaper
        pass within a second: two passes per group, issue 15). While a reaper pass of ``key``
        runs, it counts as a kick (the earlier of the two wins)."""
        if key not in self.due:
            return
        if key in self.running:
            self.kick(key, delay)
        else:
            self._set(key, self.clock() + max(0.0, delay))

    def park(self, key: str) -> None:
        """No deadline for ``key`` until something wakes it (it stays a member)."""
        if key in self.due and key not in self.running:
            self.due[key] = _NEVER

    def wake_all(self) -> None:
        """Every member not running is due now (the shard assignment changed: owners pass,
        groups handed to us are taken over, groups handed away are dropped by the gate)."""
        now = self.clock()
        for key in self.due:
            if key in self.running:
                self.running[key] = min(self.running[key], now)
            else:
                self.due[key] = now
                self._seq += 1
                self._heap.append((now, self._seq, key))
        heapq.heapify(self._heap)
        self._poke.set()

    def deadline(self, key: str) -> float | None:
        """Seconds until ``key``'s next pass (None: not a member, parked or running)."""
        at = self.due.get(key)
        if at is None or at == _NEVER or key in self.running:
            return None
        return at - self.clock()

    def _set(self, key: str, at: float) -> None:
        self.due[key] = at
        if at == _NEVER:
            return
        self._seq += 1
        entry = (at, self._seq, key)
        if not self._heap or entry < self._heap[0]:
            self._poke.set()  # an earlier head: the loop's sleep ends
        heapq.heappush(self._heap, entry)
        if len(self._heap) > 2 * len(self.due) + 1024:
            self._compact()

    def _compact(self) -> None:
        """Drop the stale heap entries (kicks and hand-overs leave one each)."""
        self._heap = [e for e in self._heap if self.due.get(e[2]) == e[0]]
        heapq.heapify(self._heap)

    # --- the loop -------------------------------------------------------------------------
    def start(self, run: PassFn, gate: GateFn | None = None) -> asyncio.Task[None]:
        """Start the loop in the running event loop; ``run(key)`` is one pass, ``gate(key)``
        (optional) says whether a due group may pass now."""
        self._run = run
        self._gate = gate
        self._stopping = False
        self._loop_task = asyncio.create_task(self._loop(), name="reaper-scheduler")
        return self._loop_task

    async def _loop(self) -> None:
        while not self._stopping:
            self._poke.clear()
            self._dispatch()
            wait: float | None = None
            if self._heap and len(self.running) < self.concurrency:
                wait = max(0.0, self._heap[0][0] - self.clock())
            try:
                async with asyncio.timeout(wait):
                    await self._poke.wait()
            except TimeoutError:
                pass

    def _dispatch(self) -> None:
        """Start the passes that are due, up to ``concurrency`` running."""
        now = self.clock()
        heap = self._heap
        while heap and heap[0][0] <= now and len(self.running) < self.concurrency:
            at, _, key = heapq.heappop(heap)
            if self.due.get(key) != at or key in self.running:
                continue  # stale: moved, dropped or running
            if self._gate is not None and not self._gate(key):
                if key in self.due:
                    self.due[key] = _NEVER
                continue
            self.due[key] = _NEVER
            self.running[key] = _NEVER
            self.passes += 1
            task = asyncio.create_task(self._one(key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _one(self, key: str) -> None:
        assert self._run is not None
        delay: float | None
        try:
            delay = await self._run(key)
        except asyncio.CancelledError:
            self.running.pop(key, None)
            raise
        except Exception:
            self.failures += 1
            log.exception("reaper pass of %s raised; again in %.0f s", key, self.retry)
            delay = self.retry
        kicked = self.running.pop(key, _NEVER)
        if key in self.due:
            at = self.clock() + delay if delay is not None else _NEVER
            self._set(key, min(at, kicked))
        self._poke.set()  # a slot is free

    async def stop(self, timeout: float) -> None:
        """End the loop; passes in flight get ``timeout`` seconds, then are cancelled."""
        self._stopping = True
        self._poke.set()
        if self._loop_task is not None:
            self._loop_task.cancel()
            await asyncio.gather(self._loop_task, return_exceptions=True)
            self._loop_task = None
        tasks = list(self._tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
