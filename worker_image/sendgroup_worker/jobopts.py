"""Per-job options: the payload's own ``maxTries``, ``maxExceptions``, ``backoff``, ``timeout``,
``failOnTimeout`` and ``retryUntil`` win over the group's defaults, as in Laravel's
``Illuminate/Queue/Worker.php`` (``markJobAsFailedIfAlreadyExceedsMaxAttempts``,
``markJobAsFailedIfWillExceedMaxAttempts``, ``calculateBackoff``).

``attempts`` is the number of reservations including the current one (1 on the first try),
as the queue's reserve script counts them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sendgroup_worker.config import WorkerConfig, parse_backoff


def _int_or_none(value: Any) -> int | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if math.isfinite(number) else None


@dataclass(frozen=True, slots=True)
class JobOptions:
    """Effective options of one job. ``max_tries`` 0 = unlimited (Laravel); seconds for
    ``backoff``/``timeout``; ``retry_until`` unix seconds or None."""

    max_tries: int
    max_exceptions: int | None
    backoff: list[float]
    timeout: float
    fail_on_timeout: bool
    retry_until: float | None

    @classmethod
    def of(cls, payload: Mapping[str, Any], config: WorkerConfig) -> JobOptions:
        """Options of ``payload`` over ``config``'s defaults. Unreadable values fall back to
        the default instead of failing the job."""
        max_tries = _int_or_none(payload.get("maxTries"))
        max_exceptions = _int_or_none(payload.get("maxExceptions"))
        try:
            backoff = parse_backoff(payload["backoff"]) if payload.get("backoff") else None
        except (ValueError, TypeError):
            backoff = None
        timeout = _int_or_none(payload.get("timeout"))
        retry_until = _int_or_none(payload.get("retryUntil"))
        return cls(
            max_tries=config.tries if max_tries is None else max(0, max_tries),
            max_exceptions=max_exceptions if max_exceptions and max_exceptions > 0 else None,
            backoff=backoff or list(config.backoff),
            timeout=float(timeout) if timeout and timeout > 0 else config.timeout,
            fail_on_timeout=payload.get("failOnTimeout") is True,
            retry_until=float(retry_until) if retry_until else None,
        )

    def exceeded_before_run(self, attempts: int, now: float) -> bool:
        """Laravel's ``markJobAsFailedIfAlreadyExceedsMaxAttempts``: with ``retryUntil`` only
        time counts; else more attempts than ``maxTries`` (a reservation that expired also
        counted)."""
        if self.retry_until is not None:
            return now > self.retry_until
        return self.max_tries > 0 and attempts > self.max_tries

    def fails_after_temporary(self, attempts: int, now: float) -> bool:
        """Laravel's ``markJobAsFailedIfWillExceedMaxAttempts`` (+ ``maxExceptions``, where
        every earlier attempt is counted as one exception): True when this failure is final."""
        if self.retry_until is not None and self.retry_until <= now:
            return True
        if self.max_exceptions is not None and attempts >= self.max_exceptions:
            return True
        return self.retry_until is None and self.max_tries > 0 and attempts >= self.max_tries

    def backoff_for(self, attempts: int) -> float:
        """Seconds before the next try after attempt ``attempts`` failed: ``backoff[n-1]``,
        the last value repeating."""
        index = max(0, attempts - 1)
        return self.backoff[index] if index < len(self.backoff) else self.backoff[-1]
