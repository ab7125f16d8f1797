"""The send group's shared rate limit: one GCRA state in Redis for all worker processes, its
allowed rate lowered by the warm-up ramp and by provider backpressure.

GCRA (Generic Cell Rate Algorithm; ITU-T I.371, ATM Forum TM 4.1; explained for rate limiting
by Brandur Leach, "Rate limiting, cells, and GCRA", and used in Redis by redis-cell) keeps one
number per group, the theoretical arrival time (TAT). A message is allowed when
``max(TAT, now) - now <= tau`` with emission interval ``T = 60 / perMinute`` seconds and
tolerance ``tau = (burst - 1) * T``; each allowed message moves TAT by ``T``. So at most
``burst`` messages go at once after an idle period and no more than ``perMinute`` per minute
on average. The script is ``scripts/gcra.lua`` (Redis' clock, so all workers agree).

Warm-up ramp for a new sender domain: ``allowed/hour = startPerHour * growthPerDay ** days``
where ``days`` = (now - warmup.since) / 86400 s (fractional, so it grows smoothly), capped at
``perMinute * 60``. When the ramp is the tighter limit, the burst is lowered to
``ceil(rate_per_minute / 60)`` (at least 1) unless the configured burst is smaller.

Backpressure slow-down: while the provider answers with a run of temporary failures, the rate
is halved per failure in the run, at most 3 times (1/8 of the rate).

Waiting for a slot happens *before* a job is reserved, so it never counts as an attempt and
never fails a job.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Final, NamedTuple

from sendgroup_worker.redisclient import AsyncClient, AsyncScript

#: Longest single sleep while waiting for a slot (the wait re-checks stop and the rate).
MAX_WAIT_STEP: Final = 1.0


def load_script(name: str) -> str:
    """Text of ``sendgroup_worker/scripts/<name>`` (packaged with the wheel)."""
    return resources.files("sendgroup_worker").joinpath("scripts", name).read_text()


@dataclass(frozen=True, slots=True)
class RatePolicy:
    """The group's configured limits. ``per_minute`` None = unlimited (unless warm-up is set);
    ``burst`` messages at once; warm-up as in the module docstring."""

    per_minute: int | None
    burst: int | None = None
    warmup_start_per_hour: int | None = None
    warmup_growth_per_day: float = 2.0
    warmup_since: datetime | None = None

    def allowed_per_minute(self, now: datetime, slowdown_run: int = 0) -> float | None:
        """Messages per minute allowed at ``now`` (None = unlimited), after warm-up and the
        backpressure slow-down for a run of ``slowdown_run`` temporary failures."""
        rate: float | None = float(self.per_minute) if self.per_minute is not None else None
        if self.warmup_start_per_hour is not None:
            since = self.warmup_since or now
            days = max(0.0, (now - since).total_seconds() / 86400.0)
            try:
                per_hour = self.warmup_start_per_hour * self.warmup_growth_per_day**days
            except OverflowError:
                per_hour = math.inf
            ramp = per_hour / 60.0
            rate = ramp if rate is None else min(rate, ramp)
            if math.isinf(rate):
                rate = None
        if rate is not None and slowdown_run > 0:
            rate = rate * 0.5 ** min(slowdown_run, 3)
        return rate

    def burst_at(self, rate_per_minute: float) -> int:
        """Burst to use with ``rate_per_minute``: the configured burst (default
        ``ceil(perMinute/60)``), lowered to ``ceil(rate/60)`` when the rate is lower."""
        base = self.burst or max(1, math.ceil((self.per_minute or rate_per_minute) / 60))
        if self.per_minute is None or rate_per_minute < self.per_minute:
            return max(1, min(base, math.ceil(rate_per_minute / 60)))
        return base


@dataclass(frozen=True, slots=True)
class RateMark:
    """Where a take or a charge left the group's schedule, so its unused cells can be given
    back exactly as far as is safe (``scripts/gcra.lua``'s refund): the ledger's ``epoch``
    (microseconds of Redis' clock when it was created), ``added`` (microseconds of schedule
    added since then, this call's included) and the call's emission interval (microseconds
    per message)."""

    epoch: str
    added: int
    emission_us: int


class Grant(NamedTuple):
    """A take's answer: ``granted`` messages (0 = none free), ``wait`` seconds until one is
    when none was, and the take's :class:`RateMark` (None: nothing was taken, or no limit)."""

    granted: int
    wait: float
    mark: RateMark | None


def _mark(reply: list[object], emission_us: int) -> RateMark | None:
    epoch = reply[2]
    if isinstance(epoch, bytes):
        epoch = epoch.decode()
    if not epoch:
        return None
    return RateMark(str(epoch), int(str(reply[3])), emission_us)


class RateLimiter:
    """Takes message slots from the group's GCRA state in Redis (key ``QueueKeys.ratelimit``,
    its ledger ``QueueKeys.ratelimit_ledger`` for safe give-backs).

    ``now`` and ``slowdown_run`` are read through the callables given, so the warm-up and the
    backpressure slow-down apply to every call. Redis errors propagate (the worker's outage
    handling retries).
    """

    def __init__(self, redis: AsyncClient, key: str, policy: RatePolicy, ledger: str) -> None:
        self.redis = redis
        self.key = key
        self.ledger = ledger
        self.policy = policy
        self._script = AsyncScript(redis, load_script("gcra.lua"))
        self.current_per_minute: float | None = policy.allowed_per_minute(datetime.now(UTC))

    @property
    def unlimited(self) -> bool:
        """True when no rate and no warm-up is configured (no Redis call at all)."""
        return self.policy.per_minute is None and self.policy.warmup_start_per_hour is None

    def _params(self, slowdown_run: int) -> tuple[int, int] | None:
        rate = self.policy.allowed_per_minute(datetime.now(UTC), slowdown_run)
        self.current_per_minute = rate
        if rate is None:
            return None
        emission_us = max(1, round(60_000_000 / max(rate, 1e-9)))
        tolerance_us = (self.policy.burst_at(rate) - 1) * emission_us
        return emission_us, tolerance_us

    async def _call(self, params: tuple[int, int], *args: object) -> list[object]:
        reply = await self._script(keys=[self.key, self.ledger], args=[*params, *args])
        return list(reply)

    async def try_take(self, n: int, slowdown_run: int = 0) -> Grant:
        """Take up to ``n`` (>= 1) slots now: see :class:`Grant`."""
        params = self._params(slowdown_run)
        if params is None:
            return Grant(n, 0.0, None)
        reply = await self._call(params, n, "take")
        return Grant(int(str(reply[0])), int(str(reply[1])) / 1e6, _mark(reply, params[0]))

    async def take(self, n: int, stop: asyncio.Event, slowdown: int | None = None) -> Grant:
        """Wait until at least one slot is free, take up to ``n``; ``granted`` is 0 only
        when ``stop`` was set while waiting. Sleeps in steps of at most
        :data:`MAX_WAIT_STEP` seconds; a slot is taken by Redis, so N processes share it."""
        while not stop.is_set():
            grant = await self.try_take(n, slowdown or 0)
            if grant.granted:
                return grant
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), min(max(grant.wait, 0.001), MAX_WAIT_STEP))
        return Grant(0, 0.0, None)

    async def give_back(self, n: int, mark: RateMark | None) -> int:
        """Give back ``n`` unused slots of the take or charge that returned ``mark`` (jobs
        that were not there, a batch handed back, recipients a mail did not go to). Returns
        how many went back: all of them when nothing was taken since that call, fewer (or
        none) when later takes were placed behind them and giving all back could let the
        sum pass the rate (the proof is in ``scripts/gcra.lua``): the limit errs low."""
        if n <= 0 or mark is None:
            return 0
        params = self._params(0)
        if params is None:
            return 0
        reply = await self._call(params, n, "refund", mark.epoch, mark.added, mark.emission_us)
        return int(str(reply[0]))

    async def charge(self, n: int, slowdown_run: int = 0) -> RateMark | None:
        """Take ``n`` more slots whether or not they are free (the theoretical arrival time
        moves ``n`` emission intervals on): a mail to ``n + 1`` recipients costs ``n + 1``
        slots, the later jobs wait for the debt. Returns the charge's mark (None: no limit)."""
        if n <= 0:
            return None
        params = self._params(slowdown_run)
        if params is None:
            return None
        return _mark(await self._call(params, n, "charge"), params[0])
