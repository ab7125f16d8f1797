"""``python -m bench.memsites A.snap:N_A [B.snap:N_B] [--top K]``: the operator's traced heap
per group, by owner and allocation site (issue 15).

Reads heap snapshots the operator wrote (``SENDGROUP_TRACEMALLOC``,
``sendgroup_operator.memtrace``; ``bench/scale --env SENDGROUP_TRACEMALLOC=PATH`` takes one at
the end of its rest window) of runs holding ``N_A`` and ``N_B`` groups. With two, every figure
is the difference B - A divided by ``N_B - N_A``: bytes per *additional* group, the base (code,
imports, one-off caches) cancelled; with one, the snapshot divided by ``N_A``.

Owner of a block: the most recent frame of its traceback that lies in a package named in
:data:`OWNERS` (so a dict the JSON decoder built for kopf's watch stream is kopf's, a task our
handler created is ours); frames of the standard library, pydantic and the like are passed over
to their caller. tracemalloc records where a block was allocated, not who holds it now: a body
kopf parsed and our code keeps a reference to counts as kopf's.

Prints markdown: bytes per group by owner, then the top sites (owner frame and innermost
frame) and the top tracebacks.
"""

from __future__ import annotations

import argparse
import collections
import pickle
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final, TypeVar

K = TypeVar("K")

#: (path fragment, owner); the first match of the most recent deciding frame wins
OWNERS: Final[tuple[tuple[str, str], ...]] = (
    ("/sendgroup_operator/", "ours"),
    ("/sendgroup_worker/", "ours (worker package)"),
    ("/sendgroup_contract/", "ours (contract)"),
    ("/kopf/", "kopf"),
    ("/prometheus_client/", "prometheus_client"),
    ("/kubernetes/", "kubernetes client"),
    ("/urllib3/", "kubernetes client (urllib3)"),
    ("/redis/", "redis-py"),
    ("/aiohttp/", "aiohttp"),
)

Frame = tuple[str, int]
#: one traced block as tracemalloc stores it: (domain, size, frames most recent first, nframe)
Trace = tuple[int, int, tuple[Frame, ...], int]


def load(path: Path) -> list[Trace]:
    """The raw traces of a :meth:`tracemalloc.Snapshot.dump` file."""
    with path.open("rb") as f:
        snap = pickle.load(f)
    traces: list[Trace] = snap.traces._traces
    return traces


def owner_of(frames: tuple[Frame, ...]) -> tuple[str, Frame]:
    """The owner of a block (module docstring) and its deciding frame; ``other`` and the
    innermost frame when no frame matches."""
    for frame in frames:
        for fragment, owner in OWNERS:
            if fragment in frame[0]:
                return owner, frame
    return "other", frames[0] if frames else ("?", 0)


def _short(frame: Frame) -> str:
    path, line = frame
    for cut in ("site-packages/", "/operator/", "/worker_image/", "/contract/", "python3.11/"):
        if cut in path:
            path = path.split(cut, 1)[1]
            break
    return f"{path}:{line}"


def aggregate(
    traces: Iterable[Trace],
) -> tuple[
    collections.Counter[str],
    collections.Counter[tuple[str, Frame, Frame]],
    collections.Counter[tuple[Frame, ...]],
    collections.Counter[str],
]:
    """Bytes by owner, by (owner, deciding frame, innermost frame), by whole traceback, and
    block counts by owner."""
    by_owner: collections.Counter[str] = collections.Counter()
    blocks: collections.Counter[str] = collections.Counter()
    by_site: collections.Counter[tuple[str, Frame, Frame]] = collections.Counter()
    by_tb: collections.Counter[tuple[Frame, ...]] = collections.Counter()
    for _domain, size, frames, _n in traces:
        by_tb[frames] += size
    for frames, size in by_tb.items():
        owner, frame = owner_of(frames)
        by_owner[owner] += size
        by_site[(owner, frame, frames[0] if frames else ("?", 0))] += size
    for _domain, _size, frames, _n in traces:
        blocks[owner_of(frames)[0]] += 1
    return by_owner, by_site, by_tb, blocks


def _minus(b: Mapping[K, int], a: Mapping[K, int]) -> dict[K, int]:
    return {k: b.get(k, 0) - a.get(k, 0) for k in set(a) | set(b)}


def report(snaps: list[tuple[Path, int]], top: int = 30) -> str:
    """The markdown report of one snapshot, or of the difference of two (module docstring)."""
    aggs = [aggregate(load(path)) for path, _ in snaps]
    if len(snaps) == 2:
        groups = snaps[1][1] - snaps[0][1]
        owner, site, tb, blocks = (_minus(b, a) for a, b in zip(aggs[0], aggs[1], strict=True))
        what = f"{snaps[1][0].name} ({snaps[1][1]}) - {snaps[0][0].name} ({snaps[0][1]})"
    else:
        groups = snaps[0][1]
        owner, site, tb, blocks = (dict(c) for c in aggs[0])
        what = f"{snaps[0][0].name} ({groups} groups, base included)"
    total = sum(owner.values())
    lines = [
        f"# Traced heap per group: {what}",
        "",
        f"{total / groups:,.0f} bytes per group traced ({total / 2**20:,.1f} MiB).",
        "",
        "| owner | bytes per group | blocks per group |",
        "|---|---|---|",
        *(
            f"| {o} | {v / groups:,.0f} | {blocks.get(o, 0) / groups:,.1f} |"
            for o, v in sorted(owner.items(), key=lambda kv: -kv[1])
            if abs(v) / groups >= 1
        ),
        "",
        f"## Top {top} sites (owner's frame; innermost frame)",
        "",
        "| bytes per group | owner | owner's frame | innermost |",
        "|---|---|---|---|",
        *(
            f"| {v / groups:,.0f} | {o} | {_short(f)} | {_short(inner)} |"
            for (o, f, inner), v in sorted(site.items(), key=lambda kv: -kv[1])[:top]
        ),
        "",
        f"## Top {top // 2} tracebacks (most recent frame first)",
        "",
    ]
    for frames, v in sorted(tb.items(), key=lambda kv: -kv[1])[: top // 2]:
        lines.append(f"- {v / groups:,.0f} B/group: " + " <- ".join(_short(f) for f in frames))
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.memsites", description=__doc__.split("\n\n")[0])
    parser.add_argument("snapshots", nargs="+", help="PATH.snap:GROUPS (one or two)")
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args(argv)
    snaps = []
    for arg in args.snapshots:
        path, _, n = arg.rpartition(":")
        snaps.append((Path(path), int(n)))
    if len(snaps) not in (1, 2):
        parser.error("one or two snapshots")
    sys.stdout.write(report(snaps, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
