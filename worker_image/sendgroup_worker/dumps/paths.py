"""Where segments live: ``<dumps-dir>/<escaped queue name>/<segment id>.sgdump``.

Names become paths (security.md, rule 6): the queue name is already restricted by
:func:`sendgroup_worker.queue.keys.validate_queue_name` (no ``/``, no ``..``); on top of that
every character outside ``[A-Za-z0-9._-]`` is percent-encoded (``{mail-x}`` ->
``%7Bmail-x%7D``), so the directory name is portable, reversible and never special.

Symbolic links are never followed (whoever can write the volume could plant one to make a
dump write, or a restore delete, a file outside the tree): a queue directory that is a link or
resolves outside the dumps directory is refused (:class:`UnsafePath`), only regular files count
as segments, and files are opened with ``O_NOFOLLOW`` (:func:`open_read`, :func:`create_new`).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import stat
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

from sendgroup_worker.dumps.format import SUFFIX, SegmentError
from sendgroup_worker.queue.keys import validate_queue_name

_SAFE: Final = re.compile(r"[A-Za-z0-9._-]")
SEGMENT_RE: Final = re.compile(r"^\d{8}T\d{12}Z-[0-9a-f]{8}$")
#: Directories we create: owner full, group read/search (volume shared through fsGroup).
DIR_MODE: Final = 0o750


def safe_dir_name(queue: str) -> str:
    """The directory name for ``queue``'s segments (percent-encoded, never ``.``/``..``)."""
    validate_queue_name(queue)
    name = "".join(c if _SAFE.match(c) else f"%{ord(c):02X}" for c in queue)
    if name.startswith("."):
        name = "%2E" + name[1:]
    return name


class UnsafePath(SegmentError):
    """A path in the dumps tree that is a symbolic link or leads outside the tree."""


def queue_dir(dumps_dir: str | os.PathLike[str], queue: str) -> Path:
    """``<dumps_dir>/<safe_dir_name(queue)>``. Raises :class:`UnsafePath` when it exists as
    anything but a real directory inside ``dumps_dir`` (a symbolic link, a file)."""
    root = Path(dumps_dir)
    directory = root / safe_dir_name(queue)
    try:
        st = directory.lstat()
    except FileNotFoundError:
        return directory
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{directory}: not a plain directory (a symbolic link?): refused")
    if directory.resolve().parent != root.resolve():
        raise UnsafePath(f"{directory}: resolves outside {root}: refused")
    return directory


def create_new(path: Path, mode: int) -> int:
    """A write descriptor of a new file ``path``: whatever was there (a leftover temporary
    file, or a planted link) is unlinked first, then ``O_CREAT | O_EXCL | O_NOFOLLOW``."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)


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
    if not directory.is_dir() or directory.is_symlink():
        return []
    out = [
        p
        for p in directory.iterdir()
        if p.name.endswith(SUFFIX)
        and SEGMENT_RE.match(p.name[: -len(SUFFIX)])
        and stat.S_ISREG(p.lstat().st_mode)  # a symbolic link is never a segment
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
        d.mkdir(mode=DIR_MODE, exist_ok=True)
        fsync_dir(d.parent)
