"""Console commands ``dump``, ``restore``, ``purge``, ``forget`` and ``dumps``.

Each prints one JSON line on stdout (``dumps``: one line per segment) that the operator copies
into the SendGroup's status, and on failure exits non-zero with a one-line reason on stderr:

* exit 1: any other failure (Redis unreachable, disk full, lock lost, ...)
* exit 3: the queue's lock is held by another dump/restore/purge
* exit 4: a segment file is truncated, corrupted or foreign (left in place)
* exit 5: refused by a rule (queue without hash tag on Redis Cluster, bad settings)

The Redis URL is never printed (passwords are redacted from every message).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import click

from sendgroup_worker.cli_prefix import key_prefix_option
from sendgroup_worker.dumps import paths
from sendgroup_worker.dumps.dump import DEFAULT_CHUNK_JOBS, DumpError, dump_queue
from sendgroup_worker.dumps.format import SegmentError, read_info, signing_key, verify_segment
from sendgroup_worker.dumps.lock import LockHeld, LockLost, QueueLock
from sendgroup_worker.dumps.purge import forget_segments, purge_queue
from sendgroup_worker.dumps.redisconn import (
    Client,
    ClusterRuleError,
    ConfigError,
    check_slot_rule,
    connect,
    redact,
    resolve_url,
)
from sendgroup_worker.dumps.restore import restore_queue
from sendgroup_worker.queue.keys import InvalidQueueName, QueueKeys
from sendgroup_worker.redisclient import REDIS_ERRORS

EXIT_LOCKED = 3
EXIT_SEGMENT = 4
EXIT_RULE = 5


def _emit(data: dict[str, Any]) -> None:
    click.echo(json.dumps(data, sort_keys=False, separators=(",", ":")))


def _fail(message: str, code: int, url: str | None) -> NoReturn:
    line = " ".join(message.split())
    if url:
        line = redact(line, url)
    click.echo(f"error: {line}", err=True)
    sys.exit(code)


def _queue_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--queue",
        "-q",
        required=True,
        envvar="SENDGROUP_QUEUE",
        help="Queue name (Laravel sense: keys queues:<queue>...). Env SENDGROUP_QUEUE.",
    )(f)


def _dir_option(*, must_exist: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``--dumps-dir``. Commands that only read or delete segments (``dumps``, ``forget``) need
    it to exist, so a mistyped path is a usage error (exit 2) rather than "0 segments"; ``dump``
    creates it."""

    def decorate(f: Callable[..., Any]) -> Callable[..., Any]:
        return click.option(
            "--dumps-dir",
            required=True,
            envvar="SENDGROUP_DUMPS_DIR",
            type=click.Path(file_okay=False, exists=must_exist),
            help="Directory on the dumps volume (e.g. /dumps/<namespace>/<group>); segments go "
            "in <dumps-dir>/<escaped queue>/"
            + ("" if must_exist else " (created if missing)")
            + ". Env SENDGROUP_DUMPS_DIR.",
        )(f)

    return decorate


def _redis_options(f: Callable[..., Any]) -> Callable[..., Any]:
    for opt in reversed(
        [
            click.option(
                "--redis-url",
                envvar="REDIS_URL",
                help="redis://[user:password@]host:port/db (or rediss://). Env REDIS_URL.",
            ),
            click.option(
                "--redis-url-file",
                envvar="REDIS_URL_FILE",
                type=click.Path(dir_okay=False),
                help="File holding the URL (a mounted Secret key). Env REDIS_URL_FILE.",
            ),
            key_prefix_option("--prefix", "--key-prefix", "key_prefix"),
            click.option(
                "--lock-ttl",
                default=30.0,
                type=click.FloatRange(min=0.1),
                help="Seconds the queue lock lives without renewal (renewed every ttl/3).",
            ),
            click.option(
                "--wait-lock",
                default=0.0,
                type=click.FloatRange(min=0),
                help="Seconds to wait for a held lock (e.g. one left by a killed run) "
                "before failing.",
            ),
        ]
    ):
        f = opt(f)
    return f


