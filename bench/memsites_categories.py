"""``python -m bench.memsites_categories A.snap:N_A [B.snap:N_B]``: the operator's traced heap
per group by owner category (issue 15; the table of bench/results/2026-12-04-mem/note.md).

bench.memsites' owners, with kopf's and ours split by what holds the bytes: kopf's body copies
(JSON decoded under a kopf frame), its daemon machinery; our parsed models, the planner's status
copy, ``group_entry``. The categories name the allocation sites of the 2026-12-04 tree; another
tree's lines land in ``ours: <file>``. Prints a markdown table: bytes per group of each
snapshot and, with two, per added group.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

from bench.memsites import Frame, load, owner_of

#: (file suffix, lines or None for any) -> category, for our own deciding frames
OURS: tuple[tuple[str, tuple[int, ...] | None, str], ...] = (
    ("reconcile.py", (307, 175), "ours: parsed status+spec models (Runtime.parse)"),
    ("models.py", None, "ours: planner's status copy (models.clone)"),
    ("provider_handlers.py", None, "ours: group_entry (spec model, dicts, specKey)"),
    ("reconcile.py", (890,), "ours: written status (Runtime.written, deep copy)"),
    ("handlers.py", None, "ours: handlers (daemon sleep tasks, names)"),
)


def category(frames: tuple[Frame, ...]) -> str:
    """The category of one traced block (module docstring)."""
    files = [f for f, _ in frames]
    if files and "json/decoder.py" in files[0] and any("/kopf/" in f for f in files):
        return "kopf: body copies (JSON of watch events and LISTs)"
    if files and "sslproto.py" in files[0]:
        return "aiohttp: TLS buffers (256 KiB per connection)"
    if any("/aiohttp/" in f for f in files):
        return "aiohttp: other"
    owner, (path, line) = owner_of(frames)
    if owner == "ours":
        for suffix, lines, name in OURS:
            if path.endswith(suffix) and (lines is None or line in lines):
                return name
        return f"ours: {path.rsplit('/', 1)[-1]}"
    if owner == "kopf":
        if "aioenums" in path:
            return "kopf: daemon stop flag + stopped.wait tasks (aioenums)"
        if "running.py" in path:
            return "kopf: tasks at loop level (running.py)"
        return "kopf: daemon/processing (invocation, execution, cause, logger, patch, memory)"
    return owner


def main(argv: list[str]) -> int:
    runs: list[tuple[str, int, collections.Counter[str]]] = []
    for arg in argv:
        path, _, n = arg.rpartition(":")
        counts: collections.Counter[str] = collections.Counter()
        for _domain, size, frames, _n in load(Path(path)):
            counts[category(frames)] += size
        runs.append((Path(path).name, int(n), counts))
    names = set().union(*(c for _, _, c in runs))
    order = sorted(names, key=lambda k: -max(c.get(k, 0) / n for _, n, c in runs))
    two = len(runs) == 2
    head = [f"{name} B/group" for name, _, _ in runs] + (["per added group"] if two else [])
    print("| category | " + " | ".join(head) + " |")
    print("|---|" + "---|" * len(head))
    for k in order:
        cells = [f"{c.get(k, 0) / n:,.0f}" for _, n, c in runs]
        if two:
            (_, n1, c1), (_, n2, c2) = runs
            cells.append(f"{(c2.get(k, 0) - c1.get(k, 0)) / (n2 - n1):,.0f}")
        print(f"| {k} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
