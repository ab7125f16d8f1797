"""Pacing per receiving provider, across every group and campaign (the worker's side).

A provider (``SendProvider``/``ClusterSendProvider``) has one budget, ``perMinute`` recipients
and ``concurrency`` SMTP transactions in flight, shared by every group resolved to it. Each mail
takes one permit in ONE Redis round trip (``scripts/provider_permit.lua``): the provider's GCRA,
the group's GCRA at ``min(group's share, group's own rate after warm-up)`` (the share is written
by the operator: its split of the rate the scale rules in force leave, high groups first), the
rules in force (suspension, the provider's scaled rate, concurrency cap) and a concurrency lease
that expires by itself (a killed worker cannot keep one). Rates count recipients: a mail to n
recipients takes one permit and its n - 1 more are charged as *debt* right after its reserve,
before it is sent (:meth:`ProviderPacer.charge`, one more round trip for a multi-recipient mail
only), so the other lanes and groups see them while it is in flight; those it was not sent to
(suppressed, a failed send) go back after it when nothing was charged since
(:meth:`ProviderPacer.refund`).

A reply from the provider that matches a pushback rule (codes and/or an RE2 pattern; RE2 runs
in linear time, so no pattern can stall a worker) is counted in Redis across all workers of all
groups (``scripts/provider_pushback.lua``); a rule that fires writes its effect where every
permit call reads it, so it reaches every worker at its next permit (within one rate period, a
second at most while waiting: waits are capped at :data:`MAX_WAIT_STEP`).

Keys (all under one Redis Cluster hash tag per provider, in the provider's Redis):
``sendgroups:provider:{<id>}:tat|leases|rules|shares|demand|fired|group:<group>|matches:<rule>``,
``<id>`` = ``csp/<name>`` or ``sp/<namespace>/<name>``.

The operator gives the worker its provider's parameters as JSON in ``SENDGROUP_PROVIDER``
(:class:`ProviderConfig`, built by the operator from the provider's spec) and the provider's
Redis URL in ``PROVIDER_REDIS_URL``: the provider's ``spec.redis``, else the operator's default
Redis, always set by the operator so that every group of the provider, whatever its own Redis,
shares one budget (a worker run by hand without it uses ``REDIS_URL``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import socket
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

import re2
from pydantic import BaseModel, ConfigDict, Field, field_validator

from sendgroup_contract.keys import provider_key
from sendgroup_worker.patterns import re2_problem, search
from sendgroup_worker.ratelimit import RatePolicy, load_script
from sendgroup_worker.redisclient import AsyncClient, AsyncScript

#: Longest single sleep while waiting for a permit, seconds: a rule's effect or expiry and a
#: new share reach a waiting worker within this time.
MAX_WAIT_STEP: Final = 0.5

#: A lease outlives the job timeout by this much (seconds) before it expires on its own.
LEASE_MARGIN: Final = 5.0

_CODE: Final = re.compile(r"^\s*([2-5][0-9][0-9])\b")

Action = Literal["suspend", "scale", "cap"]


class PushbackRuleConfig(BaseModel):
    """One pushback rule as the worker applies it (built by the operator from the provider's
    ``spec.pushback.rules[]``). Times in seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1, max_length=63)
    codes: list[int] = Field(default_factory=list)
    pattern: str | None = None
    count: int = Field(1, ge=1)
    window: float = Field(0.0, ge=0)
    action: Action
    value: int = Field(0, ge=0)
    duration: float = Field(gt=0)
    step_percent: int = Field(10, ge=1, le=100)
    every: float = Field(60.0, gt=0)

    @field_validator("pattern")
    @classmethod
    def _re2(cls, value: str | None) -> str | None:
        if value is not None:
            problem = re2_problem(value)
            if problem is not None:
                raise ValueError(f"pattern {value!r} {problem}")
        return value


