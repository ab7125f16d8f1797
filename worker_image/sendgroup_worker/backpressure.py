"""Provider backpressure shared by the whole send group (hash ``QueueKeys.backpressure``).

Every temporary failure (4xx reply, connection error, timeout) from the relay adds one to the
group's *run*; a success resets it. When the run reaches ``suspendAfter``, or a 4xx reply text
matches one of ``patterns`` (providers' deferral codes), the group is suspended for
``suspendFor``: every worker stops taking jobs until then (they wait, they do not burn jobs).
While the run is non-zero the rate limit is lowered (see :mod:`sendgroup_worker.ratelimit`).

Reads are cached for :data:`CACHE_SECONDS` per process, so a busy worker costs one extra Redis
call per second, not one per job; a suspension reaches every worker within that time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Final

from sendgroup_worker.patterns import Pattern, search
from sendgroup_worker.ratelimit import load_script
from sendgroup_worker.redisclient import AsyncClient, AsyncScript

CACHE_SECONDS: Final = 1.0


class Backpressure:
    """Client of one group's backpressure state. Times in seconds. Redis errors propagate."""

    def __init__(
        self,
        redis: AsyncClient,
        key: str,
        suspend_after: int,
        suspend_for: float,
        patterns: Sequence[Pattern] = (),
    ) -> None:
        self.redis = redis
        self.key = key
        self.suspend_after = suspend_after
        self.suspend_for = suspend_for
        self.patterns = list(patterns)
        self._failure = AsyncScript(redis, load_script("backpressure_failure.lua"))
        self._state = AsyncScript(redis, load_script("backpressure_state.lua"))
        #: last known run of temporary failures in the group
        self.run = 0
        self._suspended_until = 0.0  # monotonic
        self._read_at = -1e9  # monotonic

    def _store(self, run: int, remaining_ms: int) -> None:
        # replies of concurrent calls (several lanes) arrive in any order: a suspension only
        # ever ends by running out, so an older reply must never shorten it
        now = time.monotonic()
        self.run = int(run)
        self._suspended_until = max(self._suspended_until, now + int(remaining_ms) / 1000.0)
        self._read_at = now

    def matches(self, reply_text: str) -> bool:
        """True when a temporary reply's text matches a deferral pattern."""
        return any(search(p, reply_text) for p in self.patterns)

    def cached_suspended_for(self) -> float | None:
        """:meth:`suspended_for` from the cache without a coroutine (the batch loop asks
        before every job), or None when the cache is older than CACHE_SECONDS."""
        now = time.monotonic()
        if now - self._read_at >= CACHE_SECONDS:
            return None
        return max(0.0, self._suspended_until - now)

    async def suspended_for(self) -> float:
        """Seconds the group stays suspended (0 = may send). Cached for CACHE_SECONDS."""
        now = time.monotonic()
        if now - self._read_at >= CACHE_SECONDS:
            run, remaining = await self._state(keys=[self.key], args=[0])
            self._store(run, remaining)
            now = time.monotonic()
        return max(0.0, self._suspended_until - now)

    async def record_temporary(self, reply_text: str) -> float:
        """Count one temporary failure; returns seconds of suspension it caused (or that was
        already running), 0 when the group may go on sending."""
        force = 1 if self.matches(reply_text) else 0
        lifetime_ms = int((self.suspend_for + 86400) * 1000)
        run, remaining = await self._failure(
            keys=[self.key],
            args=[self.suspend_after, int(self.suspend_for * 1000), force, lifetime_ms],
        )
        self._store(run, remaining)
        return int(remaining) / 1000.0

    async def record_success(self) -> None:
        """A send succeeded: reset the group's run (only calls Redis when the last known run
        was non-zero, so a healthy group pays nothing)."""
        if self.run == 0:
            return
        run, remaining = await self._state(keys=[self.key], args=[1])
        self._store(run, remaining)
