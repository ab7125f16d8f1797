"""Dump one queue to a new segment file, crash-safely (queue-protocol.md, "Dump and restore").

Steps (each a crash point, see :mod:`faults`):

1. **stage**: one script atomically RENAMEs the live keys (ready, delayed, reserved, failed,
   failed_jobs) to staging names with the same hash tag, drops the notify tokens of the moved
   ready jobs and records the new segment id in the staging meta hash. Producers from now on
   write fresh live keys, which this dump never touches (they are neither lost nor dumped
   twice). If staging already exists, an earlier dump was interrupted: resume it with its
   recorded segment id instead of staging again.
2. **write**: read the staging keys in chunks of ``chunk_jobs`` records (LRANGE / ZRANGE by
   rank, HMGET), stream them to ``.<id>.sgdump.tmp``, fsync, rename to ``<id>.sgdump``, fsync
   the directory. A dump never overwrites an earlier segment (each has a fresh id).
3. **verify**: the counts written must equal the staging keys' sizes.
4. **drop staging**: one UNLINK of the staging keys and the meta hash (freed in Redis'
   background thread). Only now has anything left Redis, and its bytes are durable.

A crash before step 4 leaves the staging keys, so re-running ``dump`` (or ``restore``, which
finishes an interrupted dump first) resumes; a finished segment found under the recorded id is
verified and kept instead of being rewritten.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sendgroup_worker.dumps import faults, paths, scripts
from sendgroup_worker.dumps.format import (
    FORMAT_VERSION,
    FailedEntry,
    SegmentError,
    SegmentHeader,
    SegmentWriter,
    verify_segment,
)
from sendgroup_worker.dumps.lock import QueueLock
from sendgroup_worker.dumps.redisconn import Client, check_slot_rule, redis_version, script
from sendgroup_worker.queue.keys import QueueKeys

#: Records per chunk: small enough that one LRANGE reply or one merge script stays around a
#: millisecond for 1.5 KB payloads, and far below Lua's unpack() limit (8000 values).
DEFAULT_CHUNK_JOBS = 1000
#: Bytes per chunk, whichever limit comes first (bounds one merge script's work).
CHUNK_BYTES = 4 << 20


class DumpError(Exception):
    """The dump cannot proceed safely; nothing was deleted from Redis."""


@dataclass(slots=True)
class DumpResult:
    """Summary of one dump: counts in jobs (``jobs`` = ready + delayed + reserved), ``bytes``
    of the segment file, wall ``seconds``; ``segment`` is None when the queue was empty."""

    queue: str
    ready: int = 0
    delayed: int = 0
    reserved: int = 0
    failed: int = 0
    bytes: int = 0
    seconds: float = 0.0
    segment: str | None = None
    redis_version: str = ""
    resumed: bool = False

    @property
    def jobs(self) -> int:
        return self.ready + self.delayed + self.reserved

    def as_json(self) -> dict[str, Any]:
        return {
            "command": "dump",
            "queue": self.queue,
            "jobs": self.jobs,
            "ready": self.ready,
            "delayed": self.delayed,
            "reserved": self.reserved,
            "failed": self.failed,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "segment": self.segment,
            "redisVersion": self.redis_version,
            "formatVersion": FORMAT_VERSION,
            "resumed": self.resumed,
        }


def _staging(keys: QueueKeys) -> tuple[str, str, str, str, str]:
    return (
        keys.staging("ready"),
        keys.staging("delayed"),
        keys.staging("reserved"),
        keys.staging("failed"),
        keys.staging("failed:jobs"),
    )


def staging_pending(client: Client, keys: QueueKeys) -> bool:
    """True when an interrupted dump left its staging record behind."""
    return bool(client.exists(keys.staging("meta")))


def dump_queue(
    client: Client,
    keys: QueueKeys,
    dumps_dir: str | os.PathLike[str],
    lock: QueueLock,
    *,
    chunk_jobs: int = DEFAULT_CHUNK_JOBS,
    resume_only: bool = False,
) -> DumpResult:
    """Dump ``keys.queue`` into a new segment under ``dumps_dir`` (caller holds ``lock``).

    ``resume_only``: only finish an interrupted dump, never stage the live keys (used by
    restore). Raises :class:`DumpError`, :class:`SegmentError`, ``OSError`` (disk full,
    read-only volume: staging stays, nothing lost), ``LockLost`` or ``redis.RedisError``.
    """
    check_slot_rule(client, keys)
    started = time.monotonic()
    version = redis_version(client)
    result = DumpResult(queue=keys.queue, redis_version=version)
    s_ready, s_delayed, s_reserved, s_failed, s_failed_jobs = _staging(keys)
    meta = keys.staging("meta")

    if resume_only and not staging_pending(client, keys):
        return result
    lock.ensure()
    segment_id = paths.new_segment_id()
    created_at = datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    stage = script(client, scripts.STAGE)
    reply = stage(
        keys=[keys.ready, keys.delayed, keys.reserved, keys.failed, keys.failed_jobs,
              s_ready, s_delayed, s_reserved, s_failed, s_failed_jobs, meta, keys.notify],
        args=[segment_id, created_at],
    )  # fmt: skip
    status = int(reply[0])
    if status == 0:
        result.seconds = time.monotonic() - started
        return result
    segment_id, created_at = _text(reply[1]), _text(reply[2])
    result.resumed = status == 2
    faults.checkpoint("dump:after-stage")

    expected = {
        "ready": int(client.llen(s_ready)),
        "delayed": int(client.zcard(s_delayed)),
        "reserved": int(client.zcard(s_reserved)),
    }
    directory = paths.queue_dir(dumps_dir, keys.queue)
    paths.ensure_dir(directory)
    final = paths.segment_path(directory, segment_id)
    header = SegmentHeader(
        queue=keys.queue,
        prefix=keys.prefix,
        segment=segment_id,
        created_at=created_at,
        redis_version=version,
    )
    counts = None
    if final.exists():
        # Crashed after the rename: the file is durable; keep it if it checks out.
        try:
            info = verify_segment(final)
            counts = info.counts
            result.bytes = info.bytes
        except SegmentError:
            counts = None
    if counts is None:
        counts, result.bytes = _write_segment(
            client, keys, directory, final, header, chunk_jobs, lock
        )
    got = {"ready": counts.ready, "delayed": counts.delayed, "reserved": counts.reserved}
    if got != expected:
        raise DumpError(
            f"segment {final} holds {got} but the staging keys hold {expected}; "
            "staging kept, nothing deleted"
        )
    result.ready, result.delayed, result.reserved = counts.ready, counts.delayed, counts.reserved
    result.failed = counts.failed
    result.segment = str(final)

    faults.checkpoint("dump:before-delete")
    lock.ensure()
    drop = script(client, scripts.DROP_STAGING)
    drop(keys=[s_ready, s_delayed, s_reserved, s_failed, s_failed_jobs, meta], args=[segment_id])
    faults.checkpoint("dump:after-delete")
    result.seconds = time.monotonic() - started
    return result


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _write_segment(
    client: Client,
    keys: QueueKeys,
    directory: Path,
    final: Path,
    header: SegmentHeader,
    chunk_jobs: int,
    lock: QueueLock,
) -> tuple[Any, int]:
    """Stream the staging keys into ``final`` via a fsynced temporary file; returns
    (Counts, bytes)."""
    s_ready, s_delayed, s_reserved, s_failed, s_failed_jobs = _staging(keys)
    tmp = paths.temp_path(directory, header.segment)
    written = 0
    with open(tmp, "wb") as fh:
        w = SegmentWriter(fh, header)

        def emit(kind: str, records: list[Any]) -> None:
            nonlocal written
            for part in _split_by_bytes(kind, records):
                w.chunk(kind, part)
                written += 1
                if written % 16 == 0:
                    lock.ensure()
                faults.checkpoint("dump:mid-write", written)

        n = int(client.llen(s_ready))
        for start in range(0, n, chunk_jobs):
            emit("R", list(client.lrange(s_ready, start, start + chunk_jobs - 1)))
        for kind, key in (("D", s_delayed), ("V", s_reserved)):
            n = int(client.zcard(key))
            for start in range(0, n, chunk_jobs):
                pairs = client.zrange(key, start, start + chunk_jobs - 1, withscores=True)
                emit(kind, [(float(score), member) for member, score in pairs])
        seen: set[bytes] = set()
        n = int(client.zcard(s_failed))
        for start in range(0, n, chunk_jobs):
            pairs = client.zrange(s_failed, start, start + chunk_jobs - 1, withscores=True)
            uuids = [member for member, _ in pairs]
            records = client.hmget(s_failed_jobs, uuids) if uuids else []
            seen.update(uuids)
            emit(
                "F",
                [
                    FailedEntry(u, float(score), rec)
                    for (u, score), rec in zip(pairs, records, strict=True)
                ],
            )
        # Records in the hash without an index entry are kept too.
        cursor = 0
        while True:
            cursor, fields = client.hscan(s_failed_jobs, cursor, count=chunk_jobs)
            orphans = [FailedEntry(k, None, v) for k, v in fields.items() if k not in seen]
            emit("F", orphans)
            if cursor == 0:
                break
        w.finish()
        fh.flush()
        os.fsync(fh.fileno())
    faults.checkpoint("dump:before-rename")
    os.rename(tmp, final)
    faults.checkpoint("dump:after-rename")
    paths.fsync_dir(directory)
    return w.counts, w.bytes


def _split_by_bytes(kind: str, records: list[Any]) -> list[list[Any]]:
    """``records`` cut so that no chunk holds much more than :data:`CHUNK_BYTES`."""
    if not records:
        return []
    out: list[list[Any]] = [[]]
    size = 0
    for r in records:
        n = _record_size(kind, r)
        if out[-1] and size + n > CHUNK_BYTES:
            out.append([])
            size = 0
        out[-1].append(r)
        size += n
    return out


def _record_size(kind: str, r: Any) -> int:
    if kind == "R":
        return len(r) + 4
    if kind in ("D", "V"):
        return len(r[1]) + 12
    return len(r.uuid) + len(r.record or b"") + 17
