"""Layering: the pure modules never import kopf, kubernetes or redis (directly or through
another module of ours)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "operator" / "sendgroup_operator"
PURE = (
    "plan",
    "builders",
    "builders_laravel",
    "conditions",
    "fairshare",
    "durations",
    "models",
    "settings",
)
FORBIDDEN = ("kopf", "kubernetes", "redis", "aiohttp")


def _imports(module: str) -> set[str]:
    """Imports of a module, or of every file of a package (``plan/``)."""
    path = PKG / module
    files = sorted(path.glob("*.py")) if path.is_dir() else [PKG / f"{module}.py"]
    names: set[str] = set()
    for file in files:
        names |= _file_imports(file)
    return names


def _file_imports(file: Path) -> set[str]:
    tree = ast.parse(file.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "sendgroup_operator":
                names.update(f"sendgroup_operator.{a.name}" for a in node.names)
    return names


def test_pure_modules_import_no_clients() -> None:
    for module in PURE:
        seen: set[str] = set()
        todo = [module]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            for name in _imports(current):
                top = name.split(".")[0]
                assert top not in FORBIDDEN, f"{current}.py imports {name}"
                if name.startswith("sendgroup_operator."):
                    sub = name.split(".")[1]
                    assert sub in PURE, f"pure {current}.py imports impure {name}"
                    todo.append(sub)
