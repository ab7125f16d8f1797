"""Merge a queue's dump segments back into Redis, oldest first, idempotently.

An interrupted dump (staging keys still in Redis) is undone first: its segment file, if any,
is deleted and the staged records move straight back into the live keys
(:func:`sendgroup_worker.dumps.dump.unstage`). Then:

1. verify every segment before merging any (header, every chunk CRC, counts, SHA-256, the
   signature when a key is set, and that it belongs to this queue and key prefix): one bad
   file stops the restore with :class:`SegmentError` naming every bad file, nothing of any
   segment merged, every file left in place. The pass streams each file and keeps only a
   SHA-256 per chunk (:attr:`SegmentInfo.digests`), not the records.

Then, for each segment (oldest first, by id = creation time):

2. merge chunk by chunk, each chunk checked against the digest the first pass verified
   (:func:`iter_verified_chunks`: a file swapped or altered since is refused before its first
   changed chunk is merged); each chunk is one script that applies the records *and* advances the
   segment's progress (``restored`` hash: segment id -> chunks merged) atomically, so a crash
   mid-merge never applies a chunk twice and a re-run continues where it stopped;
3. delete the file, fsync the directory, then drop the progress record (records whose file
   is gone, left by a run killed between the two, are dropped at the end of the next run).

Merging never overwrites (queue-protocol.md, property 3): ready items are appended at the tail
(RPUSH) with one notify token each; delayed and reserved members keep their scores and are
added with ZADD NX, failed entries with ZADD NX / HSETNX, so jobs pushed while the group was
dumped stay. Ready order: the dumped items keep their relative order and go *after* the jobs
pushed while the group was dumped; see docs/dumps.md for why (append is the producers' own
operation, and a head insert of several segments would need reverse reads or an O(N) splice).
Reserved jobs come back reserved, with their old expiry, and move to ready when it passes.
At the end the notify list is brought to exactly one token per ready job.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import redis

from sendgroup_worker.dumps import faults, paths, scripts
from sendgroup_worker.dumps.dump import UnstageResult, unstage
from sendgroup_worker.dumps.format import (
    FORMAT_VERSION,
    Chunk,
    FailedEntry,
    SegmentError,
    SegmentInfo,
    iter_verified_chunks,
    verify_segment,
)
from sendgroup_worker.dumps.lock import QueueLock
from sendgroup_worker.dumps.redisconn import (
    Client,
    check_slot_rule,
    is_cluster,
    redis_version,
    script,
)
from sendgroup_worker.dumps.summary import QueueCounts
from sendgroup_worker.queue.keys import QueueKeys

_NOTIFY_STEP = 1000
#: Chunks (and bytes) sent per pipeline round trip while merging.
PIPELINE_CHUNKS = 8
PIPELINE_BYTES = 16 << 20


@dataclass(slots=True)
class RestoreResult(QueueCounts):
    """Summary of one restore: jobs merged (ready + delayed + reserved) per kind, failed
    entries, bytes of the segments applied, wall seconds, and the segments applied."""

    segments: list[str] = field(default_factory=list)
    redis_version: str = ""
    unstaged: UnstageResult | None = None
    notify_fixed: int = 0

    def as_json(self) -> dict[str, Any]:
        return {
            "command": "restore",
            **self.counts_json(),
            "segment": self.segments[-1] if self.segments else None,
            "segments": self.segments,
            "redisVersion": self.redis_version,
            "formatVersion": FORMAT_VERSION,
            "unstagedJobs": self.unstaged.jobs if self.unstaged else 0,
            "unstagedSegment": self.unstaged.segment if self.unstaged else None,
            "notifyFixed": self.notify_fixed,
        }


def _chunk_args(chunk: Chunk) -> list[Any]:
    if chunk.kind == "R":
        return list(chunk.records)
    if chunk.kind in ("D", "V"):
        out: list[Any] = []
        for score, member in chunk.records:
            out += (repr(float(score)), member)
        return out
    out = []
    for e in chunk.records:
        assert isinstance(e, FailedEntry)
        flags = (1 if e.failed_at is not None else 0) | (2 if e.record is not None else 0)
        out += (e.uuid, str(flags), repr(float(e.failed_at or 0.0)), e.record or b"")
    return out


def restore_queue(
    client: Client,
    keys: QueueKeys,
    dumps_dir: str | os.PathLike[str],
    lock: QueueLock,
) -> RestoreResult:
    """Apply every segment of ``keys.queue`` under ``dumps_dir`` (caller holds ``lock``).

    First undoes a dump that was interrupted (its staging keys still in Redis): its file, if
    any, is deleted and the staged jobs move straight back (no disk space needed).

    Raises :class:`SegmentError` (bad file, left in place), ``LockLost``, ``OSError`` or
    ``redis.RedisError``; re-running after any failure is safe.
    """
    check_slot_rule(client, keys)
    started = time.monotonic()
    result = RestoreResult(queue=keys.queue, redis_version=redis_version(client))
    result.unstaged = unstage(client, keys, dumps_dir, lock)
    directory = paths.queue_dir(dumps_dir, keys.queue)
    merge = script(client, scripts.MERGE)
    merge_keys = [
        keys.ready,
        keys.notify,
        keys.delayed,
        keys.reserved,
        keys.failed,
        keys.failed_jobs,
        keys.restored,
    ]
    merged_chunks = 0
    # Pipelining overlaps encoding the next chunks with Redis merging the previous ones; each
    # chunk is still its own atomic, idempotent script. Cluster pipelines are not used.
    depth = 1 if is_cluster(client) else PIPELINE_CHUNKS
    verified = verify_all(paths.list_segments(directory), keys)
    faults.checkpoint("restore:before-merge")  # unstaged, all verified, nothing merged
    for path, info in verified:
        segment = path.name[: -len(".sgdump")]
        raw = client.hget(keys.restored, segment)
        progress = int(raw) if raw is not None else 0
        if progress < info.counts.chunks:
            batch: list[Chunk] = []
            batch_bytes = 0
            for chunk in iter_verified_chunks(path, info):
                if chunk.index < progress:
                    continue
                batch.append(chunk)
                batch_bytes += chunk.size
                if len(batch) >= depth or batch_bytes >= PIPELINE_BYTES:
                    merged_chunks = _merge_batch(
                        client, merge, merge_keys, segment, batch, lock, result, merged_chunks
                    )
                    batch, batch_bytes = [], 0
            merged_chunks = _merge_batch(
                client, merge, merge_keys, segment, batch, lock, result, merged_chunks
            )
        faults.checkpoint("restore:after-merge")
        os.unlink(path)
        paths.fsync_dir(directory)
        faults.checkpoint("restore:after-unlink")
        client.hdel(keys.restored, segment)
        result.bytes += info.bytes
        result.segments.append(str(path))
    # Progress records of segments no longer on disk (a run killed between the file's deletion
    # and its record's) have nothing left to protect.
    on_disk = {p.name[: -len(".sgdump")] for p in paths.list_segments(directory)}
    stale = [f for f in client.hkeys(keys.restored) if _text(f) not in on_disk]
    if stale:
        client.hdel(keys.restored, *stale)
    result.notify_fixed = reconcile_notify(client, keys)
    result.seconds = time.monotonic() - started
    return result


def verify_all(segments: list[Path], keys: QueueKeys) -> list[tuple[Path, SegmentInfo]]:
    """Verify every segment of ``segments`` (:func:`verify_segment`, and that its header names
    ``keys``' queue and prefix and its own file name). Returns ``(path, verified info)`` in the
    given order; raises :class:`SegmentError` naming every bad segment when any is bad."""
    verified: list[tuple[Path, SegmentInfo]] = []
    bad: list[str] = []
    for path in segments:
        try:
            info = verify_segment(path)
            h = info.header
            if h.queue != keys.queue or h.prefix != keys.prefix:
                raise SegmentError(
                    f"{path}: belongs to queue {h.queue!r} (prefix {h.prefix!r}), not "
                    f"{keys.queue!r} (prefix {keys.prefix!r}); left in place"
                )
            if h.segment != path.name[: -len(".sgdump")]:
                raise SegmentError(f"{path}: header names segment {h.segment!r}; left in place")
        except SegmentError as e:
            bad.append(str(e))
            continue
        verified.append((path, info))
    if bad:
        raise SegmentError(
            f"{len(bad)} of {len(segments)} segments refused, nothing merged: " + "; ".join(bad)
        )
    return verified


def _merge_batch(
    client: Client,
    merge: Callable[..., Any],
    merge_keys: list[str],
    segment: str,
    batch: list[Chunk],
    lock: QueueLock,
    result: RestoreResult,
    merged_chunks: int,
) -> int:
    """Merge ``batch`` (consecutive chunks of one segment) in one pipeline round trip, or one
    call when it holds a single chunk. Returns the running count of chunks merged."""
    if not batch:
        return merged_chunks
    lock.ensure()
    if len(batch) == 1:
        c = batch[0]
        replies = [merge(keys=merge_keys, args=[segment, c.index, c.kind, *_chunk_args(c)])]
    else:
        pipe = cast("redis.Redis[bytes]", client).pipeline(transaction=False)
        for c in batch:
            merge(keys=merge_keys, args=[segment, c.index, c.kind, *_chunk_args(c)], client=pipe)
        replies = pipe.execute()
    for c, n in zip(batch, replies, strict=True):
        merged_chunks += 1
        if int(n) >= 0:
            _count(result, c.kind, int(n))
        faults.checkpoint("restore:mid-merge", merged_chunks)
    return merged_chunks


def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _count(result: RestoreResult, kind: str, n: int) -> None:
    if kind == "R":
        result.ready += n
    elif kind == "D":
        result.delayed += n
    elif kind == "V":
        result.reserved += n
    else:
        result.failed += n


def reconcile_notify(client: Client, keys: QueueKeys) -> int:
    """Make ``LLEN notify == LLEN ready`` in bounded steps (property 9: a restored queue wakes
    blocking workers). Returns tokens added minus tokens removed."""
    fix = script(client, scripts.RECONCILE_NOTIFY)
    total = 0
    while True:
        n = int(fix(keys=[keys.ready, keys.notify], args=[_NOTIFY_STEP]))
        if n == 0:
            return total
        total += n
