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

A crash before step 4 leaves the staging keys: re-running ``dump`` resumes (a finished segment
found under the recorded id is verified and kept instead of being rewritten), and ``restore``
undoes the interrupted dump (:func:`unstage`: file deleted, staged jobs moved back). A clean
failure (disk full, read-only volume) unstages at once, so the queue is never left hidden.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from sendgroup_contract import timestamps
from sendgroup_worker.dumps import faults, paths, scripts
from sendgroup_worker.dumps.format import (
    FORMAT_VERSION,
    FailedEntry,
    SegmentError,
    SegmentHeader,
    SegmentWriter,
    signing_key,
    verify_segment,
)
from sendgroup_worker.dumps.lock import QueueLock
from sendgroup_worker.dumps.redisconn import Client, check_slot_rule, redis_version, script
from sendgroup_worker.dumps.summary import QueueCounts
from sendgroup_worker.queue.keys import QueueKeys

#: Records per chunk: small enough that one LRANGE reply or one merge script stays around a
#: millisecond for 1.5 KB payloads, and far below Lua's unpack() limit (8000 values).
DEFAULT_CHUNK_JOBS = 1000
#: Bytes per chunk, whichever limit comes first (bounds one merge script's work).
CHUNK_BYTES = 4 << 20
#: Segment files hold job payloads (addresses, bodies): owner read/write, group read (a
#: volume shared through fsGroup), nothing for others.
FILE_MODE = 0o640
#: The writer thread flushes to disk (fdatasync) after this many bytes.
SYNC_BYTES = 64 << 20
#: Chunks read from Redis that may wait for the writer thread (bounds memory to ~8 chunks).
_QUEUE_CHUNKS = 8


class DumpError(Exception):
    """The dump cannot proceed safely; nothing was deleted from Redis."""


@dataclass(slots=True)
class DumpResult(QueueCounts):
    """Summary of one dump: counts in jobs (``jobs`` = ready + delayed + reserved), ``bytes``
    of the segment file, wall ``seconds``; ``segment`` is None when the queue was empty."""

    segment: str | None = None
    created_at: str | None = None
    redis_version: str = ""
    resumed: bool = False

    def as_json(self) -> dict[str, Any]:
        return {
            "command": "dump",
            **self.counts_json(),
            "segment": self.segment,
            "createdAt": self.created_at,
            "redisVersion": self.redis_version,
            "formatVersion": FORMAT_VERSION,
            "resumed": self.resumed,
        }


def move_keys(keys: QueueKeys) -> list[str]:
    """KEYS of both moves between the live keys and staging (``scripts.STAGE`` and
    ``scripts.UNSTAGE``): the 5 live data keys, their staging names in the same order
    (``QueueKeys.staging_data_keys``), the staging meta record, notify."""
    return [
        keys.ready,
        keys.delayed,
        keys.reserved,
        keys.failed,
        keys.failed_jobs,
        *keys.staging_data_keys,
        keys.staging_meta,
        keys.notify,
    ]


def staging_pending(client: Client, keys: QueueKeys) -> bool:
    """True when an interrupted dump left its staging record behind."""
    return bool(client.exists(keys.staging_meta))


def dump_queue(
    client: Client,
    keys: QueueKeys,
    dumps_dir: str | os.PathLike[str],
    lock: QueueLock,
    *,
    chunk_jobs: int = DEFAULT_CHUNK_JOBS,
) -> DumpResult:
    """Dump ``keys.queue`` into a new segment under ``dumps_dir`` (caller holds ``lock``).

    Resumes an interrupted dump (staging found) instead of staging again. Raises
    :class:`DumpError`, :class:`SegmentError` or ``OSError`` (disk full, read-only volume)
    after moving the staged jobs back (:func:`unstage`), ``LockLost`` or
    ``redis.RedisError`` (staging kept: the next dump resumes, the next restore unstages).
    """
    check_slot_rule(client, keys)
    # an unsafe directory (a planted symbolic link) is refused before any job is moved
    directory = paths.queue_dir(dumps_dir, keys.queue)
    started = time.monotonic()
    version = redis_version(client)
    result = DumpResult(queue=keys.queue, redis_version=version)

    lock.ensure()
    segment_id = paths.new_segment_id()
    created_at = timestamps.format_created_at(datetime.now(UTC))
    stage = script(client, scripts.STAGE)
    reply = stage(keys=move_keys(keys), args=[segment_id, created_at])
    status = int(reply[0])
    if status == 0:
        result.seconds = time.monotonic() - started
        return result
    segment_id, created_at = _text(reply[1]), _text(reply[2])
    result.resumed = status == 2
    faults.checkpoint("dump:after-stage")

    s_ready, s_delayed, s_reserved, _s_failed, _s_failed_jobs = keys.staging_data_keys
    expected = {
        "ready": int(client.llen(s_ready)),
        "delayed": int(client.zcard(s_delayed)),
        "reserved": int(client.zcard(s_reserved)),
    }
    final = paths.segment_path(directory, segment_id)
    header = SegmentHeader(
        queue=keys.queue,
        prefix=keys.prefix,
        segment=segment_id,
        created_at=created_at,
        redis_version=version,
    )
    try:
        return _finish(
            client, keys, lock, result, directory, final, header, chunk_jobs, expected, started
        )
    except (OSError, DumpError, SegmentError):
        # A clean failure (disk full, read-only volume, count mismatch): put the staged jobs
        # back so the queue is visible again, then report the error. (A SIGKILL cannot do
        # this; the next dump resumes, or the next restore unstages.)
        with contextlib.suppress(Exception):
            unstage(client, keys, dumps_dir, lock)
        raise


