"""Read the Laravel Redis queue fixtures (``tests/data/laravel-redis-queue``) and
write their byte-exact Redis snapshots into a real Redis.

The directory can be moved with ``SENDGROUP_LARAVEL_FIXTURES``; a missing directory is an error
(tests fail saying where they looked), never a silent skip.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import Any

import redis

#: Byte-exact Redis state written by Laravel 11 / Horizon 5 (copied from the design's shared
#: fixtures, with their README); ``SENDGROUP_LARAVEL_FIXTURES`` points elsewhere.
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "data" / "laravel-redis-queue"


def fixtures_dir() -> Path:
    """The fixture directory; raises FileNotFoundError naming the path when absent."""
    d = Path(os.environ.get("SENDGROUP_LARAVEL_FIXTURES", str(DEFAULT_DIR)))
    if not (d / "README.md").is_file():
        raise FileNotFoundError(
            f"Laravel fixtures not found in {d}: set SENDGROUP_LARAVEL_FIXTURES to the "
            "laravel-redis-queue fixture directory"
        )
    return d


@cache
def load(name: str) -> dict[str, Any]:
    """Parsed fixture file ``name`` (e.g. ``"06-migration.json"``)."""
    return json.loads((fixtures_dir() / name).read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def raw(entry: dict[str, Any]) -> bytes:
    """The exact bytes of a ``{"raw", "bytes", "sha256"}`` value (checked against ``bytes``)."""
    data = entry["raw"].encode("utf-8")
    assert len(data) == entry["bytes"], "fixture value does not round-trip"
    return data


def write_state(client: redis.Redis, state: dict[str, Any]) -> None:
    """Recreate a fixture ``state`` snapshot in ``client``'s database, byte for byte."""
    for key, spec in state["keys"].items():
        client.delete(key)
        if spec["type"] == "list":
            items = [raw(e) for e in spec["LRANGE_0_-1"]]
            if items:
                client.rpush(key, *items)
        elif spec["type"] == "zset":
            for e in spec["ZRANGE_0_-1_WITHSCORES"]:
                client.zadd(key, {raw(e["member"]): float(e["score"])})
        else:  # pragma: no cover - the fixtures only hold lists and sorted sets
            raise ValueError(f"unsupported fixture key type {spec['type']}")


def list_items(state: dict[str, Any], key: str) -> list[bytes]:
    """The items of list ``key`` in a snapshot ([] when the key does not exist)."""
    spec = state["keys"].get(key)
    return [] if spec is None else [raw(e) for e in spec["LRANGE_0_-1"]]


def zset_items(state: dict[str, Any], key: str) -> list[tuple[bytes, float]]:
    """(member, score) pairs of sorted set ``key`` in a snapshot."""
    spec = state["keys"].get(key)
    if spec is None:
        return []
    return [(raw(e["member"]), float(e["score"])) for e in spec["ZRANGE_0_-1_WITHSCORES"]]


def prefix_of(scenario: dict[str, Any]) -> str:
    """The key prefix of a scenario (``redis_prefix`` None means no prefix)."""
    return scenario.get("redis_prefix") or ""
