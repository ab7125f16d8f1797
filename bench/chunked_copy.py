#!/usr/bin/env python3
"""The peers of scenario 5 as a user would write them: one small standalone process per group
(stdlib + redis-py only, nothing of this project), run by ``bench/scenarios/memory.py`` exactly
like ``sendgroup-worker dump`` / ``restore``.

``chunked-out``: move a paused group out without ever blocking Redis for long. For the ready
list, repeatedly ``LRANGE ready 0 N-1``, append the items to the file, ``fdatasync``, then
``MULTI; LTRIM ready N -1; LTRIM notify N -1; EXEC`` (Laravel's layout keeps one ``notify`` token
per ready job; they carry no data, so they are trimmed in step, never saved). The sorted sets
(``delayed``, ``reserved``) go the same way with ``ZRANGE key 0 N-1 WITHSCORES`` and
``ZREMRANGEBYRANK key 0 N-1``. The file is synced before every trim, so nothing leaves Redis
before it is on disk (ours gives the same guarantee with one fsync before its UNLINK); the
directory is synced at the end.

``chunked-in``: read the file back in chunks of N records: ``MULTI; RPUSH ready <N items>;
RPUSH notify <N tokens>; EXEC`` per chunk (Laravel's push: a job and its token together), ZADD
for the sorted sets; then delete the file and sync the directory.

``dump-out`` / ``dump-in``: Redis' whole-key ``DUMP`` of each key (written to a file, fsynced,
then ``UNLINK``, which Redis' documentation advises for big keys: the memory is freed in a
background thread) and ``RESTORE`` of each file.

File format of the chunked copy: records ``b"R" | u32 len | item`` (ready), ``b"D"``/``b"V"`` |
f64 score | u32 len | member (delayed/reserved), big-endian; nothing else (no checksum, no
header). Prints one JSON line: ``{"seconds": ..., "jobs": ..., "bytes": ..., "fsyncSeconds":
...}``; ``seconds`` is timed from after the connection is made (process start excluded; the
caller times the process from the outside).

Usage: ``python bench/chunked_copy.py MODE --url URL --file PATH [--chunk 1000] --ready KEY
--notify KEY [--delayed KEY] [--reserved KEY]`` (``dump-*``: ``--file`` is a prefix, one file
per key).
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import time
from pathlib import Path
from typing import Any, BinaryIO

import redis

_U32 = struct.Struct(">I")
_F64U32 = struct.Struct(">dI")


def _sync_dir(path: Path) -> None:
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class Out:
    """The chunked move-out of one group into ``path``."""

    def __init__(self, client: redis.Redis[bytes], path: Path, chunk: int) -> None:
        self.c = client
        self.path = path
        self.chunk = chunk
        self.jobs = 0
        self.fsync_s = 0.0

    def _sync(self, fh: BinaryIO) -> None:
        t = time.perf_counter()
        fh.flush()
        os.fdatasync(fh.fileno())
        self.fsync_s += time.perf_counter() - t

    def run(self, ready: str, notify: str, zsets: list[tuple[bytes, str]]) -> None:
        n = self.chunk
        with open(self.path, "ab", buffering=1 << 20) as fh:
            while True:
                items: list[bytes] = self.c.lrange(ready, 0, n - 1)
                if not items:
                    break
                fh.write(b"".join(b"R" + _U32.pack(len(i)) + i for i in items))
                self._sync(fh)  # durable before it leaves Redis
                pipe = self.c.pipeline(transaction=True)
                pipe.ltrim(ready, len(items), -1)
                pipe.ltrim(notify, len(items), -1)
                pipe.execute()
                self.jobs += len(items)
            for kind, key in zsets:
                while True:
                    pairs = self.c.zrange(key, 0, n - 1, withscores=True)
                    if not pairs:
                        break
                    fh.write(b"".join(kind + _F64U32.pack(s, len(m)) + m for m, s in pairs))
                    self._sync(fh)
                    self.c.zremrangebyrank(key, 0, len(pairs) - 1)
                    self.jobs += len(pairs)
            self._sync(fh)
        _sync_dir(self.path)


def _records(fh: BinaryIO) -> Any:
    """(kind, score, item) of every record of a chunked-copy file."""
    while kind := fh.read(1):
        if kind == b"R":
            (size,) = _U32.unpack(fh.read(4))
            yield kind, 0.0, fh.read(size)
        else:
            score, size = _F64U32.unpack(fh.read(12))
            yield kind, score, fh.read(size)


def chunked_in(
    c: redis.Redis[bytes], path: Path, chunk: int, ready: str, notify: str, zsets: dict[bytes, str]
) -> int:
    """Push the file's records back in chunks; returns the records pushed."""
    jobs = 0
    batch: list[tuple[bytes, float, bytes]] = []

    def flush() -> None:
        nonlocal jobs
        if not batch:
            return
        pipe = c.pipeline(transaction=True)
        items = [i for k, _, i in batch if k == b"R"]
        if items:
            pipe.rpush(ready, *items)
            pipe.rpush(notify, *([b"1"] * len(items)))
        for kind, key in zsets.items():
            mapping: dict[str | bytes, bytes | float | int | str] = {
                i: s for k, s, i in batch if k == kind
            }
            if mapping:
                pipe.zadd(key, mapping, nx=True)
        pipe.execute()
        jobs += len(batch)
        batch.clear()

    with open(path, "rb", buffering=1 << 20) as fh:
        for rec in _records(fh):
            batch.append(rec)
            if len(batch) >= chunk:
                flush()
        flush()
    path.unlink()
    _sync_dir(path)
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["chunked-out", "chunked-in", "dump-out", "dump-in"])
    ap.add_argument("--url", required=True)
    ap.add_argument("--file", type=Path, required=True)
    ap.add_argument("--chunk", type=int, default=1000)
    ap.add_argument("--ready", required=True)
    ap.add_argument("--notify", required=True)
    ap.add_argument("--delayed")
    ap.add_argument("--reserved")
    a = ap.parse_args()
    c = redis.Redis.from_url(a.url, socket_timeout=120)
    c.ping()
    zsets = [(k, key) for k, key in ((b"D", a.delayed), (b"V", a.reserved)) if key]
    started = time.perf_counter()
    out: dict[str, Any] = {"mode": a.mode, "fsyncSeconds": 0.0}
    if a.mode == "chunked-out":
        o = Out(c, a.file, a.chunk)
        o.run(a.ready, a.notify, zsets)
        out.update(jobs=o.jobs, bytes=a.file.stat().st_size, fsyncSeconds=o.fsync_s)
    elif a.mode == "chunked-in":
        size = a.file.stat().st_size
        out.update(jobs=chunked_in(c, a.file, a.chunk, a.ready, a.notify, dict(zsets)), bytes=size)
    elif a.mode == "dump-out":
        keys = [a.ready, a.notify] + [key for _, key in zsets]
        total = 0
        for i, key in enumerate(keys):
            data = c.dump(key)
            if data is None:
                continue
            assert isinstance(data, bytes)
            path = a.file.with_name(f"{a.file.name}.{i}")
            t = time.perf_counter()
            with open(path, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            out["fsyncSeconds"] += time.perf_counter() - t
            total += len(data)
        _sync_dir(a.file)
        c.unlink(*keys)  # only once every file is durable
        out.update(bytes=total)
    else:
        keys = [a.ready, a.notify] + [key for _, key in zsets]
        total = 0
        for i, key in enumerate(keys):
            path = a.file.with_name(f"{a.file.name}.{i}")
            if not path.exists():
                continue
            data = path.read_bytes()
            c.restore(key, 0, data)
            total += len(data)
            path.unlink()
        _sync_dir(a.file)
        out.update(bytes=total)
    out["seconds"] = time.perf_counter() - started
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
