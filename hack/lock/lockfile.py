"""Pick the part of ``requirements.lock`` one install needs (standard library only: it runs in
image build stages on a bare base image, before anything is installed).

``requirements.lock`` (written by ``hack/lock/update``: ``uv pip compile --universal
--generate-hashes`` of ``pyproject.toml`` with every extra, plus the build backend) pins every
package of every extra with the sha256 of each of its files, and says in ``# via`` comments which
package needs which. An image needs only part of it: the worker the project's dependencies, the
operator those and the ``operator`` extra. This script walks the ``# via`` graph from those roots
and prints the pinned entries (hashes included) for ``pip install --require-hashes --no-deps -r``,
which every pip since 8 understands (pip before 24 ignores hashes in constraint files, so a
constraints-based subset would not be checked on Debian bookworm's pip 23).

    python3 hack/lock/lockfile.py select [--extra NAME]... [--build] [--no-markers] LOCK PYPROJECT

``--build`` adds the build backend (``[build-system] requires``: setuptools, wheel), for
``pip install --no-build-isolation`` of the project. ``--no-markers`` drops environment markers
(``; python_full_version < '3.11.3'``) and the entries only Windows needs, for downloading a
wheelhouse on a host whose Python differs from the image's. Exit 1 with a message naming the
package when a root is not in the lock (the lock is stale: run ``hack/lock/update``).
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")


def normalize(name: str) -> str:
    """PEP 503 name: ``Types_PyYAML`` -> ``types-pyyaml``."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class Entry:
    """One pinned package of the lock: its text (requirement line and ``--hash`` lines), its
    marker (``""`` when none) and the packages it is needed by (normalized names; ``-r``
    inputs such as ``pyproject.toml`` appear as they are written)."""

    name: str
    lines: list[str]
    marker: str = ""
    via: set[str] = field(default_factory=set)


def parse(text: str) -> dict[str, Entry]:
    """The lock's entries by normalized name."""
    entries: dict[str, Entry] = {}
    current: Entry | None = None
    in_via = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line or (line.startswith("#") and current is None):
            continue
        if not line.startswith((" ", "#")):
            match = _NAME.match(line)
            if match is None:
                raise SystemExit(f"lockfile: cannot read line {line!r}")
            requirement = line.rstrip("\\").strip()
            marker = requirement.split(";", 1)[1].strip() if ";" in requirement else ""
            current = Entry(normalize(match.group(0)), [line], marker)
            entries[current.name] = current
            in_via = False
            continue
        assert current is not None
        stripped = line.strip()
        if stripped.startswith("--hash="):
            current.lines.append(line)
        elif stripped.startswith("# via"):
            rest = stripped[len("# via") :].strip()
            in_via = True
            if rest:
                current.via.add(_via_name(rest))
        elif stripped.startswith("#") and in_via:
            current.via.add(_via_name(stripped[1:].strip()))
    return entries


def _via_name(text: str) -> str:
    """``sendgroup-operator (pyproject.toml)`` -> ``sendgroup-operator``; ``-r x.in`` kept."""
    return text if text.startswith("-r") else normalize(text.split()[0])


def roots(pyproject: Path, extras: list[str], build: bool) -> list[str]:
    """Normalized names the install asks for directly."""
    data = tomllib.loads(pyproject.read_text())
    project = data["project"]
    wanted = list(project["dependencies"])
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    if build:
        wanted += data["build-system"]["requires"]
    names = []
    for requirement in wanted:
        match = _NAME.match(requirement)
        assert match is not None, requirement
        names.append(normalize(match.group(0)))
    return names


def select(entries: dict[str, Entry], wanted: list[str]) -> list[Entry]:
    """The entries of ``wanted`` and everything they need, in the lock's order."""
    children: dict[str, set[str]] = {}
    for entry in entries.values():
        for parent in entry.via:
            children.setdefault(parent, set()).add(entry.name)
    missing = [name for name in wanted if name not in entries]
    if missing:
        raise SystemExit(
            f"lockfile: {', '.join(missing)} not in the lock: it is stale, run hack/lock/update"
        )
    seen: set[str] = set()
    todo = list(wanted)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(children.get(name, ()))
    return [entry for entry in entries.values() if entry.name in seen]


def render(chosen: list[Entry], markers: bool) -> str:
    out: list[str] = []
    for entry in chosen:
        lines = list(entry.lines)
        if not markers and entry.marker:
            if "sys_platform == 'win32'" in entry.marker:
                continue
            head = lines[0].split(";", 1)[0].rstrip()
            lines[0] = head + " \\"
        out.extend(lines)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sel = sub.add_parser("select", help="print the pinned entries one install needs")
    sel.add_argument("--extra", action="append", default=[], help="an optional-dependencies key")
    sel.add_argument("--build", action="store_true", help="add the build backend")
    sel.add_argument("--no-markers", action="store_true", help="drop environment markers")
    sel.add_argument("lock", type=Path)
    sel.add_argument("pyproject", type=Path)
    args = parser.parse_args(argv)
    entries = parse(args.lock.read_text())
    chosen = select(entries, roots(args.pyproject, args.extra, args.build))
    sys.stdout.write(render(chosen, markers=not args.no_markers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