class _Ctx:
    """Resolved connection and keys for one command run."""

    def __init__(
        self, queue: str, redis_url: str | None, redis_url_file: str | None, key_prefix: str
    ) -> None:
        self.url: str | None = None
        try:
            self.keys = QueueKeys(queue, prefix=key_prefix)
            self.url = resolve_url(redis_url, redis_url_file)
        except (InvalidQueueName, ConfigError) as e:
            _fail(str(e), EXIT_RULE, redis_url)
        self._client: Client | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            assert self.url is not None
            self._client = connect(self.url)
        return self._client


def _run(ctx: _Ctx, command: str, ttl: float, wait: float, body: Callable[[QueueLock], Any]) -> Any:
    """Run ``body`` under the queue lock, mapping errors to exit codes and one-line reasons."""
    try:
        check_slot_rule(ctx.client, ctx.keys)  # before the lock: refuse without touching Redis
        lock = QueueLock(ctx.client, ctx.keys, command, ttl=ttl, wait=wait)
        with lock:
            return body(lock)
    except LockHeld as e:
        _fail(str(e), EXIT_LOCKED, ctx.url)
    except SegmentError as e:
        _fail(f"refused segment: {e}", EXIT_SEGMENT, ctx.url)
    except ClusterRuleError as e:
        _fail(str(e), EXIT_RULE, ctx.url)
    except (LockLost, DumpError) as e:
        _fail(str(e), 1, ctx.url)
    except REDIS_ERRORS as e:
        _fail(f"{command} of queue {ctx.keys.queue!r}: Redis error: {e}", 1, ctx.url)
    except OSError as e:
        _fail(f"{command} of queue {ctx.keys.queue!r}: {e}", 1, ctx.url)
    except Exception as e:  # still one line, never a traceback the operator cannot store
        _fail(f"{command} of queue {ctx.keys.queue!r}: {type(e).__name__}: {e}", 1, ctx.url)


@click.command("dump")
@_queue_option
@_dir_option(must_exist=False)
@_redis_options
@click.option("--chunk-jobs", default=DEFAULT_CHUNK_JOBS, hidden=True, type=click.IntRange(1, 2000))
def dump_command(
    queue: str,
    dumps_dir: str,
    redis_url: str | None,
    redis_url_file: str | None,
    key_prefix: str,
    lock_ttl: float,
    wait_lock: float,
    chunk_jobs: int,
) -> None:
    """Move a (paused) queue from Redis to a new segment file on the dumps volume.

    Resumes an interrupted dump of the same queue. Jobs pushed while it runs stay in Redis.
    """
    ctx = _Ctx(queue, redis_url, redis_url_file, key_prefix)
    try:
        signing_key()  # an unreadable key fails here, before anything moves
    except SegmentError as e:
        _fail(f"refused: {e}", EXIT_SEGMENT, ctx.url)
    result = _run(
        ctx,
        "dump",
        lock_ttl,
        wait_lock,
        lambda lock: dump_queue(ctx.client, ctx.keys, dumps_dir, lock, chunk_jobs=chunk_jobs),
    )
    _emit(result.as_json())


@click.command("restore")
@_queue_option
@_dir_option(must_exist=False)
@_redis_options
def restore_command(
    queue: str,
    dumps_dir: str,
    redis_url: str | None,
    redis_url_file: str | None,
    key_prefix: str,
    lock_ttl: float,
    wait_lock: float,
) -> None:
    """Merge every dump segment of a queue back into Redis (oldest first), then delete them.

    Idempotent: safe to re-run after a crash; jobs pushed meanwhile are kept.
    """
    ctx = _Ctx(queue, redis_url, redis_url_file, key_prefix)
    try:
        directory = paths.queue_dir(dumps_dir, queue)
        signing_key()  # an unreadable key fails here, before anything moves
    except InvalidQueueName as e:
        _fail(str(e), EXIT_RULE, None)
    except SegmentError as e:
        _fail(f"refused: {e}", EXIT_SEGMENT, None)
    had_directory = directory.is_dir()
    result = _run(
        ctx,
        "restore",
        lock_ttl,
        wait_lock,
        lambda lock: restore_queue(ctx.client, ctx.keys, dumps_dir, lock),
    )
    if not had_directory:
        # Not an error: a dump that failed before writing its file leaves its jobs in Redis
        # (staging keys), which restore still merged. But a mistyped path must not look like
        # "nothing to restore" to a person. (After the run: a failure stays one stderr line.)
        click.echo(f"restore: no dump directory {directory}: restored from Redis only", err=True)
    _emit(result.as_json())


