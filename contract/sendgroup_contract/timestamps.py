"""Timestamps carried in queue payloads, dump records and the worker's settings.

* ``pushedAt`` (job payload, Horizon's field): unix seconds, as a JSON string
  (``"1796002801.014"``, what Horizon and our producer write) or a number;
* ``createdAt`` (dump segment header and summary): ISO 8601 in UTC with a ``Z``
  (``2026-11-30T08:00:00.000123Z``);
* ``WARMUP_SINCE`` and other points in time given by people: ISO 8601 or unix seconds.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any, Final

#: Latest ``pushedAt`` accepted (unix seconds, 9999-12-31T23:59:59Z, the last instant a
#: ``datetime`` can hold); later, negative or non-finite values read as "no pushedAt".
MAX_UNIX_SECONDS: Final = 253402300799.0


def parse_pushed_at(value: Any) -> float | None:
    """``pushedAt`` as unix seconds (float): from a number, a numeric string or bytes.
    None when absent, boolean, not a number, not finite, or outside 0 ..
    :data:`MAX_UNIX_SECONDS` (a producer's ``1e20`` made every pass of its group raise)."""
    parsed: float | None = None
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        parsed = float(value)
    else:
        if isinstance(value, bytes):
            value = value.decode("ascii", "replace")
        if isinstance(value, str):
            try:
                parsed = float(value.strip())
            except ValueError:
                return None
    if parsed is None or not math.isfinite(parsed) or not 0 <= parsed <= MAX_UNIX_SECONDS:
        return None
    return parsed


def format_created_at(at: datetime) -> str:
    """``createdAt`` text: ISO 8601 in UTC, microseconds, ``Z`` (sorts as text in time order)."""
    return at.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def parse_created_at(text: str) -> datetime:
    """A ``createdAt``/``creationTimestamp``-style ISO 8601 time as an aware datetime (UTC when
    it carries no zone). Raises ValueError."""
    parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def parse_time(value: str) -> datetime:
    """A point in time from unix seconds (``1796000000``) or ISO 8601 (see
    :func:`parse_created_at`), as an aware UTC datetime. Raises ValueError."""
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        return parse_created_at(text)
    if not math.isfinite(seconds):
        raise ValueError(f"not a point in time: {value!r}")
    return datetime.fromtimestamp(seconds, tz=UTC)
