"""The global worker cap ``maxTotalWorkers``, shared fairly across groups with work.

Max-min fairness by water-filling (Bertsekas & Gallager, "Data Networks", 6.5.2): raise a
common level until the cap is used up; a group asking less than the level gets what it asks,
the others get the level. Integer workers: the level is floored and the remainder goes one
worker at a time to the unsatisfied groups in key order, so the result is deterministic.
Every group that asks for at least one worker gets one as long as the cap allows it (when
there are more such groups than the cap, the first ``cap`` in key order get one each).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def allocate(requests: Mapping[K, int], cap: int | None) -> dict[K, int]:
    """Workers allowed per group: ``requests`` (workers wanted, >= 0) under ``cap`` (None =
    no cap). Keys must be sortable (``"namespace/name"`` strings).

    The result never exceeds a request, sums to ``min(cap, sum(requests))``, and is max-min
    fair. Raises ``ValueError`` for a negative request or cap.
    """
    if any(r < 0 for r in requests.values()):
        raise ValueError("worker requests must be >= 0")
    allowed: dict[K, int] = {k: 0 for k in requests}
    wanting = sorted((k for k, r in requests.items() if r > 0), key=str)
    if cap is None or sum(requests[k] for k in wanting) <= cap:
        return {k: requests[k] for k in requests}
    if cap < 0:
        raise ValueError("cap must be >= 0")
    remaining = cap
    while wanting and remaining > 0:
        level = remaining // len(wanting)
        if level == 0:
            for k in wanting[:remaining]:
                allowed[k] += 1
            break
        satisfied = [k for k in wanting if requests[k] - allowed[k] <= level]
        if satisfied:
            for k in satisfied:
                remaining -= requests[k] - allowed[k]
                allowed[k] = requests[k]
            wanting = [k for k in wanting if k not in satisfied]
            continue
        for k in wanting:
            allowed[k] += level
        remaining -= level * len(wanting)
    return allowed
