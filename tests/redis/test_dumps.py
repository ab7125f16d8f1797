"""Dump, restore and purge against a real redis-server (queue-protocol.md, "Dump and restore").

The console script runs as a real process, as it does in the operator's Jobs. Queues are built
with raw Redis commands (Laravel's push: RPUSH payload + RPUSH notify token).
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from sendgroup_worker.queue.client import Queue
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.dumps import (
    assert_merged,
    fill_queue,
    payload,
    push,
    run_cli,
    snapshot,
    start_cli,
    start_stopped_at,
    summary,
)
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.redis


class PingProbe:
    """A parallel client that PINGs in a loop and records the worst round trip (seconds)."""

    def __init__(self, port: int) -> None:
        self.client = redis.Redis(host="127.0.0.1", port=port)
        self.worst = 0.0
        self.count = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            self.client.ping()
            self.worst = max(self.worst, time.perf_counter() - t)
            self.count += 1
            time.sleep(0.001)

    def __enter__(self) -> PingProbe:
        self.client.ping()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.client.close()


def _latency_max_ms(client: redis.Redis[bytes]) -> int:
    """Worst event Redis itself recorded (LATENCY LATEST, threshold set by the test)."""
    rows = client.execute_command("LATENCY", "LATEST")
    return max((int(r[3]) for r in rows), default=0)


def _wait_lazyfree(client: redis.Redis[bytes], deadline_s: float = 30) -> None:
    deadline = time.monotonic() + deadline_s
    while int(client.info("memory").get("lazyfree_pending_objects", 0)) > 0:
        assert time.monotonic() < deadline, "lazy free did not finish"
        time.sleep(0.05)


def _queue_keys_in(client: redis.Redis[bytes], keys: QueueKeys) -> set[str]:
    names = {k.decode() for k in client.scan_iter(count=1000)}
    return {n for n in names if n == keys.base or n.startswith(keys.base + ":")}


def test_round_trip_of_100k_jobs_is_exact_and_never_stalls_redis(
    redis_server: RedisServer,
    redis_client: redis.Redis[bytes],
    redis_url: str,
    tmp_path: Path,
    record_property: Any,
) -> None:
    """100,000 ready jobs of 1.5 KB plus delayed, reserved and failed entries: after dump the
    queue's memory is gone and only the segment holds it; after restore the ready list is
    identical (same items, same order), sorted sets have the same scores, failed entries are
    kept. A parallel client's PING and Redis' own latency monitor measure the worst stall."""
    keys = QueueKeys("mail-big")
    other = QueueKeys("mail-other")
    fill_queue(redis_client, keys, ready=100_000, delayed=2_000, reserved=1_000, failed=300)
    fill_queue(redis_client, other, ready=10, delayed=3, tag="other")
    before, other_before = snapshot(redis_client, keys), snapshot(redis_client, other)
    mem_before = int(redis_client.info("memory")["used_memory"])
    redis_client.config_set("latency-monitor-threshold", 1)
    redis_client.execute_command("LATENCY", "RESET")

    with PingProbe(redis_server.port) as dump_probe:
        dumped = summary(
            run_cli("dump", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_url)
        )
    dump_latency = _latency_max_ms(redis_client)
    assert (dumped["jobs"], dumped["ready"], dumped["delayed"], dumped["reserved"]) == (
        103_000,
        100_000,
        2_000,
        1_000,
    )
    assert dumped["failed"] == 300
    segment = Path(dumped["segment"])
    assert segment.parent == tmp_path / "mail-big" and segment.is_file()
    assert dumped["bytes"] == segment.stat().st_size > 100_000 * 1500
    assert _queue_keys_in(redis_client, keys) == set(), "queue keys left in Redis after dump"
    _wait_lazyfree(redis_client)
    freed = mem_before - int(redis_client.info("memory")["used_memory"])
    assert freed > 150_000_000, f"dump freed only {freed} bytes of Redis memory"

    listed = [
        json.loads(x)
        for x in run_cli(
            "dumps", "-q", keys.queue, "--dumps-dir", str(tmp_path), "--verify"
        ).stdout.splitlines()
    ]
    assert [(d["segment"], d["jobs"], d["valid"], d["formatVersion"]) for d in listed] == [
        (str(segment), 103_000, True, 1)
    ]

    redis_client.execute_command("LATENCY", "RESET")
    with PingProbe(redis_server.port) as restore_probe:
        restored = summary(
            run_cli("restore", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_url)
        )
    restore_latency = _latency_max_ms(redis_client)
    assert restored["jobs"] == 103_000 and restored["failed"] == 300
    after = snapshot(redis_client, keys)
    assert after == before  # same order, same scores, same failed entries, same notify count
    assert after.notify == 100_000
    assert not segment.exists(), "segment not deleted after its merge"
    assert snapshot(redis_client, other) == other_before
    assert redis_client.hlen(keys.restored) == 0

    report = {
        "dumpSeconds": dumped["seconds"],
        "restoreSeconds": restored["seconds"],
        "segmentBytes": dumped["bytes"],
        "dumpWorstPingMs": round(dump_probe.worst * 1000, 2),
        "restoreWorstPingMs": round(restore_probe.worst * 1000, 2),
        "dumpRedisLatencyMaxMs": dump_latency,
        "restoreRedisLatencyMaxMs": restore_latency,
        "pings": dump_probe.count + restore_probe.count,
    }
    for k, v in report.items():
        record_property(k, v)
    print("stall report (100k x 1.5 KB):", json.dumps(report))
    # Redis' own view of its worst command/event (target from the issue: under 50 ms). Both
    # views include OS scheduling on a shared 2-core machine, so the asserted bounds are
    # twice the target; the measured values are printed and recorded.
    assert dump_latency < 100 and restore_latency < 100, report
    assert dump_probe.worst < 1.0 and restore_probe.worst < 1.0, report


def test_20mb_queue_under_proto_max_bulk_len_1mb_restores_into_a_differently_configured_server(
    tmp_path: Path,
) -> None:
    """Big keys, small bulk limit, other server.

    Debian bookworm offers only redis-server 7.0.15 (no other major version, no valkey), so
    "restore into a Redis of another version" is tested as a restore into a fresh server
    started with different settings: another database index, a smaller list/zset encoding
    threshold (other internal encodings), another hz, maxmemory with noeviction and lazy-free
    of user deletes. Both servers run with ``proto-max-bulk-len 1mb``, where a raw ``DUMP``
    payload of the 20 MB list cannot even be sent back with ``RESTORE``.
    """
    src_cfg = {"proto-max-bulk-len": "1mb"}
    dst_cfg = {
        "proto-max-bulk-len": "1mb",
        "databases": "32",
        "hz": "100",
        "maxmemory": "1gb",
        "maxmemory-policy": "noeviction",
        "list-max-listpack-size": "4",
        "zset-max-listpack-entries": "8",
        "lazyfree-lazy-user-del": "yes",
    }
    keys = QueueKeys("mail-20mb")
    with RedisServer(src_cfg) as src, RedisServer(dst_cfg) as dst:
        sc = src.client()
        fill_queue(sc, keys, ready=12_000, delayed=900, reserved=400, failed=50)
        before = snapshot(sc, keys)
        assert int(sc.memory_usage(keys.ready) or 0) > 18_000_000
        raw = sc.dump(keys.ready)
        assert raw is not None and len(raw) > 1_048_576
        with pytest.raises(redis.RedisError):  # the limitation the logical format avoids
            dst.client().restore("probe", 0, raw)

        dumped = summary(
            run_cli("dump", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=src.url)
        )
        assert dumped["jobs"] == 13_300 and dumped["bytes"] > 20_000_000
        dst_url = f"redis://127.0.0.1:{dst.port}/7"
        restored = summary(
            run_cli("restore", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=dst_url)
        )
        assert restored["jobs"] == 13_300
        dc = redis.Redis.from_url(dst_url)
        assert snapshot(dc, keys) == before
        assert dst.client().dbsize() == 0  # database 0 untouched: it all went to db 7
        dc.close()


def test_jobs_pushed_while_dumping_and_while_dumped_are_all_kept_once(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    """A producer pushes without pause while a dump runs, then more while the group is dumped;
    after restore every job is there exactly once and has its notify token."""
    keys = QueueKeys("mail-busy")
    fill_queue(redis_client, keys, ready=30_000, delayed=500, reserved=200, failed=20)
    before = snapshot(redis_client, keys)
    during: list[bytes] = []
    stop = threading.Event()

    def producer() -> None:
        c = redis.Redis.from_url(redis_url)
        i = 0
        while not stop.is_set():
            batch = [payload(i + j, "during", 600) for j in range(20)]
            push(c, keys, batch)
            during.extend(batch)
            i += 20
        c.close()

    t = threading.Thread(target=producer, daemon=True)
    t.start()
    try:
        dumped = summary(
            run_cli(
                "dump",
                "-q",
                keys.queue,
                "--dumps-dir",
                str(tmp_path),
                "--chunk-jobs",
                "200",
                redis_url=redis_url,
            )
        )
    finally:
        stop.set()
        t.join(10)
    assert during, "the producer pushed nothing while the dump ran"
    live = int(redis_client.llen(keys.ready))
    # what the dump took plus what stayed live is everything pushed so far
    assert dumped["ready"] + live == 30_000 + len(during)
    assert int(redis_client.llen(keys.notify)) == live
    while_dumped = [payload(i, "while-dumped", 600) for i in range(777)]
    push(redis_client, keys, while_dumped)

    summary(run_cli("restore", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_url))
    assert_merged(snapshot(redis_client, keys), before, during, while_dumped)


def test_several_dumps_are_segments_restored_oldest_first(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    """Pause, dump, more jobs arrive, dump again: two segments, neither overwritten; restore
    applies both, oldest first (ready order = first dump, then second), and deletes them."""
    keys = QueueKeys("mail-seg")
    first = [payload(i, "first", 200) for i in range(1_500)]
    second = [payload(i, "second", 200) for i in range(700)]
    push(redis_client, keys, first)
    redis_client.zadd(keys.delayed, {b"d-first": 1.5})
    a = summary(
        run_cli("dump", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_url)
    )
    push(redis_client, keys, second)
    redis_client.zadd(keys.delayed, {b"d-second": 2.5})
    b = summary(
        run_cli("dump", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_url)
    )
    assert a["segment"] != b["segment"] and Path(a["segment"]).exists()
    # payloads hold addresses and bodies: no access for others
    assert Path(a["segment"]).stat().st_mode & 0o777 == 0o640
    assert (tmp_path / "mail-seg").stat().st_mode & 0o777 == 0o750
    assert sorted([a["segment"], b["segment"]]) == [a["segment"], b["segment"]]
    listed = [
        json.loads(x)
        for x in run_cli(
            "dumps", "-q", keys.queue, "--dumps-dir", str(tmp_path)
        ).stdout.splitlines()
    ]
    assert [(d["segment"], d["jobs"]) for d in listed] == [
        (a["segment"], 1_501),
        (b["segment"], 701),
    ]
    # without --verify only the header and trailer were read: validity is not claimed
    assert [(d["verified"], d["valid"]) for d in listed] == [(False, None), (False, None)]
    assert [d["createdAt"] for d in listed] == [a["createdAt"], b["createdAt"]]
    assert a["createdAt"] < b["createdAt"] and a["createdAt"].endswith("Z")
    empty = summary(
        run_cli("dump", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_url)
    )
    assert empty["jobs"] == 0 and empty["segment"] is None  # nothing left: no third file

    live = [payload(i, "live", 200) for i in range(30)]
    push(redis_client, keys, live)
    r = summary(
        run_cli("restore", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_url)
    )
    assert r["segments"] == [a["segment"], b["segment"]] and r["jobs"] == 2_202
    state = snapshot(redis_client, keys)
    # documented order: jobs pushed while dumped first, then the segments, oldest first
    assert state.ready == live + first + second
    assert state.delayed == {b"d-first": 1.5, b"d-second": 2.5}
    assert state.notify == len(state.ready)
    assert list((tmp_path / "mail-seg").iterdir()) == []


def test_concurrent_dumps_of_one_queue_are_serialized_by_the_lock(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    """While one dump holds the lock (stopped right after staging), a second dump, a restore
    and a purge of the same queue fail with exit 3 and a message naming the lock key and its
    holder; the first dump then completes and the queue is whole."""
    keys = QueueKeys("mail-lock")
    fill_queue(redis_client, keys, ready=3_000, delayed=10, size=300)
    before = snapshot(redis_client, keys)
    first = start_stopped_at(
        "dump:after-stage", "dump", "-q", keys.queue, "--dumps-dir", str(tmp_path),
        redis_url=redis_url,
    )  # fmt: skip
    try:
        for cmd in (
            ["dump", "--dumps-dir", str(tmp_path)],
            ["restore", "--dumps-dir", str(tmp_path)],
            ["purge"],
        ):
            second = run_cli(*cmd, "-q", keys.queue, redis_url=redis_url)
            assert second.returncode == 3, second.stderr
            msg = second.stderr.strip()
            assert msg.count("\n") == 0
            assert "queues:mail-lock:lock" in msg and "locked by dump@" in msg, msg
            assert str(first.pid) in msg
    finally:
        first.send_signal(signal.SIGCONT)
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert json.loads(out)["jobs"] == 3_010
    assert redis_client.exists(keys.lock) == 0, "lock not released"
    summary(run_cli("restore", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_url))
    assert snapshot(redis_client, keys) == before


@pytest.fixture
def two_queues(redis_client: redis.Redis[bytes]) -> Iterator[tuple[QueueKeys, QueueKeys]]:
    """``mail-1`` and ``mail-10`` with every kind of key this project uses."""
    pair = (QueueKeys("mail-1"), QueueKeys("mail-10"))
    for k in pair:
        fill_queue(redis_client, k, ready=40, delayed=5, reserved=3, failed=2, tag=k.queue)
        redis_client.hset(k.stats, mapping={"delivered": 7, "failed": 2})
        redis_client.zadd(k.sent, {"uuid-1": 1.0})
        redis_client.set(k.ratelimit, "123.5")
        redis_client.hset(k.backpressure, "run", 3)
        redis_client.hset(k.restored, "20260101T000000000000Z-00000000", 1)
        redis_client.rpush(k.staging("ready"), b"staged")
        redis_client.zadd(k.staging("delayed"), {b"staged-d": 5.0})
        redis_client.hset(k.staging("meta"), "segment", "20260101T000000000000Z-00000001")
    redis_client.set("unrelated", "x")
    yield pair


def test_purge_deletes_every_key_of_one_queue_and_nothing_of_mail_10(
    redis_client: redis.Redis[bytes],
    redis_url: str,
    two_queues: tuple[QueueKeys, QueueKeys],
    tmp_path: Path,
) -> None:
    """Purge ``mail-1``: its Laravel keys, failed list, rate-limit state, markers, staging and
    restore progress are gone, the dropped job count is reported (live + staged), and
    ``mail-10`` (a name sharing the prefix) keeps every key byte for byte."""
    one, ten = two_queues
    ten_dump = {k: redis_client.dump(k) for k in sorted(_queue_keys_in(redis_client, ten))}
    assert len(ten_dump) == 14
    (tmp_path / "mail-1").mkdir()
    (tmp_path / "mail-1" / "20260101T000000000000Z-0000abcd.sgdump").write_bytes(b"x" * 10)
    out = summary(
        run_cli("purge", "-q", one.queue, "--dumps-dir", str(tmp_path), redis_url=redis_url)
    )
    assert out["jobs"] == 40 + 5 + 3 + 1 + 1  # ready, delayed, reserved, staged ready/delayed
    assert out["failed"] == 2 and out["segmentsForgotten"] == 1
    assert _queue_keys_in(redis_client, one) == set()
    assert {k: redis_client.dump(k) for k in sorted(_queue_keys_in(redis_client, ten))} == ten_dump
    assert redis_client.get("unrelated") == b"x"
    assert not (tmp_path / "mail-1").exists()
    again = summary(run_cli("purge", "-q", one.queue, redis_url=redis_url))
    assert again["jobs"] == 0 and again["keysDeleted"] == 0


def _dump_one(redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path) -> Path:
    keys = QueueKeys("mail-bad")
    fill_queue(redis_client, keys, ready=2_000, delayed=20, failed=3, size=300)
    out = summary(
        run_cli(
            "dump",
            "-q",
            keys.queue,
            "--dumps-dir",
            str(tmp_path),
            "--chunk-jobs",
            "100",
            redis_url=redis_url,
        )
    )
    return Path(out["segment"])


@pytest.mark.parametrize("damage", ["truncated", "bitflip", "trailer", "header"])
def test_damaged_segment_is_refused_left_in_place_and_nothing_merged(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path, damage: str
) -> None:
    """A truncated file, a flipped byte in a chunk, a damaged trailer or header: restore exits
    4 with a one-line reason naming the file, merges nothing, and leaves the file as it was."""
    seg = _dump_one(redis_client, redis_url, tmp_path)
    data = bytearray(seg.read_bytes())
    if damage == "truncated":
        data = data[: len(data) * 2 // 3]
    elif damage == "bitflip":
        data[len(data) // 2] ^= 0x40
    elif damage == "trailer":
        data[-40] ^= 0x01
    else:
        data[3] = ord("X")
    seg.write_bytes(bytes(data))
    proc = run_cli("restore", "-q", "mail-bad", "--dumps-dir", str(tmp_path), redis_url=redis_url)
    assert proc.returncode == 4, proc.stderr
    msg = proc.stderr.strip()
    assert msg.count("\n") == 0 and str(seg) in msg
    expected = {
        "truncated": "truncated",
        "bitflip": "checksum mismatch",
        "trailer": "trailer",
        "header": "bad magic",
    }[damage]
    assert expected in msg, msg
    assert seg.read_bytes() == bytes(data)
    assert redis_client.dbsize() == 0, "something was merged from a damaged segment"
    listed = run_cli("dumps", "-q", "mail-bad", "--dumps-dir", str(tmp_path), "--verify")
    assert listed.returncode == 4 and json.loads(listed.stdout)["valid"] is False


def test_redis_url_from_a_secret_file_and_password_never_printed(tmp_path: Path) -> None:
    """With ``requirepass``, the URL comes from ``REDIS_URL_FILE``; a wrong password fails with
    a one-line reason that does not contain the password."""
    with RedisServer() as server:
        server.client().config_set("requirepass", "s3cr3t-pass")
        keys = QueueKeys("{mail-x}")
        c = redis.Redis(host="127.0.0.1", port=server.port, password="s3cr3t-pass")
        fill_queue(c, keys, ready=10)
        url_file = tmp_path / "url"
        url_file.write_text(f"redis://:s3cr3t-pass@127.0.0.1:{server.port}/0\n")
        env = {"REDIS_URL_FILE": str(url_file)}
        out = summary(
            run_cli("dump", "-q", keys.queue, "--dumps-dir", str(tmp_path / "d"), env=env)
        )
        assert out["jobs"] == 10 and "s3cr3t" not in json.dumps(out)
        assert Path(out["segment"]).parent.name == "%7Bmail-x%7D"
        bad = f"redis://:wrong-pass-123@127.0.0.1:{server.port}/0"
        proc = run_cli(
            "restore", "-q", keys.queue, "--dumps-dir", str(tmp_path / "d"), redis_url=bad
        )
        assert proc.returncode == 1
        assert "wrong-pass-123" not in proc.stderr + proc.stdout and proc.stderr.strip()
        summary(run_cli("restore", "-q", keys.queue, "--dumps-dir", str(tmp_path / "d"), env=env))
        assert c.llen(keys.ready) == 10
        c.close()


@pytest.mark.parametrize("queue", ["../etc", "a/b", "..", "{}x"])
def test_queue_names_that_would_escape_the_dumps_dir_are_refused(
    redis_url: str, tmp_path: Path, queue: str
) -> None:
    proc = run_cli("dump", "-q", queue, "--dumps-dir", str(tmp_path), redis_url=redis_url)
    assert proc.returncode == 5 and "invalid queue name" in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_no_redis_url_is_a_clear_error(tmp_path: Path) -> None:
    proc = run_cli("dump", "-q", "mail-x", "--dumps-dir", str(tmp_path))
    assert proc.returncode == 5 and "no Redis URL" in proc.stderr


def test_reserved_jobs_come_back_reserved_with_their_expiry(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    """Jobs reserved at dump time (their workers are gone) are dumped as they are and come
    back in the reserved set with the same expiry, so they move to ready as usual."""
    keys = QueueKeys("mail-res")
    now = time.time()
    redis_client.zadd(
        keys.reserved,
        {b'{"uuid":"a","attempts":1}': now - 5, b'{"uuid":"b","attempts":2}': now + 3600},
    )
    summary(run_cli("dump", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_url))
    assert redis_client.exists(keys.reserved) == 0
    summary(run_cli("restore", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_url))
    got = dict(redis_client.zrange(keys.reserved, 0, -1, withscores=True))
    assert got == {b'{"uuid":"a","attempts":1}': now - 5, b'{"uuid":"b","attempts":2}': now + 3600}


def test_key_prefix_is_honoured_and_a_foreign_segment_is_refused(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    """Producers behind Laravel's ``laravel_database_`` prefix: the dump reads the prefixed
    keys and records the prefix; restoring with another prefix is refused (exit 4, left in
    place) instead of merging into the wrong keys."""
    keys = QueueKeys("mail-pfx", prefix="laravel_database_")
    fill_queue(redis_client, keys, ready=300, delayed=4, size=200)
    before = snapshot(redis_client, keys)
    out = summary(
        run_cli(
            "dump",
            "-q",
            keys.queue,
            "--dumps-dir",
            str(tmp_path),
            "--prefix",
            keys.prefix,
            redis_url=redis_url,
        )
    )
    assert out["jobs"] == 304 and redis_client.dbsize() == 0
    wrong = run_cli("restore", "-q", keys.queue, "--dumps-dir", str(tmp_path), redis_url=redis_url)
    assert wrong.returncode == 4 and "prefix 'laravel_database_'" in wrong.stderr
    assert Path(out["segment"]).exists() and redis_client.dbsize() == 0
    summary(
        run_cli(
            "restore",
            "-q",
            keys.queue,
            "--dumps-dir",
            str(tmp_path),
            redis_url=redis_url,
            env={"SENDGROUP_KEY_PREFIX": keys.prefix},
        )
    )
    assert snapshot(redis_client, keys) == before


def test_disk_full_dump_fails_cleanly_and_puts_every_job_back(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    """The dumps volume fills up mid-write (a 2 MB tmpfs for a 4.5 MB queue): the dump exits 1
    naming the cause, the staged jobs are moved back at once (same order, same scores, notify
    tokens), no staging key and no partial file remain. Needs root for ``mount``."""
    small = tmp_path / "small"
    small.mkdir()
    mount = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(small)],
        capture_output=True,
        text=True,
    )
    assert mount.returncode == 0, f"this test mounts a small tmpfs and needs root: {mount.stderr}"
    try:
        keys = QueueKeys("mail-full")
        fill_queue(redis_client, keys, ready=3_000, delayed=20, reserved=5, failed=4)
        before = snapshot(redis_client, keys)
        proc = run_cli("dump", "-q", keys.queue, "--dumps-dir", str(small), redis_url=redis_url)
        assert proc.returncode == 1 and "No space left on device" in proc.stderr, proc.stderr
        assert snapshot(redis_client, keys) == before
        assert [k for k in keys.staging_keys if redis_client.exists(k)] == []
        assert [p.name for p in (small / "mail-full").iterdir()] == []
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_lock_is_renewed_while_a_long_dump_runs(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    """With a 1 s lock TTL and a dump slowed to 0.1 s per chunk (30 chunks: about 3 TTLs), the
    lock never expires: every sample of the key shows the same owner token with time to live
    left, and the dump completes (a lost lock would stop it with exit 1)."""
    keys = QueueKeys("mail-renew")
    fill_queue(redis_client, keys, ready=3_000, size=60)
    proc = start_cli(
        "dump", "-q", keys.queue, "--dumps-dir", str(tmp_path), "--lock-ttl", "1",
        "--chunk-jobs", "100",
        redis_url=redis_url, env={"SENDGROUP_DUMPS_SLOW": "dump:read-chunk=0.1"},
    )  # fmt: skip
    holders: set[bytes] = set()
    first = last = 0.0
    while proc.poll() is None:
        holder = redis_client.get(keys.lock)
        if holder is not None and redis_client.pttl(keys.lock) > 0:
            holders.add(holder)
            first = first or time.monotonic()
            last = time.monotonic()
        time.sleep(0.01)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    assert json.loads(out)["jobs"] == 3_000
    assert len(holders) == 1 and f"/{proc.pid}/".encode() in holders.pop()
    assert last - first > 2.5, f"the dump held the lock only {last - first:.2f}s: not a test"
    assert redis_client.exists(keys.lock) == 0


def test_mistyped_dumps_dir_is_an_error_not_an_empty_answer(
    tmp_path: Path, redis_url: str, redis_client: redis.Redis
) -> None:
    """``dumps`` and ``forget`` with a directory that does not exist exit 2 naming it (not
    "0 segments"); ``restore`` still merges what Redis holds but says on stderr that the
    directory is missing; ``dump`` creates its directory."""
    missing = tmp_path / "dumsp"
    for args in (("dumps", "-q", "mail-x"), ("forget", "-q", "mail-x")):
        proc = run_cli(*args, "--dumps-dir", str(missing))
        assert proc.returncode == 2, proc.stdout
        assert str(missing) in proc.stderr and "does not exist" in proc.stderr
        assert proc.stdout == ""
    restored = run_cli("restore", "-q", "mail-x", "--dumps-dir", str(missing), redis_url=redis_url)
    assert restored.returncode == 0, restored.stderr
    assert f"no dump directory {missing / 'mail-x'}" in restored.stderr
    assert json.loads(restored.stdout)["jobs"] == 0
    Queue(redis_client, QueueKeys("mail-x")).push(b'{"uuid":"u1","attempts":0}')
    dumped = run_cli("dump", "-q", "mail-x", "--dumps-dir", str(missing), redis_url=redis_url)
    assert dumped.returncode == 0, dumped.stderr
    assert json.loads(dumped.stdout)["jobs"] == 1 and (missing / "mail-x").is_dir()
