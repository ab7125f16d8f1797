"""The one measurement of a queue, shared by the operator (reaper, status, metrics) and the
worker's ``sendgroup-worker stats``: the Lua script ``measure.lua`` (one atomic round trip),
its KEYS, and the parser of its reply into a :class:`QueueMeasure`.

No Redis client here: the operator's ``queueio`` and the worker's queue client each run
:data:`SCRIPT` with :func:`script_keys` through their own client and hand the raw reply to
:func:`parse_reply`. "Empty" and "unchanged" always mean ready + delayed + reserved
(:attr:`QueueMeasure.total`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any, Final

from sendgroup_contract.keys import QueueKeys
from sendgroup_contract.timestamps import parse_pushed_at

#: The script's Lua source (``measure.lua`` next to this module).
SCRIPT: Final = (resources.files("sendgroup_contract") / "measure.lua").read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class QueueMeasure:
    """One atomic measurement of a queue (counts in jobs; times in unix seconds).

    * ``ready``/``delayed``/``reserved``: the three live structures; ``failed``: records in the
      failed structure now (not part of :attr:`total`);
    * ``delivered``, ``failed_total``, ``released``: the workers' counters since the group
      began (hash ``stats``);
    * ``oldest_pushed_at``: ``pushedAt`` of the ready list's head, None when the list is empty
      or the head has none (plain Laravel payloads);
    * ``measured_at``: Redis' clock (TIME) at the measurement, or the caller's ``now``;
    * ``staging``: how many of the dump's staging keys exist; ``purge_requested``: the purge
      marker is set; ``busy``: a dump/restore/purge holds the queue's lock or a restore's
      progress record exists (the command is mid-way); ``paused``: the group's pause marker is
      set (workers reserve nothing while it is);
    * ``suspended_seconds``: how long the workers' backpressure suspension still lasts.

    Every field has a default so the planner's tests can build one from a few counts.
    """

    ready: int = 0
    delayed: int = 0
    reserved: int = 0
    failed: int = 0
    delivered: int = 0
    failed_total: int = 0
    released: int = 0
    oldest_pushed_at: float | None = None
    measured_at: float | None = None
    staging: int = 0
    purge_requested: bool = False
    suspended_seconds: float = 0.0
    busy: bool = False
    paused: bool = False

    @property
    def total(self) -> int:
        """ready + delayed + reserved: what "empty" and "unchanged" mean."""
        return self.ready + self.delayed + self.reserved

    @property
    def oldest_job_age_seconds(self) -> float | None:
        """``measured_at - oldest_pushed_at`` (never negative), None when either is unknown."""
        if self.oldest_pushed_at is None or self.measured_at is None:
            return None
        return max(0.0, self.measured_at - self.oldest_pushed_at)


def script_keys(keys: QueueKeys) -> tuple[str, ...]:
    """KEYS of :data:`SCRIPT` for one queue, in the order the script reads them."""
    return (
        keys.ready,
        keys.delayed,
        keys.reserved,
        keys.failed,
        keys.stats,
        keys.purge_requested,
        keys.lock,
        keys.restored,
        keys.backpressure,
        keys.paused,
        *keys.staging_keys,
    )


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("ascii", "replace")
    return "" if value is None else str(value)


def parse_reply(reply: Sequence[Any], now: float | None = None) -> QueueMeasure:
    """:class:`QueueMeasure` from the reply of :data:`SCRIPT` (bytes or str items, as the
    client returns them). ``now`` (unix seconds) replaces Redis' clock as ``measured_at``; the
    suspension is always timed on Redis' clock, which is the one the workers write with.

    Raises ValueError when the reply does not have the script's 15 items.
    """
    if len(reply) != 15:
        raise ValueError(f"measure reply has {len(reply)} items, expected 15")
    server_ms = _int(reply[8]) * 1000 + _int(reply[9]) // 1000
    until_ms = _int(_text(reply[13]) or 0)
    return QueueMeasure(
        ready=_int(reply[0]),
        delayed=_int(reply[1]),
        reserved=_int(reply[2]),
        failed=_int(reply[3]),
        oldest_pushed_at=parse_pushed_at(_text(reply[4]) or None),
        delivered=_int(reply[5]),
        failed_total=_int(reply[6]),
        released=_int(reply[7]),
        measured_at=now if now is not None else _int(reply[8]) + _int(reply[9]) / 1e6,
        staging=_int(reply[10]),
        purge_requested=bool(_int(reply[11])),
        busy=bool(_int(reply[12])),
        suspended_seconds=max(0.0, (until_ms - server_ms) / 1000),
        paused=bool(_int(reply[14])),
    )