class ProviderConfig(BaseModel):
    """The worker's view of its provider: ``SENDGROUP_PROVIDER`` as JSON.

    ``id``: ``csp/<name>`` or ``sp/<namespace>/<name>`` (the keys' hash tag); ``group``: this
    group's id in the provider's shares (``<namespace>/<name>``); ``perMinute``/``burst``: the
    provider's budget in recipients (None = no provider-wide rate); ``concurrency``: SMTP
    transactions in flight, all groups together (None = no limit); ``rules``: pushback."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    id: str = Field(min_length=1, max_length=600, pattern=r"^(csp/[^/{}]+|sp/[^/{}]+/[^/{}]+)$")
    group: str = Field(min_length=1, max_length=600)
    per_minute: int | None = Field(None, ge=1, alias="perMinute")
    burst: int | None = Field(None, ge=1)
    concurrency: int | None = Field(None, ge=1)
    rules: list[PushbackRuleConfig] = Field(default_factory=list)

    @property
    def effective_burst(self) -> int:
        """Configured burst, default ``ceil(perMinute / 60)`` (1 without a rate)."""
        if self.burst is not None:
            return self.burst
        return max(1, -(-(self.per_minute or 60) // 60))


@dataclass(frozen=True, slots=True)
class ProviderKeys:
    """Redis keys of one provider, all under the hash tag ``{<id>}``."""

    id: str

    def _key(self, suffix: str) -> str:
        return provider_key(self.id, suffix)

    @property
    def tat(self) -> str:
        """The provider's GCRA state (theoretical arrival time, microseconds)."""
        return self._key("tat")

    @property
    def leases(self) -> str:
        """Concurrency leases: sorted set lane id -> expiry (ms)."""
        return self._key("leases")

    @property
    def rules(self) -> str:
        """Rules in force: hash rule name -> effect (see provider_permit.lua)."""
        return self._key("rules")

    @property
    def shares(self) -> str:
        """Groups' shares: hash group id -> recipients per minute (written by the operator)."""
        return self._key("shares")

    @property
    def demand(self) -> str:
        """Groups' last permit request: hash group id -> unix ms (read by the operator)."""
        return self._key("demand")

    @property
    def fired(self) -> str:
        """Recent rule firings, newest first (read by the operator)."""
        return self._key("fired")

    def group(self, group: str) -> str:
        """One group's GCRA state inside the provider."""
        return self._key(f"group:{group}")

    def matches(self, rule: str) -> str:
        """One rule's matching replies in its window."""
        return self._key(f"matches:{rule}")


@dataclass(frozen=True, slots=True)
class ChargeMarks:
    """The provider's and the group's GCRA values (``"<tat_us> <interval_us>"``, "" = none)
    right after a :meth:`ProviderPacer.charge`: a :meth:`ProviderPacer.refund` gives cells back
    at a level only while its value is still this one."""

    provider: str
    group: str


@dataclass(frozen=True, slots=True)
class Permit:
    """One permit call's answer: ``granted``; ``wait`` seconds before a retry may succeed;
    the provider's effective ``per_minute`` now (None = no rate) and ``concurrency`` (None =
    no limit); ``why`` it was refused: ``""``, ``provider``, ``share``, ``concurrency`` or
    ``suspended:<rule>``."""

    granted: bool
    wait: float
    per_minute: float | None
    concurrency: int | None
    why: str


def reply_code(text: str) -> int | None:
    """The SMTP reply code at the start of ``text`` (``"421 4.7.0 ..."`` -> 421), else None."""
    found = _CODE.match(text)
    return int(found.group(1)) if found else None


