"""Fault injection: the dump or restore process is killed with SIGKILL at every step, the
command is run again, and the queue ends up holding exactly the original jobs plus every job
pushed meanwhile, each once (queue-protocol.md, "Dump and restore", properties 1-5 and 9).

The crash is deterministic: ``SENDGROUP_DUMPS_CRASH_AT=<step>[@n]`` makes the command SIGKILL
itself at that step (``sendgroup_worker.dumps.faults``). A killed run leaves its lock behind;
the runs use a 2 s lock TTL and ``--wait-lock`` so the re-run takes over once it expires.
A second test kills real runs from outside at random moments until one completes.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
import redis

from sendgroup_worker.dumps import faults
from sendgroup_worker.dumps.format import read_info
from sendgroup_worker.queue.keys import QueueKeys
from tests.support.dumps import (
    SGW,
    assert_merged,
    fill_queue,
    payload,
    push,
    run_cli,
    snapshot,
)

pytestmark = pytest.mark.redis

Run = tuple[str, str | None]  # (command, crash step or None for a run that must succeed)

# Each case: the runs in order; jobs are pushed between every two runs and at the end.
CASES: dict[str, list[Run]] = {
    # dump killed, then dump re-run, then restore
    "dump:after-stage": [("dump", "dump:after-stage"), ("dump", None), ("restore", None)],
    "dump:mid-write": [("dump", "dump:mid-write@3"), ("dump", None), ("restore", None)],
    "dump:before-rename": [("dump", "dump:before-rename"), ("dump", None), ("restore", None)],
    "dump:after-rename": [("dump", "dump:after-rename"), ("dump", None), ("restore", None)],
    "dump:before-delete": [("dump", "dump:before-delete"), ("dump", None), ("restore", None)],
    "dump:after-delete": [("dump", "dump:after-delete"), ("dump", None), ("restore", None)],
    # dump killed, then restore directly (it undoes the interrupted dump first)
    "dump:after-stage/restore": [("dump", "dump:after-stage"), ("restore", None)],
    "dump:mid-write/restore": [("dump", "dump:mid-write@5"), ("restore", None)],
    "dump:after-rename/restore": [("dump", "dump:after-rename"), ("restore", None)],
    "dump:before-delete/restore": [("dump", "dump:before-delete"), ("restore", None)],
    # dump killed, restore undoes it and is killed while moving the staged jobs back
    "dump:after-stage/restore-killed-unstaging": [
        ("dump", "dump:after-stage"),
        ("restore", "restore:mid-unstage@2"),
        ("restore", None),
    ],
    "dump:after-rename/restore-killed-unstaging": [
        ("dump", "dump:after-rename"),
        ("restore", "restore:mid-unstage@1"),
        ("dump", None),
        ("restore", None),
    ],
    # restore killed, then re-run
    "restore:before-merge": [
        ("dump", None),
        ("restore", "restore:before-merge"),
        ("restore", None),
    ],
    "restore:mid-merge@1": [("dump", None), ("restore", "restore:mid-merge@1"), ("restore", None)],
    "restore:mid-merge@12": [
        ("dump", None),
        ("restore", "restore:mid-merge@12"),
        ("restore", None),
    ],
    "restore:after-merge": [("dump", None), ("restore", "restore:after-merge"), ("restore", None)],
    "restore:after-unlink": [
        ("dump", None),
        ("restore", "restore:after-unlink"),
        ("restore", None),
    ],
    # two segments (31 + 20 chunks, merged 8 per pipeline); restore killed twice inside the
    # second segment (after 8 of its chunks, then after 16)
    "two-segments/restore-killed-twice": [
        ("dump", None),
        ("dump", None),
        ("restore", "restore:mid-merge@33"),
        ("restore", "restore:mid-merge@2"),
        ("restore", None),
    ],
    # a dump killed while an earlier segment waits on the volume
    "segment-waiting/dump-killed": [
        ("dump", None),
        ("dump", "dump:mid-write@2"),
        ("restore", None),
    ],
}


def _run(command: str, queue: str, dumps_dir: Path, url: str, crash: str | None) -> None:
    args = [
        command,
        "-q",
        queue,
        "--dumps-dir",
        str(dumps_dir),
        "--lock-ttl",
        "2",
        "--wait-lock",
        "15",
    ]
    if command == "dump":
        args += ["--chunk-jobs", "100"]
    env = {faults.ENV: crash} if crash else None
    proc = run_cli(*args, redis_url=url, env=env, timeout=120)
    if crash:
        assert proc.returncode == -signal.SIGKILL, (
            f"{command} with crash at {crash} exited {proc.returncode}: {proc.stderr}"
        )
    else:
        assert proc.returncode == 0, f"{command} failed: {proc.stderr}"


@pytest.mark.parametrize("case", list(CASES))
def test_killed_at_a_step_then_rerun_loses_and_duplicates_nothing(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path, case: str
) -> None:
    keys = QueueKeys("mail-fault")
    # 2,500 ready (25 chunks of 100), 300 delayed (3), 200 reserved (2), 30 failed (1)
    fill_queue(redis_client, keys, ready=2_500, delayed=300, reserved=200, failed=30, size=200)
    before = snapshot(redis_client, keys)
    pushed: list[list[bytes]] = []
    for step, (command, crash) in enumerate(CASES[case]):
        _run(command, keys.queue, tmp_path, redis_url, crash)
        if crash and crash.startswith("restore:mid-merge"):
            # really in the middle: a segment partly merged, its file still there
            progress = {k.decode(): int(v) for k, v in redis_client.hgetall(keys.restored).items()}
            assert len(progress) == 1, progress
            [(segment, merged)] = progress.items()
            total = read_info(tmp_path / "mail-fault" / f"{segment}.sgdump").counts.chunks
            assert 0 < merged < total, (merged, total)
        size = 2_000 if step == 0 else 31 + step  # the first batch is a second segment's worth
        batch = [payload(i, f"meanwhile-{step}", 200) for i in range(size)]
        push(redis_client, keys, batch)
        pushed.append(batch)

    assert_merged(snapshot(redis_client, keys), before, *pushed)
    leftovers = [k for k in keys.staging_keys if redis_client.exists(k)]
    assert leftovers == [], f"staging keys left: {leftovers}"
    assert redis_client.hlen(keys.restored) == 0
    assert redis_client.exists(keys.lock) == 0
    qdir = tmp_path / "mail-fault"
    assert not qdir.exists() or list(qdir.iterdir()) == [], list(qdir.iterdir())


def _kill_until_done(
    args: list[str],
    env: dict[str, str],
    rng: random.Random,
    client: redis.Redis[bytes],
    lock: str,
    kills_wanted: int = 8,
) -> int:
    """Start ``args`` again and again; once a run holds the queue lock (it is working, past
    interpreter start-up), SIGKILL it after a random delay (the first one after at most
    50 ms, then up to 1 s), ``kills_wanted`` times unless a run completes first; then let
    one run finish by itself (an uninterrupted dump of this queue takes about 2 s here, so
    a run that must beat a 1 s kill would be luck, not the property). Returns the kills."""
    kills = 0
    for attempt in range(kills_wanted + 1):
        proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        if attempt == kills_wanted:
            _, err = proc.communicate(timeout=300)
            assert proc.returncode == 0, err.decode()
            return kills
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            holder = client.get(lock) or b""
            if f"/{proc.pid}/".encode() in holder:
                break
            time.sleep(0.005)
        time.sleep(rng.uniform(0, 0.05 if attempt == 0 else 1.0))
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
            kills += 1
            continue
        _, err = proc.communicate()
        assert proc.returncode == 0, err.decode()
        return kills
    raise AssertionError("unreachable: the last attempt is never killed")


def test_random_external_sigkills_during_dump_and_restore(
    redis_client: redis.Redis[bytes], redis_url: str, tmp_path: Path
) -> None:
    """Real SIGKILLs from outside, at random moments (seeded; up to 8 per phase), jobs pushed
    between the runs: after the dump and the restore finally complete, every job is there
    exactly once."""
    rng = random.Random(20261130)
    keys = QueueKeys("mail-chaos")
    fill_queue(
        redis_client, keys, ready=40_000, delayed=2_000, reserved=1_000, failed=100, size=400
    )
    before = snapshot(redis_client, keys)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENDGROUP_")}
    env["REDIS_URL"] = redis_url
    common = [
        "-q",
        keys.queue,
        "--dumps-dir",
        str(tmp_path),
        "--lock-ttl",
        "1",
        "--wait-lock",
        "10",
    ]
    pushed = [payload(i, "chaos-0", 200) for i in range(100)]
    push(redis_client, keys, pushed)
    dump_kills = _kill_until_done(
        [SGW, "dump", *common, "--chunk-jobs", "10"], env, rng, redis_client, keys.lock
    )
    more = [payload(i, "chaos-1", 200) for i in range(100)]
    push(redis_client, keys, more)
    restore_kills = _kill_until_done([SGW, "restore", *common], env, rng, redis_client, keys.lock)
    print(f"random SIGKILLs survived: dump {dump_kills}, restore {restore_kills}")
    assert dump_kills >= 1 and restore_kills >= 1, "a phase was never interrupted"
    assert_merged(snapshot(redis_client, keys), before, pushed, more)
