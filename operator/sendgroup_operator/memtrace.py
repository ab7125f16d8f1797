"""Opt-in heap snapshots of the operator process: where its bytes per group go (issue 15).

Off unless ``SENDGROUP_TRACEMALLOC=PATH`` is set. Then :func:`install` (called by
``__main__`` with it before kopf starts) installs a SIGUSR2 handler and start-up calls
:func:`begin` once its clients exist, which starts :mod:`tracemalloc` unless
``PYTHONTRACEMALLOC`` already did (``SENDGROUP_TRACEMALLOC_FRAMES`` frames per block, default
10; 0: no tracing, the figures only, pymalloc's among them). Every SIGUSR2 writes, with ``K``
counting the signals from 1:

* ``PATH.K.snap``: :meth:`tracemalloc.Snapshot.dump` (a pickle of every live traced block:
  domain, size in bytes, traceback), read offline by ``python -m bench.memsites``;
* ``PATH.K.json``: the process at that moment (:func:`process_figures`): RSS, what tracemalloc
  traces and what it costs itself, glibc's heap (``mallinfo2``: in use, free inside the heap,
  mmapped), pymalloc's arenas (``sys._debugmallocstats``), object counts by type and asyncio
  tasks by coroutine.

Tracing roughly doubles the memory and slows every allocation: a measuring tool, never on in
production. The signal handler runs on the event loop's thread (CPython runs Python signal
handlers in the main thread), so the loop stalls for the dump (seconds at thousands of
groups); nothing of this runs when the variable is unset.
"""

from __future__ import annotations

import asyncio
import collections
import ctypes
import ctypes.util
import gc
import json
import os
import signal
import sys
import tempfile
import time
import tracemalloc
from types import FrameType
from typing import Any


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (glibc >= 2.33, ``man 3 mallinfo``), all fields in bytes
    except the counts ``ordblks``, ``smblks``, ``hblks``."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",  # non-mmapped space allocated from the system
            "ordblks",  # number of free chunks
            "smblks",  # number of free fastbin blocks
            "hblks",  # number of mmapped regions
            "hblkhd",  # space in mmapped regions
            "usmblks",  # unused
            "fsmblks",  # space in freed fastbin blocks
            "uordblks",  # total allocated (in use) space
            "fordblks",  # total free space
            "keepcost",  # top-most releasable space
        )
    ]


def mallinfo() -> dict[str, int]:
    """glibc's heap figures (bytes) summed over all its arenas; empty when the C library has
    no ``mallinfo2`` (not glibc, or glibc < 2.33)."""
    path = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(path)
        fn = libc.mallinfo2
    except (OSError, AttributeError):
        return {}
    fn.restype = _MallInfo2
    info = fn()
    return {name: int(getattr(info, name)) for name, *_ in _MallInfo2._fields_}


def _pymalloc_stats() -> dict[str, int]:
    """pymalloc's own summary (``sys._debugmallocstats``, written to the C stderr): the
    ``# name = value`` lines and the first ``Total`` line (bytes in arenas), in bytes or
    counts; empty while tracemalloc traces (its hooks replace pymalloc's entry points, and
    CPython then prints nothing)."""
    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    out: dict[str, int] = {}
    for line in text.splitlines():
        if line.startswith("#") and "=" in line:
            name, value = line[1:].rsplit("=", 1)
            digits = value.strip().replace(",", "")
            if digits.isdigit():
                out[name.strip()] = int(digits)
        elif line.startswith("Total") and "=" in line and "Total" not in out:
            out["Total"] = int(line.rsplit("=", 1)[1].strip().replace(",", ""))
    return out


def _status_kib() -> dict[str, int]:
    """``VmRSS``, ``VmHWM``, ``RssAnon`` and ``RssFile`` of this process, KiB
    (``/proc/self/status``)."""
    out: dict[str, int] = {}
    with open("/proc/self/status") as f:
        for line in f:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[name] = int(value.split()[0])
    return out


def process_figures(top_types: int = 60) -> dict[str, Any]:
    """The process now: ``status_kib`` (/proc), ``traced`` / ``traced_peak`` /
    ``tracemalloc_overhead`` (bytes), ``mallinfo`` (:func:`mallinfo`), ``pymalloc``
    (:func:`_pymalloc_stats`), ``objects`` (count of gc-tracked objects), ``types`` (the
    ``top_types`` most numerous gc-tracked types: count) and ``tasks`` (asyncio tasks of the
    running loop by their coroutine's qualified name: count)."""
    traced, peak = tracemalloc.get_traced_memory() if tracemalloc.is_tracing() else (0, 0)
    objects = gc.get_objects()
    types = collections.Counter(type(o).__qualname__ for o in objects)
    tasks: collections.Counter[str] = collections.Counter()
    try:
        for task in asyncio.all_tasks():
            coro = task.get_coro()
            tasks[getattr(coro, "__qualname__", type(coro).__qualname__)] += 1
    except RuntimeError:  # no running loop
        pass
    count = len(objects)
    del objects
    return {
        "at": time.time(),
        "status_kib": _status_kib(),
        "traced": traced,
        "traced_peak": peak,
        "tracemalloc_overhead": tracemalloc.get_tracemalloc_memory(),
        "mallinfo": mallinfo(),
        "pymalloc": _pymalloc_stats(),
        "objects": count,
        "types": dict(types.most_common(top_types)),
        "tasks": dict(tasks.most_common()),
    }


def dump(path: str, index: int) -> None:
    """Write ``path.index.snap`` (when tracing) and ``path.index.json`` (module docstring);
    the JSON is written last, so its presence says the dump is complete."""
    started = time.perf_counter()
    figures = process_figures()
    if tracemalloc.is_tracing():
        tracemalloc.take_snapshot().dump(f"{path}.{index}.snap")
    figures["dump_s"] = time.perf_counter() - started
    tmp = f"{path}.{index}.json.tmp"
    with open(tmp, "w") as f:
        json.dump(figures, f, indent=1)
    os.replace(tmp, f"{path}.{index}.json")


#: (path, frames) once :func:`install` ran with a path, else None
_installed: tuple[str, int] | None = None


def install(path: str, frames: int = 10) -> bool:
    """Install the SIGUSR2 handler that writes to ``path`` (module docstring), unless
    ``path`` is empty; returns whether it did. Tracing itself starts at :func:`begin`
    (``frames`` per block; 0: never, the figures only)."""
    global _installed
    if not path:
        return False
    _installed = (path, frames)
    count = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal count
        count += 1
        dump(path, count)

    signal.signal(signal.SIGUSR2, on_signal)
    return True


def begin() -> bool:
    """Start tracing when :func:`install` ran with frames > 0 and nothing traces yet; returns
    whether tracing is on. Called by start-up once the Kubernetes client's API classes exist:
    importing them (kubernetes 37, pydantic-validated methods) took over five minutes of CPU
    under tracemalloc, 10 frames, before the operator logged a line. What is allocated before
    is not traced: the base, not the bytes per group."""
    if _installed is not None and _installed[1] > 0 and not tracemalloc.is_tracing():
        tracemalloc.start(_installed[1])
    return tracemalloc.is_tracing()
