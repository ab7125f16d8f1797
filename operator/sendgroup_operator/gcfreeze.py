"""Keep the long-lived heap out of Python's full garbage collections (issue 15).

Every pass allocates objects that live across its awaits (the observer's batch), so they
reach the oldest generation, and CPython runs a full collection whenever those exceed a
quarter of the objects already there. A full collection walks every tracked object: kopf's
copy of every group's body, our models and books. Measured at rest, 3,000 groups
(bench/scale, ``gc.callbacks``): one full collection every ~15 s, 1.7 s each, ~30 % of the
operator's CPU, and the event loop stalled for those 1.7 s (a wake-up waits behind it).

:func:`freeze_loop` collects and then freezes (``gc.freeze``) what survived, every
:data:`INTERVAL` seconds: frozen objects are never walked again, so a full collection only
walks what was allocated since the last freeze. Reference counting still frees frozen
objects; only a frozen object that later becomes part of an unreachable cycle is not
collected until the next thaw: every :data:`THAW_EVERY` rounds everything is unfrozen
first, so one full collection sees the whole heap again (such garbage lives at most about
an hour).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from typing import Any, Final

#: Seconds between two collect-and-freeze rounds.
INTERVAL: Final = 120.0
#: Every this many rounds, unfreeze everything before collecting (30 x 120 s: hourly).
THAW_EVERY: Final = 30

log = logging.getLogger(__name__)


def freeze_round(thaw: bool) -> tuple[int, float]:
    """One round: (``thaw``: unfreeze everything first,) collect, freeze. Returns the number
    of objects now frozen and the seconds the round took."""
    started = time.perf_counter()
    if thaw:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count(), time.perf_counter() - started


async def freeze_loop(
    interval: float = INTERVAL,
    thaw_every: int = THAW_EVERY,
    logger: logging.Logger | logging.LoggerAdapter[Any] = log,
) -> None:
    """:func:`freeze_round` every ``interval`` seconds, thawing first every ``thaw_every``
    rounds, until cancelled."""
    rounds = 0
    while True:
        await asyncio.sleep(interval)
        rounds += 1
        frozen, took = freeze_round(thaw=rounds % thaw_every == 0)
        logger.debug("gc: %d objects frozen (round %d, %.3f s)", frozen, rounds, took)
