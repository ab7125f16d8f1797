"""The operator's opt-in heap snapshots (memtrace.py, issue 15): off without
``SENDGROUP_TRACEMALLOC``; with it, SIGUSR2 writes a snapshot whose biggest site is the one
that allocated most, and the process figures beside it."""

from __future__ import annotations

import json
import os
import signal
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench import memsites
from sendgroup_operator import memtrace


@pytest.fixture
def restore() -> Iterator[None]:
    before = signal.getsignal(signal.SIGUSR2)
    tracing = tracemalloc.is_tracing()
    yield
    signal.signal(signal.SIGUSR2, before)
    if not tracing:
        tracemalloc.stop()


def test_off_without_the_variable(restore: None) -> None:
    before = signal.getsignal(signal.SIGUSR2)
    assert memtrace.install("") is False
    assert signal.getsignal(signal.SIGUSR2) is before


def _allocate(n: int) -> list[dict[str, str]]:
    return [{"body": f"group-{i}" * 4} for i in range(n)]


def test_sigusr2_writes_a_snapshot_and_figures(restore: None, tmp_path: Path) -> None:
    path = tmp_path / "heap"
    assert memtrace.install(str(path)) is True
    assert memtrace.begin() is True
    kept = _allocate(20_000)
    os.kill(os.getpid(), signal.SIGUSR2)  # the handler runs before the next bytecode
    figures = json.loads((tmp_path / "heap.1.json").read_text())
    assert figures["status_kib"]["VmRSS"] > 0
    assert figures["traced"] > 20_000 * 100
    assert figures["objects"] > 0 and figures["types"]
    # the offline reader names this test's allocating line as the biggest site
    report = memsites.report([(tmp_path / "heap.1.snap", 20_000)], top=3)
    site = next(line for line in report.splitlines() if line.startswith("| ") and "py:" in line)
    assert "test_memtrace.py" in site, report
    assert len(kept) == 20_000


def test_figures_only_without_frames(restore: None, tmp_path: Path) -> None:
    """``SENDGROUP_TRACEMALLOC_FRAMES=0``: no tracing, the figures only (pymalloc's arenas
    among them, which CPython reports only while nothing traces)."""
    if tracemalloc.is_tracing():
        pytest.skip("tracemalloc already on (PYTHONTRACEMALLOC)")
    path = tmp_path / "heap"
    memtrace.install(str(path), frames=0)
    assert memtrace.begin() is False
    os.kill(os.getpid(), signal.SIGUSR2)
    figures = json.loads((tmp_path / "heap.1.json").read_text())
    assert figures["pymalloc"]["arenas allocated current"] > 0
    assert not (tmp_path / "heap.1.snap").exists()
