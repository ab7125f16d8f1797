"""kopf's bodies slimmed at its watch stream (slimbodies.py, issue 15): the same values
without ``metadata.managedFields``, far fewer bytes per body kept, and the wrapper really
sits where kopf's queueing reads its events from."""

from __future__ import annotations

import asyncio
import copy
import json
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kopf._cogs.clients import watching
from kopf._core.reactor import queueing

from sendgroup_operator import slimbodies

#: a resting SendGroup as the API server returned it (bench/scale, 2026-12-04), managedFields
#: of its three field managers included
BODY = Path(__file__).resolve().parents[1] / "data" / "bodies" / "sendgroup-idle-at-rest.json"


def _text(i: int) -> str:
    raw = BODY.read_text()
    return raw.replace("g-00003", f"g-{i:05d}").replace("b737e12b", f"{i:08x}")


def test_same_body_without_managed_fields() -> None:
    body = json.loads(_text(1))
    slimmed = slimbodies.slim(copy.deepcopy(body))
    assert "managedFields" in body["metadata"]
    del body["metadata"]["managedFields"]
    assert slimmed == body


def test_keys_and_short_strings_shared_across_bodies() -> None:
    a, b = (slimbodies.slim(json.loads(_text(i))) for i in (1, 2))
    key_a = next(k for k in a["status"] if k == "lastRefresh")
    key_b = next(k for k in b["status"] if k == "lastRefresh")
    assert key_a is key_b
    assert a["status"]["phase"] is b["status"]["phase"]
    assert a["metadata"]["name"] != b["metadata"]["name"]


def _kept_bytes(slimmed: bool, n: int = 500) -> float:
    texts = [_text(i) for i in range(n)]
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [slimbodies.slim(json.loads(t)) if slimmed else json.loads(t) for t in texts]
        return (tracemalloc.get_traced_memory()[0] - before) / len(kept)
    finally:
        tracemalloc.stop()


def test_a_kept_body_costs_under_a_third() -> None:
    """~31 KB as parsed, ~6 KB slimmed (the module docstring's figures)."""
    parsed, slimmed = _kept_bytes(False), _kept_bytes(True)
    assert parsed > 25_000, parsed
    assert slimmed < parsed / 3, (parsed, slimmed)


@pytest.fixture
def fake_stream(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """kopf's own ``infinite_watch`` replaced by one that yields a listing of two bodies
    and kopf's LISTED bookmark (no API server in this tier); the wrapper installed over it."""
    seen: list[dict[str, Any]] = []

    async def infinite_watch(**kwargs: Any) -> AsyncIterator[Any]:
        seen.append(kwargs)
        for i in (1, 2):
            yield {"type": None, "object": json.loads(_text(i))}
        yield watching.Bookmark.LISTED

    monkeypatch.setattr(watching, "infinite_watch", infinite_watch)
    assert slimbodies.install() is True
    assert slimbodies.install() is False  # once
    yield seen
    slimbodies.uninstall()
    assert watching.infinite_watch is infinite_watch


def test_kopf_queueing_reads_slimmed_events(fake_stream: list[dict[str, Any]]) -> None:
    async def read() -> list[Any]:
        # the very lookup kopf's queueing.watcher makes on every watch (re)start
        stream = queueing.watching.infinite_watch(settings=None, resource="r", namespace=None)
        return [event async for event in stream]

    events = asyncio.run(read())
    assert fake_stream == [{"settings": None, "resource": "r", "namespace": None}]
    assert [e["object"]["metadata"]["name"] for e in events[:2]] == ["g-00001", "g-00002"]
    assert all("managedFields" not in e["object"]["metadata"] for e in events[:2])
    assert events[2] is watching.Bookmark.LISTED