def _finish(
    client: Client,
    keys: QueueKeys,
    lock: QueueLock,
    result: DumpResult,
    directory: Path,
    final: Path,
    header: SegmentHeader,
    chunk_jobs: int,
    expected: dict[str, int],
    started: float,
) -> DumpResult:
    segment_id = header.segment
    paths.ensure_dir(directory)
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
    result.created_at = header.created_at

    faults.checkpoint("dump:before-delete")
    lock.ensure()
    drop = script(client, scripts.DROP_STAGING)
    drop(keys=list(keys.staging_keys), args=[segment_id])
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
    s_ready, s_delayed, s_reserved, s_failed, s_failed_jobs = keys.staging_data_keys
    tmp = paths.temp_path(directory, header.segment)
    fd = paths.create_new(tmp, FILE_MODE)
    with os.fdopen(fd, "wb") as fh:
        w = SegmentWriter(fh, header, signing_key())
        sink = _BackgroundWriter(fh, w)
        read = 0

        def emit(kind: str, records: list[Any]) -> None:
            nonlocal read
            for part in _split_by_bytes(kind, records):
                faults.slow("dump:read-chunk")
                sink.put(kind, part)
                read += 1
                if read % 16 == 0:
                    lock.ensure()

        try:
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
        except BaseException:
            sink.abort()
            raise
        sink.close()
        w.finish()
        fh.flush()
        os.fsync(fh.fileno())
    faults.checkpoint("dump:before-rename")
    os.rename(tmp, final)
    faults.checkpoint("dump:after-rename")
    paths.fsync_dir(directory)
    return w.counts, w.bytes


class _BackgroundWriter:
    """Encodes and writes chunks on a thread, so reading the next chunk from Redis overlaps
    with the disk; calls fdatasync every :data:`SYNC_BYTES` so the final fsync has little
    left to flush. :meth:`put` blocks while :data:`_QUEUE_CHUNKS` chunks wait (bounded
    memory); a write error (disk full) is raised by the next :meth:`put` or :meth:`close`.
    """

    def __init__(self, fh: IO[bytes], writer: SegmentWriter) -> None:
        self._fh = fh
        self._w = writer
        self._q: queue.Queue[tuple[str, list[Any]] | None] = queue.Queue(_QUEUE_CHUNKS)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="segment-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        synced = written = 0
        try:
            while (item := self._q.get()) is not None:
                self._w.chunk(*item)
                written += 1
                faults.checkpoint("dump:mid-write", written)
                if self._w.bytes - synced >= SYNC_BYTES:
                    self._fh.flush()
                    os.fdatasync(self._fh.fileno())
                    synced = self._w.bytes
        except BaseException as e:
            self._error = e
            while self._q.get() is not None:  # keep draining so put() never blocks forever
                pass

    def put(self, kind: str, records: list[Any]) -> None:
        if self._error is not None:
            raise self._error
        self._q.put((kind, records))

    def abort(self) -> None:
        """Stop the thread after the chunks already queued (the caller failed)."""
        self._q.put(None)
        self._thread.join()

    def close(self) -> None:
        """Wait for every queued chunk to be written; re-raise the writer's error."""
        self._q.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error


def _split_by_bytes(kind: str, records: list[Any]) -> list[list[Any]]:
    """``records`` cut so that no chunk holds much more than :data:`CHUNK_BYTES`."""
    if not records:
        return []
    if kind == "R" and sum(map(len, records)) + 4 * len(records) <= CHUNK_BYTES:
        return [records]  # the common case, without a Python loop per record
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


@dataclass(slots=True)
class UnstageResult:
    """Records moved from an interrupted dump's staging keys back into the live keys."""

    ready: int = 0
    delayed: int = 0
    reserved: int = 0
    failed: int = 0
    segment: str | None = None

    @property
    def jobs(self) -> int:
        return self.ready + self.delayed + self.reserved


def unstage(
    client: Client,
    keys: QueueKeys,
    dumps_dir: str | os.PathLike[str],
    lock: QueueLock,
    *,
    chunk_jobs: int = DEFAULT_CHUNK_JOBS,
) -> UnstageResult:
    """Undo an interrupted dump: delete its (temporary or final) segment file, then move the
    staging keys back into the live keys in bounded atomic steps (ready appended with notify
    tokens; delayed/reserved/failed with NX), and drop the staging meta record last.

    The file goes first (fsynced), so a crash at any point leaves either file + staging (the
    dump can still finish) or staging alone (the next run keeps unstaging): never a file
    *and* jobs back in the live keys. Needs no free space on the volume. No-op without staging.
    """
    result = UnstageResult()
    raw = client.hget(keys.staging_meta, "segment")
    if raw is None:
        return result
    segment_id = _text(raw)
    result.segment = segment_id
    directory = paths.queue_dir(dumps_dir, keys.queue)
    lock.ensure()
    if directory.is_dir():
        removed = False
        for p in (
            paths.temp_path(directory, segment_id),
            paths.segment_path(directory, segment_id),
        ):
            if p.exists():
                p.unlink()
                removed = True
        if removed:
            paths.fsync_dir(directory)
    move = script(client, scripts.UNSTAGE)
    step = 0
    while True:
        lock.ensure()
        r = [int(x) for x in move(keys=move_keys(keys), args=[chunk_jobs])]
        result.ready += r[0]
        result.delayed += r[1]
        result.reserved += r[2]
        result.failed += r[3]
        step += 1
        faults.checkpoint("restore:mid-unstage", step)
        if r[4] == 1:
            return result