class ProviderPacer:
    """Permits from one provider's budget for one group's worker process.

    ``policy`` is the group's own rate (``rate``/``warmup``): it applies inside the provider's
    share. ``lease_seconds``: lifetime of a concurrency lease (job timeout + margin). Redis
    errors propagate (the worker's outage handling retries).
    """

    def __init__(
        self,
        redis: AsyncClient,
        config: ProviderConfig,
        policy: RatePolicy,
        lease_seconds: float,
    ) -> None:
        self.redis = redis
        self.config = config
        self.policy = policy
        self.keys = ProviderKeys(config.id)
        self.lease_ms = max(1000, round(lease_seconds * 1000))
        self._permit = AsyncScript(redis, load_script("provider_permit.lua"))
        self._pushback = AsyncScript(redis, load_script("provider_pushback.lua"))
        self._rules = [(r, re2.compile(r.pattern) if r.pattern else None) for r in config.rules]
        self._owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        #: what the last permit call said
        self.last: Permit | None = None
        #: each lane's last granted permit: the levels' values it left, for :meth:`give_back`
        self._granted: dict[str, ChargeMarks] = {}
        #: held by the one lane of this process that polls the budget after a refusal
        self._turn = asyncio.Lock()

    def lane_id(self, lane: int) -> str:
        """Lease member of one lane of this process (unique across pods and restarts)."""
        return f"{self._owner}:{lane}"

    def _group_limits(self) -> tuple[float, int]:
        rate = self.policy.allowed_per_minute(datetime.now(UTC))
        if rate is None:
            return 0.0, 0
        return max(rate, 1e-6), self.policy.burst_at(rate)

    async def _call(
        self,
        lane: str,
        debt: int,
        mode: str,
        demand: bool = False,
        refund: tuple[int, ChargeMarks] | None = None,
    ) -> tuple[Permit, list[object]]:
        """One permit script call; returns its answer and the reply's elements after the
        fifth (``peek``: the levels' values after the charge; ``refund``: whether each level
        gave the cells back)."""
        g_rate, g_burst = self._group_limits()
        c = self.config
        n, marks = refund if refund is not None else (0, ChargeMarks("", ""))
        reply = await self._permit(
            keys=[
                self.keys.tat,
                self.keys.group(c.group),
                self.keys.leases,
                self.keys.rules,
                self.keys.shares,
                self.keys.demand,
            ],
            args=[
                c.per_minute or 0,
                c.effective_burst,
                c.concurrency or 0,
                c.group,
                repr(g_rate),
                g_burst,
                lane,
                self.lease_ms,
                max(0, debt),
                mode,
                "1" if demand else "0",
                n,
                marks.provider,
                marks.group,
            ],
        )
        granted, wait_us, rate_milli, cap, why = reply[:5]
        why_text = why.decode() if isinstance(why, bytes) else str(why)
        permit = Permit(
            granted=int(granted) == 1,
            wait=int(wait_us) / 1e6,
            per_minute=None if int(rate_milli) < 0 else int(rate_milli) / 1000,
            concurrency=None if int(cap) < 0 else int(cap),
            why=why_text,
        )
        self.last = permit
        return permit, list(reply[5:])

    async def try_take(self, lane: str, debt: int = 0, demand: bool = True) -> Permit:
        """One permit and the lane's lease now, or a refusal with the time to wait.
        ``demand``: the lane has a sign of work (it just sent a mail, or was woken by a job);
        only such calls tell the operator that the group has work (the provider's ``demand``
        hash, :func:`sendgroup_operator.provider_plan.has_work`), so an idle lane's poll
        keeps no share alive."""
        permit, rest = await self._call(lane, debt, "take", demand)
        if permit.granted and len(rest) >= 2:
            self._granted[lane] = ChargeMarks(_text(rest[0]), _text(rest[1]))
        else:
            self._granted.pop(lane, None)
        return permit

    async def charge(self, lane: str, debt: int) -> ChargeMarks:
        """Charge ``debt`` cells (a mail's recipients beyond the one its permit counted) to
        the provider's and the group's rates now, whether or not they are free: the next
        permits of every lane and group wait for them. Takes no permit, leaves the lane's lease
        (the script's ``peek`` mode). Returns the marks :meth:`refund` needs."""
        _, rest = await self._call(lane, debt, "peek")
        return ChargeMarks(_text(rest[0]), _text(rest[1]))

    async def refund(self, cells: int, marks: ChargeMarks) -> tuple[bool, bool]:
        """Give back ``cells`` of a :meth:`charge` (recipients charged, not sent to), at each
        level (provider, group) only if nothing was charged to it since that charge (its
        value still equals the mark); returns whether each level gave them back. Exact
        where it refunds, nothing where it cannot be exact (see provider_permit.lua): a cell
        someone took after the charge was placed behind the charged ones, and moving the
        schedule back under it would let the sum pass rate x window + burst."""
        if cells <= 0:
            return False, False
        _, rest = await self._call("", 0, "refund", refund=(cells, marks))
        return int(_text(rest[0]) or 0) == 1, int(_text(rest[1]) or 0) == 1

    async def take(
        self,
        lane: str,
        stop: asyncio.Event,
        debt: int = 0,
        wait: float = 0.0,
        demand: bool = True,
        hold: asyncio.Lock | None = None,
    ) -> bool:
        """Wait until a permit is granted (True), or ``stop`` is set (False).

        One waiting lane per process polls the budget at a time; the others queue behind it
        (FIFO) and each tries once as soon as the lane before it got its permit. A refused
        call is a script call for nothing: with every refused lane polling, a worker of 12
        lanes sharing a few permits a second made ~17 script calls per mail (bench/providers).
        ``wait``: seconds the refusal that sent the lane here said to wait (slept before the
        first try, if the lane gets its turn at once). ``debt`` is charged once, on the first
        call. Sleeps at most :data:`MAX_WAIT_STEP` at a time, so a new share or rule reaches a
        waiting lane within that. ``hold``: each try is made holding this lock (never a sleep),
        and a grant returns with it still held: the caller releases it once the mail's extra
        recipients are charged (:meth:`charge`), so no other lane of the process takes a
        permit in between."""
        if not await self._wait_turn(stop):
            return False
        try:
            while not stop.is_set():
                if wait > 0:
                    # jitter: the waiting lanes of several processes do not all come back at
                    # the same instant, so the same process does not always win the next cell
                    pause = wait * (1.0 + random.random() * 0.25)
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), min(pause, MAX_WAIT_STEP))
                    if stop.is_set():
                        break
                if hold is not None:
                    await hold.acquire()
                granted = False
                try:
                    permit = await self.try_take(lane, debt, demand)
                    granted = permit.granted
                finally:
                    if hold is not None and not granted:
                        hold.release()
                debt = 0
                if granted:
                    return True
                wait = max(permit.wait, 0.001)
            return False
        finally:
            self._turn.release()

    async def _wait_turn(self, stop: asyncio.Event) -> bool:
        """Wait for this process's polling turn (True), or ``stop`` (False, no turn held)."""
        if not self._turn.locked():
            await self._turn.acquire()  # free: taken at once, no suspension point before
            return True
        acquire = asyncio.ensure_future(self._turn.acquire())
        stopped = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait({acquire, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not acquire.done():
                acquire.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await acquire
        if acquire.cancelled():
            return False
        if stop.is_set():
            self._turn.release()
            return False
        return True

    async def give_back(self, lane: str, debt: int = 0) -> tuple[bool, bool]:
        """Return the lane's last permit, unused (no job was there), and release its lease.
        Like :meth:`refund`, a level takes the cell back only if nothing was taken from it
        since that permit; returns whether each level (provider, group) did."""
        marks = self._granted.pop(lane, ChargeMarks("", ""))
        _, rest = await self._call(lane, debt, "give", refund=(1, marks))
        return int(_text(rest[0]) or 0) == 1, int(_text(rest[1]) or 0) == 1

    async def release(self, lane: str, debt: int = 0) -> None:
        """Release the lane's lease (the lane waits or stops); charges ``debt``."""
        await self._call(lane, debt, "release")

    def matching_rule(self, reply: str) -> PushbackRuleConfig | None:
        """The first rule whose codes and pattern both match ``reply`` (code and text; the
        pattern is searched in its first :data:`~sendgroup_worker.patterns.MAX_REPLY_SEARCHED`
        characters)."""
        code = reply_code(reply)
        for rule, pattern in self._rules:
            if rule.codes and code not in rule.codes:
                continue
            if pattern is not None and not search(pattern, reply):
                continue
            return rule
        return None

    async def record_reply(self, reply: str) -> PushbackRuleConfig | None:
        """Count ``reply`` for the first rule it matches; returns that rule when this reply
        fired it (its effect is then in Redis for every worker), else None."""
        rule = self.matching_rule(reply)
        if rule is None:
            return None
        fired, _, _ = await self._pushback(
            keys=[self.keys.rules, self.keys.matches(rule.name), self.keys.fired],
            args=[
                rule.name,
                rule.count,
                round(rule.window * 1000),
                rule.action,
                rule.value,
                round(rule.duration * 1000),
                rule.step_percent,
                round(rule.every * 1000),
                reply[:512].replace("|", "/"),
                uuid.uuid4().hex,
            ],
        )
        return rule if int(fired) == 1 else None


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def recipients_count(recipients: Sequence[str]) -> int:
    """Recipients a mail counts for in the provider's rate (at least 1)."""
    return max(1, len(recipients))
