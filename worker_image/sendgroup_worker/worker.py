"""The mail worker: drains one send group's queue through the SMTP relay.

One asyncio process runs ``WORKER_CONCURRENCY`` lanes, a fixed number, or with ``auto`` (the
default) a number tuned every 0.05-1 s from what the process measured (:mod:`lanes`: doubled
while the CPU has room or the last doubling raised the jobs/s, taken back when it did not,
halved on the relay's temporary answers, held when the lanes starve for work or permits; it
starts at 16, or ``WORKER_CONCURRENCY_MAX`` if lower, and stays within that ceiling). New
lanes start at once; a lane whose index is at or above the count leaves at the top of its loop
through the same path as a stop (its acknowledgements flushed, its provider lease released),
and the SMTP pool closes the idle connections beyond the count. Each lane loops:

1. wait while the group is suspended by backpressure (:mod:`backpressure`);
2. take slots from the group's shared rate limit (:mod:`ratelimit`) *before* reserving, so
   waiting for the rate never counts as an attempt: one per job of the batch it asks for
   (``WORKER_RESERVE_BATCH``, at most what ``WORKER_MAX_JOBS`` leaves), as many as granted;
3. ``reserve`` that many jobs in one call (the same queue script acknowledges the lane's
   previous deliveries and writes their outcome stream entries, migrates due delayed jobs and
   expired reservations, and moves garbage payloads to failed); the slots of jobs the queue
   did not have go back; when there is none, give the slots back and block on ``BLPOP
   notify`` until a job arrives or the next delayed job or reservation is due (at most
   ``WORKER_BLOCK_FOR``): an idle worker costs ~0 CPU and a few Redis calls per block period;
4. run the batch's jobs one after the other (:meth:`Worker._run_batch`). All of a batch's
   reservations end together, ``retry_after`` after the reserve, so a job after the first
   starts only while the reservation still holds the whole time limit it would have had
   alone; the lane also stops a batch at a stop (SIGTERM, max time), at a backpressure
   suspension, after a mail whose extra recipients the rate limit charged (the rest take new
   slots after that debt) and, looking at most every :data:`BATCH_PAUSE_LOOK` seconds, at the
   pause marker. The jobs it will not start go back
   to the head of the ready list at once (``unreserve``: as popped, no attempt counted) with
   their slots. The rate counts recipients: a mail's recipients beyond the first are charged
   (in debt) before it is sent, the first job's while the lane still holds the process' rate
   lock it took its permits under, so no lane takes a slot that debt would have refused
   (:meth:`Worker._precharge`); the surplus (suppressed recipients, a failed send) goes back
   after the job. With a provider (``SENDGROUP_PROVIDER``) the batch is 1: its permits,
   concurrency leases and recipient debt are per lane and per job; the mail's extra
   recipients are charged to the provider's budget right after the reserve, while the lane
   still holds the process' grant lock it took its permit under
   (:meth:`Worker._provider_reserve`), and what the send did not use goes back when nothing
   was charged since;
5. run each job: unknown handler / unreadable payload -> failed; past ``tries`` or
   ``retryUntil`` -> failed; ``begin_send`` (reservation still ours, uuid not already sent;
   with the suppression set on one server or Sentinel it rides in the same script as the
   suppression check, right before MAIL FROM, see :meth:`Worker._begin_screen`);
   send under the job's timeout, with a fence right before SMTP DATA that refuses to send when
   the reservation is about to expire (a worker frozen with SIGSTOP and resumed late sends
   nothing; with a PIPELINING relay it is asked before the command group and after DATA's
   354, see ``SmtpPool._pipelined``); then done / release with backoff / fail. Each of those
   reports ``lost`` when the reservation is gone, and the worker then leaves the job alone
   (another worker owns it).

The acknowledgements of a lane's delivered jobs ride with its next queue call: the next mail's
``begin_send`` check (``ack_begin``, one script), else its next ``reserve``, else a flush
before it waits or stops. So a delivered mail's ``sent`` marker reaches Redis before the lane
sends another mail, as with one job per reserve: a SIGKILL re-sends at most the mail in flight
per lane after ``retry_after``.

Each lane sends its commands on a Redis connection it holds (``redisclient.lane_client``; the
cluster client's own per-node connections on Redis Cluster). A delivered mail costs
``1 / WORKER_RESERVE_BATCH`` + 1 Redis round trips on one server or Sentinel (its share of a
reserve; ``begin_send`` with the suppression check and the previous mail's ack and entry)
and that + 2 on a cluster (``begin_send`` and the check apart, the entry's own XADD); a no-op
job only its share of a reserve.

SIGTERM/SIGINT: stop taking jobs, finish the jobs in flight (each within its timeout), hand
the reserved jobs not started back to the queue at once, exit 0. ``WORKER_MAX_JOBS`` /
``WORKER_MAX_TIME``: the same clean stop (each lane claims its batch from what
``WORKER_MAX_JOBS`` leaves before reserving, so exactly that many jobs are taken). Redis
errors: logged once per outage, retried with capped exponential backoff (tenacity); a finished
job's done/release/fail is retried until Redis answers, so a sent mail is always marked sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Final, TypeVar

import redis.exceptions as redis_exceptions
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    wait_exponential_jitter,
)

from sendgroup_worker import cgroup, entry, lanes, laravel, redisclient, smtp
from sendgroup_worker import handlers as h
from sendgroup_worker import loopback as lb
from sendgroup_worker.backpressure import Backpressure
from sendgroup_worker.config import WorkerConfig
from sendgroup_worker.health import WorkerHealth, redis_check, smtp_check
from sendgroup_worker.jobopts import JobOptions
from sendgroup_worker.metrics import WorkerMetrics
from sendgroup_worker.provider import LEASE_MARGIN, ChargeMarks, ProviderConfig, ProviderPacer
from sendgroup_worker.queue.client import AsyncQueue
from sendgroup_worker.queue.keys import QueueKeys
from sendgroup_worker.queue.protocol import Ack, Reserved, ReserveResult
from sendgroup_worker.ratelimit import RateLimiter, RateMark, RatePolicy
from sendgroup_worker.redisclient import TRANSIENT_ERRORS, AsyncClient, build_async, detect_sync
from sendgroup_worker.redisurl import RedisTarget, parse
from sendgroup_worker.smtp import MailLimits, SmtpPool, SmtpSettings

log = logging.getLogger("sendgroup_worker.worker")

T = TypeVar("T")

#: Errors that mean "Redis is not reachable right now" (BusyLoadingError, a ConnectionError
#: subclass, covers a Redis that is still loading its data after a restart).
#: With Redis Cluster and Sentinel, also a failover or a resharding in progress (see
#: :data:`sendgroup_worker.redisclient.TRANSIENT_ERRORS`): one log line, then retries.
REDIS_DOWN: Final = TRANSIENT_ERRORS

#: :data:`REDIS_DOWN` raised by redis-py itself (not a bare OSError, which a handler's SMTP
#: connection may raise too).
REDIS_CALL_DOWN: Final = tuple(e for e in TRANSIENT_ERRORS if e is not OSError)

#: Redis answers but refuses writes (``OOM command not allowed when used memory >
#: 'maxmemory'``): handled like an outage (logged once, retried with backoff), never a
#: traceback per lane per second; a finished job's outcome is retried until it is written.
#: (redis-py's ``OutOfMemoryError``, read by name: the types-redis stubs predate it.)
REDIS_FULL: Final[tuple[type[Exception], ...]] = (vars(redis_exceptions)["OutOfMemoryError"],)

#: Every error after which the same Redis call is simply tried again later.
REDIS_RETRY: Final[tuple[type[Exception], ...]] = (*REDIS_DOWN, *REDIS_FULL)

#: The fence refuses SMTP DATA this many seconds before the reservation expires.
FENCE_MARGIN: Final = 0.5

#: Seconds between two measurements of the offset to Redis' clock.
CLOCK_REFRESH: Final = 30.0

#: Once stopping, a job outcome that cannot reach Redis is retried this long (seconds).
STOP_RETRY_LIMIT: Final = 10.0

#: An outage ends after this many seconds without a failed Redis call.
OUTAGE_QUIET: Final = 1.0

#: Longest back-off between two attempts to reach Redis during an outage (seconds).
OUTAGE_MAX_WAIT: Final = 5.0

#: Seconds between two looks at the pause marker while the group is paused (the operator
#: scales the workers to 0 meanwhile; this only covers the seconds until SIGTERM arrives).
PAUSED_POLL: Final = 1.0

#: While a lane works through a reserved batch, it looks at the pause marker (one EXISTS)
#: before the next job once this many seconds passed since the reserve call or its last look:
#: a pause stops a batch within this time plus one job, and a batch of fast jobs costs no
#: extra round trip.
BATCH_PAUSE_LOOK: Final = 0.5


class RedisClock:
    """Unix time on Redis' clock: the local clock plus an offset measured with ``TIME`` at most
    every :data:`CLOCK_REFRESH` seconds. Every worker of a group then agrees on when a
    reservation expires (scores written by ``reserve``, migrations by any worker, the fence
    before DATA), whatever the skew between pods' clocks."""

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self.offset = 0.0
        self._at = -1e9

    async def refresh(self) -> None:
        """Measure the offset again when it is older than CLOCK_REFRESH (one round trip)."""
        if time.monotonic() - self._at < CLOCK_REFRESH:
            return
        before = time.time()
        seconds, micros = await self.client.time()
        after = time.time()
        self.offset = seconds + micros / 1e6 - (before + after) / 2
        self._at = time.monotonic()

    def now(self) -> float:
        """Unix seconds, Redis' clock."""
        return time.time() + self.offset


