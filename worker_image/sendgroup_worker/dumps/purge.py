"""Purge one queue: delete its Laravel keys and every key this project added for it.

The names come from :attr:`QueueKeys.all_keys` (an explicit list, never a pattern or SCAN), so
purging ``mail-1`` can never touch ``mail-10``. One script counts the jobs and UNLINKs the keys
atomically; large values are freed in Redis' background thread. The lock key is not deleted
(the purge holds it; it is released afterwards). With ``forget``, the queue's dump segments
are deleted too (cancelled group: its dump must never be restored by accident).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from sendgroup_worker.dumps import faults, paths, scripts
from sendgroup_worker.dumps.lock import QueueLock
from sendgroup_worker.dumps.redisconn import Client, check_slot_rule, script
from sendgroup_worker.queue.keys import QueueKeys


@dataclass(slots=True)
class PurgeResult:
    """Jobs dropped (live + staged ready/delayed/reserved), failed entries dropped, keys
    deleted, dump files forgotten, wall seconds."""

    queue: str
    jobs: int = 0
    failed: int = 0
    keys_deleted: int = 0
    forgotten: int = 0
    forgotten_bytes: int = 0
    seconds: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return {
            "command": "purge",
            "queue": self.queue,
            "jobs": self.jobs,
            "failed": self.failed,
            "keysDeleted": self.keys_deleted,
            "segmentsForgotten": self.forgotten,
            "bytesForgotten": self.forgotten_bytes,
            "seconds": round(self.seconds, 3),
        }


def purge_queue(
    client: Client,
    keys: QueueKeys,
    lock: QueueLock,
    *,
    dumps_dir: str | os.PathLike[str] | None = None,
) -> PurgeResult:
    """Delete every key of ``keys.queue`` (caller holds ``lock``); with ``dumps_dir``, also
    its dump segments. Raises ``ClusterRuleError``, ``LockLost``, ``redis.RedisError``."""
    check_slot_rule(client, keys)
    started = time.monotonic()
    faults.checkpoint("purge:before-delete")
    lock.ensure()
    s_ready, s_delayed, s_reserved, s_failed, _s_failed_jobs = keys.staging_data_keys
    counted = [
        keys.ready,
        keys.delayed,
        keys.reserved,
        s_ready,
        s_delayed,
        s_reserved,
        keys.failed,
        s_failed,
    ]
    purge = script(client, scripts.PURGE)
    reply = [int(x) for x in purge(keys=[*counted, *keys.all_keys])]
    result = PurgeResult(
        queue=keys.queue, jobs=sum(reply[0:6]), failed=reply[6] + reply[7], keys_deleted=reply[8]
    )
    if dumps_dir is not None:
        result.forgotten, result.forgotten_bytes = forget_segments(dumps_dir, keys.queue)
    result.seconds = time.monotonic() - started
    return result


def forget_segments(dumps_dir: str | os.PathLike[str], queue: str) -> tuple[int, int]:
    """Delete every segment (and leftover temporary file) of ``queue``; remove its directory
    when empty. Returns (segments deleted, bytes freed)."""
    directory = paths.queue_dir(dumps_dir, queue)
    if not directory.is_dir():
        return 0, 0
    count = size = 0
    for p in paths.list_segments(directory):
        size += p.stat().st_size
        p.unlink()
        count += 1
    for p in directory.iterdir():
        if p.name.startswith(".") and p.name.endswith(".sgdump.tmp"):
            p.unlink()
    paths.fsync_dir(directory)
    try:
        directory.rmdir()
        paths.fsync_dir(directory.parent)
    except OSError:
        pass  # something else lives there: leave it
    return count, size