@click.command("purge")
@_queue_option
@_redis_options
@click.option(
    "--dumps-dir",
    envvar="SENDGROUP_DUMPS_DIR",
    type=click.Path(file_okay=False),
    help="Also delete the queue's dump segments under this directory (as `forget`).",
)
def purge_command(
    queue: str,
    redis_url: str | None,
    redis_url_file: str | None,
    key_prefix: str,
    lock_ttl: float,
    wait_lock: float,
    dumps_dir: str | None,
) -> None:
    """Delete a queue's keys (ready, delayed, reserved, notify, failed, rate limit, markers,
    staging, restore progress) and report how many jobs were dropped."""
    ctx = _Ctx(queue, redis_url, redis_url_file, key_prefix)
    result = _run(
        ctx,
        "purge",
        lock_ttl,
        wait_lock,
        lambda lock: purge_queue(ctx.client, ctx.keys, lock, dumps_dir=dumps_dir),
    )
    _emit(result.as_json())


@click.command("forget")
@_queue_option
@_dir_option(must_exist=True)
def forget_command(queue: str, dumps_dir: str) -> None:
    """Delete a queue's dump segments (a cancelled group's dump must never be restored)."""
    try:
        count, size = forget_segments(dumps_dir, queue)
    except (InvalidQueueName, OSError, SegmentError) as e:
        _fail(f"forget of queue {queue!r}: {e}", 1, None)
    _emit({"command": "forget", "queue": queue, "segments": count, "bytes": size})


@click.command("dumps")
@_queue_option
@_dir_option(must_exist=True)
@click.option("--verify", is_flag=True, help="Read every segment fully and check its checksums.")
def dumps_command(queue: str, dumps_dir: str, verify: bool) -> None:
    """List a queue's dump segments, oldest first, one JSON line each."""
    try:
        directory = paths.queue_dir(dumps_dir, queue)
    except InvalidQueueName as e:
        _fail(str(e), EXIT_RULE, None)
    except SegmentError as e:
        _fail(f"refused: {e}", EXIT_SEGMENT, None)
    bad = False
    for p in paths.list_segments(directory):
        try:
            info = verify_segment(p) if verify else read_info(p)
            h = info.header
            if h.queue != queue:
                raise SegmentError(f"{p}: a segment of queue {h.queue!r}, not of {queue!r}")
            # Without --verify only the header and trailer were read: the records' checksums
            # were not, so "valid" is unknown (null) rather than a promise.
            _emit(
                {
                    "segment": str(p),
                    "queue": h.queue,
                    "jobs": info.counts.jobs,
                    "ready": info.counts.ready,
                    "delayed": info.counts.delayed,
                    "reserved": info.counts.reserved,
                    "failed": info.counts.failed,
                    "bytes": info.bytes,
                    "createdAt": h.created_at,
                    "redisVersion": h.redis_version,
                    "formatVersion": h.format_version,
                    "verified": verify,
                    "valid": True if verify else None,
                }
            )
        except SegmentError as e:
            bad = True
            _emit(
                {
                    "segment": str(p),
                    "queue": queue,
                    "bytes": p.stat().st_size,
                    "verified": verify,
                    "valid": False,
                    "error": str(e),
                }
            )
    if bad:
        _fail("some segments are truncated or corrupted (see their lines)", EXIT_SEGMENT, None)