class Outage:
    """Shared Redis outage state of one worker: logs the start and the end of an outage once,
    whatever the number of lanes hitting it; keeps the ``queue_reachable`` gauge. The end is
    declared after :data:`OUTAGE_QUIET` seconds without a failure, so a failover or resharding
    (some calls already answered by the new primary, others still aimed at the dead one) is
    one outage, not a line pair per call."""

    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics
        self.since: float | None = None
        self.last_failure = 0.0

    def failed(self, exc: BaseException) -> None:
        """Note a failed Redis call (unreachable, or out of memory)."""
        self.last_failure = time.monotonic()
        if self.since is None:
            self.since = self.last_failure
            self.metrics.reachable(False)
            if isinstance(exc, REDIS_FULL):
                log.error(
                    "Redis is out of memory (maxmemory reached, writes refused): no job is "
                    "taken until it has room again; retrying with backoff"
                )
            else:
                log.warning("Redis unreachable (%s); retrying with backoff", _short(exc))

    def ok(self) -> None:
        """Note a successful Redis call."""
        if self.since is not None and time.monotonic() - self.last_failure >= OUTAGE_QUIET:
            log.warning("Redis reachable again after %.1fs", self.last_failure - self.since)
            self.since = None
            self.metrics.reachable(True)


class _NotOurs(smtp.ScreenRefused):
    """The screen's ``begin_send`` said ``state`` (``lost`` or ``already_sent``)."""

    def __init__(self, state: str) -> None:
        super().__init__(state)
        self.state = state


@dataclass(slots=True)
class _Lane:
    """One lane's state: its index, its queue and loopback on the lane's own Redis connection
    (:func:`~sendgroup_worker.redisclient.lane_client`), and the acknowledgement of its last
    delivered job, which rides along with the lane's next reserve call."""

    index: int
    queue: AsyncQueue
    loopback: lb.Loopback
    #: acknowledgements of the lane's delivered jobs not yet written (at most one batch)
    acks: list[Ack] = field(default_factory=list)
    #: recipients to charge to the provider on the lane's next permit call: a precharge
    #: (:meth:`Worker._provider_precharge`) that Redis refused, charged late rather than never
    debt: int = 0
    #: whether the lane holds a provider concurrency lease (from its last granted permit)
    leased: bool = False
    #: whether the lane has a sign of work: it sent a mail, or a job (or another lane that
    #: found one) woke it; False at start (it has not looked yet: a rollout of an idle group
    #: must not claim a share for the operator's demand window, 30 s)
    #: and after it found the queue empty and its wait timed out. Provider pacing: only permit
    #: requests with a sign of work count as the group's demand (a group with ready jobs gets
    #: its share from its measured queue anyway).
    wants: bool = False
    #: recipients of the lane's current mail beyond the one its permit counted, charged to
    #: the group's rate limit (:meth:`Worker._precharge`) or to the provider's budget
    #: (:meth:`Worker._provider_precharge`) before the mail is sent (0 with no rate limit);
    #: the jobs of its batch after it go back (their slots were taken before that debt, as
    #: separate reserves would not have)
    precharged: int = 0
    #: the provider's precharge, to give back what the send did not use (None: nothing to
    #: give back, or the charge did not reach Redis)
    marks: ChargeMarks | None = None
    #: the group's rate limit: the mark of the lane's last take (its unused permits go back
    #: against it) and of its current mail's precharge (the recipients it did not use)
    rate_mark: RateMark | None = None
    charge_mark: RateMark | None = None
    #: recipients the lane's current mail was sent to (:meth:`Worker._settle`), to give back
    #: what the precharge counted and the send did not use
    sent: int = 0
    #: the message of the lane's next mail job, built to count its recipients for a rate
    #: (:meth:`Worker._recipients`), sent by its handler without building it again
    mail: h.PreparedMail | None = None
    #: the lane took its share of ``WORKER_MAX_JOBS``: it reserves nothing more (the worker
    #: stops when the last of those jobs finished)
    done: bool = False


