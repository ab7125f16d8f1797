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
import ctypes
import ctypes.util
import gc
import logging
import time
from collections.abc import Callable
from typing import Any, Final

#: Seconds between two collect-and-freeze rounds.
INTERVAL: Final = 120.0
#: Every this many rounds, unfreeze everything before collecting (30 x 120 s: hourly).
THAW_EVERY: Final = 30
#: Seconds between two :func:`trim` calls (:func:`trim_loop`).
TRIM_INTERVAL: Final = 30.0

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


def freeze_start() -> int:
    """Freeze what the process holds now (``gc.freeze``, no collection first: nothing to pay
    here), for the start: called after the imports and again once the start-up LISTs are
    read. An operator's start allocates for every group at once (kopf's bodies, our entries
    and models), and every full collection meanwhile walked the ~200,000 objects of the
    imported modules again (one full collection of those alone: ~0.1 s, several during a
    1,000-group restart; issue 15). Frozen objects are still freed by reference counting;
    :func:`freeze_loop`'s periodic thaw lets a full collection see them again. Returns the
    number of objects frozen."""
    gc.freeze()
    return gc.get_freeze_count()


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


def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim`` (``man 3 malloc_trim``), or None without glibc."""
    try:
        fn = ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_size_t]
    fn.restype = ctypes.c_int
    return fn


_TRIM = _malloc_trim()


def trim() -> bool:
    """Give the C heap's free pages back to the system (glibc ``malloc_trim(0)``: every
    arena, free pages inside the heap too, not only its top); False when nothing was
    released or there is no glibc.

    Why (issue 15): what CPython allocates above 512 bytes (dict tables of the bodies, the
    JSON text of LIST responses and watch events, pydantic's buffers) comes from glibc's
    malloc, and what a start-up frees there stays in the process. Measured at rest after a
    cold start, 1,000 groups (bench/scale, memtrace figures): glibc held 75 MiB of heap, of
    which 44 MiB free, in a 249 MiB RSS. Pages in use are not touched."""
    return _TRIM is not None and _TRIM(0) == 1


async def trim_loop(interval: float = TRIM_INTERVAL) -> None:
    """:func:`trim` every ``interval`` seconds, until cancelled (a few ms each)."""
    while True:
        await asyncio.sleep(interval)
        trim()
