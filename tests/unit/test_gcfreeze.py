"""The collect-and-freeze rounds (issue 15): survivors are frozen, garbage is not, and a thaw
round lets a full collection see (and free) cyclic garbage among what was frozen."""

from __future__ import annotations

import asyncio
import gc
import weakref

from sendgroup_operator import gcfreeze


class _Node:
    def __init__(self) -> None:
        self.other: _Node | None = None


def _cycle() -> weakref.ref[_Node]:
    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_garbage_is_collected_before_the_freeze_and_a_thaw_frees_frozen_cycles() -> None:
    try:
        dead = _cycle()  # garbage already: collected by the round, not frozen
        kept = _Node()
        kept.other = _Node()
        kept.other.other = kept  # alive now, frozen by the round, garbage later
        frozen, _ = gcfreeze.freeze_round(thaw=False)
        assert dead() is None
        assert frozen > 0 and gc.get_freeze_count() == frozen
        later = weakref.ref(kept)
        del kept
        gc.collect()
        assert later() is not None  # frozen: a collection does not walk it
        gcfreeze.freeze_round(thaw=True)
        assert later() is None
    finally:
        gc.unfreeze()


def test_the_loop_freezes_every_interval_and_stops_when_cancelled() -> None:
    async def main() -> int:
        task = asyncio.create_task(gcfreeze.freeze_loop(interval=0.01, thaw_every=2))
        await asyncio.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return gc.get_freeze_count()

    try:
        assert asyncio.run(main()) > 0
    finally:
        gc.unfreeze()


def test_trim_gives_freed_heap_pages_back() -> None:
    """Many C-heap blocks (> 512 bytes: not pymalloc's) allocated and freed: RSS falls after
    :func:`gcfreeze.trim` (glibc keeps the freed pages without it)."""

    def rss_kib() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))

    gcfreeze.trim()
    blocks = [bytearray(1000) for _ in range(100_000)]  # ~100 MB, each a malloc of 1 KB
    keep = blocks[-1]  # the heap's top stays in use: only a trim inside the heap helps
    del blocks
    before = rss_kib()
    assert gcfreeze.trim()
    after = rss_kib()
    assert before - after > 50_000, (before, after)
    assert len(keep) == 1000


def test_the_start_freezes_what_it_holds_without_a_collection() -> None:
    """After the imports and the start-up LISTs, what the process holds is frozen at no cost
    (no collection runs): a full collection during the start walks only what came after."""
    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    gc.callbacks.append(count)
    try:
        held = len(gc.get_objects())
        frozen = gcfreeze.freeze_start()
        assert frozen >= held and gc.get_freeze_count() == frozen
        assert len(gc.get_objects()) < held / 10  # frozen objects are not tracked for walks
        assert collections == []
    finally:
        gc.callbacks.remove(count)
        gc.unfreeze()
