"""The test tree stays collectable as one run: the tiers are plain folders (no packages), so
pytest imports each test module by its basename and refuses a second file of the same name in
another tier (a collection error that fails the whole run)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_every_test_module_basename_is_unique_across_tiers() -> None:
    seen: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        seen[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert clashes == {}, f"rename one of each: {clashes}"