class Worker:
    """One worker process' drain loop. Build with :func:`build_worker`, run with :meth:`run`
    (returns the exit code, 0 on a clean stop)."""

    def __init__(
        self,
        config: WorkerConfig,
        client: AsyncClient,
        blocking: AsyncClient,
        queue: AsyncQueue,
        pool: SmtpPool,
        registry: h.Registry,
        metrics: WorkerMetrics,
        limiter: RateLimiter,
        backpressure: Backpressure,
        loopback: lb.Loopback | None = None,
        health: WorkerHealth | None = None,
        pacer: ProviderPacer | None = None,
    ) -> None:
        self.config = config
        self.health = health
        self.client = client
        self.blocking = blocking
        self.queue = queue
        self.keys = queue.keys
        self.pool = pool
        self.registry = registry
        self.metrics = metrics
        self.limiter = limiter
        self.backpressure = backpressure
        self.loopback = loopback or lb.Loopback(client, None, None)
        #: the provider's shared budget (None: the group's own limits only)
        self.pacer = pacer
        self.outage = Outage(metrics)
        self.clock = RedisClock(client)
        self.stopping = asyncio.Event()
        self.stop_reason = ""
        self._stopped_at: float | None = None
        self.taken = 0
        self.finished = 0
        #: jobs reserved or being reserved (a lane claims its batch size before its reserve
        #: call and gives back what it did not get, or handed back unstarted): keeps
        #: ``WORKER_MAX_JOBS`` exact with several lanes reserving batches at once
        self.claimed = 0
        self._suspension_logged = False
        #: outcome entries refused since the last log line, and when that line was written
        self._refused_entries = 0
        self._refused_logged_at = -1e9
        self._paused_logged = False
        #: the pause marker as the last reserve (or look) saw it; None = not looked yet
        self._paused: bool | None = None
        # idle lanes: one blocks on Redis (BLPOP), the others wait here until a lane that
        # found a job wakes one of them (so an idle process makes one blocking call, not N)
        self._idle = asyncio.Condition()
        #: held by a lane from taking its rate permits until its first job's extra
        #: recipients are charged (:meth:`_reserve`), so no other lane of this process takes
        #: a slot the rate limit would refuse once that debt is known
        self._rate_lock = asyncio.Lock()
        #: provider pacing: held by a lane from its permit's grant until its mail's extra
        #: recipients are charged (:meth:`_provider_reserve`: a few round trips, never while
        #: waiting), so no other lane of this process takes a permit that debt would refuse
        self._grant_lock = asyncio.Lock()
        #: the caps the mail handler builds messages with (the same settings)
        self.limits = mail_limits(config)
        self._blocker = False
        #: the window counters of the lane count's controller (kept with fixed lanes too)
        self.meter = lanes.LaneMeter()
        #: lanes wanted now: a lane whose index is >= this leaves at the top of its loop
        self.target = 0
        #: running lane tasks by index
        self._tasks: dict[int, asyncio.Task[None]] = {}
        #: set by the next finished job while the lane tuner rests (an idle worker: no job in
        #: flight, none finished in a window); None while it looks
        self._tuner_rest: asyncio.Event | None = None

    # --- control ---------------------------------------------------------------------------
    def stop(self, reason: str) -> None:
        """Stop taking jobs; jobs in flight finish. Idempotent."""
        if not self.stopping.is_set():
            self.stop_reason = reason
            self._stopped_at = time.monotonic()
            log.info("stopping (%s): finishing jobs in flight", reason)
            self.stopping.set()
            if self.health is not None:
                self.health.stopping()
            asyncio.get_running_loop().create_task(self._wake_all())

    async def _wake_all(self) -> None:
        async with self._idle:
            self._idle.notify_all()

    async def run(self) -> int:
        """Run until stopped (signal, max jobs, max time). Returns the process exit code."""
        loop = asyncio.get_running_loop()
        for sig in entry.STOP_SIGNALS:
            loop.add_signal_handler(sig, self.stop, signal.Signals(sig).name)
        early = entry.early_signal()
        if early:  # arrived before the handlers above (see entry.py): stop, take nothing
            self.stop(f"{early} before start")
        self.metrics.serve(self.config.metrics_port, self.config.metrics_host)
        if self.health is not None:  # /livez, /readyz (sendgroup_worker.health)
            self.health.start(self.config.health_port, self.config.health_host)
        self._publish_rate()
        log.info(
            "worker started: queue=%s key=%s (key prefix %r) concurrency=%s tries=%d "
            "timeout=%gs retry_after=%gs rate=%s/min handlers=%s",
            self.config.queue,
            QueueKeys(self.config.queue, prefix=self.config.key_prefix).ready,
            self.config.key_prefix,
            (
                f"auto ({self.config.start_lanes} to {self.config.max_lanes})"
                if self.config.auto_lanes
                else str(self.config.concurrency)
            ),
            self.config.tries,
            self.config.timeout,
            self.config.retry_after,
            self.config.rate_per_minute or "unlimited",
            ",".join(self.registry.names()),
        )
        if self.config.warmup_start_per_hour and self.config.warmup_since is None:
            log.warning("WARMUP_SINCE is not set: the warm-up ramp starts over at every restart")
        timer = None
        if self.config.max_time > 0:
            timer = loop.call_later(self.config.max_time, self.stop, "max time reached")
        self.meter.take(self.finished)  # the first window starts with the lanes
        self._set_lanes(self.config.start_lanes)
        tuner = None
        if self.config.auto_lanes:
            controller = lanes.LaneController(
                self.target, self.config.max_lanes, cores=cgroup.cpu_limit() or 1.0
            )
            tuner = asyncio.create_task(self._tune(controller))
        try:
            await self._run_lanes()
        finally:
            if timer is not None:
                timer.cancel()
            if tuner is not None:
                tuner.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await tuner
            await self.pool.close()
            for client in (self.client, self.blocking):  # standalone, cluster or sentinel
                with contextlib.suppress(Exception):
                    await redisclient.aclose(client)
        log.info("worker stopped (%s) after %d jobs", self.stop_reason, self.finished)
        return 0

    async def _run_lanes(self) -> None:
        """Wait until every lane ended (stop, ``WORKER_MAX_JOBS``), including lanes the tuner
        starts meanwhile. A lane's unexpected exception stops the worker (a clean stop: the
        other lanes hand back the jobs they reserved and did not start, and flush their
        acknowledgements), and once every lane ended the first such exception propagates.
        Before, it propagated at once and the process left while the other lanes still held
        reservations: those jobs waited ``retry_after`` with an attempt counted."""
        failed: BaseException | None = None
        while self._tasks:
            done, _ = await asyncio.wait(
                list(self._tasks.values()), return_when=asyncio.FIRST_COMPLETED
            )
            self._tasks = {i: t for i, t in self._tasks.items() if not t.done()}
            for task in done:
                exc = None if task.cancelled() else task.exception()
                if exc is not None and failed is None:
                    failed = exc
                    self.stop(f"a lane failed: {exc!r}")
        if failed is not None:
            raise failed

    def _set_lanes(self, n: int) -> None:
        """Run ``n`` lanes: start the missing ones of indexes ``0 .. n-1`` (a lane still
        finishing its batch after a shrink simply stays); lanes at ``n`` and above leave at
        the top of their loop."""
        self.target = n
        self.metrics.lanes_group.set(n)
        for i in range(n):
            task = self._tasks.get(i)
            if task is None or task.done():
                self.meter.lane_started(i)
                self._tasks[i] = asyncio.create_task(self._lane(i))

    async def _tune(self, controller: lanes.LaneController) -> None:
        """``WORKER_CONCURRENCY=auto``: once the meter's window is full (the controller's
        :attr:`~lanes.LaneController.window_min` seconds and
        :attr:`~lanes.LaneController.window_jobs` jobs, or :data:`lanes.WINDOW_MAX` seconds),
        close it, ask the controller for the lane count, apply it (one INFO line per change,
        with the reason and its numbers) and close idle SMTP connections beyond it. At start
        and after a growth the window begins once every new lane finished its first job
        (:func:`lanes.step`; at most :data:`lanes.WINDOW_MAX` seconds): their warm-up is left
        out of the window that judges the count, unless it saw pushback.

        At rest (a judged window finished no job, saw no pushback and did not grow the count,
        and no job is in flight) the tuner stops looking until the next job finishes
        (:attr:`_tuner_rest`): the next window then spans the rest and is judged at the next
        look. Before, an idle worker looked every :data:`lanes.WINDOW_POLL` seconds and
        judged an empty window every second: 21 wake-ups a second and ~5 ms of CPU a second
        for nothing (bench scenario 7, at rest)."""
        warming = True
        while not self.stopping.is_set():
            await self._sleep(controller.poll)
            if self.stopping.is_set():
                return
            try:
                look = lanes.step(self.meter, controller, self.finished, warming)
                if look == "wait":
                    continue
                warming = False
                seen = self.finished
                window = self.meter.take(seen)
                if look == "warm" and window.pushback == 0:
                    log.debug("lanes %d: warm after %.3fs", self.target, window.wall)
                    continue
                decision = controller.next(window)
                if decision.lanes != self.target:
                    log.info("lanes %d -> %d: %s", self.target, decision.lanes, decision.reason)
                    warming = decision.lanes > self.target
                    self._set_lanes(decision.lanes)
                else:
                    log.debug("lanes %d: %s", self.target, decision.reason)
                await self.pool.trim(self.target)
                if (
                    window.finished == 0
                    and window.pushback == 0
                    and not warming
                    and self.finished == seen
                    and self.metrics.in_flight_now == 0
                ):
                    await self._rest_until_a_job_ends()
            except Exception:  # the lanes go on at the count they have
                log.exception("lane tuning failed; keeping %d lanes", self.target)

    async def _rest_until_a_job_ends(self) -> None:
        """The tuner's rest: wait until a lane finishes a job (the tuner is cancelled when
        the worker stops)."""
        rest = self._tuner_rest = asyncio.Event()
        try:
            await rest.wait()
        finally:
            self._tuner_rest = None

    # --- the lane --------------------------------------------------------------------------
    async def _lane(self, index: int) -> None:
        delay = wait_exponential_jitter(initial=0.1, max=OUTAGE_MAX_WAIT, jitter=0.2)
        held = redisclient.lane_client(self.client)
        lane = _Lane(index, self.queue.bind(held), self.loopback.bind(held))
        try:
            await self._lane_loop(lane, delay)
        finally:
            self.meter.lane_warm(index)
            if held is not self.client:
                with contextlib.suppress(Exception):
                    await redisclient.aclose(held)  # the connection goes back to the pool

    async def _lane_loop(self, lane: _Lane, delay: Callable[[RetryCallState], float]) -> None:
        index = lane.index
        failures = 0
        while not self.stopping.is_set() and not lane.done and index < self.target:
            try:
                await self._step(lane)
                failures = 0
            except REDIS_RETRY as exc:
                self.outage.failed(exc)
                failures += 1
                await self._sleep(delay(_retry_state(failures)))
            except Exception:
                log.exception("lane %d: unexpected error; continuing", index)
                await self._sleep(1.0)
        try:
            await self._flush(lane)
            if self.pacer is not None:
                await self.pacer.release(self.pacer.lane_id(lane.index), lane.debt)
        except REDIS_RETRY:
            log.error(
                "job(s) %s: delivered, but Redis stayed unreachable during the stop; they "
                "come back after retry_after and may be sent again",
                ",".join(a.uuid for a in lane.acks) or "?",
            )

    async def _flush(self, lane: _Lane) -> None:
        """Send the lane's pending acknowledgements now (before waiting or stopping): one
        ``done`` call for one, a ``reserve`` call of 0 jobs for several (same script as the
        acks that ride along with a reserve)."""
        acks = lane.acks
        if not acks:
            return
        if len(acks) == 1:
            done = await self._retry(lambda: lane.queue.done_detailed(acks[0], delivered=True))
            lane.acks = []
            if done.lost:
                log.warning("job %s: delivered, but its reservation had expired", acks[0].uuid)
            if done.entry_refused:
                self._entry_refused(acks[0].uuid)
            return
        result = await self._retry(
            lambda: lane.queue.reserve_detailed(0, ack=acks, now=self.clock.now())
        )
        lane.acks = []
        self._acked(acks, result.lost_acks, result.refused_entries)

    def _acked(self, acks: Sequence[Ack], lost: Sequence[int], refused: int) -> None:
        """Report what the script that wrote ``acks`` said: ``lost`` indexes into ``acks``,
        ``refused`` outcome entries."""
        for i in lost:
            log.warning("job %s: delivered, but its reservation had expired", acks[i].uuid)
        for _ in range(refused):
            self._entry_refused(acks[-1].uuid)

    def _claim(self, n: int) -> int:
        """Claim up to ``n`` jobs of ``WORKER_MAX_JOBS`` (all ``n`` without a cap); returns
        how many. Give back the unused ones with :meth:`_unclaim`."""
        if self.config.max_jobs:
            n = max(0, min(n, self.config.max_jobs - self.claimed))
        self.claimed += n
        return n

    def _unclaim(self, n: int) -> None:
        self.claimed -= n

    def batch_size(self) -> int:
        """Jobs one lane reserves per call: ``WORKER_RESERVE_BATCH``, or 1 with a provider
        (its permits, concurrency leases and recipient debt are per lane and per job)."""
        return 1 if self.pacer is not None else self.config.reserve_batch

    async def _step(self, lane: _Lane) -> None:
        if await self._wait_if_suspended(lane):
            return
        claimed = self._claim(self.batch_size())
        if claimed == 0:
            # every job WORKER_MAX_JOBS allows is taken; the last one to finish stops the worker
            lane.done = True
            return
        try:
            jobs, reserved_until = await self._reserve(lane, claimed)
        except BaseException:
            self._unclaim(claimed)
            raise
        self._unclaim(claimed - len(jobs))
        if jobs:
            await self._run_batch(lane, jobs, reserved_until)

    async def _reserve(self, lane: _Lane, want: int) -> tuple[list[Reserved], float]:
        """Take up to ``want`` permits and reserve that many jobs (the lane's acks ride
        along); returns the jobs (none: paused, empty, stopping) and when their reservations
        end (unix seconds, Redis' clock)."""
        rated = self._rated
        if self.pacer is not None:
            got = await self._provider_reserve(lane)
        else:
            async with self._rate_turn() if rated else contextlib.nullcontext():
                got = await self._take_and_reserve(lane, want)
                if got is not None and rated and got[3].jobs and not got[3].paused:
                    # the first job's extra recipients, charged before another lane may
                    # take a slot
                    lane.precharged = await self._precharge(lane, got[3].jobs[0])
        if got is None:
            return [], 0.0
        granted, now, acks, result = got
        self.outage.ok()
        if result.lost_acks or result.refused_entries:
            self._acked(acks, result.lost_acks, result.refused_entries)
        for _ in range(result.invalid):
            self.metrics.job("failed")
        if result.invalid:
            log.info("%d unreadable payload(s) moved to failed", result.invalid)
        if result.paused:
            self._paused = True
            await self._give_back(lane, granted)
            self._log_pause(True)
            with self.meter.starving():
                await self._sleep(PAUSED_POLL)
            return [], 0.0
        self._paused = False
        self._log_pause(False)
        jobs = result.jobs
        if not jobs:
            await self._give_back(lane, granted)
            with self.meter.starving():
                lane.wants = await self._wait_for_work()
            return [], 0.0
        if len(jobs) < granted:  # the queue had fewer: the unused permits go back
            await self._give_back(lane, granted - len(jobs))
        self.taken += len(jobs)
        lane.wants = True
        await self._wake_one()
        return jobs, now + self.queue.retry_after

    @contextlib.asynccontextmanager
    async def _rate_turn(self) -> AsyncIterator[None]:
        """Hold the process' rate lock (see :meth:`_reserve`); waiting for it counts as
        starved (another lane is waiting for the rate limit)."""
        with self.meter.starving():
            await self._rate_lock.acquire()
        try:
            yield
        finally:
            self._rate_lock.release()

    @property
    def _rated(self) -> bool:
        """The group's own rate limit paces this worker (a rate or warm-up, no provider): its
        mails' extra recipients are precharged (:meth:`_precharge`)."""
        return self.pacer is None and not self.limiter.unlimited

    async def _provider_reserve(
        self, lane: _Lane
    ) -> tuple[int, float, list[Ack], ReserveResult] | None:
        """With a provider: one permit, then reserve one job and charge its extra recipients
        to the provider's budget (:meth:`_provider_precharge`), all while holding the
        process' grant lock, taken when the permit was granted (:meth:`_provider_permit`),
        so no other lane of this process takes a permit before that debt is charged. Same
        answer as :meth:`_take_and_reserve`.

        Another process' lane may still take a permit in the two round trips between this
        grant and its charge (at most one per process: each holds its own grant lock)."""
        if await self._paused_before_permit(lane):
            return None
        if await self._provider_permit(lane) == 0:
            return None
        try:  # the grant lock is held
            got = await self._reserve_granted(lane, 1)
            if got is not None and got[3].jobs and not got[3].paused:
                await self._provider_precharge(lane, got[3].jobs[0])
            return got
        finally:
            self._grant_lock.release()

    async def _take_and_reserve(
        self, lane: _Lane, want: int
    ) -> tuple[int, float, list[Ack], ReserveResult] | None:
        """Take up to ``want`` permits of the group's rate limit, then reserve that many jobs
        (the lane's acks ride along). Returns (permits granted, Redis' time of the reserve in
        unix seconds, the acks written, the script's result), or None when no permit came
        (stopping)."""
        if self.limiter.unlimited:
            granted = want
        else:
            grant = await self.limiter.try_take(want, self.backpressure.run)
            if grant.granted == 0:
                await self._flush(lane)  # do not hold an acknowledgement while waiting
                with self.meter.starving():
                    grant = await self.limiter.take(want, self.stopping, self.backpressure.run)
            self._publish_rate()
            granted, lane.rate_mark = grant.granted, grant.mark
            if granted == 0:
                return None
        return await self._reserve_granted(lane, granted)

    async def _reserve_granted(
        self, lane: _Lane, granted: int
    ) -> tuple[int, float, list[Ack], ReserveResult] | None:
        """Reserve ``granted`` jobs with the permits taken (the lane's acks ride along); see
        :meth:`_take_and_reserve`. None (the permits given back) when stopping."""
        if self.stopping.is_set():
            await self._give_back(lane, granted)
            return None
        await self.clock.refresh()
        now = self.clock.now()
        acks = lane.acks
        result = await lane.queue.reserve_detailed(granted, ack=acks, now=now)
        lane.acks = []  # the script ran: acknowledged (lost or not)
        return granted, now, acks, result

    async def _precharge(self, lane: _Lane, job: Reserved) -> int:
        """Charge the group's rate limit for ``job``'s recipients beyond the one its permit
        counted, before it is sent (in debt: the next permits wait for them); returns how many
        were charged (0 for a job with one recipient or none readable, whose mail fails).

        Charged before the send, not after it: a mail in flight (up to its timeout) must not
        leave its recipients out of what the other lanes see, or they take slots the limit
        would refuse (100 recipients in 5 mails went in 3.4 s at 10/s, burst 10, with the
        charge after the send). The surplus is given back once the mail is settled
        (:meth:`_settle_charge`: suppressed recipients, a failed send)."""
        extra = self._recipients(lane, job) - 1
        lane.charge_mark = None
        if extra > 0:
            lane.charge_mark = await self._best_effort(
                self.limiter.charge(extra, self.backpressure.run)
            )
        return extra

    async def _provider_precharge(self, lane: _Lane, job: Reserved) -> None:
        """Charge the provider's budget (and the group's share) for ``job``'s recipients
        beyond the one its permit counted, right after its reserve, before it is sent: one
        round trip, for a multi-recipient mail only (the permit script's ``peek`` mode, which
        takes no permit and leaves the lane's lease). A mail in flight (tens to hundreds of
        ms) then counts in full for every lane and group that asks meanwhile; charged on the
        lane's next permit call instead, the sum the provider saw passed its rate (100
        recipients in the first second at 20/s, burst 20, two groups: test_provider_workers).
        If Redis refuses the call the
        recipients are charged on the lane's next permit call (``lane.debt``), as before."""
        assert self.pacer is not None
        extra = self._recipients(lane, job) - 1
        lane.precharged, lane.marks = max(0, extra), None
        if extra <= 0:
            return
        marks = await self._best_effort(self.pacer.charge(self.pacer.lane_id(lane.index), extra))
        if marks is None:
            lane.debt += extra
        else:
            lane.marks = marks

    async def _settle_provider(self, lane: _Lane) -> None:
        """Square the lane's provider precharge with the recipients its mail was sent to: a
        shortfall is charged now; a surplus (suppressed recipients, a failed send) goes back
        at each level where nothing was charged since the precharge (elsewhere it stays
        charged: see :meth:`ProviderPacer.refund`). Then clears both."""
        assert self.pacer is not None
        diff = max(0, lane.sent - 1) - lane.precharged
        marks = lane.marks
        lane.precharged, lane.marks, lane.sent = 0, None, 0
        if diff > 0:
            charged = await self._best_effort(
                self.pacer.charge(self.pacer.lane_id(lane.index), diff)
            )
            if charged is None:
                lane.debt += diff
        elif diff < 0 and marks is not None:
            await self._best_effort(self.pacer.refund(-diff, marks))

    def _recipients(self, lane: _Lane, job: Reserved) -> int:
        """Recipients ``job`` counts for in the group's rate limit and the provider's rate: a
        mail job's envelope recipients, 1 for anything else and for a mail whose data is
        invalid (it fails unsent). The message is built here, once, exactly as the handler
        sends it (:func:`h.prepare_mail`, the same caps), and kept on the lane for the
        handler (``JobContext.mail``) instead of being built again for the send."""
        lane.mail = prepared_mail(job, self.limits)
        return lane.mail.recipients if lane.mail is not None else 1

    async def _settle_charge(self, lane: _Lane) -> None:
        """Square the lane's precharge with the recipients its mail was sent to: give back
        the surplus, charge a shortfall; then clear both."""
        diff = max(0, lane.sent - 1) - lane.precharged
        mark, lane.charge_mark = lane.charge_mark, None
        lane.precharged = lane.sent = 0
        if diff > 0:
            await self._best_effort(self.limiter.charge(diff, self.backpressure.run))
        elif diff < 0:
            await self._best_effort(self.limiter.give_back(-diff, mark))

    async def _run_batch(self, lane: _Lane, jobs: list[Reserved], reserved_until: float) -> None:
        """Run the reserved ``jobs`` one after the other.

        Every job of a batch was reserved by one call, so all their reservations end at
        ``reserved_until`` (Redis' clock). The rule: a job after the first starts only while
        the reservation still holds the whole time limit it would have had alone
        (``min(timeout, retry_after)``, plus :data:`FENCE_MARGIN`); so no job of a batch is
        cut short or fenced because it waited behind the others, and every acknowledgement
        the lane holds is written before the reservations end (the last job ends by then and
        its acks ride with the next call). Before each job after the first the lane also
        stops at a stop (SIGTERM, max time), at a backpressure suspension of the group, after a
        mail whose extra recipients the rate limit charged, and,
        :data:`BATCH_PAUSE_LOOK` seconds after its last look, at the pause marker. The jobs
        it will not start go back to the head of the ready list at once, their attempt not
        counted (``unreserve``), with their rate permits."""
        looked = time.monotonic()
        rated = self._rated
        charged = False
        for i, job in enumerate(jobs):
            opts = None
            if i > 0:
                opts = JobOptions.of(job.payload, self.config) if job.payload else None
                why = self._batch_cut(opts, reserved_until)
                if not why and charged:
                    # the slots of the rest were taken before this debt: they go back, and
                    # the next reserve takes new ones after it (the rate counts recipients)
                    why = "the rate limit charged the last mail's extra recipients"
                if not why:
                    suspended = self.backpressure.cached_suspended_for()
                    if suspended is None:
                        suspended = await self.backpressure.suspended_for()
                    if suspended > 0:
                        why = "group suspended by provider backpressure"
                if not why and time.monotonic() - looked >= BATCH_PAUSE_LOOK:
                    looked = time.monotonic()
                    if await self._best_effort(lane.queue.redis.exists(self.keys.paused)):
                        self._paused = True
                        self._log_pause(True)
                        why = "group paused"
                if why:
                    await self._hand_back(lane, jobs[i:], why)
                    return
                if rated:
                    lane.precharged = await self._precharge(lane, job)
            charged = lane.precharged > 0
            self.metrics.in_flight_now += 1
            if self.health is not None:
                self.health.job_started(lane.index)
            try:
                await self._process(lane, job, reserved_until, opts)
                if rated:
                    await self._settle_charge(lane)
                elif self.pacer is not None:
                    await self._settle_provider(lane)
            except BaseException:
                if i + 1 < len(jobs):
                    with contextlib.suppress(Exception):
                        await self._hand_back(lane, jobs[i + 1 :], "lane error")
                raise
            finally:
                if self.health is not None:
                    self.health.job_finished(lane.index)
                self.metrics.in_flight_now -= 1
                self.meter.lane_warm(lane.index)
                self.finished += 1
                if self._tuner_rest is not None:
                    self._tuner_rest.set()
                if self.config.max_jobs and self.finished >= self.config.max_jobs:
                    self.stop("max jobs reached")

    def _batch_cut(self, opts: JobOptions | None, reserved_until: float) -> str:
        """Why the next job of a batch must not start ("" when it may): see
        :meth:`_run_batch`. ``opts``: the job's options (None: its payload is unreadable,
        failing it needs no time limit)."""
        if self.stopping.is_set():
            return self.stop_reason or "stopping"
        if opts is not None:
            limit = min(opts.timeout, self.queue.retry_after - FENCE_MARGIN)
            if reserved_until - self.clock.now() - FENCE_MARGIN < limit:
                return "too little of the reservation left"
        return ""

    async def _hand_back(self, lane: _Lane, jobs: list[Reserved], why: str) -> None:
        """Return never-started ``jobs`` to the head of the ready list now, no attempt counted,
        and their rate permits (retried through an outage until the stop's limit; if Redis
        stays away they come back after ``retry_after``, that attempt counted)."""
        try:
            back = await self._retry(lambda: lane.queue.unreserve(jobs))
        except REDIS_RETRY:
            log.error(
                "%d reserved job(s) not handed back (Redis unreachable); they come back after "
                "retry_after",
                len(jobs),
            )
            return
        self.taken -= len(jobs)
        self._unclaim(len(jobs))
        await self._give_back(lane, len(jobs))
        log.info("%d reserved job(s) handed back unstarted (%s)", back, why)

    def _log_pause(self, paused: bool) -> None:
        if paused and not self._paused_logged:
            log.warning("group paused (%s set): taking no jobs", self.keys.paused)
            self._paused_logged = True
        elif not paused and self._paused_logged:
            log.info("group no longer paused: taking jobs again")
            self._paused_logged = False

    async def _paused_before_permit(self, lane: _Lane) -> bool:
        """With a provider: while the group is paused (or at start, before anything was seen),
        look at the pause marker (one EXISTS on the group's Redis) before taking a permit, and
        wait :data:`PAUSED_POLL` seconds while it is set. A paused group's lanes then never
        take and give back provider permits or leases (the provider's Redis may be another
        one, so the permit script cannot read the marker itself). Once ``reserve`` saw no
        marker, this costs nothing: ``reserve``'s answer says when a pause starts. A lane that
        still holds the lease of the mail it sent when the pause came releases it, once."""
        assert self.pacer is not None
        if self._paused is False:
            return False
        paused = bool(await self.client.exists(self.keys.paused))
        self._log_pause(paused)
        if not paused:
            self._paused = False
            return False
        self._paused = True
        await self._flush(lane)
        if lane.leased:  # its last mail's lease goes now, once; then nothing until resumed
            await self.pacer.release(self.pacer.lane_id(lane.index), lane.debt)
            lane.debt = 0
            lane.leased = False
        with self.meter.starving():
            await self._sleep(PAUSED_POLL)
        return True

    async def _provider_permit(self, lane: _Lane) -> int:
        """One permit from the provider's budget and the group's share (one round trip when
        granted at once); 0 when the worker stopped while waiting. Granted (1), it returns
        holding the process' grant lock (:meth:`_provider_reserve` releases it); each try is
        made under that lock, every wait (for a permit, for work) outside it."""
        assert self.pacer is not None
        lane_id = self.pacer.lane_id(lane.index)
        await self._grant_lock.acquire()
        try:
            permit = await self.pacer.try_take(lane_id, lane.debt, demand=lane.wants)
        except BaseException:
            self._grant_lock.release()
            raise
        lane.debt = 0
        if not permit.granted:
            self._grant_lock.release()
            lane.leased = False  # a refused call drops the lane's lease
            await self._flush(lane)  # do not hold an acknowledgement while waiting
            if permit.why == "share" and not lane.wants:
                # no share, and no sign of work: wait for work, not for a permit (a poll for
                # a permit with no work to send would keep no share alive: see try_take)
                with self.meter.starving():
                    lane.wants = await self._wait_for_work()
                return 0
            if permit.why.startswith("suspended:"):
                log.debug("provider %s: %s", self.pacer.config.id, permit.why)
            with self.meter.starving():
                took = await self.pacer.take(
                    lane_id,
                    self.stopping,
                    wait=permit.wait,
                    demand=lane.wants,
                    hold=self._grant_lock,
                )
            if not took:
                await self.pacer.release(lane_id)
                return 0
        lane.leased = True
        if self.pacer.last is not None:
            self.metrics.rate.labels(*self.metrics.group).set(self.pacer.last.per_minute or 0)
        return 1

    async def _give_back(self, lane: _Lane, granted: int) -> None:
        """Return an unused permit (no job, or stopping)."""
        if self.pacer is not None:
            await self.pacer.give_back(self.pacer.lane_id(lane.index))
            lane.leased = False
        elif not self.limiter.unlimited:
            await self.limiter.give_back(granted, lane.rate_mark)

    async def _wait_if_suspended(self, lane: _Lane) -> bool:
        remaining = await self.backpressure.suspended_for()
        self.metrics.suspended_group.set(1 if remaining > 0 else 0)
        if remaining <= 0:
            if self._suspension_logged:
                log.info("group no longer suspended: sending again")
                self._suspension_logged = False
            return False
        if not self._suspension_logged:
            log.warning("group suspended by provider backpressure for %.0fs", remaining)
            self._suspension_logged = True
        await self._flush(lane)
        if self.pacer is not None:  # a suspended group holds no provider lease
            await self.pacer.release(self.pacer.lane_id(lane.index), lane.debt)
            lane.debt = 0
            lane.leased = False
        with self.meter.starving():
            await self._sleep(min(remaining, 5.0))
        return True

    async def _wake_one(self) -> None:
        """A lane found a job: there may be more, wake one idle lane."""
        async with self._idle:
            self._idle.notify(1)

    async def _wait_for_work(self) -> bool:
        """Wait for work: one lane at a time blocks on Redis (:meth:`_block_on_redis`), the
        others wait to be woken by a lane that found a job (or 30 s, or the stop). True when
        something signalled work (a token, a due delayed job or expired reservation, a lane
        that found a job), False when the wait just timed out (or the worker stops)."""
        if not self._blocker:
            self._blocker = True
            try:
                return await self._block_on_redis()
            finally:
                self._blocker = False
        async with self._idle:
            if self.stopping.is_set():  # stop() may have notified before this lane got here
                return False
            try:
                await asyncio.wait_for(self._idle.wait(), 30.0)
            except TimeoutError:
                return False
            return not self.stopping.is_set()

    async def _block_on_redis(self) -> bool:
        """Block on the notify list until a token arrives, the next delayed job or expired
        reservation is due, ``block_for`` passes, or the worker stops. True when a token
        came or something is due, False on the timeout or the stop."""
        async with self.client.pipeline(transaction=False) as pipe:
            pipe.zrange(self.keys.delayed, 0, 0, withscores=True)
            pipe.zrange(self.keys.reserved, 0, 0, withscores=True)
            firsts = await pipe.execute()
        timeout = self.config.block_for
        due = False
        for first in firsts:
            if first:
                at = float(first[0][1]) - self.clock.now()
                if at <= timeout:
                    timeout, due = at, True
        if timeout <= 0.001:
            return True
        timeout = max(timeout, 0.01)
        pop = asyncio.ensure_future(self.blocking.blpop([self.keys.notify], timeout=timeout))
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            await asyncio.wait({pop, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (pop, stop):
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, *REDIS_DOWN):
                        await task
        if pop.done() and not pop.cancelled():
            # raises the Redis error, if any; a token, or the due job's time came
            return pop.result() is not None or due
        return False

    # --- one job ---------------------------------------------------------------------------
    async def _process(
        self, lane: _Lane, job: Reserved, reserved_until: float, opts: JobOptions | None = None
    ) -> None:
        # the message built to count this job's recipients (_recipients), for its handler
        prepared, lane.mail = lane.mail, None
        payload = job.payload
        if payload is None:
            await self._fail(
                lane, job, "InvalidPayload", job.invalid or "payload is not a JSON object"
            )
            return
        handler = self.registry.get(payload.get("job"))
        if handler is None and laravel.is_laravel_job(payload.get("job")):
            reason = laravel.unrunnable_reason(payload, self.config.queue)
            await self._fail(lane, job, laravel.LARAVEL_JOB_EXCEPTION, reason)
            return
        if handler is None:
            await self._fail(
                lane,
                job,
                "UnknownHandler",
                f"no handler for job {payload.get('job')}; "
                f"known: {', '.join(self.registry.names())}",
            )
            return
        if opts is None:
            opts = JobOptions.of(payload, self.config)
        now = self.clock.now()
        if opts.exceeded_before_run(job.attempts, now):
            exceeded = h.HandlerResult(
                h.Outcome.PERMANENT,
                "MaxAttemptsExceededException",
                f"{_display(payload)} has been attempted too many times"
                + (" or run too long" if opts.retry_until is not None else ""),
            )
            if handler.sends:
                await self._record(lane, job, exceeded, lb.FAILED)
            await self._fail(lane, job, exceeded.exception, exceeded.message)
            return
        # begin_send rides in the handler's suppression screen when it can (one round trip for
        # both, right before MAIL FROM); else it runs here, before the handler
        began: list[bool] = []
        screen: smtp.Screen | None = None
        combined = handler.sends and handler.screens and lane.loopback.screens_in_queue_scripts
        if combined:
            screen = self._begin_screen(lane, job, began)
        else:
            if handler.sends and not await self._may_send(lane, job):
                return
            if lane.loopback.suppressed is not None:
                screen = lane.loopback.screen
        # the ladder: job timeout < retry_after; never run past the reservation
        timeout = max(0.1, min(opts.timeout, reserved_until - self.clock.now() - FENCE_MARGIN))
        deadline = time.monotonic() + timeout

        def held() -> bool:  # wall clock: the reservation (score) is still ours
            return self.clock.now() < reserved_until - FENCE_MARGIN

        def fence() -> bool:  # may the handler still cause its side effect?
            return held() and time.monotonic() < deadline

        context = h.JobContext(
            payload=payload,
            uuid=job.uuid,
            attempts=job.attempts,
            fence=fence,
            screen=screen,
            mail=prepared if prepared is not None and prepared.uuid == job.uuid else None,
        )
        try:
            async with asyncio.timeout(timeout):
                result = await handler.run(context)
        except _NotOurs as refused:
            await self._not_ours(lane, job, refused.state)
            return
        except TimeoutError:
            if not held():
                result = h.HandlerResult(h.Outcome.FENCED, message="timed out past the fence")
            else:
                result = h.HandlerResult(
                    h.Outcome.PERMANENT if opts.fail_on_timeout else h.Outcome.TEMPORARY,
                    "TimeoutExceededException",
                    f"{_display(payload)} has timed out after {timeout:g}s",
                )
        except REDIS_CALL_DOWN as exc:
            # a Redis call inside the handler (the suppression check) during an outage or a
            # failover: the attempt is retried later; one outage line, no traceback per job
            self.outage.failed(exc)
            result = h.HandlerResult(
                h.Outcome.TEMPORARY,
                type(exc).__name__,
                f"Redis unreachable during the send: {_short(exc)}",
                from_provider=False,
            )
        except Exception as exc:
            log.exception("job %s: handler raised", job.uuid)
            result = h.HandlerResult(
                h.Outcome.TEMPORARY, type(exc).__name__, str(exc), from_provider=False
            )
        if combined and not began:
            # the handler ended before its screen ran (bad mail data, no connection to the
            # relay): the check it skipped, before its outcome is committed (an already sent
            # job is completed, not failed or retried)
            if result.outcome is h.Outcome.DONE:  # cannot happen: a screening handler sent
                log.error("job %s: handler sent without its screen", job.uuid)
            elif not await self._may_send(lane, job):
                return
        await self._settle(lane, job, opts, result, record=handler.sends)

    async def _may_send(self, lane: _Lane, job: Reserved) -> bool:
        """``begin_send`` (retried through outages): True when the job is still ours and not
        sent; else the job is handled (see :meth:`_not_ours`) and False."""
        acks = lane.acks
        if acks:  # the batch's earlier deliveries are acknowledged in the same script
            got = await self._retry(lambda: lane.queue.ack_begin(job, acks, now=self.clock.now()))
            lane.acks = []
            self._acked(acks, got.lost_acks, got.refused_entries)
            state = got.screened.state
        else:
            state = await self._retry(lambda: lane.queue.begin_send(job))
        if state == "ok":
            return True
        await self._not_ours(lane, job, state)
        return False

    async def _not_ours(self, lane: _Lane, job: Reserved, state: str) -> None:
        """``begin_send`` said ``lost`` (another worker owns the job: leave it) or
        ``already_sent`` (an earlier reservation delivered it: acknowledge, not sent again)."""
        if state == "lost":
            self.metrics.job("lost")
            log.info("job %s: reservation gone before sending; left to its owner", job.uuid)
            return
        await self._retry(lambda: lane.queue.done(job, delivered=False))
        self.metrics.job("skipped")
        log.info("job %s: already sent by an earlier reservation; not sent again", job.uuid)

    def _begin_screen(self, lane: _Lane, job: Reserved, began: list[bool]) -> smtp.Screen:
        """The job's suppression screen with its ``begin_send`` check in the same script
        (``queue.protocol.begin_screen_call``): raises :class:`_NotOurs` when the job is lost
        or already sent (nothing is written to the relay); appends True to ``began`` once the
        check answered."""
        suppressed = lane.loopback.suppressed
        assert suppressed is not None

        async def screen(recipients: Sequence[str]) -> Collection[str]:
            normalized = [lb.normalize(r) for r in recipients]
            acks = lane.acks
            if acks:  # the batch's earlier deliveries are acknowledged in the same script
                both = await lane.queue.ack_begin(
                    job, acks, self.clock.now(), suppressed, normalized
                )
                lane.acks = []
                self._acked(acks, both.lost_acks, both.refused_entries)
                got = both.screened
            else:
                got = await lane.queue.begin_screen(job, suppressed, normalized)
            began.append(True)
            if got.state != "ok":
                raise _NotOurs(got.state)
            return {r for r, hit in zip(recipients, got.hits, strict=True) if hit}

        return screen

    async def _settle(
        self,
        lane: _Lane,
        job: Reserved,
        opts: JobOptions,
        result: h.HandlerResult,
        record: bool = False,
    ) -> None:
        """Act on ``result``; with ``record`` (mail handlers) also write the outcome stream
        entry (see :mod:`sendgroup_worker.loopback`), before the outcome is committed; a
        delivered mail's entry rides with its acknowledgement in the same script where the
        deployment allows it (:meth:`lb.Loopback.entry`)."""
        # the rate counts recipients: the job's first slot was taken before reserving, the
        # others before its send (_precharge, _provider_precharge); the lane squares that
        # with these after the job (_settle_charge, _settle_provider)
        lane.sent = result.sent_to
        if result.outcome is h.Outcome.DONE:
            # acknowledged inside the lane's next reserve call (one round trip saved), or by
            # _flush before the lane waits or stops; the outcome entry with it (another one)
            outcome = self._outcome(job, result, lb.DELIVERED) if record else None
            entry = lane.loopback.entry(outcome) if outcome is not None else None
            lane.acks.append(Ack.of(job, delivered=True, entry=entry))
            self.metrics.job("delivered")
            if outcome is not None and entry is None:
                await self._write(lane, outcome)
            if self.backpressure.run:  # else record_success has nothing to reset
                await self._best_effort(self.backpressure.record_success())
            return
        if result.outcome is h.Outcome.FENCED:
            self.metrics.job("lost")
            log.info("job %s: not sent, the reservation expired (%s)", job.uuid, result.message)
            return
        if result.outcome is h.Outcome.SUPPRESSED:
            if record:
                await self._record(lane, job, result, lb.SUPPRESSED)
            lost = await self._retry(lambda: lane.queue.done(job, delivered=False))
            self.metrics.job("lost" if lost else "suppressed")
            log.info(
                "job %s: not sent: %s (%s)", job.uuid, result.message, ",".join(result.suppressed)
            )
            return
        if self.pacer is not None and result.from_provider:
            await self._provider_reply(result.reply_text or result.message)
        if result.outcome is h.Outcome.PERMANENT:
            if record:
                await self._record(lane, job, result, lb.FAILED)
            await self._fail(lane, job, result.exception, result.message)
            return
        # temporary: 4xx, connection trouble, timeout (the provider's), or a handler that raised
        if result.from_provider:
            self.meter.pushback()  # the lane count halves (WORKER_CONCURRENCY=auto)
            suspended = await self._best_effort(
                self.backpressure.record_temporary(result.reply_text)
            )
            if suspended:
                self.metrics.suspended_group.set(1)
        if opts.fails_after_temporary(job.attempts, self.clock.now()):
            if record:
                await self._record(lane, job, result, lb.FAILED)
            await self._fail(
                lane,
                job,
                result.exception or "MaxAttemptsExceededException",
                f"{result.message} (attempt {job.attempts}, no tries left)",
            )
            return
        delay = opts.backoff_for(job.attempts)
        if record:
            await self._record(lane, job, result, lb.DEFERRED, retry_in=delay)
        lost = await self._retry(lambda: lane.queue.release(job, delay, now=self.clock.now()))
        if lost:
            self.metrics.job("lost")
            log.info("job %s: reservation gone; not released again", job.uuid)
        else:
            self.metrics.job("released")
            log.info(
                "job %s: attempt %d: %s; retry in %gs",
                job.uuid,
                job.attempts,
                result.message,
                delay,
            )

    async def _provider_reply(self, reply: str) -> None:
        """Count a provider's non-2xx reply for the provider's pushback rules (best effort)."""
        assert self.pacer is not None
        if not reply:
            return
        rule = await self._best_effort(self.pacer.record_reply(reply))
        if rule is not None:
            log.warning(
                "provider %s: pushback rule %s fired on %r: %s for %gs",
                self.pacer.config.id,
                rule.name,
                reply[:200],
                rule.action,
                rule.duration,
            )

    async def _fail(self, lane: _Lane, job: Reserved, exception: str, message: str) -> None:
        lost = await self._retry(lambda: lane.queue.fail(job, exception, message))
        if lost:
            self.metrics.job("lost")
            log.info("job %s: reservation gone; not failed again", job.uuid)
        else:
            self.metrics.job("failed")
            log.info("job %s: failed: %s: %s", job.uuid or "?", exception, message)

    # --- helpers ---------------------------------------------------------------------------
    async def _record(
        self,
        lane: _Lane,
        job: Reserved,
        result: h.HandlerResult,
        outcome: str,
        retry_in: float | None = None,
    ) -> None:
        """Write ``job``'s outcome stream entry, retried like a job outcome; never raises (a
        Redis outage that outlasts a stop loses the entry, logged, but never the job)."""
        await self._write(lane, self._outcome(job, result, outcome, retry_in))

    async def _write(self, lane: _Lane, entry: lb.Outcome) -> None:
        """XADD ``entry`` on its own (see :meth:`_record`)."""
        try:
            await self._retry(lambda: lane.loopback.record(entry))
        except REDIS_RETRY:
            log.error(
                "job %s: outcome %s not written to the outcome stream", entry.uuid, entry.outcome
            )

    def _entry_refused(self, uuid: str) -> None:
        """Count a delivered mail whose outcome entry Redis refused inside the acknowledging
        script (the stream key holds another type: an app overwrote it); logged at most once
        a minute, with the count since the last line. The mail stays delivered."""
        self._refused_entries += 1
        now = time.monotonic()
        if now - self._refused_logged_at < 60:
            return
        log.error(
            "outcome stream %s refused %d entr%s (latest: job %s, delivered): the key holds "
            "something other than a stream; the mails were sent and acknowledged",
            self.loopback.stream,
            self._refused_entries,
            "y" if self._refused_entries == 1 else "ies",
            uuid,
        )
        self._refused_entries = 0
        self._refused_logged_at = now

    def _outcome(
        self,
        job: Reserved,
        result: h.HandlerResult,
        outcome: str,
        retry_in: float | None = None,
    ) -> lb.Outcome:
        """``job``'s outcome stream entry (see :mod:`sendgroup_worker.loopback`)."""
        return lb.Outcome(
            uuid=job.uuid,
            outcome=outcome,
            reply=result.message,
            attempt=job.attempts,
            at=self.clock.now(),
            queue=self.config.queue,
            group=self.config.group,
            to=result.recipients,
            suppressed=result.suppressed,
            exception=result.exception if outcome in (lb.FAILED, lb.DEFERRED) else "",
            retry_in=retry_in,
        )

    async def _retry(self, call: Callable[[], Awaitable[T]]) -> T:
        """Run a Redis call until it succeeds: a finished job's outcome must reach Redis.
        Once the worker is stopping, gives up (re-raising) :data:`STOP_RETRY_LIMIT` seconds
        after the stop, so an outage cannot hold a stopping pod until SIGKILL.

        The first attempt runs bare; only a failed one enters tenacity's loop (which tries
        again at once, then backs off): building the retry state for every call was about
        6 % of the worker's CPU per mail (py-spy, four such calls per mail)."""
        try:
            value = await call()
        except REDIS_RETRY as exc:
            self.outage.failed(exc)
        else:
            self.outage.ok()
            return value
        return await self._retry_loop(call)

    async def _retry_loop(self, call: Callable[[], Awaitable[T]]) -> T:
        """:meth:`_retry` after a failed first attempt: tenacity, capped exponential backoff
        with jitter (0.05 s doubling up to :data:`OUTAGE_MAX_WAIT`)."""

        def give_up(state: RetryCallState) -> bool:
            return (
                self._stopped_at is not None
                and time.monotonic() - self._stopped_at > STOP_RETRY_LIMIT
            )

        def before_sleep(state: RetryCallState) -> None:
            if state.outcome is not None and state.outcome.exception() is not None:
                self.outage.failed(state.outcome.exception())  # type: ignore[arg-type]

        retrying = AsyncRetrying(
            retry=retry_if_exception_type(REDIS_RETRY),
            wait=wait_exponential_jitter(initial=0.05, max=OUTAGE_MAX_WAIT, jitter=0.1),
            stop=give_up,
            before_sleep=before_sleep,
            reraise=True,
        )
        async for attempt in retrying:
            with attempt:
                value = await call()
        self.outage.ok()
        return value

    async def _best_effort(self, call: Awaitable[T]) -> T | None:
        try:
            return await call
        except REDIS_RETRY as exc:
            self.outage.failed(exc)
            return None

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    def _publish_rate(self) -> None:
        rate = self.limiter.current_per_minute
        self.metrics.rate.labels(*self.metrics.group).set(rate or 0)


def _retry_state(attempt: int) -> RetryCallState:
    state = RetryCallState(retry_object=AsyncRetrying(), fn=None, args=(), kwargs={})
    state.attempt_number = attempt
    return state


def prepared_mail(job: Reserved, limits: MailLimits) -> h.PreparedMail | None:
    """A :data:`h.SEND_MAIL` job's message, built exactly as its handler sends it with
    ``limits`` (:func:`h.prepare_mail`); None for any other job."""
    payload = job.payload
    if not payload or payload.get("job") != h.SEND_MAIL:
        return None
    return h.prepare_mail(payload, job.uuid, limits)


def mail_limits(config: WorkerConfig) -> MailLimits:
    """The caps on one job's mail from the settings (``MAIL_MAX_BYTES``,
    ``MAIL_MAX_RECIPIENTS``)."""
    return MailLimits(config.mail_max_bytes, config.mail_max_recipients)


def _display(payload: dict[str, object]) -> str:
    name = payload.get("displayName") or payload.get("job") or "job"
    return str(name)


def _short(exc: BaseException) -> str:
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _deployment_kind(target: RedisTarget) -> str:
    """``standalone``, ``cluster`` or ``sentinel``. A plain ``redis://`` URL is probed with
    ``INFO cluster``; while its server is unreachable the probe is retried with backoff (one
    log line), and SIGTERM/SIGINT during that wait exit 0."""
    if target.kind != "detect":
        return target.kind
    delay = 0.2
    logged = False
    # entry.record, not a handler of its own: a signal that arrives while a probe is in
    # flight and the probe then succeeds must still stop the worker (Worker.run reads it);
    # kept only here, it was lost, and a pod deleted as it started sent until SIGKILL
    previous = {s: signal.signal(s, entry.record) for s in entry.STOP_SIGNALS}
    try:
        while not entry.early_signal():
            try:
                kind = detect_sync(target, socket_timeout=5, socket_connect_timeout=5)
            except REDIS_DOWN as exc:
                if not logged:
                    log.warning(
                        "Redis unreachable at start (%s: %s); retrying with backoff",
                        target.describe(),
                        _short(exc),
                    )
                    logged = True
                time.sleep(delay)
                delay = min(delay * 2, OUTAGE_MAX_WAIT)
                continue
            if logged:
                log.warning("Redis reachable again (%s)", target.describe())
            return kind
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
    log.info("stopping (%s) before Redis was reachable", entry.early_signal())
    raise SystemExit(0)


def build_worker(config: WorkerConfig) -> Worker:
    """Wire a :class:`Worker` from ``config``: Redis clients (one for commands, one for the
    blocking wait; standalone, cluster or Sentinel from the URL), queue client, SMTP pool
    (at most one connection per lane, for the most lanes it may run), handlers, metrics, rate
    limiter and backpressure. Opens no connection, except the ``INFO cluster`` probe of a plain
    ``redis://`` URL."""
    target = parse(config.redis_url)
    kind = _deployment_kind(target)
    client = build_async(target, kind, socket_timeout=10, socket_connect_timeout=5)
    blocking = build_async(
        target, kind, socket_timeout=config.block_for + 10, socket_connect_timeout=5
    )
    keys = QueueKeys(config.queue, prefix=config.key_prefix)
    if kind == "cluster" and keys.slot_tag is None:
        raise SystemExit(
            f"worker: queue {config.queue!r} has no hash tag, so on Redis Cluster "
            f"({target.describe()}) its keys land in different slots; name the queue with a "
            f"hash tag, e.g. '{{{config.queue}}}' (SendGroup spec.queue)"
        )
    queue = AsyncQueue(
        client,
        keys,
        retry_after=int(config.retry_after),
        wait_replicas=config.redis_wait_replicas,
        wait_timeout=config.redis_wait_timeout,
    )
    metrics = WorkerMetrics(config.queue, sendgroup=config.group or None)
    pool = SmtpPool(
        SmtpSettings(
            host=config.smtp_host,
            port=config.smtp_port,
            tls=config.smtp_tls,
            username=config.smtp_username,
            password=config.smtp_password,
            timeout=config.smtp_command_timeout,
            helo_name=config.smtp_helo_name,
            ca_file=config.smtp_ca_file,
            pipelining=config.smtp_pipelining,
        ),
        size=config.max_lanes,
    )
    limiter = RateLimiter(
        client,
        keys.ratelimit,
        ledger=keys.ratelimit_ledger,
        policy=RatePolicy(
            per_minute=config.rate_per_minute,
            burst=config.burst,
            warmup_start_per_hour=config.warmup_start_per_hour,
            warmup_growth_per_day=config.warmup_growth_per_day,
            warmup_since=config.warmup_since,
        ),
    )
    backpressure = Backpressure(
        client,
        keys.backpressure,
        config.backpressure_suspend_after,
        config.backpressure_suspend_for,
        config.patterns(),
    )
    loopback = lb.Loopback(
        client, config.outcome_stream_key, config.suppression_set_key, config.outcome_stream_maxlen
    )
    registry = h.default_registry(pool, metrics, mail_limits(config))
    check_timeout = min(5.0, config.smtp_command_timeout)
    health = WorkerHealth(
        stall_after=config.stall_after,
        # a job's awaits are bounded by its timeout (a payload may ask for more, up to the
        # reservation's lifetime): past the larger of the two, the lane is hung
        job_limit=max(config.timeout, config.retry_after),
        checks={
            "redis": redis_check(config.redis_url, check_timeout),
            "smtp": smtp_check(
                config.smtp_host,
                config.smtp_port,
                implicit_tls=config.smtp_tls == "tls",
                ca_file=config.smtp_ca_file,
                timeout=check_timeout,
            ),
        },
    )
    pacer = None
    if config.provider is not None:
        pacer = build_pacer(config, config.provider, client)
    return Worker(
        config,
        client,
        blocking,
        queue,
        pool,
        registry,
        metrics,
        limiter,
        backpressure,
        loopback,
        health,
        pacer,
    )


def build_pacer(
    config: WorkerConfig, provider: ProviderConfig, client: AsyncClient
) -> ProviderPacer:
    """The provider pacer: on the provider's Redis (``PROVIDER_REDIS_URL``, which the operator
    always sets; without it, by hand, the group's ``REDIS_URL``; standalone, cluster or
    Sentinel from the URL), the group's own rate/warm-up applied inside its share, leases
    living ``timeout + LEASE_MARGIN`` seconds."""
    if config.provider_redis_url and config.provider_redis_url != config.redis_url:
        target = parse(config.provider_redis_url)
        client = build_async(
            target, _deployment_kind(target), socket_timeout=10, socket_connect_timeout=5
        )
    policy = RatePolicy(
        per_minute=config.rate_per_minute,
        burst=config.burst,
        warmup_start_per_hour=config.warmup_start_per_hour,
        warmup_growth_per_day=config.warmup_growth_per_day,
        warmup_since=config.warmup_since,
    )
    return ProviderPacer(client, provider, policy, config.timeout + LEASE_MARGIN)
