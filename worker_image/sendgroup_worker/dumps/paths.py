"""Where segments live: ``<dumps-dir>/<escaped queue name>/<segment id>.sgdump``.

Names become paths (security.md, rule 6): the queue name is already restricted by
:func:`sendgroup_worker.queue.keys.validate_queue_name` (no ``/``, no ``..``); on top of that
every character outside ``[A-Za-z0-9._-]`` is percent-encoded (``{mail-x}`` ->
``%7Bmail-x%7D``), so the directory name is portable, reversible and never special.
"""

from __future__ import annotations

import os
import re
import secrets
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from sendgroup_worker.dumps.format import SUFFIX
from sendgroup_worker.queue.keys import validate_queue_name

_SAFE: Final = re.compile(r"[A-Za-z0-9._-]")
SEGMENT_RE: Final = re.compile(r"^\d{8}T\d{12}Z-[0-9a-f]{8}$")


def safe_dir_name(queue: str) -> str:
    """The directory name for ``queue``'s segments (percent-encoded, never ``.``/``..``)."""
    validate_queue_name(queue)
    name = "".join(c if _SAFE.match(c) else f"%{ord(c):02X}" for c in queue)
    if name.startswith("."):
        name = "%2E" + name[1:]
    return name


def queue_dir(dumps_dir: str | os.PathLike[str], queue: str) -> Path:
    """``<dumps_dir>/<safe_dir_name(queue)>``."""
    return Path(dumps_dir) / safe_dir_name(queue)


def new_segment_id(now: datetime | None = None) -> str:
    """``YYYYMMDDTHHMMSSffffffZ-<8 hex>``: sorts by creation time, unique by the random part."""
    now = now or datetime.now(UTC)
    return f"{now.strftime('%Y%m%dT%H%M%S%f')}Z-{secrets.token_hex(4)}"


def segment_path(directory: Path, segment: str) -> Path:
    """Final path of segment ``segment`` in ``directory``; refuses ids that are not ours."""
    if not SEGMENT_RE.match(segment):
        raise ValueError(f"not a segment id: {segment!r}")
    return directory / f"{segment}{SUFFIX}"


def temp_path(directory: Path, segment: str) -> Path:
    """Temporary path the segment is written to before its rename (hidden, ``.tmp``)."""
    return directory / f".{segment}{SUFFIX}.tmp"


def list_segments(directory: Path) -> list[Path]:
    """Finished segments in ``directory``, oldest first (ids sort by creation time)."""
    if not directory.is_dir():
        return []
    out = [
        p
        for p in directory.iterdir()
        if p.name.endswith(SUFFIX) and SEGMENT_RE.match(p.name[: -len(SUFFIX)]) and p.is_file()
    ]
    return sorted(out, key=lambda p: p.name)


def fsync_dir(directory: Path) -> None:
    """fsync a directory so a rename/unlink/mkdir in it survives a power loss."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def ensure_dir(directory: Path) -> None:
    """Create ``directory`` (and parents), fsyncing each parent whose entries changed."""
    missing: list[Path] = []
    p = directory
    while not p.exists():
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        d.mkdir(exist_ok=True)
        fsync_dir(d.parent)
